"""The worker's consumer lag: ``cdcnorm_consumer_lag`` per partition it owns, and the records it has
not fetched yet, which the liveness probe counts as work (:class:`service.health.Progress`).

A partition's lag is its high watermark minus the next offset to process: records fetched and not
processed yet count, so lag plus the messages counted in is what the partition holds. It is set
from two sources, both best effort (only as right as the broker's watermarks; Tansu's under-report):

* each processed batch, with the high watermark of the consumer's last fetch
  (:meth:`ConsumerLag.processed`);
* a refresh from the broker (ListOffsets, :meth:`service.transport.BatchConsumer.lag_offsets`),
  every :data:`service.app.LAG_REFRESH_SECONDS`, also while no record flows
  (:meth:`ConsumerLag.refresh`): a consumer that stopped fetching shows its lag growing.

A partition's series exists only while the worker owns it: it is removed when the partition is
revoked (every rebalance revokes them all, then assigns anew) and when the worker stops, so a
partition that moved to another replica is counted once, by its new owner.

The next offset to process is the first offset of the latest batch fetched, or the offset after
the last processed record, whichever is later; before anything was fetched since the assignment,
the consumer's position. A partition whose last records are transaction markers (a transactional
producer) shows a lag of those markers until a record follows them, as the group's committed
offsets do. The records not fetched yet (:meth:`ConsumerLag.unfetched`) are the high watermark
minus the consumer's position, which moves past such markers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Gauge

__all__ = ["ConsumerLag", "LagOffsets"]

LagOffsets = Mapping[Any, tuple[int | None, int | None]]
"""Per partition, (high watermark, consumer position) as the broker and the consumer report them
(None: unknown)."""


class ConsumerLag:
    """``cdcnorm_consumer_lag`` per owned partition. Use it from the worker's event loop."""

    def __init__(self, gauge: Gauge) -> None:
        self._gauge = gauge
        self._series: dict[Any, Any] = {}  # partition -> its gauge child
        self._next: dict[Any, int] = {}  # next offset to process, since the partition's assignment
        self._unfetched: dict[Any, int] = {}  # high watermark minus position, at the last refresh
        self.owned: frozenset[Any] = frozenset()
        self.epoch = 0
        """Counts assignments and revocations: a refresh read across one is not applied."""

    # ------------------------------------------------------------------ ownership

    def assigned(self, partitions: Iterable[Any]) -> None:
        """The consumer owns ``partitions`` (a rebalance's whole assignment): any other
        partition's series goes."""
        self.epoch += 1
        self.owned = frozenset(partitions)
        self._forget((set(self._series) | set(self._next) | set(self._unfetched)) - self.owned)

    def revoked(self, partitions: Iterable[Any]) -> None:
        """``partitions`` were revoked: their series go."""
        self.epoch += 1
        gone = set(partitions)
        self.owned = self.owned - gone
        self._forget(gone)

    def clear(self) -> None:
        """The worker stops: every series goes."""
        self.epoch += 1
        self.owned = frozenset()
        self._forget(set(self._series) | set(self._next) | set(self._unfetched))

    def _forget(self, partitions: Iterable[Any]) -> None:
        for tp in partitions:
            if self._series.pop(tp, None) is not None:
                self._gauge.remove(tp.topic, str(tp.partition))
            self._next.pop(tp, None)
            self._unfetched.pop(tp, None)

    # ------------------------------------------------------------------ updates

    def fetched(self, tp: Any, first: int) -> None:
        """A batch of ``tp`` starting at offset ``first`` was handed to the processor."""
        known = self._next.get(tp)
        if known is None or first > known:
            self._next[tp] = first

    def processed(self, tp: Any, next_offset: int, high: int | None) -> None:
        """``tp`` was processed up to ``next_offset`` (exclusive); ``high`` is its high watermark
        as the consumer's last fetch saw it (None: unknown, the series keeps its value)."""
        self._next[tp] = next_offset
        if high is not None:
            self._set(tp, high - next_offset)

    def refresh(self, offsets: LagOffsets, epoch: int) -> int | None:
        """Set the lag of the owned partitions in ``offsets`` (read from the broker while
        :attr:`epoch` was ``epoch``; not applied when partitions were assigned or revoked since).
        Returns :meth:`unfetched`."""
        if epoch == self.epoch:
            for tp, (high, position) in offsets.items():
                if tp not in self.owned or high is None:
                    continue
                known = self._next.get(tp)
                nxt = known if known is not None else position
                if nxt is None:
                    continue
                self._set(tp, high - nxt)
                self._unfetched[tp] = max(0, high - max(nxt, position if position is not None else nxt))
        return self.unfetched()

    def unfetched(self) -> int | None:
        """Records not fetched yet on the owned partitions, at the last refresh (None: unknown)."""
        known = [n for tp, n in self._unfetched.items() if tp in self.owned]
        return sum(known) if known else None

    def _set(self, tp: Any, lag: int) -> None:
        series = self._series.get(tp)
        if series is None:
            series = self._series[tp] = self._gauge.labels(tp.topic, str(tp.partition))
        series.set(max(0, lag))
