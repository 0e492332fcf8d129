"""Redis outage: the worker's own redis-server is frozen (SIGSTOP) for 30 s mid-stream.

The topic completes partial images (``complete_partial_images: true``), so every message needs
Redis. During the outage the worker must pause (no source offset committed), report not ready
on ``/readyz`` and count Redis errors on ``/metrics``; after SIGCONT it resumes by itself, and
no message is lost or dead-lettered.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local import LocalProcess, create_topics, start_redis, wait_for
from tests.faults.procs import committed_offsets, metric_total, probe, wait_committed, worker_config
from tests.faults.workload import DB, TABLES, check_order, generate, produce, read_all
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

OUTAGE_S = float(os.environ.get("CDCNORM_FAULT_OUTAGE_S", "30"))
CHANGES = 8000
BEFORE = 3000  # changes produced and processed before the outage


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[LocalProcess]:
    """A redis-server of this test only, so it can be frozen."""
    try:
        server = start_redis(log_dir=tmp_path / "redis")
    except Exception as exc:  # pragma: no cover - no redis-server binary
        pytest.skip(f"cannot start redis-server: {exc}")
    try:
        yield server
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()


def test_redis_outage_pauses_the_worker_and_loses_nothing(
    kafka_bootstrap: str, own_redis: LocalProcess, tmp_path: Path
) -> None:
    prefix = f"fr{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    stream = generate(CHANGES, 300, seed=31)
    create_topics(kafka_bootstrap, [source], partitions=2)
    create_topics(kafka_bootstrap, [f"{prefix}.{DB}.{t}" for t in TABLES], partitions=2)
    entry = {"name": source, "format": "canal-json", "complete_partial_images": True}
    config = worker_config(kafka_bootstrap, own_redis.address, f"{prefix}:", prefix, [entry],
                           retry_initial_s=0.2, retry_max_s=2.0)
    config["redis"]["socket_timeout_s"] = 1.0
    group = config["worker"]["app_id"]

    ends = produce(kafka_bootstrap, source, stream.messages[:BEFORE])
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready(90)
        wait_committed(kafka_bootstrap, group, source, ends, 90, worker)
        assert worker.readiness().get("ready") is True
        errors_before = worker.total("cdcnorm_redis_errors_total")

        # -- the outage: freeze Redis, then stream the rest of the changes
        own_redis.process.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        ends = produce(kafka_bootstrap, source, stream.messages[BEFORE:])
        print(f"\ninjected: SIGSTOP redis-server pid={own_redis.process.pid} for {OUTAGE_S:.0f}s after {BEFORE} "
              f"changes; {CHANGES - BEFORE} more produced during the outage")
        samples: list[tuple[float, int, bool | None, bool | None]] = []
        errors_seen = 0.0
        while time.monotonic() - stopped < OUTAGE_S:
            status, body = probe(worker, "/readyz", 10)
            report = json.loads(body) if status else {}
            samples.append((time.monotonic() - stopped, status, report.get("ready"), report.get("redis")))
            status, body = probe(worker, "/metrics", 10)
            if status == 200:
                errors_seen = max(errors_seen, metric_total(body, "cdcnorm_redis_errors_total"))
            assert worker.process.running, worker.process.log_tail()
            time.sleep(max(0.0, min(1.0, OUTAGE_S - (time.monotonic() - stopped))))
        committed_in_outage = sum(committed_offsets(kafka_bootstrap, group, source, 2))
        own_redis.process.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        print(f"injected: SIGCONT after {resumed - stopped:.1f}s")

        wait_committed(kafka_bootstrap, group, source, ends, 120, worker)
        caught_up = time.monotonic() - resumed
        wait_for(lambda: worker.readiness().get("ready") is True, 30, "readiness after the outage", 0.2)
        dlq_metric = worker.total("cdcnorm_dlq_total")
        consumed = worker.total("cdcnorm_messages_in_total")
    finally:
        worker.stop()

    not_ready = [s for s in samples if s[1] == 503 and s[2] is False]
    late = [s for s in samples if s[0] >= 5.0]
    records = read_all(kafka_bootstrap, [f"{prefix}.{DB}.{t}" for t in TABLES])
    report = check_order(records, prefix, stream)
    dlq = read_all(kafka_bootstrap, [f"{prefix}.dlq"], idle_s=1.0)
    print(f"counted: readiness probes during the outage={len(samples)} answered 503/not-ready={len(not_ready)} "
          f"unanswered={sum(1 for s in samples if s[1] == 0)} redis=false={sum(1 for s in samples if s[3] is False)}")
    print(f"counted: redis errors before={errors_before:.0f} during={errors_seen:.0f}; source offsets committed "
          f"during the outage={committed_in_outage} (before it {BEFORE}); caught up {caught_up:.1f}s after SIGCONT")
    print(f"counted: produced={CHANGES} consumed={consumed:.0f} {report.line()} dlq topic={len(dlq)} "
          f"dlq metric={dlq_metric:.0f}")
    assert late and all(s[2] is not True for s in late), f"ready during the outage: {samples}"
    assert not_ready, f"/readyz never answered not-ready during the outage: {samples}"
    assert errors_seen > errors_before, "no Redis errors counted during the outage"
    assert committed_in_outage == BEFORE, "the worker committed offsets of messages it could not complete"
    assert report.missing == 0 and not report.out_of_order and not report.split_keys, report.line()
    assert report.changes - report.duplicates == CHANGES
    assert not dlq and dlq_metric == 0
