"""The canonical change event's model: the envelope's field names, the :class:`Operation` codes,
the event classes decoders produce, how events become records (:class:`EmitOptions`) and the
record itself (:class:`OutRecord`). :mod:`transforms.envelope` is its public face."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

from transforms.connect import (
    DecimalHandlingMode,
    TableSchema,
)
from transforms.frozen import reduce_frozen
from transforms.table_budget import TableLru, text_columns

# The per-change value objects (TransactionRef, SourceInfo, ChangeEvent, RowEvent, OutRecord) are
# treated as immutable (transforms derive new ones with dataclasses.replace) but are not frozen:
# a frozen dataclass sets every field through object.__setattr__, which made building them ~4x
# slower (1.0 vs 0.27 µs each), and every decoded row builds several.
# They write their __init__ out (the dataclass keeps it; same parameters as the fields): mypyc
# compiles one written out, while the one @dataclass generates at import is interpreted Python
# (0.36-0.55 µs a SourceInfo compiled, against ~0.06). transforms.decoders.base.Message,
# Decoded and transforms.pipeline.Processed do the same.

BEFORE = "before"
AFTER = "after"
SOURCE = "source"
OP = "op"
TS_MS = "ts_ms"
TRANSACTION = "transaction"

UNAVAILABLE_BEFORE = "unavailable_before"
UNAVAILABLE_AFTER = "unavailable_after"
"""``source`` fields naming the columns of ``before``/``after`` that the change does not carry and
whose type cannot hold the placeholder string: they are ``null`` in the image (see :func:`absent_mark`)."""

NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"


def version() -> str:
    """The cdcnorm version written into ``source.version``."""
    try:
        from importlib.metadata import version as _v

        return _v("cdcnorm")
    except Exception:  # pragma: no cover - not installed
        return "0.0.0"


_VERSION = version()


class Operation(StrEnum):
    """Debezium operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"
    TRUNCATE = "t"


class SnapshotMarker(StrEnum):
    """Debezium ``source.snapshot`` values."""

    TRUE = "true"
    LAST = "last"
    FALSE = "false"


class TransactionStatus(StrEnum):
    BEGIN = "BEGIN"
    END = "END"


@dataclass(slots=True)
class TransactionRef:
    """The ``transaction`` block of a change: id plus the event's order within it."""

    id: str
    total_order: int | None = None
    data_collection_order: int | None = None

    def __init__(self, id: str, total_order: int | None = None, data_collection_order: int | None = None) -> None:
        self.id = id
        self.total_order = total_order
        self.data_collection_order = data_collection_order

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(frozen=True, slots=True)
class NativeLayout:
    """How a Debezium connector laid out its envelope, so that its records leave as they came.

    ``version`` is the envelope schema's version (Debezium 2 and later write 2; ``None``: none),
    ``source_schema`` and ``transaction_schema`` the ``source`` and ``transaction`` field schemas
    as received (``None`` when the input had no schemas), ``extra_fields`` the schemas of envelope fields cdcnorm does not model
    (``ts_us``, ``ts_ns``), and ``order`` the envelope's field names in the connector's order.
    """

    version: int | None
    source_schema: dict[str, Any] | None
    extra_fields: tuple[dict[str, Any], ...]
    order: tuple[str, ...]
    transaction_schema: dict[str, Any] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(slots=True)
class NativeSource:
    """A Debezium record's own ``source`` block and extra envelope fields, re-emitted unchanged."""

    layout: NativeLayout
    source: dict[str, Any]
    extras: dict[str, Any]

    def __init__(self, layout: NativeLayout, source: dict[str, Any], extras: dict[str, Any]) -> None:
        self.layout = layout
        self.source = source
        self.extras = extras

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(slots=True)
class SourceInfo:
    """The ``source`` block, minus the table names (those come from :class:`TableSchema`).

    ``fields`` carries the format's own position/transaction fields under stable names
    (``file``, ``pos``, ``gtid``, ``scn``, ``rowid``, ``change_seq``, ``cursor`` ...).
    ``sequence`` is a string that sorts in source order, when the format has one.
    ``native`` is set for Debezium input: the record keeps the connector's own ``source`` block
    (``connector``, ``version``, ``sequence`` and all) instead of cdcnorm's, and the sink works
    out its order from the connector's position fields (:func:`native_position`).
    """

    connector: str
    ts_ms: int | None = None
    snapshot: SnapshotMarker = SnapshotMarker.FALSE
    sequence: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    native: NativeSource | None = None

    def __init__(
        self,
        connector: str,
        ts_ms: int | None = None,
        snapshot: SnapshotMarker = SnapshotMarker.FALSE,
        sequence: str | None = None,
        fields: Mapping[str, Any] | None = None,
        native: NativeSource | None = None,
    ) -> None:
        self.connector = connector
        self.ts_ms = ts_ms
        self.snapshot = snapshot
        self.sequence = sequence
        self.fields = {} if fields is None else fields
        self.native = native

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(slots=True)
class ChangeEvent:
    """One row change, with Python-typed images (see :mod:`transforms.values`).

    ``ts_ms`` is the time the change was processed by the producing system when the format
    says so (Canal ``ts``, Debezium ``ts_ms``); it defaults to ``source.ts_ms``.
    ``topic`` is set by routing transforms and overrides the topic template.
    """

    op: Operation
    table: TableSchema
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    source: SourceInfo
    transaction: TransactionRef | None = None
    ts_ms: int | None = None
    topic: str | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    # set by a decoder whose pipeline sends its events straight to the emitter (no chain, see
    # Pipeline._decoded): ``before``/``after`` are already in Connect JSON form under this
    # decimal handling mode (what the emitter's encoders would make of the typed values), so the
    # emitter does not encode them again. Never set on events that anything else reads.
    encoded: DecimalHandlingMode | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        op: Operation,
        table: TableSchema,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        source: SourceInfo,
        transaction: TransactionRef | None = None,
        ts_ms: int | None = None,
        topic: str | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        encoded: DecimalHandlingMode | None = None,
    ) -> None:
        self.op = op
        self.table = table
        self.before = before
        self.after = after
        self.source = source
        self.transaction = transaction
        self.ts_ms = ts_ms
        self.topic = topic
        self.headers = headers
        self.encoded = encoded

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(frozen=True, slots=True)
class SchemaChangeEvent:
    """A DDL or table-structure change, emitted on the schema-change topic ``<prefix>``.

    ``new_table`` is the table structure after the change when the source describes it.
    ``change_type`` is ``CREATE``, ``ALTER`` or ``DROP`` (Debezium ``tableChanges[].type``).
    """

    db: str | None
    schema: str | None
    table: str | None
    ddl: str | None
    source: SourceInfo
    change_type: str = "ALTER"
    new_table: TableSchema | None = None
    ts_ms: int | None = None
    topic: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(frozen=True, slots=True)
class TransactionEvent:
    """A transaction boundary, emitted on ``<prefix>.transaction`` when enabled."""

    status: TransactionStatus
    id: str
    source: SourceInfo
    event_count: int | None = None
    data_collections: tuple[tuple[str, int], ...] = ()
    ts_ms: int | None = None
    topic: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(slots=True)
class RowEvent:
    """A flat row produced by the unwrap transform (ExtractNewRecordState style).

    ``row`` is ``None`` for a dropped-delete tombstone-only record.
    ``tombstone``: whether a delete is followed by a tombstone (when ``EmitOptions.tombstones``);
    the unwrap transform clears it for ``drop.tombstones``.
    """

    table: TableSchema
    row: dict[str, Any] | None
    key_source: dict[str, Any] | None
    deleted: bool
    op: Operation
    topic: str | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    tombstone: bool = True

    def __init__(
        self,
        table: TableSchema,
        row: dict[str, Any] | None,
        key_source: dict[str, Any] | None,
        deleted: bool,
        op: Operation,
        topic: str | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        tombstone: bool = True,
    ) -> None:
        self.table = table
        self.row = row
        self.key_source = key_source
        self.deleted = deleted
        self.op = op
        self.topic = topic
        self.headers = headers
        self.tombstone = tombstone

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


Event = ChangeEvent | SchemaChangeEvent | TransactionEvent | RowEvent


@dataclass(frozen=True, slots=True)
class EmitOptions:
    """How events become Kafka records.

    ``topic_template`` may use ``{prefix}``, ``{db}``, ``{schema}`` and ``{table}``;
    ``{db}`` falls back to the schema name when the source has no database name.
    """

    prefix: str = "cdcnorm"
    topic_template: str = "{prefix}.{db}.{table}"
    decimal_mode: DecimalHandlingMode = DecimalHandlingMode.PRECISE
    tombstones: bool = True
    schemas: bool = True
    transaction_topic: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


# A table codec's shared Connect schemas with the JSON records start with (OutRecord.schemas):
# id(schema) -> (schema, the pieces of b'{"schema":<schema JSON>,"payload":' once a record used it)
SchemaJson = dict[int, tuple[dict[str, Any], tuple[bytes, ...] | None]]


@mypyc_attr(allow_interpreted_subclasses=True)  # the worker's EncodedRecord
@dataclass(slots=True)
class OutRecord:
    """A Kafka record ready to send: ``key``/``value`` are JSON-ready (or ``None``)."""

    topic: str
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    headers: tuple[tuple[str, bytes], ...] = ()
    # the emitter's table codec's shared schemas with their JSON (see _dumps_record); not
    # compared, copied or pickled (a copy serializes its schema: the same bytes)
    schemas: SchemaJson | None = field(default=None, init=False, compare=False, repr=False)

    def __init__(
        self,
        topic: str,
        key: dict[str, Any] | None,
        value: dict[str, Any] | None,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.schemas = None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

    def key_bytes(self) -> bytes | None:
        return None if self.key is None else _dumps_record(self.key, self.schemas)

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else _dumps_record(self.value, self.schemas)

    def to_json_line(self) -> bytes:
        return orjson.dumps({"topic": self.topic, "key": self.key, "value": self.value})


# ----------------------------------------------------------------------------- schemas

# The JSON of field lists, shared by content: an envelope's before and after hold the same
# columns, every table of a connector the same source block, tables of one shape the same columns.
_field_lists: TableLru[bytes, bytes] = TableLru(lambda text, _: text_columns(text))
_MARK = "\x00cdcnorm-fields-{}\x00"  # a NUL cannot occur in a Connect name


def _shared_list(fields: list[Any]) -> bytes:
    text = orjson.dumps(fields)
    return _field_lists.get_or_make(text, lambda: text)


def _record_prefix(schema: dict[str, Any]) -> tuple[bytes, ...]:
    """``b'{"schema":' + orjson.dumps(schema) + b',"payload":'`` as pieces to join: the JSON of
    the field lists of the schema's struct fields (else of its own fields) is shared with the
    other schemas that have equal lists, so a table's envelope holds little JSON of its own.

    >>> row = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "id"}]}
    >>> env = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}]}
    >>> b"".join(_record_prefix(env)) == b'{"schema":' + orjson.dumps(env) + b',"payload":'
    True
    """
    whole = b'{"schema":' + orjson.dumps(schema) + b',"payload":'
    fields = schema.get("fields")
    if not isinstance(fields, list):
        return (whole,)
    parts: list[bytes] = []
    if any(isinstance(f, dict) and isinstance(f.get("fields"), list) for f in fields):
        marked = []
        for f in fields:
            if isinstance(f, dict) and isinstance(f.get("fields"), list):
                marked.append({**f, "fields": _MARK.format(len(parts))})
                parts.append(_shared_list(f["fields"]))
            else:
                marked.append(f)
        text = orjson.dumps({**schema, "fields": marked})
    else:
        text = orjson.dumps({**schema, "fields": _MARK.format(0)})
        parts.append(_shared_list(fields))
    pieces = [b'{"schema":']
    for i, part in enumerate(parts):
        head, found, text = text.partition(orjson.dumps(_MARK.format(i)))
        if not found:
            return (whole,)
        pieces += (head, part)
    pieces += (text, b',"payload":')
    joined = tuple(pieces)
    return joined if b"".join(joined) == whole else (whole,)


def _dumps_record(doc: dict[str, Any], schemas: SchemaJson | None) -> bytes:
    """``orjson.dumps(doc)``; a ``{"schema", "payload"}`` document whose schema is one of
    ``schemas`` (a table codec's shared schemas, ``OutRecord.schemas``) gets the schema's JSON
    spliced in instead of serializing it again (same bytes), made the first time it is used.
    """
    if schemas is not None and len(doc) == 2:
        schema = doc.get("schema")
        key = id(schema)
        hit = schemas.get(key)
        if hit is not None and hit[0] is schema:  # the entry holds the schema: its id is not reused
            keys = iter(doc)
            if next(keys) == "schema" and next(keys) == "payload":
                prefix = hit[1]
                if prefix is None:
                    prefix = _record_prefix(schema)
                    schemas[key] = (schema, prefix)
                return b"".join((*prefix, orjson.dumps(doc["payload"]), b"}"))
    return orjson.dumps(doc)


def epoch_ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch; a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1000)
