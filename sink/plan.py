"""The driver's side of reading Kafka: which partitions are this sink's, how far each is read,
and the offset ranges of the next micro-batch (:mod:`sink.source` reads them in Spark tasks).

The driver's consumer joins the group (so several sinks share the partitions, and a dead one's
partitions move), commits the offsets, and fetches nothing: every assigned partition is paused.
The offsets to read from are the group's committed offsets when a partition is assigned, then
what the sink has read (:meth:`Partitions.advance`); a failed micro-batch rewinds them
(:meth:`Partitions.rewind`).

The consumer joins with either group protocol (``broker.group_protocol``, :func:`driver_conf`).
Under ``classic`` its assignors are eager: a rebalance revokes every partition and assigns the
new set. Under ``consumer`` (KIP-848) librdkafka's rebalances are incremental: the callbacks get
only the partitions added or taken away, and confluent-kafka then calls ``incremental_assign`` /
``incremental_unassign`` with them. The callbacks below work on exactly the partitions they are
given (a revoked one leaves :attr:`Partitions.positions`, an assigned one starts at its
committed offset, the others are not touched), which is right under both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sink.source import Range, RangeRead, TopicPartition
from transforms.configfile import GroupProtocol, group_member_conf
from transforms.errors import CdcnormError

__all__ = ["ConsumerGroupError", "Partitions", "driver_conf", "subscription"]

log = logging.getLogger("cdcnorm.sink")

_OFFSETS_TIMEOUT_S = 10.0
_CONSUMER_PROTOCOL_NEEDS = (" a broker that serves KIP-848's consumer protocol: Apache Kafka 4.0 or later, "
                            "with consumer in group.coordinator.rebalance.protocols")
JOIN_WARNING_S = 60.0
"""Without any assignment this long after subscribing, :meth:`Partitions.poll` warns (once)."""


def driver_conf(bootstrap: str, group_id: str, consumer_conf: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka settings of the driver's consumer, the sink's member of ``group_id``:
    ``consumer_conf`` (the broker's settings, ``group.protocol`` among them:
    ``BrokerConfig.librdkafka_group_member``) over the sink's defaults. Under
    ``group.protocol=consumer`` the classic protocol's session timeout and heartbeat interval are
    left out: librdkafka refuses them there, the broker's ``group.consumer.*`` settings apply.

    >>> sorted(k for k in driver_conf("b:9092", "g", {"group.protocol": "consumer"}) if "." in k and "ms" in k)
    []
    >>> driver_conf("b:9092", "g", {})["session.timeout.ms"]
    6000
    """
    return group_member_conf({
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "enable.partition.eof": False,
        # this consumer fetches nothing (its partitions are paused as soon as assigned): a
        # small queue bounds what it fetches before the pause
        "queued.max.messages.kbytes": 1024,
        **consumer_conf,
    })


def subscription(topics: Sequence[str], pattern: str | None) -> list[str]:
    """What the driver subscribes to: ``topics``, and ``pattern`` as ``^(pattern).*``: the topics
    whose name starts with a match. The same set under both protocols: under ``classic``
    librdkafka searches the pattern in each name (POSIX regexec), under ``consumer`` the broker
    matches the whole name (RE2/J), where a bare ``^pattern`` would miss every longer name.

    >>> subscription(["a"], "^cdcnorm[.]shop")
    ['a', '^(cdcnorm[.]shop).*']
    """
    out = list(topics)
    if pattern:
        out.append(f"^({pattern.lstrip('^')}).*")
    return out


class ConsumerGroupError(CdcnormError, RuntimeError):
    """The driver's consumer failed for good (librdkafka's fatal error): the sink cannot stay in
    its group and stops."""


class Partitions:
    """The partitions assigned to this sink, the offset each is read up to, and their high
    watermarks as last asked for."""

    def __init__(self, consumer: Any, admin: Any, on_revoke: Callable[[set[TopicPartition]], None] | None = None,
                 group_protocol: str = GroupProtocol.CLASSIC.value, join_warning_s: float = JOIN_WARNING_S) -> None:
        self.consumer = consumer
        self.admin = admin
        self.group_protocol = GroupProtocol(group_protocol)
        self.join_warning_s = join_warning_s
        self._subscribed_at: float | None = None
        self._join_warned = False
        self.positions: dict[TopicPartition, int] = {}  # the next offset to read
        self.watermarks: dict[TopicPartition, int] = {}  # high watermarks of the last plan
        self.more: set[TopicPartition] = set()  # left unfinished by a budget: read again
        self.paused: set[TopicPartition] = set()  # not read (a paused table's partitions)
        self._unpaused: set[TopicPartition] = set()  # assigned, fetching not paused yet
        self._on_revoke = on_revoke
        self.generation = 0  # assignments seen

    # -- group membership (called from inside consumer.poll) ------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        self._subscribed_at = time.monotonic()
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
        this consumer never fetches records. Must be called within ``max.poll.interval.ms``.

        Raises :class:`ConsumerGroupError` when the consumer failed for good (a broker that
        refuses the consumer protocol does so); warns once when no partition was assigned
        :attr:`join_warning_s` after subscribing (a broker without the consumer protocol at all,
        such as Tansu or a Kafka older than 4.0, never answers it)."""
        msg = self.consumer.poll(0)
        if msg is not None and msg.error() is not None:
            self._consumer_error(msg.error())
        if not self.generation and not self._join_warned and self._subscribed_at is not None \
                and time.monotonic() - self._subscribed_at > self.join_warning_s:
            self._join_warned = True
            log.warning(
                "no partitions assigned %.0fs after subscribing (group.protocol=%s): the topics may not exist yet, "
                "a member that died may hold them until its session times out (with group.protocol=consumer, the "
                "broker's group.consumer.session.timeout.ms, 45 s by default), or the broker may not serve the "
                "group protocol%s",
                time.monotonic() - self._subscribed_at, self.group_protocol.value,
                f" (group.protocol=consumer needs{_CONSUMER_PROTOCOL_NEEDS})"
                if self.group_protocol is GroupProtocol.CONSUMER else "",
            )
        if self._unpaused:
            from confluent_kafka import TopicPartition as KafkaTP

            assigned = self.assigned()
            todo = [KafkaTP(t, p) for t, p in self._unpaused if (t, p) in assigned]
            if todo:
                self.consumer.pause(todo)
            self._unpaused.clear()

    def _consumer_error(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        if error.code() != KafkaError._FATAL and not error.fatal():
            log.warning("consumer: %s", error)
            return
        hint = ""
        if self.group_protocol is GroupProtocol.CONSUMER:
            hint = f"; broker.group_protocol=consumer needs{_CONSUMER_PROTOCOL_NEEDS}, else use classic"
        raise ConsumerGroupError(f"the sink's consumer failed for good: {error.str()}{hint}")

    def assigned(self) -> set[TopicPartition]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    # -- planning -------------------------------------------------------------------------------

    def refresh_watermarks(self) -> None:
        """Ask the high watermark of every assigned partition (one request per broker).

        librdkafka's admin client sends ListOffsets to the leader, with the leader epoch, of its
        cached metadata, and does not refresh that metadata when the answer says it is stale: once
        a partition's leader changed (a broker restarted or failed over), every later request of
        the partition failed (``FENCED_LEADER_EPOCH``; ``No leaders found`` when the cache last saw
        the partition without a leader) for as long as the sink ran, so it planned no more reads
        of it and, its lag unknown, looked idle: found by tests/faults/test_kafka_cluster_faults.py
        after a rolling restart. So when a partition's watermark cannot be read, or comes back
        invalid, the metadata of its topic is requested again (:meth:`_refresh_metadata`) and the
        partition asked once more at once. If that fails too (its leader is away), the last
        watermark known stays; the next plan asks again.
        """
        tps = [tp for tp in self.positions if tp not in self.paused]
        if not tps:
            return
        failed = self._ask_watermarks(tps)
        if failed:
            self._refresh_metadata(sorted({t for t, _ in failed}))
            failed = self._ask_watermarks(list(failed))
            for (topic, partition), why in failed.items():
                log.warning("high watermark of %s[%d] unknown: %s", topic, partition, why)

    def _ask_watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, str]:
        """Ask the high watermarks of ``tps`` into :attr:`watermarks`; returns the partitions
        without an answer, and why."""
        from confluent_kafka import TopicPartition as KafkaTP
        from confluent_kafka.admin import OffsetSpec

        futures = self.admin.list_offsets(
            {KafkaTP(t, p): OffsetSpec.latest() for t, p in tps}, request_timeout=_OFFSETS_TIMEOUT_S
        )
        failed: dict[TopicPartition, str] = {}
        for ktp, future in futures.items():
            tp = (ktp.topic, ktp.partition)
            try:
                offset = future.result().offset
            except Exception as exc:
                failed[tp] = str(exc)
                continue
            if offset < 0:  # librdkafka's answer for a leader that has just moved away (-1001)
                failed[tp] = f"invalid offset {offset}"
            else:
                self.watermarks[tp] = offset
        return failed

    def _refresh_metadata(self, topics: list[str]) -> None:
        """Make the admin client request the metadata of ``topics`` (their leaders and leader
        epochs) now, instead of at its next periodic refresh."""
        for topic in topics:
            try:
                self.admin.list_topics(topic, timeout=_OFFSETS_TIMEOUT_S)
            except Exception as exc:  # no broker answered: the next plan tries again
                log.warning("metadata of %s not refreshed: %s", topic, exc)
                return
        log.info("refreshed the metadata of %s: their leaders or leader epochs changed", ", ".join(topics))

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
