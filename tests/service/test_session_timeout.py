"""``broker.session_timeout_s`` outside the brokers' bounds stops the worker before it starts.

Kafka's group coordinator refuses a JoinGroup whose session timeout is below
``group.min.session.timeout.ms`` (6000 ms by default) with ``INVALID_SESSION_TIMEOUT``; aiokafka
logs it once and never joins, so a worker so configured would run and consume nothing (seen: a
worker with 4 s waited 90 s for its first message). The worker reads the bounds from the brokers
and exits 2 with the key, the value and why. Checked on a real Kafka.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.limits import session_timeout_refusal

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_brokers_bounds_decide(apache_kafka_bootstrap: str) -> None:
    client = {"bootstrap.servers": apache_kafka_bootstrap}
    assert session_timeout_refusal(client, 6, "broker.session_timeout_s") is None
    assert session_timeout_refusal(client, 30, "broker.session_timeout_s") is None
    low = session_timeout_refusal(client, 4, "broker.session_timeout_s")
    assert low is not None and low.startswith("broker.session_timeout_s: 4 (4000 ms) is below the brokers' "
                                              "group.min.session.timeout.ms (6000 ms)")
    high = session_timeout_refusal(client, 3600, "broker.session_timeout_s")
    assert high is not None and "above the brokers' group.max.session.timeout.ms (1800000 ms)" in high


def test_a_broker_that_does_not_answer_leaves_it_to_the_worker() -> None:
    assert session_timeout_refusal({"bootstrap.servers": "127.0.0.1:1"}, 4, "k", timeout_s=1) is None


def test_the_worker_exits_2_naming_the_setting(apache_kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "topic_prefix": "st",
        "broker": {"bootstrap_servers": apache_kafka_bootstrap, "session_timeout_s": 4},
        "redis": {"url": redis_url, "key_prefix": "st:"},
        "web": {"enabled": False},
        "worker": {"app_id": "session-timeout-check"},
        "topics": [{"name": "st-src", "format": "canal-json"}],
    }))
    done = subprocess.run([sys.executable, "-m", "cdcnorm.cli", "worker", "--config", str(config)],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "worker not started: broker.session_timeout_s: 4 (4000 ms) is below the brokers' " \
           "group.min.session.timeout.ms (6000 ms)" in done.stderr
    assert "Traceback" not in done.stderr
