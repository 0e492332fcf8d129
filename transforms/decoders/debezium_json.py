"""Debezium JSON (``JsonConverter``, with or without ``schemas.enable``), re-emitted canonical.

Accepted values, one per message:

* an envelope ``{"before", "after", "source", "op", "ts_ms", "transaction"}``, bare or wrapped
  as ``{"schema": ..., "payload": ...}`` (``"schema": null`` too). With a schema, the row columns
  and types come from it (logical names and parameters kept; Decimal bytes decoded at the
  schema's scale); without one they are inferred from the values, and a table's inferred types
  stay stable across messages (they only widen, at most twice per column: see
  :mod:`~transforms.decoders.schemaless_json`). MongoDB envelopes whose
  ``before``/``after`` are Extended JSON strings are parsed into documents;
* ``op: "m"`` (logical decoding message), heartbeats ``{"ts_ms": ...}`` and tombstones → no event;
* transaction metadata (``status: BEGIN|END``) → a transaction event;
* schema-change values (``ddl``/``tableChanges``) → a schema-change event;
* with ``unwrapped=true``, an ExtractNewRecordState flat row (``__op``, ``__deleted``, ``__db``,
  ``__table``, ``__source_ts_ms`` and other ``__`` fields are read as metadata). Without that
  option a value with no ``op`` is an error, so a mis-routed topic is not silently upserted.

The key columns are, in order of precedence: option ``key.columns``, the Kafka message key
(``{"schema", "payload"}`` or a bare object; MongoDB ``{"id"}`` names ``_id``), else none.
A delete whose ``before`` is missing gets a ``before`` built from the message key (other
columns UNAVAILABLE) so that the delete can still be keyed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transforms.connect import Column, ConnectType
from transforms.decoders.base import Decoder, Message
from transforms.decoders.connect_json import (
    ConnectEnvelopeReader,
    EnvelopeKey,
    FieldError,
    JsonLimits,
    TableName,
    TopicTables,
    position_sequence,
    read_connect_message,
)
from transforms.decoders.debezium_json_options import DebeziumJsonOptions
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
    TransactionEvent,
    TransactionStatus,
)
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions

__all__ = ["DebeziumJsonDecoder", "DebeziumJsonOptions"]

FORMAT_ID = "debezium-json"

_FLAT_NAME_FIELDS = {"__db": "db", "__schema": "schema", "__table": "table"}
_FLAT_SKIP = frozenset({"__op", "__deleted", "__source_ts_ms", "__ts_ms", *_FLAT_NAME_FIELDS})
_BASE_SOURCE = frozenset(
    {"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table"}
)


def table_fallback(option: str | None, topic: str) -> TableName:
    """The table of a value that does not name one: the ``table`` option, else the topic name.

    >>> table_fallback(None, "dbserver1.inventory.customers")
    TableName(db='inventory', schema=None, table='customers')
    """
    text = option or topic
    parts = [p for p in text.split(".") if p]
    if not parts:
        return TableName(None, None, None)
    if len(parts) == 1:
        return TableName(None, None, parts[0])
    return TableName(parts[-2], None, parts[-1])


class DebeziumJsonDecoder(Decoder):
    """Decodes Debezium JSON change events (any connector) into canonical change events."""

    format_id = FORMAT_ID
    description = "Debezium JSON (with or without schema), re-emitted canonical"
    options_model = DebeziumJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self._opts = self.options_as(DebeziumJsonOptions)
        names = tuple(n.strip() for n in (opts.key_columns or "").split(",") if n.strip())
        self._key_override = (
            EnvelopeKey(tuple(Column(n, ConnectType.STRING, False) for n in names)) if names else None
        )
        self._limits = JsonLimits(opts.max_message_bytes, opts.max_json_depth)
        self._reader = ConnectEnvelopeReader(FORMAT_ID, limits=self._limits, native=True, store=self.metadata)
        self._fallback = TopicTables(lambda topic: table_fallback(opts.table, topic))

    def decode(self, message: Message) -> list[Event]:
        return read_connect_message(
            self, message, lambda schema, payload: self._decode(schema, payload, message), self._reader.prefixes
        )

    # -- dispatch ----------------------------------------------------------------------

    def _decode(self, schema: Any, payload: dict[str, Any], message: Message) -> list[Event]:
        if "op" in payload:
            return self._envelope(payload, schema, message)
        if not payload or set(payload) <= {"ts_ms"}:
            return []  # heartbeat
        if payload.get("status") in ("BEGIN", "END") and "id" in payload and "before" not in payload:
            return [self._transaction(payload)]
        if "ddl" in payload or "tableChanges" in payload:
            return [self._schema_change(payload)]
        if self._opts.unwrapped:
            return [self._flat_row(payload, schema, message)]
        raise FieldError("op", "expected a Debezium envelope with 'op'; set unwrapped=true to read flat rows")

    def _key(self, message: Message, mongodb: bool) -> EnvelopeKey | None:
        if self._key_override is not None:
            return self._key_override
        return self._reader.key(message.key, mongodb)

    # -- kinds of values ---------------------------------------------------------------

    def _envelope(self, payload: dict[str, Any], schema: Any, message: Message) -> list[Event]:
        source = payload.get("source")
        mongodb = isinstance(source, dict) and source.get("connector") == "mongodb"
        event = self._reader.read(
            payload,
            schema,
            key=self._key(message, mongodb),
            fallback=self._fallback(message.topic),
            direct=self.emit_direct,
        )
        return [] if event is None else [event]

    def _flat_row(self, payload: dict[str, Any], schema: Any, message: Message) -> ChangeEvent:
        row = {k: v for k, v in payload.items() if not k.startswith("__")}
        meta = {k: v for k, v in payload.items() if k.startswith("__")}
        op = Operation.CREATE
        if "__op" in meta:
            op_or_none = self._reader.operation(meta["__op"], "__op")
            if op_or_none is None:
                raise FieldError("__op", "a flat row cannot be a logical decoding message")
            op = op_or_none
        if meta.get("__deleted") in (True, "true"):
            op = Operation.DELETE
        fallback = self._fallback(message.topic)
        names = {target: meta.get(name) for name, target in _FLAT_NAME_FIELDS.items()}
        for name, value in names.items():
            if value is not None and not isinstance(value, str):
                raise FieldError(f"__{name}", f"expected a string, found {type(value).__name__}")
        table_name = names["table"] or fallback.table
        if table_name is None:
            raise FieldError("__table", "no table name in the row and none configured")
        db = names["db"] if names["table"] else fallback.db
        if isinstance(schema, dict) and schema.get("type") == "struct":
            layout = self._reader.struct_layout(schema, "schema")
        else:  # inferred, as the table's memory types it (stable across messages)
            layout = self._reader.inferred_layout(row, None, (db, names["schema"], table_name))
        key = self._key(message, mongodb=False)
        if key is not None:
            missing = [c.name for c in key.columns if c.name not in layout.names]
            if missing:
                raise FieldError("key", f"key columns {missing} are not row columns")
        image = layout.decode(row, "row")
        fields = {k[2:]: v for k, v in meta.items() if k not in _FLAT_SKIP and k[2:] not in _BASE_SOURCE}
        ts_raw = meta.get("__source_ts_ms")
        source_ts = ts_raw if isinstance(ts_raw, int) and not isinstance(ts_raw, bool) else None
        event_ts = meta.get("__ts_ms")
        source = SourceInfo(
            FORMAT_ID, source_ts, SnapshotMarker.FALSE, position_sequence(fields, source_ts), fields
        )
        table = self._reader.layout_table(
            layout, db, names["schema"], table_name, key.names if key is not None else ()
        )
        deleted = op is Operation.DELETE
        return ChangeEvent(
            op=op,
            table=table,
            before=image if deleted else None,
            after=None if deleted else image,
            source=source,
            ts_ms=event_ts if isinstance(event_ts, int) and not isinstance(event_ts, bool) else None,
        )

    def _transaction(self, payload: Mapping[str, Any]) -> TransactionEvent:
        status = TransactionStatus(payload["status"])
        tx_id = payload["id"]
        if not isinstance(tx_id, str | int) or isinstance(tx_id, bool):
            raise FieldError("id", f"expected a transaction id, found {tx_id!r}")
        count = payload.get("event_count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
            raise FieldError("event_count", f"expected an integer, found {count!r}")
        collections: list[tuple[str, int]] = []
        raw_collections = payload.get("data_collections") or []
        if not isinstance(raw_collections, list):
            raise FieldError("data_collections", f"expected an array, found {raw_collections!r}")
        for i, item in enumerate(raw_collections):
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("data_collection"), str)
                or not isinstance(item.get("event_count"), int)
            ):
                raise FieldError(
                    f"data_collections[{i}]", "expected {data_collection: str, event_count: int}"
                )
            collections.append((item["data_collection"], item["event_count"]))
        ts = payload.get("ts_ms")
        ts_ms = ts if isinstance(ts, int) and not isinstance(ts, bool) else None
        return TransactionEvent(
            status=status,
            id=str(tx_id),
            source=SourceInfo(FORMAT_ID, ts_ms),
            event_count=count,
            data_collections=tuple(collections),
            ts_ms=ts_ms,
        )

    def _schema_change(self, payload: Mapping[str, Any]) -> SchemaChangeEvent:
        source = payload.get("source") or {}
        if not isinstance(source, dict):
            raise FieldError("source", f"expected an object, found {type(source).__name__}")
        info = self._reader.source_info(source, None)
        ddl = payload.get("ddl")
        if ddl is not None and not isinstance(ddl, str):
            raise FieldError("ddl", f"expected a string, found {type(ddl).__name__}")
        changes = payload.get("tableChanges") or []
        if not isinstance(changes, list):
            raise FieldError("tableChanges", f"expected an array, found {type(changes).__name__}")
        change_type = "ALTER"
        if changes and isinstance(changes[0], dict) and isinstance(changes[0].get("type"), str):
            change_type = changes[0]["type"]

        def text(value: Any, field: str) -> str | None:
            if value is None or isinstance(value, str):
                return value
            raise FieldError(field, f"expected a string, found {type(value).__name__}")

        ts = payload.get("ts_ms")
        return SchemaChangeEvent(
            db=text(payload.get("databaseName"), "databaseName") or text(source.get("db"), "source.db"),
            schema=text(payload.get("schemaName"), "schemaName")
            or text(source.get("schema"), "source.schema"),
            table=text(source.get("table"), "source.table"),
            ddl=ddl,
            source=info,
            change_type=change_type,
            ts_ms=ts if isinstance(ts, int) and not isinstance(ts, bool) else None,
        )
