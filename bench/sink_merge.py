"""Sink throughput, freshness and driver memory, each against a baseline of the same run.

1. **Merge throughput** (in-process Spark, no broker): ``changes`` changes over ``keys`` keys
   (60% inserts, 30% updates, 10% deletes, keys drawn uniformly, so an "insert" of a stored key
   is an upsert and a delete of a missing key a no-op) as canonical records, parsed with
   :func:`sink.changes.parse_record`, then per micro-batch :func:`sink.changes.compact` +
   :meth:`sink.iceberg.IcebergTables.write_batch` (MERGE). Baseline: the same number of rows
   appended to a keyless Iceberg table by ``write_batch`` (the same DataFrame building, then
   ``append``), in the same Spark session, batches interleaved with the merge's, after one
   untimed warm-up batch on each table (table creation, JIT).
   Ratio: merged changes/s / appended rows/s, target >= 0.5 (0.6 at full size). The sink MERGEs only late or
   replayed changes, partial rows and truncates (``sink.iceberg``); this is that path.
1b. **Row-delta throughput** (``--parts delta``, in-process Spark, no broker): the same batches
   through the sink's own path for an ordered stream (:func:`row_delta_throughput`): each batch
   cached in one Spark task, as a read task leaves a topic partition's changes (untimed), then
   the write job (Parquet data + equality deletes + deleted keys, :func:`sink.tasks.write_partition`),
   the deleted-keys commit and the table's ``RowDelta`` commit. Baseline: the same changes to a
   keyless table by the same job and an append commit. Ratio: upserted changes/s / appended
   rows/s, target >= 0.5 (0.6 at full size).
2. **Driver memory** (sink process, a real broker): the sink (``python -m sink``) reads
   ``k x N`` pre-produced changes (plus the tombstones of deletes) in micro-batches of ``N``
   records; its Python process RSS after the first ``N`` records is the baseline of its RSS
   after all of them (psutil, sampled after each batch). Ratio: RSS(kN) / RSS(N), target
   <= 1.25 (memory does not grow with history); k = 10 at the small and full sizes.
3. **Freshness** (same sink process, 5 s micro-batch interval): records produced at a steady
   rate; a record is visible when the table's current Iceberg snapshot carries offsets past it
   (read from the table's metadata files, no second Spark session). Ratios: p50 and p95 of
   produce→visible against the trigger interval, target p95 <= 2 intervals.

Run: ``python -m bench.sink_merge [--size tiny|small|full] [--parts merge,delta,memory,freshness]
[--broker tansu|kafka]``. Parts 2 and 3 start the broker: Tansu by default (the figures of earlier
rounds were measured on it), Apache Kafka with ``--broker kafka``.
Small: 100k changes / 10k keys in 10 batches; memory after 10k then 110k records; 1000
records/s for 20 s. Full: 1M changes / 100k keys in 10 batches; memory after 100k then 1.1M
records; 2000 records/s for 60 s.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.common import (
    BenchReport,
    Ratio,
    bench_parser,
    bench_workdir,
    percentile,
    rss_bytes,
    start_bench_broker,
    stop_bench_broker,
)
from sink.changes import SinkChange, TableBatch, compact, parse_record
from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

__all__ = ["ORDERS", "change_batches", "change_records", "main", "produce_records", "sink_config", "write_job"]

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "cdcnorm.bench.orders"
MERGE_TARGET = 0.5
MERGE_TARGET_FULL = 0.6  # issue 16: at full size, upserts stay at 0.6 of append or above


def merge_target(size: Size) -> float:
    return MERGE_TARGET_FULL if size is SIZES["full"] else MERGE_TARGET
MEMORY_TARGET = 1.25
FRESHNESS_TARGET = 2.0


@dataclass(frozen=True)
class Size:
    """Workload of one size."""

    changes: int
    keys: int
    batches: int
    memory_batch: int  # records per sink micro-batch in the memory run (N)
    memory_batches: int  # micro-batches in the memory run (RSS after N, then after this many x N)
    fresh_rate: int  # records/s produced during the freshness run
    fresh_seconds: float
    warmup: int = 2_000  # changes in the untimed warm-up batch (0: none, for smoke tests)


SIZES = {
    "tiny": Size(1_000, 100, 2, memory_batch=300, memory_batches=2, fresh_rate=100, fresh_seconds=5, warmup=0),
    "small": Size(100_000, 10_000, 10, memory_batch=10_000, memory_batches=10, fresh_rate=1_000, fresh_seconds=20),
    "full": Size(1_000_000, 100_000, 10, memory_batch=100_000, memory_batches=10, fresh_rate=2_000, fresh_seconds=60),
}

ORDERS = TableSchema(
    "bench",
    None,
    "orders",
    (
        Column("id", ConnectType.INT64, False),
        Column("customer", ConnectType.STRING),
        Column.decimal("amount", 12, 2),
        Column("qty", ConnectType.INT32),
        Column("status", ConnectType.STRING),
        Column("created", ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP),
        Column("day", ConnectType.INT32, logical=Logical.DATE),
        Column("note", ConnectType.STRING),
    ),
    ("id",),
)
_STATUSES = ("new", "paid", "shipped", "returned")


def change_records(
    n_changes: int, n_keys: int, seed: int = 1, first_seq: int = 1, now_ts: bool = False, table: TableSchema = ORDERS
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Canonical (key, value) records of a 60/30/10 insert/update/delete history, in order.

    ``source.ts_ms`` is synthetic (reproducible), or the wall clock when the record is made
    (``now_ts``, so the sink's own freshness figure means something).
    """
    rnd = random.Random(seed)
    opts = EmitOptions(prefix="cdcnorm")
    base = dt.datetime(2024, 1, 1)
    for i in range(n_changes):
        seq = first_seq + i
        oid = rnd.randrange(n_keys)
        row = {
            "id": oid,
            "customer": f"customer-{rnd.randrange(5000)}",
            "amount": Decimal(rnd.randrange(10_000_000)) / 100,
            "qty": rnd.randrange(1, 50),
            "status": _STATUSES[rnd.randrange(4)],
            "created": base + dt.timedelta(seconds=seq),
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=rnd.randrange(365)),
            "note": None if rnd.random() < 0.7 else f"note {seq}",
        }
        kind = rnd.random()
        ts_ms = int(time.time() * 1000) if now_ts else 1_700_000_000_000 + seq
        source = SourceInfo("bench", ts_ms=ts_ms, sequence=f"{seq:012d}")
        if kind < 0.6:
            event = ChangeEvent(Operation.CREATE, table, None, row, source)
        elif kind < 0.9:
            event = ChangeEvent(Operation.UPDATE, table, {**row, "status": "new"}, row, source)
        else:
            event = ChangeEvent(Operation.DELETE, table, row, None, source)
        for record in emit([event], opts):
            yield record.key_bytes(), record.value_bytes()


def change_batches(size: Size, seed: int = 1, first_seq: int = 1) -> Iterator[list[SinkChange]]:
    """The history as parsed sink changes, one list per micro-batch."""
    per_batch = size.changes // size.batches
    records = change_records(size.changes, size.keys, seed, first_seq)
    offset = 0
    batch: list[SinkChange] = []
    for key, value in records:
        change = parse_record(TOPIC, 0, offset, key, value)
        offset += 1
        if change is None:
            continue  # tombstone
        batch.append(change)
        if len(batch) == per_batch:
            yield batch
            batch = []
    if batch:
        yield batch


# ----------------------------------------------------------------------------- part 1: merge


def sink_config(warehouse: Path, **overrides: Any) -> Any:
    from sink.config import SinkConfig

    section = {
        "topics": [TOPIC],
        "catalog": {"warehouse": str(warehouse)},
        "maintenance": {"enabled": False},
        **overrides,
    }
    return SinkConfig.from_section(section)


def merge_throughput(report: BenchReport, size: Size, workdir: Path) -> None:
    from sink.iceberg import IcebergTables
    from sink.spark_session import build_spark

    config = sink_config(workdir / "warehouse-merge")
    started = time.monotonic()
    spark = build_spark(config)
    report.info("spark session start", time.monotonic() - started, "s")
    started = time.monotonic()
    tables = IcebergTables(spark, config)
    # warm-up (not timed): create both tables and warm the JVM with one small batch each, so the
    # ratio compares steady-state micro-batches rather than table creation and JIT compilation
    if size.warmup:
        warm = next(change_batches(Size(size.warmup, size.warmup // 2, 1, 0, 0, 0, 0), seed=99))
        for batch in compact(warm).values():
            tables.write_batch(batch, {f"{TOPIC}:0": 0})
        tables.write_batch(TableBatch(("bench", "orders_append"), appends=warm), {f"{TOPIC}:0": 0})
        report.info(f"warm-up (2 tables, {size.warmup} changes)", time.monotonic() - started, "s", "not in the ratio")
    merge_s = append_s = compact_s = 0.0
    merged = appended = compacted_rows = 0
    parse_s = 0.0
    try:
        batches = change_batches(size, first_seq=1_000_000)  # newer than the warm-up's changes
        for i in range(size.batches):
            t0 = time.perf_counter()
            changes = next(batches, None)
            parse_s += time.perf_counter() - t0
            if changes is None:
                break
            offsets = {f"{TOPIC}:0": changes[-1].offset + 1}
            # merge: compaction + MERGE (what the runner does per batch after parsing)
            t0 = time.perf_counter()
            compacted = compact(changes)
            t1 = time.perf_counter()
            for batch in compacted.values():
                compacted_rows += len(batch.changes)
                tables.write_batch(batch, offsets)
            t2 = time.perf_counter()
            compact_s += t1 - t0
            merge_s += t2 - t0
            merged += len(changes)
            # baseline: append the same number of rows, DataFrame built the same way
            plain = TableBatch(("bench", "orders_append"), appends=changes)
            t0 = time.perf_counter()
            tables.write_batch(plain, offsets)
            append_s += time.perf_counter() - t0
            appended += len(changes)
            print(
                f"batch {i + 1}/{size.batches}: {len(changes)} changes; cumulative merge {merge_s:.1f}s, "
                f"append {append_s:.1f}s",
                flush=True,
            )
        stored = spark.sql(f"SELECT count(*) AS n FROM {tables.table_id(('bench', 'orders'))}").collect()[0]["n"]
    finally:
        spark.stop()
    report.add(
        Ratio(
            "merge changes/s",
            merged / merge_s,
            appended / append_s,
            "rows/s",
            target=merge_target(size),
            baseline_name="plain append",
            note=f"{merged} changes over {size.keys} keys in {size.batches} batches; "
            f"compacted to {compacted_rows} rows; compaction {compact_s:.1f}s of {merge_s:.1f}s",
        )
    )
    report.info("parse_record", merged / parse_s if parse_s else 0.0, "changes/s", "generation + parse, not timed above")
    report.info("rows in merged table", stored, "rows")


# ----------------------------------------------------------------------------- part 1b: row deltas

DELTA_TABLE = ("bench", "orders_delta")
DELTA_APPEND_TABLE = ("bench", "orders_delta_append")


def write_job(tables: Any, rdd: Any, table: tuple[str, str], changes: list[SinkChange]) -> int:
    """What the sink does for one table of a micro-batch whose changes are cached in a read task
    (sink.runner's write job and commits): the write task writes the table's Parquet files (and
    the batch's deleted keys), the driver commits the memory, then the table's row delta (or
    append). Returns the rows the table was given."""
    import functools

    from sink.tasks import DeletedKeysFile, TableFiles, TablePlan, TableSummary, write_partition

    summary = TableSummary(table)
    for ch in changes:  # the read task's summary (computed in the executor by the sink)
        summary.add(ch)
    key = tables.key_of(table)
    if key:  # an ordered stream: the sink writes row deltas (no MERGE), as it would decide here
        how = tables.write_plan(table, summary)
        assert how.row_delta, f"the sink would MERGE this batch: {how.reason}"
    location, schema = tables.plan_of(table)
    layout = tables.layout(table)
    plan = TablePlan(table, tables.iceberg_name(table), location, schema, key, tables.applied_offsets(table),
                     layout.partition, layout.sort, tables.mode_of(table).value == "changelog")
    memory = tables.deleted_keys.plan() if key else None
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    write = functools.partial(write_partition, tables={0: frozenset({table})}, plans={table: plan}, deleted_keys=memory, now=now)
    results = rdd.mapPartitionsWithIndex(write).collect()
    tables.deleted_keys.remember([r for r in results if isinstance(r, DeletedKeysFile)])
    files = next(r for r in results if isinstance(r, TableFiles))
    assert files.fallback is None, files.fallback
    offsets = {f"{TOPIC}:0": changes[-1].offset + 1}
    tables.commit_files(table, files, offsets, summary.newest)
    return files.upserts + files.deleted + files.appends


def row_delta_throughput(report: BenchReport, size: Size, workdir: Path) -> None:
    """The sink's own path for an ordered stream, against its own append: the same batches as
    part 1, cached in a Spark task (as the read job leaves them), written by the write job and
    committed as one row delta per batch (keyed table: data file + equality deletes + deleted
    keys remembered) or one append (the same changes to a keyless table)."""
    from pyspark import StorageLevel

    from sink.iceberg import IcebergTables
    from sink.spark_session import build_spark

    config = sink_config(workdir / "warehouse-delta")
    spark = build_spark(config)
    tables = IcebergTables(spark, config)
    sc = spark.sparkContext

    def keyless(changes: list[SinkChange]) -> list[SinkChange]:
        return [replace(c, table=DELTA_APPEND_TABLE, key=None, key_columns=()) for c in changes]

    delta_s = append_s = 0.0
    upserted = appended = 0
    try:
        warm = next(change_batches(Size(max(size.warmup, 200), max(size.warmup, 200) // 2, 1, 0, 0, 0, 0), seed=99))
        for table, changes in ((DELTA_TABLE, [replace(c, table=DELTA_TABLE) for c in warm]), (DELTA_APPEND_TABLE, keyless(warm))):
            summary_cols = tuple({c.name: c for ch in changes for c in ch.columns}.values())
            tables.ensure_columns(table, summary_cols, changes[0].key_columns)
            if size.warmup:
                write_job(tables, sc.parallelize(changes, 1), table, changes)
        batches = change_batches(size, first_seq=1_000_000)
        for i in range(size.batches):
            batch = next(batches, None)
            if batch is None:
                break
            changes = batch
            keyed = [replace(c, table=DELTA_TABLE) for c in changes]
            plain = keyless(changes)
            rdds = []
            for part in (keyed, plain):  # cached in one task each, as a read task leaves a partition's changes
                rdd = sc.parallelize(part, 1).persist(StorageLevel.MEMORY_AND_DISK)
                rdd.count()
                rdds.append(rdd)
            t0 = time.perf_counter()
            write_job(tables, rdds[0], DELTA_TABLE, keyed)
            t1 = time.perf_counter()
            write_job(tables, rdds[1], DELTA_APPEND_TABLE, plain)
            t2 = time.perf_counter()
            for rdd in rdds:
                rdd.unpersist()
            delta_s += t1 - t0
            append_s += t2 - t1
            upserted += len(changes)
            appended += len(changes)
            print(f"row delta batch {i + 1}/{size.batches}: cumulative row delta {delta_s:.1f}s, append {append_s:.1f}s", flush=True)
        stored = spark.sql(f"SELECT count(*) AS n FROM {tables.table_id(DELTA_TABLE)}").collect()[0]["n"]
    finally:
        spark.stop()
    report.add(
        Ratio(
            "row-delta upsert changes/s",
            upserted / delta_s,
            appended / append_s,
            "rows/s",
            target=merge_target(size),
            baseline_name="write-task append",
            note=f"the sink's path for in-order batches: {upserted} changes over {size.keys} keys in {size.batches} "
            "batches, each cached in one Spark task; write job + deleted keys + row delta, against the same "
            "changes appended to a keyless table by the same job",
        )
    )
    report.info("rows in row-delta table", stored, "rows")


# ----------------------------------------------------------------------------- parts 2+3: sink process


def produce_records(bootstrap: str, records: Iterable[tuple[str, bytes | None, bytes | None]]) -> None:
    """Produce ``(topic, key, value)`` records, waiting for room in the producer's queue."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    for topic, key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0, "records left unsent"


def _produce(bootstrap: str, records: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    produce_records(bootstrap, ((TOPIC, key, value) for key, value in records))


class _SinkProcess:
    """The sink as its own process (``python -m sink``), its progress lines read in a thread."""

    def __init__(self, config_path: Path, log_path: Path) -> None:
        self.log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sink", "--config", str(config_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.read_total = 0
        self.samples: list[tuple[int, int]] = []  # (records read so far, python RSS) per batch
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            if line.startswith("batch: read="):
                n = int(line.split("read=", 1)[1].split()[0])
                try:
                    rss = rss_bytes(self.proc.pid)
                except Exception:  # the process ended
                    continue
                with self.lock:
                    self.read_total += n
                    self.samples.append((self.read_total, rss))

    def jvm_rss(self) -> int:
        import psutil

        try:
            return sum(c.memory_info().rss for c in psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.Error:
            return 0

    def wait_read(self, total: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the sink exited with {self.proc.returncode}; see {self.log.name}")
            with self.lock:
                if self.read_total >= total:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"the sink read {self.read_total} of {total} records in {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _table_offsets(table_dir: Path) -> dict[str, int] | None:
    """``cdcnorm.offsets`` of the current snapshot of a hadoop-catalog Iceberg table, if any."""
    meta = table_dir / "metadata"
    try:
        version = (meta / "version-hint.text").read_text().strip()
        doc = json.loads((meta / f"v{version}.metadata.json").read_text())
    except (OSError, ValueError):
        return None
    current = doc.get("current-snapshot-id")
    for snap in doc.get("snapshots", []):
        if snap.get("snapshot-id") == current:
            raw = snap.get("summary", {}).get("cdcnorm.offsets")
            return json.loads(raw) if raw else None
    return None


def sink_process_runs(report: BenchReport, size: Size, workdir: Path, parts: set[str], broker_kind: str = "tansu") -> None:
    import yaml

    from service.local import create_topics

    broker = start_bench_broker(broker_kind, workdir / "logs")
    report.params["broker"] = broker.description
    sink: _SinkProcess | None = None
    try:
        create_topics(broker.address, [TOPIC], partitions=2)
        n_mem = size.memory_batch
        trigger = 5.0
        cfg = {
            "broker": {"bootstrap_servers": broker.address},
            "topics": [{"name": "unused-source", "format": "canal-json"}],
            "sink": {
                "topics": [TOPIC],
                "group_id": "bench-sink",
                "trigger_interval_seconds": trigger,
                "max_records_per_batch": n_mem,
                "catalog": {"warehouse": str(workdir / "warehouse-sink")},
            },
        }
        config_path = workdir / "pipeline.yaml"
        config_path.write_text(yaml.safe_dump(cfg))
        produced = 0
        if "memory" in parts:
            # k x N changes over N keys (tombstones after deletes are records too: read counts include them)
            records = list(change_records(size.memory_batches * n_mem, n_mem, seed=2))
            _produce(broker.address, records)
            produced = len(records)
            del records
        sink = _SinkProcess(config_path, workdir / "logs" / "sink.log")
        if "memory" in parts:
            sink.wait_read(produced, timeout_s=180 + 30 * (produced / n_mem + 1))
            first = next((s for s in sink.samples if s[0] >= n_mem), sink.samples[0])
            last = sink.samples[-1]
            report.add(
                Ratio(
                    "sink driver RSS",
                    last[1] / 2**20,
                    first[1] / 2**20,
                    "MiB",
                    target=MEMORY_TARGET,
                    lower_is_better=True,
                    baseline_name=f"after {first[0]} records",
                    note=f"after {last[0]} records ({len(sink.samples)} batches of <= {n_mem}); "
                    f"JVM children {sink.jvm_rss() / 2**20:.0f} MiB",
                )
            )
            series = " ".join(f"{rss / 2**20:.0f}" for _, rss in sink.samples)
            report.info("sink driver RSS per batch", series, "MiB", "after each micro-batch, in order")
        if "freshness" in parts:
            _freshness(report, size, broker.address, sink, workdir, trigger, produced)
    finally:
        if sink is not None:
            sink.stop()
        stop_bench_broker(broker)


def _freshness(
    report: BenchReport, size: Size, bootstrap: str, sink: _SinkProcess, workdir: Path, trigger: float, skip: int
) -> None:
    from confluent_kafka import Producer

    table_dir = workdir / "warehouse-sink" / "bench" / "orders"
    if skip == 0:  # let the sink join the group and create the table before timing
        warmup = list(change_records(10, 10, seed=3))
        _produce(bootstrap, warmup)
        sink.wait_read(len(warmup), timeout_s=180)
    deadline = time.monotonic() + 60
    while not _table_offsets(table_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    baseline_offsets = _table_offsets(table_dir) or {}
    sent_at: dict[tuple[int, int], float] = {}

    def on_delivery(t_sent: float) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                sent_at[(msg.partition(), msg.offset())] = t_sent

        return delivered

    visible_at: dict[tuple[int, int], float] = {}
    stop = threading.Event()

    def watch() -> None:
        seen = {tp: off for tp, off in baseline_offsets.items()}
        while not stop.is_set():
            offsets = _table_offsets(table_dir) or {}
            now = time.time()
            if offsets != seen:
                for tp, nxt in offsets.items():
                    part = int(tp.rsplit(":", 1)[1])
                    for off in range(seen.get(tp, 0), nxt):
                        visible_at.setdefault((part, off), now)
                seen = offsets
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    total = int(size.fresh_rate * size.fresh_seconds)
    started = time.time()
    for sent, (key, value) in enumerate(change_records(total, 1000, seed=4, first_seq=10_000_000, now_ts=True)):
        pause = started + sent / size.fresh_rate - time.time()
        if pause > 0:
            time.sleep(pause)
        producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery(time.time()))
        producer.poll(0)
    producer.flush(30)
    deadline_s = time.time() + 6 * trigger + 60
    while time.time() < deadline_s and not all(k in visible_at for k in sent_at):
        time.sleep(0.2)
    stop.set()
    watcher.join(5)
    lat = [visible_at[k] - t for k, t in sent_at.items() if k in visible_at]
    missing = len(sent_at) - len(lat)
    note = f"{len(sent_at)} records at {size.fresh_rate}/s for {size.fresh_seconds:.0f}s; interval {trigger:g}s"
    if missing:
        note += f"; {missing} not visible in time"
    p50, p95 = percentile(lat, 50), percentile(lat, 95)
    report.add(Ratio("freshness p50", p50, trigger, "s", baseline_name="trigger interval", note=note))
    report.add(
        Ratio(
            "freshness p95",
            p95,
            trigger,
            "s",
            target=FRESHNESS_TARGET,
            lower_is_better=True,
            baseline_name="trigger interval",
            note=f"max {max(lat, default=float('nan')):.1f}s",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("sink merge throughput, freshness and driver memory", broker="tansu")
    parser.add_argument("--parts", default="merge,delta,memory,freshness",
                        help="comma-separated: merge, delta (row deltas), memory, freshness")
    parser.add_argument("--workdir", type=Path, default=None, help="keep warehouses and logs here (default: a temp dir)")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    parts = {p for p in args.parts.split(",") if p}
    report = BenchReport(
        "sink_merge",
        args.size,
        params={"changes": size.changes, "keys": size.keys, "batches": size.batches,
                "memory_batch": size.memory_batch, "fresh_rate": size.fresh_rate, "parts": sorted(parts)},
    )
    with bench_workdir(args.workdir) as workdir:
        if "merge" in parts:
            merge_throughput(report, size, workdir)
        if "delta" in parts:
            row_delta_throughput(report, size, workdir)
        if parts & {"memory", "freshness"}:
            sink_process_runs(report, size, workdir, parts, args.broker)
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
