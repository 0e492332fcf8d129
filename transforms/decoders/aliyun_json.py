"""Alibaba Cloud DataWorks real-time sync JSON for Kafka (``aliyun-json``).

Each message is ``{"schema": {...}, "payload": {...}, "version": ...}``. ``schema.dataColumn``
lists the columns with DataWorks types (``LONG``, ``DOUBLE``, ``STRING``, ``BOOLEAN``, ``BYTES``
as base64, ``DATE`` as epoch milliseconds), ``schema.primaryKey`` the key and ``schema.source``
the ``dbName``/``schemaName``/``tableName``. ``payload.op`` is ``INSERT``, ``UPDATE_BEFORE``,
``UPDATE_AFTER``, ``DELETE``, a DDL kind (``CREATE``, ``ALTER``, ``ERASE``, ``RENAME``, ``TRUNCATE``,
``CINDEX``, ``DINDEX`` with the statement in ``payload.ddl``) or a marker (``MHEARTBEAT``,
``TRANSACTION_BEGIN``/``_END`` ...). Row images sit in ``payload.before/after.dataColumn``;
``payload.timestamp.eventTime`` is the source change time and ``systemTime`` when the sync task
handled it, both in ms (``-1`` when unknown, as for full-load rows), and ``payload.sequenceId``
orders the records.

An update arrives as ``UPDATE_BEFORE`` then ``UPDATE_AFTER``, or as one ``UPDATE_AFTER`` that
carries both images. ``UPDATE_BEFORE`` alone is not a change and yields nothing; the update is
emitted from its ``UPDATE_AFTER``, with a before-image when that message has one.
"""

from __future__ import annotations

from typing import Any

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, Message, type_name
from transforms.decoders.cache import TableLru
from transforms.decoders.fields import (
    duplicate,
    optional_int,
    optional_scalar,
    optional_str,
    padded_sequence,
    required_str,
    string_list,
)
from transforms.decoders.rowplan import FastConverter, NotFast, RowPlans, fast_converter
from transforms.decoders.schemaless_json import table_schema
from transforms.envelope import ChangeEvent, Event, Operation, SchemaChangeEvent, SourceInfo
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.values import CoercionError, b64decode

__all__ = ["AliyunJsonDecoder"]

_ROW_OPS = {
    "INSERT": Operation.CREATE,
    "UPDATE_AFTER": Operation.UPDATE,
    "DELETE": Operation.DELETE,
    "TRUNCATE": Operation.TRUNCATE,
}
_DDL_CHANGE = {
    "CREATE": "CREATE",
    "ALTER": "ALTER",
    "ERASE": "DROP",
    "RENAME": "ALTER",
    "CINDEX": "ALTER",
    "DINDEX": "ALTER",
}
_NO_CHANGE = frozenset(
    {
        "UPDATE_BEFORE",
        "MHEARTBEAT",
        "TRANSACTION_BEGIN",
        "TRANSACTION_END",
        "GTID",
        "XACOMMIT",
        "XAROLLBACK",
        "QUERY",
    }
)
_TYPES: dict[str, tuple[ConnectType, str | None]] = {
    "LONG": (ConnectType.INT64, None),
    "DOUBLE": (ConnectType.FLOAT64, None),
    "STRING": (ConnectType.STRING, None),
    "BOOLEAN": (ConnectType.BOOLEAN, None),
    "BYTES": (ConnectType.BYTES, None),
    "DATE": (ConnectType.INT64, Logical.TIMESTAMP),
}


class AliyunJsonDecoder(Decoder):
    """Decodes DataWorks (Alibaba Cloud) real-time sync JSON messages."""

    format_id = "aliyun-json"
    description = "Alibaba Cloud DataWorks sync JSON (schema.dataColumn + payload before/after/op)"

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        # schema.dataColumn as (name, type) pairs -> (columns, their names); see _columns
        # (both bounded by the table budget, transforms.table_budget)
        self._column_sets: TableLru[
            tuple[tuple[Any, Any], ...], tuple[tuple[Column, ...], frozenset[str]]
        ] = TableLru(lambda key, _: len(key))
        # (dataColumn pairs, db, schema, table, key) -> table schema
        self._tables: TableLru[tuple[Any, ...], TableSchema] = TableLru(
            lambda slot, _: len(slot[0]) + len(slot[4])
        )
        self._plans = RowPlans(_fast_converter)

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        doc = self.load_json(message)
        payload = message.value
        body = doc.get("payload")
        if not isinstance(body, dict):
            raise self.error("payload", f"expected an object, found {type_name(body)}", payload)
        op_name = required_str(self, body, "op", payload, where="payload.")
        if op_name in _NO_CHANGE:
            return []
        if op_name not in _ROW_OPS and op_name not in _DDL_CHANGE:
            known = ", ".join([*_ROW_OPS, *_DDL_CHANGE, *sorted(_NO_CHANGE)])
            raise self.error("payload.op", f"unknown op {op_name!r}; expected one of {known}", payload)
        schema = doc.get("schema")
        if not isinstance(schema, dict):
            raise self.error("schema", f"expected an object, found {type_name(schema)}", payload)
        source_doc = schema.get("source")
        if not isinstance(source_doc, dict):
            raise self.error("schema.source", f"expected an object, found {type_name(source_doc)}", payload)
        db = optional_str(self, source_doc, "dbName", payload, where="schema.source.") or None
        schema_name = optional_str(self, source_doc, "schemaName", payload, where="schema.source.") or None
        table = required_str(self, source_doc, "tableName", payload, where="schema.source.")
        source, event_ts = self._source(body, source_doc, payload)

        if op_name in _DDL_CHANGE:
            return [
                SchemaChangeEvent(
                    db=db,
                    schema=schema_name,
                    table=table,
                    ddl=optional_str(self, body, "ddl", payload, where="payload."),
                    source=source,
                    change_type=_DDL_CHANGE[op_name],
                    ts_ms=event_ts,
                )
            ]
        op = _ROW_OPS[op_name]
        pairs, columns, names = self._columns(schema, payload)
        key = string_list(self, schema, "primaryKey", payload, where="schema.") or ()
        table_schema = self._table(pairs, db, schema_name, table, columns, key)
        before = self._image(body, "before", table_schema, names, payload)
        after = self._image(body, "after", table_schema, names, payload)
        if op is Operation.CREATE:
            before = None
            if after is None:
                raise self.error("payload.after", "an INSERT needs an after image", payload)
        elif op is Operation.UPDATE:
            if after is None:
                raise self.error("payload.after", "an UPDATE_AFTER needs an after image", payload)
        elif op is Operation.DELETE:
            after = None
            if before is None:
                raise self.error("payload.before", "a DELETE needs a before image", payload)
        else:
            before = after = None
        return [
            ChangeEvent(
                op=op,
                table=table_schema,
                before=before,
                after=after,
                source=source,
                ts_ms=event_ts,
            )
        ]

    def _columns(
        self, schema: dict[str, Any], payload: bytes
    ) -> tuple[tuple[tuple[Any, Any], ...] | None, tuple[Column, ...], frozenset[str]]:
        """``schema.dataColumn``'s (name, type) pairs (None when they are not all there), columns
        and column names. The columns depend on the pairs alone, so they are cached by them: a
        cached entry was built from non-empty string names and types, which only equal strings."""
        raw = schema.get("dataColumn")
        pairs: tuple[tuple[Any, Any], ...] | None = None
        if type(raw) is list:
            try:
                pairs = tuple([(spec["name"], spec["type"]) for spec in raw])
                hit = self._column_sets.get(pairs)
            except (TypeError, KeyError):  # not column objects, or a list where a name belongs
                pairs = hit = None
            if hit is not None:
                return pairs, *hit
        columns = self._build_columns(raw, payload)
        names = frozenset(c.name for c in columns)
        if pairs is not None:
            self._column_sets.put(pairs, (columns, names))
        return pairs, columns, names

    def _build_columns(self, raw: Any, payload: bytes) -> tuple[Column, ...]:
        if not isinstance(raw, list):
            raise self.error("schema.dataColumn", f"expected a list of columns, found {type_name(raw)}", payload)
        columns = []
        for i, spec in enumerate(raw):
            where = f"schema.dataColumn[{i}]."
            if not isinstance(spec, dict):
                raise self.error(where[:-1], f"expected a column object, found {type_name(spec)}", payload)
            name = required_str(self, spec, "name", payload, where=where)
            kind = required_str(self, spec, "type", payload, where=where).upper()
            ctype, logical = _TYPES.get(kind, (ConnectType.STRING, None))
            columns.append(Column(name, ctype, logical=logical, source_type=kind))
        twice = duplicate(c.name for c in columns)
        if twice is not None:
            raise self.error("schema.dataColumn", f"column {twice!r} is listed twice", payload)
        return tuple(columns)

    def _table(
        self,
        pairs: tuple[tuple[Any, Any], ...] | None,
        db: str | None,
        schema: str | None,
        table: str,
        columns: tuple[Column, ...],
        key: tuple[str, ...],
    ) -> TableSchema:
        if pairs is None:
            return table_schema(db, schema, table, columns, key)
        slot = (pairs, db, schema, table, key)
        cached = self._tables.get(slot)
        if cached is None:
            cached = table_schema(db, schema, table, columns, key)
            self._tables.put(slot, cached)
        return cached

    def _image(
        self, body: dict[str, Any], name: str, table: TableSchema, names: frozenset[str], payload: bytes
    ) -> dict[str, Any] | None:
        raw = body.get(name)
        if raw is None:
            return None
        field = f"payload.{name}.dataColumn"
        values = raw.get("dataColumn") if isinstance(raw, dict) else None
        if not isinstance(values, dict):
            raise self.error(field, f"expected an object of column values, found {type_name(values)}", payload)
        if not values.keys() <= names:
            unknown = [k for k in values if k not in names]
            raise self.error(field, f"column(s) {unknown[:10]} not in schema.dataColumn", payload)
        return self._plans.plan(table).typed(values, field, payload, self._value)

    def _value(self, col: Column, value: Any, field: str, payload: bytes | str | None) -> Any:
        """BYTES columns hold base64 text; other values are coerced."""
        if col.type is ConnectType.BYTES and isinstance(value, str):
            try:
                return b64decode(value)
            except CoercionError as exc:
                raise self.error(field, str(exc), payload) from exc
        return self.coerce(col, value, field, payload)

    def _source(
        self, body: dict[str, Any], source_doc: dict[str, Any], payload: bytes
    ) -> tuple[SourceInfo, int | None]:
        """The source block and the sync task's processing time (ms)."""
        times = body.get("timestamp")
        if times is not None and not isinstance(times, dict):
            raise self.error("payload.timestamp", f"expected an object, found {type_name(times)}", payload)
        times = times or {}
        event_time = optional_int(self, times, "eventTime", payload, where="payload.timestamp.")
        system_time = optional_int(self, times, "systemTime", payload, where="payload.timestamp.")
        checkpoint = optional_int(self, times, "checkpointTime", payload, where="payload.timestamp.")
        fields: dict[str, Any] = {}
        sequence_id = optional_scalar(self, body, "sequenceId", payload, where="payload.")
        sequence: str | None = None
        if sequence_id is not None:
            fields["sequence_id"] = str(sequence_id)
            sequence = padded_sequence(sequence_id, 24)
        if checkpoint is not None and checkpoint > 0:
            fields["checkpoint_time"] = checkpoint
        for name, stable in (("dbType", "db_type"), ("dbVersion", "db_version")):
            text = optional_str(self, source_doc, name, payload, where="schema.source.")
            if text:
                fields[stable] = text
        source = SourceInfo(
            connector=self.format_id,
            ts_ms=event_time if event_time is not None and event_time > 0 else None,
            sequence=sequence,
            fields=fields,
        )
        return source, system_time if system_time is not None and system_time > 0 else None



def _base64(raw: Any) -> bytes:
    if type(raw) is str:
        return b64decode(raw)
    raise NotFast


def _fast_converter(col: Column) -> FastConverter | None:
    """What :meth:`AliyunJsonDecoder._value` does for a cell, where that is a plain conversion."""
    if col.type is ConnectType.BYTES:
        return _base64
    return fast_converter(col)  # its timestamps take epoch milliseconds too (DATE columns' values)
