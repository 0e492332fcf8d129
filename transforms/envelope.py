"""The canonical change event and its Debezium-envelope serialization.

This module is the Debezium event shape's public face: the :class:`Operation` codes, the envelope
field names, the event classes decoders produce, and :func:`emit`, which turns events into Kafka
records (topic, key, value, headers) serialized with Kafka Connect JSON schemas. It is built from
three modules, imported through this one: :mod:`transforms.envelope_model` (the names, events and
records), :mod:`transforms.envelope_codec` (change and row events as records) and
:mod:`transforms.envelope_schemas` (schema-change and transaction records). No module outside
them spells ``"op"`` or ``"before"``.

Three kinds of events come out of a decoder:

* :class:`ChangeEvent`: one row change (``c u d r t``);
* :class:`SchemaChangeEvent`: a DDL / table structure change;
* :class:`TransactionEvent`: a transaction boundary (``BEGIN`` / ``END``).

The unwrap transform produces a fourth, :class:`RowEvent` (a flat row), for consumers that want
rows rather than envelopes.
"""

from __future__ import annotations

from collections.abc import Iterable

from transforms.envelope_codec import (
    _emit_change,
    _emit_row,
    _topic_base,
    absent_mark,
    key_payload,
    source_field_type,
    source_field_value,
)
from transforms.envelope_model import (
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
    Event,
    NativeLayout,
    NativeSource,
    Operation,
    OutRecord,
    RowEvent,
    SchemaChangeEvent,
    SnapshotMarker,
    SourceInfo,
    TransactionEvent,
    TransactionRef,
    TransactionStatus,
    epoch_ms,
    version,
)
from transforms.envelope_schemas import _emit_schema_change, _emit_transaction
from transforms.errors import RequiredColumnError

__all__ = [
    "AFTER",
    "BEFORE",
    "NEW_KEY_HEADER",
    "OLD_KEY_HEADER",
    "OP",
    "SOURCE",
    "TRANSACTION",
    "TS_MS",
    "UNAVAILABLE_AFTER",
    "UNAVAILABLE_BEFORE",
    "ChangeEvent",
    "EmitOptions",
    "Event",
    "NativeLayout",
    "NativeSource",
    "Operation",
    "OutRecord",
    "RequiredColumnError",
    "RowEvent",
    "SchemaChangeEvent",
    "SnapshotMarker",
    "SourceInfo",
    "TransactionEvent",
    "TransactionRef",
    "TransactionStatus",
    "absent_mark",
    "destination_topic",
    "emit",
    "epoch_ms",
    "key_payload",
    "source_field_type",
    "source_field_value",
    "version",
]

def destination_topic(event: Event, opts: EmitOptions) -> str:
    """The topic :func:`emit` sends ``event`` to: ``event.topic`` if set, else named by ``opts``."""
    if event.topic:
        return event.topic
    if isinstance(event, ChangeEvent | RowEvent):
        table = event.table
        return _topic_base(opts, table)
    if isinstance(event, SchemaChangeEvent):
        return opts.prefix
    return opts.transaction_topic or f"{opts.prefix}.transaction"


def emit(events: Iterable[Event], opts: EmitOptions) -> list[OutRecord]:
    """Serialize events into Kafka records, in order, adding tombstones and key-change splits."""
    out: list[OutRecord] = []
    for event in events:
        if isinstance(event, ChangeEvent):
            out.extend(_emit_change(event, opts))
        elif isinstance(event, SchemaChangeEvent):
            out.extend(_emit_schema_change(event, opts))
        elif isinstance(event, TransactionEvent):
            out.extend(_emit_transaction(event, opts))
        else:
            out.extend(_emit_row(event, opts))
    return out
