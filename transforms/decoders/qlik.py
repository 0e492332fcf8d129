"""Qlik (Attunity) Replicate streaming messages, JSON (``qlik-json``) and Avro (``qlik-avro``).

Every Replicate message is a *Replicate envelope*: ``magic`` (``"atMSG"``), ``type`` (``MD`` for
a metadata message, ``DT`` for a data message), ``headers`` (unused by Replicate),
``messageSchemaId``, ``messageSchema`` and ``message``. In JSON the envelope is a JSON object and
``message`` a nested object. In Avro the envelope is the ``MessageEnvelope`` record
(:data:`ENVELOPE_SCHEMA`) and ``message`` holds Avro bytes: a metadata message is
self-describing (``messageSchema`` is the Avro schema of its ``message``); a data message is
decoded with the ``dataSchema`` of the metadata message whose ``schemaId`` equals its
``messageSchemaId``.

Semantics:

* A metadata message is validated and registered in the metadata store under
  ``qlik.schema``/``schemaId`` (a JSON document, see
  :meth:`~transforms.decoders.qlik_model.QlikTableMetadata.to_document`), so any replica sharing
  the store decodes the data messages. The last ``tableVersion`` seen per table (server, task,
  schema, table) is kept under ``qlik.table-version``; a metadata message whose version is newer
  than that (or the first one seen for the table: ``CREATE``, else ``ALTER``) gives a
  :class:`SchemaChangeEvent`; an already-seen or older version gives ``[]``.
* A data message whose ``messageSchemaId`` is not registered raises
  :class:`~transforms.errors.UnknownSchemaError`; nothing is guessed.
* ``REFRESH`` → ``r`` (snapshot ``"true"``), ``INSERT`` → ``c``, ``UPDATE`` → ``u`` (``beforeData``
  is the before image when present), ``DELETE`` → ``d`` with ``data`` as the before image (the
  deleted row; ``beforeData`` is used when ``data`` is null).
* A column whose ``columnMask`` bit is clear, or which is missing from the image, is
  ``UNAVAILABLE`` (never null) in both images. Mask bit order: see
  :mod:`transforms.decoders.qlik_model`. The ``changeMask`` is kept as ``change_mask`` (hex) and
  ``changed_columns`` (names, comma-separated) in ``source``.
* ``changeSequence`` → ``source.sequence`` and ``change_seq``; ``streamPosition`` →
  ``stream_position``; ``timestamp`` (UTC) → ``source.ts_ms``; ``transactionId`` /
  ``transactionEventCounter`` → the transaction block (counter as both orders) and fields
  ``transaction_id``, ``transaction_event_counter``, ``transaction_last_event``. With
  ``transaction.end.events=true`` an ``END`` :class:`TransactionEvent` follows the change whose
  ``transactionLastEvent`` is true (off by default: Replicate sends no BEGIN, and a transaction
  spread over several topics has no single last event).
* Binary values are hex digits in JSON messages and bytes in Avro messages.

Avro schemas come from the messages themselves (``messageSchema``, ``dataSchema``), so they are
parsed within the ``max.json.depth`` limit and rejected when an array's items encode in zero
bytes (``null``, an empty record): such an array holds any number of items in a few bytes, a
memory and time bomb for the Avro reader.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

import orjson
from fastavro import parse_schema, schemaless_reader
from pydantic import Field

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT, Decoder, Message
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.fields import epoch_millis, parse_int
from transforms.decoders.qlik_model import (
    MAX_MASK_BYTES,
    ColumnMask,
    Fail,
    QlikTableMetadata,
    hex_bytes,
    parse_metadata,
)
from transforms.decoders.rowplan import FastConverter, NotFast, RowPlans, fast_converter
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
    TransactionEvent,
    TransactionRef,
    TransactionStatus,
)
from transforms.errors import DecodeError, UnknownSchemaError
from transforms.jsonio import JsonLimitError, loads_limited
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.table_budget import text_columns
from transforms.values import CoercionError

__all__ = [
    "ENVELOPE_SCHEMA",
    "MAGIC",
    "SCHEMA_NAMESPACE",
    "VERSION_NAMESPACE",
    "QlikAvroDecoder",
    "QlikChangeReader",
    "QlikJsonDecoder",
    "QlikOptions",
    "RegisteredTable",
]

MAGIC = "atMSG"
SCHEMA_NAMESPACE = "qlik.schema"
VERSION_NAMESPACE = "qlik.table-version"

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "MessageEnvelope",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}
"""The Avro schema of the Replicate envelope (Qlik's ``MessageEnvelope``)."""

_OPERATIONS = {
    "REFRESH": Operation.READ,
    "INSERT": Operation.CREATE,
    "UPDATE": Operation.UPDATE,
    "DELETE": Operation.DELETE,
}
_NAIVE_TIMESTAMPS = frozenset({Logical.TIMESTAMP, Logical.MICRO_TIMESTAMP, Logical.NANO_TIMESTAMP})
# the caches of masks and header timestamps by their text: entries (cleared when full), and the
# longest text kept (a mask of MAX_MASK_BYTES has twice as many hex digits)
_SMALL_CACHE_LIMIT = 1024
_MAX_CACHED_TEXT = 2 * MAX_MASK_BYTES


class QlikOptions(FormatOptions):
    """Options of the Qlik Replicate decoders."""

    database_name: str | None = Field(
        None,
        alias="database.name",
        description="Database name written to source.db (Replicate names only the schema); default none.",
    )
    transaction_end_events: bool = Field(
        False,
        alias="transaction.end.events",
        description="Emit a transaction END event after each change whose transactionLastEvent is true.",
    )


@dataclass(frozen=True, slots=True)
class RegisteredTable:
    """A registered table version: its stored document, metadata and Connect structure."""

    document: Any
    metadata: QlikTableMetadata
    table: TableSchema
    # derived once for the data messages: the column names, (mask bit, name) per column in
    # ordinal order, and the column names by ordinal
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    mask_bits: tuple[tuple[int, str], ...] = field(init=False, repr=False, compare=False)
    by_ordinal: dict[int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        columns = self.metadata.columns
        object.__setattr__(self, "names", frozenset(col.name for col in self.table.columns))
        object.__setattr__(
            self,
            "mask_bits",
            tuple((qcol.ordinal - 1, col.name) for qcol, col in zip(columns, self.table.columns, strict=True)),
        )
        object.__setattr__(self, "by_ordinal", {c.ordinal: c.name for c in columns})

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.table.columns


@dataclass(frozen=True, slots=True)
class _Registration:
    """What registering a metadata message needs besides the store: worked out once per message."""

    registered: RegisteredTable
    ts_ms: int | None  # the lineage timestamp
    version_key: str  # the table's key in VERSION_NAMESPACE


def _typed_value_converter(col: Column) -> FastConverter | None:
    """The fast converter of a column whose values may come typed, as fastavro reads them.

    For a value of the type that fastavro gives the column's Avro logical type it returns what
    :meth:`QlikChangeReader._value` returns (coerce_checked keeps such a value, range-checked);
    any other value goes to :func:`~transforms.decoders.rowplan.fast_converter`'s converter.
    """
    text = fast_converter(col)
    kind: type
    typed: FastConverter
    if col.is_decimal:
        kind, typed = Decimal, _bounded_decimal
    elif col.type is ConnectType.BYTES and col.logical is None:
        kind, typed = bytes, _same
        text = hex_bytes  # what _value does with a string (raises ValueError for non-hex)
    elif col.logical in (Logical.DATE, Logical.CONNECT_DATE):
        kind, typed = dt.date, _same
    elif col.logical in _NAIVE_TIMESTAMPS:
        kind, typed = dt.datetime, _naive_utc
    else:
        return text

    def convert(raw: Any) -> Any:
        if type(raw) is kind:
            return typed(raw)
        if text is None:
            raise NotFast
        return text(raw)

    return convert


def _same(raw: Any) -> Any:
    return raw


def _bounded_decimal(raw: Any) -> Any:
    """``raw`` (a Decimal) within check_value's bounds."""
    if (
        raw.is_finite()
        and len(raw.as_tuple().digits) <= MAX_DECIMAL_DIGITS
        and -MAX_DECIMAL_EXPONENT <= raw.adjusted() <= MAX_DECIMAL_EXPONENT
    ):
        return raw
    raise NotFast


def _naive_utc(raw: Any) -> Any:
    """``raw`` (a datetime) as _value makes it for a naive timestamp column: in UTC, zoneless."""
    return raw if raw.tzinfo is None else raw.astimezone(dt.UTC).replace(tzinfo=None)


class QlikChangeReader:
    """The Replicate logic shared by the JSON and Avro decoders (by composition).

    It registers metadata messages in the decoder's metadata store, resolves data messages'
    schema ids, and turns a data message body (already parsed: JSON object or Avro record) into
    events. Errors are the owning decoder's :class:`DecodeError`.
    """

    def __init__(self, decoder: Decoder, options: QlikOptions) -> None:
        self._decoder = decoder
        self._options = options
        # schema id -> its registered table (bounded by the table budget, as are the caches below)
        self._tables: TableLru[str, RegisteredTable] = TableLru(lambda _, table: len(table.table.columns))
        self._schemas = TableCache()
        # metadata message (its bytes) -> its registration: validating a metadata message and
        # building its table depend on the message alone; the store is read and written every time
        self._registrations: TableLru[bytes, _Registration] = TableLru(
            lambda payload, _: text_columns(payload)
        )
        # Avro gives typed values (Decimal, date, datetime, bytes); JSON gives text and numbers
        self._plans = RowPlans(_typed_value_converter if decoder.binary else fast_converter)
        self._masks: dict[str | bytes, ColumnMask] = {}  # mask text or bytes -> the mask
        self._times: dict[str, int] = {}  # header timestamp -> epoch ms (a transaction shares it)
        # (id of a registered table, change mask bits) -> (that table, changed_columns)
        self._changed: TableLru[tuple[int, int], tuple[RegisteredTable, str]] = TableLru(
            lambda key, value: text_columns(value[1]) + key[1].bit_length() // 512
        )

    # -- metadata --------------------------------------------------------------------

    def parse_metadata(self, body: Any, payload: bytes) -> QlikTableMetadata:
        """A metadata message body validated into table metadata."""
        return parse_metadata(body, "message", self._fail(payload))

    def register_message(self, payload: bytes, parse: Callable[[], QlikTableMetadata]) -> list[Event]:
        """:meth:`register` the metadata message ``payload``, which ``parse`` validates.

        ``parse`` runs once per distinct message: the same bytes give the same metadata (or the
        same error, which is not cached), so the validated result is kept by the message bytes.
        """
        if type(payload) is not bytes:  # e.g. a bytearray: not hashable
            return self._register(self._registration(parse(), payload))
        registration = self._registrations.get(payload)
        if registration is None:
            registration = self._registration(parse(), payload)
            self._registrations.put(payload, registration)
        return self._register(registration)

    def register(self, meta: QlikTableMetadata, payload: bytes) -> list[Event]:
        """Store a table version; a SchemaChangeEvent if its ``tableVersion`` is new for the table."""
        return self._register(self._registration(meta, payload))

    def _registration(self, meta: QlikTableMetadata, payload: bytes) -> _Registration:
        return _Registration(
            ts_ms=self._lineage_ms(meta, payload),
            registered=self._registered(meta.to_document(), meta),
            version_key=orjson.dumps([meta.server, meta.task, meta.schema, meta.table]).decode(),
        )

    def _register(self, registration: _Registration) -> list[Event]:
        registered = registration.registered
        meta = registered.metadata
        store = self._decoder.metadata
        version_key = registration.version_key
        last = store.get(VERSION_NAMESPACE, version_key)
        last_version = last.get("tableVersion") if isinstance(last, Mapping) else None
        if isinstance(last_version, bool) or not isinstance(last_version, int):
            last_version = None
        store.put(SCHEMA_NAMESPACE, meta.schema_id, registered.document)
        self._remember(meta.schema_id, registered)
        if last_version is not None and meta.table_version <= last_version:
            return []
        store.put(
            VERSION_NAMESPACE, version_key, {"tableVersion": meta.table_version, "schemaId": meta.schema_id}
        )
        source = SourceInfo(
            connector=self._decoder.format_id,
            ts_ms=registration.ts_ms,
            fields={
                "schema_id": meta.schema_id,
                "table_version": meta.table_version,
                "server": meta.server,
                "task": meta.task,
            },
        )
        return [
            SchemaChangeEvent(
                db=registered.table.db,
                schema=registered.table.schema,
                table=meta.table,
                ddl=None,
                source=source,
                change_type="CREATE" if last_version is None else "ALTER",
                new_table=registered.table,
            )
        ]

    def resolve(self, schema_id: Any, payload: bytes) -> RegisteredTable:
        """The registered table of a data message's ``messageSchemaId``.

        Raises :class:`UnknownSchemaError` when no metadata message registered it.
        """
        if not isinstance(schema_id, str) or not schema_id:
            raise self._decoder.error(
                "messageSchemaId",
                f"expected the schema id of a metadata message, found {schema_id!r}"
                " (publish Replicate metadata messages to decode data messages)",
                payload,
            )
        document = self._decoder.metadata.get(SCHEMA_NAMESPACE, schema_id)
        if document is None:
            raise UnknownSchemaError(
                self._decoder.format_id,
                "messageSchemaId",
                f"unknown schema id {schema_id!r}: no metadata message registered it yet",
                payload,
            )
        cached = self._tables.get(schema_id)
        if cached is not None and (cached.document is document or cached.document == document):
            return cached
        meta = parse_metadata(document, f"{SCHEMA_NAMESPACE}/{schema_id}", self._fail(payload))
        registered = self._registered(document, meta)
        self._remember(schema_id, registered)
        return registered

    # -- data ------------------------------------------------------------------------

    def changes(self, registered: RegisteredTable, body: Any, payload: bytes) -> list[Event]:
        """The events of one data message body (``data``, ``beforeData``, ``headers``)."""
        if not isinstance(body, Mapping):
            raise self._decoder.error("message", f"expected an object, found {type(body).__name__}", payload)
        headers = body.get("headers")
        if not isinstance(headers, Mapping):
            raise self._decoder.error(
                "message.headers", f"expected an object, found {type(headers).__name__}", payload
            )
        op_name = headers.get("operation")
        op = _OPERATIONS.get(op_name) if isinstance(op_name, str) else None
        if op is None:
            raise self._decoder.error(
                "message.headers.operation",
                f"expected one of {', '.join(_OPERATIONS)}, found {op_name!r}",
                payload,
            )
        data = self._image_object(body, "data", payload)
        before_data = self._image_object(body, "beforeData", payload)
        column_mask = self._mask(headers, "columnMask", payload)
        change_mask = self._mask(headers, "changeMask", payload)

        before: dict[str, Any] | None = None
        after: dict[str, Any] | None = None
        if op is Operation.DELETE:
            field, image = ("message.data", data) if data is not None else ("message.beforeData", before_data)
            if image is None:
                raise self._decoder.error(
                    "message.data", "a DELETE needs the deleted row, found null", payload
                )
            before = self._image(registered, image, field, column_mask, payload)
        else:
            if data is None:
                raise self._decoder.error("message.data", f"a {op_name} needs the row, found null", payload)
            after = self._image(registered, data, "message.data", column_mask, payload)
            if op is Operation.UPDATE and before_data is not None:
                before = self._image(registered, before_data, "message.beforeData", column_mask, payload)

        source, tx, last_event = self._source(registered, headers, op, change_mask, column_mask, payload)
        events: list[Event] = [ChangeEvent(op, registered.table, before, after, source, tx)]
        if self._options.transaction_end_events and last_event and tx is not None:
            events.append(TransactionEvent(TransactionStatus.END, tx.id, source, event_count=tx.total_order))
        return events

    # -- helpers ---------------------------------------------------------------------

    def _fail(self, payload: bytes) -> Fail:
        decoder = self._decoder

        def fail(field: str, reason: str) -> DecodeError:
            return decoder.error(field, reason, payload)

        return fail

    def _registered(self, document: Any, meta: QlikTableMetadata) -> RegisteredTable:
        return RegisteredTable(document, meta, self._schemas.intern(meta.table_schema(self._options.database_name)))

    def _remember(self, schema_id: str, registered: RegisteredTable) -> None:
        self._tables.put(schema_id, registered)

    def _lineage_ms(self, meta: QlikTableMetadata, payload: bytes) -> int | None:
        if not meta.timestamp:
            return None
        try:
            return epoch_millis(meta.timestamp)
        except CoercionError as exc:
            raise self._decoder.error("message.lineage.timestamp", str(exc), payload) from exc

    def _image_object(self, body: Mapping[str, Any], name: str, payload: bytes) -> Mapping[str, Any] | None:
        value = body.get(name)
        if value is not None and not isinstance(value, Mapping):
            raise self._decoder.error(
                f"message.{name}", f"expected an object or null, found {type(value).__name__}", payload
            )
        return value

    def _mask(self, headers: Mapping[str, Any], name: str, payload: bytes) -> ColumnMask | None:
        raw = headers.get(name)
        if raw is None or raw in ("", b""):
            return None
        if not isinstance(raw, str | bytes):
            raise self._decoder.error(
                f"message.headers.{name}", f"expected hex digits or bytes, found {raw!r:.60}", payload
            )
        mask = self._masks.get(raw)  # a str and bytes are never equal: each has its entry
        if mask is not None:
            return mask
        try:
            mask = ColumnMask.parse(raw)
        except ValueError as exc:
            raise self._decoder.error(f"message.headers.{name}", str(exc), payload) from exc
        if len(raw) <= _MAX_CACHED_TEXT:  # not a hostile padded one
            if len(self._masks) >= _SMALL_CACHE_LIMIT:
                self._masks.clear()
            self._masks[raw] = mask
        return mask

    def _image(
        self,
        registered: RegisteredTable,
        raw: Mapping[str, Any],
        field: str,
        mask: ColumnMask | None,
        payload: bytes,
    ) -> dict[str, Any]:
        table = registered.table
        if not registered.names.issuperset(raw):
            name = next(name for name in raw if not table.has(name))  # the first unknown one
            meta = registered.metadata
            raise self._decoder.error(
                f"{field}.{name}",
                f"column not in table {meta.schema}.{meta.table} version {meta.table_version}"
                f" (schema id {meta.schema_id}); known: {', '.join(c.name for c in table.columns[:50])}",
                payload,
            )
        if mask is not None:  # a column whose mask bit is clear is absent, whatever the image holds
            bits = mask.bits
            raw = {name: raw[name] for shift, name in registered.mask_bits if name in raw and bits >> shift & 1}
        return self._plans.plan(table).typed(raw, field, payload, self._value)

    def _value(self, col: Column, raw: Any, field: str, payload: bytes | str | None) -> Any:
        # The fast converters of the row plans (rowplan.fast_converter, _typed_value_converter)
        # return what this method does, or leave the cell to it.
        if raw is None:
            return None
        if col.type is ConnectType.BYTES and not col.is_decimal and isinstance(raw, str):
            try:
                return hex_bytes(raw)
            except ValueError as exc:
                raise self._decoder.error(field, str(exc), payload) from exc
        if isinstance(raw, dt.datetime) and raw.tzinfo is not None and col.logical in _NAIVE_TIMESTAMPS:
            raw = raw.astimezone(dt.UTC).replace(tzinfo=None)
        return self._decoder.coerce(col, raw, field, payload)

    def _changed_columns(self, registered: RegisteredTable, mask: ColumnMask) -> str:
        """The names of the columns whose bits are set in a change mask, comma-separated."""
        key = (id(registered), mask.bits)
        hit = self._changed.get(key)
        if hit is not None and hit[0] is registered:  # the entry holds the table: its id is not reused
            return hit[1]
        by_ordinal = registered.by_ordinal
        names = ",".join(by_ordinal[k] for k in mask.ordinals() if k in by_ordinal)
        self._changed.put(key, (registered, names))
        return names

    def _text(self, headers: Mapping[str, Any], name: str, payload: bytes) -> str | None:
        value = headers.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self._decoder.error(
                f"message.headers.{name}", f"expected a string, found {value!r}", payload
            )
        return str(value)

    def _timestamp(self, headers: Mapping[str, Any], payload: bytes) -> int | None:
        value = headers.get("timestamp")
        if value is None or value == "":
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            ms = self._times.get(value)
            if ms is not None:
                return ms
            try:
                ms = epoch_millis(value)
            except CoercionError as exc:
                raise self._decoder.error("message.headers.timestamp", str(exc), payload) from exc
            if len(value) <= _MAX_CACHED_TEXT:  # not a hostile padded one
                if len(self._times) >= _SMALL_CACHE_LIMIT:
                    self._times.clear()
                self._times[value] = ms
            return ms
        raise self._decoder.error(
            "message.headers.timestamp", f"expected a UTC timestamp string, found {value!r}", payload
        )

    def _counter(self, headers: Mapping[str, Any], payload: bytes) -> int | None:
        value = headers.get("transactionEventCounter")
        if value is None or value == "":
            return None
        number = parse_int(value)
        if number is None or number < 0:
            raise self._decoder.error(
                "message.headers.transactionEventCounter",
                f"expected a counter >= 0, found {value!r:.60}",
                payload,
            )
        return number

    def _last_event(self, headers: Mapping[str, Any], payload: bytes) -> bool | None:
        value = headers.get("transactionLastEvent")
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self._decoder.error(
            "message.headers.transactionLastEvent", f"expected a boolean, found {value!r}", payload
        )

    def _source(
        self,
        registered: RegisteredTable,
        headers: Mapping[str, Any],
        op: Operation,
        change_mask: ColumnMask | None,
        column_mask: ColumnMask | None,
        payload: bytes,
    ) -> tuple[SourceInfo, TransactionRef | None, bool]:
        meta = registered.metadata
        change_seq = self._text(headers, "changeSequence", payload)
        tx_id = self._text(headers, "transactionId", payload)
        counter = self._counter(headers, payload)
        last_event = self._last_event(headers, payload)
        fields: dict[str, Any] = {
            "change_seq": change_seq,
            "stream_position": self._text(headers, "streamPosition", payload),
            "transaction_id": tx_id,
        }
        if counter is not None:
            fields["transaction_event_counter"] = counter
        if last_event is not None:
            fields["transaction_last_event"] = last_event
        fields["change_mask"] = change_mask.text if change_mask else None
        fields["changed_columns"] = self._changed_columns(registered, change_mask) if change_mask else None
        fields["column_mask"] = column_mask.text if column_mask else None
        fields["external_schema_id"] = self._text(headers, "externalSchemaId", payload)
        fields["schema_id"] = meta.schema_id
        fields["table_version"] = meta.table_version
        fields["server"] = meta.server
        fields["task"] = meta.task
        source = SourceInfo(
            connector=self._decoder.format_id,
            ts_ms=self._timestamp(headers, payload),
            snapshot=SnapshotMarker.TRUE if op is Operation.READ else SnapshotMarker.FALSE,
            sequence=change_seq,
            fields=fields,
        )
        tx = TransactionRef(tx_id, counter, counter) if tx_id else None
        return source, tx, bool(last_event)


class QlikJsonDecoder(Decoder):
    """Decodes Replicate JSON messages (``{"magic": "atMSG", "type": "MD"|"DT", ...}``)."""

    format_id: ClassVar[str] = "qlik-json"
    description: ClassVar[str] = "Qlik (Attunity) Replicate JSON messages: metadata (MD) and data (DT)"
    options_model: ClassVar[type[FormatOptions]] = QlikOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self.reader = QlikChangeReader(self, self.options_as(QlikOptions))

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        payload = message.value
        doc = self.load_json(message)
        magic = doc.get("magic")
        if magic != MAGIC:
            raise self.error("magic", f"expected {MAGIC!r} (a Replicate envelope), found {magic!r}", payload)
        kind = doc.get("type")
        body = doc.get("message")
        if kind == "MD":
            return self.reader.register_message(payload, lambda: self.reader.parse_metadata(body, payload))
        if kind == "DT":
            registered = self.reader.resolve(doc.get("messageSchemaId"), payload)
            return self.reader.changes(registered, body, payload)
        raise self.error("type", f"expected 'MD' (metadata) or 'DT' (data), found {kind!r}", payload)


_ENVELOPE = parse_schema(ENVELOPE_SCHEMA)

_PRIMITIVE_SIZES = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8, "bytes": 1, "string": 1}


def _min_size(schema: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()) -> int:
    """The fewest bytes a value of an Avro (JSON) schema encodes in; 0 or 1 is all that matters."""
    if isinstance(schema, list):  # a union writes its branch index
        return 1
    if isinstance(schema, str):
        if schema in _PRIMITIVE_SIZES:
            return _PRIMITIVE_SIZES[schema]
        if schema in seen or schema not in named:
            return 1  # a recursive reference (or an unknown name fastavro rejects anyway)
        return _min_size(named[schema], named, seen | {schema})
    if not isinstance(schema, dict):
        return 1
    kind = schema.get("type")
    if kind == "fixed":
        size = schema.get("size")
        return 1 if isinstance(size, int) and size > 0 else 0
    if kind == "record":
        fields = schema.get("fields")
        if not isinstance(fields, list):
            return 1
        name = schema.get("name")
        inner = seen | {name} if isinstance(name, str) else seen
        return min(1, sum(_min_size(f.get("type"), named, inner) for f in fields if isinstance(f, dict)))
    if kind in ("array", "map", "enum"):
        return 1
    return _min_size(kind, named, seen)


def _check_avro_schema(schema: Any) -> None:
    """Raise ValueError when an array's items may encode in zero bytes (see the module docs)."""
    named: dict[str, Any] = {}
    stack = [schema]
    nodes: list[dict[str, Any]] = []
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            nodes.append(node)
            name = node.get("name")
            if node.get("type") in ("record", "enum", "fixed", "error") and isinstance(name, str):
                named[name] = node
                namespace = node.get("namespace")
                if isinstance(namespace, str) and "." not in name:
                    named[f"{namespace}.{name}"] = node
            stack.extend(v for k, v in node.items() if k in ("type", "fields", "items", "values"))
    for node in nodes:
        if node.get("type") == "array" and _min_size(node.get("items"), named) == 0:
            raise ValueError(f"an array of {node.get('items')!r:.60} items, which encode in zero bytes")


class QlikAvroDecoder(Decoder):
    """Decodes Replicate Avro messages (the ``MessageEnvelope`` record; base64 lines offline)."""

    format_id: ClassVar[str] = "qlik-avro"
    description: ClassVar[str] = (
        "Qlik (Attunity) Replicate Avro messages: MessageEnvelope with metadata and data"
    )
    options_model: ClassVar[type[FormatOptions]] = QlikOptions
    binary: ClassVar[bool] = True

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self.reader = QlikChangeReader(self, self.options_as(QlikOptions))
        self._schemas: TableLru[str, Any] = TableLru(lambda text, _: text_columns(text))

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        payload = message.value
        self.check_size(payload)
        envelope = self._read(_ENVELOPE, payload, "envelope", payload)
        magic = envelope.get("magic")
        if magic != MAGIC.encode():
            raise self.error("magic", f"expected {MAGIC!r} (a Replicate envelope), found {magic!r}", payload)
        kind = envelope.get("type")
        body_bytes: bytes = envelope.get("message", b"")
        if kind == "MD":
            return self.reader.register_message(
                payload, lambda: self._metadata(envelope.get("messageSchema"), body_bytes, payload)
            )
        if kind == "DT":
            registered = self.reader.resolve(envelope.get("messageSchemaId"), payload)
            data_schema = registered.metadata.data_schema
            if data_schema is None:
                raise UnknownSchemaError(
                    self.format_id,
                    "messageSchemaId",
                    f"schema id {registered.metadata.schema_id!r} has no registered Avro dataSchema",
                    payload,
                )
            schema = self._schema(
                data_schema, f"{SCHEMA_NAMESPACE}/{registered.metadata.schema_id}.dataSchema", payload
            )
            return self.reader.changes(
                registered, self._read(schema, body_bytes, "message", payload), payload
            )
        raise self.error("type", f"expected 'MD' (metadata) or 'DT' (data), found {kind!r}", payload)

    def _metadata(self, schema_text: Any, body: bytes, payload: bytes) -> QlikTableMetadata:
        """The validated body of a metadata message, with its Avro schemas."""
        schema = self._schema(schema_text, "messageSchema", payload)
        meta = self.reader.parse_metadata(self._read(schema, body, "message", payload), payload)
        if meta.data_schema is None:
            raise self.error(
                "message.dataSchema", "expected the Avro schema of the data messages, found none", payload
            )
        self._schema(meta.data_schema, "message.dataSchema", payload)
        return meta

    def _schema(self, text: Any, field: str, payload: bytes) -> Any:
        if not isinstance(text, str) or not text:
            raise self.error(field, f"expected an Avro schema (JSON text), found {text!r:.60}", payload)
        parsed = self._schemas.get(text)
        if parsed is not None:
            return parsed
        try:
            document = loads_limited(
                text, max_bytes=self.options.max_message_bytes, max_depth=self.options.max_json_depth
            )
            _check_avro_schema(document)
            parsed = parse_schema(document)
        except (JsonLimitError, ValueError) as exc:
            raise self.error(field, f"invalid Avro schema: {exc}", payload) from exc
        except Exception as exc:  # fastavro raises many kinds of errors on bad schemas
            raise self.error(field, f"invalid Avro schema: {type(exc).__name__}: {exc}", payload) from exc
        self._schemas.put(text, parsed)
        return parsed

    def _read(self, schema: Any, data: bytes, field: str, payload: bytes) -> Any:
        buffer = io.BytesIO(data)
        try:
            value = schemaless_reader(buffer, schema, None)
        except Exception as exc:  # truncated or garbage Avro surfaces as many exception types
            raise self.error(field, f"invalid Avro data: {type(exc).__name__}: {exc}", payload) from exc
        rest = len(data) - buffer.tell()
        if rest:
            raise self.error(field, f"{rest} trailing bytes after the Avro record", payload)
        if not isinstance(value, dict):
            raise self.error(field, f"expected an Avro record, found {type(value).__name__}", payload)
        return value
