"""Canal JSON (Alibaba Canal flat messages, as also written by DTS, Flink and Flink CDC).

One message holds one statement's rows: ``data[]`` has one row per change (order kept),
``old[]`` the matching partial before images of an UPDATE (only the changed columns),
``mysqlType``/``sqlType`` the column types, ``pkNames`` the key, ``es`` the binlog time and
``ts`` the time Canal/DTS wrote the message::

    {"data":[{"id":"1","v":"b"}],"old":[{"v":"a"}],"database":"db","table":"t",
     "mysqlType":{"id":"bigint(20)","v":"varchar(5)"},"pkNames":["id"],"type":"UPDATE",
     "es":1600161894000,"ts":1600161894771,"id":58,"isDdl":false,"sql":""}

Mapping:

* ``INSERT`` → ``c``, ``UPDATE`` → ``u``, ``DELETE`` → ``d``, ``INIT`` (Flink snapshot rows) → ``r``.
* UPDATE: ``after`` = the ``data`` row; ``before`` = the ``data`` row overlaid with its ``old``
  row (columns missing from ``old`` did not change). Without ``old`` the before image is unknown
  and stays ``null``.
* DELETE: rows are in ``data`` (open-source Canal, DTS since 2022-03-20) or, in the legacy DTS
  layout, in ``old`` with ``data: null``; the layout is detected per message.
* A column that the table's types name but a row lacks is absent, i.e. ``UNAVAILABLE``.
* ``isDdl: true`` or a DDL type (``CREATE``/``ALTER``/``ERASE``/``DDL``/...) is a schema change
  with ``sql`` as its DDL; ``TRUNCATE`` is that schema change followed by a ``t`` event.
  ``GTID``/``XACOMMIT``/``XAROLLBACK``/``MHEARTBEAT`` carry no change.
* Types come from ``mysqlType`` (any spelling: ``bigint(20)``, ``INT(8) unsigned zerofill``,
  ``ENUM('a','b')`` ...; mapped by :mod:`transforms.decoders.mysql_types`, as for every
  MySQL-typed format), else from ``sqlType`` (``java.sql.Types`` codes), else are inferred
  from the JSON values (Flink CDC pipeline output, minimal messages), which are then kept as
  they are.
* ``bigint.unsigned.handling.mode``: ``precise`` (default) types BIGINT UNSIGNED as
  Decimal(20,0), ``long`` as int64. Whatever typed an int64 column, a value in 2^63..2^64-1
  (only a BIGINT UNSIGNED one can be) wraps to its two's complement, as in Debezium's long mode.

``source.sequence`` is left ``null``: ``es`` is the statement's start time at second resolution
(binlog events are written in commit order, so it can go backwards), and ``id`` is a Canal
batch counter that many messages share and that restarts with the Canal server. Neither, nor
both together, sort changes in source order.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoded, Decoder, Message
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.canal_json_options import CanalJsonOptions
from transforms.decoders.fields import (
    INT64_MAX,
    INT64_MIN,
    optional_int,
    optional_scalar,
    optional_str,
    parse_int,
)
from transforms.decoders.mysql_types import (
    BigintUnsignedHandlingMode,
    column_for_mysql_type,
    wrap_unsigned_bigint,
)
from transforms.decoders.rowplan import (
    FastConverter,
    RowPlans,
    fast_converter,
    int_converter,
    same_key_cells,
    text_direct,
)
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
)
from transforms.errors import DecodeError, caused_by
from transforms.frozen import reduce_frozen
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.values import CoercionError, infer_column, parse_datetime

__all__ = ["BigintUnsignedHandlingMode", "CanalJsonDecoder", "CanalJsonOptions", "column_for_type"]


_OPS = {
    "INSERT": Operation.CREATE,
    "UPDATE": Operation.UPDATE,
    "DELETE": Operation.DELETE,
    "INIT": Operation.READ,
}
_DDL_TYPES = {
    "DDL": "ALTER",
    "CREATE": "CREATE",
    "ALTER": "ALTER",
    "ERASE": "DROP",
    "RENAME": "ALTER",
    "TRUNCATE": "ALTER",
    "CINDEX": "ALTER",
    "DINDEX": "ALTER",
    "QUERY": "ALTER",
}
_NO_CHANGE_TYPES = frozenset({"GTID", "XACOMMIT", "XAROLLBACK", "MHEARTBEAT", "HEARTBEAT", "BEGIN", "COMMIT"})
_DDL_KIND_RE = re.compile(r"(create|drop)\s+table\b", re.IGNORECASE)

# ------------------------------------------------------------------------------------------ types

# java.sql.Types codes, for messages with sqlType but no mysqlType
_SQL_TYPES: dict[int, tuple[ConnectType, str | None]] = {
    -7: (ConnectType.BOOLEAN, None),
    16: (ConnectType.BOOLEAN, None),
    -6: (ConnectType.INT16, None),
    5: (ConnectType.INT16, None),
    4: (ConnectType.INT32, None),
    -5: (ConnectType.INT64, None),
    6: (ConnectType.FLOAT64, None),
    7: (ConnectType.FLOAT32, None),
    8: (ConnectType.FLOAT64, None),
    91: (ConnectType.INT32, Logical.DATE),
    92: (ConnectType.INT64, Logical.MICRO_TIME),
    93: (ConnectType.INT64, Logical.MICRO_TIMESTAMP),
    2014: (ConnectType.STRING, Logical.ZONED_TIMESTAMP),
    -2: (ConnectType.BYTES, None),
    -3: (ConnectType.BYTES, None),
    -4: (ConnectType.BYTES, None),
    2004: (ConnectType.BYTES, None),
}


def _ddl_change_type(sql: str) -> str | None:
    """``CREATE``/``DROP`` for a ``CREATE TABLE``/``DROP TABLE`` statement (after leading comments)."""
    text = sql.lstrip()
    while text.startswith("/*"):  # a loop, not a regex: nested lazy comment patterns backtrack exponentially
        end = text.find("*/", 2)
        if end < 0:
            return None
        text = text[end + 2 :].lstrip()
    m = _DDL_KIND_RE.match(text)
    if m is None:
        return None
    return "CREATE" if m.group(1).lower() == "create" else "DROP"


@lru_cache(maxsize=4096)
def column_for_type(
    name: str,
    mysql_type: str | None,
    sql_type: int | None,
    unsigned_mode: BigintUnsignedHandlingMode = BigintUnsignedHandlingMode.PRECISE,
) -> Column | None:
    """The Debezium-style column of a Canal ``mysqlType`` (else ``sqlType``); None if neither is known.

    ``mysqlType`` is mapped by :mod:`transforms.decoders.mysql_types`, the mapping every MySQL-typed
    format shares. Raises ValueError for a type whose size is out of range (``BIT(65)``, ``DECIMAL(2000,3)``).

    >>> column_for_type("id", "bigint(20) unsigned", None).logical
    'org.apache.kafka.connect.data.Decimal'
    >>> column_for_type("d", "datetime(6)", 93).logical
    'io.debezium.time.MicroTimestamp'
    """
    if mysql_type:
        col = column_for_mysql_type(name, mysql_type, unsigned_mode)
        if col is not None:
            return col
    if sql_type is not None:
        if sql_type in (2, 3):
            return Column.decimal(name, None, None)
        ctype, logical = _SQL_TYPES.get(sql_type, (ConnectType.STRING, None))
        return Column(name, ctype, logical=logical)
    if mysql_type:
        return Column(name, ConnectType.STRING, source_type=mysql_type)
    return None


# canal header fields kept in the source block: (canal name, source field)
_SOURCE_FIELDS = (("id", "id"), ("gtid", "gtid"), ("serverId", "server_id"), ("logfileName", "file"), ("logfileOffset", "pos"))
_SHAPES_PER_TABLE = 8  # a table's shapes: its columns before/after DDL, partial captures ...
_P = TypeVar("_P", bound=tuple[Any, ...] | frozenset[str])


def _json_kind(rows: list[dict[str, Any]], name: str) -> Any:
    """What ``infer_column`` infers a column from: the type of its first non-null value (for an
    array, also whether it is a non-empty array of strings)."""
    sample = next((row[name] for row in rows if row.get(name) is not None), None)
    if type(sample) is list:
        return list, bool(sample) and all(isinstance(v, str) for v in sample)
    return type(sample)


def _untyped(rows: list[dict[str, Any]], typed: frozenset[str]) -> tuple[tuple[str, Any], ...]:
    """The row columns without a declared type, in order, each with its :func:`_json_kind`."""
    if len(rows) == 1:  # the common case, without a generator
        if rows[0].keys() <= typed:
            return ()
    elif all(row.keys() <= typed for row in rows):
        return ()
    if len(rows) == 1 and not typed:  # one row, no declared types (Flink's canal-json): in C
        row = rows[0]
        kinds = tuple(map(type, row.values()))
        if list not in kinds:
            return tuple(zip(row, kinds, strict=True))
    names = dict.fromkeys(name for row in rows for name in row if name not in typed)
    return tuple((name, _json_kind(rows, name)) for name in names)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a cached canal schema was built from (see ``CanalJsonDecoder._schema``)."""

    mysql: tuple[tuple[str, Any], ...]
    sql: tuple[tuple[str, Any], ...]
    pk: list[Any]
    typed: frozenset[str]
    untyped: tuple[tuple[str, Any], ...]
    schema: TableSchema

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


def _ints_or_null(types: dict[str, Any]) -> bool:
    """Whether every ``sqlType`` code is an int or null (a bool is not: ``True == 1``)."""
    return all(code is None or type(code) is int for code in types.values())


def _same_items(types: dict[str, Any], items: tuple[tuple[str, Any], ...]) -> bool:
    """Whether ``types`` has ``items``, in their order (the column order is part of a shape;
    dict equality ignores it): ``tuple(types.items()) == items`` without making the tuple."""
    if len(types) != len(items):
        return False
    for i, (name, value) in enumerate(types.items()):
        known_name, known_value = items[i]
        if name != known_name or value != known_value:
            return False
    return True


def _is_zero_date(raw: Any) -> bool:
    return isinstance(raw, str) and raw.startswith("0000-00-00")


# ---------------------------------------------------------------------------------------- decoder


class CanalJsonDecoder(Decoder):
    """Decodes Canal JSON flat messages: one change per ``data`` row, DDL as schema changes."""

    format_id = "canal-json"
    description = "Alibaba Canal JSON (open-source Canal, DTS, Flink canal-json), both DELETE layouts, DDL."
    options_model = CanalJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self._opts = self.options_as(CanalJsonOptions)
        self._zone = ZoneInfo(opts.timestamp_zone)
        self._tables = TableCache()
        # (db, table) -> the schemas last built for it, each with the message shape it was built from
        self._shapes: TableLru[tuple[str | None, str], list[_Shape]] = TableLru(
            lambda _, shapes: sum(len(shape.schema.columns) for shape in shapes)
        )
        # the type maps and column sets of the shapes, shared by the tables that have equal ones
        self._parts: TableLru[Any, Any] = TableLru(lambda part, _: len(part))
        self._plans = RowPlans(self._fast_converter, direct_for=text_direct)

    # -- fields ----------------------------------------------------------------------------

    def _rows(self, doc: Mapping[str, Any], name: str, raw: bytes) -> list[dict[str, Any]] | None:
        value = doc.get(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(name, f"expected an array of row objects, found {type(value).__name__}", raw)
        for i, row in enumerate(value):
            if not isinstance(row, dict):
                raise self.error(f"{name}[{i}]", f"expected a row object, found {type(row).__name__}", raw)
        return value

    def _type_map(self, doc: Mapping[str, Any], name: str, want: type, raw: bytes) -> dict[str, Any]:
        value = doc.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(name, f"expected an object of column types, found {type(value).__name__}", raw)
        for col, t in value.items():
            if t is not None and (not isinstance(t, want) or isinstance(t, bool)):
                raise self.error(f"{name}.{col}", f"expected a {want.__name__} type, found {t!r:.60}", raw)
        return value

    # -- decode ----------------------------------------------------------------------------

    def decode(self, message: Message) -> list[Event]:
        return self.decode_rows(message).strict()

    def decode_rows(self, message: Message) -> Decoded:
        """The message's events; a row whose value does not decode is an error of that row (its
        index in ``data[]``, or ``old[]`` for a legacy DTS delete), and the other rows decode."""
        if message.value is None:
            return Decoded([])
        raw = message.value
        doc = self.load_json(message)
        kind = doc.get("type")
        if not isinstance(kind, str):
            raise self.error("type", f"expected the operation type as a string, found {kind!r}", raw)
        kind = kind.strip().upper()
        is_ddl = doc.get("isDdl")
        if is_ddl is not None and not isinstance(is_ddl, bool):
            raise self.error("isDdl", f"expected a boolean, found {is_ddl!r}", raw)
        database = doc.get("database")
        if database is not None and type(database) is not str:
            database = optional_str(self, doc, "database", raw)  # raises
        table = doc.get("table")
        if table is not None and type(table) is not str:
            table = optional_str(self, doc, "table", raw)  # raises
        es = doc.get("es")
        if es is not None and (type(es) is not int or not INT64_MIN <= es <= INT64_MAX):
            es = optional_int(self, doc, "es", raw)  # a string of digits, or raises
        ts = doc.get("ts")
        if ts is not None and (type(ts) is not int or not INT64_MIN <= ts <= INT64_MAX):
            ts = optional_int(self, doc, "ts", raw)
        fields = self._source_fields(doc, raw)
        if is_ddl or (kind in _DDL_TYPES and not (kind == "QUERY" and is_ddl is False)):
            return Decoded(self._ddl(doc, kind, database, table, es, ts, fields, message, raw))
        if kind in _NO_CHANGE_TYPES or kind == "QUERY":
            return Decoded([])
        op = _OPS.get(kind)
        if op is None:
            known = ", ".join([*_OPS, *_DDL_TYPES])
            raise self.error("type", f"unknown operation {kind!r}; expected one of {known}", raw)
        db, tbl = self._names(database, table, message, raw)
        data = self._rows(doc, "data", raw)
        old = self._rows(doc, "old", raw)
        pairs = self._images(op, data, old, raw)
        if not pairs:
            return Decoded([])
        schema = self._schema(doc, db, tbl, data, old, raw)
        source = SourceInfo(
            connector=self.format_id,
            ts_ms=es,
            snapshot=SnapshotMarker.TRUE if op is Operation.READ else SnapshotMarker.FALSE,
            fields=fields,
        )
        events: list[Event] = []
        errors: list[DecodeError] = []
        plan = self._plans.plan(schema)
        value = self._value
        direct = self.emit_direct  # images in Connect JSON form (ChangeEvent.encoded), both or neither
        for i, (before_raw, after_raw, where) in enumerate(pairs):
            mode = direct
            if mode is not None and op is Operation.UPDATE and not same_key_cells(schema.key, before_raw, after_raw):
                mode = None  # a key change: the emitter compares typed key values (see same_key_cells)
            try:
                before, after, encoded = plan.images(before_raw, after_raw, where, raw, value, mode, i)
            except DecodeError as exc:  # a bad value loses only its own row
                exc.row = i
                errors.append(exc)
                continue
            events.append(ChangeEvent(op, schema, before, after, source, ts_ms=ts, encoded=encoded))
        return Decoded(events, errors)

    def _source_fields(self, doc: Mapping[str, Any], raw: bytes) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        get = doc.get
        for name, key in _SOURCE_FIELDS:
            value = get(name)
            if value is None:
                continue
            kind = type(value)
            if kind is str or (kind is int and INT64_MIN <= value <= INT64_MAX):
                fields[key] = value
            else:  # another int-like, or raises
                fields[key] = optional_scalar(self, doc, name, raw)
        sql = get("sql")
        if sql is not None and type(sql) is not str:
            sql = optional_str(self, doc, "sql", raw)  # raises
        if sql and not get("isDdl"):
            fields["query"] = sql
        return fields

    def _names(
        self, database: str | None, table: str | None, message: Message, raw: bytes
    ) -> tuple[str | None, str]:
        if table:
            return database, table
        default = self._opts.default_table
        if default:
            db, _, tbl = default.rpartition(".")
            return database or db or None, tbl
        if message.topic:
            return database, message.topic
        raise self.error(
            "table", "expected the table name; set the 'default.table' option for messages without one", raw
        )

    def _images(
        self,
        op: Operation,
        data: list[dict[str, Any]] | None,
        old: list[dict[str, Any]] | None,
        raw: bytes,
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None, tuple[str, str]]]:
        """(before, after, (before field, after field)) raw rows per change."""
        if op is Operation.DELETE:
            if data:
                return [(row, None, ("data", "data")) for row in data]
            if old:  # DTS before 2022-03-20: the deleted rows are in `old`, `data` is null
                return [(row, None, ("old", "old")) for row in old]
            if data is None and old is None:
                raise self.error("data", "expected the deleted rows in 'data' (or 'old'), found neither", raw)
            return []
        if data is None:
            raise self.error("data", f"expected the rows of the {op.name} in 'data', found null", raw)
        if op is not Operation.UPDATE:
            return [(None, row, ("data", "data")) for row in data]
        if old is None:
            return [(None, row, ("old", "data")) for row in data]
        if len(old) != len(data):
            raise self.error("old", f"expected {len(data)} rows like 'data', found {len(old)}", raw)
        return [({**row, **prev}, row, ("old", "data")) for row, prev in zip(data, old, strict=True)]

    def _schema(
        self,
        doc: Mapping[str, Any],
        db: str | None,
        table: str,
        data: list[dict[str, Any]] | None,
        old: list[dict[str, Any]] | None,
        raw: bytes,
    ) -> TableSchema:
        """The table schema of a message, cached per table with the shapes it was built from.

        A message has the cached schema when its type maps (in order) and key are equal to the
        cached ones (compared, not hashed), its sqlType codes are ints (``True == 1`` must not
        match), and its rows have the cached columns: every row's names among the typed ones,
        or, for columns without a declared type, the same JSON types of their first values.
        """
        mysql = doc.get("mysqlType") or {}
        sql = doc.get("sqlType") or {}
        pk = doc.get("pkNames") or []
        if type(mysql) is dict and type(sql) is dict and _ints_or_null(sql):
            rows = (data or []) if old is None else [*(data or ()), *old]
            shapes = self._shapes.get((db, table)) or []
            typed: frozenset[str] | None = None
            untyped: tuple[tuple[str, Any], ...] = ()
            for shape in shapes:
                if _same_items(mysql, shape.mysql) and _same_items(sql, shape.sql) and shape.pk == pk:
                    if typed is None or shape.typed != typed:  # shapes of one table mostly share it
                        typed = shape.typed
                        untyped = _untyped(rows, typed)
                    if shape.untyped == untyped:
                        return shape.schema
            schema, by_shape = self._build_schema(doc, db, table, data, old, raw)
            if by_shape:
                names = frozenset(mysql) | frozenset(sql)
                if len(shapes) >= _SHAPES_PER_TABLE:
                    del shapes[0]  # the oldest
                # items as tuples: the column order is part of the shape (dict equality ignores it)
                mysql_items, sql_items, names = (
                    self._shared(tuple(mysql.items())),
                    self._shared(tuple(sql.items())),
                    self._shared(names),
                )
                shapes.append(_Shape(mysql_items, sql_items, pk, names, _untyped(rows, names), schema))
                self._shapes.put((db, table), shapes)  # (again: its weight grew)
            return schema
        return self._build_schema(doc, db, table, data, old, raw)[0]

    def _shared(self, part: _P) -> _P:
        """``part`` itself, or an equal one a shape of another table already holds."""
        return cast("_P", self._parts.get_or_make(part, lambda: part))

    def _build_schema(
        self,
        doc: Mapping[str, Any],
        db: str | None,
        table: str,
        data: list[dict[str, Any]] | None,
        old: list[dict[str, Any]] | None,
        raw: bytes,
    ) -> tuple[TableSchema, bool]:
        """The table schema of a message, and whether its shape determines it (false when a declared
        type is unknown and its column is inferred from the values)."""
        mysql_types = self._type_map(doc, "mysqlType", str, raw)
        sql_types = self._type_map(doc, "sqlType", int, raw)
        pk = doc.get("pkNames")
        if pk is None:
            pk = []
        if not isinstance(pk, list) or not all(isinstance(k, str) for k in pk):
            raise self.error("pkNames", f"expected an array of column names, found {pk!r}", raw)
        names: dict[str, None] = dict.fromkeys(mysql_types)
        names.update(dict.fromkeys(sql_types))
        rows = [*(data or ()), *(old or ())]
        for row in rows:
            names.update(dict.fromkeys(row))
        mode = self._opts.bigint_unsigned_handling_mode
        columns = []
        by_shape = True
        for name in names:
            try:
                col = column_for_type(name, mysql_types.get(name), sql_types.get(name), mode)
            except ValueError as exc:
                raise caused_by(self.error(f"mysqlType.{name}", str(exc), raw), exc) from exc
            if col is None:
                sample = next((row[name] for row in rows if row.get(name) is not None), None)
                col = infer_column(name, sample)
                by_shape = by_shape and name not in mysql_types and name not in sql_types
            columns.append(col)
        return self._tables.intern(TableSchema(db, None, table, tuple(columns), tuple(pk))), by_shape

    @staticmethod
    def _fast_converter(col: Column) -> FastConverter | None:
        """What :meth:`_value` does for a cell, where that is a plain conversion (see rowplan)."""
        logical = col.logical
        if logical in (Logical.ZONED_TIMESTAMP, Logical.ENUM, Logical.ENUM_SET, Logical.GEOMETRY, Logical.BITS):
            return None
        if col.type is ConnectType.INT64 and logical is None:
            # within int64 a value is itself; a BIGINT UNSIGNED one above it _value wraps
            return int_converter(INT64_MIN, INT64_MAX + 1)
        # zero dates ('0000-00-00 ...', null in _value) fail the fast date parsers: year 0 is invalid.
        # BOOLEAN's fast converter takes only JSON booleans, so '\x00'/'\x01' reach _value.
        return fast_converter(col)

    def _value(self, col: Column, value: Any, field: str, raw: bytes | str | None) -> Any:
        if value is None:
            return None
        logical = col.logical
        try:
            if logical in (Logical.DATE, Logical.TIMESTAMP, Logical.MICRO_TIMESTAMP, Logical.ZONED_TIMESTAMP):
                if _is_zero_date(value):
                    return None
                if logical == Logical.ZONED_TIMESTAMP and isinstance(value, str):
                    parsed = parse_datetime(value)
                    if parsed.tzinfo is None:
                        parsed = parsed.replace(tzinfo=self._zone)
                    return parsed.astimezone(dt.UTC)
            elif logical == Logical.ENUM:
                return _enum_label(value, col.param_map.get("allowed", ""))
            elif logical == Logical.ENUM_SET:
                return _set_labels(value, col.param_map.get("allowed", ""))
            elif logical == Logical.GEOMETRY:
                return _geometry(value)
            elif logical == Logical.BITS:
                return _bits(value, int(col.param_map.get("length", "1")))
            elif col.type is ConnectType.BOOLEAN and isinstance(value, str) and value in ("\x00", "\x01"):
                return value == "\x01"
            elif col.type is ConnectType.INT64 and logical is None:
                # 2^63..2^64-1 can only be a BIGINT UNSIGNED value (long mode, an unsigned column
                # known by its sqlType only, a JSON number): wrapped as Debezium's long mode does
                value = wrap_unsigned_bigint(value)
        except CoercionError as exc:
            raise caused_by(self.error(field, str(exc), raw), exc) from exc
        except (ArithmeticError, ValueError) as bad:  # a year beyond C long, an offset past year 1 ...
            error = self.error(field, f"value {value!r:.60} is out of range: {bad}", raw)
            raise caused_by(error, bad) from bad
        return self.coerce(col, value, field, raw)

    def _ddl(
        self,
        doc: Mapping[str, Any],
        kind: str,
        database: str | None,
        table: str | None,
        es: int | None,
        ts: int | None,
        fields: dict[str, Any],
        message: Message,
        raw: bytes,
    ) -> list[Event]:
        sql = optional_str(self, doc, "sql", raw)
        change_type = _DDL_TYPES.get(kind, "ALTER")
        if kind in ("DDL", "QUERY") and sql:
            change_type = _ddl_change_type(sql) or change_type
        source = SourceInfo(connector=self.format_id, ts_ms=es, fields=fields)
        events: list[Event] = [SchemaChangeEvent(database, None, table, sql, source, change_type, ts_ms=ts)]
        if kind == "TRUNCATE":
            db, tbl = self._names(database, table, message, raw)
            schema = self._schema(doc, db, tbl, None, None, raw)
            events.append(ChangeEvent(Operation.TRUNCATE, schema, None, None, source, ts_ms=ts))
        return events


def _enum_label(value: Any, allowed: str) -> str:
    """Canal/DTS may write an ENUM as its 1-based index; map it back to the label."""
    labels = allowed.split(",") if allowed else []
    text = str(value)
    if text in labels or not labels:
        return text
    index = parse_int(text)
    if index is not None and index >= 0:
        if index == 0:
            return ""
        if index <= len(labels):
            return labels[index - 1]
    raise CoercionError(f"expected one of the ENUM values {allowed!r:.80} or an index, found {value!r:.60}")


def _set_labels(value: Any, allowed: str) -> str:
    """Canal/DTS may write a SET as its bitmask; map it back to the comma-joined labels."""
    labels = allowed.split(",") if allowed else []
    text = str(value)
    if not labels or text == "" or all(part in labels for part in text.split(",")):
        return text
    mask = parse_int(text)
    if mask is not None and mask >= 0:
        if mask >> len(labels):
            raise CoercionError(f"SET bitmask {mask} has bits beyond the {len(labels)} values {allowed!r}")
        return ",".join(label for i, label in enumerate(labels) if mask >> i & 1)
    raise CoercionError(f"expected values of the SET {allowed!r:.80} or a bitmask, found {value!r:.60}")


def _latin1(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise CoercionError(f"expected binary data as a latin-1 string, found {value!r}")
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError as exc:
        error = CoercionError(f"expected binary data as a latin-1 string, found {value[:40]!r}")
        raise caused_by(error, exc) from exc


def _geometry(value: Any) -> dict[str, Any]:
    """MySQL's internal geometry (4-byte little-endian SRID + WKB) as Debezium's Geometry struct."""
    data = _latin1(value)
    if len(data) < 9:
        raise CoercionError(f"expected MySQL geometry bytes (SRID + WKB), found {len(data)} bytes")
    return {"wkb": data[4:], "srid": int.from_bytes(data[:4], "little")}


def _bits(value: Any, length: int) -> bytes:
    """A BIT(n) value as Debezium's little-endian bytes; Canal writes it as a number."""
    size = (length + 7) // 8
    number = parse_int(value) if not isinstance(value, str) or value.isdigit() else None
    if number is None:
        return _latin1(value)
    if number < 0 or number.bit_length() > length:
        raise CoercionError(f"expected a BIT({length}) value, found {value!r:.60}")
    return number.to_bytes(size, "little")
