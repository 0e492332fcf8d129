"""The micro-batch loop without a broker or Spark: poll windows on a fake clock, run totals."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

import sink.runner as runner
from sink.changes import TableBatch
from sink.config import SinkConfig
from sink.iceberg import IncompatibleSchemaError
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



# -- the tables of a batch, written from the table pool (sink.table_parallelism) -----------------


class FakeTables:
    """``write_batch`` that takes ``seconds`` and records how many tables were in flight at once;
    a table named in ``fail`` raises, one in ``incompatible`` has a schema it cannot take."""

    def __init__(self, seconds: float = 0.2, fail: frozenset[str] = frozenset(), incompatible: frozenset[str] = frozenset()) -> None:
        self.seconds = seconds
        self.fail = fail
        self.incompatible = incompatible
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.written: list[str] = []

    def ensure_table(self, batch: TableBatch) -> str:
        return batch.table[1]

    def applied_offsets(self, table: tuple[str, str]) -> dict[str, int]:
        return {}

    def maybe_maintain(self, table: tuple[str, str]) -> bool:
        return False

    def write_batch(self, batch: TableBatch, offsets: dict[str, int]) -> dict[str, int]:
        name = batch.table[1]
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(self.seconds)
            if name in self.incompatible:
                raise IncompatibleSchemaError(f"{name}: column x is int, a change brings string")
            if name in self.fail:
                raise RuntimeError(f"{name}: the catalog refused the commit")
            with self.lock:
                self.written.append(name)
            return {"upserts": 1, "deletes": 0, "appends": 0, "truncates": 0}
        finally:
            with self.lock:
                self.in_flight -= 1


def _table_sink(tables: FakeTables, parallelism: int) -> MicroBatchSink:
    sink = MicroBatchSink(SinkConfig.from_section({"topics": ["t"], "table_parallelism": parallelism}), "unused:9092")
    sink.tables = tables  # type: ignore[assignment]
    return sink


def _batches(n: int) -> tuple[dict[tuple[str, str], TableBatch], dict[tuple[str, str], dict[str, int]]]:
    batches = {("db", f"t{i}"): TableBatch(("db", f"t{i}")) for i in range(n)}
    return batches, {table: {f"db.{table[1]}:0": 10} for table in batches}


def test_the_tables_of_a_batch_are_written_parallelism_at_a_time() -> None:
    tables = FakeTables(seconds=0.2)
    sink = _table_sink(tables, parallelism=4)
    batches, offsets = _batches(8)
    started = time.monotonic()
    written = sink._write_tables(batches, offsets, [], {})
    elapsed = time.monotonic() - started
    sink.close()
    assert sorted(t[1] for t, _, _ in written) == sorted(f"t{i}" for i in range(8))
    assert tables.most == 4
    assert elapsed < 8 * 0.2 * 0.75, f"8 tables of 0.2 s took {elapsed:.2f}s: not overlapped"
    assert sink._applied == offsets


def test_one_table_after_the_other_with_parallelism_1() -> None:
    tables = FakeTables(seconds=0.01)
    sink = _table_sink(tables, parallelism=1)
    batches, offsets = _batches(5)
    sink._write_tables(batches, offsets, [], {})
    assert tables.most == 1
    assert tables.written == [f"t{i}" for i in range(5)]


@pytest.mark.parametrize("parallelism", [1, 4])
def test_a_failed_table_is_raised_and_its_offsets_are_not_taken_as_applied(parallelism: int) -> None:
    tables = FakeTables(seconds=0.05, fail=frozenset({"t0"}))
    sink = _table_sink(tables, parallelism)
    batches, offsets = _batches(6)
    with pytest.raises(RuntimeError, match="t0: the catalog refused the commit"):
        sink._write_tables(batches, offsets, [], {})
    sink.close()
    assert sink._applied[("db", "t0")] == {}, "the failed table's offsets taken as applied"
    # the tables written before the error was raised keep their offsets: a retried batch skips
    # what their commits already hold; in the pool every started table finishes first
    assert {t for t, offsets in sink._applied.items() if offsets} == {("db", t) for t in tables.written}
    if parallelism > 1:
        assert len(tables.written) == 5


def test_an_incompatible_table_is_paused_and_the_others_are_written() -> None:
    tables = FakeTables(seconds=0.05, incompatible=frozenset({"t2"}))
    sink = _table_sink(tables, parallelism=4)
    batches, offsets = _batches(4)
    written = sink._write_tables(batches, offsets, [], {})
    sink.close()
    assert sorted(t[1] for t, _, _ in written) == ["t0", "t1", "t3"]
    assert ("db", "t2") in sink._paused_tables
    assert "column x is int" in sink._paused_tables[("db", "t2")]
