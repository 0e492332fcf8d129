"""The worker's log at INFO never holds message payloads or secrets (``-m integration``).

One worker process (real Tansu, a real redis-server with ``--requirepass``) normalizes canal-json
messages whose values carry a distinctive marker, among them three bad ones that go to the DLQ;
then a bad message on an ``errors: fail`` topic stops it. The marker must show up in the output
and DLQ topics (the data did flow) and nowhere in the worker's log. The Redis password reaches
the worker from the environment (``${VAR}``): readiness needs Redis to answer PING with it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.local import create_topics, wait_for
from tests.security.conftest import SecuredRedis
from tests.service.harness import WorkerProcess, read_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MARKER = "PAYLOADMARK-7Qz3"  # inside the messages of the DLQ topic (good and bad ones)
FAIL_MARKER = "FAILMARK-5Rw8"  # inside the message that stops the worker (errors: fail)
GOOD = 20


def canal(rows: list[dict[str, Any]], kind: str = "INSERT", es: int = 1) -> bytes:
    return orjson.dumps(
        {
            "data": rows, "database": "shop", "table": "users", "pkNames": ["id"], "isDdl": False,
            "type": kind, "es": 1700000000000 + es, "ts": 1700000000000 + es,
            "mysqlType": {"id": "int", "name": "varchar(40)"}, "old": None,
        }
    )


BAD = [
    (f"key-{MARKER}".encode(), f"not json {MARKER}".encode()),  # invalid JSON
    (b"k", canal([{"id": f"{MARKER}-id", "name": "x"}])),  # a value that is not an int
    (b"k", orjson.dumps({"type": "MERGE", "note": MARKER, "data": [{"id": "1"}], "database": "shop",
                         "table": "users", "isDdl": False, "es": 1, "ts": 1})),  # unknown operation
]


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in messages:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(30) == 0


@dataclass
class Run:
    """What the scenario left behind for the assertions."""

    log: str
    dlq_topic_values: list[bytes]
    output_values: list[bytes]
    dlq_total: float
    records_out: float
    exit_code: int | None
    redis_password: str


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, auth_redis: SecuredRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    dlq_source, fail_source = f"{prefix}-src", f"{prefix}-fail"
    create_topics(kafka_bootstrap, [dlq_source, fail_source], partitions=1)
    messages: list[tuple[bytes | None, bytes]] = [
        (b"k", canal([{"id": str(i), "name": f"{MARKER}-{i}"}], es=i)) for i in range(GOOD)
    ]
    messages[5:5] = BAD
    produce(kafka_bootstrap, dlq_source, messages)
    config = {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": kafka_bootstrap, "session_timeout_s": 6},
        "redis": {"url": auth_redis.url, "key_prefix": f"cdcnorm:{prefix}:", "password": "${CDCNORM_T_WORKER_REDIS_PW}"},
        "worker": {"app_id": f"{prefix}-group", "commit_interval_s": 0.5, "log_level": "INFO"},
        "topics": [
            {"name": dlq_source, "format": "canal-json"},
            {"name": fail_source, "format": "canal-json", "errors": "fail"},
        ],
    }
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CDCNORM_T_WORKER_REDIS_PW", auth_redis.password)
        worker = WorkerProcess(config, Path(tmp_path_factory.mktemp("worker-logs")))
    try:
        worker.wait_ready(timeout_s=90)  # Redis answered PING with the password from the environment
        worker.wait_processed(dlq_source, len(messages), timeout_s=90)
        dlq_total = worker.total("cdcnorm_dlq_total", topic=dlq_source)
        records_out = worker.total("cdcnorm_records_out_total", topic=dlq_source)
        produce(kafka_bootstrap, fail_source, [(b"k", f'{{"type": "INSERT", "data": "{FAIL_MARKER}"'.encode())])
        wait_for(lambda: not worker.process.running, 60, "the worker to stop on errors: fail")
    finally:
        worker.stop()
    records = read_topics(kafka_bootstrap, [f"{prefix}.dlq", f"{prefix}.shop.users"])
    assert worker.process.log_path is not None
    result = Run(
        log=worker.process.log_path.read_text(errors="replace"),
        dlq_topic_values=[r.value or b"" for r in records if r.topic == f"{prefix}.dlq"],
        output_values=[r.value or b"" for r in records if r.topic == f"{prefix}.shop.users"],
        dlq_total=dlq_total,
        records_out=records_out,
        exit_code=worker.process.process.returncode,
        redis_password=auth_redis.password,
    )
    print(
        f"injected {GOOD} good + {len(BAD)} bad messages (marker {MARKER}) and 1 errors=fail message; "
        f"counted dlq={dlq_total:.0f} out={records_out:.0f} exit={result.exit_code}; "
        f"log {len(result.log.splitlines())} lines"
    )
    yield result


def test_the_data_flowed(run: Run) -> None:
    assert run.dlq_total == len(BAD)
    assert run.records_out == GOOD
    assert len(run.dlq_topic_values) == len(BAD)
    assert all(MARKER.encode() in v for v in run.dlq_topic_values)  # dead letters keep the payload
    assert sum(MARKER.encode() in v for v in run.output_values) == GOOD
    assert run.exit_code == 3
    assert run.log.count("dead-letter topic=") == len(BAD)  # the log does report each dead letter


def test_no_payload_in_the_info_log_on_the_dlq_path(run: Run) -> None:
    lines = [line for line in run.log.splitlines() if MARKER in line]
    assert not lines, f"payload in the worker log at INFO: {lines[:3]}"


def test_no_secret_in_the_worker_log(run: Run) -> None:
    assert run.redis_password not in run.log


def test_no_payload_in_the_log_when_errors_fail_stops_the_worker(run: Run) -> None:
    assert "stopping: message failed under errors=fail" in run.log
    lines = [line for line in run.log.splitlines() if FAIL_MARKER in line]
    assert not lines, f"payload in the worker log: {lines[:3]}"
