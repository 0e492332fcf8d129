"""Huawei MRS CDL JSON: ``message_version`` 1.0 (CDL JSON) and 2.0 (CDL's Debezium JSON).

Both are Connect JSON ``{"schema", "payload"}`` documents.

* **1.0**: ``DATA_STORE`` (source type, kept as ``source_connector``), ``SEG_OWNER`` (schema),
  ``TABLE_NAME``, ``TIMESTAMP`` (change time, ``source.ts_ms``), ``OPERATION``
  (``INSERT``/``UPDATE``/``DELETE``, also ``TRUNCATE``), ``transaction.properties``
  (``[{name, value}]``: ``txId`` names the transaction, ``lsn``/``scn`` give the position and
  ``sequence``; all kept as source fields), ``unique`` (the key), ``data`` (after image),
  ``before``.
* **2.0**: a Debezium envelope plus ``message_version``, ``message_type``, ``LOB_COLUMNS`` and
  ``unique``; the source block's ``txId`` names the transaction.

Row types come from the schema's ``data``/``after`` struct. CDL's own string-encoded decimals
(schema name ``*.cdc.data.Decimal``) become Debezium VariableScaleDecimal columns; its
``*.cdc.data.timestamp`` strings stay plain strings (their text format is not specified).

``LOB_COLUMNS`` (comma-separated names) lists large-object columns: a listed column that is
absent from an image is UNAVAILABLE (CDL leaves unchanged LOBs out), never NULL; a listed column
present as ``null`` is a real NULL. Any other declared column absent from an image is also
UNAVAILABLE.

Heartbeats produce no event: ``OPERATION``/``op`` ``HEARTBEAT``, a message with no operation and
no row, or a change to one of the ``heartbeat.tables``. ``HEARTBEAT_IDENTIFIER`` is present on
ordinary data messages too, so it alone does not make a heartbeat; it is kept as a source field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from transforms.connect import Column, ConnectType
from transforms.decoders.base import Decoder, Message, coerce_checked
from transforms.decoders.cache import TableLru
from transforms.decoders.connect_json import (
    ConnectEnvelopeReader,
    EnvelopeKey,
    FieldError,
    JsonLimits,
    RowLayout,
    TableName,
    by_content,
    position_sequence,
    read_connect_message,
    struct_field_schemas,
)
from transforms.decoders.rowplan import FastConverter, fast_converter
from transforms.envelope import ChangeEvent, Event, Operation, SnapshotMarker, SourceInfo, TransactionRef
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.table_budget import text_columns
from transforms.values import UNAVAILABLE, CoercionError, infer_column

__all__ = ["CdlJsonDecoder", "CdlJsonOptions"]

FORMAT_ID = "cdl-json"

_OPERATIONS = {
    "INSERT": Operation.CREATE,
    "UPDATE": Operation.UPDATE,
    "DELETE": Operation.DELETE,
    "TRUNCATE": Operation.TRUNCATE,
}


class CdlJsonOptions(FormatOptions):
    """Options of the ``cdl-json`` format."""

    database: str | None = Field(
        None,
        alias="database",
        description="Database name for message_version 1.0 changes, which name only the schema "
        "(SEG_OWNER); set it to match the source.db of 2.0 messages.",
    )
    heartbeat_tables: str | None = Field(
        None,
        alias="heartbeat.tables",
        description="Comma-separated table names (table or schema.table) whose changes are heartbeats "
        "and produce no event.",
    )


def cdl_column(col: Column) -> Column:
    """A CDL schema column with CDL's own logical names mapped to Debezium's.

    >>> cdl_column(Column("d", ConnectType.STRING, logical="com.huawei.cdc.data.Decimal")).logical
    'io.debezium.data.VariableScaleDecimal'
    """
    logical = col.logical or ""
    if ".cdc.data." not in logical:
        return col
    if logical.endswith(".cdc.data.Decimal"):
        return Column.decimal(col.name, None, None, col.optional)
    return Column(col.name, col.type, col.optional)


def _text(payload: Mapping[str, Any], name: str, required: bool = False) -> str | None:
    value = payload.get(name)
    if value is None:
        if required:
            raise FieldError(name, "expected a string, found nothing")
        return None
    if not isinstance(value, str):
        raise FieldError(name, f"expected a string, found {type(value).__name__}")
    return value


_UniqueColumn = tuple[Column, Column, FastConverter | None]
"""A row column as ``unique`` names it: as declared, as a (non-optional) key column, and a fast
converter equal to ``coerce_checked`` where it returns (see rowplan)."""


def _unique_columns(layout: RowLayout) -> dict[str, _UniqueColumn]:
    """The row columns of a layout by name, for typing ``unique`` (derived once per layout)."""
    return {c.name: (c, c.as_optional(False), fast_converter(c)) for c in layout.columns}


def _lob_columns(raw: Any) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if isinstance(raw, str):
        return frozenset(n.strip() for n in raw.split(",") if n.strip())
    if isinstance(raw, list) and all(isinstance(n, str) for n in raw):
        return frozenset(raw)
    raise FieldError("LOB_COLUMNS", f"expected a comma-separated string of column names, found {raw!r}")


class CdlJsonDecoder(Decoder):
    """Decodes Huawei CDL JSON messages (message_version 1.0 and 2.0) into canonical change events."""

    format_id = FORMAT_ID
    description = "Huawei CDL JSON, message_version 1.0 and 2.0"
    options_model = CdlJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self.options_as(CdlJsonOptions)
        self._heartbeats = frozenset(n.strip() for n in (opts.heartbeat_tables or "").split(",") if n.strip())
        self._database = opts.database
        limits = JsonLimits(opts.max_message_bytes, opts.max_json_depth)
        self._reader = ConnectEnvelopeReader(FORMAT_ID, column_map=cdl_column, limits=limits, store=self.metadata)
        # a message_version 1.0 schema's JSON text -> (the layout of its data/before struct or None,)
        # (bounded by the table budget: a text counts its length, see transforms.table_budget)
        self._v1_schemas: TableLru[bytes, tuple[RowLayout | None]] = TableLru(
            lambda key, _: text_columns(key)
        )

    def decode(self, message: Message) -> list[Event]:
        return read_connect_message(self, message, self._decode, self._reader.prefixes)

    # -- dispatch ----------------------------------------------------------------------

    def _decode(self, schema: Any, payload: dict[str, Any]) -> list[Event]:
        version = payload.get("message_version")
        if version is not None and version not in ("1.0", "2.0"):
            raise FieldError("message_version", f"expected 1.0 or 2.0, found {version!r}")
        operation = payload.get("OPERATION")
        op = payload.get("op")
        if operation == "HEARTBEAT" or op == "HEARTBEAT":
            return []
        if version == "1.0" or (version is None and "OPERATION" in payload):
            if operation is None and payload.get("data") is None and payload.get("before") is None:
                return []
            return self._v1(payload, schema)
        if version == "2.0" or "op" in payload:
            if op is None and payload.get("after") is None and payload.get("before") is None:
                return []
            return self._v2(payload, schema)
        if "HEARTBEAT_IDENTIFIER" in payload:
            return []
        raise FieldError("message_version", "expected a CDL message (message_version 1.0 or 2.0)")

    def _is_heartbeat_table(self, schema_name: str | None, table: str) -> bool:
        if not self._heartbeats:
            return False
        return table in self._heartbeats or f"{schema_name}.{table}" in self._heartbeats

    def _unique(self, payload: Mapping[str, Any], schema: Any, layout: RowLayout) -> EnvelopeKey | None:
        """The key from ``unique``: its names and typed values (or the schema's unique struct)."""
        unique = payload.get("unique")
        if unique is not None and not isinstance(unique, dict):
            raise FieldError("unique", f"expected an object, found {type(unique).__name__}")
        names: list[str] = list(unique) if unique else []
        if not names and isinstance(schema, dict):
            sub = struct_field_schemas(schema).get("unique")
            if isinstance(sub, dict):
                names = list(struct_field_schemas(sub, "schema.unique"))
        if not names:
            return None
        by_name = layout.derived(_unique_columns)
        key_cols = []
        values: dict[str, Any] = {}
        fast: FastConverter | None
        for name in names:
            known = by_name.get(name)
            if known is None:
                col = infer_column(name, (unique or {}).get(name))
                key_col, fast = col.as_optional(False), None
            else:
                col, key_col, fast = known
            key_cols.append(key_col)
            if unique and name in unique:
                raw = unique[name]
                if fast is not None:
                    try:
                        values[name] = fast(raw)
                        continue
                    except Exception:  # the full conversion decides
                        pass
                try:
                    values[name] = coerce_checked(col, raw)
                except CoercionError as exc:
                    raise FieldError(f"unique.{name}", str(exc)) from exc
        return EnvelopeKey(tuple(key_cols), values if unique else None)

    # -- message_version 1.0 -----------------------------------------------------------

    def _v1(self, payload: dict[str, Any], schema: Any) -> list[Event]:
        raw_op = payload.get("OPERATION")
        op = _OPERATIONS.get(raw_op) if isinstance(raw_op, str) else None
        if op is None:
            raise FieldError("OPERATION", f"expected INSERT, UPDATE, DELETE or TRUNCATE, found {raw_op!r}")
        table_name = _text(payload, "TABLE_NAME", required=True) or ""
        seg_owner = _text(payload, "SEG_OWNER")
        if self._is_heartbeat_table(seg_owner, table_name):
            return []
        data, before = payload.get("data"), payload.get("before")
        for name, image in (("data", data), ("before", before)):
            if image is not None and not isinstance(image, dict):
                raise FieldError(name, f"expected an object or null, found {type(image).__name__}")
        layout = self._v1_layout(schema, data, before)
        lobs = _lob_columns(payload.get("LOB_COLUMNS"))
        layout = self._extended(layout, tuple(Column(n, ConnectType.STRING) for n in sorted(lobs - layout.names)))
        key = self._unique(payload, schema, layout)
        if key is not None:
            layout = self._extended(layout, tuple(c for c in key.columns if c.name not in layout.names))
        columns = layout.columns
        after_row = layout.decode(data, "data") if data else None
        before_row = layout.decode(before, "before") if before else None
        if op in (Operation.CREATE, Operation.UPDATE) and after_row is None:
            raise FieldError("data", f"OPERATION {raw_op} needs a 'data' image")
        if op is Operation.CREATE:
            before_row = None
        if op is Operation.DELETE:
            after_row = None
            if before_row is None and key is not None and key.values:
                before_row = {c.name: key.values.get(c.name, UNAVAILABLE) for c in columns}
            if before_row is None:
                raise FieldError("before", "OPERATION DELETE needs a 'before' image or 'unique' key values")
        if op is Operation.TRUNCATE:
            before_row = after_row = None
        properties = self._properties(payload.get("transaction"))
        ts = payload.get("TIMESTAMP")
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
            raise FieldError("TIMESTAMP", f"expected epoch milliseconds, found {ts!r}")
        fields: dict[str, Any] = {"source_connector": _text(payload, "DATA_STORE")}
        fields.update(properties)
        fields.update(self._message_fields(payload, lobs))
        tx_id = properties.get("txId")
        source = SourceInfo(
            connector=FORMAT_ID,
            ts_ms=ts,
            snapshot=SnapshotMarker.FALSE,
            sequence=position_sequence(properties),
            fields=fields,
        )
        table = self._reader.layout_table(
            layout, self._database, seg_owner, table_name, key.names if key is not None else ()
        )
        return [
            ChangeEvent(
                op=op,
                table=table,
                before=before_row,
                after=after_row,
                source=source,
                transaction=TransactionRef(str(tx_id)) if tx_id is not None else None,
            )
        ]

    def _extended(self, layout: RowLayout, extra: tuple[Column, ...]) -> RowLayout:
        return self._reader.extended_layout(layout, extra) if extra else layout

    def _v1_layout(self, schema: Any, data: dict[str, Any] | None, before: dict[str, Any] | None) -> RowLayout:
        """The row layout from the schema's ``data`` (else ``before``) struct, else inferred."""
        if isinstance(schema, dict):
            (layout,) = by_content(self._v1_schemas, schema, self._read_v1_schema)
            if layout is not None:
                return layout
        return self._reader.inferred_layout(data, before)

    def _read_v1_schema(self, schema: Any) -> tuple[RowLayout | None]:
        fields = struct_field_schemas(schema)
        for name in ("data", "before"):
            sub = fields.get(name)
            if isinstance(sub, dict) and sub.get("type") == "struct":
                return (self._reader.struct_layout(sub, f"schema.{name}"),)
        return (None,)

    @staticmethod
    def _properties(raw: Any) -> dict[str, Any]:
        if raw is None:
            return {}
        props = raw.get("properties") if isinstance(raw, dict) else None
        if not isinstance(props, list):
            raise FieldError("transaction.properties", f"expected an array of {{name, value}}, found {raw!r}")
        out: dict[str, Any] = {}
        for i, item in enumerate(props):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise FieldError(f"transaction.properties[{i}]", f"expected {{name, value}}, found {item!r}")
            out[item["name"]] = item.get("value")
        return out

    @staticmethod
    def _message_fields(payload: Mapping[str, Any], lobs: frozenset[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message_version": _text(payload, "message_version"),
            "message_type": _text(payload, "message_type"),
            "lob_columns": ",".join(sorted(lobs)) if lobs else None,
        }
        if "HEARTBEAT_IDENTIFIER" in payload:
            out["heartbeat_identifier"] = _text(payload, "HEARTBEAT_IDENTIFIER")
        return out

    # -- message_version 2.0 -----------------------------------------------------------

    def _v2(self, payload: dict[str, Any], schema: Any) -> list[Event]:
        source = payload.get("source")
        if isinstance(source, dict):
            table = source.get("table")
            if isinstance(table, str) and self._is_heartbeat_table(source.get("schema"), table):
                return []
        before = self._reader.image(payload.get("before"), "before")
        after = self._reader.image(payload.get("after"), "after")
        layout = self._reader.row_layout(schema, before, after)
        lobs = _lob_columns(payload.get("LOB_COLUMNS"))
        event = self._reader.read(
            payload,
            schema,
            key=self._unique(payload, schema, layout),
            fallback=TableName(None, None, None),
            extra_source=self._message_fields(payload, lobs),
            absent_columns=lobs,
        )
        if event is None:
            return []
        if event.transaction is None and event.source.fields.get("txId") is not None:
            event.transaction = TransactionRef(str(event.source.fields["txId"]))
        return [event]
