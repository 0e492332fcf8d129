"""Kafka Connect data model: column types, logical type names, and Connect JSON schemas.

A :class:`Column` describes one field of a row the way Kafka Connect's ``JsonConverter`` with
``schemas.enable=true`` describes it: a primitive Connect type, optionality, and an optional
logical type name (``org.apache.kafka.connect.data.Decimal``, ``io.debezium.time.Date``, ...)
with its parameters. A :class:`TableSchema` groups the columns of one table and its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

import orjson

from transforms.frozen import reduce_frozen
from transforms.table_budget import TableLru

__all__ = [
    "MEMO_ENTRIES",
    "Column",
    "ConnectType",
    "DecimalHandlingMode",
    "Logical",
    "TableSchema",
]


class ConnectType(StrEnum):
    """Kafka Connect schema types, valued by the names ``JsonConverter`` writes and reads.

    The members are named after Java's ``Schema.Type``; the values are the JSON names, so
    ``FLOAT32`` is ``"float"`` and ``FLOAT64`` is ``"double"`` (``JsonConverter`` rejects
    ``"float32"``/``"float64"``).
    """

    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float"
    FLOAT64 = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"


class Logical:
    """Connect and Debezium logical type names (the ``name`` of a Connect schema)."""

    DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"
    CONNECT_DATE: Final = "org.apache.kafka.connect.data.Date"
    CONNECT_TIME: Final = "org.apache.kafka.connect.data.Time"
    CONNECT_TIMESTAMP: Final = "org.apache.kafka.connect.data.Timestamp"
    DATE: Final = "io.debezium.time.Date"
    TIME: Final = "io.debezium.time.Time"
    MICRO_TIME: Final = "io.debezium.time.MicroTime"
    NANO_TIME: Final = "io.debezium.time.NanoTime"
    ZONED_TIME: Final = "io.debezium.time.ZonedTime"
    TIMESTAMP: Final = "io.debezium.time.Timestamp"
    MICRO_TIMESTAMP: Final = "io.debezium.time.MicroTimestamp"
    NANO_TIMESTAMP: Final = "io.debezium.time.NanoTimestamp"
    ZONED_TIMESTAMP: Final = "io.debezium.time.ZonedTimestamp"
    YEAR: Final = "io.debezium.time.Year"
    VARIABLE_SCALE_DECIMAL: Final = "io.debezium.data.VariableScaleDecimal"
    JSON: Final = "io.debezium.data.Json"
    XML: Final = "io.debezium.data.Xml"
    UUID: Final = "io.debezium.data.Uuid"
    ENUM: Final = "io.debezium.data.Enum"
    ENUM_SET: Final = "io.debezium.data.EnumSet"
    BITS: Final = "io.debezium.data.Bits"
    GEOMETRY: Final = "io.debezium.data.geometry.Geometry"


class DecimalHandlingMode(StrEnum):
    """Debezium's ``decimal.handling.mode``."""

    PRECISE = "precise"
    DOUBLE = "double"
    STRING = "string"


_VARIABLE_SCALE_DOC = (("doc", '"Variable scaled decimal"'),)  # as Debezium's VariableScaleDecimal


@dataclass(frozen=True, slots=True)
class Column:
    """One field of a row: name, Connect type, optionality and logical type.

    ``params`` holds the Connect schema parameters as sorted ``(name, value)`` pairs
    (e.g. ``scale`` and ``connect.decimal.precision`` of a decimal).
    ``fields`` holds the members of a struct column, ``items`` the element of an array.
    ``source_type`` is the column type as the source database spells it, when known.
    ``meta`` keeps a received Connect schema's ``doc`` as ``(key, JSON text)`` pairs, so a
    Debezium column schema is written back as it came.

    >>> Column.decimal("price", 10, 2).params
    (('connect.decimal.precision', '10'), ('scale', '2'))
    """

    name: str
    type: ConnectType
    optional: bool = True
    logical: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    fields: tuple[Column, ...] = ()
    items: Column | None = None
    source_type: str | None = None
    meta: tuple[tuple[str, str], ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

    @staticmethod
    def decimal(
        name: str,
        precision: int | None,
        scale: int | None,
        optional: bool = True,
        source_type: str | None = None,
    ) -> Column:
        """A decimal column. Without a known scale it is a Debezium VariableScaleDecimal."""
        if scale is None:
            return Column(
                name,
                ConnectType.STRUCT,
                optional,
                Logical.VARIABLE_SCALE_DECIMAL,
                fields=(Column("scale", ConnectType.INT32, False), Column("value", ConnectType.BYTES, False)),
                source_type=source_type,
                meta=_VARIABLE_SCALE_DOC,
            )
        params: list[tuple[str, str]] = [("scale", str(scale))]
        if precision is not None:
            params.append(("connect.decimal.precision", str(precision)))
        return Column(
            name,
            ConnectType.BYTES,
            optional,
            Logical.DECIMAL,
            tuple(sorted(params)),
            source_type=source_type,
        )

    @property
    def param_map(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def scale(self) -> int | None:
        value = self.param_map.get("scale")
        return int(value) if value is not None else None

    @property
    def precision(self) -> int | None:
        value = self.param_map.get("connect.decimal.precision")
        return int(value) if value is not None else None

    @property
    def is_decimal(self) -> bool:
        return self.logical in (Logical.DECIMAL, Logical.VARIABLE_SCALE_DECIMAL)

    def renamed(self, name: str) -> Column:
        return replace(self, name=name)

    def as_optional(self, optional: bool = True) -> Column:
        return self if self.optional == optional else replace(self, optional=optional)


MEMO_ENTRIES: Final = 8  # what one table object keeps for itself (TableSchema.memo)


@dataclass(frozen=True, slots=True)
class TableSchema:
    """The structure of one source table: its name parts, ordered columns and key columns.

    ``db`` is the top-level namespace used in topic names; ``schema`` is the
    second-level namespace where the source has one (Postgres/Oracle/SQL Server).
    ``topic_namespace`` overrides the namespace of topic and schema names where the source
    names them otherwise (Debezium's PostgreSQL connector: ``<prefix>.<schema>.<table>``).
    """

    db: str | None
    schema: str | None
    table: str
    columns: tuple[Column, ...] = ()
    key: tuple[str, ...] = ()
    topic_namespace: str | None = None
    _index: dict[str, int] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # What the decoders and the emitter derive from this very object (its row plan, its codec
    # per emit options), found here by one lookup in a small dict instead of in caches of every
    # table; it lives and dies with the object, which the decoders' caches keep within the table
    # budget, and holds at most MEMO_ENTRIES (options made per call find their codec in the
    # emitter's cache instead). Not compared, hashed, copied or pickled.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

    def __post_init__(self) -> None:
        self._index.update({c.name: i for i, c in enumerate(self.columns)})
        if len(set(self.key)) != len(self.key):  # a key names each column once (Connect refuses twins)
            object.__setattr__(self, "key", tuple(dict.fromkeys(self.key)))

    @property
    def namespace(self) -> str:
        """The name used in topic and schema names: ``topic_namespace``, else ``db``, else
        ``schema``, else ``default``."""
        return self.topic_namespace or self.db or self.schema or "default"

    @property
    def qualified_name(self) -> str:
        parts = [p for p in (self.db, self.schema, self.table) if p]
        return ".".join(parts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column | None:
        i = self._index.get(name)
        return None if i is None else self.columns[i]

    def has(self, name: str) -> bool:
        return name in self._index

    def key_columns(self) -> tuple[Column, ...]:
        cols = []
        for name in self.key:
            col = self.column(name)
            cols.append(col.as_optional(False) if col else Column(name, ConnectType.STRING, False))
        return tuple(cols)

    def with_columns(self, columns: tuple[Column, ...] | list[Column]) -> TableSchema:
        cols = tuple(columns)
        names = {c.name for c in cols}
        return TableSchema(
            self.db, self.schema, self.table, cols, tuple(k for k in self.key if k in names), self.topic_namespace
        )

    def with_key(self, key: tuple[str, ...] | list[str]) -> TableSchema:
        return TableSchema(self.db, self.schema, self.table, self.columns, tuple(key), self.topic_namespace)

    def with_name(self, db: str | None, schema: str | None, table: str) -> TableSchema:
        """The same columns under other names (``topic_namespace`` is dropped: the names are new)."""
        return TableSchema(db, schema, table, self.columns, self.key)


def column_schema(col: Column, decimal_mode: DecimalHandlingMode, with_field: bool = True) -> dict[str, Any]:
    """The Connect JSON schema of a column, under a decimal handling mode."""
    out: dict[str, Any]
    if col.is_decimal and decimal_mode is not DecimalHandlingMode.PRECISE:
        ctype = ConnectType.FLOAT64 if decimal_mode is DecimalHandlingMode.DOUBLE else ConnectType.STRING
        out = {"type": ctype.value, "optional": col.optional}
    else:
        out = {"type": col.type.value, "optional": col.optional}
        if col.logical:
            out["name"] = col.logical
            out["version"] = 1
        if col.params:
            out["parameters"] = dict(col.params)
        if col.type is ConnectType.STRUCT:
            out["fields"] = [column_schema(f, decimal_mode) for f in col.fields]
        elif col.type is ConnectType.ARRAY and col.items is not None:
            out["items"] = column_schema(col.items, decimal_mode, with_field=False)
        for key, text in col.meta:
            out[key] = orjson.loads(text)
    if with_field:
        out["field"] = col.name
    return out


# (column, mode) -> its schema, shared by the struct schemas of every table that has the column
# (the emitter's schemas are never mutated), bounded by the table budget
_column_schemas: TableLru[tuple[Column, DecimalHandlingMode], dict[str, Any]] = TableLru(lambda key, _: 0)


def _shared_column_schema(col: Column, decimal_mode: DecimalHandlingMode) -> dict[str, Any]:
    return _column_schemas.get_or_make((col, decimal_mode), lambda: column_schema(col, decimal_mode))


def struct_schema(
    columns: tuple[Column, ...],
    name: str | None,
    optional: bool,
    decimal_mode: DecimalHandlingMode,
    field_name: str | None = None,
) -> dict[str, Any]:
    """A Connect struct schema over columns."""
    out: dict[str, Any] = {
        "type": "struct",
        "fields": [_shared_column_schema(c, decimal_mode) for c in columns],
        "optional": optional,
    }
    if name:
        out["name"] = name
    if field_name:
        out["field"] = field_name
    return out
