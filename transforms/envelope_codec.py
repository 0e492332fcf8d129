"""Change and row events as Debezium-envelope records: a table's Connect schemas and value
encoders (:class:`_TableCodec`, cached per table and options), the key, the ``source`` block,
before/after images with unavailable-value marks, tombstones and key-change splits. Called by
:func:`transforms.envelope.emit`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from transforms.connect import (
    MEMO_ENTRIES,
    Column,
    ConnectType,
    DecimalHandlingMode,
    TableSchema,
    struct_schema,
)
from transforms.envelope_model import (
    _VERSION,
    AFTER,
    BEFORE,
    NEW_KEY_HEADER,
    OLD_KEY_HEADER,
    OP,
    SOURCE,
    TRANSACTION,
    TS_MS,
    UNAVAILABLE_AFTER,
    UNAVAILABLE_BEFORE,
    ChangeEvent,
    EmitOptions,
    NativeLayout,
    Operation,
    OutRecord,
    RowEvent,
    SchemaJson,
    SourceInfo,
)
from transforms.errors import DecodeError, RequiredColumnError, caused_by
from transforms.table_budget import TableLru
from transforms.values import (
    UNAVAILABLE,
    UNAVAILABLE_BYTES,
    CoercionError,
    Encoder,
    encoder_for,
    encoder_passes,
)

_SOURCE_BASE: tuple[Column, ...] = (
    Column("version", ConnectType.STRING, False),
    Column("connector", ConnectType.STRING, False),
    Column("name", ConnectType.STRING, False),
    Column("ts_ms", ConnectType.INT64, True),
    Column("snapshot", ConnectType.STRING, True),
    Column("db", ConnectType.STRING, True),
    Column("sequence", ConnectType.STRING, True),
    Column("schema", ConnectType.STRING, True),
    Column("table", ConnectType.STRING, True),
)
_SOURCE_BASE_NAMES = frozenset(c.name for c in _SOURCE_BASE)

_TRANSACTION_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": TRANSACTION,
}


def absent_mark(col: Column, mode: DecimalHandlingMode) -> Any:
    """What a column absent from a change (not NULL) is emitted as.

    Where the Connect type can hold it, Debezium's placeholder: the string itself in a string
    column, its UTF-8 bytes in a plain bytes column (as Debezium's ``unavailable.value.placeholder``).
    Anywhere else (numbers, booleans, dates, decimals, structs, arrays) a string would make the
    record invalid for a strict Connect consumer, so the cell is ``null`` and the column is named in
    ``source.unavailable_after`` (or ``unavailable_before``); readers of those lists, such as the
    sink, keep the stored value.

    >>> absent_mark(Column("s", ConnectType.STRING), DecimalHandlingMode.PRECISE)
    '__debezium_unavailable_value'
    >>> absent_mark(Column("n", ConnectType.INT64), DecimalHandlingMode.PRECISE) is None
    True
    """
    if col.is_decimal:
        return UNAVAILABLE if mode is DecimalHandlingMode.STRING else None
    if col.type is ConnectType.STRING:
        return UNAVAILABLE
    if col.type is ConnectType.BYTES and col.logical is None:
        return UNAVAILABLE_BYTES
    return None


_INT64_TOP = 1 << 63


def source_field_type(value: Any) -> ConnectType:
    """The Connect type of a format's own ``source`` field value (see :func:`source_field_value`)."""
    if isinstance(value, bool):
        return ConnectType.BOOLEAN
    if isinstance(value, int):
        return ConnectType.INT64 if -_INT64_TOP <= value < _INT64_TOP else ConnectType.STRING
    if isinstance(value, float):
        return ConnectType.FLOAT64
    return ConnectType.STRING


_source_schema_cache: dict[tuple[str, tuple[tuple[str, ConnectType], ...]], dict[str, Any]] = {}


def _source_schema(connector: str, extras: tuple[tuple[str, ConnectType], ...]) -> dict[str, Any]:
    cache_key = (connector, extras)
    schema = _source_schema_cache.get(cache_key)
    if schema is None:
        cols = _SOURCE_BASE + tuple(Column(n, t, True) for n, t in extras)
        schema = struct_schema(
            cols, f"io.cdcnorm.connector.{connector}.Source", False, DecimalHandlingMode.PRECISE, SOURCE
        )
        if len(_source_schema_cache) < 10_000:
            _source_schema_cache[cache_key] = schema
    return schema


_native_source_schemas: dict[tuple[str, tuple[tuple[str, ConnectType], ...]], dict[str, Any]] = {}


def _native_source_schema(source: Mapping[str, Any]) -> dict[str, Any]:
    """A schema for a Debezium source block that arrived without one (``schemas.enable=false``),
    typed from its values, named as Debezium names it (``io.debezium.connector.<connector>.Source``)."""
    connector = source.get("connector")
    # the schema's name comes from the connector: part of the key, as the field shape is
    name = f"io.debezium.connector.{connector if isinstance(connector, str) else 'unknown'}.Source"
    shape = tuple((field, source_field_type(value)) for field, value in source.items())
    schema = _native_source_schemas.get((name, shape))
    if schema is None:
        cols = tuple(Column(n, t, True) for n, t in shape)
        schema = struct_schema(cols, name, False, DecimalHandlingMode.PRECISE, SOURCE)
        if len(_native_source_schemas) > 10_000:
            _native_source_schemas.clear()
        _native_source_schemas[(name, shape)] = schema
    return schema


def _string_array(name: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "optional": False}, "optional": True, "field": name}


_UNAVAILABLE_FIELDS = (_string_array(UNAVAILABLE_BEFORE), _string_array(UNAVAILABLE_AFTER))
# id(source schema) -> (source schema, the same with the unavailable-column lists)
_with_unavailable_cache: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}


def _with_unavailable(source_schema: dict[str, Any]) -> dict[str, Any]:
    """``source_schema`` plus the optional ``unavailable_before``/``unavailable_after`` arrays."""
    hit = _with_unavailable_cache.get(id(source_schema))
    if hit is not None and hit[0] is source_schema:
        return hit[1]
    schema = {**source_schema, "fields": [*source_schema["fields"], *_UNAVAILABLE_FIELDS]}
    if len(_with_unavailable_cache) > 10_000:
        _with_unavailable_cache.clear()
    _with_unavailable_cache[id(source_schema)] = (source_schema, schema)
    return schema


def _has_unavailable(row: dict[str, Any]) -> bool:
    """Whether a cell of ``row`` is the UNAVAILABLE placeholder (a str; not ``UNAVAILABLE in
    row.values()``, which asks every value, a Decimal through an isinstance check of numbers'
    ABCs in Python)."""
    return any(type(value) is str and value == UNAVAILABLE for value in row.values())


def source_field_value(value: Any) -> Any:
    """A format's own ``source`` field value in JSON form: scalars as they are (an integer beyond
    int64 as its text), objects and arrays as JSON text, anything else as ``str``."""
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64_TOP <= value < _INT64_TOP:
        return str(value)  # beyond int64: a string field (see _extra_type)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def _topic_base(opts: EmitOptions, table: TableSchema) -> str:
    return opts.topic_template.format(
        prefix=opts.prefix,
        db=table.namespace,
        schema=table.schema or table.db or "default",
        table=table.table or "_",
    )


_RowParts = tuple[tuple[tuple[str, Encoder, type], ...], tuple[str, ...], dict[str, Any], dict[str, Any]]

# (columns, decimal mode) -> what encoding their rows takes, shared by the codecs of the tables
# with those columns (tables of one structure, the many tenants of one database, read the same
# memory per record), bounded by the table budget.
_row_parts_cache: TableLru[tuple[tuple[Column, ...], DecimalHandlingMode], _RowParts] = TableLru(
    lambda key, _: len(key[0])
)


def _row_parts(columns: tuple[Column, ...], mode: DecimalHandlingMode) -> _RowParts:
    """The encoders of ``columns`` (column, encoder, the type of values the encoder returns
    unchanged: their cells are skipped), the columns a Connect consumer refuses null for, what
    an absent cell becomes in a column that cannot hold the placeholder string, and the same
    marks encoded (for images that arrive encoded: :attr:`ChangeEvent.encoded`)."""
    key = (columns, mode)
    parts = _row_parts_cache.get(key)
    if parts is None:
        encoders = tuple(
            (c.name, enc, encoder_passes(enc)) for c in columns if (enc := encoder_for(c, mode)) is not None
        )
        marks = {c.name: mark for c in columns if (mark := absent_mark(c, mode)) is not UNAVAILABLE}
        parts = (encoders, tuple(c.name for c in columns if not c.optional), marks, encode_cells(encoders, marks))
        _row_parts_cache.put(key, parts)
    return parts


def encode_cells(encoders: tuple[tuple[str, Encoder, type], ...], row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its cells in Connect JSON form (``row`` itself when no cell changes)."""
    out: dict[str, Any] | None = None
    for name, enc, passes in encoders:
        value = row.get(name)
        if value is None or type(value) is passes:
            continue
        if out is None:
            out = dict(row)
        out[name] = enc(value)
    return row if out is None else out


class _TableCodec:
    """Cached schemas and encoders of one table under one set of emit options.

    The schemas are shared by every record of the table (never mutated) and registered with
    their JSON, so serializing a record serializes only its payload.
    """

    __slots__ = (
        "absent_marks",
        "encoded_marks",
        "encoders",
        "envelope_name",
        "envelopes",
        "key_cols",
        "key_encoders",
        "key_schema",
        "last_source",
        "native_envelopes",
        "required",
        "row_schema",
        "schemas",
        "table_name",
        "topic",
    )

    def __init__(self, table: TableSchema, opts: EmitOptions) -> None:
        mode = opts.decimal_mode
        if not all(c.name for c in table.columns):  # Connect refuses a struct field without a name
            raise DecodeError("emit", None, f"table {table.qualified_name} has a column without a name")
        self.table_name = table.qualified_name
        self.topic = _topic_base(opts, table)
        base = f"{opts.prefix}.{table.namespace}.{table.table}"
        self.envelope_name = f"{base}.Envelope"
        # the shared schemas of this table's records, with their JSON once used (OutRecord.schemas)
        self.schemas: SchemaJson = {}
        self.row_schema = self._encoded(struct_schema(table.columns, f"{base}.Value", True, mode))
        key_cols = table.key_columns()
        self.key_cols = tuple(c.name for c in key_cols)
        self.key_schema = self._encoded(struct_schema(key_cols, f"{base}.Key", False, mode)) if key_cols else None
        self.encoders, self.required, self.absent_marks, self.encoded_marks = _row_parts(table.columns, mode)
        self.key_encoders = _row_parts(key_cols, mode)[0]
        # the source info of the last envelope, with its source block and schema (shared, never mutated)
        self.last_source: tuple[SourceInfo, dict[str, Any], dict[str, Any] | None] | None = None
        # id(source schema) -> (source schema, envelope schema); the entry keeps the id valid
        self.envelopes: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        # (id(layout), id(source schema)) -> (layout, source schema, envelope schema) of Debezium input
        self.native_envelopes: dict[tuple[int, int], tuple[NativeLayout, dict[str, Any], dict[str, Any]]] = {}

    def _encoded(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Register a shared schema of this table's records with this codec (returns it): its
        records find its JSON here (``OutRecord.schemas``); a copy of a record serializes it."""
        self.schemas[id(schema)] = (schema, None)
        return schema

    def envelope_schema(self, source_schema: dict[str, Any]) -> dict[str, Any]:
        """The value schema of this table's envelopes with ``source_schema`` (shared, cached)."""
        hit = self.envelopes.get(id(source_schema))
        if hit is not None and hit[0] is source_schema:
            return hit[1]
        schema = {
            "type": "struct",
            "fields": [
                {**self.row_schema, "field": BEFORE},
                {**self.row_schema, "field": AFTER},
                source_schema,
                {"type": "string", "optional": False, "field": OP},
                {"type": "int64", "optional": True, "field": TS_MS},
                _TRANSACTION_SCHEMA,
            ],
            "optional": False,
            "name": self.envelope_name,
            "version": 1,
        }
        if len(self.envelopes) < 256:
            self.envelopes[id(source_schema)] = (source_schema, self._encoded(schema))
        return schema

    def native_envelope_schema(self, layout: NativeLayout, source_schema: dict[str, Any]) -> dict[str, Any]:
        """The envelope schema of a Debezium record re-emitted as it came: the connector's field
        order, extra fields and version around this table's row schema (shared, cached)."""
        hit = self.native_envelopes.get((id(layout), id(source_schema)))
        if hit is not None and hit[0] is layout and hit[1] is source_schema:
            return hit[2]
        ours = {
            BEFORE: {**self.row_schema, "field": BEFORE},
            AFTER: {**self.row_schema, "field": AFTER},
            SOURCE: {**source_schema, "field": SOURCE},
            OP: {"type": "string", "optional": False, "field": OP},
            TS_MS: {"type": "int64", "optional": True, "field": TS_MS},
            TRANSACTION: layout.transaction_schema or _TRANSACTION_SCHEMA,
        }
        for extra in layout.extra_fields:
            ours[extra["field"]] = extra
        fields = [ours.pop(name) for name in layout.order if name in ours]
        fields.extend(ours.values())
        schema = {"type": "struct", "fields": fields, "optional": False, "name": self.envelope_name}
        if layout.version is not None:
            schema["version"] = layout.version
        if len(self.native_envelopes) < 256:
            self.native_envelopes[(id(layout), id(source_schema))] = (layout, source_schema, self._encoded(schema))
        return schema

    def encode_image(
        self, row: dict[str, Any] | None, encoded: bool = False
    ) -> tuple[dict[str, Any] | None, list[str] | None]:
        """The row in Connect JSON form, and the columns that are absent from it but cannot hold
        the placeholder (emitted as null; see :func:`absent_mark`), or ``None`` when there are none.

        ``encoded``: the row's cells are in Connect JSON form already (:attr:`ChangeEvent.encoded`).
        """
        if row is None:
            return None, None
        missing: list[str] = []
        if _has_unavailable(row):
            row = dict(row)
            marks = self.encoded_marks if encoded else self.absent_marks
            for name, value in row.items():
                if type(value) is str and value == UNAVAILABLE and name in marks:
                    mark = row[name] = marks[name]
                    if mark is None:
                        missing.append(name)
        for name in self.required:
            if row.get(name) is None:
                raise RequiredColumnError(self.table_name, name, name in missing)
        if encoded:
            return row, missing or None
        try:
            return self.encode_row(row), missing or None
        except CoercionError as exc:  # a value its column's Connect type cannot hold
            raise caused_by(DecodeError("emit", None, f"{self.table_name}: {exc}"), exc) from exc

    def encode_row(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """The row with its cells in Connect JSON form: ``row`` itself when no cell changes, else
        a copy (the row is never modified). Absent cells must already be marked (``encode_image``)."""
        return None if row is None else encode_cells(self.encoders, row)

    def key(
        self, before: dict[str, Any] | None, after: dict[str, Any] | None, encoded: bool = False
    ) -> dict[str, Any] | None:
        return self.wrap_key(key_payload(self.key_cols, before, after), encoded)

    def wrap_key(self, payload: dict[str, Any] | None, encoded: bool = False) -> dict[str, Any] | None:
        """The key record of a key payload (encoded in place unless ``encoded`` says its values
        are in Connect JSON form already; pass a payload you own)."""
        if payload is None or self.key_schema is None:
            return None
        if None in payload.values():  # a key field is never optional in Connect
            names = ", ".join(name for name, value in payload.items() if value is None)
            raise RequiredColumnError(self.table_name, names, False, "primary key column")
        if encoded:
            return {"schema": self.key_schema, "payload": payload}
        for name, enc, passes in self.key_encoders:
            value = payload.get(name)
            if value is not None and type(value) is not passes:
                payload[name] = enc(value)
        return {"schema": self.key_schema, "payload": payload}


# (table, options) -> codec, bounded by the table budget (transforms.table_budget), least recently
# used first out. A table object also keeps the codec it was given per options object
# (TableSchema.memo: id(opts) -> (opts, codec), the entry holds the options so the id is not
# reused meanwhile): decoders reuse their table objects, so one small lookup finds it, without
# hashing every column of the table per record.
_codec_cache: TableLru[tuple[TableSchema, EmitOptions], _TableCodec] = TableLru(
    lambda key, _: len(key[0].columns)
)
_last_codec: list[tuple[TableSchema, EmitOptions, _TableCodec] | None] = [None]


def _codec(table: TableSchema, opts: EmitOptions) -> _TableCodec:
    last = _last_codec[0]
    if last is not None and last[0] is table and last[1] is opts:  # runs of one table: the common case
        return last[2]
    memo = table.memo
    hit = memo.get(id(opts))
    if hit is not None and hit[0] is opts:
        codec: _TableCodec = hit[1]
    else:
        cache_key = (table, opts)
        found = _codec_cache.get(cache_key)
        if found is None:
            found = _TableCodec(table, opts)
            _codec_cache.put(cache_key, found)
        codec = found
        if len(memo) < MEMO_ENTRIES:
            memo[id(opts)] = (opts, codec)
    _last_codec[0] = (table, opts, codec)
    return codec


def key_payload(
    key_cols: Iterable[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The key columns' values: from ``after`` where present, else from ``before``.

    Returns ``None`` when there are no key columns or a key value is unknown.

    >>> key_payload(["id"], {"id": 1}, None)
    {'id': 1}
    """
    out: dict[str, Any] = {}
    for name in key_cols:
        value: Any = UNAVAILABLE
        if after is not None:
            value = after.get(name, UNAVAILABLE)
        if (value is UNAVAILABLE or value == UNAVAILABLE) and before is not None:
            value = before.get(name, UNAVAILABLE)
        if isinstance(value, str) and value == UNAVAILABLE:
            return None
        out[name] = value
    return out or None


# ----------------------------------------------------------------------------- emit


def _source_block(
    source: SourceInfo, db: str | None, schema: str | None, table: str | None, opts: EmitOptions
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    block: dict[str, Any] = {
        "version": _VERSION,
        "connector": source.connector,
        "name": opts.prefix,
        "ts_ms": source.ts_ms,
        "snapshot": source.snapshot._value_,  # the plain str (Enum.value is a slow property)
        "db": db,
        "sequence": source.sequence,
        "schema": schema,
        "table": table,
    }
    extras: list[tuple[str, ConnectType]] = []
    for name, value in source.fields.items():
        if name in _SOURCE_BASE_NAMES:
            continue
        if not name:  # Connect refuses a struct field without a name
            raise DecodeError(source.connector, "source", "a source field without a name")
        kind = type(value)
        if kind is str or value is None:
            block[name] = value
            extras.append((name, ConnectType.STRING))
        elif kind is int and -_INT64_TOP <= value < _INT64_TOP:
            block[name] = value
            extras.append((name, ConnectType.INT64))
        else:
            block[name] = source_field_value(value)
            extras.append((name, source_field_type(value)))
    schema_json = _source_schema(source.connector, tuple(extras)) if opts.schemas else None
    return block, schema_json


def _envelope_value(
    event: ChangeEvent,
    codec: _TableCodec,
    op: Operation,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    opts: EmitOptions,
    encoded: bool,
) -> dict[str, Any]:
    info = event.source
    native = info.native
    last = codec.last_source
    if native is not None:
        source = native.source
        source_schema = (native.layout.source_schema or _native_source_schema(source)) if opts.schemas else None
    elif last is not None and last[0] is info:  # the rows of one message share their source block
        source, source_schema = last[1], last[2]
    else:
        table = event.table
        source, source_schema = _source_block(info, table.db, table.schema, table.table, opts)
        codec.last_source = (info, source, source_schema)
    before_json, before_missing = codec.encode_image(before, encoded)
    after_json, after_missing = codec.encode_image(after, encoded)
    if before_missing or after_missing:
        source = {**source, UNAVAILABLE_BEFORE: before_missing, UNAVAILABLE_AFTER: after_missing}
        if source_schema is not None:
            source_schema = _with_unavailable(source_schema)
    tx = event.transaction
    if tx is not None:
        for order in (tx.total_order, tx.data_collection_order):
            if order is not None and not -_INT64_TOP <= order < _INT64_TOP:
                raise DecodeError(info.connector, "transaction", f"event order {order} is beyond int64")
    payload = {
        BEFORE: before_json,
        AFTER: after_json,
        SOURCE: source,
        OP: op._value_,
        TS_MS: event.ts_ms if event.ts_ms is not None else event.source.ts_ms,
        TRANSACTION: None
        if tx is None
        else {
            "id": tx.id,
            "total_order": tx.total_order if tx.total_order is not None else 1,
            "data_collection_order": tx.data_collection_order if tx.data_collection_order is not None else 1,
        },
    }
    if native is not None:
        payload.update(native.extras)
        if source_schema is None:
            return payload
        return {"schema": codec.native_envelope_schema(native.layout, source_schema), "payload": payload}
    if source_schema is None:
        return payload
    return {"schema": codec.envelope_schema(source_schema), "payload": payload}


def _encoded(event: ChangeEvent, opts: EmitOptions) -> bool:
    """Whether the event's images are in Connect JSON form already (:attr:`ChangeEvent.encoded`)."""
    mode = event.encoded
    if mode is None:
        return False
    if mode is not opts.decimal_mode:  # a decoder's mistake: never emit another mode's values
        raise DecodeError("emit", None, f"images encoded for decimal mode {mode.value}, emitting {opts.decimal_mode.value}")
    return True


def _wrap_key(key: dict[str, Any] | None, opts: EmitOptions) -> dict[str, Any] | None:
    if key is None or opts.schemas:
        return key
    payload: dict[str, Any] = key["payload"]
    return payload


def _change_key(codec: _TableCodec, event: ChangeEvent) -> tuple[dict[str, Any] | None, bool]:
    """The key payload of a change, and whether the change is an update of the key itself.

    For a key update the payload is the old key's.
    """
    cols = codec.key_cols
    if not cols:
        return None, False
    before, after = event.before, event.after
    if event.op is Operation.UPDATE and before is not None and after is not None:
        new = key_payload(cols, None, after)
        if new is None:
            return key_payload(cols, before, after), False
        old = key_payload(cols, before, None)
        if old is not None and old != new:
            return old, True
        return new, False  # every key column is in `after`, so this is key_payload(before, after)
    return key_payload(cols, before, after), False


def _emit_change(event: ChangeEvent, opts: EmitOptions) -> list[OutRecord]:
    codec = _codec(event.table, opts)
    topic = event.topic or codec.topic
    payload, key_changed = _change_key(codec, event)
    encoded = _encoded(event, opts)
    if key_changed:
        old_key = codec.wrap_key(payload, encoded)
        new_key = codec.key(None, event.after, encoded)
        old_key_json = orjson.dumps(_wrap_key(old_key, opts))
        new_key_json = orjson.dumps(_wrap_key(new_key, opts))
        out = [
            OutRecord(
                topic,
                _wrap_key(old_key, opts),
                _envelope_value(event, codec, Operation.DELETE, event.before, None, opts, encoded),
                (*event.headers, (NEW_KEY_HEADER, new_key_json)),
            )
        ]
        if opts.tombstones:
            out.append(OutRecord(topic, _wrap_key(old_key, opts), None, ((NEW_KEY_HEADER, new_key_json),)))
        out.append(
            OutRecord(
                topic,
                _wrap_key(new_key, opts),
                _envelope_value(event, codec, Operation.CREATE, None, event.after, opts, encoded),
                (*event.headers, (OLD_KEY_HEADER, old_key_json)),
            )
        )
        for record in out:
            record.schemas = codec.schemas
        return out
    key = _wrap_key(codec.wrap_key(payload, encoded), opts)
    record = OutRecord(topic, key, _envelope_value(event, codec, event.op, event.before, event.after, opts, encoded), event.headers)
    record.schemas = codec.schemas
    if event.op is Operation.DELETE and opts.tombstones and key is not None:
        tombstone = OutRecord(topic, key, None)
        tombstone.schemas = codec.schemas
        return [record, tombstone]
    return [record]



def _emit_row(event: RowEvent, opts: EmitOptions) -> list[OutRecord]:
    codec = _codec(event.table, opts)
    topic = event.topic or codec.topic
    key = _wrap_key(codec.key(event.key_source, None), opts)
    out: list[OutRecord] = []
    if event.row is not None:
        payload, _ = codec.encode_image(event.row)
        value = {"schema": codec.row_schema, "payload": payload} if opts.schemas else payload
        record = OutRecord(topic, key, value, event.headers)
        record.schemas = codec.schemas
        out.append(record)
    if event.op is Operation.DELETE and event.tombstone and opts.tombstones and key is not None:
        out.append(OutRecord(topic, key, None))
    return out
