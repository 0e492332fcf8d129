"""Kafka offset ranges: planned by the driver, read and parsed inside Spark tasks.

The sink reads Kafka the way Spark's own Kafka source does. The driver never fetches a record:
its consumer only keeps the group membership (which partitions are this sink's), and each micro-
batch it plans one :class:`Range` per partition with records to read (from the offset the sink
has read up to, to the high watermark asked for just now), groups the ranges into
:class:`ReadTask` s, and Spark tasks fetch them with their own confluent-kafka consumer
(:func:`read_task`), parse each record into a :class:`sink.changes.SinkChange` and report how far
they read (:class:`RangeRead`).

High watermarks plan a range. Some brokers report them wrong (the local Tansu broker reports
the base offset of the partition's last record batch, plus one), so a task does not stop at the
planned end: it reads a range until a fetch of it returns nothing (librdkafka's partition EOF,
which on Kafka comes with the records up to the high watermark of that fetch), until the range's
share of the budget, or until the broker stalls. Only a range that ended on such an EOF is
``exhausted``; any other says more may remain, and the next plan reads it again whatever its
watermark says. (Trusting the planned end once left the end of Tansu's last batch unread, the
range reported as read to its end: tests/faults/test_crashes.py found it, in 3 runs of 3.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sink.changes import ChangeParseError, RecordParser, SinkChange
from sink.table_settings import TableNames

__all__ = ["BadRecord", "Range", "RangeRead", "ReadTask", "parser_for", "read_task", "reader_conf", "split_tasks"]

log = logging.getLogger("cdcnorm.sink")

TopicPartition = tuple[str, int]

# librdkafka returns a batch when it has num_messages or the timeout ends, never earlier: short
# waits keep a task from sitting on records it already has
_FETCH_WAIT_S = 0.05
_FETCH_MAX = 10_000
_MAX_BAD_REPORTED = 20  # bad records a task describes (all are counted)


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets ``[start, end)`` of one partition to read in a micro-batch. ``end`` is the high
    watermark seen at planning (for a partition left unfinished by its budget, at least
    ``start + 1``: there is more, whatever the broker's watermark says)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ReadTask:
    """The ranges one Spark task reads, with one consumer, up to ``budget`` records in all."""

    ranges: tuple[Range, ...]
    budget: int


@dataclass(frozen=True, slots=True)
class RangeRead:
    """How far a task read a range: ``next_offset`` is where the next read starts (the consumer's
    position: past control records too), ``records`` how many it read, ``exhausted`` whether a
    fetch of it returned nothing (false: it stopped on its budget or a stall, more may remain:
    the next plan reads it again whatever its watermark says)."""

    topic: str
    partition: int
    start: int
    next_offset: int
    records: int
    exhausted: bool

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that is not a canonical change event (logged and counted by the driver)."""

    topic: str
    partition: int
    offset: int
    reason: str


def split_tasks(ranges: list[Range], tasks: int, budget: int, pending: Mapping[TopicPartition, int] | None = None) -> list[ReadTask]:
    """Group ``ranges`` into at most ``tasks`` read tasks of about equal expected size, sharing
    the micro-batch's record ``budget`` in proportion. A topic's partitions stay in one task
    when there are at least as many topics as tasks (fewer, larger files per table: a table is
    usually a topic); otherwise partitions are spread one by one.

    ``pending``: the expected records per partition (watermark minus start; may be wrong on
    brokers with wrong watermarks, where it only guides the split).

    >>> rs = [Range("a", p, 0, 10) for p in range(4)]
    >>> [len(t.ranges) for t in split_tasks(rs, 2, 100)]
    [2, 2]
    >>> [len(t.ranges) for t in split_tasks(rs + [Range("b", 0, 0, 5)], 2, 100)]
    [4, 1]
    """
    if not ranges:
        return []
    sizes = {r.tp: max(1, (pending or {}).get(r.tp, r.end - r.start)) for r in ranges}
    topics: dict[str, list[Range]] = {}
    for r in ranges:
        topics.setdefault(r.topic, []).append(r)
    groups = list(topics.values()) if len(topics) >= tasks else [[r] for r in ranges]
    groups.sort(key=lambda g: -sum(sizes[r.tp] for r in g))
    bins: list[list[Range]] = [[] for _ in range(min(tasks, len(groups)))]
    loads = [0] * len(bins)
    for group in groups:  # largest first into the lightest bin
        i = loads.index(min(loads))
        bins[i].extend(group)
        loads[i] += sum(sizes[r.tp] for r in group)
    total = sum(loads) or 1
    return [
        ReadTask(tuple(sorted(b, key=lambda r: r.tp)), max(1, budget * load // total))
        for b, load in zip(bins, loads, strict=True)
        if b
    ]


# -- inside a Spark task -------------------------------------------------------------------------

_consumers: dict[tuple[tuple[str, str], ...], Any] = {}


def _consumer(conf: Mapping[str, Any]) -> Any:
    """A consumer for ``conf``, kept for the Python worker's later tasks (as Spark's Kafka source
    caches its consumers per executor): connecting costs more than a task's fetch."""
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    consumer = _consumers.get(key)
    if consumer is None:
        from confluent_kafka import Consumer

        consumer = _consumers[key] = Consumer(dict(conf))
    return consumer


_parsers: dict[tuple[str, TableNames | None], RecordParser] = {}


def parser_for(registry: Any, names: TableNames | None = None) -> RecordParser:
    """The record parser of a Python worker for these schema registry settings (``None``: JSON
    only) and table names, kept for its later tasks with the writer schemas it has read."""
    key = ("" if registry is None else registry.model_dump_json(), names)
    parser = _parsers.get(key)
    if parser is None:
        parser = _parsers[key] = RecordParser.from_settings(registry, names)
    return parser


def reader_conf(consumer_conf: Mapping[str, Any], bootstrap: str, group_id: str) -> dict[str, Any]:
    """The task consumers' settings: the sink's own (security, client settings) without group
    membership or offset commits; ``group.id`` is only a label (partitions are assigned, never
    subscribed)."""
    conf = {k: v for k, v in consumer_conf.items() if not k.startswith(("group.", "partition.assignment", "session.", "heartbeat."))}
    conf.update({
        "bootstrap.servers": bootstrap,
        "group.id": f"{group_id}-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,  # "a fetch returned nothing": where a range ends on any broker
        "auto.offset.reset": "earliest",
        # a fetch of a partition with nothing new answers within this, not the default 500 ms
        "fetch.wait.max.ms": 10,
    })
    return conf


def read_task(
    task: ReadTask, conf: Mapping[str, Any], parser: RecordParser, stall_seconds: float
) -> Iterator[SinkChange | RangeRead | BadRecord]:
    """Read ``task``'s ranges and parse each record: yields the changes (per partition in
    offset order), the records that are not changes (:class:`BadRecord`), then one
    :class:`RangeRead` per range.

    Each range may take an equal share of the task's budget, so a busy partition cannot starve
    the others of a task: one that reaches its share is paused, and read on with what the others
    leave of the budget once they are done (else by the next micro-batch). A range is done when a
    fetch of it returns nothing (librdkafka's partition EOF, at the offset after the last record:
    past transaction markers too), not at its planned end (see the module). The task ends when
    every range is done or capped; ``stall_seconds`` without any record or EOF (a broker that does
    not answer) ends it too, the ranges as far as they got.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTP

    consumer = _consumer(conf)
    by_tp = {r.tp: r for r in task.ranges}
    caps = dict.fromkeys(by_tp, max(1, task.budget // max(1, len(by_tp))))
    consumer.assign([KafkaTP(r.topic, r.partition, r.start) for r in task.ranges])
    next_offset = {r.tp: r.start for r in task.ranges}
    counts = dict.fromkeys(by_tp, 0)
    open_tps = set(by_tp)  # not at their end yet
    capped: set[TopicPartition] = set()  # took their share: paused, more remains
    ended: set[TopicPartition] = set()  # a fetch returned nothing: read to the end
    read = bad = 0
    idle_since = time.monotonic()
    try:
        while read < task.budget:
            if not open_tps and capped:
                # the other ranges are done: the budget they left goes to the capped ones, from
                # where they stopped (what was fetched of them after the pause was skipped)
                more = max(1, (task.budget - read) // len(capped))
                for tp in capped:
                    caps[tp] = counts[tp] + more
                    consumer.seek(KafkaTP(tp[0], tp[1], next_offset[tp]))
                consumer.resume([KafkaTP(*tp) for tp in capped])
                open_tps, capped = capped, set()
            draining = not open_tps  # every range at its end: take what is fetched already
            msgs = consumer.consume(min(_FETCH_MAX, task.budget - read), 0 if draining else _FETCH_WAIT_S)
            if not msgs:
                if draining or time.monotonic() - idle_since > stall_seconds:
                    break
                continue
            idle_since = time.monotonic()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # a fetch returned nothing: this partition has nothing more now
                        tp = cast(TopicPartition, (msg.topic(), msg.partition()))
                        if tp in open_tps:
                            open_tps.discard(tp)
                            ended.add(tp)
                            next_offset[tp] = max(next_offset[tp], msg.offset())
                        continue
                    if err.fatal() or not err.retriable():
                        raise KafkaException(err)
                    log.warning("consumer error: %s", err)
                    continue
                tp = cast(TopicPartition, (msg.topic(), msg.partition()))  # a record has both
                if tp in capped:
                    continue  # fetched before its pause: read from next_offset again
                offset = msg.offset()
                ended.discard(tp)  # a record after its EOF: newer ones arrived, the end is unknown again
                read += 1
                counts[tp] += 1
                next_offset[tp] = offset + 1
                if counts[tp] >= caps[tp]:
                    capped.add(tp)
                    open_tps.discard(tp)
                    consumer.pause([KafkaTP(*tp)])
                try:
                    change = parser.parse(tp[0], tp[1], offset, msg.key(), msg.value())
                except ChangeParseError as exc:
                    bad += 1
                    yield BadRecord(tp[0], tp[1], offset, str(exc) if bad <= _MAX_BAD_REPORTED else "")
                    continue
                if change is not None:
                    yield change
    finally:
        if capped:  # librdkafka keeps a partition paused across assignments
            consumer.resume([KafkaTP(*tp) for tp in capped])
        consumer.unassign()
    for tp, r in by_tp.items():
        # a range is read to its end only where a fetch returned nothing: not where it reached
        # the planned end (a wrong watermark: Tansu's stops inside its last record batch), not
        # where its share or the task's budget ran out, not where the broker stalled
        more = tp not in ended
        yield RangeRead(r.topic, r.partition, r.start, next_offset[tp], counts[tp], not more)
