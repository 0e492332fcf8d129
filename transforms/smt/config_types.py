"""Config value types shared by the transforms and predicates.

Values arrive typed (YAML) or as strings (``KEY=VALUE``); lists accept either a list or a
comma-separated string, as Kafka Connect's ``LIST`` config type does.

>>> from pydantic import TypeAdapter
>>> TypeAdapter(CommaList).validate_python("a, b,,c")
('a', 'b', 'c')
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from transforms.envelope import EmitOptions, Operation
from transforms.smt.base import SmtConfig

__all__ = ["CommaList", "OpList", "Regex", "TopicNamingConfig", "compile_regex"]


def _split_commas(value: Any) -> Any:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")


def compile_regex(text: str) -> re.Pattern[str]:
    r"""Compile a configured regular expression; ``ValueError`` names what is wrong.

    Java's named groups ``(?<name>...)`` (as in Kafka Connect configs) are accepted too.

    >>> compile_regex(r"(?<db>\w+)\.(?P<table>\w+)").groupindex["db"]
    1
    """
    try:
        return re.compile(_JAVA_NAMED_GROUP.sub("(?P<", text))
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from exc


def _check_regex(text: str) -> str:
    compile_regex(text)
    return text


CommaList = Annotated[tuple[str, ...], BeforeValidator(_split_commas)]
"""A list of names: a list, or one comma-separated string."""

OpList = Annotated[tuple[Operation, ...], BeforeValidator(_split_commas)]
"""A list of Debezium op codes (``c u d r t``)."""

Regex = Annotated[str, AfterValidator(_check_regex)]
"""A regular expression (Python syntax), checked when the config is validated."""

_TEMPLATE_PROBE = {"prefix": "p", "db": "d", "schema": "s", "table": "t"}


class TopicNamingConfig(SmtConfig):
    """Config of a step that needs the destination topic of an event.

    The topic of an event without an explicit ``topic`` comes from the emitter's prefix and
    template. :func:`~transforms.smt.registry.build_chain` fills these keys from the
    pipeline's :class:`~transforms.envelope.EmitOptions` when the spec leaves them out; unset,
    they default to ``EmitOptions()``.
    """

    topic_prefix: str | None = Field(
        None, alias="topic.prefix", min_length=1, description="Topic prefix (logical server name)."
    )
    topic_template: str | None = Field(
        None,
        alias="topic.template",
        description="Topic template over {prefix}, {db}, {schema} and {table}.",
    )
    transaction_topic: str | None = Field(
        None,
        alias="transaction.topic",
        description="Topic of transaction events; default <prefix>.transaction.",
    )

    @field_validator("topic_template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                value.format(**_TEMPLATE_PROBE)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"template may only use {{prefix}}, {{db}}, {{schema}}, {{table}}: {exc}"
                ) from exc
        return value

    def emit_options(self) -> EmitOptions:
        """The naming part of the emitter options this step assumes."""
        defaults = EmitOptions()
        return EmitOptions(
            prefix=self.topic_prefix or defaults.prefix,
            topic_template=self.topic_template or defaults.topic_template,
            transaction_topic=self.transaction_topic,
        )
