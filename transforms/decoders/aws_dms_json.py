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
update's before is null.

Table definitions: with ``IncludeControlDetails``, a control record carries
``control.table-def`` (``{"columns": {name: {"type", "length", "precision", "scale",
"nullable"}}, "primary-key": [...]}``). The decoder remembers the latest one per (schema, table)
in the decoder's metadata store (namespace ``aws-dms-json.table-def``; the worker's Redis and
metadata log, the CLI's memory, each entry's own: :class:`~transforms.metadata.ScopedMetadataStore`), written before the next message is decoded,
and types that table's data records with it. So every worker replica, a worker restarted after
the control record, and ``cdcnorm transform`` decode a data record with the definition that
precedes it in its partition (only the parsed form is cached in the process):

* the key is the ``primary-key`` columns, so changes get a Kafka key and deletes a tombstone
  (the topic's ``key_columns`` config, applied after decoding, wins over it);
* each column gets the Connect type of its DMS type (:func:`dms_column`) and its values are
  coerced to it, before-images included; binary values are hex digits, ``0x``-prefixed unless
  the endpoint sets ``NoHexPrefix``;
* the row schema lists the definition's columns, then the columns the data has and the
  definition lacks, typed by inference as without a definition;
* a definition column that an insert or load lacks is NULL (a key column is absent): such a
  record holds the whole row, and DMS leaves NULL columns out unless the endpoint sets
  ``IncludeNullAndEmpty``. One that an update or delete image lacks is ``UNAVAILABLE``, as that
  image may be partial (a source that logs only changed or key columns); set
  ``IncludeNullAndEmpty`` to tell NULLs apart there;
* row columns are optional whatever ``nullable`` says, as an image may lack a NOT NULL column
  (pk-only before-images, an out-of-date definition); the schema-change record keeps it.

A later control record of the table replaces the definition with its own ``table-def``; one
without a ``table-def`` forgets it (``drop-table``, renames, type changes, ...), except
``add-column``, after which the remembered columns still hold (the new one is inferred). Data of
a table without a definition is typed by inference from its JSON values.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import Field

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, Message, check_decimal_params, type_name
from transforms.decoders.cache import TableLru
from transforms.decoders.fields import (
    check_timestamp,
    optional_int,
    optional_scalar,
    optional_str,
    required_str,
    string_list,
)
from transforms.decoders.qlik_model import REPLICATE_TYPES, hex_bytes
from transforms.decoders.rowplan import RowPlans
from transforms.decoders.schemaless_json import SchemalessShapes, infer_columns, table_schema
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
from transforms.values import UNAVAILABLE

__all__ = ["AwsDmsJsonDecoder", "AwsDmsJsonOptions", "dms_column"]

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
# DMS data types (as in table-def) → Connect columns: Replicate's types plus DMS's own spellings;
# decimals, UINT8 and date-times are mapped apart (dms_column)
_DMS_TYPES: dict[str, tuple[ConnectType, str | None]] = {
    **REPLICATE_TYPES,
    "INT16": (ConnectType.INT16, None),
    "INT32": (ConnectType.INT32, None),
    "INT64": (ConnectType.INT64, None),
    "BYTE": (ConnectType.BYTES, None),  # BYTES as the DMS data types reference spells it
}
_DECIMAL_TYPES = frozenset({"NUMERIC", "DECIMAL"})
_DATETIME_TYPES = frozenset({"DATETIME", "TIMESTAMP"})
_UINT8_PRECISION = 20  # digits of 2^64-1
# control operations after which a remembered definition without a new table-def still holds
_KEEPS_DEFINITION = frozenset({"add-column"})
DEFINITIONS_NAMESPACE = "aws-dms-json.table-def"
"""Metadata-store namespace of the remembered table definitions: key ``[schema, table]`` (JSON),
value ``{"table-def": <the control record's table-def>}``, or null once forgotten."""
# bounds of the cache of parsed table definitions: tables, and columns over all of them


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
        "AWS DMS JSON for Kafka/Kinesis (data + metadata, BI_ before-image columns, control records; "
        "a control record's table-def types and keys the table's later data)"
    )
    options_model = AwsDmsJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self._opts = self.options_as(AwsDmsJsonOptions)
        self._shapes = SchemalessShapes(store=self.metadata)
        # (schema, table) -> (the stored document, the table it defines, its columns optional):
        # a cache of parsing (bounded by the table budget); the metadata store holds the definitions
        self._definitions: TableLru[tuple[str | None, str], tuple[Any, TableSchema]] = TableLru(
            lambda _, item: len(item[1].columns)
        )
        self._plans = RowPlans()

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

        definition = self._definition(schema, table, payload)
        if definition is None:
            shape = self._shapes.infer(after, before)
            table_schema_ = self._shapes.table(shape, None, schema, table, ())
            typed_before = shape.typed(self, 1, before, "data", payload)
            typed_after = shape.typed(self, 0, after, "data", payload)
        else:
            table_schema_ = _with_extra_columns(definition, after, before)
            if after is not None and (op is Operation.CREATE or op is Operation.READ):
                after = _with_nulls(definition, after)
            plan = self._plans.plan(table_schema_)
            typed_before = None if before is None else plan.typed(before, "data", payload, self._value)
            typed_after = None if after is None else plan.typed(after, "data", payload, self._value)
        return ChangeEvent(
            op=op,
            table=table_schema_,
            before=typed_before,
            after=typed_after,
            source=self._source(metadata, payload, snapshot=op is Operation.READ),
            transaction=self._transaction(metadata, payload),
            ts_ms=check_timestamp(self, metadata.get("timestamp"), "metadata.timestamp", payload),
        )

    def _value(self, col: Column, raw: Any, field: str, payload: bytes | str | None) -> Any:
        """A value typed by a column of a table definition: binary values are hex digits, with
        DMS's ``0x`` prefix unless ``NoHexPrefix`` is set; the rest as :meth:`coerce`."""
        if col.type is ConnectType.BYTES and col.logical is None and type(raw) is str and raw != UNAVAILABLE:
            try:
                return hex_bytes(raw[2:] if raw[:2] in ("0x", "0X") else raw)
            except ValueError as exc:
                raise self.error(field, str(exc), payload) from exc
        return self.coerce(col, raw, field, payload)

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
        definition_doc: Any = None
        if control is not None:
            if not isinstance(control, dict):
                raise self.error("control", f"expected an object, found {type_name(control)}", payload)
            definition = control.get("table-def")
            if definition is not None:
                new_table = self._table_def(definition, schema, table or "", payload)
                definition_doc = definition
        if table is not None:
            self._remember(schema, table, metadata["operation"], new_table, definition_doc)
            if metadata["operation"] in ("create-table", "drop-table"):  # a new table: typed afresh
                self._shapes.memory.forget((None, schema, table))
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

    def _store_key(self, schema: str | None, table: str) -> str:
        return orjson.dumps([schema, table]).decode()

    def _definition(self, schema: str | None, table: str, payload: bytes) -> TableSchema | None:
        """The table's remembered definition (columns optional), from the metadata store."""
        doc = self.metadata.get(DEFINITIONS_NAMESPACE, self._store_key(schema, table))
        if not isinstance(doc, dict):
            return None
        slot = (schema, table)
        cached = self._definitions.get(slot)
        if cached is not None and (cached[0] is doc or cached[0] == doc):
            return cached[1]
        parsed = self._table_def(doc.get("table-def"), schema, table, payload)
        columns = tuple(c.as_optional() for c in parsed.columns)
        defined = table_schema(None, schema, table, columns, parsed.key)
        self._definitions.put(slot, (doc, defined))
        return defined

    def _remember(
        self, schema: str | None, table: str, operation: str, new_table: TableSchema | None, definition: Any
    ) -> None:
        """Keep a control record's table definition for the table's data records, or forget the
        one remembered when the record changes the table without giving a new one. Written to the
        metadata store now, so the next message of the partition is decoded with it."""
        key = self._store_key(schema, table)
        if new_table is not None and operation != "drop-table":
            self.metadata.put(DEFINITIONS_NAMESPACE, key, {"table-def": definition})
        elif operation not in _KEEPS_DEFINITION and self.metadata.get(DEFINITIONS_NAMESPACE, key) is not None:
            self.metadata.put(DEFINITIONS_NAMESPACE, key, None)

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
            if not name:
                raise self.error(
                    "control.table-def.columns", "expected a column name, found an empty one", payload
                )
            if not isinstance(spec, dict):
                raise self.error(where[:-1], f"expected a column object, found {type_name(spec)}", payload)
            kind = required_str(self, spec, "type", payload, where=where).upper()
            precision = scale = None
            if kind in _DECIMAL_TYPES or kind in _DATETIME_TYPES:  # the types whose column reads them
                precision = optional_int(self, spec, "precision", payload, where=where)
                scale = optional_int(self, spec, "scale", payload, where=where)
            if kind in _DECIMAL_TYPES:
                try:
                    check_decimal_params(precision, scale)
                except ValueError as exc:
                    raise self.error(where[:-1], str(exc), payload) from exc
            optional = spec.get("nullable", True) is not False
            columns.append(dms_column(name, kind, precision, scale, optional))
        key = string_list(self, definition, "primary-key", payload, where="control.table-def.") or ()
        return TableSchema(None, schema, table, tuple(columns), key)


def dms_column(
    name: str, kind: str, precision: int | None, scale: int | None, optional: bool = True
) -> Column:
    """The Connect column of a table-def column of DMS type ``kind`` (unknown types are strings).

    ``NUMERIC``/``DECIMAL`` is a Decimal of the declared scale (a VariableScaleDecimal when the
    scale is not given or the precision is 0, Replicate's "unknown"); ``UINT8`` is a Decimal of
    scale 0, as its values above 2^63-1 do not fit int64; ``DATETIME``/``TIMESTAMP`` is a Debezium
    Timestamp for up to 3 fractional digits (``scale``, else a non-zero ``precision``) and a
    MicroTimestamp otherwise; other types as :data:`~transforms.decoders.qlik_model.REPLICATE_TYPES`.

    >>> dms_column("n", "UINT8", None, None).params
    (('connect.decimal.precision', '20'), ('scale', '0'))
    >>> dms_column("t", "DATETIME", 0, 3).logical
    'io.debezium.time.Timestamp'
    """
    kind = kind.upper()
    if kind in _DECIMAL_TYPES:
        if precision == 0:
            precision = scale = None
        return Column.decimal(name, precision, scale, optional, source_type=kind)
    if kind == "UINT8":
        return Column.decimal(name, _UINT8_PRECISION, 0, optional, source_type=kind)
    if kind in _DATETIME_TYPES:
        digits = scale if scale is not None else precision or None
        logical = Logical.TIMESTAMP if digits is not None and digits <= 3 else Logical.MICRO_TIMESTAMP
        return Column(name, ConnectType.INT64, optional, logical, source_type=kind)
    ctype, logical_name = _DMS_TYPES.get(kind, (ConnectType.STRING, None))
    return Column(name, ctype, optional, logical_name, source_type=kind)


def _with_nulls(definition: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """An insert's or load's row with the definition columns it lacks as NULL (see the module doc),
    but for key columns: a primary key is never NULL, so one the row lacks stays absent."""
    key = definition.key
    missing = [name for name in definition.names if name not in row and name not in key]
    return {**row, **dict.fromkeys(missing, None)} if missing else row


def _with_extra_columns(
    definition: TableSchema, after: dict[str, Any] | None, before: dict[str, Any] | None
) -> TableSchema:
    """The definition's table plus the columns of the images it lacks, typed by inference."""
    has = definition.has
    extra = [
        {k: v for k, v in image.items() if not has(k)}
        for image in (after, before)
        if image is not None and not all(map(has, image))
    ]
    if not extra:
        return definition
    columns = definition.columns + infer_columns(extra)
    return table_schema(definition.db, definition.schema, definition.table, columns, definition.key)

