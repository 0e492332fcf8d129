"""Broker outage: the broker (Apache Kafka, one node) is frozen (SIGSTOP) for 30 s while the worker and the sink
run and changes are being produced; after SIGCONT both reconnect by themselves (same processes)
and nothing is lost: every change reaches the normalized topics in per-key order and the Iceberg
tables equal the independently computed state.

The broker is frozen rather than restarted (the 3-broker cluster tests,
``test_kafka_cluster_faults``, restart brokers with their data); this test has
its own broker (``own_broker``, tests/faults/conftest.py) so the others are not frozen with it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from service.local import LocalBroker, create_topics, wait_for
from tests.catalogs import TestCatalog  # the catalog is not what this test is about: hadoop
from tests.faults.procs import (
    committed_offsets,
    kill_group,
    read_warehouses,
    sink_batches,
    sink_config,
    start_sink,
    wait_committed,
    worker_config,
)
from tests.faults.workload import (
    DB,
    TABLES,
    assert_tables_equal_expected,
    check_order,
    generate,
    produce,
    read_all,
)
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(420)]

OUTAGE_S = float(os.environ.get("CDCNORM_FAULT_OUTAGE_S", "30"))
CHANGES = 8000
BEFORE = 3000  # produced before the outage; the rest is produced while it starts


def test_broker_outage_worker_and_sink_reconnect_without_loss(
    own_broker: LocalBroker, redis_url: str, tmp_path: Path
) -> None:
    bootstrap = own_broker.address
    prefix = f"fb{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    outputs = [f"{prefix}.{DB}.{t}" for t in TABLES]
    stream = generate(CHANGES, 300, seed=47)
    create_topics(bootstrap, [source], partitions=2)
    create_topics(bootstrap, outputs, partitions=2)
    config = worker_config(bootstrap, redis_url, f"{prefix}:", prefix, [{"name": source, "format": "canal-json"}])
    group = config["worker"]["app_id"]
    sink_group = f"{prefix}-sink"
    sink_cfg = sink_config(tmp_path / "sink.yaml", bootstrap, rf"{prefix}\.{DB}\..*", sink_group,
                           TestCatalog("hadoop", tmp_path),
                           trigger_interval_seconds=1)
    sink_log = tmp_path / "sink.log"

    ends = produce(bootstrap, source, stream.messages[:BEFORE])
    worker = WorkerProcess(config, tmp_path)
    sink = start_sink(sink_cfg, env={"PYTHONUNBUFFERED": "1"}, log=sink_log)
    producer_error: list[BaseException] = []
    try:
        worker.wait_ready(90)
        wait_committed(bootstrap, group, source, ends, 90, worker)
        wait_for(lambda: sink.poll() is None and sum(b[0] for b in sink_batches(sink_log)) > 0, 120,
                 "the sink's first batch", 0.5)
        assert sink.poll() is None, sink_log.read_text()[-3000:]
        read_before = sum(b[0] for b in sink_batches(sink_log))

        # -- the outage: the rest of the stream is produced from a thread (librdkafka buffers
        # it while the broker is frozen) and the broker freezes while that goes on
        ends_after: dict[int, int] = {}

        def produce_rest() -> None:
            try:
                rest = stream.messages[BEFORE:]
                half = len(rest) // 2
                ends_after.update(produce(bootstrap, source, rest[:half]))
                time.sleep(0.5)
                ends_after.update(produce(bootstrap, source, rest[half:], **{"message.timeout.ms": 300_000}))
            except BaseException as exc:  # surfaced by the assertion below
                producer_error.append(exc)

        thread = threading.Thread(target=produce_rest, daemon=True)
        thread.start()
        time.sleep(0.3)
        own_broker.freeze()
        stopped = time.monotonic()
        print(f"\ninjected: SIGSTOP {own_broker.description} for {OUTAGE_S:.0f}s, {BEFORE} changes "
              f"processed, {CHANGES - BEFORE} being produced; sink had read {read_before} records")
        while time.monotonic() - stopped < OUTAGE_S:
            assert worker.process.running, worker.process.log_tail()
            assert sink.poll() is None, sink_log.read_text()[-3000:]
            time.sleep(0.5)
        own_broker.resume()
        resumed = time.monotonic()
        print(f"injected: SIGCONT after {resumed - stopped:.1f}s")

        thread.join(300)
        assert not producer_error and not thread.is_alive(), producer_error
        wait_committed(bootstrap, group, source, ends_after, 180, worker)
        worker_caught_up = time.monotonic() - resumed
        consumed = worker.total("cdcnorm_messages_in_total")
        dlq_metric = worker.total("cdcnorm_dlq_total")
        records = read_all(bootstrap, outputs)
        out_ends: dict[tuple[str, int], int] = {}
        for r in records:
            out_ends[(r.topic, r.partition)] = max(out_ends.get((r.topic, r.partition), 0), r.offset + 1)

        def sink_done() -> bool:
            assert sink.poll() is None, sink_log.read_text()[-3000:]
            return all(committed_offsets(bootstrap, sink_group, t, 2)[p] >= end for (t, p), end in out_ends.items())

        wait_for(sink_done, 180, "the sink committing every normalized record", 1.0)
        sink_caught_up = time.monotonic() - resumed
        assert worker.process.running and sink.poll() is None
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(120) == 0, sink_log.read_text()[-3000:]
    finally:
        worker.stop()
        if sink.poll() is None:
            kill_group(sink)

    batches = sink_batches(sink_log)
    report = check_order(records, prefix, stream)
    dlq = read_all(bootstrap, [f"{prefix}.dlq"], idle_s=1.0)
    print(f"counted: worker caught up {worker_caught_up:.1f}s after SIGCONT, sink {sink_caught_up:.1f}s; "
          f"produced={CHANGES} consumed={consumed:.0f} {report.line()} dlq topic={len(dlq)} dlq metric={dlq_metric:.0f}")
    print(f"counted: sink batches={len(batches)} read={sum(b[0] for b in batches)} (before the outage {read_before}); "
          "one worker process and one sink process throughout")
    assert report.missing == 0 and not report.out_of_order and not report.split_keys, report.line()
    assert report.changes - report.duplicates == CHANGES
    assert not dlq and dlq_metric == 0
    assert sum(b[0] for b in batches) >= len(records)
    (tables,) = read_warehouses(sink_cfg)
    assert_tables_equal_expected(tables, stream, "tables after the broker outage")
