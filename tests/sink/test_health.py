"""The sink's liveness and readiness (sink.health), its HTTP endpoints on the metrics port, the
per-partition lag and the progress line, without a broker or Spark."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
from prometheus_client import REGISTRY

from sink.config import SinkConfig
from sink.health import SinkHealth, serve
from sink.plan import Partitions
from sink.runner import BatchReport, MicroBatchSink
from tests.clock import Clock

STALL = 60.0


@pytest.fixture
def health(clock: Clock) -> SinkHealth:
    return SinkHealth(STALL, clock=clock)


def test_an_idle_sink_is_alive_however_long_nothing_arrives(health: SinkHealth, clock: Clock) -> None:
    health.observe_lag(0)
    clock.now += 10 * STALL
    health.observe_lag(None)  # lag unknown (no partition assigned, no watermark yet)
    clock.now += 10 * STALL
    assert health.liveness()[0]
    assert health.seconds_since_progress() == 0.0


def test_a_batch_in_flight_for_longer_than_the_stall_fails_liveness(health: SinkHealth, clock: Clock) -> None:
    clock.now += 10 * STALL  # idle before: the stall clock starts with the batch, not before
    health.batch_started(500)
    clock.now += STALL - 1
    assert health.liveness()[0]
    clock.now += 2
    live, body = health.liveness()
    assert not live
    assert body["reason"] == "no progress for 61s with a micro-batch of 500 records in flight (sink.liveness_stall_seconds: 60)"
    health.committed()
    health.observe_lag(0)
    assert health.liveness()[0] and health.last_commit is not None


def test_lag_without_progress_fails_liveness_until_a_commit(health: SinkHealth, clock: Clock) -> None:
    health.observe_lag(1200)  # records to read, and polls bring nothing
    clock.now += STALL / 2
    health.observe_lag(1300)
    clock.now += STALL / 2 + 1
    live, body = health.liveness()
    assert not live and "lag 1300" in body["reason"]
    assert health.seconds_since_progress() == pytest.approx(STALL + 1)
    health.batch_started(100)  # reading again: still no commit, the clock keeps running
    assert not health.liveness()[0]
    health.committed()
    health.observe_lag(1200)  # still behind, but progressing
    assert health.liveness()[0]
    clock.now += STALL + 1
    assert not health.liveness()[0]


def test_readiness_follows_start_and_stop(health: SinkHealth) -> None:
    assert health.readiness()[1]["reason"].startswith("starting")
    health.started = True
    assert health.readiness()[0]
    health.stopping = True
    assert health.readiness() == (False, {"ready": False, "started": True, "stopping": True, "reason": "stopping"})


def test_a_sink_retrying_failed_writes_is_alive_but_not_ready(health: SinkHealth, clock: Clock) -> None:
    health.started = True
    health.batch_started(300)
    for _ in range(5):  # attempts come back (failed) more often than the stall: alive
        clock.now += STALL - 1
        health.write_failed("table shop.t0: permission-denied: java.io.FileNotFoundException: m0.avro", 8.0)
        live, body = health.liveness()
        assert live and body["write_failing"] is True
    assert health.seconds_since_progress() == pytest.approx(5 * (STALL - 1))  # the metric: no commit
    ready, body = health.readiness()
    assert not ready and body["failed_attempts"] == 5
    assert "table shop.t0: permission-denied" in body["reason"] and "Kafka offsets are not committed" in body["reason"]
    clock.now += STALL + 1  # an attempt that hangs: not alive
    assert not health.liveness()[0]
    health.committed()
    assert health.readiness()[0] and "write_failure" not in health.readiness()[1]
    assert health.liveness()[0] and "write_failing" not in health.liveness()[1]


@pytest.fixture
def server(health: SinkHealth) -> Iterator[str]:
    srv = serve(0, health, addr="127.0.0.1")
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_endpoints_on_the_metrics_port(server: str, health: SinkHealth, clock: Clock) -> None:
    status, body = _get(server + "/readyz")
    assert status == 503 and orjson.loads(body)["ready"] is False
    health.started = True
    assert _get(server + "/readyz")[0] == 200
    status, body = _get(server + "/healthz")
    assert status == 200 and orjson.loads(body)["live"] is True
    health.batch_started(7)
    clock.now += STALL + 5
    status, body = _get(server + "/healthz")
    assert status == 503
    assert orjson.loads(body)["reason"].startswith("no progress for 65s with a micro-batch of 7 records in flight")
    status, body = _get(server + "/metrics")
    assert status == 200
    text = body.decode()
    assert "# HELP cdcnorm_sink_lag " in text and "Best effort" in text
    assert "# TYPE cdcnorm_sink_last_commit_timestamp_seconds gauge" in text
    assert "cdcnorm_sink_seconds_since_progress" in text
    assert _get(server + "/nope")[0] == 404


# ----------------------------------------------------------------------------- the loop's side


def _lag_sink(positions: dict[tuple[str, int], int], watermarks: dict[tuple[str, int], int]) -> MicroBatchSink:
    """A sink whose partitions have been read up to ``positions`` and whose last plan saw
    these high ``watermarks`` (no broker: the lag is computed from what the plan recorded)."""
    sink = MicroBatchSink(SinkConfig.from_section({"topics": ["t"]}), "unused:9092")
    sink.partitions = Partitions(consumer=None, admin=None)
    sink.partitions.positions.update(positions)
    sink.partitions.watermarks.update(watermarks)
    return sink


def _gauge(topic: str, partition: int) -> float | None:
    return REGISTRY.get_sample_value("cdcnorm_sink_lag", {"topic": topic, "partition": str(partition)})


def test_lag_per_partition_and_in_total() -> None:
    sink = _lag_sink(
        {("lag.a", 0): 90, ("lag.a", 1): 120, ("lag.b", 0): 20, ("lag.c", 0): 5, ("lag.d", 0): 7},
        # lag.a 1: a broker under-reporting (Tansu): 0, not -20; lag.d: no watermark asked yet
        {("lag.a", 0): 100, ("lag.a", 1): 100, ("lag.b", 0): 50, ("lag.c", 0): 500},
    )
    assert sink.partitions is not None
    sink.partitions.paused.add(("lag.c", 0))  # a paused table's partition: shown, not counted
    assert sink._observe_lag() == 10 + 0 + 30
    assert [_gauge("lag.a", 0), _gauge("lag.a", 1), _gauge("lag.b", 0), _gauge("lag.c", 0), _gauge("lag.d", 0)] == [
        10, 0, 30, 495, None
    ]
    del sink.partitions.positions[("lag.a", 1)]  # revoked: its series goes
    sink._observe_lag()
    assert _gauge("lag.a", 1) is None


def test_no_assignment_means_unknown_lag() -> None:
    assert _lag_sink({}, {})._observe_lag() is None


def test_the_progress_line_keeps_its_fields_and_adds_rate_lag_and_tables() -> None:
    report = BatchReport(rows_read=1000, changes=900, upserts=800, deletes=100, seconds=2.0, lag=42,
                         tables=[f"db.t{i}" for i in range(10)])
    line = report.line()
    assert re.match(r"batch: read=1000 changes=900 upserts=800 deletes=100 appends=0 truncates=0 tables=10 "
                    r"commit=0\.00s freshness=- ", line), line
    assert " rows/s=500 jobs=0.00s+0.00s lag=42 touched=db.t0,db.t1,db.t2,db.t3,db.t4,db.t5,db.t6,db.t7,+2" in line
    report.read_seconds, report.files_seconds, report.row_deltas, report.merges = 0.5, 0.25, 9, 1
    assert " jobs=0.50s+0.25s " in report.line() and " row_deltas=9 merges=1" in report.line()
    assert "lag=- touched=-" in BatchReport(rows_read=1).line()


def test_the_runner_reports_progress_to_its_health() -> None:
    sink = MicroBatchSink(SinkConfig.from_section({"topics": ["t"], "liveness_stall_seconds": 30}), "unused:9092")
    assert sink.health.stall_seconds == 30
    assert REGISTRY.get_sample_value("cdcnorm_sink_seconds_since_progress") == 0.0
    sink.health.batch_started(3)
    sink.health.since -= 12
    assert REGISTRY.get_sample_value("cdcnorm_sink_seconds_since_progress") == pytest.approx(12, abs=1)
    sink.stop()
    assert sink.health.stopping


