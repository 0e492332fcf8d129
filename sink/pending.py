"""Changes read but not written yet: what ``sink.commit_interval_seconds`` holds back per table.

With a commit interval, a table is not written by every micro-batch that reads changes of it,
but once its oldest held change was read ``commit_interval_seconds`` ago (or when the sink holds
``max_records_per_batch`` changes, or stops). Small tables of a large database then cost one
MERGE and one Iceberg commit per interval instead of one per trigger, as with the Iceberg Kafka
Connect sink's ``iceberg.control.commit.interval-ms``.

Nothing held is acknowledged: the runner commits a partition's Kafka offset only up to its first
held change, so a crash or a rebalance reads the held changes again from Kafka, and the offsets
recorded in each table's Iceberg snapshot skip what was written. This module only keeps the
books (plain Python, no Kafka, no Spark).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sink.changes import SinkChange

__all__ = ["HeldChanges"]

TopicPartition = tuple[str, int]
Table = tuple[str, str]


@dataclass
class _Held:
    since: float  # when its oldest held change was read (monotonic seconds)
    changes: list[SinkChange] = field(default_factory=list)
    # per partition, the offsets its held changes span: (first, last + 1)
    spans: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def hold(self, change: SinkChange) -> None:
        self.changes.append(change)
        tp = (change.topic, change.partition)
        span = self.spans.get(tp)
        self.spans[tp] = (change.offset, change.offset + 1) if span is None else (
            min(span[0], change.offset), max(span[1], change.offset + 1))


class HeldChanges:
    """The held changes per table, in read order, and the offsets they came from."""

    def __init__(self, interval_seconds: float, limit: int) -> None:
        self.interval = interval_seconds
        self.limit = limit
        self._tables: dict[Table, _Held] = {}
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, changes: list[SinkChange], now: float) -> None:
        """Hold ``changes`` (read at ``now``) until their table is due."""
        for change in changes:
            held = self._tables.get(change.table)
            if held is None:
                held = self._tables[change.table] = _Held(now)
            held.hold(change)
        self.count += len(changes)

    def due(self, now: float, everything: bool = False) -> list[Table]:
        """The tables to write now: all of them with no interval, when ``everything`` is asked
        for, or when more than ``limit`` changes are held; else those whose oldest held change
        was read ``interval`` seconds ago or more."""
        if everything or self.interval <= 0 or self.count > self.limit:
            return list(self._tables)
        return [t for t, held in self._tables.items() if now - held.since >= self.interval]

    def take(self, tables: list[Table]) -> list[SinkChange]:
        """Remove ``tables``' held changes and return them, in read order per table."""
        out: list[SinkChange] = []
        for table in tables:
            held = self._tables.pop(table, None)
            if held is not None:
                out.extend(held.changes)
                self.count -= len(held.changes)
        return out

    def first_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the offset of its first held change: where its committed offset stops."""
        first: dict[TopicPartition, int] = {}
        for held in self._tables.values():
            for tp, (start, _) in held.spans.items():
                if start < first.get(tp, start + 1):
                    first[tp] = start
        return first

    def drop(self, keep: dict[TopicPartition, int] | None = None, assigned: set[TopicPartition] | None = None) -> int:
        """Forget held changes that will be read again: those of a partition at or after the
        offset it is being read from again (``keep``: partition → first offset read now, after a
        rewind or a re-assignment), and those of partitions no longer ``assigned`` (their new
        owner reads them from the committed offset). Returns how many were forgotten."""
        dropped = 0
        for table in list(self._tables):
            held = self._tables[table]
            if not any(
                (assigned is not None and tp not in assigned) or (keep is not None and tp in keep and keep[tp] < end)
                for tp, (_, end) in held.spans.items()
            ):
                continue  # nothing of this table is read again or lost: its changes are not looked at
            kept = [
                ch for ch in held.changes
                if (assigned is None or (ch.topic, ch.partition) in assigned)
                and (keep is None or ch.offset < keep.get((ch.topic, ch.partition), ch.offset + 1))
            ]
            if len(kept) != len(held.changes):
                dropped += len(held.changes) - len(kept)
                if kept:
                    held.changes, held.spans = [], {}
                    for ch in kept:
                        held.hold(ch)
                else:
                    del self._tables[table]
        self.count -= dropped
        return dropped

    def clear(self) -> None:
        self._tables.clear()
        self.count = 0

    def oldest_age(self, now: float) -> float:
        """Seconds since the oldest held change was read; 0 when nothing is held."""
        helds = list(self._tables.values())  # read by the metrics thread: a copy, not a live view
        return max((now - held.since for held in helds), default=0.0)

    @property
    def tables(self) -> int:
        return len(self._tables)
