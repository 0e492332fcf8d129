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

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders.base import Decoder
from transforms.decoders.cache import TableCache
from transforms.decoders.fields import INT64_MAX, INT64_MIN
from transforms.values import UNAVAILABLE, infer_column

_TABLES = TableCache()

__all__ = ["infer_columns", "table_schema", "typed_image"]



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
    big = isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX
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


def table_schema(
    db: str | None, schema: str | None, table: str, columns: tuple[Column, ...], key: tuple[str, ...]
) -> TableSchema:
    """A shared :class:`TableSchema` instance per distinct structure (the emitter caches by it)."""
    return _TABLES.intern(TableSchema(db, schema, table, columns, key))


def typed_image(
    decoder: Decoder,
    columns: tuple[Column, ...],
    image: Mapping[str, Any] | None,
    field: str,
    payload: bytes | str | None,
) -> dict[str, Any] | None:
    """The image typed by ``columns``; a column the image lacks is ``UNAVAILABLE``."""
    return None if image is None else decoder.typed_row(columns, image, field, payload)
