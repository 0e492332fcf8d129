"""The driver's side of reading Kafka: which partitions are this sink's, how far each is read,
and the offset ranges of the next micro-batch (:mod:`sink.source` reads them in Spark tasks).

The driver's consumer joins the group (so several sinks share the partitions, and a dead one's
partitions move), commits the offsets, and fetches nothing: every assigned partition is paused.
The offsets to read from are the group's committed offsets when a partition is assigned, then
what the sink has read (:meth:`Partitions.advance`); a failed micro-batch rewinds them
(:meth:`Partitions.rewind`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sink.source import Range, RangeRead, TopicPartition

__all__ = ["Partitions"]

log = logging.getLogger("cdcnorm.sink")

_OFFSETS_TIMEOUT_S = 10.0


class Partitions:
    """The partitions assigned to this sink, the offset each is read up to, and their high
    watermarks as last asked for."""

    def __init__(self, consumer: Any, admin: Any, on_revoke: Callable[[set[TopicPartition]], None] | None = None) -> None:
        self.consumer = consumer
        self.admin = admin
        self.positions: dict[TopicPartition, int] = {}  # the next offset to read
        self.watermarks: dict[TopicPartition, int] = {}  # high watermarks of the last plan
        self.more: set[TopicPartition] = set()  # left unfinished by a budget: read again
        self.paused: set[TopicPartition] = set()  # not read (a paused table's partitions)
        self._unpaused: set[TopicPartition] = set()  # assigned, fetching not paused yet
        self._on_revoke = on_revoke
        self.generation = 0  # assignments seen

    # -- group membership (called from inside consumer.poll) ------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        self.generation += 1
        log.info("assigned %d partitions (assignment %d): %s", len(tps), self.generation,
                 ", ".join(f"{t}[{p}]" for t, p in tps[:20]) + (" ..." if len(tps) > 20 else ""))
        starts = self._committed(consumer, partitions)
        for tp in tps:
            self.positions[tp] = starts[tp]
            # read once whatever the watermark says: a broker with wrong watermarks (Tansu)
            # reports none past a committed offset that stopped inside its last record batch
            self.more.add(tp)
        self._unpaused.update(tps)

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        log.info("revoked %d partitions", len(tps))
        for tp in tps:
            self.positions.pop(tp, None)
            self.watermarks.pop(tp, None)
            self.more.discard(tp)
            self.paused.discard(tp)
            self._unpaused.discard(tp)
        if self._on_revoke is not None:
            self._on_revoke(tps)

    def _committed(self, consumer: Any, partitions: list[Any]) -> dict[TopicPartition, int]:
        """Where each newly assigned partition is read from: its committed offset, else its low
        watermark (``auto.offset.reset: earliest``)."""
        from confluent_kafka import TopicPartition as KafkaTP

        out: dict[TopicPartition, int] = {}
        for c in consumer.committed([KafkaTP(p.topic, p.partition) for p in partitions], timeout=_OFFSETS_TIMEOUT_S):
            tp = (c.topic, c.partition)
            if c.offset >= 0:
                out[tp] = c.offset
            else:
                low, _ = consumer.get_watermark_offsets(KafkaTP(*tp), timeout=_OFFSETS_TIMEOUT_S)
                out[tp] = max(0, low)
        return out

    def poll(self) -> None:
        """Serve the group's callbacks (joins, rebalances) and pause newly assigned partitions:
        this consumer never fetches records. Must be called within ``max.poll.interval.ms``."""
        msg = self.consumer.poll(0)
        if msg is not None and msg.error() is not None:
            log.warning("consumer: %s", msg.error())
        if self._unpaused:
            from confluent_kafka import TopicPartition as KafkaTP

            assigned = self.assigned()
            todo = [KafkaTP(t, p) for t, p in self._unpaused if (t, p) in assigned]
            if todo:
                self.consumer.pause(todo)
            self._unpaused.clear()

    def assigned(self) -> set[TopicPartition]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    # -- planning -------------------------------------------------------------------------------

    def refresh_watermarks(self) -> None:
        """Ask the high watermark of every assigned partition (one request per broker)."""
        from confluent_kafka import TopicPartition as KafkaTP
        from confluent_kafka.admin import OffsetSpec

        tps = [tp for tp in self.positions if tp not in self.paused]
        if not tps:
            return
        futures = self.admin.list_offsets(
            {KafkaTP(t, p): OffsetSpec.latest() for t, p in tps}, request_timeout=_OFFSETS_TIMEOUT_S
        )
        for ktp, future in futures.items():
            try:
                self.watermarks[(ktp.topic, ktp.partition)] = future.result().offset
            except Exception as exc:  # a partition whose leader is away: planned again next time
                log.warning("high watermark of %s[%d] unknown: %s", ktp.topic, ktp.partition, exc)

    def plan(self, skip: Iterable[TopicPartition] = ()) -> list[Range]:
        """The ranges of the next micro-batch: every assigned partition, not paused nor in
        ``skip``, whose high watermark is past what was read, or which a budget left unfinished."""
        self.refresh_watermarks()
        skipped = set(skip) | self.paused
        ranges = []
        for tp, start in sorted(self.positions.items()):
            if tp in skipped:
                continue
            end = self.watermarks.get(tp, start)
            if tp in self.more:
                end = max(end, start + 1)
            if end > start:
                ranges.append(Range(tp[0], tp[1], start, end))
        return ranges

    def advance(self, reads: Iterable[RangeRead]) -> None:
        """Record how far the tasks read (a partition revoked meanwhile is left out)."""
        for r in reads:
            if r.tp not in self.positions:
                continue
            self.positions[r.tp] = max(self.positions[r.tp], r.next_offset)
            if r.exhausted:
                self.more.discard(r.tp)
            else:
                self.more.add(r.tp)

    def rewind(self, starts: dict[TopicPartition, int]) -> None:
        """Read these partitions again from these offsets (a failed micro-batch)."""
        for tp, offset in starts.items():
            if tp in self.positions:
                self.positions[tp] = offset
                self.more.add(tp)

    def lag(self) -> dict[TopicPartition, int]:
        """Per assigned partition, records not read yet as of the last plan's high watermarks
        (only as right as the broker's watermarks: the local Tansu broker's under-report)."""
        return {
            tp: max(0, self.watermarks[tp] - pos)
            for tp, pos in self.positions.items()
            if tp in self.watermarks
        }

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit these offsets for the group (synchronously)."""
        from confluent_kafka import TopicPartition as KafkaTP

        if offsets:
            self.consumer.commit(offsets=[KafkaTP(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False)
