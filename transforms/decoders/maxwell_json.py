"""Maxwell's daemon JSON (``maxwell-json``): one MySQL row change or DDL statement per message.

A row message names ``database``/``table``, a ``type`` (``insert``, ``update``, ``delete``,
``bootstrap-insert``) and the full row in ``data``; an update also carries ``old``, the previous
values of the changed columns only, so the before-image is ``data`` overlaid with ``old``.
``ts`` is the commit time in seconds, ``xid``/``xoffset``/``commit`` place the row in its
transaction and ``position`` (``binlog-file:offset``) in the binlog. Key columns come from
``primary_key_columns`` or, failing that, from Maxwell's Kafka key (``{"pk.id": 1, ...}`` or
``["db", "table", [{"id": 1}]]``). DDL messages (``table-create``, ``table-alter``,
``database-drop`` ...) become schema-change events; their ``ts`` is in milliseconds.

Row values are typed JSON values; their Connect types are inferred from them (Maxwell row
messages carry no column types). The ``def`` of a DDL message (the table after the change) names
MySQL column types (``{"type": "smallint", "signed": false}``, ``"column-length"`` for the
fraction digits of time types, ``"enum-values"``); they are mapped by
:mod:`transforms.decoders.mysql_types`, the mapping every MySQL-typed format shares.

``bigint.unsigned.handling.mode``: ``precise`` (default) types a BIGINT UNSIGNED ``def`` column
as Decimal(20,0); ``long`` types it int64 and also wraps a row value in 2^63..2^64-1 (only a
BIGINT UNSIGNED value can be one) to its two's complement, as Debezium's long mode does, so it
stays an int64 where precise mode infers an exact Decimal. The BIGINT UNSIGNED columns a ``def``
names are remembered per table (metadata store namespace ``maxwell-json.bigint-unsigned``, key
``["db", "table"]`` as JSON; a ``table-drop`` forgets them), and in precise mode the rows of that
table type them as Decimal(20,0) from the first value on, as Debezium does, instead of int64
until a value passes 2^63-1.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import orjson

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, Message, check_decimal_params, type_name
from transforms.decoders.cache import TableLru
from transforms.decoders.fields import (
    INT64_MAX,
    duplicate,
    optional_int,
    optional_str,
    required_str,
    string_list,
)
from transforms.decoders.mysql_types import (
    BigintUnsignedHandlingMode,
    MySqlType,
    MySqlTypeOptions,
    mysql_column,
    wrap_unsigned_bigint,
)
from transforms.decoders.schemaless_json import SchemalessShapes, table_schema
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
    TransactionRef,
)
from transforms.errors import DecodeError
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions

__all__ = ["MaxwellJsonDecoder", "MaxwellJsonOptions"]

_ROW_OPS = {
    "insert": Operation.CREATE,
    "update": Operation.UPDATE,
    "delete": Operation.DELETE,
    "bootstrap-insert": Operation.READ,
}
_DDL_CHANGE = {
    "database-create": "CREATE",
    "database-alter": "ALTER",
    "database-drop": "DROP",
    "table-create": "CREATE",
    "table-alter": "ALTER",
    "table-drop": "DROP",
}
_MARKERS = frozenset({"bootstrap-start", "bootstrap-complete", "heartbeat"})
_POSITION_RE = re.compile(r"^(?P<file>[^:]+):(?P<pos>[0-9]{1,19})$")
# bounded digit run: an unbounded \d+ after a lazy prefix is quadratic on long digit strings
_FILE_INDEX_RE = re.compile(r"^(?P<base>.*?)(?P<index>[0-9]{1,18})$")
_MAX_TS_SECONDS = INT64_MAX // 1000

# def types whose "column-length" is the type's argument (fraction digits; a BIT's length)
_LENGTH_ARG_TYPES = frozenset({"datetime", "timestamp", "time", "bit"})
_UNSIGNED_NAMESPACE = "maxwell-json.bigint-unsigned"
_UNSIGNED_TYPE = "bigint unsigned"


class MaxwellJsonOptions(MySqlTypeOptions):
    """Options of the ``maxwell-json`` format (``bigint.unsigned.handling.mode`` as every MySQL-typed format)."""


def _has_unsigned_bigint(image: dict[str, Any]) -> bool:
    """Whether a row image holds an integer above int64 (a BIGINT UNSIGNED value, in long mode)."""
    return any(type(v) is int and v > INT64_MAX for v in image.values())


def _wrapped(image: dict[str, Any]) -> dict[str, Any]:
    return {k: wrap_unsigned_bigint(v) if type(v) is int else v for k, v in image.items()}


def _table_key(db: str | None, table: str) -> str:
    return orjson.dumps([db, table]).decode()


def _integral(col: Column) -> bool:
    """Whether an inferred column holds integers only: int64, or a scale-0 Decimal (beyond int64)."""
    if col.logical is None:
        return col.type is ConnectType.INT64
    return col.logical == Logical.DECIMAL and col.scale == 0 and col.precision != 20


def _as_unsigned_decimals(
    schema: TableSchema, names: frozenset[str], *images: dict[str, Any] | None
) -> TableSchema:
    """``schema`` with the integer columns among ``names`` (a def's BIGINT UNSIGNED columns) as
    Decimal(20,0), and their values in ``images`` (typed, changed in place) as decimals."""
    changed = {c.name for c in schema.columns if c.name in names and _integral(c)}
    if not changed:
        return schema
    columns = tuple(
        Column.decimal(c.name, 20, 0, c.optional, source_type=_UNSIGNED_TYPE) if c.name in changed else c
        for c in schema.columns
    )
    for image in images:
        if image is None:
            continue
        for name in changed:
            value = image.get(name)
            if type(value) is int:
                image[name] = Decimal(value)
    return table_schema(schema.db, schema.schema, schema.table, columns, schema.key)


class MaxwellJsonDecoder(Decoder):
    """Decodes Maxwell's daemon JSON row and DDL messages."""

    format_id = "maxwell-json"
    description = "Maxwell's daemon JSON (rows with data/old, DDL with def)"
    options_model = MaxwellJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self._unsigned_mode = self.options_as(MaxwellJsonOptions).bigint_unsigned_handling_mode
        self._shapes = SchemalessShapes(store=self.metadata)
        # (db, table) -> the BIGINT UNSIGNED columns of its last def (mirrors the metadata store)
        # (bounded by the table budget, transforms.table_budget)
        self._unsigned_columns: TableLru[tuple[str | None, str], frozenset[str]] = TableLru(
            lambda _, names: len(names)
        )

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        doc = self.load_json(message)
        payload = message.value
        kind = required_str(self, doc, "type", payload)
        if kind in _ROW_OPS:
            return [self._row(doc, _ROW_OPS[kind], message, payload)]
        if kind in _DDL_CHANGE:
            return [self._ddl(doc, _DDL_CHANGE[kind], payload)]
        if kind in _MARKERS:
            return []
        raise self.error(
            "type", f"unknown type {kind!r}; expected one of {', '.join([*_ROW_OPS, *_DDL_CHANGE])}", payload
        )

    def _kafka_key(self, key: bytes | None) -> Any:
        """The parsed Kafka key, or ``None`` when there is none or it is not JSON within the limits."""
        if not key:
            return None
        try:
            return self.load_embedded_json(key, "key", key)
        except DecodeError:
            return None

    # -- rows ----------------------------------------------------------------------

    def _row(self, doc: dict[str, Any], op: Operation, message: Message, payload: bytes) -> ChangeEvent:
        database = optional_str(self, doc, "database", payload, required=True)
        table = required_str(self, doc, "table", payload)
        data = doc.get("data")
        if not isinstance(data, dict):
            raise self.error("data", f"expected an object with the row, found {type_name(data)}", payload)
        old = doc.get("old")
        if old is not None and not isinstance(old, dict):
            raise self.error("old", f"expected an object of previous values, found {type_name(old)}", payload)
        if self._unsigned_mode is BigintUnsignedHandlingMode.LONG:
            if _has_unsigned_bigint(data):
                data = _wrapped(data)
            if old and _has_unsigned_bigint(old):
                old = _wrapped(old)

        before: dict[str, Any] | None = None
        after: dict[str, Any] | None = data
        if op is Operation.UPDATE:
            before = {**data, **(old or {})}
        elif op is Operation.DELETE:
            before, after = data, None

        shape = self._shapes.infer(after, before)
        key = self._key_columns(doc, message, data, payload)
        schema = self._shapes.table(shape, database, None, table, key)
        ts = optional_int(self, doc, "ts", payload)
        if ts is not None and abs(ts) > _MAX_TS_SECONDS:
            raise self.error("ts", f"expected epoch seconds, found {ts}", payload)
        typed_before = shape.typed(self, 1, before, "old" if op is Operation.UPDATE else "data", payload)
        typed_after = shape.typed(self, 0, after, "data", payload)
        if self._unsigned_mode is BigintUnsignedHandlingMode.PRECISE:
            unsigned = self._bigint_unsigned(database, table)
            if unsigned:
                schema = _as_unsigned_decimals(schema, unsigned, typed_before, typed_after)
        return ChangeEvent(
            op=op,
            table=schema,
            before=typed_before,
            after=typed_after,
            source=self._source(doc, ts * 1000 if ts is not None else None, op is Operation.READ, payload),
            transaction=self._transaction(doc, payload),
        )

    # -- BIGINT UNSIGNED columns known from DDL defs ----------------------------------

    def _bigint_unsigned(self, db: str | None, table: str) -> frozenset[str]:
        """The BIGINT UNSIGNED columns of the table's last def (empty when none is known)."""
        slot = (db, table)
        known = self._unsigned_columns.get(slot)
        if known is None:
            stored = self.metadata.get(_UNSIGNED_NAMESPACE, _table_key(db, table))
            names = stored if isinstance(stored, list) else []
            known = frozenset(n for n in names if isinstance(n, str))
            self._remember_unsigned(slot, known)
        return known

    def _remember_unsigned(self, slot: tuple[str | None, str], names: frozenset[str]) -> None:
        self._unsigned_columns.put(slot, names)

    def _learn_unsigned(self, db: str | None, table: str, names: frozenset[str]) -> None:
        """Store the BIGINT UNSIGNED columns of a table's new def (empty: the table was dropped)."""
        if self._bigint_unsigned(db, table) != names:
            self.metadata.put(_UNSIGNED_NAMESPACE, _table_key(db, table), sorted(names))
            self._remember_unsigned((db, table), names)

    def _key_columns(
        self, doc: dict[str, Any], message: Message, data: dict[str, Any], payload: bytes
    ) -> tuple[str, ...]:
        names = string_list(self, doc, "primary_key_columns", payload)
        if names is None:
            return _key_from_kafka_key(self._kafka_key(message.key), data)
        missing = [n for n in names if n not in data]
        if missing:
            raise self.error("primary_key_columns", f"key column(s) {missing} not in data", payload)
        return names

    def _transaction(self, doc: dict[str, Any], payload: bytes) -> TransactionRef | None:
        raw = doc.get("xid")
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise self.error("xid", f"expected a transaction id, found {raw!r}", payload)
        xoffset = optional_int(self, doc, "xoffset", payload)
        # xoffset counts rows within the transaction from 0; Maxwell leaves it off the commit row
        return TransactionRef(str(raw), xoffset + 1 if xoffset is not None else None)

    def _source(self, doc: dict[str, Any], ts_ms: int | None, snapshot: bool, payload: bytes) -> SourceInfo:
        fields: dict[str, Any] = {}
        sequence: str | None = None
        position = optional_str(self, doc, "position", payload)
        if position is not None:
            match = _POSITION_RE.match(position)
            if match is None:
                raise self.error("position", f"expected 'binlog-file:offset', found {position!r}", payload)
            file, pos = match["file"], int(match["pos"])
            fields["file"], fields["pos"] = file, pos
            index = _FILE_INDEX_RE.match(file)
            sequence = f"{int(index['index']):010d}:{pos:020d}" if index else f"{file}:{pos:020d}"
        for name in ("xid", "xoffset", "server_id", "thread_id"):
            value = optional_int(self, doc, name, payload)
            if value is not None:
                fields[name] = value
        commit = doc.get("commit")
        if commit is not None:
            if not isinstance(commit, bool):
                raise self.error("commit", f"expected true or false, found {commit!r}", payload)
            fields["commit"] = commit
        for name in ("gtid", "query"):
            text = optional_str(self, doc, name, payload)
            if text is not None:
                fields[name] = text
        return SourceInfo(
            connector=self.format_id,
            ts_ms=ts_ms,
            snapshot=SnapshotMarker.TRUE if snapshot else SnapshotMarker.FALSE,
            sequence=sequence,
            fields=fields,
        )

    # -- DDL -----------------------------------------------------------------------

    def _ddl(self, doc: dict[str, Any], change_type: str, payload: bytes) -> SchemaChangeEvent:
        database = optional_str(self, doc, "database", payload, required=True)
        is_table = "table" in str(doc.get("type"))
        table = optional_str(self, doc, "table", payload, required=is_table)
        sql = optional_str(self, doc, "sql", payload)
        definition = doc.get("def")
        new_table: TableSchema | None = None
        if definition is not None:
            if not isinstance(definition, dict):
                raise self.error(
                    "def", f"expected a table definition object, found {type_name(definition)}", payload
                )
            if is_table:
                new_table = self._table_def(definition, database, table, payload)
        if new_table is not None and new_table.table:
            unsigned = frozenset(c.name for c in new_table.columns if c.source_type == _UNSIGNED_TYPE)
            self._learn_unsigned(new_table.db, new_table.table, unsigned)
        elif change_type == "DROP" and is_table and table:
            self._learn_unsigned(database, table, frozenset())
        if is_table and table and change_type in ("CREATE", "DROP"):  # a new table: typed afresh
            self._shapes.memory.forget((database, None, table))
        ts_ms = optional_int(self, doc, "ts", payload)
        return SchemaChangeEvent(
            db=database,
            schema=None,
            table=table,
            ddl=sql,
            source=self._source(doc, ts_ms, False, payload),
            change_type=change_type,
            new_table=new_table,
        )

    def _table_def(
        self, definition: dict[str, Any], database: str | None, table: str | None, payload: bytes
    ) -> TableSchema:
        raw_columns = definition.get("columns")
        if not isinstance(raw_columns, list):
            raise self.error(
                "def.columns", f"expected a list of columns, found {type_name(raw_columns)}", payload
            )
        columns: list[Column] = []
        for i, raw in enumerate(raw_columns):
            where = f"def.columns[{i}]."
            if not isinstance(raw, dict):
                raise self.error(where[:-1], f"expected a column object, found {type_name(raw)}", payload)
            name = required_str(self, raw, "name", payload, where=where)
            kind = required_str(self, raw, "type", payload, where=where)
            columns.append(self._def_column(name, kind.lower(), raw, where, payload))
        twice = duplicate(c.name for c in columns)
        if twice is not None:
            raise self.error("def.columns", f"column {twice!r} is listed twice", payload)
        key = string_list(self, definition, "primary-key", payload, where="def.") or ()
        db = optional_str(self, definition, "database", payload, where="def.") or database
        name = optional_str(self, definition, "table", payload, where="def.") or table or ""
        return TableSchema(db, None, name, tuple(columns), key)

    def _def_column(self, name: str, kind: str, raw: dict[str, Any], where: str, payload: bytes) -> Column:
        """A Maxwell column definition as a Debezium-style Connect column (see ``mysql_types``)."""
        unsigned = raw.get("signed", True) is False
        length = optional_int(self, raw, "column-length", payload, where=where)
        precision = optional_int(self, raw, "precision", payload, where=where)
        scale = optional_int(self, raw, "scale", payload, where=where)
        labels = string_list(self, raw, "enum-values", payload, where=where) or ()
        args: tuple[int, ...] = ()
        if kind in _LENGTH_ARG_TYPES and length is not None:
            args = (length,)
        elif kind in ("decimal", "numeric") and precision is not None:
            args = (precision,) if scale is None else (precision, scale)
        source_type = f"{kind} unsigned" if unsigned else kind
        mysql_type = MySqlType(kind, args, unsigned, labels, source_type)
        try:
            if any(a < 0 for a in args):
                raise ValueError(f"expected non-negative sizes, found {args}")
            if kind in ("decimal", "numeric") and precision is None and scale is not None:
                check_decimal_params(None, scale)
                return Column.decimal(name, None, scale, source_type=source_type)
            col = mysql_column(name, mysql_type, self._unsigned_mode)
        except ValueError as exc:
            raise self.error(where[:-1], str(exc), payload) from exc
        return col if col is not None else Column(name, ConnectType.STRING, source_type=source_type)


def _key_from_kafka_key(parsed: Any, data: dict[str, Any]) -> tuple[str, ...]:
    """Key column names from Maxwell's Kafka key (hash or array format), matched to ``data``.

    Maxwell lower-cases the names in its key; they are matched to the row's columns ignoring
    case. A key that does not parse or does not match the row gives no key columns.
    """
    names: list[str] = []
    if isinstance(parsed, dict):
        names = [k[3:] for k in parsed if isinstance(k, str) and k.startswith("pk.")]
    elif isinstance(parsed, list) and len(parsed) == 3 and isinstance(parsed[2], list):
        names = [k for item in parsed[2] if isinstance(item, dict) for k in item]
    by_lower = {c.lower(): c for c in data}
    resolved = tuple(by_lower.get(n.lower(), "") for n in names)
    return resolved if resolved and all(resolved) else ()

