"""The micro-batch loop without a broker or Spark: poll windows on a fake clock, run totals."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import sink.runner as runner
from sink.config import SinkConfig
from sink.runner import BatchReport, MicroBatchSink

INTERVAL = 5.0
POLL_TIMEOUT = 1.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@dataclass
class FakeMessage:
    arrived: float

    def error(self) -> None:
        return None


class FakeConsumer:
    """Records that arrive at given times; ``consume`` blocks like librdkafka's batch consume:
    until ``num_messages`` have arrived or the timeout has passed."""

    def __init__(self, clock: FakeClock, arrivals: list[float]) -> None:
        self.clock = clock
        self.pending = sorted(arrivals)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        until = self.clock.now + timeout
        ready = [t for t in self.pending if t <= until][:num_messages]
        if len(ready) == num_messages and ready:
            self.clock.now = max(self.clock.now, ready[-1])
        else:
            self.clock.now = until
        del self.pending[: len(ready)]
        return [FakeMessage(t) for t in ready]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(runner, "time", fake)
    return fake


def _sink(clock: FakeClock, arrivals: list[float], max_records: int = 200_000) -> MicroBatchSink:
    config = SinkConfig.from_section({
        "topics": ["t"],
        "trigger_interval_seconds": INTERVAL,
        "poll_timeout_seconds": POLL_TIMEOUT,
        "max_records_per_batch": max_records,
    })
    sink = MicroBatchSink(config, "unused:9092")
    sink.consumer = FakeConsumer(clock, arrivals)
    return sink


def _steady(until: float, every: float = 0.25) -> list[float]:
    return [i * every for i in range(1, int(until / every) + 1)]


def test_next_window_ends_one_interval_after_the_previous_poll(clock: FakeClock) -> None:
    sink = _sink(clock, _steady(30))
    first = sink._poll()
    assert clock.now == INTERVAL and max(m.arrived for m in first) <= INTERVAL
    clock.now += 3.0  # the commit
    second = sink._poll()
    # not commit end + interval (13 s): records wait about one interval, not interval + commit
    assert clock.now == 2 * INTERVAL
    assert [m.arrived for m in second] == [t for t in _steady(30) if INTERVAL < t <= 2 * INTERVAL]


def test_overdue_window_takes_what_arrived_without_waiting(clock: FakeClock) -> None:
    sink = _sink(clock, _steady(30))
    sink._poll()
    clock.now += 7.0  # a commit slower than the interval
    late = sink._poll()
    assert clock.now == 12.0
    assert [m.arrived for m in late] == [t for t in _steady(30) if INTERVAL < t <= 12.0]
    sink._poll()  # and the window after it ends one interval later
    assert clock.now == 17.0


def test_overdue_window_with_nothing_fetched_waits_one_poll_timeout(clock: FakeClock) -> None:
    sink = _sink(clock, [12.5])
    assert sink._poll() == []
    clock.now = 12.0
    assert [m.arrived for m in sink._poll()] == [12.5]
    assert clock.now == 12.0 + POLL_TIMEOUT


def test_full_batch_ends_the_window_early(clock: FakeClock) -> None:
    sink = _sink(clock, _steady(30, every=0.01), max_records=100)
    assert len(sink._poll()) == 100
    assert clock.now == pytest.approx(1.0)


def test_run_keeps_totals_and_a_bounded_number_of_reports(clock: FakeClock) -> None:
    sink = _sink(clock, [])
    batches = iter(range(1, 1000))

    def run_batch() -> BatchReport:
        return BatchReport(rows_read=next(batches))

    sink.run_batch = run_batch  # type: ignore[method-assign]
    summary = sink.run(max_batches=250)
    assert summary.batches == 250
    assert summary.rows_read == sum(range(1, 251))
    assert len(summary.recent) == runner.RECENT_REPORTS
    assert summary.recent[-1].rows_read == 250

