"""Reading the scalar fields of a parsed message (names, positions, counters, timestamps).

Every decoder reads fields such as ``table``, ``ts``, ``xid``, ``pkNames`` from a JSON object (or
an Avro record) that may be anything on hostile input. These readers check the type and the range
and fail with a :class:`~transforms.errors.DecodeError` naming the field (``where`` is the path
prefix, e.g. ``"metadata."``). Integers are int64 (Connect's widest integer): an integer field
outside that range, or a string of one, is an error rather than a number the emitter cannot write.

>>> parse_int(" -42 "), parse_int("--5"), parse_int("²"), parse_int(2**63)
(-42, None, None, None)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from transforms.errors import caused_by
from transforms.values import CoercionError, parse_datetime

if TYPE_CHECKING:
    from transforms.decoders.base import Decoder

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "check_timestamp",
    "duplicate",
    "epoch_millis",
    "optional_int",
    "optional_scalar",
    "optional_str",
    "padded_sequence",
    "parse_int",
    "required_str",
    "string_list",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"^\s*-?[0-9]{1,19}\s*$")
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLI = dt.timedelta(milliseconds=1)


def parse_int(value: Any) -> int | None:
    """An int64 from an integer or a decimal string of one (ASCII digits); ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INT_RE.match(value):
        number = int(value)
    else:
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


def duplicate(names: Iterable[str]) -> str | None:
    """The first name that occurs twice (a table cannot have two columns of one name), else ``None``.

    >>> duplicate(["id", "v", "id"])
    'id'
    """
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def epoch_millis(text: str) -> int:
    """Milliseconds since the epoch of a SQL/ISO timestamp; a zoneless one is taken as UTC.

    >>> epoch_millis("2020-05-13 15:40:06.123456")
    1589384406123
    """
    try:
        value = parse_datetime(text)
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH_UTC) // _MILLI
    except CoercionError:
        raise
    except (OverflowError, ValueError) as exc:  # a year beyond C long, an offset past year 1 or 9999
        raise caused_by(CoercionError(f"timestamp {text!r:.60} is out of range"), exc) from exc


def padded_sequence(position: str | int, width: int = 24) -> str | None:
    """A decimal position left-padded with zeros so that it sorts as text; ``None`` if not decimal.

    >>> padded_sequence("00000000000000000000147", 24)
    '000000000000000000000147'
    """
    text = str(position)
    if not text.isdigit() or not text.isascii():
        return None
    return text.zfill(width)


def check_timestamp(decoder: Decoder, raw: Any, field: str, payload: bytes | str | None) -> int | None:
    """``epoch_millis`` of an optional timestamp string, as a DecodeError naming ``field``."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise decoder.error(field, f"expected a timestamp string, found {type(raw).__name__}", payload)
    try:
        return epoch_millis(raw)
    except CoercionError as exc:
        raise caused_by(decoder.error(field, str(exc), payload), exc) from exc


def optional_str(
    decoder: Decoder,
    doc: Mapping[str, Any],
    name: str,
    payload: bytes | str | None,
    *,
    required: bool = False,
    where: str = "",
) -> str | None:
    """``doc[name]`` when it is a string; ``None`` when absent/null unless ``required``."""
    raw = doc.get(name)
    field = where + name
    if raw is None:
        if required:
            raise decoder.error(field, "required string is missing", payload)
        return None
    if not isinstance(raw, str):
        raise decoder.error(field, f"expected a string, found {type(raw).__name__}", payload)
    if required and not raw:
        raise decoder.error(field, "expected a non-empty string, found ''", payload)
    return raw


def required_str(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> str:
    """``doc[name]``, which must be a non-empty string."""
    value = optional_str(decoder, doc, name, payload, required=True, where=where)
    if value is None:  # pragma: no cover - optional_str raised already
        raise decoder.error(where + name, "required string is missing", payload)
    return value


def optional_int(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> int | None:
    """``doc[name]`` when it is an int64 (or a string of one); ``None`` when absent/null."""
    raw = doc.get(name)
    if raw is None:
        return None
    value = parse_int(raw)
    if value is None:
        raise decoder.error(where + name, f"expected an integer, found {raw!r:.80}", payload)
    return value


def optional_scalar(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> str | int | None:
    """``doc[name]`` when it is a string or an integer (ids, positions); ``None`` when absent/null."""
    raw = doc.get(name)
    if raw is None or isinstance(raw, str) or parse_int(raw) is not None:
        return raw
    raise decoder.error(where + name, f"expected a string or integer, found {raw!r:.80}", payload)


def string_list(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> tuple[str, ...] | None:
    """``doc[name]`` when it is a list of strings; ``None`` when absent/null."""
    raw = doc.get(name)
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise decoder.error(where + name, f"expected a list of column names, found {raw!r:.80}", payload)
    return tuple(raw)
