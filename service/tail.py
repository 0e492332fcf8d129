"""``cdcnorm tail``: read a topic without a consumer group and yield its records as JSON lines."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

__all__ = ["record_json", "tail_topic"]


def _payload(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def record_json(msg: Any) -> bytes:
    """One consumed record as a JSON line (key and value parsed when they are JSON)."""
    headers = {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in (msg.headers() or [])}
    return orjson.dumps(
        {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": _payload(msg.key()),
            "value": _payload(msg.value()),
            "headers": headers or None,
        }
    )


def tail_topic(
    topic: str,
    bootstrap: str | Mapping[str, Any],
    *,
    from_beginning: bool = False,
    max_records: int | None = None,
    idle_timeout_s: float | None = None,
) -> Iterator[bytes]:
    """Yield records of every partition of ``topic``; partitions are assigned directly (no group
    join), so the first record shows up at once. Stops after ``max_records`` or ``idle_timeout_s``.
    ``bootstrap`` is ``host:port`` or librdkafka settings (``BrokerConfig.librdkafka()``: SASL, TLS).
    """
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    settings = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)
    consumer = Consumer(
        {
            **settings,
            "group.id": "cdcnorm-tail",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise LookupError(f"topic {topic!r} does not exist")
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in sorted(meta.partitions)])
        count = 0
        last = time.monotonic()
        while max_records is None or count < max_records:
            msg = consumer.poll(0.5)
            if msg is None:
                if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                    return
                continue
            if msg.error():
                continue
            last = time.monotonic()
            count += 1
            yield record_json(msg)
    finally:
        consumer.close()
