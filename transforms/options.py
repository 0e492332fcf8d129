"""Format options declared as data.

Each decoder declares a pydantic model of its options (type, default, description). Options
arrive as ``KEY=VALUE`` strings (CLI) or typed values (YAML config); unknown keys and bad values
raise :class:`~transforms.errors.ConfigError` naming the key, the value and the reason.
Option names use Debezium's dotted style (``decimal.handling.mode``); the model fields use
underscores and declare the dotted name as alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transforms.connect import DecimalHandlingMode
from transforms.errors import ConfigError

__all__ = ["FormatOptions", "OptionDoc", "describe_options", "parse_options"]

T = TypeVar("T", bound="FormatOptions")


class FormatOptions(BaseModel):
    """Options every format accepts. Decoders subclass this with their own."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    decimal_handling_mode: DecimalHandlingMode = Field(
        DecimalHandlingMode.PRECISE,
        alias="decimal.handling.mode",
        description="How decimals are encoded: precise (Connect Decimal bytes), double or string.",
    )
    max_message_bytes: int = Field(
        8 * 1024 * 1024, alias="max.message.bytes", gt=0, description="Reject messages larger than this."
    )
    max_json_depth: int = Field(
        64, alias="max.json.depth", gt=0, description="Reject JSON documents nested deeper than this."
    )


class OptionDoc(BaseModel):
    """One option as listed by ``cdcnorm formats``."""

    name: str
    type: str
    default: Any
    description: str


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "")


def describe_options(model: type[FormatOptions]) -> list[OptionDoc]:
    """The declared options of a format, in declaration order."""
    docs = []
    for name, info in model.model_fields.items():
        default = "(required)" if info.is_required() else info.get_default(call_default_factory=True)
        if isinstance(default, tuple | frozenset | set):
            default = list(default)
        docs.append(
            OptionDoc(
                name=info.alias or name,
                type=_type_name(info.annotation),
                default=getattr(default, "value", default),
                description=info.description or "",
            )
        )
    return docs


def parse_options(model: type[T], raw: Mapping[str, Any], *, where: str = "option") -> T:
    """Validate raw options into ``model``; raises ConfigError with key, value and reason.

    >>> parse_options(FormatOptions, {"decimal.handling.mode": "string"}).decimal_handling_mode
    <DecimalHandlingMode.STRING: 'string'>
    """
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        key = loc or "?"
        value = raw.get(key, err.get("input"))
        reason = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            known = ", ".join(sorted(i.alias or n for n, i in model.model_fields.items()))
            reason = f"unknown {where}; known: {known}"
        raise ConfigError(key, value, reason) from exc
