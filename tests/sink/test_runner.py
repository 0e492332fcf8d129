"""The micro-batch loop without a broker or Spark: the trigger on a fake clock, run totals, and
the table pool (how each table is written, row delta or MERGE: tests/sink/test_write_plan.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import sink.runner as runner
from sink.changes import TableBatch
from sink.config import SinkConfig
from sink.iceberg import IncompatibleSchemaError
from sink.runner import BatchReport, MicroBatchSink, _Batch
from sink.source import Range
from sink.table_settings import TableMode
from sink.tasks import TableFiles, TableSummary
from sink.write_plan import WriteMethod, WritePlan

INTERVAL = 5.0
POLL_TIMEOUT = 1.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_800_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakePartitions:
    """Plans a range whenever records are waiting (``arrivals`` at or before now); a batch takes
    ``batch_seconds`` of the fake clock."""

    def __init__(self, clock: FakeClock, arrivals: list[float]) -> None:
        self.clock = clock
        self.pending = sorted(arrivals)
        self.paused: set[tuple[str, int]] = set()
        self.positions: dict[tuple[str, int], int] = {("t", 0): 0}
        self.plans: list[float] = []  # when each plan was made

    def poll(self) -> None:
        pass

    def plan(self) -> list[Range]:
        self.plans.append(self.clock.now)
        ready = [t for t in self.pending if t <= self.clock.now]
        return [Range("t", 0, 0, len(ready))] if ready else []

    def lag(self) -> dict[tuple[str, int], int]:
        return {}

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(runner, "time", fake)
    return fake


def _sink(clock: FakeClock, arrivals: list[float], batch_seconds: float = 0.0) -> MicroBatchSink:
    config = SinkConfig.from_section({
        "topics": ["t"],
        "trigger_interval_seconds": INTERVAL,
        "poll_timeout_seconds": POLL_TIMEOUT,
    })
    sink = MicroBatchSink(config, "unused:9092")
    partitions = FakePartitions(clock, arrivals)
    sink.partitions = partitions  # type: ignore[assignment]
    sink.tables = object()  # type: ignore[assignment]

    def read(batch: _Batch, report: BatchReport) -> None:
        taken = [t for t in partitions.pending if t <= clock.now]
        del partitions.pending[: len(taken)]
        report.rows_read = len(taken)

    def write(batch: _Batch, report: BatchReport) -> None:
        clock.now += batch_seconds

    sink._read = read  # type: ignore[method-assign]
    sink._write = write  # type: ignore[method-assign]
    return sink


def _steady(until: float, every: float = 0.25) -> list[float]:
    return [i * every for i in range(int(until / every) + 1)]


def test_batches_start_one_interval_apart_like_a_processing_time_trigger(clock: FakeClock) -> None:
    """A batch starts one interval after the previous one started, not after it ended: records
    wait about one interval, not interval + commit."""
    sink = _sink(clock, _steady(60), batch_seconds=3.0)
    for _ in range(4):
        sink.run_batch()
    assert sink.partitions.plans == [0.0, INTERVAL, 2 * INTERVAL, 3 * INTERVAL]  # type: ignore[union-attr]


def test_a_batch_slower_than_the_interval_is_followed_at_once(clock: FakeClock) -> None:
    sink = _sink(clock, _steady(60), batch_seconds=7.0)
    reads = [sink.run_batch().rows_read for _ in range(3)]
    assert sink.partitions.plans == [0.0, 7.0, 14.0]  # type: ignore[union-attr]
    assert reads[1] == len([t for t in _steady(60) if 0 < t <= 7.0])


class Anything:
    """Any attribute, any call: a Spark session whose calls the test does not look at."""

    def __getattr__(self, name: str) -> Anything:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Anything:
        return self


def test_an_idle_sink_looks_again_after_a_poll_timeout_not_an_interval(clock: FakeClock) -> None:
    """Nothing to read: the next look is one poll timeout later, so a record arriving into an
    idle sink starts a batch within about a poll timeout."""
    sink = _sink(clock, [12.5])
    reports = [sink.run_batch() for _ in range(15)]
    plans = sink.partitions.plans  # type: ignore[union-attr]
    assert plans[:3] == [0.0, POLL_TIMEOUT, 2 * POLL_TIMEOUT]
    first = next(i for i, r in enumerate(reports) if r.rows_read)
    assert plans[first] == 13.0


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



# -- the tables of a batch, committed from the table pool (sink.table_parallelism) ---------------


class FakeDeletedKeys:
    def maintenance_due(self) -> bool:
        return False


class FakeTables:
    """``commit_files`` and ``write_batch`` that take ``seconds`` and record how many tables
    were in flight at once; a table named in ``fail`` raises, one in ``incompatible`` has a
    schema it cannot take."""

    def __init__(self, seconds: float = 0.2, fail: frozenset[str] = frozenset(), incompatible: frozenset[str] = frozenset()) -> None:
        self.seconds = seconds
        self.fail = fail
        self.incompatible = incompatible
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.written: list[str] = []
        self.deleted_keys = FakeDeletedKeys()

    def applied_offsets(self, table: tuple[str, str]) -> dict[str, int]:
        return {}

    def maintenance_due(self, table: tuple[str, str]) -> bool:
        return False

    def mode_of(self, table: tuple[str, str]) -> TableMode:
        return TableMode.UPSERT

    def _work(self, name: str) -> None:
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
        finally:
            with self.lock:
                self.in_flight -= 1

    def commit_files(self, table: tuple[str, str], files: TableFiles, offsets: dict[str, int],
                     newest: dict[str, str]) -> bool:
        self._work(table[1])
        return True

    def write_batch(self, batch: TableBatch, offsets: dict[str, int]) -> dict[str, int]:
        self._work(batch.table[1])
        return {"upserts": 1, "deletes": 0, "appends": 0, "truncates": 0}


def _table_sink(tables: FakeTables, parallelism: int) -> MicroBatchSink:
    sink = MicroBatchSink(SinkConfig.from_section({"topics": ["t"], "table_parallelism": parallelism}), "unused:9092")
    sink.tables = tables  # type: ignore[assignment]
    return sink


def _files(n: int) -> tuple[_Batch, dict[tuple[str, str], TableFiles]]:
    batch = _Batch([])
    files = {}
    for i in range(n):
        table = ("db", f"t{i}")
        batch.tables[table] = TableSummary(table, changes=1, offsets={(f"db.t{i}", 0): (0, 9)})
        files[table] = TableFiles(table, data="file", upserts=1)
    return batch, files


def test_the_tables_of_a_batch_are_committed_parallelism_at_a_time() -> None:
    tables = FakeTables(seconds=0.2)
    sink = _table_sink(tables, parallelism=4)
    batch, files = _files(8)
    report = BatchReport()
    started = time.monotonic()
    failures = sink._commit_files(batch, files, report)
    elapsed = time.monotonic() - started
    sink.close()
    assert failures == [] and sorted(report.tables) == sorted(f"db.t{i}" for i in range(8))
    assert report.row_deltas == 8 and report.upserts == 8
    assert tables.most == 4
    assert elapsed < 8 * 0.2 * 0.75, f"8 tables of 0.2 s took {elapsed:.2f}s: not overlapped"


def test_one_table_after_the_other_with_parallelism_1() -> None:
    tables = FakeTables(seconds=0.01)
    sink = _table_sink(tables, parallelism=1)
    batch, files = _files(5)
    sink._commit_files(batch, files, BatchReport())
    assert tables.most == 1
    assert tables.written == [f"t{i}" for i in range(5)]


@pytest.mark.parametrize("parallelism", [1, 4])
def test_a_failed_table_is_returned_after_every_started_table_finished(parallelism: int) -> None:
    tables = FakeTables(seconds=0.05, fail=frozenset({"t0"}))
    sink = _table_sink(tables, parallelism)
    batch, files = _files(6)
    report = BatchReport()
    failures = sink._commit_files(batch, files, report)
    sink.close()
    assert [str(f) for f in failures] == ["t0: the catalog refused the commit"]
    # the other tables committed (their snapshots hold their offsets: a retry skips them)
    assert sorted(tables.written) == [f"t{i}" for i in range(1, 6)] == sorted(t.split(".")[1] for t in report.tables)


def test_an_incompatible_table_is_paused_and_the_others_are_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    tables = FakeTables(seconds=0.05, incompatible=frozenset({"t2"}))
    sink = _table_sink(tables, parallelism=4)
    batch, _ = _files(4)

    class Changes:
        def filter(self, _: Any) -> Changes:
            return self

        def collect(self) -> list[Any]:
            return []

    batch.rdd = Changes()
    monkeypatch.setattr(runner, "compact", lambda _: {t: TableBatch(t) for t in batch.tables})
    sink.spark = Anything()
    report = BatchReport()
    failures = sink._merge_tables(batch, dict.fromkeys(batch.tables, WritePlan(WriteMethod.MERGE, "a test")), report)
    sink.close()
    assert failures == [] and sorted(report.tables) == ["db.t0", "db.t1", "db.t3"] and report.merges == 3
    assert ("db", "t2") in sink._paused_tables
    assert "column x is int" in sink._paused_tables[("db", "t2")]
    assert batch.paused_first == {("db.t2", 0): 0}  # its partition's offsets stop at its first change
