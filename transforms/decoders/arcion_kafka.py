"""Arcion Replicant's "JSON CDC format for Kafka": Debezium-like Connect JSON key and value.

* The value is ``{"schema", "payload"}`` with ``before``/``after``/``source``/``op``/``ts_ms``;
  snapshot rows are ``op: "r"``. Arcion writes ``before: {}`` for inserts and ``after: {}`` for
  deletes; both read as ``null``.
* The Kafka key ``{"schema", "payload"}`` names the key columns (primary key, unique key or row
  identifier); a ``null`` key means the table has none.
* Values are made consistent with the declared schema (``"3"`` in an ``int32`` column is 3,
  ``server_id: "1"`` against an ``int64`` source field is 1).
* Arcion's own ``connector`` (e.g. ``MYSQL``), ``version`` (the source database version) and
  ``name`` are kept as ``source_connector``, ``source_version`` and ``source_name``; every other
  source field (``file``, ``pos``, ``row``, ``thread``, ``query``, ``gtid``, ``server_id``...) is
  kept as is. ``sequence`` is built from the binlog/LSN/SCN position where there is one.
* A tombstone (``null`` value) produces no event: cdcnorm writes its own after each delete.
  A primary-key update arrives as a delete and an insert and stays so.
"""

from __future__ import annotations

from typing import Any

from transforms.decoders.base import Decoder, Message
from transforms.decoders.connect_json import (
    ConnectEnvelopeReader,
    FieldError,
    JsonLimits,
    TableName,
    TopicTables,
    read_connect_message,
)
from transforms.envelope import Event
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions

__all__ = ["ArcionKafkaDecoder"]

FORMAT_ID = "arcion-kafka"


def _topic_table(topic: str) -> TableName:
    """The table of a change whose source block names none: the topic's last two parts."""
    parts = [p for p in topic.split(".") if p]
    return TableName(parts[-2] if len(parts) > 1 else None, None, parts[-1] if parts else None)


class ArcionKafkaDecoder(Decoder):
    """Decodes Arcion's JSON CDC records for Kafka (key + value) into canonical change events."""

    format_id = FORMAT_ID
    description = "Arcion JSON CDC format for Kafka (Debezium-like key + value)"

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self._limits = JsonLimits(self.options.max_message_bytes, self.options.max_json_depth)
        self._reader = ConnectEnvelopeReader(FORMAT_ID, limits=self._limits, store=self.metadata)
        self._fallback = TopicTables(_topic_table)

    def decode(self, message: Message) -> list[Event]:
        return read_connect_message(
            self, message, lambda schema, payload: self._decode(schema, payload, message), self._reader.prefixes
        )

    def _decode(self, schema: Any, payload: dict[str, Any], message: Message) -> list[Event]:
        if "op" not in payload:
            raise FieldError("op", "expected an Arcion change record with 'op'")
        key = self._reader.key(message.key)
        event = self._reader.read(payload, schema, key=key, fallback=self._fallback(message.topic))
        return [] if event is None else [event]

