"""The books of held changes (sink.pending.HeldChanges): when tables are due, where offsets stop,
what is forgotten when records are read again."""

from __future__ import annotations

from sink.changes import SinkChange
from sink.pending import HeldChanges


def _ch(table: str, offset: int, topic: str = "t", partition: int = 0) -> SinkChange:
    return SinkChange(("db", table), "c", (offset,), {"id": offset}, f"s{offset:04d}", None, (), ("id",),
                      topic, partition, offset)


def test_tables_are_due_after_the_interval_from_their_oldest_change() -> None:
    held = HeldChanges(interval_seconds=10, limit=100)
    held.add([_ch("a", 0)], now=0)
    held.add([_ch("b", 1), _ch("a", 2)], now=5)
    assert held.due(now=9) == []
    assert held.due(now=10) == [("db", "a")]
    assert sorted(held.due(now=15)) == [("db", "a"), ("db", "b")]
    assert sorted(held.due(now=1, everything=True)) == [("db", "a"), ("db", "b")]
    assert [c.offset for c in held.take([("db", "a")])] == [0, 2]
    assert held.count == 1 and held.tables == 1 and held.oldest_age(8) == 3


def test_no_interval_or_over_the_limit_makes_every_table_due() -> None:
    assert HeldChanges(0, 100).due(0) == []
    none = HeldChanges(0, 100)
    none.add([_ch("a", 0)], now=0)
    assert none.due(now=0) == [("db", "a")]
    full = HeldChanges(3600, limit=2)
    full.add([_ch("a", 0), _ch("b", 1)], now=0)
    assert full.due(now=0) == []
    full.add([_ch("c", 2)], now=0)
    assert len(full.due(now=0)) == 3


def test_offsets_stop_at_the_first_held_change_of_each_partition() -> None:
    held = HeldChanges(60, 100)
    held.add([_ch("a", 7, "t1"), _ch("b", 3, "t1"), _ch("a", 5, "t2", 1)], now=0)
    assert held.first_offsets() == {("t1", 0): 3, ("t2", 1): 5}


def test_changes_read_again_or_of_lost_partitions_are_forgotten() -> None:
    held = HeldChanges(60, 100)
    held.add([_ch("a", 1, "t1"), _ch("a", 2, "t1"), _ch("b", 1, "t2")], now=0)
    assert held.drop(keep={("t1", 0): 2}) == 1  # t1 read again from offset 2
    assert held.first_offsets() == {("t1", 0): 1, ("t2", 0): 1}
    assert held.drop(assigned={("t1", 0)}) == 1  # t2 went to another sink
    assert held.count == 1 and held.tables == 1 and bool(held)
    held.clear()
    assert not held and held.oldest_age(100) == 0.0
