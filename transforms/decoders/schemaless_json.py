"""The common core of the JSON CDC formats whose row images carry typed JSON values but no types.

Maxwell, Oracle GoldenGate and AWS DMS (and Debezium JSON without a schema, through
:mod:`~transforms.decoders.connect_json`) write each column as a plain JSON value (number,
string, boolean, object, array, null) and say nothing about the column's SQL type. This module
infers a Connect column from the values seen (:func:`infer_value`, :func:`infer_images`), keeps
the inferred types of each table stable from message to message (:class:`ColumnMemory`), types
the images against those columns and hands out cached :class:`TableSchema` objects.

**The inference rule.** A column's type is the least type that holds every non-null value seen
for the column in the table so far: the join (:func:`widen`) of the types its values infer, in
this lattice, where ``a -> b`` means that ``b`` holds every value of ``a``::

    int64 -> double                 an int beside a fraction (as Debezium's double mode: an int
                                    beyond 2^53 loses precision)
    int64 -> Decimal (scale 0)      an integer beyond int64 (BIGINT UNSIGNED above 2^63-1), which
                                    no int64 field may hold
    int64 -> VariableScaleDecimal   an int beside a decimal (MongoDB ``$numberDecimal``)
    array<string> -> Json           a list that is not only strings
    any type -> string              every other mix (values as text, objects and lists as JSON)

So the first non-null value of a column fixes its type; a later value the type holds is converted
to it (an int into a double or decimal column, anything into a string column), and a value it
does not hold widens the column, once, to the join. A column's type therefore never goes back and
changes at most twice after its first non-null value (e.g. int64 -> double -> string). ``null``
(and the UNAVAILABLE marker, an absent value) fixes nothing: a column that has only been null is
*undecided* and emitted as an optional string until a value arrives.

The memory is per decoder (one per source topic) and per table, least recently used first out,
bounded by tables and by their total columns (:class:`ColumnMemory`). Like every other fact a
decoder learns, it is kept in the decoder's metadata store (namespace ``inferred.types``, one
document per table: column name -> type), written whenever a table's types widen, before the
change that widened them is emitted, and read back when a table is first met: by a restarted
worker (from Redis or the metadata log), a replica that takes the partition over, the memory
after it dropped the table, and ``cdcnorm transform`` (its in-memory store) alike. So the types of
a partition's records depend on the partition's messages only, never on a restart in between.
A write merges (:func:`widen`) with the stored document, so replicas reading other partitions of
the same table only ever widen it. The columns of a change are those of its images, in their order.

A column the table has but an image lacks is *absent* in that image and becomes
:data:`~transforms.values.UNAVAILABLE`, never ``None``.

>>> cols = infer_columns([{"id": 1, "w": None}, {"id": 1, "w": 2.5}])
>>> [(c.name, c.type.value) for c in cols]
[('id', 'int64'), ('w', 'double')]
>>> table = ColumnMemory().table(("db", None, "t"))
>>> [[c.type.value for c in table.apply(infer_images([row]))] for row in ({"k": 1}, {"k": 2**64 - 1}, {"k": 2})]
[['int64'], ['bytes'], ['bytes']]
"""

from __future__ import annotations

import datetime as dt
import logging
import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeVar

import orjson

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, ValueConverter
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.fields import INT64_MAX, INT64_MIN
from transforms.decoders.rowplan import NotFast, fast_converter
from transforms.frozen import reduce_frozen
from transforms.metadata import MetadataStore
from transforms.table_budget import table_budget
from transforms.values import UNAVAILABLE, infer_column

_TABLES = TableCache()

__all__ = [
    "INFERRED_TYPES_NAMESPACE",
    "ColumnMemory",
    "Inferred",
    "SchemalessShapes",
    "Shape",
    "TableTypes",
    "infer_columns",
    "infer_images",
    "infer_value",
    "table_schema",
    "typed_image",
    "widen",
]

R = TypeVar("R")


# value type -> a value of it that infers what every value of the type infers (ints: within int64)
_SAMPLES: dict[object, Any] = {int: 0, float: 0.0, bool: False, str: "", dict: {}, bytes: b""}


@lru_cache(maxsize=4096)
def _column_for(name: str, kind: object, big: bool) -> Column:
    return infer_column(name, 1 << 64 if big else _SAMPLES[kind])


def infer_value(name: str, value: Any, marker_absent: bool = True) -> Column | None:
    """The column one non-null value infers (:func:`~transforms.values.infer_column`), ``None``
    for ``null`` and, when ``marker_absent``, for the UNAVAILABLE marker (an absent value)."""
    if value is None or (marker_absent and type(value) is str and value == UNAVAILABLE):
        return None
    kind: object = type(value)
    if kind not in _SAMPLES:
        return infer_column(name, value)  # lists, datetimes, decimals: by the value itself
    return _column_for(name, kind, kind is int and not INT64_MIN <= value <= INT64_MAX)


def _plain(col: Column, ctype: ConnectType) -> bool:
    return col.type is ctype and col.logical is None


def _holds_int64(col: Column) -> bool:
    """Whether a column type holds every int64 exactly (or, a double, as Debezium's double mode)."""
    return _plain(col, ConnectType.FLOAT64) or col.is_decimal


def _string_array(col: Column) -> bool:
    return col.type is ConnectType.ARRAY and col.items is not None and _plain(col.items, ConnectType.STRING)


def widen(old: Column, new: Column) -> Column:
    """The least column that holds the values of both inferred columns (same name): the join of
    the lattice in the module docstring. Commutative and associative; ``widen(a, a) == a``.

    >>> widen(Column("n", ConnectType.INT64), Column("n", ConnectType.FLOAT64)).type.value
    'double'
    >>> widen(Column("n", ConnectType.FLOAT64), Column.decimal("n", None, 0)).type.value
    'string'
    """
    if old == new:
        return old
    if _plain(old, ConnectType.INT64) and _holds_int64(new):
        return new
    if _plain(new, ConnectType.INT64) and _holds_int64(old):
        return old
    if old.logical == Logical.JSON and _string_array(new):
        return old
    if new.logical == Logical.JSON and _string_array(old):
        return new
    return Column(old.name, ConnectType.STRING)


@dataclass(frozen=True, slots=True, eq=False)
class Inferred:
    """The columns one change's images infer, before a table's memory applies."""

    columns: tuple[Column, ...]
    """The union of the images' columns in first-seen order; a null-only column is a string."""
    undecided: frozenset[str]
    """The columns whose values are all null (or absent): their string type is a placeholder."""

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


def infer_images(images: Iterable[Mapping[str, Any] | None], marker_absent: bool = True) -> Inferred:
    """The columns of the union of the images' keys, each the join (:func:`widen`) of the columns
    its non-null values infer (see :func:`infer_value` for ``marker_absent``)."""
    found: dict[str, Column | None] = {}
    for image in images:
        if not image:
            continue
        for name, value in image.items():
            col = infer_value(name, value, marker_absent)
            if col is None:
                found.setdefault(name, None)
                continue
            seen = found.get(name)
            found[name] = col if seen is None else widen(seen, col)
    undecided = frozenset(name for name, col in found.items() if col is None)
    columns = tuple(col if col is not None else _column_for(name, str, False) for name, col in found.items())
    return Inferred(columns, undecided)


def infer_columns(images: Iterable[Mapping[str, Any] | None]) -> tuple[Column, ...]:
    """The columns the images infer on their own, without a table's memory (see :func:`infer_images`)."""
    return infer_images(images).columns


# -- the per-table memory ----------------------------------------------------------------------

_MAX_RESOLVED = 16
"""Per table: the resolutions of its most recent shapes that are kept (see TableTypes.resolved)."""

INFERRED_TYPES_NAMESPACE = "inferred.types"
"""The metadata store namespace of the tables' inferred types (key: the table's names as JSON)."""

log = logging.getLogger("cdcnorm.transforms.inference")

_STORED_KINDS: dict[str, Column] = {
    kind: replace(infer_column("", sample), name="")
    for kind, sample in (
        ("boolean", False),
        ("int64", 0),
        ("integer-decimal", 1 << 64),
        ("variable-scale-decimal", Decimal("0.1")),
        ("double", 0.0),
        ("bytes", b""),
        ("zoned-timestamp", dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
        ("micro-timestamp", dt.datetime(2000, 1, 1)),
        ("date", dt.date(2000, 1, 1)),
        ("json", {}),
        ("string-array", ["a"]),
        ("string", ""),
    )
}
"""Every column type the inference gives (:func:`infer_value` and :func:`widen` give no other),
by the name it is stored under."""

_KIND_OF = {col: kind for kind, col in _STORED_KINDS.items()}


def dump_types(types: Mapping[str, Column]) -> dict[str, str]:
    """A table's inferred types as the metadata store keeps them: column name -> kind.

    >>> dump_types({"id": Column("id", ConnectType.INT64), "w": Column("w", ConnectType.FLOAT64)})
    {'id': 'int64', 'w': 'double'}
    """
    out = {}
    for name, col in types.items():
        kind = _KIND_OF.get(replace(col, name=""))
        if kind is None:  # not an inferred type: nothing to keep stable
            raise ValueError(f"column {name!r} has a type the inference does not give: {col}")
        out[name] = kind
    return out


def load_types(doc: Any) -> dict[str, Column]:
    """The types of a stored document (:func:`dump_types`); entries that are not understood (a
    newer version's kinds, a damaged document) are left out and inferred afresh.

    >>> load_types({"id": "int64", "x": "no-such-kind"})
    {'id': Column(name='id', type=<ConnectType.INT64: 'int64'>, optional=True, logical=None, params=(), fields=(), items=None, source_type=None, meta=())}
    """
    if not isinstance(doc, dict):
        return {}
    out = {}
    for name, kind in doc.items():
        col = _STORED_KINDS.get(kind) if isinstance(kind, str) else None
        if col is None:
            log.warning("inferred type of column %r not understood (%.60r): inferred afresh", name, kind)
            continue
        out[name] = replace(col, name=name)
    return out


def _joined(types: Mapping[str, Column], inferred: Inferred) -> tuple[tuple[Column, ...], dict[str, Column]]:
    """The change's columns as ``types`` type them after widening by the change's, and the
    widened entries (new or changed columns)."""
    out = []
    changes: dict[str, Column] = {}
    undecided = inferred.undecided
    for col in inferred.columns:
        name = col.name
        known = types.get(name)
        if name in undecided:
            out.append(col if known is None else known)
            continue
        if known is not None and known != col:
            col = widen(known, col)
        if col != known:
            changes[name] = col
        out.append(col)
    return tuple(out), changes


class TableTypes:
    """The inferred column types of one table: each column's join of every value seen so far,
    kept in the metadata store when given one (``store``, under ``key``)."""

    __slots__ = ("_key", "_memory", "_resets", "_resolved", "_resolved_weight", "_store", "types")

    def __init__(self, memory: ColumnMemory | None, store: MetadataStore | None = None, key: str = "") -> None:
        self._memory = memory  # None: not (or no longer) in a memory, nothing counted
        self._store = store
        self._key = key
        self.types: dict[str, Column] = {} if store is None else load_types(store.get(INFERRED_TYPES_NAMESPACE, key))
        """Column name -> its type so far (decided columns only)."""
        self._resolved: dict[object, Any] = {}  # token -> resolved result
        self._resolved_weight = 0  # the columns of the kept resolutions
        self._resets = 0

    @property
    def weight(self) -> int:
        """What the memory counts for this table: its columns and those of its kept resolutions."""
        return len(self.types) + self._resolved_weight

    def apply(self, inferred: Inferred) -> tuple[Column, ...]:
        """The change's columns as the table types them, the table's types widened by the change's.

        Widened types are stored first (the store may raise StateStoreError: then nothing has
        changed, and the message is retried), merged with what the store holds."""
        types = self.types
        out, changes = _joined(types, inferred)
        if not changes:
            return out
        if self._store is not None:
            out, changes = self._save(out, changes, inferred)
        added = sum(1 for name in changes if name not in types)
        types.update(changes)
        self._forget_resolved()  # what was resolved against the old types is stale
        self._count(added)
        return out

    def _save(
        self, out: tuple[Column, ...], changes: dict[str, Column], inferred: Inferred
    ) -> tuple[tuple[Column, ...], dict[str, Column]]:
        """Store the widened types, joined with the stored ones (another replica may have widened
        the table meanwhile, from another partition); the change's columns and the table's
        changes as the join types them."""
        assert self._store is not None
        stored = load_types(self._store.get(INFERRED_TYPES_NAMESPACE, self._key))
        types = self.types
        theirs = {n: c for n, c in stored.items() if types.get(n) != c}
        if theirs:
            base = dict(types)
            for name, col in theirs.items():
                known = base.get(name)
                base[name] = col if known is None else widen(known, col)
            out, changes = _joined(base, inferred)
            changes = {**{n: c for n, c in base.items() if types.get(n) != c}, **changes}
        merged = {**types, **changes}
        if merged != stored:
            self._store.put(INFERRED_TYPES_NAMESPACE, self._key, dump_types(merged))
        return out, changes

    def resolved(self, token: object, inferred: Inferred, build: Callable[[tuple[Column, ...]], R]) -> R:
        """``build(self.apply(inferred))``, kept per ``token`` (an object standing for ``inferred``,
        compared by identity) until the table's types change. Applying the same columns again
        changes nothing, so a kept result is what applying them again would give."""
        hit = self._resolved.get(token)
        if hit is not None:
            return hit
        resets = self._resets
        value = build(self.apply(inferred))
        if self._resets != resets:
            return value  # the table started over meanwhile: the result is this change's only
        if len(self._resolved) >= _MAX_RESOLVED:
            self._forget_resolved()
        self._resolved[token] = value
        weight = len(inferred.columns) + 1
        self._resolved_weight += weight
        self._count(weight)
        return value

    def _forget_resolved(self) -> None:
        self._resolved.clear()
        self._count(-self._resolved_weight)
        self._resolved_weight = 0

    def _count(self, weight: int) -> None:
        if weight and self._memory is not None:
            self._memory._count(self, weight)

    def _reset(self) -> None:
        """Forget everything (the memory has uncounted it)."""
        self.types.clear()
        self._resolved.clear()
        self._resolved_weight = 0
        self._resets += 1


class ColumnMemory:
    """One decoder's :class:`TableTypes` per table, bounded by their total weight (columns, and
    those of the resolutions each keeps): the table budget (:mod:`transforms.table_budget`) unless
    ``max_columns`` is given, and ``max_tables`` tables if given. The least recently used table is
    dropped first, and a table alone over the budget starts over. With a ``store`` (the decoder's
    metadata store) every table's types are kept there too, and read back when the table is met again."""

    def __init__(
        self,
        max_tables: int | None = None,
        max_columns: int | None = None,
        store: MetadataStore | None = None,
    ) -> None:
        self._tables: OrderedDict[Hashable, TableTypes] = OrderedDict()
        self._max_tables = max_tables
        self._fixed_columns = max_columns
        self._store = store
        self._weight = 0

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def weight(self) -> int:
        """The columns counted over all tables (see :attr:`TableTypes.weight`)."""
        return self._weight

    def table(self, ident: Hashable) -> TableTypes:
        """The types of table ``ident`` (e.g. ``(db, schema, table)``, whose JSON is its store key),
        made the most recently used."""
        tables = self._tables
        entry = tables.get(ident)
        if entry is not None:
            tables.move_to_end(ident)
            return entry
        store = self._store
        entry = TableTypes(self, store, "" if store is None else orjson.dumps(ident).decode())
        tables[ident] = entry
        self._count(entry, len(entry.types))
        while self._max_tables is not None and len(tables) > self._max_tables:
            self._drop_oldest()
        return entry

    def forget(self, ident: Hashable) -> None:
        """Forget table ``ident``'s types, in the store too (the table was dropped, or created anew:
        its next values type it afresh)."""
        store = self._store
        if store is not None:
            key = orjson.dumps(ident).decode()
            if store.get(INFERRED_TYPES_NAMESPACE, key) is not None:
                store.put(INFERRED_TYPES_NAMESPACE, key, None)
        entry = self._tables.pop(ident, None)
        if entry is not None:
            self._weight -= entry.weight
            entry._memory = None

    def _drop_oldest(self) -> None:
        _, dropped = self._tables.popitem(last=False)
        self._weight -= dropped.weight
        dropped._memory = None  # no longer counted

    @property
    def _max_columns(self) -> int:
        return table_budget() if self._fixed_columns is None else self._fixed_columns

    def _count(self, entry: TableTypes, weight: int) -> None:
        self._weight += weight
        limit = self._max_columns
        if weight < 0 or self._weight <= limit:
            return
        while self._weight > limit and len(self._tables) > 1:
            if next(iter(self._tables.values())) is entry:
                break
            self._drop_oldest()
        if self._weight > limit:  # this table alone: it starts over
            self._weight -= entry.weight
            entry._reset()


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


class _Typing:
    """Columns and the plans that type a cached shape's images by them (one per table)."""

    __slots__ = ("columns", "plans", "tables")

    def __init__(self, columns: tuple[Column, ...], plans: tuple[_ImagePlan | None, ...]) -> None:
        self.columns = columns
        self.plans = plans
        self.tables: dict[tuple[str, ...], TableSchema] = {}  # key columns -> the table


_MAX_TABLES_PER_TYPING = 8


class _Cached:
    """A cached shape: what its images infer, and plans that type them by those columns."""

    __slots__ = ("inferred", "keys", "plans")

    def __init__(self, inferred: Inferred, keys: tuple[ImageKey, ...], plans: tuple[_ImagePlan | None, ...]) -> None:
        self.inferred = inferred
        self.keys = keys
        self.plans = plans

    def typing(self, columns: tuple[Column, ...]) -> _Typing:
        """A typing by ``columns`` (the inferred columns as a table's memory types them)."""
        if columns == self.inferred.columns:
            return _Typing(columns, self.plans)
        return _Typing(columns, tuple(None if k is None else _ImagePlan(columns, k) for k in self.keys))


class Shape:
    """The columns of one change, and how to type its images (:meth:`SchemalessShapes.infer`).

    ``columns`` are what the images infer on their own until :meth:`SchemalessShapes.table`
    types them as the table's memory does; call it before :meth:`typed`.
    """

    __slots__ = ("_cached", "_plans", "columns", "inferred")

    def __init__(self, inferred: Inferred, cached: _Cached | None) -> None:
        self.inferred = inferred
        self._cached = cached
        self.columns = inferred.columns
        self._plans = None if cached is None else cached.plans  # None: type the images cell by cell

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
    """One decoder's cache of inferred shapes and its per-table memory of column types (both bounded,
    least recently used first out).

    Per change: ``shape = infer(after, before)``, ``table(shape, db, schema, name, key)`` (which
    types the columns as the table's memory does, and widens the memory), then ``shape.typed``.
    """

    def __init__(self, store: MetadataStore | None = None) -> None:
        # both bounded by the table budget; a shape counts the field names of its images
        self._shapes: TableLru[tuple[ImageKey, ...], _Cached] = TableLru(
            lambda key, _: sum(len(k[0]) for k in key if k is not None)
        )
        self.memory = ColumnMemory(store=store)

    def infer(self, *images: Mapping[str, Any] | None) -> Shape:
        """:func:`infer_images` of the images, with a plan to type each."""
        key = tuple(map(_image_key, images))
        cached = self._shapes.get(key)
        if cached is not None:
            if _all_fit(cached.plans, images):
                return Shape(cached.inferred, cached)
            return Shape(infer_images(images), None)
        inferred = infer_images(images)
        if not all(k is None or set(k[1]) <= _PLAIN_KINDS for k in key):
            return Shape(inferred, None)
        plans = tuple(None if k is None else _ImagePlan(inferred.columns, k) for k in key)
        if not _all_fit(plans, images):
            return Shape(inferred, None)
        cached = _Cached(inferred, key, plans)
        self._shapes.put(key, cached)
        return Shape(inferred, cached)

    def table(
        self, shape: Shape, db: str | None, schema: str | None, table: str, key: tuple[str, ...]
    ) -> TableSchema:
        """The table of a change: the shape's columns as the table's memory types them (the shape
        then types its images by them), the memory widened by them first. Cached per shape and names."""
        types = self.memory.table((db, schema, table))
        cached = shape._cached
        if cached is None:
            shape.columns = types.apply(shape.inferred)
            return table_schema(db, schema, table, shape.columns, key)
        typing = types.resolved(cached, cached.inferred, cached.typing)
        shape.columns, shape._plans = typing.columns, typing.plans
        hit = typing.tables.get(key)  # a typing is of one table: only the key columns vary
        if hit is None:
            if len(typing.tables) >= _MAX_TABLES_PER_TYPING:
                typing.tables.clear()
            hit = typing.tables[key] = table_schema(db, schema, table, typing.columns, key)
        return hit
