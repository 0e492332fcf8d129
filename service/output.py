"""Batched output of the worker: records grouped per topic-partition, one producer batch each.

The worker hands the producer one closed record batch per output topic-partition and source
batch (aiokafka's ``create_batch``/``send_batch``), instead of one ``send()`` per record: one
future per batch instead of per record, no per-record partitioner call inside aiokafka, and a
closed batch goes out at once (no linger). Records are partitioned like the Java client's
default partitioner: ``murmur2(key) & 0x7fffffff % partitions``, so a key always lands in the
same partition as with any other Kafka producer. Records without a key stick to one partition
per topic and batch, rotating from batch to batch (the sticky partitioner's idea).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "BatchedOutput",
    "Output",
    "OutputProducer",
    "Record",
    "RecordBatchBuilder",
    "RecordQueue",
    "Refusal",
    "key_partition",
    "murmur2",
    "murmur2_many",
    "record_wire_bytes",
]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` (``org.apache.kafka.common.utils.Utils.murmur2``).

    Same result as :func:`aiokafka.partitioner.murmur2`, 2-3x faster: the 4-byte words are
    unpacked in one ``struct`` call instead of byte by byte. For many keys at once see
    :func:`murmur2_many`.

    >>> murmur2(b"21")
    3321034988
    >>> murmur2(b"")
    275646681
    """
    length = len(data)
    h = 0x9747B28C ^ length
    n = length >> 2
    if n:
        words = _WORDS.get(n)
        if words is None:
            words = _WORDS[n] = struct.Struct(f"<{n}I")
        for k in words.unpack_from(data):
            k = (k * _M) & _MASK
            k = ((k ^ (k >> 24)) * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


_LANE_MASK = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_LANE_ONE = b"\x01\x00\x00\x00\x00\x00\x00\x00"
_MIN_LANES = 12


def murmur2_many(keys: Sequence[bytes]) -> list[int]:
    """:func:`murmur2` of every key, computed for many keys at once.

    Keys of the same length (``_MIN_LANES`` or more) are hashed together: their 4-byte words are
    laid out in 64-bit lanes of one Python integer per word position, and each murmur2 step is
    a few big-integer operations over all lanes (a 32x32-bit product fits a 64-bit lane, so
    lanes never carry into each other). That turns ~10 interpreted operations per word and key
    into ~10 C-level operations per word position and batch. Fewer keys of a length use
    :func:`murmur2` one by one.

    >>> murmur2_many([b"21"] * 20) == [murmur2(b"21")] * 20
    True
    """
    out = [0] * len(keys)
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        group = groups.get(len(key))
        if group is None:
            groups[len(key)] = [i]
        else:
            group.append(i)
    for length, members in groups.items():
        if len(members) < _MIN_LANES:
            for i in members:
                out[i] = murmur2(keys[i])
            continue
        for i, h in zip(members, _murmur2_lanes([keys[i] for i in members], length), strict=True):
            out[i] = h
    return out


def _murmur2_lanes(keys: list[bytes], length: int) -> array[int]:
    lanes = len(keys)
    width = lanes * 8
    from_bytes = int.from_bytes
    lane_mask = from_bytes(_LANE_MASK * lanes, "little")
    h = (0x9747B28C ^ length) * from_bytes(_LANE_ONE * lanes, "little")
    data = b"".join(keys)
    n = length >> 2
    if n:
        # word j of every key, one 64-bit lane per key, word positions one after the other
        words = bytearray(n * width)
        for j in range(n):
            at = j * width
            for b in range(4):
                words[at + b:at + width:8] = data[4 * j + b::length]
        mask = from_bytes(_LANE_MASK * (lanes * n), "little")
        k = (from_bytes(words, "little") * _M) & mask
        k = ((k ^ ((k >> 24) & mask)) * _M) & mask
        mixed = memoryview(k.to_bytes(n * width, "little"))
        for j in range(n):
            h = ((h * _M) & lane_mask) ^ from_bytes(mixed[j * width:(j + 1) * width], "little")
    tail = length & 3
    if tail:
        base = length & ~3
        rest = bytearray(width)
        for b in range(tail):
            rest[b::8] = data[base + b::length]
        h = ((h ^ from_bytes(rest, "little")) * _M) & lane_mask
    h ^= (h >> 13) & lane_mask
    h = (h * _M) & lane_mask
    h ^= (h >> 15) & lane_mask
    result = array("Q")
    result.frombytes(h.to_bytes(width, "little"))
    return result


def key_partition(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner picks for ``key``.

    >>> key_partition(b"21", 4)
    0
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RecordBatchBuilder(Protocol):
    """What :meth:`OutputProducer.create_batch` returns (aiokafka's ``BatchBuilder``)."""

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]] = ()) -> Any: ...

    def close(self) -> None: ...


class OutputProducer(Protocol):
    """The part of :class:`aiokafka.AIOKafkaProducer` the worker uses."""

    async def partitions_for(self, topic: str) -> set[int]: ...

    def create_batch(self) -> RecordBatchBuilder: ...

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Awaitable[Any]: ...


Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]
"""key, value, headers, and the record's origin: the index of its source message among those
handed over with it (``RecordQueue.origin`` when it was appended; -1 for none)."""

RECORD_FRAMING_BYTES = 36
"""What a record adds to its key and value in a v2 record batch, at most (librdkafka's
``RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD``: length, attributes, timestamp and offset deltas, key and
value lengths, header count)."""
HEADER_FRAMING_BYTES = 10
"""What a header adds to its name and value, at most (two length varints)."""


def record_wire_bytes(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()) -> int:
    """An upper bound of the size of a record in a produce request: what librdkafka compares with
    ``message.max.bytes`` before it accepts the record.

    >>> record_wire_bytes(b"k", b"v" * 100, [("h", b"1")])
    149
    """
    size = RECORD_FRAMING_BYTES + (0 if key is None else len(key)) + (0 if value is None else len(value))
    for name, data in headers:
        size += HEADER_FRAMING_BYTES + len(name) + (0 if data is None else len(data))
    return size


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record the producer or the broker refused because of its size (``MSG_SIZE_TOO_LARGE``):
    the worker dead-letters its source message instead of stopping."""

    topic: str
    origin: int  # the record's origin (see :data:`Record`)
    size: int  # record_wire_bytes of the record
    error: str  # the error's name and text, e.g. "MSG_SIZE_TOO_LARGE: Broker: Message size too large"
    local: bool = False  # refused by the producer's own check (librdkafka's message.max.bytes), not the broker


class Output(Protocol):
    """Where the worker's records go: :class:`BatchedOutput` (aiokafka) or
    :class:`service.rdkafka.RdKafkaOutput` (librdkafka, the default)."""

    pending: int
    pending_bytes: int
    origin: int

    def append(self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Queue one record (no I/O)."""

    def take(self) -> dict[str, list[Record]]:
        """The records queued since the last call, per topic."""

    async def send(self, queued: dict[str, list[Record]] | None = None) -> list[Awaitable[Any]]:
        """Produce ``queued``; futures that complete when the broker acknowledged all of it. A future
        may complete with a list of :class:`Refusal`: records refused for their size, the others
        acknowledged."""

    async def close(self) -> None:
        """Deliver what was sent and release the client (at shutdown, after the last send)."""


class RecordQueue:
    """The output records of the source batch being processed, per topic, until :meth:`take`."""

    def __init__(self) -> None:
        self._records: dict[str, list[Record]] = {}
        self.pending = 0
        self.pending_bytes = 0  # keys, values and headers of the pending records
        self.origin = -1  # what the records appended now come from (set by the worker per source message)

    def append(self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Queue one record (no I/O)."""
        records = self._records.get(topic)
        if records is None:
            records = self._records[topic] = []
        # both producers take the headers as a list (aiokafka's C record builder needs one)
        records.append((key, value, headers if type(headers) is list else list(headers), self.origin))
        self.pending += 1
        size = 0 if value is None else len(value)
        if key is not None:
            size += len(key)
        if headers:
            for name, data in headers:
                size += len(name) + len(data)
        self.pending_bytes += size

    def take(self) -> dict[str, list[Record]]:
        """The records appended since the last :meth:`take`, per topic (for a later ``send``)."""
        queued, self._records, self.pending, self.pending_bytes = self._records, {}, 0, 0
        return queued


class BatchedOutput(RecordQueue):
    """Collects the output records of a source batch per topic and sends them as batches.

    :meth:`append` only queues (no I/O); :meth:`take` hands the queued records over. :meth:`send`
    asks the producer for the partitions of each topic (a metadata request for a topic it does
    not know yet; the broker may auto-create it), partitions the records, builds and closes one
    batch per topic-partition (several if one fills up) and hands them to the producer. It
    returns one future per batch, which completes when the broker acknowledged the batch, or
    raises. Within a topic-partition the records keep their order, and successive calls keep
    the order of batches (the producer sends one partition's batches in order), as long as the
    calls do not overlap.
    """

    def __init__(self, producer: OutputProducer) -> None:
        super().__init__()
        self._producer = producer
        self._sticky: dict[str, int] = {}

    async def send(self, queued: dict[str, list[Record]] | None = None) -> list[Awaitable[Any]]:
        """Hand ``queued`` (default: every record appended so far) to the producer; the futures
        of the batches, in send order."""
        futures: list[Awaitable[Any]] = []
        if queued is None:
            queued = self.take()
        for topic, records in queued.items():
            # the producer's current metadata (a request only for a topic it does not know yet)
            count = len(await self._producer.partitions_for(topic))
            sticky = self._sticky.get(topic, -1) + 1
            self._sticky[topic] = sticky
            keys = [r[0] for r in records]
            if None in keys:
                hashes = [sticky if k is None else murmur2(k) for k in keys]
            else:
                hashes = murmur2_many(keys)  # type: ignore[arg-type]
            by_partition: dict[int, list[Record]] = {}
            for record, hashed in zip(records, hashes, strict=True):
                p = (hashed & 0x7FFFFFFF) % count
                part = by_partition.get(p)
                if part is None:
                    by_partition[p] = [record]
                else:
                    part.append(record)
            for p, part in by_partition.items():
                futures.extend(await self._send_partition(topic, p, part))
        return futures

    async def close(self) -> None:
        """Nothing to release: the producer is the app's (Faust stops it)."""

    async def _send_partition(self, topic: str, partition: int, records: list[Record]) -> list[Awaitable[Any]]:
        futures = []
        create, send = self._producer.create_batch, self._producer.send_batch
        batch = create()
        filled = 0
        for key, value, headers, _ in records:
            if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
                if not filled:
                    raise ValueError(f"record of {len(value or b'')} bytes does not fit a batch for {topic}")
                batch.close()
                futures.append(await send(batch, topic, partition=partition))
                batch = create()
                filled = 0
                if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
                    raise ValueError(f"record of {len(value or b'')} bytes does not fit a batch for {topic}")
            filled += 1
        batch.close()
        futures.append(await send(batch, topic, partition=partition))
        return futures
