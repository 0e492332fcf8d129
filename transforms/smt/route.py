"""``route``: rewrite the destination topic with a regex, like Kafka Connect's ``RegexRouter``.

The regex must match the *whole* destination topic; the topic then becomes ``replacement``,
in which ``$1`` / ``${name}`` refer to groups and ``\\$`` is a literal dollar (Java syntax, as
in Kafka Connect configs). A topic that does not match is left alone.

The destination topic of a change or row is ``event.topic`` when an earlier step set it, else
the emitter's topic template (see :class:`~transforms.smt.config_types.TopicNamingConfig`).
Schema-change and transaction events pass through untouched. Also named
``org.apache.kafka.connect.transforms.RegexRouter``, with the same ``regex`` and ``replacement``.

>>> from transforms.smt.registry import create_transform
>>> route = create_transform("route", {"regex": r"(.*)\\.shard_\\d+", "replacement": "$1.all"})
>>> route.config.regex
'(.*)\\\\.shard_\\\\d+'
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from transforms.envelope import ChangeEvent, Event, RowEvent, destination_topic
from transforms.errors import TransformError
from transforms.smt.base import Transform
from transforms.smt.config_types import Regex, TopicNamingConfig, compile_regex

__all__ = ["RouteByRegex", "RouteConfig", "java_replacement"]

_DIGITS = "0123456789"


def java_replacement(pattern: re.Pattern[str], replacement: str) -> str:
    """Translate a Java ``Matcher.replaceFirst`` replacement into a :meth:`re.Match.expand` template.

    >>> java_replacement(re.compile(r"(a)(?P<n>b)"), r"x$1${n}\\$")
    'x\\\\g<1>\\\\g<n>$'
    """
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\":
            if i + 1 >= n:
                raise ValueError("character to be escaped is missing at the end")
            literal = replacement[i + 1]
            out.append("\\\\" if literal == "\\" else literal)
            i += 2
        elif ch == "$":
            i += 1
            if i >= n:
                raise ValueError("illegal group reference: '$' at the end")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named group reference is missing '}'")
                name = replacement[i + 1 : end]
                if name not in pattern.groupindex:
                    raise ValueError(f"no group named {name!r} in the regex")
                out.append(f"\\g<{name}>")
                i = end + 1
            elif replacement[i] in _DIGITS:
                number = int(replacement[i])
                if number > pattern.groups:
                    raise ValueError(f"no group {number} in the regex (it has {pattern.groups})")
                i += 1
                while (
                    i < n
                    and replacement[i] in _DIGITS
                    and number * 10 + int(replacement[i]) <= pattern.groups
                ):
                    number = number * 10 + int(replacement[i])
                    i += 1
                out.append(f"\\g<{number}>")
            else:
                raise ValueError("illegal group reference: '$' must be followed by a group number or {name}")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class RouteConfig(TopicNamingConfig):
    """Config of :class:`RouteByRegex`."""

    regex: Regex = Field(..., description="Regular expression matched against the whole destination topic.")
    replacement: str = Field(
        ..., description="The new topic; $1 or ${name} insert groups of the match (Java syntax)."
    )

    @field_validator("replacement")
    @classmethod
    def _check_replacement(cls, value: str, info: ValidationInfo) -> str:
        regex = info.data.get("regex")
        if regex is not None:
            java_replacement(compile_regex(regex), value)
        return value


class RouteByRegex(Transform):
    """Sends changes and rows to another topic when their destination topic matches a regex."""

    name: ClassVar[str] = "route"
    config_model = RouteConfig
    config: RouteConfig

    def __init__(self, config: RouteConfig) -> None:
        super().__init__(config)
        self._regex = compile_regex(config.regex)
        self._template = java_replacement(self._regex, config.replacement)
        self._naming = config.emit_options()

    def apply(self, event: Event) -> list[Event]:
        if not isinstance(event, ChangeEvent | RowEvent):
            return [event]
        match = self._regex.fullmatch(destination_topic(event, self._naming))
        if match is None:
            return [event]
        topic = match.expand(self._template)
        if not topic:
            raise TransformError(self.name, f"replacement made an empty topic from {match.string!r}")
        if topic == event.topic:
            return [event]
        return [replace(event, topic=topic)]
