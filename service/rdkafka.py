"""The worker's output through librdkafka (confluent-kafka): the default output client.

Profiling the worker (``bench/SERVICE.md``) showed aiokafka's producer path costing as much
as a third of the worker's CPU: the Java-compatible murmur2 partitioner, the record batch
builder, the produce request encoding and the socket writes all run in Python, on the thread
that also normalizes. librdkafka does all of that in C, on its own threads. Measured on the
worker's output (1.8 records of ~2 KB per source message): 4.4 µs CPU per record against 8.0 µs
for aiokafka's batch API, and the Python thread keeps only the ``produce()`` call and one
delivery callback per record.

Delivery guarantees are those of the aiokafka output:

* ``acks=all`` and the idempotent producer, so a retried produce request can neither duplicate
  nor reorder records within a partition;
* records are partitioned by librdkafka's ``murmur2_random`` partitioner, i.e. like the Java
  client's default partitioner (``murmur2(key) & 0x7fffffff % partitions``), so one key always
  lands in one partition, in order;
* :meth:`RdKafkaOutput.send` returns one future per call, which completes when the broker
  acknowledged every record of the call, or fails with the first delivery error. The worker
  commits a source batch's offsets only after that future.
* A record refused for its size (``MSG_SIZE_TOO_LARGE``: by librdkafka's ``message.max.bytes``
  check when it is produced, or by the broker, for the topic's ``max.message.bytes``, in its
  delivery report) does not fail the future: the future's result lists it as a
  :class:`~service.output.Refusal` (its topic, origin, size and error), and the worker
  dead-letters its source message before it commits the offsets.
* The broker refuses a whole record batch above the topic's ``max.message.bytes``, and librdkafka
  does not split it (the Java producer does): every record of it is refused. Given the topics'
  limits (:class:`service.limits.TopicLimits`, read from the broker), the output keeps librdkafka's
  ``batch.size`` at or below the smallest limit of the topics it has written to, so that only a
  record too large on its own is refused. A topic with a lower limit than the batches so far waits
  for what was produced before (delivered in the batches it was made for), and a new producer with
  the smaller ``batch.size`` takes over. A broker refusal makes the output read that topic's limit
  again before its next records (it may have been lowered).

Delivery callbacks are served by :meth:`confluent_kafka.Producer.poll` from a task on the event
loop while records are unacknowledged, so they run on the loop's thread.

``produce()`` runs once per output record on the worker's event loop thread. A record without
headers (the usual case) is produced with positional arguments, ``produce(topic, value, key,
partition, callback)``: the same call as with keywords (the partition is librdkafka's "unassigned",
the default), but confluent-kafka's keyword parsing took 0.7 to 1.5 µs of the 2.1 to 3.8 µs a call cost
(measured with 2 KB values, 2026-11-28). A record with headers keeps the keywords: after the
callback, confluent-kafka's positional order has an alias slot, which the documentation does not show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from service.limits import TopicLimits
from service.output import RECORD_FRAMING_BYTES, Record, RecordQueue, Refusal, record_wire_bytes

__all__ = ["BATCH_BYTES", "SIZE_ERRORS", "RdKafkaOutput", "producer_config"]

log = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.002  # while records are unacknowledged
_FULL_QUEUE_WAIT_S = 0.005  # librdkafka's local queue is full: let deliveries drain
_ANY_PARTITION = -1  # RD_KAFKA_PARTITION_UA, produce()'s default: the configured partitioner picks
BATCH_BYTES = 1_000_000
"""librdkafka's default ``batch.size``."""
SIZE_ERRORS = frozenset({10, 18})
"""``MSG_SIZE_TOO_LARGE`` (a record above librdkafka's ``message.max.bytes``, or the broker's
``RecordTooLargeException``: above the topic's ``max.message.bytes``) and
``RECORD_LIST_TOO_LARGE``: refusals of a record for its size, reported as :class:`Refusal`."""


def producer_config(client: Mapping[str, Any], max_message_bytes: int, buffer_bytes: int | None = None,
                    batch_bytes: int | None = None) -> dict[str, Any]:
    """librdkafka settings of the worker's producer on top of the broker connection ``client``.

    ``buffer_bytes`` bounds librdkafka's queue of unacknowledged records
    (``queue.buffering.max.kbytes``, 1 GiB by default); it is raised to hold at least two
    records of ``max_message_bytes``, so a record always fits an empty queue. ``batch_bytes``
    (``worker.max_record_bytes``) caps librdkafka's ``batch.size`` (1000000 by default), so a
    batch of small records never exceeds a topic limit that takes the largest record.

    >>> producer_config({}, 2 * 1024 * 1024, 1024 * 1024)["queue.buffering.max.kbytes"]
    5120
    """
    config = {
        **client,
        "acks": "all",
        "enable.idempotence": True,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "message.max.bytes": max_message_bytes,
        "compression.type": "none",
    }
    if batch_bytes is not None:
        config["batch.size"] = min(batch_bytes, BATCH_BYTES)
    if buffer_bytes is not None:
        config["queue.buffering.max.kbytes"] = min(-(-(buffer_bytes + 2 * max_message_bytes) // 1024), 2**31 - 1)
    return config


class _Delivery:
    """Counts the acknowledgements of one :meth:`RdKafkaOutput.send` call down to zero; the
    records refused for their size are collected, any other delivery error fails the call."""

    __slots__ = ("future", "output", "refused", "remaining")

    def __init__(self, future: asyncio.Future[list[Refusal]], remaining: int, output: RdKafkaOutput) -> None:
        self.future = future
        self.remaining = remaining
        self.output = output
        self.refused: list[Refusal] = []

    def delivered(self, err: Any, msg: Any) -> None:
        """librdkafka's delivery report of a record without a source message (origin -1)."""
        self.delivered_from(-1, err, msg)

    def delivered_from(self, origin: int, err: Any, msg: Any, header_bytes: int = 0) -> None:
        """The delivery report of a record of source message ``origin``; ``header_bytes`` is what
        its headers add to its size (a delivery report has no headers)."""
        self.output.unacked -= 1
        if err is not None:
            if err.code() not in SIZE_ERRORS:
                if not self.future.done():
                    from confluent_kafka import KafkaException

                    self.future.set_exception(KafkaException(err))
                return
            self.output.refused_by_broker(msg.topic())
            self.refuse(msg.topic(), origin, record_wire_bytes(msg.key(), msg.value()) + header_bytes, err)
            return
        self.count_down()

    def refuse(self, topic: str, origin: int, size: int, err: Any, where: str = "") -> None:
        """Record ``err`` refusing a record for its size; ``where`` says who refused, when it was
        not the broker (librdkafka's local check reuses the broker's error and text)."""
        self.refused.append(Refusal(topic, origin, size, f"{err.name()}{where}: {err.str()}", local=bool(where)))
        log.warning("record refused for its size topic=%s bytes=%d error=%s", topic, size, err.name(),
                    extra={"topic": topic, "error_class": err.name()})
        self.count_down()

    def count_down(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.refused)


class RdKafkaOutput(RecordQueue):
    """Collects a source batch's output records and produces them with confluent-kafka.

    The same interface as :class:`service.output.BatchedOutput`: :meth:`append` only queues,
    :meth:`take` hands the queued records over, :meth:`send` produces them. Successive calls keep
    the order of records per partition. With ``limits``, librdkafka's ``batch.size`` follows the
    smallest ``max.message.bytes`` of the topics written to (module docstring).
    """

    def __init__(self, config: Mapping[str, Any], limits: TopicLimits | None = None) -> None:
        super().__init__()
        self._config = dict(config)
        self._producer: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one send (or producer change) at a time
        self.limits = limits
        self._sized: set[str] = set()  # topics whose limit the batch size already respects
        self.unacked = 0

    @property
    def batch_bytes(self) -> int:
        """librdkafka's ``batch.size``: the most bytes of records sent in one batch."""
        return int(self._config.get("batch.size", BATCH_BYTES))

    def refused_by_broker(self, topic: str) -> None:
        """The broker refused a record of ``topic`` for its size: read its limit again."""
        self._sized.discard(topic)
        if self.limits is not None:
            self.limits.forget(topic)

    async def _fit(self, topics: list[str]) -> None:
        """Keep ``batch.size`` at or below the ``max.message.bytes`` of ``topics`` (read from the broker)."""
        assert self.limits is not None
        found = await self.limits.learn(topics)
        smallest, by = self.batch_bytes, ""
        for topic, limit in found.items():
            if limit is None:
                continue  # unknown: asked again later
            self._sized.add(topic)
            if limit < smallest:
                smallest, by = limit, topic
        if not by:
            return
        log.info("output batches of at most %d bytes from now on: topic %s has max.message.bytes=%d "
                 "(librdkafka's batch.size was %d)", smallest, by, smallest, self.batch_bytes,
                 extra={"topic": by})
        self._config["batch.size"] = smallest
        old, self._producer = self._producer, None
        if old is not None:  # what it holds goes out in the batches it was made for, then a new producer
            while len(old):
                old.poll(0)
                await asyncio.sleep(_POLL_INTERVAL_S)

    def _client(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self._config, logger=log)
        return self._producer

    async def send(self, queued: dict[str, list[Record]] | None = None) -> list[Awaitable[Any]]:
        """Produce ``queued`` (default: every record appended so far); one future for all of them.

        The future's result lists the records refused for their size (:class:`Refusal`; by
        librdkafka's check in ``produce()`` or by the broker); it fails on any other delivery
        error. Raises when librdkafka refuses a record for another reason; the records produced
        before it are still delivered, and the caller commits none of them.
        """
        if queued is None:
            queued = self.take()
        total = sum(len(records) for records in queued.values())
        if not total:
            return []
        async with self._lock:
            if self.limits is not None:
                new = [topic for topic in queued if topic not in self._sized]
                if new:
                    await self._fit(new)
            return await self._produce(queued, total)

    async def _produce(self, queued: dict[str, list[Record]], total: int) -> list[Awaitable[Any]]:
        from confluent_kafka import KafkaException

        producer = self._client()
        future: asyncio.Future[list[Refusal]] = asyncio.get_running_loop().create_future()
        delivery = _Delivery(future, total, self)
        produce = producer.produce
        for topic, records in queued.items():
            origin = -1
            delivered: Callable[[Any, Any], None] = delivery.delivered
            for key, value, headers, source in records:
                if headers:  # its own callback: it knows the size of the headers
                    delivered = partial(delivery.delivered_from, source,
                                        header_bytes=record_wire_bytes(None, None, headers) - RECORD_FRAMING_BYTES)
                    origin = -2
                elif source != origin:  # one callback per source message, not per record
                    origin, delivered = source, partial(delivery.delivered_from, source)
                while True:
                    try:
                        if headers:
                            produce(topic, value, key, headers=headers, on_delivery=delivered)
                        else:  # positionally: keyword parsing was a third of the call (module docstring)
                            produce(topic, value, key, _ANY_PARTITION, delivered)
                        self.unacked += 1
                        break
                    except BufferError:  # the local queue is full: serve deliveries, then retry
                        self._wake.set()
                        producer.poll(0)
                        await asyncio.sleep(_FULL_QUEUE_WAIT_S)
                    except KafkaException as exc:
                        err = exc.args[0]
                        if err.code() not in SIZE_ERRORS:
                            raise
                        where = f" (librdkafka's check, message.max.bytes={self._config.get('message.max.bytes')})"
                        delivery.refuse(topic, source, record_wire_bytes(key, value, headers), err, where)
                        break
        self._ensure_poller()
        self._wake.set()
        return [future]

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll_loop())

    async def _poll_loop(self) -> None:
        while True:
            if self.unacked <= 0:
                self._wake.clear()
                await self._wake.wait()
            producer = self._producer  # the current one (:meth:`_fit` may replace it)
            if producer is not None:
                producer.poll(0)
            await asyncio.sleep(_POLL_INTERVAL_S)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout_s``) and stop serving deliveries.

        Deliveries are served here, on the loop (not with a blocking ``flush()`` in another
        thread), because their callbacks complete asyncio futures.
        """
        producer = self._producer
        if producer is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while len(producer) and loop.time() < deadline:
                producer.poll(0)
                await asyncio.sleep(_POLL_INTERVAL_S)
            producer.poll(0)
            if len(producer):
                log.warning("producer closed with %d records undelivered (their offsets are not committed)", len(producer))
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
