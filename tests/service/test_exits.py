"""The worker's stop deadline (service.exits): a stop stuck past ``worker.shutdown_timeout_s``
ends the process with exit code 4 and logs the stacks of the tasks still running."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from service.config import parse_config
from service.exits import EXIT_FATAL, EXIT_STOP_DEADLINE
from service.local import create_topics
from tests.service.harness import WorkerProcess
from tests.service.test_integration import base_config, canal, produce
from transforms.errors import ConfigError

STUCK = textwrap.dedent(
    """
    import asyncio, logging, sys
    from service.exits import StopDeadline

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    async def last_commit_to_a_dead_coordinator() -> None:
        await asyncio.Event().wait()  # never answered

    async def main() -> None:
        deadline = StopDeadline(0.5, asyncio.get_running_loop())
        deadline.start()  # the stop begins
        await asyncio.create_task(last_commit_to_a_dead_coordinator(), name="commit")

    asyncio.run(main())
    """
)


def test_a_stuck_stop_exits_at_the_deadline_and_names_what_was_running() -> None:
    done = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=30)
    assert done.returncode == EXIT_STOP_DEADLINE == 4
    assert "worker stop did not finish within worker.shutdown_timeout_s=0.5s; exiting with code 4" in done.stderr
    assert "last_commit_to_a_dead_coordinator" in done.stderr  # the stuck task's stack


def test_a_stop_that_finishes_cancels_the_deadline() -> None:
    code = STUCK.replace("await asyncio.create_task(last_commit_to_a_dead_coordinator(), name=\"commit\")",
                         "await asyncio.sleep(0.1); deadline.cancel(); await asyncio.sleep(1.0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "did not finish" not in done.stderr


def test_the_deadline_is_a_checked_setting() -> None:
    raw = {"topic_prefix": "p", "topics": [{"name": "a", "format": "canal-json"}]}
    assert parse_config(raw).worker.shutdown_timeout_s == 30.0
    with pytest.raises(ConfigError) as info:  # one error: key, value and why
        parse_config({**raw, "worker": {"shutdown_timeout_s": 0}})
    assert (info.value.key, info.value.value) == ("worker.shutdown_timeout_s", 0)
    assert "greater than 0" in info.value.reason


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_worker_whose_stop_outlasts_its_deadline_exits_4_and_logs_why(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """The deadline wired into ``cdcnorm worker``: with ``shutdown_timeout_s`` shorter than any
    real stop (the consumer's last commit and leaving the group take longer than 50 ms), a
    SIGTERMed worker ends by the deadline, with the log line and the stacks still running."""
    prefix = f"sd{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    create_topics(kafka_bootstrap, [source], partitions=1)
    produce(kafka_bootstrap, source, [(b"k", canal("INSERT", [{"id": "1", "name": "a", "email": "a@x"}]))], partition=0)
    config = base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    config.setdefault("worker", {})["shutdown_timeout_s"] = 0.05
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready()
        worker.wait_processed(source, 1)
        worker.process.process.send_signal(signal.SIGTERM)
        code = worker.process.process.wait(30)
    finally:
        if worker.process.running:
            worker.process.process.kill()
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert code == EXIT_STOP_DEADLINE, log[-3000:]
    assert "worker stop did not finish within worker.shutdown_timeout_s=0.05s; exiting with code 4" in log
    assert "Stack for <Task" in log  # what was still running


def test_a_worker_that_cannot_reach_its_broker_exits_3_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    """Nothing listens on the bootstrap port: Faust's start fails; the worker says so in one
    CRITICAL line and exits 3 (a fatal error), not 0 after a traceback."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"topic_prefix: p\nbroker: {{bootstrap_servers: '127.0.0.1:{port}'}}\n"
        "topics: [{name: a, format: canal-json}]\nmetadata_log: {enabled: false}\nweb: {enabled: false}\n"
    )
    done = subprocess.run([sys.executable, "-m", "cdcnorm.cli", "worker", "-c", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_FATAL == 3, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    [line] = [x for x in done.stderr.splitlines() if "CRITICAL" in x]
    assert f"worker stopped: the worker could not start: KafkaConnectionError: Unable to bootstrap from [('127.0.0.1', {port}" in line
