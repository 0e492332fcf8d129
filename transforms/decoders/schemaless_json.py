"""The common core of the JSON CDC formats whose row images carry typed JSON values but no types.

Maxwell, Oracle GoldenGate and AWS DMS write each column as a plain JSON value (number, string,
boolean, object, array, null) and say nothing about the column's SQL type. This module infers a
Connect column from the values seen in a change (:func:`infer_columns`), types the images against
those columns (:func:`typed_image`) and hands out cached :class:`TableSchema` objects.

A column the table has but an image lacks is *absent* in that image and becomes
:data:`~transforms.values.UNAVAILABLE`, never ``None``.

>>> cols = infer_columns([{"id": 1, "w": None}, {"id": 1, "w": 2.5}])
>>> [(c.name, c.type.value) for c in cols]
[('id', 'int64'), ('w', 'float64')]
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders.base import Decoder
from transforms.values import UNAVAILABLE, CoercionError, infer_column, parse_datetime

__all__ = [
    "check_timestamp",
    "epoch_millis",
    "infer_columns",
    "optional_int",
    "optional_str",
    "padded_sequence",
    "required_str",
    "string_list",
    "table_schema",
    "typed_image",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLI = dt.timedelta(milliseconds=1)


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == UNAVAILABLE)


@lru_cache(maxsize=4096)
def _column_for(name: str, kind: str, big: bool) -> Column:
    if big:
        # beyond int64 (e.g. BIGINT UNSIGNED): an exact integer decimal, as Debezium's precise mode
        return Column.decimal(name, None, 0)
    sample: Any = {"int": 0, "float": 0.0, "bool": False, "dict": {}, "bytes": b""}.get(kind, "")
    return infer_column(name, sample)


def _infer(name: str, value: Any) -> Column:
    if isinstance(value, list):
        return infer_column(name, value)
    big = isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX
    return _column_for(name, type(value).__name__, big)


def _widen(old: Column, new: Column) -> Column:
    """The column that holds values of both inferred columns."""
    if old == new:
        return old
    numeric = {ConnectType.INT64, ConnectType.FLOAT64}
    if old.logical is None and new.logical is None and {old.type, new.type} <= numeric:
        return Column(old.name, ConnectType.FLOAT64)
    if old.is_decimal and new.type is ConnectType.INT64 and new.logical is None:
        return old
    if new.is_decimal and old.type is ConnectType.INT64 and old.logical is None:
        return new
    return Column(old.name, ConnectType.STRING)


def infer_columns(images: Iterable[Mapping[str, Any] | None]) -> tuple[Column, ...]:
    """Columns for the union of the images' keys, in first-seen order, typed from their values.

    A column typed from its first non-null value; ints and floats widen to float64, other
    conflicts to string; a column that is null (or absent) everywhere is a string.
    """
    found: dict[str, Column | None] = {}
    for image in images:
        if image is None:
            continue
        for name, value in image.items():
            seen = found.get(name)
            if _absent(value):
                found.setdefault(name, None)
                continue
            col = _infer(name, value)
            found[name] = col if seen is None else _widen(seen, col)
    return tuple(col if col is not None else _column_for(name, "str", False) for name, col in found.items())


@lru_cache(maxsize=4096)
def table_schema(
    db: str | None, schema: str | None, table: str, columns: tuple[Column, ...], key: tuple[str, ...]
) -> TableSchema:
    """A shared :class:`TableSchema` instance per distinct structure (the emitter caches by it)."""
    return TableSchema(db, schema, table, columns, key)


def typed_image(
    decoder: Decoder,
    columns: tuple[Column, ...],
    image: Mapping[str, Any] | None,
    field: str,
    payload: bytes | str | None,
) -> dict[str, Any] | None:
    """The image typed by ``columns``; a column the image lacks is ``UNAVAILABLE``."""
    if image is None:
        return None
    out: dict[str, Any] = {}
    for col in columns:
        if col.name not in image:
            out[col.name] = UNAVAILABLE
            continue
        out[col.name] = decoder.coerce(col, image[col.name], f"{field}.{col.name}", payload)
    return out


def epoch_millis(text: str) -> int:
    """Milliseconds since the epoch of a SQL/ISO timestamp; a zoneless one is taken as UTC.

    >>> epoch_millis("2020-05-13 15:40:06.123456")
    1589384406123
    """
    value = parse_datetime(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH_UTC) // _MILLI


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
        raise decoder.error(field, str(exc), payload) from exc


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


def optional_int(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> int | None:
    """``doc[name]`` when it is an integer (or a string of one); ``None`` when absent/null."""
    raw = doc.get(name)
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return int(raw)
    raise decoder.error(where + name, f"expected an integer, found {raw!r}", payload)


def string_list(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> tuple[str, ...] | None:
    """``doc[name]`` when it is a list of strings; ``None`` when absent/null."""
    raw = doc.get(name)
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise decoder.error(where + name, f"expected a list of column names, found {raw!r}", payload)
    return tuple(raw)


def required_str(
    decoder: Decoder, doc: Mapping[str, Any], name: str, payload: bytes | str | None, *, where: str = ""
) -> str:
    """``doc[name]``, which must be a non-empty string."""
    value = optional_str(decoder, doc, name, payload, required=True, where=where)
    if value is None:  # pragma: no cover - optional_str raised already
        raise decoder.error(where + name, "required string is missing", payload)
    return value
