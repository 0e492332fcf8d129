"""The common core of the JSON CDC formats whose row images carry typed JSON values but no types.

Maxwell, Oracle GoldenGate and AWS DMS write each column as a plain JSON value (number, string,
boolean, object, array, null) and say nothing about the column's SQL type. This module infers a
Connect column from the values seen in a change (:func:`infer_columns`), types the images against
those columns (:func:`typed_image`) and hands out cached :class:`TableSchema` objects.

A column the table has but an image lacks is *absent* in that image and becomes
:data:`~transforms.values.UNAVAILABLE`, never ``None``.

>>> cols = infer_columns([{"id": 1, "w": None}, {"id": 1, "w": 2.5}])
>>> [(c.name, c.type.value) for c in cols]
[('id', 'int64'), ('w', 'double')]
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import orjson

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, ValueConverter
from transforms.decoders.cache import LruCache, TableCache
from transforms.decoders.fields import INT64_MAX, INT64_MIN
from transforms.decoders.rowplan import NotFast, fast_converter
from transforms.values import UNAVAILABLE, infer_column

_TABLES = TableCache()

__all__ = ["SchemalessShapes", "Shape", "infer_columns", "table_schema", "typed_image"]


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

    A column typed from its first non-null value; ints and floats widen to double, other
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


# -- shape cache -----------------------------------------------------------------------------
#
# Inferring columns and typing images value by value is most of the work of these decoders. What
# the inference depends on is the *shape* of the images: their column names (in order) and the
# exact type of each value, except for three things a type does not tell: whether an int is
# beyond int64 (a decimal column), whether a string is the UNAVAILABLE marker (absent, not a
# value) and what a list holds (an array of strings or JSON). A shape whose values are plain
# (no lists) is cached with its columns and a plan per image; a message that has the shape reuses
# them after checking those two value conditions, which the full inference reads.

_PLAIN_KINDS = frozenset({str, int, float, bool, type(None), dict})
# value type -> the inferred column type for which coerce_checked returns such a value unchanged
# (an int within int64 in an int64 column, a non-marker string in a string column, ...)
_UNCHANGED_IN = {
    int: ConnectType.INT64,
    float: ConnectType.FLOAT64,
    str: ConnectType.STRING,
    bool: ConnectType.BOOLEAN,
}

ImageKey = tuple[tuple[str, ...], tuple[type, ...]] | None
"""An image's column names and the types of its values (None for a missing image)."""


def _image_key(image: Mapping[str, Any] | None) -> ImageKey:
    return None if image is None else (tuple(image), tuple(map(type, image.values())))


def _json_text(raw: Any) -> str:
    """What coerce_checked makes of an object in a JSON column (orjson failures: the full path)."""
    if type(raw) is dict:
        return orjson.dumps(raw).decode()
    raise NotFast


class _ImagePlan:
    """How one image of a cached shape is typed: the image copied in column order, then the cells
    whose value is not already the typed value converted (see rowplan for ``fast``)."""

    __slots__ = ("_converts", "_in_order", "_ints", "_missing", "_names", "_one_int", "_strings")

    def __init__(self, columns: tuple[Column, ...], key: tuple[tuple[str, ...], tuple[type, ...]]) -> None:
        names, kinds = key
        self._names = tuple(c.name for c in columns)
        # the image's names are the columns' first names (always so for the first image): a copy of
        # the image plus the absent columns is already in column order
        self._in_order = names == self._names[: len(names)]
        self._missing = dict.fromkeys(self._names[len(names) :], UNAVAILABLE)
        kind_of = dict(zip(names, kinds, strict=True))
        converts = []
        for col in columns:
            kind = kind_of.get(col.name)
            if kind is None or kind is type(None):
                continue  # absent (UNAVAILABLE) or SQL NULL: as it is
            if col.logical is None and _UNCHANGED_IN.get(kind) is col.type:
                continue
            fast = _json_text if kind is dict and col.logical == Logical.JSON else fast_converter(col)
            converts.append((col.name, col, fast))
        self._converts = tuple(converts)
        ints = [name for name, kind in zip(names, kinds, strict=True) if kind is int]
        self._ints = operator.itemgetter(*ints) if ints else None
        self._one_int = len(ints) == 1
        self._strings = str in kinds

    def fits(self, image: Mapping[str, Any]) -> bool:
        """Whether the image's values infer what the shape's did: ints within int64, no string is
        the UNAVAILABLE marker (the other values infer by their type alone)."""
        if self._strings and UNAVAILABLE in image.values():
            return False
        if self._ints is None:
            return True
        found = self._ints(image)
        if self._one_int:
            return INT64_MIN <= found <= INT64_MAX
        return min(found) >= INT64_MIN and max(found) <= INT64_MAX

    def typed(
        self, image: Mapping[str, Any], where: str, payload: bytes | str | None, slow: ValueConverter
    ) -> dict[str, Any]:
        if self._in_order:
            out = {**image, **self._missing}
        else:
            out = {name: image.get(name, UNAVAILABLE) for name in self._names}
        for name, col, fast in self._converts:
            raw = out[name]
            if fast is not None:
                try:
                    out[name] = fast(raw)
                    continue
                except Exception:  # any failure: the full converter decides
                    pass
            out[name] = slow(col, raw, f"{where}.{name}", payload)
        return out


def _all_fit(plans: tuple[_ImagePlan | None, ...], images: tuple[Mapping[str, Any] | None, ...]) -> bool:
    for plan, image in zip(plans, images, strict=True):
        if plan is not None and image is not None and not plan.fits(image):
            return False
    return True


class Shape:
    """The inferred columns of one change, and how to type its images (:meth:`SchemalessShapes.infer`)."""

    __slots__ = ("_plans", "columns")

    def __init__(self, columns: tuple[Column, ...], plans: tuple[_ImagePlan | None, ...] | None) -> None:
        self.columns = columns
        self._plans = plans  # None: not cached, type the images cell by cell

    def typed(
        self,
        decoder: Decoder,
        index: int,
        image: Mapping[str, Any] | None,
        field: str,
        payload: bytes | str | None,
    ) -> dict[str, Any] | None:
        """Image ``index`` (in the order given to ``infer``) typed by the columns, as :func:`typed_image`."""
        if image is None:
            return None
        plan = None if self._plans is None else self._plans[index]
        if plan is None:
            return decoder.typed_row(self.columns, image, field, payload)
        return plan.typed(image, field, payload, decoder.coerce)


class SchemalessShapes:
    """One decoder's cache of inferred shapes and their table schemas (bounded, least recently used)."""

    def __init__(self, max_shapes: int = 4096, max_names: int = 200_000) -> None:
        self._shapes: LruCache[tuple[ImageKey, ...], Shape] = LruCache(
            max_shapes, max_names, lambda key, _: sum(len(k[0]) for k in key if k is not None) + 1
        )
        self._tables: LruCache[tuple[Any, ...], TableSchema] = LruCache(
            max_shapes, max_names, lambda key, _: len(key[4]) + 1
        )

    def infer(self, *images: Mapping[str, Any] | None) -> Shape:
        """:func:`infer_columns` of the images, with a plan to type each."""
        key = tuple(map(_image_key, images))
        shape = self._shapes.get(key)
        if shape is not None:
            assert shape._plans is not None
            if _all_fit(shape._plans, images):
                return shape
            return Shape(infer_columns(images), None)
        columns = infer_columns(images)
        if not all(k is None or set(k[1]) <= _PLAIN_KINDS for k in key):
            return Shape(columns, None)
        plans = tuple(None if k is None else _ImagePlan(columns, k) for k in key)
        if not _all_fit(plans, images):
            return Shape(columns, None)
        shape = Shape(columns, plans)
        self._shapes.put(key, shape)
        return shape

    def table(
        self, shape: Shape, db: str | None, schema: str | None, table: str, key: tuple[str, ...]
    ) -> TableSchema:
        """:func:`table_schema` of a shape's columns (cached per cached shape and names)."""
        if shape._plans is None:
            return table_schema(db, schema, table, shape.columns, key)
        slot = (shape, db, schema, table, key)
        hit = self._tables.get(slot)
        if hit is None:
            hit = table_schema(db, schema, table, shape.columns, key)
            self._tables.put(slot, hit)
        return hit
