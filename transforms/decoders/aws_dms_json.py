"""AWS DMS JSON for Kafka/Kinesis targets (``aws-dms-json``): ``{"data": {...}, "metadata": {...}}``.

``metadata.record-type`` is ``data`` for row changes, whose ``operation`` is ``load`` (full load,
a snapshot read), ``insert``, ``update`` or ``delete``, and ``control`` for table events, whose
``operation`` is ``create-table``, ``drop-table``, ``rename-table``, ``add-column``,
``drop-column``, ``rename-column``, ``column-type-change`` or ``change-columns``. ``schema-name``
and ``table-name`` name the table, ``timestamp`` is when DMS produced the record and
``commit-timestamp`` (with ``IncludeTransactionDetails``) the source commit time, next to
``transaction-id``, ``transaction-record-id`` and ``stream-position``.

``data`` holds the row after the change (before it, for a delete). An update's before-image comes
from the ``BeforeImageSettings`` attribute (``before-image`` by default) or from
``add-before-image-columns`` columns inside ``data`` (prefix ``BI_`` by default); either may hold
only some columns (``pk-only``), so columns it lacks are ``UNAVAILABLE``. Without one, the
update's before is null. Values are typed JSON values; Connect types are inferred from them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, Message, check_decimal_params, type_name
from transforms.decoders.fields import (
    check_timestamp,
    optional_int,
    optional_scalar,
    optional_str,
    required_str,
    string_list,
)
from transforms.decoders.qlik_model import REPLICATE_TYPES
from transforms.decoders.schemaless_json import SchemalessShapes
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
    TransactionRef,
)
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions

__all__ = ["AwsDmsJsonDecoder", "AwsDmsJsonOptions"]

_DATA_OPS = {
    "load": Operation.READ,
    "insert": Operation.CREATE,
    "update": Operation.UPDATE,
    "delete": Operation.DELETE,
}
_CONTROL_CHANGE = {
    "create-table": "CREATE",
    "drop-table": "DROP",
    "rename-table": "ALTER",
    "change-columns": "ALTER",
    "add-column": "ALTER",
    "drop-column": "ALTER",
    "rename-column": "ALTER",
    "column-type-change": "ALTER",
}
_FIELDS = (
    ("transaction-id", "transaction_id"),
    ("transaction-record-id", "transaction_record_id"),
    ("prev-transaction-id", "prev_transaction_id"),
    ("prev-transaction-record-id", "prev_transaction_record_id"),
    ("stream-position", "stream_position"),
    ("partition-key-type", "partition_key_type"),
    ("commit-timestamp", "commit_timestamp"),
    ("timestamp", "timestamp"),
)
# DMS data types (as in table-def) → Connect columns: Replicate's types plus DMS's own spellings
_DMS_TYPES: dict[str, tuple[ConnectType, str | None]] = {
    **REPLICATE_TYPES,
    "INT16": (ConnectType.INT16, None),
    "INT32": (ConnectType.INT32, None),
    "INT64": (ConnectType.INT64, None),
    "DATETIME": (ConnectType.INT64, Logical.MICRO_TIMESTAMP),
}


class AwsDmsJsonOptions(FormatOptions):
    """Options of the ``aws-dms-json`` format."""

    before_image_field: str = Field(
        "before-image",
        alias="before.image.field",
        description="Top-level attribute holding the update before-image (DMS BeforeImageSettings.FieldName).",
    )
    before_image_prefix: str = Field(
        "BI_",
        alias="before.image.prefix",
        description="Prefix of before-image columns inside data (add-before-image-columns); empty to disable.",
    )


class AwsDmsJsonDecoder(Decoder):
    """Decodes AWS DMS JSON data and control records."""

    format_id = "aws-dms-json"
    description = (
        "AWS DMS JSON for Kafka/Kinesis (data + metadata, BI_ before-image columns, control records)"
    )
    options_model = AwsDmsJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self._opts = self.options_as(AwsDmsJsonOptions)
        self._shapes = SchemalessShapes()

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        doc = self.load_json(message)
        payload = message.value
        metadata = doc.get("metadata")
        if not isinstance(metadata, dict):
            raise self.error("metadata", f"expected an object, found {type_name(metadata)}", payload)
        record_type = required_str(self, metadata, "record-type", payload, where="metadata.")
        operation = required_str(self, metadata, "operation", payload, where="metadata.")
        if record_type == "data":
            op = _DATA_OPS.get(operation)
            if op is None:
                raise self.error(
                    "metadata.operation",
                    f"unknown data operation {operation!r}; expected one of {', '.join(_DATA_OPS)}",
                    payload,
                )
            return [self._data(doc, metadata, op, payload)]
        if record_type == "control":
            change_type = _CONTROL_CHANGE.get(operation)
            # other control records (task events) carry no change of a table
            return [] if change_type is None else [self._control(doc, metadata, change_type, payload)]
        raise self.error(
            "metadata.record-type", f"unknown record-type {record_type!r}; expected data or control", payload
        )

    # -- data records --------------------------------------------------------------

    def _data(
        self, doc: dict[str, Any], metadata: dict[str, Any], op: Operation, payload: bytes
    ) -> ChangeEvent:
        opts = self._opts
        schema = optional_str(self, metadata, "schema-name", payload, where="metadata.") or None
        table = required_str(self, metadata, "table-name", payload, where="metadata.")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise self.error("data", f"expected an object with the row, found {type_name(data)}", payload)

        prefix = opts.before_image_prefix
        row = data
        prefixed: dict[str, Any] = {}
        if prefix:
            row = {k: v for k, v in data.items() if not k.startswith(prefix)}
            prefixed = {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}
        image = doc.get(opts.before_image_field)
        if image is not None and not isinstance(image, dict):
            raise self.error(opts.before_image_field, f"expected an object, found {type_name(image)}", payload)

        before: dict[str, Any] | None = None
        after: dict[str, Any] | None = row
        if op is Operation.UPDATE:
            before = {**(image or {}), **prefixed} or None
        elif op is Operation.DELETE:
            before, after = row, None

        shape = self._shapes.infer(after, before)
        return ChangeEvent(
            op=op,
            table=self._shapes.table(shape, None, schema, table, ()),
            before=shape.typed(self, 1, before, "data", payload),
            after=shape.typed(self, 0, after, "data", payload),
            source=self._source(metadata, payload, snapshot=op is Operation.READ),
            transaction=self._transaction(metadata, payload),
            ts_ms=check_timestamp(self, metadata.get("timestamp"), "metadata.timestamp", payload),
        )

    def _source(
        self, metadata: dict[str, Any], payload: bytes, *, snapshot: bool = False, control: bool = False
    ) -> SourceInfo:
        """The source block: commit time (else DMS's own timestamp) and the metadata fields."""
        commit_ms = check_timestamp(
            self, metadata.get("commit-timestamp"), "metadata.commit-timestamp", payload
        )
        emitted_ms = check_timestamp(self, metadata.get("timestamp"), "metadata.timestamp", payload)
        fields: dict[str, Any] = {}
        for name, stable in _FIELDS:
            value = optional_scalar(self, metadata, name, payload, where="metadata.")
            if value is not None:
                fields[stable] = value
        if control:
            fields["operation"] = metadata["operation"]
        return SourceInfo(
            connector=self.format_id,
            ts_ms=commit_ms if commit_ms is not None else emitted_ms,
            snapshot=SnapshotMarker.TRUE if snapshot else SnapshotMarker.FALSE,
            fields=fields,
        )

    def _transaction(self, metadata: dict[str, Any], payload: bytes) -> TransactionRef | None:
        tx = optional_scalar(self, metadata, "transaction-id", payload, where="metadata.")
        if tx is None:
            return None
        order = optional_int(self, metadata, "transaction-record-id", payload, where="metadata.")
        return TransactionRef(str(tx), order)

    # -- control records -----------------------------------------------------------

    def _control(
        self, doc: dict[str, Any], metadata: dict[str, Any], change_type: str, payload: bytes
    ) -> SchemaChangeEvent:
        schema = optional_str(self, metadata, "schema-name", payload, where="metadata.") or None
        table = optional_str(self, metadata, "table-name", payload, where="metadata.") or None
        control = doc.get("control")
        new_table: TableSchema | None = None
        if control is not None:
            if not isinstance(control, dict):
                raise self.error("control", f"expected an object, found {type_name(control)}", payload)
            definition = control.get("table-def")
            if definition is not None:
                new_table = self._table_def(definition, schema, table or "", payload)
        return SchemaChangeEvent(
            db=None,
            schema=schema,
            table=table,
            ddl=None,
            source=self._source(metadata, payload, control=True),
            change_type=change_type,
            new_table=new_table,
            ts_ms=check_timestamp(self, metadata.get("timestamp"), "metadata.timestamp", payload),
        )

    def _table_def(self, definition: Any, schema: str | None, table: str, payload: bytes) -> TableSchema:
        """``control.table-def``: ``{"columns": {name: {"type", "precision", "scale", "nullable"}}, ...}``."""
        if not isinstance(definition, dict):
            raise self.error("control.table-def", f"expected an object, found {type_name(definition)}", payload)
        raw_columns = definition.get("columns")
        if not isinstance(raw_columns, dict):
            raise self.error(
                "control.table-def.columns",
                f"expected an object of columns, found {type_name(raw_columns)}",
                payload,
            )
        columns: list[Column] = []
        for name, spec in raw_columns.items():
            where = f"control.table-def.columns.{name}."
            if not isinstance(spec, dict):
                raise self.error(where[:-1], f"expected a column object, found {type_name(spec)}", payload)
            kind = required_str(self, spec, "type", payload, where=where).upper()
            optional = spec.get("nullable", True) is not False
            if kind == "NUMERIC":
                precision = optional_int(self, spec, "precision", payload, where=where)
                scale = optional_int(self, spec, "scale", payload, where=where)
                try:
                    check_decimal_params(precision, scale)
                except ValueError as exc:
                    raise self.error(where[:-1], str(exc), payload) from exc
                columns.append(Column.decimal(name, precision, scale, optional, source_type=kind))
                continue
            ctype, logical = _DMS_TYPES.get(kind, (ConnectType.STRING, None))
            columns.append(Column(name, ctype, optional, logical, source_type=kind))
        key = string_list(self, definition, "primary-key", payload, where="control.table-def.") or ()
        return TableSchema(None, schema, table, tuple(columns), key)

