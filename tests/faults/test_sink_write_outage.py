"""The sink cannot write: one table's metadata folder refuses new files mid-run (a real refusal of
the file system, see :func:`tests.faults.procs.refuse_writes`) while changes keep coming.

The sink must retry with back-off and commit no Kafka offset meanwhile; ``/readyz`` fails with the
reason, ``cdcnorm_sink_write_failures_total`` and a WARNING line say why, ``/healthz`` stays up.
The other tables of the refused batch commit (a partially applied batch). When the folder takes
writes again the same process resumes, and the tables equal the independently computed state:
nothing lost, nothing doubled.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import orjson
import pytest

from service.local import create_topics, free_port, wait_for
from tests.catalogs import TestCatalog
from tests.faults.procs import (
    committed_offsets,
    kill_group,
    metric_total,
    probe_port,
    read_warehouses,
    refuse_writes,
    sink_batches,
    sink_config,
    start_sink,
    warehouse_files,
)
from tests.faults.workload import DB, TABLES, assert_tables_equal_expected, generate, produce_normalized

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(420)]

CHANGES = 4000
KEYS_PER_TABLE = 150
PARTITIONS = 2
FAILED_ATTEMPTS = 4  # attempts refused before the folder takes writes again


def _committed(bootstrap: str, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    return {(t, p): o for t in topics for p, o in enumerate(committed_offsets(bootstrap, group, t, PARTITIONS))}


def _failures(port: int, **labels: str) -> float:
    status, body = probe_port(port, "/metrics")
    return metric_total(body, "cdcnorm_sink_write_failures_total", **labels) if status == 200 else 0.0


def test_sink_retries_an_unwritable_table_and_resumes_without_loss(kafka_bootstrap: str, tmp_path: Path,
                                                                   catalog: TestCatalog) -> None:
    prefix = f"fw{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{DB}.{t}" for t in TABLES]
    group = f"{prefix}-sink"
    stream = generate(CHANGES, KEYS_PER_TABLE, seed=53)
    create_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    half = CHANGES // 2
    first_ends = produce_normalized(kafka_bootstrap, prefix, stream.messages[:half])
    port = free_port()
    warehouse = catalog.warehouse  # the REST catalog's server writes the metadata there, Spark the data
    print(f"\nthe sink writes through a {catalog.kind} catalog")
    config = sink_config(tmp_path / "sink.yaml", kafka_bootstrap, rf"{prefix}\.{DB}\..*", group, catalog,
                         trigger_interval_seconds=1, metrics_port=port, maintenance={"enabled": False},
                         write_retry={"initial_backoff_seconds": 0.5, "max_backoff_seconds": 4})
    log = tmp_path / "sink.log"
    t0 = time.monotonic()
    sink = start_sink(config, env={"PYTHONUNBUFFERED": "1"}, log=log)
    try:
        def committed_up_to(ends: dict[tuple[str, int], int]) -> bool:
            assert sink.poll() is None, log.read_text(errors="replace")[-3000:]
            got = _committed(kafka_bootstrap, group, topics)
            return all(got[tp] >= end for tp, end in ends.items())

        wait_for(lambda: committed_up_to(first_ends), 180, "the sink committing the first half", 0.5)
        print(f"\nfirst half: {half} changes committed by the sink in {time.monotonic() - t0:.0f}s "
              f"(start-up included); Kafka ends {sorted(first_ends.values())}")
        # the others must commit before the blocked table is refused: with sink.table_parallelism > 1
        # (the default) every table of the batch is attempted; one after the other, tables go in the
        # order of their first change (partition, then offset: Canal has no source sequence), so the
        # table with the highest first offset on partition 0 is blocked, as it comes last
        blocked = max(TABLES, key=lambda t: first_ends.get((f"{prefix}.{DB}.{t}", 0), 0))
        others = [f"{DB}.{t}" for t in TABLES if t != blocked]
        with refuse_writes(warehouse / DB / blocked / "metadata") as how:
            versions_before = {t: v for t, (v, _) in warehouse_files(warehouse).items()}
            second_ends = produce_normalized(kafka_bootstrap, prefix, stream.messages[half:])
            injected = time.monotonic()
            print(f"injected: {how}; then produced the other {CHANGES - half} changes")
            wait_for(lambda: sink.poll() is None and _failures(port) >= 1, 120, "a refused write", 0.2)
            committed_first = _committed(kafka_bootstrap, group, topics)
            ready = probe_port(port, "/readyz")
            wait_for(lambda: sink.poll() is None and _failures(port) >= FAILED_ATTEMPTS, 120,
                     f"{FAILED_ATTEMPTS} refused attempts", 0.2)
            committed_last = _committed(kafka_bootstrap, group, topics)
            live, metrics = probe_port(port, "/healthz"), probe_port(port, "/metrics")[1]
            versions_during = {t: v for t, (v, _) in warehouse_files(warehouse).items()}
            outage = time.monotonic() - injected
        print(f"injected: writes allowed again after {outage:.1f}s")
        wait_for(lambda: committed_up_to(second_ends), 120, "the sink committing everything", 0.5)
        resumed = time.monotonic() - injected - outage
        ready_after = probe_port(port, "/readyz")
        metrics_after = probe_port(port, "/metrics")[1]
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(120) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if sink.poll() is None:
            kill_group(sink)

    text = log.read_text(errors="replace")
    warnings = [line for line in text.splitlines() if "writing a micro-batch failed (attempt" in line]
    failures = metric_total(metrics, "cdcnorm_sink_write_failures_total")
    by_reason = metric_total(metrics, "cdcnorm_sink_write_failures_total", table=f"{DB}.{blocked}",
                             reason="permission-denied")
    ready_body = orjson.loads(ready[1]) if ready[0] else {}
    print(f"counted: {failures:.0f} failed attempts ({by_reason:.0f} on {DB}.{blocked}, permission-denied) "
          f"in {outage:.1f}s; resumed and committed everything {resumed:.1f}s after the writes were allowed")
    print(f"counted: /readyz during the outage {ready[0]} {ready_body.get('reason', '')!r}")
    print(f"counted: /healthz during the outage {live[0]}; /readyz after {ready_after[0]}; "
          f"cdcnorm_sink_write_failing during {metric_total(metrics, 'cdcnorm_sink_write_failing'):.0f}, "
          f"after {metric_total(metrics_after, 'cdcnorm_sink_write_failing'):.0f}")
    print(f"counted: Kafka offsets committed at the first failure {sum(committed_first.values())}, "
          f"after {FAILED_ATTEMPTS} failures {sum(committed_last.values())}, first half {sum(first_ends.values())}, "
          f"all {sum(second_ends.values())}")
    print(f"counted: metadata versions before/during the outage {versions_before} -> {versions_during} "
          f"(blocked {DB}.{blocked})")
    print(f"counted: log: {warnings[0][:400] if warnings else 'no warning line'}")
    batches = sink_batches(log)
    print(f"counted: {len(batches)} batches committed, {sum(b[0] for b in batches)} records read in them")

    assert by_reason >= FAILED_ATTEMPTS
    assert ready[0] == 503 and f"table {DB}.{blocked}: permission-denied" in ready_body["reason"], ready
    assert live[0] == 200, live
    assert metric_total(metrics, "cdcnorm_sink_write_failing") == 1
    # no Kafka offset committed while the batch failed: still the first half's
    assert committed_first == committed_last
    assert all(committed_last[tp] == end for tp, end in first_ends.items()), (committed_last, first_ends)
    assert any(committed_last[tp] < end for tp, end in second_ends.items())
    # a partially applied batch: the other tables committed it while the blocked one refused
    assert versions_during[f"{DB}.{blocked}"] == versions_before[f"{DB}.{blocked}"]
    assert all(versions_during[t] > versions_before[t] for t in others), (versions_before, versions_during)
    assert len(warnings) >= FAILED_ATTEMPTS and "permission-denied" in warnings[0] and "Kafka offsets are not committed" in warnings[0]
    assert "writes succeed again after" in text
    assert ready_after[0] == 200 and metric_total(metrics_after, "cdcnorm_sink_write_failing") == 0
    (tables,) = read_warehouses(config)
    assert_tables_equal_expected(tables, stream, "tables after the write outage")
