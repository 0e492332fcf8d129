"""Table shapes and modes (``sink.tables``), each against a baseline of the same run.

In-process Spark, no broker, the batches of ``bench.sink_merge`` (a 60/30/10 insert/update/delete
history over ``keys`` keys, in order), each batch cached in one Spark task as a read task leaves
a topic partition's changes (untimed), then written the way the sink writes that table, the
tables' batches interleaved:

1. **Partitioned upsert**: the row-delta path (write job: one data file per partition and the
   global equality deletes; the driver's commit) into a table partitioned by ``bucket(16, id)``,
   against the same changes into an unpartitioned table. Target >= 0.8.
2. **Changelog**: every change appended to a changelog table (mode ``changelog``: its position
   and commit-time columns, the write job, an append commit), against the same changes appended to
   a keyless table by the same job. Target >= 0.9.
3. **History**: the changes into a history table (mode ``history``: the batch's changes collected
   to the driver, as the runner does; in order, so a row delta of the new versions and the current
   versions they close, kept in memory: ``sink.scd2``), against the unpartitioned upsert of part 1.
   Target >= 0.5.

Run: ``python -m bench.sink_shapes [--size tiny|small|full]``. Sizes as ``bench.sink_merge``'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import BenchReport, Ratio, bench_parser, bench_workdir
from bench.sink_merge import SIZES, TOPIC, Size, change_batches, sink_config, write_job
from sink.changes import SinkChange, TableBatch

__all__ = ["main"]

PARTITIONED_TARGET = 0.8
CHANGELOG_TARGET = 0.9
HISTORY_TARGET = 0.5

FLAT = ("bench", "orders_flat")
BUCKETED = ("bench", "orders_bucketed")
LOG = ("bench", "orders_log")
PLAIN = ("bench", "orders_plain")
HISTORY = ("bench", "orders_history")
HISTORY_READ = ("bench", "orders_history_read")  # the current versions read per batch (none kept)
TABLES = {
    "bench.orders_bucketed": {"partition_by": ["bucket(16, id)"]},
    "bench.orders_log": {"mode": "changelog"},
    "bench.orders_history*": {"mode": "history"},
}


def _as(table: tuple[str, str], changes: list[SinkChange]) -> list[SinkChange]:
    if table == PLAIN:
        return [replace(c, table=table, key=None, key_columns=()) for c in changes]
    return [replace(c, table=table) for c in changes]


def shapes(report: BenchReport, size: Size, workdir: Path) -> None:
    from pyspark import StorageLevel

    from sink.iceberg import IcebergTables
    from sink.spark_session import build_spark

    config = sink_config(workdir / "warehouse-shapes", tables=TABLES)
    spark = build_spark(config)
    tables = IcebergTables(spark, config)
    reading = IcebergTables(spark, config.model_copy(update={"history_cache_rows": 0}))
    sc = spark.sparkContext
    seconds = dict.fromkeys((FLAT, BUCKETED, LOG, PLAIN, HISTORY, HISTORY_READ), 0.0)
    done = 0

    def by_task(table: tuple[str, str], changes: list[SinkChange]) -> Any:
        rdd = sc.parallelize(changes, 1).persist(StorageLevel.MEMORY_AND_DISK)
        rdd.count()  # cached in one task, as a read task leaves a partition's changes (untimed)
        if table in (HISTORY, HISTORY_READ):  # from the driver: the runner collects the batch's changes (timed)
            offsets = {f"{TOPIC}:0": changes[-1].offset + 1}
            writer = tables if table == HISTORY else reading
            return lambda: (writer.write_batch(TableBatch(table, appends=rdd.collect()), offsets), rdd.unpersist())
        return lambda: (write_job(tables, rdd, table, changes), rdd.unpersist())

    try:
        warm = next(change_batches(Size(max(size.warmup, 200), max(size.warmup, 200) // 2, 1, 0, 0, 0, 0), seed=99))
        for table in seconds:
            changes = _as(table, warm)
            columns = tuple({c.name: c for ch in changes for c in ch.columns}.values())
            (reading if table == HISTORY_READ else tables).ensure_columns(table, columns, changes[0].key_columns)
            if size.warmup:
                by_task(table, changes)()
        for i, batch in enumerate(change_batches(size, first_seq=1_000_000)):
            for table in seconds:
                work = by_task(table, _as(table, batch))
                t0 = time.perf_counter()
                work()
                seconds[table] += time.perf_counter() - t0
            done += len(batch)
            print(f"batch {i + 1}/{size.batches}: " + ", ".join(f"{t[1]} {s:.1f}s" for t, s in seconds.items()), flush=True)
        counts = {t: spark.sql(f"SELECT count(*) AS n FROM {tables.table_id(t)}").collect()[0]["n"] for t in seconds}
    finally:
        spark.stop()
    rate = {t: done / s for t, s in seconds.items()}
    note = f"{done} changes over {size.keys} keys in {size.batches} batches"
    report.add(Ratio("partitioned upsert changes/s", rate[BUCKETED], rate[FLAT], "changes/s", target=PARTITIONED_TARGET,
                     baseline_name="unpartitioned upsert", note=f"bucket(16, id), row deltas; {note}"))
    report.add(Ratio("changelog append changes/s", rate[LOG], rate[PLAIN], "changes/s", target=CHANGELOG_TARGET,
                     baseline_name="plain append", note=f"every change a row with its position; {note}"))
    report.add(Ratio("history changes/s", rate[HISTORY], rate[FLAT], "changes/s", target=HISTORY_TARGET,
                     baseline_name="unpartitioned upsert", note=f"changes collected, ordered batches as row deltas; {note}"))
    report.add(Ratio("history, current versions read per batch", rate[HISTORY_READ], rate[FLAT], "changes/s",
                     baseline_name="unpartitioned upsert",
                     note=f"sink.history_cache_rows 0 (a table whose current versions do not fit); {note}"))
    for table, n in counts.items():
        report.info(f"rows in {table[1]}", n, "rows")


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("sink table shapes and modes: partitioned upsert, changelog, history")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the warehouse here (default: a temp dir)")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    report = BenchReport("sink_shapes", args.size, params={"changes": size.changes, "keys": size.keys, "batches": size.batches})
    with bench_workdir(args.workdir) as workdir:
        shapes(report, size, workdir)
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
