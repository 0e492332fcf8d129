"""Sink freshness with many tables receiving changes (issue 16: "Freshness p95 at a 5 s trigger,
with 100 tables receiving changes: at most 2 intervals").

The sink (:class:`sink.runner.MicroBatchSink`, in-process, a real broker, the runner's own
trigger, read job, row deltas or MERGEs) runs in the main thread with the trigger interval
under test, while a producer thread produces changes at a steady rate, round-robin over
``tables`` tables (a topic each, one partition), so that every table receives changes in every
trigger interval. Each change's source ``ts_ms`` is the wall time it is made at, just before
it is produced.

Freshness of a change: the wall time at which the Kafka offset commit of the micro-batch
holding it returned, minus the time it was produced. Exact per change: the producer's delivery
reports map ``(topic, partition, offset)`` to the produce time, and a thin proxy around the
sink's group consumer records every synchronous offset commit (the offsets the broker confirmed, and
when the call returned); a change's batch is the first commit past its offset. The Iceberg
commits of a batch come before its Kafka commit, so a change is readable slightly earlier.

After the producer stops, the sink runs on until every produced record is committed. Figures:
p50, p95 and max freshness against the trigger interval (ratio = intervals), **target p95 <= 2
intervals**; the number of micro-batches, their mean duration (plan to Kafka commit:
``BatchReport.seconds``) and the tables each touched; and the share of the
machine's cores busy during the measured run, this bench's processes apart from the others
(a run disturbed by other work shows there).

An untimed warm-up batch (one change per table) creates the tables first, as in
:mod:`bench.sink_tables`.

Run: ``python -m bench.sink_freshness [--size tiny|small|full] [--trigger S] [--parallelism N]
[--rate CHANGES_PER_S] [--seconds S] [--broker tansu|kafka]``. The broker is Tansu by default
(the figures of earlier rounds were measured on it); ``--broker kafka`` starts Apache Kafka. Small: 100 tables, 200 changes/s for 60 s, 5 s trigger;
tiny: 10 tables, 50 changes/s for 15 s, 2 s trigger; full: 100 tables, 200 changes/s for 180 s.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    BenchReport,
    Ratio,
    bench_parser,
    percentile,
    start_bench_broker,
    start_bench_catalog,
    stop_bench_broker,
)
from bench.service_e2e import machine_busy_seconds
from bench.sink_merge import ORDERS, change_records, produce_records
from bench.sink_tables import read_all, table_records

__all__ = ["main"]

TARGET = 2.0  # p95 freshness, in trigger intervals
PREFIX = "fresh"

_TP = tuple[str, int]


@dataclass(frozen=True)
class Size:
    tables: int
    rate: float  # changes per second, all tables together
    seconds: float  # how long the producer produces
    trigger: float  # sink.trigger_interval_seconds
    keys_per_table: int = 100


SIZES = {
    "tiny": Size(10, 50, 15, 2.0),
    "small": Size(100, 200, 60, 5.0),
    "full": Size(100, 200, 180, 5.0),
}


def _topic(table: int) -> str:
    return f"cdcnorm.bench.{PREFIX}_{table:03d}"


class _CommitClock:
    """The sink's consumer, recording each synchronous offset commit: when it returned and the
    offsets the broker confirmed. Everything else goes to the consumer unchanged."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.lock = threading.Lock()
        self.commits: list[tuple[float, dict[_TP, int]]] = []
        self.acked: dict[_TP, int] = {}  # the newest committed offset per partition

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("asynchronous", True):
            raise RuntimeError("the sink committed asynchronously: the bench cannot tell when the commit ended")
        result = self._consumer.commit(*args, **kwargs)
        ended = time.time()
        offsets = {(tp.topic, tp.partition): tp.offset for tp in result or () if tp.error is None and tp.offset >= 0}
        with self.lock:
            self.commits.append((ended, offsets))
            self.acked.update(offsets)
        return result


class _SteadyProducer(threading.Thread):
    """Produces ``rate`` changes per second for ``seconds``, round-robin over the tables; each
    change's record(s) (a delete is followed by its tombstone) are made and produced at its
    scheduled time, their source ``ts_ms`` that wall time."""

    def __init__(self, bootstrap: str, size: Size, rate: float, seconds: float) -> None:
        super().__init__(name="bench-producer", daemon=True)
        self.bootstrap = bootstrap
        self.size = size
        self.rate = rate
        self.seconds = seconds
        self.sent_at: dict[tuple[str, int, int], float] = {}  # change record -> produce time (delivered)
        self.ends: dict[_TP, int] = {}  # per partition, the offset after the last record delivered
        self.changes = 0
        self.records = 0
        self.failed = 0
        self.max_late = 0.0  # the furthest behind schedule a change was produced (s)
        self.started_at = 0.0
        self.ended_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _delivered(self, sent: float, change: bool) -> Any:
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                self.failed += 1
                return
            tp = (msg.topic(), msg.partition())
            self.ends[tp] = max(self.ends.get(tp, 0), msg.offset() + 1)
            if change:
                self.sent_at[(msg.topic(), msg.partition(), msg.offset())] = sent

        return done

    def _produce(self) -> None:
        from confluent_kafka import Producer

        size = self.size
        schemas = [dataclasses.replace(ORDERS, table=f"{PREFIX}_{t:03d}") for t in range(size.tables)]
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        total = int(self.rate * self.seconds)
        self.started_at = started = time.time()
        for i in range(total):
            due = started + i / self.rate
            pause = due - time.time()
            if pause > 0:
                time.sleep(pause)
            else:
                self.max_late = max(self.max_late, -pause)
            t = i % size.tables
            # one change (its sequence newer than every earlier one), ts_ms = now
            records = list(change_records(1, size.keys_per_table, seed=i, first_seq=1_000_000 + i, now_ts=True,
                                          table=schemas[t]))
            sent = time.time()
            for key, value in records:
                while True:
                    try:
                        producer.produce(_topic(t), key=key, value=value,
                                         on_delivery=self._delivered(sent, value is not None))
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.records += 1
            self.changes += 1
            producer.poll(0)
        self.ended_at = time.time()
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} records left unsent")


def _tree_cpu_seconds() -> float:
    """CPU seconds of this process and its live children: the JVM, the broker."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@dataclass
class Result:
    freshness: list[float] = field(default_factory=list)  # seconds, one per committed change
    missing: int = 0  # changes produced but not committed before the deadline
    reports: list[Any] = field(default_factory=list)  # BatchReport of each measured micro-batch
    commits: int = 0
    wall: float = 0.0  # the measured run: the producer's start to the sink's stop
    machine_busy: float = 0.0  # the share of all cores busy meanwhile (every process)
    own_busy: float = 0.0  # of which this bench's processes (driver, JVM, broker)


def _freshness(producer: _SteadyProducer, clock: _CommitClock) -> tuple[list[float], int]:
    """Per change, its batch's commit end minus its produce time; and how many were not committed."""
    by_tp: dict[_TP, list[tuple[int, float]]] = defaultdict(list)
    for (topic, partition, offset), sent in producer.sent_at.items():
        by_tp[(topic, partition)].append((offset, sent))
    out: list[float] = []
    missing = 0
    with clock.lock:
        commits = list(clock.commits)
    for tp, changes in by_tp.items():
        changes.sort()
        steps = [(ended, offsets[tp]) for ended, offsets in commits if tp in offsets]  # in commit order
        i = 0
        for offset, sent in changes:
            while i < len(steps) and steps[i][1] <= offset:
                i += 1
            if i == len(steps):
                missing += 1
            else:
                out.append(steps[i][0] - sent)
    return out, missing


def _sink(bootstrap: str, catalog: dict[str, Any], trigger: float, parallelism: int | None) -> Any:
    from sink.config import SinkConfig
    from sink.runner import MicroBatchSink

    section: dict[str, Any] = {
        "topic_pattern": rf"cdcnorm\.bench\.{PREFIX}_[0-9]+",
        "group_id": "bench-fresh",
        "trigger_interval_seconds": trigger,
        "catalog": catalog,
    }
    if parallelism is not None:
        section["table_parallelism"] = parallelism
    config = SinkConfig.from_section(section)
    return MicroBatchSink(config, bootstrap, consumer_conf={"topic.metadata.refresh.interval.ms": 1000})


def _warm_up(sink: Any, bootstrap: str, tables: int, keys: int) -> None:
    """One change per table, written before timing: creates the tables, joins the group."""
    warm = table_records(PREFIX, tables, tables, keys, seed=0)  # topics cdcnorm.bench.<PREFIX>_NNN, as _topic
    produce_records(bootstrap, warm)
    read_all(sink, len(warm), 900, "warm-up: ")


def measure(bootstrap: str, catalog: dict[str, Any], size: Size, rate: float, seconds: float, trigger: float,
            parallelism: int | None, drain_timeout: float) -> tuple[Result, _SteadyProducer, Any]:
    from service.local import create_topics

    create_topics(bootstrap, [_topic(t) for t in range(size.tables)], partitions=1)
    sink = _sink(bootstrap, catalog, trigger, parallelism)
    result = Result()
    try:
        sink.start()
        clock = _CommitClock(sink.partitions.consumer)
        sink.partitions.consumer = clock
        started = time.monotonic()
        _warm_up(sink, bootstrap, size.tables, size.keys_per_table)
        print(f"warm-up: {size.tables} tables created in {time.monotonic() - started:.1f}s", flush=True)

        producer = _SteadyProducer(bootstrap, size, rate, seconds)
        stop_watching = threading.Event()

        def watch() -> None:
            """Stop the sink once the producer is done and every record it produced is committed
            (or the drain deadline passes)."""
            producer.join()
            deadline = time.monotonic() + drain_timeout
            while not stop_watching.is_set():
                with clock.lock:
                    done = all(clock.acked.get(tp, 0) >= end for tp, end in producer.ends.items())
                if done or time.monotonic() > deadline:
                    if not done:
                        print(f"drain: not every record committed {drain_timeout:.0f}s after the producer stopped",
                              flush=True)
                    sink.stop()
                    return
                time.sleep(0.1)

        def on_batch(report: Any) -> None:
            result.reports.append(report)
            print(
                f"batch {len(result.reports)}: {report.rows_read} records, {len(report.tables)} tables, "
                f"{report.seconds:.1f}s (read job {report.read_seconds:.1f}s, commit phase {report.commit_seconds:.1f}s "
                f"of which the write job {report.files_seconds:.1f}s)",
                flush=True,
            )

        sink.report = on_batch
        commits_before = len(clock.commits)
        watcher = threading.Thread(target=watch, name="bench-drain", daemon=True)
        t0, busy0, own0 = time.monotonic(), machine_busy_seconds(), _tree_cpu_seconds()
        producer.start()
        watcher.start()
        try:
            sink.run()  # until the watcher stops it
        finally:
            stop_watching.set()
            producer.join()
            watcher.join(5)
        result.wall = time.monotonic() - t0
        cores = result.wall * (os.cpu_count() or 1)
        result.machine_busy = (machine_busy_seconds() - busy0) / cores
        result.own_busy = (_tree_cpu_seconds() - own0) / cores
        if producer.error is not None:
            raise producer.error
        result.commits = len(clock.commits) - commits_before
        result.freshness, result.missing = _freshness(producer, clock)
    finally:
        sink.close()
    return result, producer, sink.config


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("sink freshness with many tables receiving changes", broker="tansu", catalog=True)
    parser.add_argument("--trigger", type=float, default=None, help="sink.trigger_interval_seconds (default: by size)")
    parser.add_argument("--parallelism", type=int, default=None,
                        help="sink.table_parallelism (default: the config's default)")
    parser.add_argument("--rate", type=float, default=None, help="changes/s over all tables (default: by size)")
    parser.add_argument("--seconds", type=float, default=None, help="how long changes are produced (default: by size)")
    parser.add_argument("--drain-timeout", type=float, default=600.0,
                        help="how long the sink may take to commit everything after the producer stops (s)")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    trigger = args.trigger or size.trigger
    rate = args.rate or size.rate
    seconds = args.seconds or size.seconds
    report = BenchReport(
        "sink_freshness",
        args.size,
        params={"tables": size.tables, "rate": rate, "seconds": seconds, "trigger": trigger},
    )
    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-bench-fresh-"))
    broker = start_bench_broker(args.broker, workdir / "logs")
    report.params["broker"] = broker.description
    section, stop_catalog = start_bench_catalog(args.catalog, workdir)
    report.params["catalog"] = args.catalog
    try:
        result, producer, config = measure(
            broker.address, section, size, rate, seconds, trigger, args.parallelism, args.drain_timeout
        )
    finally:
        stop_catalog()
        stop_bench_broker(broker)
        shutil.rmtree(workdir, ignore_errors=True)

    parallelism = config.table_parallelism
    report.params.update(parallelism=parallelism, changes=len(producer.sent_at))
    lat = result.freshness
    if not lat:
        raise RuntimeError("no change was committed")
    p50, p95, worst = percentile(lat, 50), percentile(lat, 95), max(lat)
    produced_s = producer.ended_at - producer.started_at
    note = (f"{len(producer.sent_at)} changes over {size.tables} tables at {producer.changes / produced_s:.0f}/s "
            f"for {produced_s:.0f}s; table_parallelism {parallelism}")
    if result.missing:
        note += f"; {result.missing} not committed in time"
    report.add(Ratio("freshness p50", p50, trigger, "s", baseline_name="trigger interval", note=note))
    report.add(
        Ratio(
            f"freshness p95, {size.tables} tables",
            p95,
            trigger,
            "s",
            target=TARGET,
            lower_is_better=True,
            baseline_name="trigger interval",
            note=f"max {worst:.1f}s ({worst / trigger:.1f} intervals)",
        )
    )
    report.info("changes committed", len(lat), "changes", f"of {len(producer.sent_at)} produced")
    reports = result.reports
    touched = [len(r.tables) for r in reports]
    report.info("micro-batches", len(reports), "", f"{result.commits} offset commits")
    report.info("mean batch seconds", statistics.fmean(r.seconds for r in reports) if reports else 0.0, "s",
                "plan to Kafka commit; max "
                f"{max((r.seconds for r in reports), default=0.0):.1f}s")
    report.info("tables touched per batch", statistics.fmean(touched) if touched else 0.0, "tables",
                f"min {min(touched, default=0)}, max {max(touched, default=0)}")
    if touched and sum(touched):
        report.info("commit phase per table", sum(r.commit_seconds for r in reports) / sum(touched), "s",
                    f"wall time of the table writes (row deltas or MERGEs) over the tables touched, {parallelism} at a time")
    report.info("records per batch", statistics.fmean(r.rows_read for r in reports) if reports else 0.0, "records")
    report.info("producer behind schedule, at most", producer.max_late, "s",
                "each change's produce time is its own, so this shifts the rate, not the figures")
    report.info("machine CPU busy during the measured run", f"{result.machine_busy:.0%}", "",
                f"{result.own_busy:.0%} this bench (driver, JVM, broker), the rest other processes; "
                f"{os.cpu_count()} cores, {result.wall:.0f}s")
    if producer.failed:
        report.info("records not delivered", producer.failed, "records")
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
