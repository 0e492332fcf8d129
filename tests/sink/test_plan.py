"""The driver's partitions: where each is read from, the ranges of a micro-batch, and what a
read, a failed batch or a rebalance does to them (a stand-in consumer and admin client: the
ranges' planning is plain bookkeeping; tests/sink/test_source.py reads real ranges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from sink.plan import Partitions
from sink.source import Range, RangeRead


@dataclass
class Offset:
    offset: int


class Future:
    def __init__(self, value: int | Exception) -> None:
        self.value = value

    def result(self) -> Offset:
        if isinstance(self.value, Exception):
            raise self.value
        return Offset(self.value)


class Admin:
    def __init__(self, high: dict[tuple[str, int], int | Exception]) -> None:
        self.high = high
        self.asked = 0

    def list_offsets(self, specs: dict[Any, Any], request_timeout: float) -> dict[Any, Future]:
        self.asked += 1
        return {tp: Future(self.high[(tp.topic, tp.partition)]) for tp in specs}


class Consumer:
    def __init__(self, committed: dict[tuple[str, int], int]) -> None:
        self._committed = committed
        self.assigned: list[TopicPartition] = []
        self.paused: list[tuple[str, int]] = []
        self.commits: list[list[TopicPartition]] = []

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._committed.get((tp.topic, tp.partition), -1001)) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 5, 100  # low, high

    def assignment(self) -> list[TopicPartition]:
        return self.assigned

    def poll(self, timeout: float) -> None:
        return None

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in tps]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        self.commits.append(offsets)


def _partitions(committed: dict[tuple[str, int], int], high: dict[tuple[str, int], int | Exception]) -> tuple[Partitions, Consumer, Admin]:
    consumer, admin = Consumer(committed), Admin(high)
    parts = Partitions(consumer, admin)
    tps = [TopicPartition(t, p) for t, p in high]
    consumer.assigned = tps
    parts._assigned(consumer, tps)  # what the group's rebalance callback does
    parts.poll()
    return parts, consumer, admin


def test_assigned_partitions_start_at_their_committed_offset_or_low_watermark_and_are_paused() -> None:
    parts, consumer, _ = _partitions({("a", 0): 40}, {("a", 0): 50, ("a", 1): 50})
    assert parts.positions == {("a", 0): 40, ("a", 1): 5}
    assert sorted(consumer.paused) == [("a", 0), ("a", 1)]  # the driver's consumer fetches nothing
    assert parts.generation == 1


def test_each_new_partition_is_read_once_whatever_its_watermark_says() -> None:
    """A broker with wrong watermarks (Tansu) reports none past a committed offset inside its
    last record batch: a new partition is read until a fetch returns nothing."""
    parts, _, _ = _partitions({("a", 0): 40}, {("a", 0): 1})
    assert parts.plan() == [Range("a", 0, 40, 41)]
    parts.advance([RangeRead("a", 0, 40, 60, 20, True)])
    assert parts.plan() == []  # read to its end: its watermark decides now
    assert parts.lag() == {("a", 0): 0}


def test_ranges_go_up_to_the_high_watermark_and_a_budget_cut_range_is_read_again() -> None:
    parts, _, admin = _partitions({("a", 0): 0, ("b", 0): 10}, {("a", 0): 100, ("b", 0): 10})
    parts.advance([RangeRead("a", 0, 0, 0, 0, True), RangeRead("b", 0, 10, 10, 0, True)])
    assert parts.plan() == [Range("a", 0, 0, 100)]  # b has nothing new
    parts.advance([RangeRead("a", 0, 0, 70, 70, False)])  # stopped on its budget
    admin.high[("a", 0)] = 1  # even if the watermark says otherwise
    assert parts.plan() == [Range("a", 0, 70, 71)]
    assert admin.asked == 2


def test_a_failed_batch_is_read_again_from_its_first_offsets() -> None:
    parts, _, _ = _partitions({("a", 0): 0}, {("a", 0): 100})
    parts.advance([RangeRead("a", 0, 0, 100, 100, True)])
    assert parts.plan() == []
    parts.rewind({("a", 0): 0, ("gone", 0): 5})  # a partition revoked meanwhile is left alone
    assert parts.plan() == [Range("a", 0, 0, 100)]
    assert ("gone", 0) not in parts.positions


def test_paused_tables_partitions_and_revoked_ones_are_not_planned() -> None:
    parts, consumer, _ = _partitions({}, {("a", 0): 100, ("a", 1): 100})
    parts.paused.add(("a", 1))
    assert [r.tp for r in parts.plan()] == [("a", 0)]
    forgotten: list[set[tuple[str, int]]] = []
    parts._on_revoke = forgotten.append
    parts._revoked(consumer, [TopicPartition("a", 0)])
    assert forgotten == [{("a", 0)}] and ("a", 0) not in parts.positions
    # a read that comes back for a revoked partition moves nothing
    parts.advance([RangeRead("a", 0, 5, 50, 45, True)])
    assert ("a", 0) not in parts.positions


def test_a_partition_whose_watermark_is_unknown_waits_for_the_next_plan() -> None:
    parts, _, _ = _partitions({}, {("a", 0): RuntimeError("leader not available"), ("a", 1): 9})
    assert [r.tp for r in parts.plan()] == [("a", 0), ("a", 1)]  # both new: read once
    parts.advance([RangeRead("a", 0, 5, 5, 0, True), RangeRead("a", 1, 5, 9, 4, True)])
    assert parts.plan() == []


def test_offsets_are_committed_synchronously() -> None:
    parts, consumer, _ = _partitions({}, {("a", 0): 9})
    parts.commit({("a", 0): 9})
    (commit,) = consumer.commits
    assert [(tp.topic, tp.partition, tp.offset) for tp in commit] == [("a", 0, 9)]
    parts.commit({})
    assert len(consumer.commits) == 1
