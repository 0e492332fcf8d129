"""Reading Kafka Connect JSON (``JsonConverter``) documents: schemas, values and Debezium envelopes.

Shared by the decoders whose input is Connect JSON or close to it (``debezium-json``,
``arcion-kafka``, ``cdl-json``), by composition: each decoder owns a
:class:`ConnectEnvelopeReader` and calls it; nothing here knows a format id.

* :func:`column_from_schema` / :func:`columns_from_struct` turn a Connect JSON schema into
  :class:`~transforms.connect.Column` objects, keeping logical names and parameters.
* :func:`decode_value` turns a Connect-encoded value into a Python value typed by its column:
  Decimal bytes (base64 at the schema's scale), VariableScaleDecimal structs, base64 bytes,
  ``io.debezium.time.*`` epoch numbers, ZonedTimestamp strings.
* :func:`position_sequence` builds a sortable ``source.sequence`` from a Debezium source block.
* :class:`ConnectEnvelopeReader` turns one Debezium envelope (``before``/``after``/``source``/
  ``op``/``ts_ms``/``transaction``) into a :class:`~transforms.envelope.ChangeEvent`.
* :func:`read_connect_message` is the common start of the decoders: it parses the message,
  unwraps the ``{"schema", "payload"}`` wrapper and turns a :class:`FieldError` into the
  decoder's :class:`~transforms.errors.DecodeError`.

Embedded JSON (MongoDB images, the Kafka key, the key's MongoDB ``id``) is parsed within the
decoder's ``max.message.bytes``/``max.json.depth`` (:class:`JsonLimits`), and Connect schema
parameters and values are bounded like every typed value (:func:`~transforms.decoders.base.
coerce_checked`).

Every failure is a :class:`FieldError` naming the offending field; decoders turn it into a
:class:`~transforms.errors.DecodeError` carrying the payload preview.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from transforms.connect import Column, ConnectType, DecimalHandlingMode, TableSchema, column_schema
from transforms.decoders.base import coerce_checked, type_name
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.connect_keys import (
    EnvelopeKey,
    KeyColumns,
    SchemaPrefixes,
    TableName,
    TopicTables,
    by_content,
    key_columns,
    parse_json_key,
    read_connect_message,
)
from transforms.decoders.connect_schema import (
    DEFAULT_LIMITS,
    FieldError,
    JsonLimits,
    _infer,
    column_from_schema,
    columns_from_struct,
    infer_columns,
    struct_field_schemas,
)
from transforms.decoders.connect_source import (
    _SOURCE_NAMES,
    _int,
    _position,
    from_extended_json,
    position_sequence,
    snapshot_marker,
)
from transforms.decoders.connect_values import (
    RowLayout,
    _decode_cell,
    _image_shape,
    _not_fast,
    decode_row,
    decode_value,
)
from transforms.decoders.rowplan import FastConverter, fast_converter, same_key_cells
from transforms.decoders.schemaless_json import ColumnMemory, Inferred
from transforms.envelope import (
    ChangeEvent,
    NativeLayout,
    NativeSource,
    Operation,
    SourceInfo,
    TransactionRef,
    source_field_type,
    source_field_value,
)
from transforms.errors import caused_by
from transforms.frozen import reduce_frozen
from transforms.metadata import MetadataStore
from transforms.table_budget import text_columns
from transforms.values import UNAVAILABLE, CoercionError, b64decode

if TYPE_CHECKING:
    pass

__all__ = [
    "ConnectEnvelopeReader",
    "EnvelopeKey",
    "FieldError",
    "JsonLimits",
    "RowLayout",
    "SchemaPrefixes",
    "TableName",
    "TopicTables",
    "by_content",
    "column_from_schema",
    "columns_from_struct",
    "decode_row",
    "decode_value",
    "from_extended_json",
    "infer_columns",
    "parse_json_key",
    "position_sequence",
    "read_connect_message",
    "snapshot_marker",
    "struct_field_schemas",
]

# ---------------------------------------------------------------------------- envelopes
_OPS = {op.value: op for op in Operation}
V = TypeVar("V")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _EnvelopeSchema:
    """What an envelope's Connect schema decides, derived once per distinct schema."""

    layout: RowLayout | None
    """The row columns declared by the ``after`` (else ``before``) struct; None: inferred per message."""
    source: Mapping[str, tuple[Column, FastConverter]]
    """The declared source fields that are coerced (not structs): column and fast converter."""
    native: NativeLayout | None = None
    """The connector's own envelope layout (readers of Debezium input only)."""
    base_name: str | None = None
    """The envelope schema's name without ``.Envelope`` (``<prefix>.<namespace>.<table>``)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


_SCHEMALESS = _EnvelopeSchema(None, {})

# the envelope fields cdcnorm models; a Debezium envelope's others (ts_us, ts_ns) pass through
_MODELED_FIELDS = frozenset({"before", "after", "source", "op", "ts_ms", "transaction"})
_JSON_TYPE_NAMES = {"float32": "float", "float64": "double"}
# a source block written by a Debezium connector has these (a Debezium-like producer's may not:
# Flink CDC's has only db and table); only such a block is kept as it came
_NATIVE_SOURCE_FIELDS = frozenset({"version", "connector", "name", "ts_ms"})
# connectors whose topics are named <prefix>.<schema>.<table> (the others: <prefix>.<db>.<table>)
_SCHEMA_NAMED = frozenset({"postgresql", "oracle", "db2", "informix", "yugabytedb"})


def connect_json_schema(schema: Any) -> Any:
    """A Connect JSON schema with Java's ``float32``/``float64`` type names written as
    ``JsonConverter`` writes them (``float``/``double``); anything else unchanged."""
    if isinstance(schema, dict):
        out = {k: connect_json_schema(v) for k, v in schema.items()}
        kind = out.get("type")
        if isinstance(kind, str) and kind in _JSON_TYPE_NAMES:
            out["type"] = _JSON_TYPE_NAMES[kind]
        return out
    if isinstance(schema, list):
        return [connect_json_schema(v) for v in schema]
    return schema


_JSON_INT_RANGES = {
    ConnectType.INT8: 1 << 7,
    ConnectType.INT16: 1 << 15,
    ConnectType.INT32: 1 << 31,
    ConnectType.INT64: 1 << 63,
}


def check_json_value(col: Column, value: Any, where: str) -> Any:
    """``value`` as ``JsonConverter`` reads it as ``col`` and writes it back (a Debezium source
    block or envelope field kept as it came); raises FieldError unless it is JSON of ``col``'s type.

    ``JsonConverter`` reads a struct by its schema's fields, so a member that the schema does not
    declare is dropped (at any depth), and the value is returned without it; otherwise ``value``
    itself is returned.

    >>> check_json_value(Column("pos", ConnectType.INT64), "154", "source.pos")
    Traceback (most recent call last):
    ...
    transforms.decoders.connect_schema.FieldError: source.pos: expected int64, found str
    >>> check_json_value(Column("s", ConnectType.STRUCT, fields=(Column("a", ConnectType.INT32),)), {"a": 1, "b": 2}, "s")
    {'a': 1}
    """
    if value is None:
        if not col.optional:
            raise FieldError(where, "null in a required field")
        return value
    kind = col.type
    scalar = _scalar_ok(kind, value)
    if scalar is not None:
        ok = scalar
    elif kind is ConnectType.BYTES:
        ok = type(value) is str
        if ok:
            b64decode(value)
    elif kind is ConnectType.ARRAY:
        ok = type(value) is list
        if ok and col.items is not None:
            items = [check_json_value(col.items, item, f"{where}[{i}]") for i, item in enumerate(value)]
            if any(new is not old for new, old in zip(items, value, strict=True)):
                value = items
    elif kind is ConnectType.STRUCT:
        ok = type(value) is dict
        if ok:
            value = check_json_struct(col.fields, value, where)
    else:  # a map
        ok = type(value) is dict
    if not ok:
        raise FieldError(where, f"expected {kind.value}, found {type_name(value)}")
    return value


def canonical_field_schema(schema: Any, where: str) -> dict[str, Any]:
    """A Connect field schema as ``JsonConverter`` writes it back: parsed (a bad one raises
    FieldError) and written out again, keeping its ``field``, ``version``, ``doc`` and a valid
    ``default``; the schema itself when it was already written that way."""
    col = column_from_schema(schema, str(schema.get("field") or ""), where)
    out = column_schema(col, DecimalHandlingMode.PRECISE, with_field="field" in schema)
    if col.type is ConnectType.STRUCT:
        out["fields"] = [
            canonical_field_schema(f, f"{where}.{f.get('field')}") for f in struct_field_schemas(schema, where).values()
        ]
    elif col.type is ConnectType.ARRAY and isinstance(schema.get("items"), dict):
        out["items"] = canonical_field_schema(schema["items"], f"{where}.items")
    version = schema.get("version")
    out.pop("version", None)
    if type(version) is int:
        out["version"] = version
    if "default" in schema:
        default = check_json_value(col, schema["default"], f"{where}.default")
        if default is not None:  # a null default is no default to JsonConverter: it writes none back
            out["default"] = default
    return schema if out == schema else out


def check_json_struct(fields: tuple[Column, ...], value: dict[str, Any], where: str) -> dict[str, Any]:
    """:func:`check_json_value` for each field of a struct: ``value`` as ``JsonConverter`` reads
    it back. A member the schema does not declare is dropped, as ``JsonConverter`` drops it (it
    looks each declared field up in the JSON object and ignores the rest); ``value`` itself when
    nothing changed."""
    replaced: dict[str, Any] | None = None
    present = 0
    for col in fields:
        name = col.name
        member = value.get(name)
        if not _passes_as_is(col, member):  # the full check, with the member's path for its error
            checked = check_json_value(col, member, f"{where}.{name}")
            if checked is not member:
                if replaced is None:
                    replaced = {}
                replaced[name] = checked
        if member is not None or name in value:
            present += 1
    if replaced is None and present == len(value):
        return value
    declared = {col.name for col in fields}
    changes = replaced or {}
    # the members it came with, in its order
    return {name: changes.get(name, member) for name, member in value.items() if name in declared}


def _scalar_ok(kind: ConnectType, value: Any) -> bool | None:
    """Whether a non-null ``value`` is JSON of the scalar type ``kind`` (integers within its range,
    floats, booleans, strings); ``None`` for the other types (bytes, arrays, structs, maps)."""
    top = _JSON_INT_RANGES.get(kind)
    if top is not None:
        return type(value) is int and -top <= value < top
    if kind is ConnectType.STRING:
        return type(value) is str
    if kind is ConnectType.BOOLEAN:
        return type(value) is bool
    if kind is ConnectType.FLOAT64 or kind is ConnectType.FLOAT32:
        return type(value) is int or type(value) is float
    return None


def _passes_as_is(col: Column, value: Any) -> bool:
    """Whether :func:`check_json_value` returns ``value`` itself (no error, nothing dropped),
    told without a call for the scalar types; ``False`` leaves it to that function."""
    if value is None:
        return col.optional
    return _scalar_ok(col.type, value) is True


def topic_namespace(connector: Any, db: str | None, schema: str | None) -> str | None:
    """The namespace Debezium's connector puts in its topic names, where it is not ``db``:
    the schema for PostgreSQL, Oracle and Db2, ``db.schema`` for SQL Server."""
    if not isinstance(connector, str):
        return None
    if connector in _SCHEMA_NAMED and schema:
        return schema
    if connector == "sqlserver" and db and schema:
        return f"{db}.{schema}"
    return None


def _text_columns(text: bytes, _: object) -> int:
    return text_columns(text)


class ConnectEnvelopeReader:
    """Turns one Debezium-style envelope payload (plus optional Connect schema) into a ChangeEvent.

    Row columns come from the envelope schema's ``before``/``after`` structs when there is one,
    else they are inferred from the values. ``{}`` images are read as ``null`` (Arcion writes
    ``before: {}`` for inserts). The original ``source`` block is kept in ``SourceInfo.fields``
    (its own ``version``/``connector``/``name`` as ``source_version``/``source_connector``/
    ``source_name``); source fields declared in the schema are coerced to their declared types.
    Equal table schemas are reused (a bounded LRU). ``column_map`` rewrites declared columns
    (a format's own logical names into Debezium's). ``limits`` bound the JSON documents that
    MongoDB images carry as strings.

    What a message's Connect schemas decide (row columns, source field types, key columns) is
    cached by the schemas' JSON text, and schemaless row columns by the images' field names and
    value types, so the messages of a known table only look their structure up (bounded LRUs).
    """

    def __init__(
        self,
        connector: str,
        column_map: Callable[[Column], Column] | None = None,
        limits: JsonLimits = DEFAULT_LIMITS,
        native: bool = False,
        store: MetadataStore | None = None,
    ) -> None:
        self.connector = connector
        self.native = native
        self.limits = limits
        # Every cache is bounded by the table budget (transforms.table_budget): a schema text
        # counts its length (text_columns), a layout or table its columns.
        # Debezium records without schemas: (payload field names, extra names) -> their layout
        self._schemaless_layouts: TableLru[tuple[Any, ...], NativeLayout] = TableLru(lambda key, _: len(key))
        self._column_map = column_map
        self._tables = TableCache()
        self._schemas: TableLru[bytes, tuple[Column, ...]] = TableLru(_text_columns)
        self._envelopes: TableLru[bytes, _EnvelopeSchema] = TableLru(_text_columns)
        self._layouts: TableLru[bytes, RowLayout] = TableLru(_text_columns)
        # keyed by a layout's id: each entry holds its layout, so that id is not reused meanwhile.
        # (id, db, schema, table, key names) -> the table: names are strings or None, so equal keys
        # mean equal tables; (id, extra columns) -> the layout of the columns followed by them
        self._layout_tables: TableLru[tuple[Any, ...], tuple[RowLayout, TableSchema]] = TableLru(
            lambda _, hit: len(hit[1].columns)
        )
        self._extended: TableLru[tuple[int, tuple[Column, ...]], tuple[RowLayout, RowLayout]] = TableLru(
            lambda _, hit: len(hit[1].columns)
        )
        self._key_schemas: TableLru[bytes, KeyColumns] = TableLru(_text_columns)
        # the {"schema":...,"payload": openings of messages seen (read_connect_message), each
        # with its parsed schema and the envelope decided from it (see _envelope_schema)
        self.prefixes = SchemaPrefixes()
        # (id of a declared NativeLayout, part) -> the part's columns; a NativeLayout is made once
        # per envelope schema (held by its _EnvelopeSchema), each entry holds its own
        self._native_parts: TableLru[tuple[int, str], tuple[NativeLayout, tuple[Column, ...]]] = TableLru(
            lambda _, hit: len(hit[1])
        )
        # the shape of schemaless images (see _image_shape) -> their layout and inferred columns
        self._shapes: TableLru[tuple[Any, ...], tuple[RowLayout, Inferred]] = TableLru(
            lambda _, hit: len(hit[0].columns)
        )
        # the inferred column types of each table, kept stable across messages (see schemaless_json)
        # (in ``store``, the decoder's metadata store, too: a restart reads them back)
        self.memory = ColumnMemory(store=store)

    # -- caches ------------------------------------------------------------------------

    def table(self, table: TableSchema) -> TableSchema:
        """The cached TableSchema equal to ``table`` (so the emitter's caches hit)."""
        return self._tables.intern(table)

    def struct_columns(self, schema: Any, where: str) -> tuple[Column, ...]:
        """``columns_from_struct`` with a cache keyed by the schema's JSON text."""

        def build(schema: Any) -> tuple[Column, ...]:
            cols = columns_from_struct(schema, where)
            if self._column_map is not None:
                cols = tuple(self._column_map(c) for c in cols)
            return cols

        return by_content(self._schemas, schema, build, where.encode())

    def struct_layout(self, schema: Any, where: str) -> RowLayout:
        """The layout of ``struct_columns(schema, where)``, cached likewise."""

        def build(schema: Any) -> RowLayout:
            return RowLayout(self.struct_columns(schema, where))

        return by_content(self._layouts, schema, build, where.encode())

    def inferred_layout(
        self,
        after: Mapping[str, Any] | None,
        before: Mapping[str, Any] | None = None,
        table: Hashable | None = None,
    ) -> RowLayout:
        """The layout of ``infer_columns(after, before)``, cached by the images' shapes.

        With ``table`` (e.g. ``(db, schema, table)``) the columns are typed as that table's memory
        types them, the memory widened by them first (see :mod:`~transforms.decoders.schemaless_json`),
        so that a column's type does not change with the values of one message.
        """
        shape = (_image_shape(after), _image_shape(before))
        hit = self._shapes.get(shape)
        if hit is None:
            inferred = _infer((after, before))
            hit = (RowLayout(inferred.columns), inferred)
            self._shapes.put(shape, hit)
        layout, inferred = hit
        if table is None:
            return layout
        return self.memory.table(table).resolved(layout, inferred, layout.retyped)

    def memory_columns(self, table: Hashable, columns: tuple[Column, ...]) -> tuple[Column, ...]:
        """``columns`` (inferred elsewhere, e.g. from a schemaless key) as the table's memory types
        those it knows; the memory is not changed."""
        types = self.memory.table(table).types
        return tuple(types.get(c.name, c) for c in columns)

    def layout_table(
        self,
        layout: RowLayout,
        db: str | None,
        schema: str | None,
        name: str,
        key: tuple[str, ...],
        namespace: str | None = None,
    ) -> TableSchema:
        """The (interned) TableSchema of the layout's columns with these names and key columns."""
        ident = (id(layout), db, schema, name, key, namespace)
        hit = self._layout_tables.get(ident)
        if hit is not None and hit[0] is layout:
            return hit[1]
        table = self._tables.intern(TableSchema(db, schema, name, layout.columns, key, namespace))
        self._layout_tables.put(ident, (layout, table))
        return table

    def extended_layout(self, layout: RowLayout, extra: tuple[Column, ...]) -> RowLayout:
        """The layout of the layout's columns followed by ``extra`` (key columns rows lack)."""
        ident = (id(layout), extra)
        hit = self._extended.get(ident)
        if hit is not None and hit[0] is layout:
            return hit[1]
        extended = RowLayout(layout.columns + extra)
        self._extended.put(ident, (layout, extended))
        return extended

    def key(self, raw: bytes | None, mongodb_hint: bool = False) -> EnvelopeKey | None:
        """:func:`parse_json_key` within this reader's limits, the key schema's columns cached."""
        return parse_json_key(raw, mongodb_hint, self.limits, self._key_columns)

    def _key_columns(self, schema: Any) -> KeyColumns:
        if not isinstance(schema, dict) or schema.get("type") != "struct":
            return {}
        return by_content(self._key_schemas, schema, key_columns)

    def _envelope_schema(self, schema: Any) -> _EnvelopeSchema:
        """What an envelope schema decides (raises what :meth:`row_columns` raises for it)."""
        if not isinstance(schema, dict):
            return _SCHEMALESS
        shared = self.prefixes.current
        if shared is not None and shared.schema is schema:  # the schema of a known prefix: decided once
            known = shared.envelope
            if known is None:
                known = shared.envelope = by_content(self._envelopes, schema, self._read_envelope_schema)
            return cast("_EnvelopeSchema", known)
        return by_content(self._envelopes, schema, self._read_envelope_schema)

    def _read_envelope_schema(self, schema: Any) -> _EnvelopeSchema:
        fields = struct_field_schemas(schema)
        layout = None
        for name in ("after", "before"):
            sub = fields.get(name)
            if isinstance(sub, dict) and sub.get("type") == "struct":
                layout = self.struct_layout(sub, f"schema.{name}")
                break
        native = None
        base_name = None
        if self.native and _MODELED_FIELDS.intersection(fields):  # an envelope schema, not some other struct
            if len(fields) != len(schema.get("fields", ())):
                raise FieldError("schema.fields", "a field name is declared twice")
            if not all(fields):
                raise FieldError("schema.fields", "a field without a name")
            source_schema = fields.get("source")
            if isinstance(source_schema, dict):
                declared = source_schema.get("fields")
                if len(struct_field_schemas(source_schema, "schema.source")) != len(declared or ()):
                    raise FieldError("schema.source.fields", "a field name is declared twice")
            version = schema.get("version")
            transaction_schema = fields.get("transaction")
            native = NativeLayout(
                version if isinstance(version, int) and not isinstance(version, bool) else None,
                canonical_field_schema(connect_json_schema(source_schema), "schema.source")
                if isinstance(source_schema, dict)
                else None,
                tuple(
                    canonical_field_schema(connect_json_schema(f), f"schema.{n}")
                    for n, f in fields.items()
                    if n not in _MODELED_FIELDS
                ),
                tuple(fields),
                canonical_field_schema(transaction_schema, "schema.transaction")
                if isinstance(transaction_schema, dict)
                else None,
            )
            envelope_name = schema.get("name")
            if isinstance(envelope_name, str) and envelope_name.endswith(".Envelope"):
                base_name = envelope_name[: -len(".Envelope")]
        return _EnvelopeSchema(layout, self._source_fields(fields.get("source")), native, base_name)

    def _native_source(
        self, payload: Mapping[str, Any], source: dict[str, Any], declared: _EnvelopeSchema
    ) -> NativeSource | None:
        """The Debezium record's own source block and extra envelope fields (kept as they came);
        ``None`` when its schema does not declare the fields of a connector's source block (the
        record then gets cdcnorm's own, as a Debezium-like producer's does)."""
        layout = declared.native
        if layout is None:  # no schema: the payload's own fields and order, typed by their values
            if not all(payload):
                raise FieldError("payload", "a field without a name")
            kinds = tuple((n, source_field_type(v)) for n, v in payload.items() if n not in _MODELED_FIELDS)
            ident = (tuple(payload), kinds)
            layout = self._schemaless_layouts.get(ident)
            if layout is None:
                extra_fields = tuple({"type": t.value, "optional": True, "field": n} for n, t in kinds)
                layout = NativeLayout(None, None, extra_fields, tuple(payload))
                self._schemaless_layouts.put(ident, layout)
            extras = {n: source_field_value(payload[n]) for n, _ in kinds}
        else:  # declared by the envelope's schema: written back as they came, so they must be what it says
            extras = {f["field"]: payload.get(f["field"]) for f in layout.extra_fields}
            for col, field in zip(self._native_columns(layout, "extra"), layout.extra_fields, strict=True):
                extras[field["field"]] = check_json_value(col, extras[field["field"]], field["field"])
                # JsonConverter writes a field's default for null: a null there is not what it reads back
                if "default" in field and extras[field["field"]] is None:
                    raise FieldError(field["field"], "null in a field with a default")
        if layout.source_schema is None:  # typed from its values when emitted: JSON text for the rest
            if not all(source):
                raise FieldError("source", "a source field without a name")
            source = {name: source_field_value(value) for name, value in source.items()}
        else:  # written back as it came, so it must be what its schema says
            members = self._native_columns(layout, "source")
            source = check_json_struct(members, source, "source")  # without undeclared fields
            if not _is_native_source(source):  # as JsonConverter reads it, not a connector's block
                return None
            if len(source) != len(members):  # a missing optional field: JsonConverter writes it as null
                source = {c.name: source.get(c.name) for c in members}
            for col in self._native_columns(layout, "defaulted"):  # a default: as for the extra fields above
                if source.get(col.name, 0) is None:
                    raise FieldError("source." + col.name, "null in a field with a default")
            if layout.transaction_schema is not None:
                column = self._native_columns(layout, "transaction")[0]
                # checked only: the block is written from its modeled fields (undeclared ones drop)
                check_json_value(column, payload.get("transaction"), "transaction")
        return NativeSource(layout, source, extras)

    def _native_columns(self, layout: NativeLayout, part: str) -> tuple[Column, ...]:
        """The columns of a part of a declared native layout, made once per layout: ``source``
        (its source block's members), ``defaulted`` (those of them that have a default),
        ``extra`` (its extra envelope fields: ``ts_us``, ``ts_ns`` ...) or ``transaction`` (one
        column, its transaction block). A failure is not kept: the
        next message raises it again, as :func:`by_content` does."""
        ident = (id(layout), part)
        hit = self._native_parts.get(ident)
        if hit is not None and hit[0] is layout:
            return hit[1]
        if part == "source":
            columns = self.struct_columns(layout.source_schema, "schema.source")
        elif part == "defaulted":  # the source block's members that have a default
            fields = layout.source_schema.get("fields", ()) if layout.source_schema is not None else ()
            defaulted = {field["field"] for field in fields if "default" in field}
            columns = tuple(c for c in self._native_columns(layout, "source") if c.name in defaulted)
        elif part == "extra":
            columns = self.struct_columns({"type": "struct", "fields": list(layout.extra_fields)}, "schema")
        else:
            columns = self.struct_columns({"type": "struct", "fields": [layout.transaction_schema]}, "schema")
        self._native_parts.put(ident, (layout, columns))
        return columns

    def _topic_namespace(
        self, declared: _EnvelopeSchema, source: Mapping[str, Any], db: str | None, schema: str | None, table: str
    ) -> str | None:
        """Debezium's own namespace of topic names: read off the envelope schema's name
        (``<prefix>.<namespace>.<table>.Envelope``), else the connector's naming rule."""
        prefix = source.get("name")
        base = declared.base_name
        if base is not None and isinstance(prefix, str) and base.startswith(prefix + ".") and base.endswith("." + table):
            namespace = base[len(prefix) + 1 : -len(table) - 1]
            if namespace:
                return None if namespace == db else namespace
        return topic_namespace(source.get("connector"), db, schema)

    def _source_fields(self, source_schema: Any) -> dict[str, tuple[Column, FastConverter]]:
        """The source fields that :meth:`source_info` coerces: declared, and not structs."""
        if not isinstance(source_schema, dict):
            return {}
        try:
            declared = self.struct_columns(source_schema, "schema.source")
        except FieldError:
            return {}
        return {c.name: (c, fast_converter(c) or _not_fast) for c in declared if c.type is not ConnectType.STRUCT}

    # -- pieces --------------------------------------------------------------------------

    @staticmethod
    def operation(raw: Any, field: str = "op") -> Operation | None:
        """The op code; ``None`` for Debezium's ``m`` (logical decoding message)."""
        if raw == "m":
            return None
        op = _OPS.get(raw) if isinstance(raw, str) else None
        if op is None:
            raise FieldError(field, f"expected one of c, u, d, r, t, m, found {raw!r}")
        return op

    def image(self, raw: Any, field: str) -> dict[str, Any] | None:
        """A row image; a MongoDB JSON document string is parsed; ``{}`` reads as ``null``."""
        if raw is None:
            return None
        if isinstance(raw, str):
            try:
                doc = self.limits.loads(raw, field)
            except FieldError as exc:
                error = FieldError(field, f"expected an object or a JSON document string: {exc.reason}")
                raise caused_by(error, exc) from exc
            if not isinstance(doc, dict):
                raise FieldError(field, f"expected a JSON object document, found {type_name(doc)}")
            return {k: from_extended_json(v) for k, v in doc.items()}
        if not isinstance(raw, dict):
            raise FieldError(field, f"expected an object or null, found {type_name(raw)}")
        return raw or None

    def source_info(
        self,
        source: Mapping[str, Any],
        source_schema: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> SourceInfo:
        """SourceInfo from a Debezium source block (names excluded; see :meth:`table_name`)."""
        return self._source_info(source, self._source_fields(source_schema), extra)

    def _source_info(
        self,
        source: Mapping[str, Any],
        declared: Mapping[str, tuple[Column, FastConverter]],
        extra: Mapping[str, Any] | None,
    ) -> SourceInfo:
        fields: dict[str, Any] = {}
        out_name = _SOURCE_NAMES.get
        for name, value in source.items():
            out = out_name(name, name)
            if out is None:
                continue
            if value is not None:
                typed = declared.get(name)
                if typed is not None:
                    col, fast = typed
                    try:
                        value = fast(value)
                    except Exception:  # the full conversion decides; a value it rejects is kept as is
                        with contextlib.suppress(CoercionError):
                            value = coerce_checked(col, value)
            fields[out] = value
        if extra:
            fields.update(extra)
        ts_raw = source.get("ts_ms")
        ts_ms = _int(ts_raw)
        if ts_raw is not None and ts_ms is None:
            raise FieldError("source.ts_ms", f"expected epoch milliseconds, found {ts_raw!r}")
        original_sequence = source.get("sequence")
        sequence = _position(fields, ts_ms, original_sequence)
        if original_sequence is not None and original_sequence != sequence:
            fields["source_sequence"] = original_sequence
        return SourceInfo(
            connector=self.connector,
            ts_ms=ts_ms,
            snapshot=snapshot_marker(source.get("snapshot")),
            sequence=sequence,
            fields=fields,
        )

    @staticmethod
    def table_name(source: Mapping[str, Any], fallback: TableName) -> TableName:
        """db/schema/table from the source block (``collection`` for MongoDB), else the fallback."""
        return TableName(*_table_name(source, fallback))

    @staticmethod
    def transaction(raw: Any) -> TransactionRef | None:
        """The ``transaction`` block, or ``None``."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or raw.get("id") is None:
            raise FieldError("transaction", f"expected an object with an id, found {raw!r}")
        total, order = raw.get("total_order"), raw.get("data_collection_order")
        return TransactionRef(str(raw["id"]), _int(total), _int(order))

    def row_columns(
        self,
        schema: Any,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> tuple[tuple[Column, ...], bool]:
        """The row columns from an envelope schema's ``after``/``before`` struct, else inferred.

        The flag says whether the columns were declared (True) or inferred (False).
        """
        layout = self._envelope_schema(schema).layout
        if layout is not None:
            return layout.columns, True
        return self.inferred_layout(after, before).columns, False

    def row_layout(
        self,
        schema: Any,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> RowLayout:
        """The layout of :meth:`row_columns`."""
        return self._envelope_schema(schema).layout or self.inferred_layout(after, before)

    # -- the envelope --------------------------------------------------------------------

    def read(
        self,
        payload: Mapping[str, Any],
        schema: Any,
        *,
        key: EnvelopeKey | None,
        fallback: TableName,
        extra_source: Mapping[str, Any] | None = None,
        absent_columns: frozenset[str] = frozenset(),
        direct: DecimalHandlingMode | None = None,
    ) -> ChangeEvent | None:
        """The change in one envelope payload; ``None`` for a Debezium ``m`` message.

        ``key`` names the key columns (and their values, used to fill a delete whose ``before``
        is missing). ``absent_columns`` are columns that must read UNAVAILABLE when missing
        from an image even if the schema does not declare them (CDL ``LOB_COLUMNS``).
        ``direct`` (:attr:`Decoder.emit_direct`): the images may come in Connect JSON form for
        this decimal mode (:attr:`ChangeEvent.encoded`, see :meth:`RowLayout.connect_json`).
        """
        op = self.operation(payload.get("op"))
        if op is None:
            return None
        before = self.image(payload.get("before"), "before")
        after = self.image(payload.get("after"), "after")
        source = payload.get("source")
        if source is None:
            source = {}
        if not isinstance(source, dict):
            raise FieldError("source", f"expected an object, found {type_name(source)}")
        declared = self._envelope_schema(schema)
        db, db_schema, table_name = _table_name(source, fallback)
        ident: tuple[str | None, ...] | None = None
        if declared.layout is not None:
            layout = declared.layout
        else:  # inferred, as the table's memory types it
            ident = (db, db_schema, table_name)
            layout = self.inferred_layout(after, before, ident)
        extra: tuple[Column, ...] = ()
        key_names: tuple[str, ...] = ()
        if key is not None:
            key_names = key.names
            if not layout.names.issuperset(key_names):
                missing = tuple(c for c in key.columns if c.name not in layout.names)
                if ident is None:
                    raise FieldError("key", f"key columns {[c.name for c in missing]} are not row columns")
                extra = self.memory_columns(ident, missing)
        if absent_columns:
            have = layout.names.union(c.name for c in extra)
            extra += tuple(Column(n, ConnectType.STRING) for n in sorted(absent_columns - have))
        if extra:
            layout = self.extended_layout(layout, extra)
        if direct is not None and op is Operation.UPDATE and not same_key_cells(key_names, before, after):
            direct = None  # a key change: the emitter compares typed key values (see same_key_cells)
        before_row, after_row, encoded = layout.images(before, after, direct)
        if op is Operation.DELETE:
            after_row = None
            if before_row is None and key is not None and key.values is not None:
                before_row = _row_of_key(key, key.values, layout)
                encoded = None  # typed, as the key types it
        elif op in (Operation.CREATE, Operation.READ):
            before_row = None
            if after_row is None:
                raise FieldError("after", f"op {op.value!r} needs an 'after' image")
        elif op is Operation.UPDATE and after_row is None:
            raise FieldError("after", "op 'u' needs an 'after' image")
        info = self._source_info(source, declared.source, extra_source)
        namespace = None
        if self.native and _is_native_source(source):
            info.native = self._native_source(payload, source, declared)
            if info.native is not None:
                namespace = self._topic_namespace(declared, source, db, db_schema, table_name or "")
        ts_raw = payload.get("ts_ms")
        ts_ms = _int(ts_raw)
        if ts_raw is not None and ts_ms is None:
            raise FieldError("ts_ms", f"expected epoch milliseconds, found {ts_raw!r}")
        table = self.layout_table(layout, db, db_schema, table_name or "", key_names, namespace)
        return ChangeEvent(
            op=op,
            table=table,
            before=before_row,
            after=after_row,
            source=info,
            transaction=self.transaction(payload.get("transaction")),
            ts_ms=ts_ms,
            encoded=encoded,
        )


def _is_native_source(source: Mapping[str, Any]) -> bool:
    """Whether a source block is a Debezium connector's own (see :data:`_NATIVE_SOURCE_FIELDS`)."""
    # not issubset(source): that makes a set of the block's names
    return all(name in source for name in _NATIVE_SOURCE_FIELDS) and ("table" in source or "collection" in source)


def _row_of_key(key: EnvelopeKey, values: Mapping[str, Any], layout: RowLayout) -> dict[str, Any]:
    """The before image of a delete that has none: the key's values (the other columns
    UNAVAILABLE), each converted to its row column where the key types it otherwise."""
    key_types = {c.name: c.as_optional() for c in key.columns}
    row: dict[str, Any] = {}
    for col in layout.columns:
        name = col.name
        value = values.get(name, UNAVAILABLE)
        if name in values and key_types.get(name, col) != col.as_optional():
            value = _decode_cell(col, value, f"key.{name}")
        row[name] = value
    return row


def _table_name(source: Mapping[str, Any], fallback: TableName) -> tuple[str | None, str | None, str | None]:
    """:meth:`ConnectEnvelopeReader.table_name` as a tuple."""
    table, db, schema = source.get("table"), source.get("db"), source.get("schema")
    if type(table) is str and table and (db is None or type(db) is str) and (schema is None or type(schema) is str):
        return db, schema, table  # the common case, which the checks below let through unchanged
    table = _source_text(source, "table") or _source_text(source, "collection")
    if table is None:
        if fallback.table is None:
            raise FieldError("source.table", "no table name in the source block and none configured")
        return fallback.db, fallback.schema, fallback.table
    return _source_text(source, "db"), _source_text(source, "schema"), table


def _source_text(source: Mapping[str, Any], name: str) -> str | None:
    """A name field of a source block: a string or null."""
    value = source.get(name)
    if value is None or isinstance(value, str):
        return value
    raise FieldError(f"source.{name}", f"expected a string, found {type_name(value)}")
