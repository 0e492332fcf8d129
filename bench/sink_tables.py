"""Sink throughput over many tables against one table, and the driver's CPU per change, each
against a baseline of the same run (issue 16, "tables scale" and "per-record work off the driver").

1. **Tables.** The same number of changes goes through the sink (:class:`sink.runner.MicroBatchSink`,
   in-process, a real broker: its read job, row deltas or MERGEs, Kafka commit) twice:

   * spread over ``tables`` tables (a topic each, the changes round-robin), and
   * all in one table (the baseline),

   each after an untimed warm-up batch that creates the tables; the timed changes continue the
   warm-up's sequence (an ordered stream). Throughput is changes per second of batch processing
   (plan to Kafka commit: the runner's ``BatchReport.seconds``, so waits for the trigger are left
   out). Ratio: many tables / one table, **target >= 0.5**. The many-table run is repeated with
   ``table_parallelism: 1`` (tables committed one after the other) as information.
2. **Driver CPU per change** (psutil, this Python process only: the JVM and the Spark tasks'
   Python workers are other processes), of the many-table run, against the per-record work the
   driver did itself before issue 16, measured in the same run on the same records: consume
   them with confluent-kafka, parse (:class:`sink.changes.RecordParser`), compact, and build the
   MERGE source's JSON rows per table (``sink.merge._json_documents``); that leaves out the
   driver's Spark planning of those days, so the baseline is low, not high. Ratio: now / then,
   **target <= 0.2** (at least 5x less).

3. **Sustained** (information, ``--batches N``, default 10): the same changes arriving in ``N``
   rounds with a micro-batch after each, over 1 table, and over the many tables with a
   ``commit_interval_seconds`` longer than the run (their topics wait in Kafka; ``once`` reads
   them at the end): the interval's fewer, larger commits.

Run: ``python -m bench.sink_tables [--size tiny|small|full] [--parallelism N] [--batches N]
[--broker tansu|kafka]``. The broker is Tansu by default (the figures of earlier rounds were
measured on it); ``--broker kafka`` starts Apache Kafka.
Small: 20,000 changes over 100 tables (200 each) against 1 table; tiny: 1,000 over 10.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    BenchReport,
    Ratio,
    bench_parser,
    start_bench_broker,
    start_bench_catalog,
    stop_bench_broker,
)
from bench.sink_merge import ORDERS, change_records, produce_records

__all__ = ["main"]

TARGET = 0.5
CPU_TARGET = 0.2  # driver CPU per change against the driver's own record loop before issue 16
INTERVAL = 3600.0  # the sustained run's commit interval: longer than the run (--once reads waiting topics at its end)
TIMED_SEQ = 1_000_000  # the timed changes' first sequence: after the warm-up's


@dataclass(frozen=True)
class Size:
    changes: int
    tables: int
    keys_per_table: int


SIZES = {
    "tiny": Size(1_000, 10, 50),
    "small": Size(20_000, 100, 100),
    "full": Size(100_000, 500, 100),
}


@dataclass
class Run:
    """What one timed run measured."""

    changes: int = 0
    seconds: float = 0.0
    commit_seconds: float = 0.0
    batches: int = 0
    cpu_seconds: float = 0.0
    table_writes: int = 0  # tables written, summed over the batches (one commit each)
    row_deltas: int = 0  # of those, written by a row delta (the others by a MERGE)

    @property
    def rate(self) -> float:
        return self.changes / self.seconds if self.seconds else 0.0


def table_records(
    layout: str, tables: int, changes: int, keys: int, seed: int, first_seq: int = 1
) -> list[tuple[str, bytes | None, bytes | None]]:
    """``changes`` canonical records (and the tombstones after deletes) spread evenly over
    ``tables`` tables named ``<layout>_NNN``, each on its own topic ``cdcnorm.bench.<table>``,
    ``keys`` keys per table, each table's sequences from ``first_seq`` on."""
    out: list[tuple[str, bytes | None, bytes | None]] = []
    for t in range(tables):
        schema = dataclasses.replace(ORDERS, table=f"{layout}_{t:03d}")
        topic = f"cdcnorm.bench.{schema.table}"
        out.extend(
            (topic, k, v)
            for k, v in change_records(changes // tables, keys, seed=seed + t, first_seq=first_seq, table=schema)
        )
    return out


def _sink(
    bootstrap: str, catalog: dict[str, Any], layout: str, group: str, parallelism: int, max_records: int,
    commit_interval: float,
) -> Any:
    from sink.config import SinkConfig
    from sink.runner import MicroBatchSink

    config = SinkConfig.from_section(
        {
            "topic_pattern": rf"cdcnorm\.bench\.{layout}_[0-9]+",
            "group_id": group,
            "trigger_interval_seconds": 0.5,
            "poll_timeout_seconds": 0.5,
            "catalog": catalog,
            "maintenance": {"enabled": False},
            "table_parallelism": parallelism,
            "max_records_per_batch": max_records,
            "commit_interval_seconds": commit_interval,
        }
    )
    return MicroBatchSink(config, bootstrap, consumer_conf={"topic.metadata.refresh.interval.ms": 1000})


def read_all(sink: Any, expect: int, timeout: float, what: str = "") -> None:
    """Run ``sink`` (``once``) until it has read ``expect`` records; raises after ``timeout`` seconds."""
    read = 0
    deadline = time.monotonic() + timeout
    while read < expect and time.monotonic() < deadline:
        read += sink.run(once=True).rows_read
    if read < expect:
        raise RuntimeError(f"{what}the sink read {read} of {expect} records")


def _run(sink: Any, expect: int) -> Run:
    """Run ``sink`` until it has read ``expect`` records and then finds nothing more."""
    import psutil

    reports: list[Any] = []
    sink.report = reports.append
    proc = psutil.Process()
    cpu0 = sum(proc.cpu_times()[:2])
    read_all(sink, expect, 600)
    return _summed(reports, sum(proc.cpu_times()[:2]) - cpu0)


def _round(records: list[tuple[str, bytes | None, bytes | None]], i: int, rounds: int) -> list[tuple[str, bytes | None, bytes | None]]:
    """Round ``i`` of ``rounds``: the ``i``-th contiguous share of each topic's records."""
    by_topic: dict[str, list[tuple[str, bytes | None, bytes | None]]] = {}
    for r in records:
        by_topic.setdefault(r[0], []).append(r)
    out: list[tuple[str, bytes | None, bytes | None]] = []
    for rs in by_topic.values():
        share = -(-len(rs) // rounds)
        out.extend(rs[i * share:(i + 1) * share])
    return out


def _rounds(sink: Any, bootstrap: str, records: list[tuple[str, bytes | None, bytes | None]], rounds: int) -> Run:
    """``records`` produced in ``rounds`` rounds, a micro-batch after each (a sustained stream;
    topics waiting for their commit interval are not read); then ``once`` runs read the rest."""
    import psutil

    reports: list[Any] = []
    sink.report = reports.append
    proc = psutil.Process()
    cpu = 0.0
    for i in range(rounds):
        produce_records(bootstrap, _round(records, i, rounds))
        cpu0 = sum(proc.cpu_times()[:2])
        report = sink.run_batch()
        cpu += sum(proc.cpu_times()[:2]) - cpu0
        if report.rows_read or report.tables:
            reports.append(report)
    cpu0 = sum(proc.cpu_times()[:2])
    read_all(sink, len(records) - sum(r.rows_read for r in reports), 600)
    cpu += sum(proc.cpu_times()[:2]) - cpu0
    return _summed(reports, cpu)


def _summed(reports: list[Any], cpu_seconds: float) -> Run:
    run = Run(cpu_seconds=cpu_seconds)
    for r in reports:
        run.changes += r.changes
        run.seconds += r.seconds
        run.commit_seconds += r.commit_seconds
        run.batches += 1
        run.table_writes += len(r.tables)
        run.row_deltas += r.row_deltas
    return run


def measure(
    bootstrap: str,
    workdir: Path,
    layout: str,
    tables: int,
    size: Size,
    parallelism: int,
    batches: int = 1,
    commit_interval: float = 0.0,
    catalog: dict[str, Any] | None = None,
) -> Run:
    """Warm-up (one change per table, creates them), then ``size.changes`` changes, timed. With
    ``batches`` 1 they are produced at once and read in one micro-batch; else they arrive in
    ``batches`` rounds, a micro-batch after each (a sustained stream), and a last ``once`` run
    reads what waited for its ``commit_interval``."""
    from service.local import create_topics

    create_topics(bootstrap, [f"cdcnorm.bench.{layout}_{t:03d}" for t in range(tables)], partitions=1)
    keys = size.keys_per_table * size.tables // tables
    warm = table_records(layout, tables, tables, keys, seed=1)
    timed = table_records(layout, tables, size.changes, keys, seed=1000, first_seq=TIMED_SEQ)
    section = catalog if catalog is not None else {"warehouse": str(workdir / "warehouse")}
    sink = _sink(bootstrap, section, layout, f"bench-{layout}", parallelism, 200_000, commit_interval)
    try:
        sink.start()
        produce_records(bootstrap, warm)
        _run(sink, len(warm))
        if batches == 1:
            produce_records(bootstrap, timed)
            run = _run(sink, len(timed))
        else:
            run = _rounds(sink, bootstrap, timed, batches)
    finally:
        sink.close()
    print(
        f"{layout}: {tables} tables, parallelism {parallelism}, commit interval {commit_interval:g}s: "
        f"{run.changes} changes in {run.batches} batches writing {run.table_writes} tables "
        f"({run.row_deltas} row deltas), "
        f"{run.seconds:.1f}s ({run.rate:.0f}/s), commit {run.commit_seconds:.1f}s, driver CPU {run.cpu_seconds:.1f}s",
        flush=True,
    )
    return run


def driver_loop_cpu(bootstrap: str, layout: str) -> tuple[float, int]:
    """CPU seconds of this process for the per-record work the sink's driver did itself before
    issue 16, over every record of ``layout``'s topics: consume them (confluent-kafka, as the
    driver's poll did), parse, compact, and build each table's MERGE source rows as JSON text;
    and the number of changes."""
    import psutil
    from confluent_kafka import Consumer

    from sink.changes import RecordParser, compact
    from sink.merge import _json_documents

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-then-{layout}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([rf"^cdcnorm\.bench\.{layout}_[0-9]+"])
    parser = RecordParser()
    proc = psutil.Process()
    cpu = 0.0
    changes = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        cpu0 = sum(proc.cpu_times()[:2])
        got = consumer.consume(10_000, 2.0)
        changes += [c for m in got if m.error() is None
                    and (c := parser.parse(m.topic() or "", m.partition() or 0, m.offset() or 0, m.key(), m.value()))]
        cpu += sum(proc.cpu_times()[:2]) - cpu0
        if not got and changes:
            break  # everything produced is read (the group joined, then a fetch returned nothing)
    consumer.close()
    cpu0 = sum(proc.cpu_times()[:2])
    for batch in compact(changes).values():
        _json_documents({c.name: c.sql_type for c in batch.columns}, batch.changes, with_unavailable=False)
    return cpu + sum(proc.cpu_times()[:2]) - cpu0, len(changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("sink throughput over many tables against one table", broker="tansu", catalog=True)
    parser.add_argument("--parallelism", type=int, default=4, help="sink.table_parallelism of the measured runs")
    parser.add_argument("--no-sequential", action="store_true", help="skip the table_parallelism=1 run")
    parser.add_argument(
        "--batches", type=int, default=10,
        help="micro-batches of the sustained runs (1 table, and many tables with a commit interval); 0: skip them",
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    report = BenchReport(
        "sink_tables",
        args.size,
        params={"changes": size.changes, "tables": size.tables, "parallelism": args.parallelism},
    )
    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-bench-tables-"))
    broker = start_bench_broker(args.broker, workdir / "logs")
    report.params["broker"] = broker.description
    section, stop_catalog = start_bench_catalog(args.catalog, workdir)
    report.params["catalog"] = args.catalog
    try:
        one = measure(broker.address, workdir, "one", 1, size, args.parallelism, catalog=section)
        many = measure(broker.address, workdir, "many", size.tables, size, args.parallelism, catalog=section)
        then, then_changes = driver_loop_cpu(broker.address, "many")
        report.add(
            Ratio(
                f"changes/s over {size.tables} tables",
                many.rate,
                one.rate,
                "changes/s",
                target=TARGET,
                baseline_name="1 table",
                note=f"{size.changes} changes; commit phase {many.commit_seconds:.1f}s vs {one.commit_seconds:.1f}s; "
                f"table_parallelism {args.parallelism}",
            )
        )
        if not args.no_sequential:
            seq = measure(broker.address, workdir, "seq", size.tables, size, 1, catalog=section)
            report.info(
                f"changes/s over {size.tables} tables, one table after the other",
                seq.rate,
                "changes/s",
                f"ratio {seq.rate / one.rate:.2f} to 1 table; commit phase {seq.commit_seconds:.1f}s",
            )
        if args.batches > 0:
            # sustained: the same changes arriving in rounds, a micro-batch after each. Without a
            # commit interval every batch writes every table it read; with one as long as the
            # run, the topics wait in Kafka and each table is written once, at the end
            one_b = measure(broker.address, workdir, "oneb", 1, size, args.parallelism, args.batches, catalog=section)
            waited = measure(broker.address, workdir, "waited", size.tables, size, args.parallelism, args.batches, INTERVAL, catalog=section)
            report.info(
                f"changes/s over {size.tables} tables in {args.batches} micro-batches, commit_interval_seconds {INTERVAL:g}",
                waited.rate,
                "changes/s",
                f"ratio {waited.rate / one_b.rate:.2f} to 1 table in {args.batches} micro-batches ({one_b.rate:.0f}/s); "
                f"{waited.table_writes} table writes (without the interval: {args.batches * size.tables})",
            )
        report.add(
            Ratio(
                "driver CPU per change",
                many.cpu_seconds / many.changes * 1e6,
                then / then_changes * 1e6,
                "us",
                target=CPU_TARGET,
                lower_is_better=True,
                baseline_name="the driver's own record loop before issue 16",
                note=f"{size.tables} tables; 1 table: {one.cpu_seconds / one.changes * 1e6:.1f} us",
            )
        )
    finally:
        stop_catalog()
        stop_bench_broker(broker)
        shutil.rmtree(workdir, ignore_errors=True)
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
