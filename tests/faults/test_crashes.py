"""Crash faults: the worker and the sink are SIGKILLed at seeded points and restarted.

One module-scoped run streams ``CDCNORM_FAULT_CHANGES`` Canal changes (default and CI: 100 000) over 3
tables through the worker, killing it 5 times, then lands the normalized topics in Iceberg with
a crash-free sink (warehouse A). The worker test checks the topics and warehouse A; the sink
test replays the same topics into warehouse B with 5 sink crashes and compares B with A.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.local import create_topics
from tests.catalogs import TestCatalog
from tests.faults.procs import (
    SinkResult,
    committed_offsets,
    kill_worker,
    read_warehouses,
    run_sink,
    sink_config,
    wait_committed,
    wait_consuming,
    wait_position,
    warehouse_files,
    worker_config,
)
from tests.faults.workload import (
    DB,
    TABLES,
    ChangeStream,
    OrderReport,
    assert_tables_equal_expected,
    check_order,
    generate,
    produce,
    read_all,
)
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(600)]

CHANGES = int(os.environ.get("CDCNORM_FAULT_CHANGES", "100000"))
KEYS_PER_TABLE = max(50, min(2000, CHANGES // 50))
WORKER_KILLS = 5
SEED = 20261108


@dataclass
class CrashRun:
    """What the module run produced, injected and counted."""

    prefix: str
    stream: ChangeStream
    ends: dict[int, int]
    kills: list[str] = field(default_factory=list)
    report: OrderReport | None = None
    dlq: int = -1
    sink_a: SinkResult | None = None
    config_a: Path | None = None
    tmp: Path | None = None
    # the records of the changelog table's topic (sink B writes it as a changelog): (partition, offset)
    changelog_positions: set[tuple[int, int]] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def pattern(self) -> str:
        return rf"{self.prefix}\.{DB}\..*"


@pytest.fixture(scope="module")
def crash_run(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrashRun]:
    tmp = tmp_path_factory.mktemp("worker-crash")
    prefix = f"fc{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    t0 = time.monotonic()
    stream = generate(CHANGES, KEYS_PER_TABLE, SEED)
    create_topics(kafka_bootstrap, [source], partitions=3)
    create_topics(kafka_bootstrap, [f"{prefix}.{DB}.{t}" for t in TABLES], partitions=3)
    ends = produce(kafka_bootstrap, source, stream.messages)
    run = CrashRun(prefix, stream, ends, tmp=tmp)
    run.seconds["produce"] = time.monotonic() - t0
    print(f"\nproduced {stream.changes} changes {stream.counts} over {len(TABLES)} tables, "
          f"{KEYS_PER_TABLE} keys each; source partition ends {ends}")

    # a SIGKILLed member holds its partitions until its session times out: keep that short, at
    # Apache Kafka's group.min.session.timeout.ms (6 s; the worker refuses to start below it)
    config = worker_config(kafka_bootstrap, redis_url, f"{prefix}:", prefix, [{"name": source, "format": "canal-json"}],
                           session_timeout_s=6.0)
    # kill points: seeded positions in the stream; worker i is killed once the messages committed
    # before it started plus those it consumed reach the i-th position
    rnd = random.Random(SEED)
    targets = sorted(int(stream.changes * rnd.uniform(0.05, 0.9)) for _ in range(WORKER_KILLS))
    t1 = time.monotonic()
    for i, target in enumerate(targets, 1):
        base = sum(max(0, o) for o in _committed(kafka_bootstrap, config, source))
        spawned = time.monotonic()
        worker = WorkerProcess(config, tmp, f"worker{i}")
        try:
            wait_consuming(worker, source)
            startup = time.monotonic() - spawned
            wait_position(worker, base, target)
            consumed = kill_worker(worker)
        finally:
            worker.stop()
        committed = sum(max(0, o) for o in _committed(kafka_bootstrap, config, source))
        run.kills.append(f"SIGKILL worker{i} at stream position ~{base + consumed} (target {target}; "
                         f"committed when it started {base}, it consumed {consumed}, start to first message "
                         f"{startup:.1f}s); committed after the kill {committed}/{stream.changes}")
        print("injected:", run.kills[-1])
    worker = WorkerProcess(config, tmp, "worker-final")
    try:
        wait_committed(kafka_bootstrap, config["worker"]["app_id"], source, ends, 240, worker)
        final_consumed = int(worker.total("cdcnorm_messages_in_total"))
    finally:
        worker.stop()
    run.seconds["worker"] = time.monotonic() - t1
    print(f"final worker consumed {final_consumed}; all source offsets committed after {run.seconds['worker']:.1f}s")

    t2 = time.monotonic()
    records = read_all(kafka_bootstrap, [f"{prefix}.{DB}.{t}" for t in TABLES])
    run.report = check_order(records, prefix, stream)
    log_topic = f"{prefix}.{CHANGELOG_TABLE}"
    run.changelog_positions = {(r.partition, r.offset) for r in records if r.topic == log_topic and r.value is not None}
    run.dlq = len(read_all(kafka_bootstrap, [f"{prefix}.dlq"], idle_s=1.0))
    run.seconds["read"] = time.monotonic() - t2
    print(f"counted: produced={stream.changes} {run.report.line()} dlq={run.dlq}")

    t3 = time.monotonic()
    # the crash-free reference on a hadoop catalog; the crashed sink (B) writes through the tests' catalog
    run.config_a = sink_config(tmp / "sink-a.yaml", kafka_bootstrap, run.pattern, f"{prefix}-sink-a",
                               TestCatalog("hadoop", tmp / "a"), maintenance={"enabled": False})
    run.sink_a = run_sink(run.config_a, "--once")
    run.seconds["sink"] = time.monotonic() - t3
    print(f"crash-free sink: exit={run.sink_a.returncode} batches={len(run.sink_a.batches)} read={run.sink_a.read} "
          f"in {run.seconds['sink']:.1f}s")
    yield run


def _committed(bootstrap: str, config: dict[str, Any], source: str) -> list[int]:
    return committed_offsets(bootstrap, config["worker"]["app_id"], source, 3)


def test_worker_sigkill_loses_nothing_and_keeps_per_key_order(crash_run: CrashRun) -> None:
    run, report = crash_run, crash_run.report
    assert report is not None and run.sink_a is not None and run.config_a is not None
    print(f"injected {len(run.kills)} worker SIGKILLs; timings {({k: round(v, 1) for k, v in run.seconds.items()})}")
    print(f"counted: {report.line()} dlq={run.dlq}")
    assert len(run.kills) == WORKER_KILLS
    assert report.missing == 0, f"{report.missing} changes never reached the normalized topics"
    assert not report.out_of_order, report.out_of_order[:5]
    assert not report.split_keys, report.split_keys[:5]
    assert report.changes - report.duplicates == run.stream.changes
    assert report.tombstones >= run.stream.counts["DELETE"]
    assert run.dlq == 0
    assert run.sink_a.returncode == 0, run.sink_a.stderr[-3000:]
    assert run.sink_a.read == report.records
    (tables,) = read_warehouses(run.config_a)
    assert_tables_equal_expected(tables, run.stream, "warehouse A (crash-free sink)")


# sink B writes these tables as a changelog (every record of its topic once) and as a history
# (every version once, the current ones the expected state): sink.tables modes
CHANGELOG_TABLE = f"{DB}.t2"
HISTORY_TABLE = f"{DB}.t1"

SINK_CRASHES: list[tuple[str, dict[str, str]]] = [
    ("mid-merge (in the commit callback, before the MERGE)", {"CDCNORM_CRASH_POINT": "mid-merge"}),
    ("mid-commit (data files written, snapshot not committed)", {}),
    ("between-table-commits", {"CDCNORM_CRASH_POINT": "between-table-commits"}),
    ("after-iceberg-commit (before the Kafka commit)", {"CDCNORM_CRASH_POINT": "after-iceberg-commit"}),
    ("after-kafka-commit", {"CDCNORM_CRASH_POINT": "after-kafka-commit"}),
]


def _on_disk(warehouse: Path) -> tuple[int, int, str]:
    files = warehouse_files(warehouse)
    text = " ".join(f"{t}:v{v}/{f}files" for t, (v, f) in files.items()) or "no tables"
    return sum(v for v, _ in files.values()), sum(f for _, f in files.values()), text


def _file_written(warehouse: Path, files: int) -> Callable[[], bool]:
    return lambda: _on_disk(warehouse)[1] > files


def test_sink_sigkill_at_five_points_matches_a_crash_free_run(crash_run: CrashRun, kafka_bootstrap: str,
                                                               catalog: TestCatalog) -> None:
    run = crash_run
    assert run.tmp is not None and run.config_a is not None and run.sink_a is not None
    assert run.sink_a.returncode == 0, run.sink_a.stderr[-3000:]
    per_batch = max(500, run.report.records // 4 if run.report else 20_000)
    warehouse = catalog.warehouse
    print(f"sink B writes through a {catalog.kind} catalog (warehouse {warehouse})")
    config_b = sink_config(run.tmp / "sink-b.yaml", kafka_bootstrap, run.pattern, f"{run.prefix}-sink-b",
                           catalog, max_records_per_batch=per_batch,
                           maintenance={"every_batches": 1, "expire_older_than_seconds": 0},
                           tables={CHANGELOG_TABLE: {"mode": "changelog"}, HISTORY_TABLE: {"mode": "history"}})
    rnd = random.Random(SEED + 1)
    read_before_final = 0
    for label, env in SINK_CRASHES:
        versions, files, _ = _on_disk(warehouse)
        kill_when = None
        if env:
            env = {**env, "CDCNORM_CRASH_AFTER": str(rnd.randint(1, 2))}
        else:  # killed from outside (sink and JVM) as soon as a MERGE wrote its first new file
            kill_when = _file_written(warehouse, files)
        result = run_sink(config_b, "--once", env=env, kill_when=kill_when)
        read_before_final += result.read
        versions_after, files_after, text = _on_disk(warehouse)
        print(f"injected: SIGKILL sink at {label} {env}: exit={result.returncode} "
              f"completed batches={len(result.batches)} read in them={result.read} ({result.seconds:.0f}s); "
              f"on disk: metadata versions {versions}->{versions_after}, files {files}->{files_after} ({text})")
        assert result.returncode == -9, result.stdout[-2000:] + result.stderr[-3000:]
    final = run_sink(config_b, "--once")
    assert final.returncode == 0, final.stderr[-3000:]
    print(f"final sink ({final.seconds:.0f}s): batches={len(final.batches)} read={final.read}; crash runs' completed batches read "
          f"{read_before_final}; records on the topics={run.report.records if run.report else '?'}")
    tables_a, tables_b = read_warehouses(run.config_a, config_b)
    label = "warehouse B (5 sink crashes)"
    assert_tables_equal_expected(tables_b, run.stream, label, changelogs={CHANGELOG_TABLE: run.changelog_positions},
                                 histories=(HISTORY_TABLE,))
    for name in (f"{DB}.{t}" for t in TABLES if f"{DB}.{t}" not in (CHANGELOG_TABLE, HISTORY_TABLE)):
        a = sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in tables_a[name]["rows"])
        b = sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in tables_b[name]["rows"])
        print(f"counted: {name} crash-free rows={len(a)} crashed rows={len(b)} "
              f"snapshots A={tables_a[name]['snapshots']} B={tables_b[name]['snapshots']}")
        assert a == b, f"{name}: rows (with __cdc_seq/__cdc_ts_ms) differ from the crash-free run"
