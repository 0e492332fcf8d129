"""The shared core of Arcion Replicant's file row formats (``arcion-csv`` and ``arcion-json``).

Both formats describe a change the same way, whatever the file syntax:

* a **snapshot row** holds one value per column (Debezium op ``r``, ``source.snapshot`` true);
* a **realtime row** holds, per column, a new value, an old value and an *exists* code, then
  the operation (``I``/``U``/``D``/``R``), the ``cursor`` (a JSON object) and the running
  ``operationcount`` (a JSON object).

Exists codes (:class:`Exists`): ``0`` the column is in neither image, ``1`` new image only,
``2`` old image only, ``3`` both. A column missing from an image is
:data:`~transforms.values.UNAVAILABLE` in that image, never ``None``; the vendor's ``NULL``
literal (``NULL`` in CSV, ``"null"`` in JSON) is SQL NULL only where the exists code says the
value is present.

Images per operation (the seed defines ``U`` precisely; the others follow from it):

* ``I`` → ``c``: ``after`` = new values (exists 1/3); ``before`` is ``null`` and any old values
  are ignored (Debezium inserts have no before image).
* ``U`` → ``u``: ``before`` = old values (exists 2/3), ``after`` = new values (exists 1/3).
  When no column has an old value the source gave no before image and ``before`` is ``null``.
* ``D`` → ``d``: ``before`` = old values (exists 2/3), ``after`` is ``null``.
* ``R`` → ``u``: Arcion's *replace* (``replaceCount`` in ``operationcount``; MySQL
  ``REPLACE INTO``, upserts) writes the full new row whether or not one existed, which is an
  update-or-insert; it is emitted as an update built like ``U`` so that sinks upsert it. (It is
  not Debezium's ``r``, which means a snapshot read.)

The cursor is kept whole in ``source.cursor`` and its scalar members under snake_case names
(``extractor_id``, ``node_id``, ``dsc_id``, ``mut_id``, ``part_num``, ``cursor_version`` for
``v``, ``log``/``position`` for binlog cursors ...). ``timestamp`` (the source commit time) is
``source.ts_ms``; ``extractionTimestamp`` (when Replicant read it from the log) is the event's
``ts_ms``. The operation counts are kept in ``source.operation_count`` and as ``insert_count``
... ``replace_count``.

``source.sequence`` is ``<dscId>-<mutId>``, both zero-padded to 20 digits: ``mutId`` counts the
mutations of one ``dscId`` and restarts when ``dscId`` advances (the seed shows ``dscId``
...904/``mutId`` 1048480 followed by ``dscId`` ...905/``mutId`` 1721), so neither orders
changes alone, while ``timestamp`` has millisecond resolution and is shared by many changes.
Binlog cursors (``log``/``position``) give ``<log>:<position>`` (position zero-padded; binlog
file names sort by their zero-padded index). Without either pair the sequence is ``null``.

Values carry no type metadata: they stay strings unless ``column.types`` declares a type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Any

import orjson
from pydantic import Field, field_validator

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import clip, coerce_checked
from transforms.decoders.cache import TableLru
from transforms.decoders.rowplan import FastConverter, NotFast, fast_converter
from transforms.envelope import ChangeEvent, Operation, SnapshotMarker, SourceInfo
from transforms.errors import DecodeError
from transforms.jsonio import JsonLimitError, loads_limited
from transforms.options import FormatOptions
from transforms.values import UNAVAILABLE, CoercionError

__all__ = [
    "COLUMNS_NAMESPACE",
    "CSV_FIELDS",
    "JSON_FIELDS",
    "ArcionFileOptions",
    "ArcionRowBuilder",
    "Exists",
    "RowFieldNames",
    "column_for_type",
    "exists_code",
    "split_table_name",
]

COLUMNS_NAMESPACE = "arcion.columns"
"""Metadata store namespace of the column lists learned from header lines, keyed by table."""


class Exists(IntEnum):
    """An Arcion exists code: which images of a realtime row hold the column's value."""

    ABSENT = 0
    NEW = 1
    OLD = 2
    BOTH = 3

    @property
    def in_new(self) -> bool:
        return bool(self & Exists.NEW)  # NEW or BOTH (bit 0)

    @property
    def in_old(self) -> bool:
        return bool(self & Exists.OLD)  # OLD or BOTH (bit 1)


_EXISTS_TEXTS = {str(int(code)): code for code in Exists}
_EXISTS_INTS = {int(code): code for code in Exists}


def exists_code(raw: Any) -> Exists | None:
    """The exists code of a plain ``"0"``..``"3"`` or ``0``..``3`` (no blanks, not a bool), else None
    (:meth:`ArcionRowBuilder.exists` decides)."""
    kind = type(raw)
    if kind is str:
        return _EXISTS_TEXTS.get(raw)
    if kind is int:
        return _EXISTS_INTS.get(raw)
    return None


_OPERATIONS = {
    "I": Operation.CREATE,
    "U": Operation.UPDATE,
    "D": Operation.DELETE,
    "R": Operation.UPDATE,
}

# ------------------------------------------------------------------------------------------ types

_SIMPLE_TYPES: dict[str, tuple[ConnectType, str | None]] = {
    "int8": (ConnectType.INT8, None),
    "int16": (ConnectType.INT16, None),
    "int32": (ConnectType.INT32, None),
    "int64": (ConnectType.INT64, None),
    "float": (ConnectType.FLOAT32, None),
    "double": (ConnectType.FLOAT64, None),
    "float32": (ConnectType.FLOAT32, None),  # Java's Schema.Type names, accepted as aliases
    "float64": (ConnectType.FLOAT64, None),
    "boolean": (ConnectType.BOOLEAN, None),
    "string": (ConnectType.STRING, None),
    "date": (ConnectType.INT32, Logical.DATE),
    "time": (ConnectType.INT64, Logical.MICRO_TIME),
    "timestamp": (ConnectType.INT64, Logical.TIMESTAMP),
    "micro-timestamp": (ConnectType.INT64, Logical.MICRO_TIMESTAMP),
    "zoned-timestamp": (ConnectType.STRING, Logical.ZONED_TIMESTAMP),
    "json": (ConnectType.STRING, Logical.JSON),
}
_DECIMAL_RE = re.compile(r"^decimal(?:\(\s*(\d+)\s*,\s*(\d+)\s*\))?$")
TYPE_NAMES = (*_SIMPLE_TYPES, "decimal", "decimal(p,s)")


def column_for_type(name: str, spec: str) -> Column:
    """The column for a ``column.types`` type name; ValueError for an unknown one.

    >>> column_for_type("k", "int64").type
    <ConnectType.INT64: 'int64'>
    >>> column_for_type("p", "decimal(10,2)").params
    (('connect.decimal.precision', '10'), ('scale', '2'))
    """
    text = spec.strip().lower()
    simple = _SIMPLE_TYPES.get(text)
    if simple is not None:
        return Column(name, simple[0], True, simple[1], source_type=text)
    m = _DECIMAL_RE.match(text)
    if m:
        precision, scale = m.groups()
        if scale is None:
            return Column.decimal(name, None, None, source_type=text)
        return Column.decimal(name, int(precision), int(scale), source_type=text)
    raise ValueError(f"unknown type {spec!r} for column {name!r}; known: {', '.join(TYPE_NAMES)}")


def split_table_name(text: str) -> tuple[str | None, str | None, str]:
    """``table`` / ``db.table`` / ``db.schema.table`` → (db, schema, table); ValueError if malformed.

    >>> split_table_name("tpch.region")
    ('tpch', None, 'region')
    """
    parts = [p.strip() for p in text.split(".")]
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise ValueError(f"expected 'table', 'db.table' or 'db.schema.table', found {text!r}")
    if len(parts) == 1:
        return None, None, parts[0]
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], parts[1], parts[2]


def _name_list(value: Any, what: str) -> Any:
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",")]
    if isinstance(value, list | tuple):
        names = [str(v).strip() for v in value]
        if not names or not all(names):
            raise ValueError(f"expected a comma-separated list of {what}, found an empty name")
        lowered = [n.lower() for n in names]
        dup = next((n for n in names if lowered.count(n.lower()) > 1), None)
        if dup is not None:
            raise ValueError(f"{what} name {dup!r} is listed twice")
        return tuple(names)
    return value


# ---------------------------------------------------------------------------------------- options


class ArcionFileOptions(FormatOptions):
    """Options shared by the ``arcion-csv`` and ``arcion-json`` formats."""

    table: str | None = Field(
        None,
        alias="table",
        description="'db.table' (or 'table', 'db.schema.table') of rows that do not name their table "
        "(all CSV rows, JSON snapshot rows).",
    )
    columns: tuple[str, ...] | None = Field(
        None,
        alias="columns",
        description="Column names in file order, comma-separated; a header line replaces them.",
    )
    key_columns: tuple[str, ...] = Field(
        (), alias="key.columns", description="Primary key column names, comma-separated."
    )
    column_types: dict[str, str] = Field(
        default_factory=dict,
        alias="column.types",
        description="Connect types of columns, 'name:type,...' (int8..int64, float, double, boolean, "
        "string, decimal, decimal(p,s), date, time, timestamp, micro-timestamp, zoned-timestamp, json); "
        "other columns stay strings.",
    )
    null_literal: str | None = Field(
        None,
        alias="null.literal",
        description='The text that stands for SQL NULL (default: NULL in CSV, "null" in JSON).',
    )

    @field_validator("table")
    @classmethod
    def _table_name(cls, value: str | None) -> str | None:
        if value is not None:
            split_table_name(value)
        return value

    @field_validator("columns", mode="before")
    @classmethod
    def _column_names(cls, value: Any) -> Any:
        return _name_list(value, "column")

    @field_validator("key_columns", mode="before")
    @classmethod
    def _key_names(cls, value: Any) -> Any:
        return _name_list(value, "key column") if value not in ("", None) else ()

    @field_validator("column_types", mode="before")
    @classmethod
    def _types(cls, value: Any) -> Any:
        if isinstance(value, str):
            pairs: dict[str, str] = {}
            # decimal(p,s) holds a comma: split on commas that start a new 'name:' pair only.
            for item in re.split(r",(?=\s*[^,():]+:)", value):
                name, sep, spec = item.partition(":")
                if not sep or not name.strip():
                    raise ValueError(f"expected 'name:type', found {item.strip()!r}")
                pairs[name.strip()] = spec.strip()
            value = pairs
        if isinstance(value, dict):
            for name, spec in value.items():
                column_for_type(str(name), str(spec))
            return {str(k): str(v) for k, v in value.items()}
        return value


# ---------------------------------------------------------------------------------------- builder


@dataclass(frozen=True, slots=True)
class RowFieldNames:
    """How a format names the parts of a realtime row in error messages."""

    op: str
    cursor: str
    counts: str
    new: str
    old: str
    exists: str


CSV_FIELDS = RowFieldNames("op", "cursor", "operationcount", "new", "old", "exists")
JSON_FIELDS = RowFieldNames("opType", "cursor", "operationcount", "after", "before", "exists")

_SNAKE_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD_RE = re.compile(r"\W+")
_CURSOR_RENAMES = {"v": "cursor_version"}
_RESERVED_FIELDS = frozenset(
    {
        "version",
        "connector",
        "name",
        "ts_ms",
        "snapshot",
        "db",
        "sequence",
        "schema",
        "table",
        "cursor",
        "operation_count",
    }
)


def _snake(key: str) -> str:
    return _NON_WORD_RE.sub("_", _SNAKE_RE.sub("_", key)).strip("_").lower()


def _to_cursor_name(key: str) -> str:
    """The source field name of a cursor member."""
    name = _CURSOR_RENAMES.get(key) or _snake(key) or "cursor_member"
    return f"cursor_{name}" if name in _RESERVED_FIELDS else name


def _to_count_name(key: str) -> str:
    """The source field name of an operation count."""
    name = _snake(key) or "count"
    return f"count_{name}" if name in _RESERVED_FIELDS else name


def _remembered(name_of: Callable[[str], str]) -> Callable[[str], str]:
    """``name_of`` with the names of short keys remembered (cursor and count members repeat in
    every row)."""
    cached = lru_cache(maxsize=1024)(name_of)
    return lambda key: cached(key) if len(key) <= _MAX_CACHED_NAME else name_of(key)


_MAX_CACHED_NAME = 64
_cursor_name = _remembered(_to_cursor_name)
_count_name = _remembered(_to_count_name)
_SCALARS = (str, int, float)  # (bool is an int)


def _is_count(value: Any) -> bool:
    if type(value) is int:  # the common case
        return value >= 0
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ArcionRowBuilder:
    """Builds canonical change events from decoded Arcion rows; shared by both file formats.

    It owns the table schemas (typed by ``column.types``, keyed by ``key.columns``), the exists
    semantics, and the cursor and operation-count source fields. Failures are
    :class:`DecodeError`\\ s of the format it was created for.
    """

    def __init__(self, format_id: str, options: ArcionFileOptions, null_literal: str) -> None:
        self.format_id = format_id
        self.options = options
        self.null_literal = options.null_literal if options.null_literal is not None else null_literal
        self._types = {name: column_for_type(name, spec) for name, spec in options.column_types.items()}
        self._option_table = split_table_name(options.table) if options.table is not None else None
        # (both bounded by the table budget, transforms.table_budget)
        self._tables: TableLru[tuple[str | None, str | None, str, tuple[str, ...]], TableSchema] = TableLru(
            lambda key, _: len(key[3])
        )
        # id(table) -> (table, a fast converter per column): see _converters
        self._fast: TableLru[int, tuple[TableSchema, tuple[FastConverter, ...]]] = TableLru(
            lambda _, hit: len(hit[1])
        )

    def error(self, field: str | None, reason: str, payload: bytes | str | None) -> DecodeError:
        return DecodeError(self.format_id, clip(field, 200), clip(reason, 1000), payload)

    # -- tables ----------------------------------------------------------------------------------

    def table_from_option(self, payload: bytes | str) -> tuple[str | None, str | None, str]:
        if self._option_table is None:
            raise self.error("table", "no table name: set the table option (table=db.table)", payload)
        return self._option_table

    def table(
        self, db: str | None, schema: str | None, name: str, columns: Sequence[str], payload: bytes | str
    ) -> TableSchema:
        """The (cached) schema of a table with these columns, in this order."""
        cache_key = (db, schema, name, tuple(columns))
        table = self._tables.get(cache_key)
        if table is not None:
            return table
        key = self.options.key_columns
        missing = [k for k in key if k not in cache_key[3]]
        if missing:
            raise self.error(
                "key.columns",
                f"key column(s) {', '.join(missing)} not among the columns of "
                f"{'.'.join(p for p in (db, schema, name) if p)}: {', '.join(columns)}",
                payload,
            )
        cols = tuple(self._column(c) for c in columns)
        table = TableSchema(db, schema, name, cols, key)
        self._tables.put(cache_key, table)
        return table

    def _column(self, name: str) -> Column:
        typed = self._types.get(name)
        return typed if typed is not None else Column(name, ConnectType.STRING)

    # -- values ----------------------------------------------------------------------------------

    def value(self, col: Column, raw: Any, field: str, payload: bytes | str) -> Any:
        """A present value: the null literal (or JSON null) is SQL NULL, others are coerced."""
        if raw is None or (isinstance(raw, str) and raw == self.null_literal):
            return None
        if isinstance(raw, dict | list):
            raise self.error(field, f"expected a scalar value, found a JSON {type(raw).__name__}", payload)
        try:
            return coerce_checked(col, raw)
        except CoercionError as exc:
            raise self.error(field, str(exc), payload) from exc

    def exists(self, raw: Any, field: str, payload: bytes | str) -> Exists:
        """The exists code of ``raw`` (blanks around a text are ignored); a DecodeError naming
        ``field`` otherwise. :func:`exists_code` is the fast path of the plain codes."""
        text = raw.strip() if isinstance(raw, str) else raw
        if isinstance(text, str) and text in ("0", "1", "2", "3"):
            return Exists(int(text))
        if isinstance(text, int) and not isinstance(text, bool) and 0 <= text <= 3:
            return Exists(text)
        raise self.error(field, f"expected an exists code 0, 1, 2 or 3, found {raw!r}", payload)

    def operation(self, raw: Any, field: str, payload: bytes | str) -> Operation:
        op = _OPERATIONS.get(raw.strip().upper()) if isinstance(raw, str) else None
        if op is None:
            raise self.error(field, f"expected an operation I, U, D or R, found {raw!r}", payload)
        return op

    def _converters(self, table: TableSchema) -> tuple[FastConverter, ...]:
        """Per column of ``table``, a converter that returns what :meth:`value` would for a value
        that is not null, or raises for :meth:`value` to decide (see rowplan)."""
        hit = self._fast.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        converters = tuple(_fast_value(col, self.null_literal) for col in table.columns)
        self._fast.put(id(table), (table, converters))
        return converters

    def _typed(self, col: Column, fast: FastConverter, raw: Any, field: str, payload: bytes | str) -> Any:
        try:
            return fast(raw)
        except Exception:  # any failure: value() decides (and builds the field path)
            return self.value(col, raw, field, payload)

    # -- events ----------------------------------------------------------------------------------

    def snapshot_event(self, table: TableSchema, row: Mapping[str, Any], payload: bytes | str) -> ChangeEvent:
        """A snapshot row (op ``r``); columns missing from ``row`` are UNAVAILABLE."""
        after = {
            col.name: self._typed(col, fast, row[col.name], col.name, payload) if col.name in row else UNAVAILABLE
            for col, fast in zip(table.columns, self._converters(table), strict=True)
        }
        source = SourceInfo(connector=self.format_id, snapshot=SnapshotMarker.TRUE)
        return ChangeEvent(Operation.READ, table, None, after, source)

    def change_event(
        self,
        table: TableSchema,
        op_raw: Any,
        cells: Sequence[tuple[Any, Any, Exists]],
        cursor_raw: Any,
        counts_raw: Any,
        names: RowFieldNames,
        payload: bytes | str,
    ) -> ChangeEvent:
        """A realtime row: per column (new value, old value, exists code), then op, cursor, counts."""
        op = self.operation(op_raw, names.op, payload)
        after: dict[str, Any] = {}
        before: dict[str, Any] = {}
        has_old = False
        converters = self._converters(table)
        for col, fast, (new, old, exists) in zip(table.columns, converters, cells, strict=True):
            name = col.name
            if exists & 1:  # in_new
                try:
                    after[name] = fast(new)
                except Exception:  # any failure: value() decides (and builds the field path)
                    after[name] = self.value(col, new, f"{names.new}.{name}", payload)
            else:
                after[name] = UNAVAILABLE
            if exists & 2:  # in_old
                has_old = True
                try:
                    before[name] = fast(old)
                except Exception:
                    before[name] = self.value(col, old, f"{names.old}.{name}", payload)
            else:
                before[name] = UNAVAILABLE
        source, extracted_ms = self._source(cursor_raw, counts_raw, names, payload)
        if op is Operation.CREATE:
            return ChangeEvent(op, table, None, after, source, ts_ms=extracted_ms)
        if op is Operation.DELETE:
            return ChangeEvent(op, table, before, None, source, ts_ms=extracted_ms)
        return ChangeEvent(op, table, before if has_old else None, after, source, ts_ms=extracted_ms)

    # -- source ----------------------------------------------------------------------------------

    def _json_object(self, raw: Any, field: str, payload: bytes | str) -> tuple[str, dict[str, Any]] | None:
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        if isinstance(raw, dict):
            return orjson.dumps(raw).decode(), raw
        if not isinstance(raw, str):
            raise self.error(field, f"expected a JSON object text, found {type(raw).__name__}", payload)
        try:
            value = loads_limited(
                raw, max_bytes=self.options.max_message_bytes, max_depth=self.options.max_json_depth
            )
        except JsonLimitError as exc:
            raise self.error(field, f"expected a JSON object, found invalid JSON ({exc})", payload) from exc
        if not isinstance(value, dict):
            raise self.error(field, f"expected a JSON object, found {type(value).__name__}", payload)
        return raw, value

    def _source(
        self, cursor_raw: Any, counts_raw: Any, names: RowFieldNames, payload: bytes | str
    ) -> tuple[SourceInfo, int | None]:
        cursor_field, counts_field = names.cursor, names.counts
        fields: dict[str, Any] = {}
        ts_ms: int | None = None
        extracted_ms: int | None = None
        sequence: str | None = None
        cursor = self._json_object(cursor_raw, cursor_field, payload)
        if cursor is not None:
            text, members = cursor
            fields["cursor"] = text
            for key in ("timestamp", "extractionTimestamp", "dscId", "mutId"):
                value = members.get(key)
                if value is not None and not _is_count(value):
                    raise self.error(
                        f"{cursor_field}.{key}", f"expected a non-negative integer, found {value!r}", payload
                    )
            ts_ms = members.get("timestamp")
            extracted_ms = members.get("extractionTimestamp")
            for key, value in members.items():
                if key != "timestamp" and isinstance(value, _SCALARS):
                    fields.setdefault(_cursor_name(key), value)
            dsc, mut = members.get("dscId"), members.get("mutId")
            log, position = members.get("log"), members.get("position")
            if dsc is not None and mut is not None:
                sequence = f"{dsc:020d}-{mut:020d}"
            elif isinstance(log, str) and _is_count(position):
                sequence = f"{log}:{position:020d}"
        counts = self._json_object(counts_raw, counts_field, payload)
        if counts is not None:
            text, members = counts
            fields["operation_count"] = text
            for key, value in members.items():
                if not _is_count(value):
                    raise self.error(
                        f"{counts_field}.{key}",
                        f"expected a non-negative integer count, found {value!r}",
                        payload,
                    )
                fields.setdefault(_count_name(key), value)
        source = SourceInfo(
            connector=self.format_id,
            ts_ms=ts_ms,
            snapshot=SnapshotMarker.FALSE,
            sequence=sequence,
            fields=fields,
        )
        return source, extracted_ms


def _fast_value(col: Column, null_literal: str) -> FastConverter:
    """What :meth:`ArcionRowBuilder.value` makes of a value other than null or the null literal,
    where that is a plain conversion (see rowplan); raises for everything else."""
    convert = fast_converter(col)

    if col.type is ConnectType.STRING and col.logical is None:

        def text(raw: Any) -> Any:
            if type(raw) is str and raw != null_literal:
                return raw
            raise NotFast

        return text

    def typed(raw: Any) -> Any:
        if convert is None or (type(raw) is str and raw == null_literal):
            raise NotFast
        return convert(raw)

    return typed
