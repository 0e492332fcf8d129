"""``cdcnorm tail``: read a topic without a consumer group and yield its records as JSON lines.

Partitions are assigned directly (no group join), so the first record shows up at once. Reading
stops after ``max_records`` records or when no record came for ``idle_timeout_s``; never by
high watermarks, which some brokers (Tansu) report per batch instead of per record.

A record can be printed whole (key and value as the broker holds them, JSON parsed), with its
Connect schemas dropped (``payload_only``), or with its value unwrapped to the flat row like
Debezium's ``ExtractNewRecordState`` with ``delete.handling.mode=rewrite`` (``unwrap``):

>>> value = {"schema": {}, "payload": {"op": "d", "before": {"id": 1}, "after": None}}
>>> unwrap_value(value)
{'id': 1, '__deleted': 'true'}
>>> without_schema({"schema": {"type": "int32"}, "payload": 7})
7
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from transforms.envelope import AFTER, BEFORE, OP, Operation
from transforms.errors import CdcnormError
from transforms.smt.unwrap import DELETED_FIELD

__all__ = ["TailError", "read_topic", "record_json", "tail_topic", "unwrap_value", "without_schema"]

CLIENT_LOGGER = "cdcnorm.kafka.client"
"""The logger librdkafka's own log lines go to (served while reading)."""


class TailError(CdcnormError):
    """Why a topic cannot be read, in one line: the broker does not answer, no such topic or partition."""


def _payload(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def without_schema(doc: Any) -> Any:
    """The ``payload`` of a JsonConverter ``{"schema", "payload"}`` document; anything else as it is."""
    if isinstance(doc, dict) and len(doc) == 2 and "schema" in doc and "payload" in doc:
        return doc["payload"]
    return doc


_ROW_OPS = {Operation.CREATE.value, Operation.UPDATE.value, Operation.READ.value}


def unwrap_value(doc: Any) -> Any:
    """A change record's value as its flat row, as ``ExtractNewRecordState`` (rewrite mode) makes it:
    ``after`` plus ``__deleted: "false"``, or for a delete ``before`` plus ``__deleted: "true"``.
    Anything that is not a create, update, read or delete (a tombstone, a truncate, a schema
    change, a transaction record, a dead letter) stays as it is.
    """
    body = without_schema(doc)
    if not isinstance(body, dict) or OP not in body:
        return doc
    op = body[OP]
    if op == Operation.DELETE.value:
        image, deleted = body.get(BEFORE), "true"
    elif op in _ROW_OPS:
        image, deleted = body.get(AFTER), "false"
    else:
        return doc
    row = dict(image) if isinstance(image, dict) else {}
    row[DELETED_FIELD] = deleted
    return row


def record_json(msg: Any, *, payload_only: bool = False, unwrap: bool = False) -> bytes:
    """One consumed record as a JSON line (key and value parsed when they are JSON)."""
    headers = {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in (msg.headers() or [])}
    key, value = _payload(msg.key()), _payload(msg.value())
    if payload_only:
        key, value = without_schema(key), without_schema(value)
    if unwrap:
        value = unwrap_value(value)
    return orjson.dumps(
        {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": key,
            "value": value,
            "headers": headers or None,
        }
    )


def read_topic(
    topic: str,
    bootstrap: str | Mapping[str, Any],
    *,
    from_beginning: bool = False,
    partition: int | None = None,
    offset: int | None = None,
    max_records: int | None = None,
    idle_timeout_s: float | None = None,
    connect_timeout_s: float = 10.0,
) -> Iterator[Any]:
    """Yield the records (confluent-kafka messages) of ``topic``: every partition, or ``partition``;
    from the end, the beginning (``from_beginning``) or ``offset`` of each partition read.
    ``bootstrap`` is ``host:port`` or librdkafka settings (``BrokerConfig.librdkafka()``: SASL, TLS).
    Raises :class:`TailError` when the broker does not answer within ``connect_timeout_s``, the
    topic or partition does not exist, or the client fails for good.
    """
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

    if from_beginning and offset is not None:
        raise TailError("give --from-beginning or --offset, not both")
    if offset is not None and offset < 0:
        raise TailError(f"--offset={offset}: expected an offset >= 0")
    settings = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)
    client_log = logging.getLogger(CLIENT_LOGGER)
    consumer = Consumer(
        {
            **settings,
            "group.id": "cdcnorm-tail",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "logger": client_log,
        }
    )
    failed = True
    try:
        try:
            meta = consumer.list_topics(topic, timeout=connect_timeout_s).topics.get(topic)
        except KafkaException as exc:
            where = settings.get("bootstrap.servers")
            raise TailError(f"cannot reach the Kafka broker at {where}: {exc.args[0].str()}") from None
        if meta is None or meta.error is not None or not meta.partitions:
            raise TailError(f"topic {topic!r} does not exist")
        partitions = sorted(meta.partitions)
        if partition is not None:
            if partition not in meta.partitions:
                raise TailError(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})")
            partitions = [partition]
        start = offset if offset is not None else OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        failed = False
        count = 0
        last = time.monotonic()
        while max_records is None or count < max_records:
            msg = consumer.poll(0.5)
            if msg is None:
                if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                    return
                continue
            error = msg.error()
            if error is not None:
                if error.fatal():
                    failed = True
                    raise TailError(f"the Kafka client failed: {error.str()}")
                continue  # transient (the client retries); its log lines say more
            last = time.monotonic()
            count += 1
            yield msg
    finally:
        # the client's queued complaints (one per connection attempt) are not worth printing
        # after the one-line error
        client_log.disabled, was = failed, client_log.disabled
        try:
            consumer.close()
        finally:
            client_log.disabled = was


def tail_topic(
    topic: str,
    bootstrap: str | Mapping[str, Any],
    *,
    from_beginning: bool = False,
    partition: int | None = None,
    offset: int | None = None,
    max_records: int | None = None,
    idle_timeout_s: float | None = None,
    payload_only: bool = False,
    unwrap: bool = False,
    connect_timeout_s: float = 10.0,
) -> Iterator[bytes]:
    """:func:`read_topic`'s records as JSON lines (:func:`record_json`)."""
    for msg in read_topic(topic, bootstrap, from_beginning=from_beginning, partition=partition, offset=offset,
                          max_records=max_records, idle_timeout_s=idle_timeout_s,
                          connect_timeout_s=connect_timeout_s):
        yield record_json(msg, payload_only=payload_only, unwrap=unwrap)
