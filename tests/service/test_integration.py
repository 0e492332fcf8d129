"""The worker against a real broker (Apache Kafka; :mod:`tests.brokers`) and a real Redis (``-m integration``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.dlq import (
    ERROR_CLASS,
    ERROR_MESSAGE,
    ERROR_OFFSET,
    ERROR_PARTITION,
    ERROR_STACKTRACE,
    ERROR_TOPIC,
    FORMAT_HEADER,
    ROW_INDEX,
)
from service.local import create_topics
from tests.conftest import assert_connect_accepts
from tests.service.harness import ROOT, Record, WorkerProcess, list_topics, read_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DATA = ROOT / "tests" / "data"
TYPES = {"id": "int", "name": "varchar(10)", "email": "varchar(20)"}
SQL_TYPES = {"id": 4, "name": 12, "email": 12}


def canal(kind: str, rows: list[dict[str, Any]], old: list[dict[str, Any]] | None = None, es: int = 1) -> bytes:
    return orjson.dumps(
        {
            "data": rows,
            "database": "shop",
            "table": "users",
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": 1700000000000 + es,
            "ts": 1700000000000 + es,
            "mysqlType": TYPES,
            "sqlType": SQL_TYPES,
            "old": old,
        }
    )


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes | None]], partition: int | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in messages:
        if partition is None:
            producer.produce(topic, value=value, key=key)
        else:
            producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


def base_config(bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": bootstrap, "session_timeout_s": 6},
        "redis": {"url": redis_url, "key_prefix": redis_prefix},
        "worker": {"app_id": f"{prefix}-group", "commit_interval_s": 0.5},
        "topics": topics,
    }


def assert_records_accepted(checker: Any, records: list[Record]) -> None:
    """The worker's normalized records (not the dead letters: those are the original bytes) pass
    the real Kafka Connect JsonConverter and Debezium's ExtractNewRecordState."""
    normalized = [(r.topic, r.key, r.value) for r in records if not r.topic.endswith(".dlq")]
    assert normalized
    assert_connect_accepts(checker, normalized, "records the worker produced")


@pytest.fixture
def prefix() -> str:
    return f"it{uuid.uuid4().hex[:8]}"


def test_canal_end_to_end_keys_partitions_tombstones_dlq(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, tmp_path: Path, connect_checker: Any
) -> None:
    source = f"{prefix}-src"
    create_topics(kafka_bootstrap, [source], partitions=1)
    ddl = (DATA / "canal-json" / "seed-ddl.txt").read_bytes().strip()
    messages: list[tuple[bytes | None, bytes | None]] = []
    for i in range(1, 21):
        messages.append((b"k", canal("INSERT", [{"id": str(i), "name": f"n{i}", "email": f"{i}@x"}], es=i)))
    messages.append((b"bad-key", b'{"this is": not json'))
    for i in range(1, 21):
        messages.append((b"k", canal("UPDATE", [{"id": str(i), "name": f"m{i}", "email": f"{i}@x"}], [{"name": f"n{i}"}], es=100 + i)))
    messages.append((None, ddl))
    for i in range(1, 11):
        messages.append((b"k", canal("DELETE", [{"id": str(i), "name": f"m{i}", "email": f"{i}@x"}], es=200 + i)))
    # 9 rows, one bad value ("A101" in the int id column): 8 rows emitted, one dead letter
    nine = [{"id": str(i), "name": f"n{i}", "email": f"{i}@x"} for i in range(21, 30)]
    nine[7]["id"] = "A101"
    messages.append((b"nine", canal("INSERT", nine, es=300)))
    produce(kafka_bootstrap, source, messages, partition=0)

    worker = WorkerProcess(
        base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}]),
        tmp_path,
    )
    try:
        worker.wait_ready()
        worker.wait_processed(source, len(messages))
        assert worker.total("cdcnorm_dlq_total", topic=source) == 2
        assert worker.total("cdcnorm_records_out_total", topic=source) == 20 + 20 + 1 + 20 + 8
        status, _ = worker.get("/healthz")
        assert status == 200
    finally:
        worker.stop()

    table_topic = f"{prefix}.shop.users"
    create_topics(kafka_bootstrap, [table_topic])  # exists already (4 partitions on produce)
    records = read_topics(kafka_bootstrap, [table_topic, prefix, f"{prefix}.dlq"])
    assert_records_accepted(connect_checker, records)
    data = [r for r in records if r.topic == table_topic]
    assert len(data) == 20 + 20 + 10 + 10 + 8
    by_key: dict[int, list[Any]] = defaultdict(list)
    partitions: dict[int, set[int]] = defaultdict(set)
    for r in sorted(data, key=lambda r: (r.partition, r.offset)):
        key = r.key_json
        assert key["schema"]["name"] == f"{prefix}.shop.users.Key"
        kid = key["payload"]["id"]
        partitions[kid].add(r.partition)
        by_key[kid].append(None if r.value is None else r.value_json["payload"]["op"])
    assert all(len(p) == 1 for p in partitions.values()), "one key, one partition"
    assert len({p for ps in partitions.values() for p in ps}) > 1, "keys spread over partitions"
    for kid in range(1, 21):
        expected = ["c", "u", "d", None] if kid <= 10 else ["c", "u"]
        assert by_key[kid] == expected, kid
    assert {kid: by_key[kid] for kid in range(21, 30) if kid in by_key} == {
        kid: ["c"] for kid in range(21, 30) if kid != 28
    }
    update = next(r.value_json["payload"] for r in data if r.value and r.value_json["payload"]["op"] == "u")
    assert update["before"]["name"].startswith("n") and update["after"]["name"].startswith("m")
    assert update["source"]["connector"] == "canal-json" and update["source"]["name"] == prefix

    schema_changes = [r for r in records if r.topic == prefix]
    assert len(schema_changes) == 1
    assert schema_changes[0].value_json["payload"]["ddl"] == "eg: create xxx"

    dlq = [r for r in records if r.topic == f"{prefix}.dlq"]
    assert len(dlq) == 2
    row_letter = next(r for r in dlq if r.key == b"nine")
    assert row_letter.value == messages[-1][1]  # the whole original message
    assert row_letter.headers[ROW_INDEX] == b"7"
    assert row_letter.headers[ERROR_OFFSET] == str(len(messages) - 1).encode()
    assert b"data[7].id" in row_letter.headers[ERROR_MESSAGE]
    letter = next(r for r in dlq if r.key == b"bad-key")
    assert letter.key == b"bad-key" and letter.value == b'{"this is": not json'
    assert letter.headers[ERROR_TOPIC] == source.encode()
    assert letter.headers[ERROR_PARTITION] == b"0"
    assert letter.headers[ERROR_OFFSET] == b"20"
    assert letter.headers[ERROR_CLASS] == b"transforms.errors.DecodeError"
    assert letter.headers[ERROR_MESSAGE].startswith(b"canal-json")
    assert b"Traceback" in letter.headers[ERROR_STACKTRACE]
    assert letter.headers[FORMAT_HEADER] == b"canal-json"


SHAREPLEX_INSERT = (
    b'{"meta":{"time":"2017-06-16T14:24:34Z","op":"INSERT","scn":"1","rowid":"AAA","trans":"7.0.1","seq":1,'
    b'"table":"CL_BIZ1.MIO_LOG","idx":"1/2"},"data":{"MIO_LOG_ID":"1","AMOUNT":"10.50","NOTE":"first","CNTR_NO":null}}'
)
SHAREPLEX_UPDATE = (
    b'{"meta":{"time":"2017-06-16T14:24:35Z","op":"UPDATE","scn":"2","rowid":"AAA","trans":"7.0.1","seq":2,'
    b'"table":"CL_BIZ1.MIO_LOG","idx":"2/2"},"data":{"NOTE":"second"},"key":{"MIO_LOG_ID":"1","NOTE":"first"}}'
)


def test_partial_image_completion(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, tmp_path: Path, connect_checker: Any
) -> None:
    on, off = f"{prefix}-on", f"{prefix}-off"
    create_topics(kafka_bootstrap, [on, off], partitions=1)
    for topic in (on, off):
        produce(kafka_bootstrap, topic, [(None, SHAREPLEX_INSERT), (None, SHAREPLEX_UPDATE)], partition=0)
    options = {"key.columns": "MIO_LOG_ID"}
    topics = [
        {"name": on, "format": "shareplex-json", "options": options, "complete_partial_images": True,
         "topic_template": "{prefix}.on.{table}"},
        {"name": off, "format": "shareplex-json", "options": options, "topic_template": "{prefix}.off.{table}"},
    ]
    worker = WorkerProcess(base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, topics), tmp_path)
    try:
        worker.wait_ready()
        worker.wait_processed(on, 2)
        worker.wait_processed(off, 2)
    finally:
        worker.stop()
    records = read_topics(kafka_bootstrap, [f"{prefix}.on.MIO_LOG", f"{prefix}.off.MIO_LOG"])
    assert_records_accepted(connect_checker, records)
    updates = {r.topic: r.value_json["payload"] for r in records if r.value and r.value_json["payload"]["op"] == "u"}
    completed = updates[f"{prefix}.on.MIO_LOG"]["after"]
    placeholder = updates[f"{prefix}.off.MIO_LOG"]["after"]
    assert completed["NOTE"] == "second" and placeholder["NOTE"] == "second"
    assert completed["CNTR_NO"] is None
    assert completed["AMOUNT"] not in (None, "__debezium_unavailable_value")
    assert placeholder["AMOUNT"] == "__debezium_unavailable_value"
    assert placeholder["CNTR_NO"] == "__debezium_unavailable_value"


def test_two_workers_share_qlik_metadata_through_redis(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, tmp_path: Path, connect_checker: Any
) -> None:
    lines = (DATA / "qlik-json" / "vectors-metadata-then-data.txt").read_bytes().splitlines()
    metadata, data = lines[0], lines[1]
    source = f"{prefix}-qlik"
    create_topics(kafka_bootstrap, [source], partitions=2)
    config = base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "qlik-json"}])
    workers = [WorkerProcess(config, tmp_path, f"worker{i}") for i in range(2)]
    try:
        for w in workers:
            w.wait_ready(partitions=1)
        owner = {
            int(tp.rsplit("[", 1)[1].rstrip("]")): w
            for w in workers
            for tp in w.readiness()["assigned_partitions"]
        }
        assert set(owner) == {0, 1} and owner[0] is not owner[1]
        produce(kafka_bootstrap, source, [(None, metadata)], partition=0)
        owner[0].wait_processed(source, 1)
        produce(kafka_bootstrap, source, [(None, data)], partition=1)
        owner[1].wait_processed(source, 1)
        assert owner[1].total("cdcnorm_dlq_total") == 0
        assert owner[1].total("cdcnorm_records_out_total", topic=source) >= 1
        assert owner[0].total("cdcnorm_messages_in_total", topic=source) == 1
    finally:
        for w in workers:
            w.stop()
    outputs = [t for t in list_topics(kafka_bootstrap, prefix) if t.endswith(".salaries")]
    records = read_topics(kafka_bootstrap, outputs)
    assert_records_accepted(connect_checker, records)
    rows = [r.value_json["payload"] for r in records if r.value]
    assert rows and rows[0]["after"]["emp_no"] == 14472
    assert rows[0]["source"]["connector"] == "qlik-json"


def test_errors_fail_stops_the_worker_without_committing(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, tmp_path: Path
) -> None:
    source = f"{prefix}-strict"
    create_topics(kafka_bootstrap, [source], partitions=1)
    good = canal("INSERT", [{"id": "1", "name": "a", "email": "a@x"}])
    produce(kafka_bootstrap, source, [(None, good), (None, b"garbage"), (None, good)], partition=0)
    config = base_config(kafka_bootstrap, redis_url, redis_prefix, prefix,
                         [{"name": source, "format": "canal-json", "errors": "fail"}])
    worker = WorkerProcess(config, tmp_path)
    try:
        assert worker.process.process.wait(60) == 3
    finally:
        worker.stop()
    log = worker.process.log_tail(400)
    assert "errors=fail" in log and "offset=1" in log
    records = read_topics(kafka_bootstrap, [f"{prefix}.shop.users", f"{prefix}.dlq"])
    assert [r.topic for r in records] == [f"{prefix}.shop.users"]
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": config["worker"]["app_id"]})
    committed = consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset
    consumer.close()
    assert committed in (-1001, 1), committed


def run_up(*args: str) -> str:
    """``cdcnorm up ARGS`` (90 s at most); its output, which must say every sample was
    processed, with no dead letter, and show the sink's Iceberg tables."""
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    env |= {k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "HOME", "CDCNORM_CACHE_DIR", "XDG_CACHE_HOME")}
    result = subprocess.run(
        [sys.executable, "-m", "cdcnorm.cli", "up", "--duration", "90", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=420, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "all samples processed" in out
    lines = out.splitlines()
    first_table_end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    rows = [line for line in lines[:first_table_end] if line.startswith("│")]
    assert {"canal-json", "debezium-json", "qlik-json"} <= {r.split("│")[1].strip() for r in rows}
    # the sink ran over the normalized topics and the Iceberg tables are shown
    assert "Iceberg tables" in out
    assert any(line.startswith("│ tpch.region") for line in lines[first_table_end:]), out[-3000:]
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        produced, seen, dlq = int(cells[2]), int(cells[3]), int(cells[5])
        assert seen == produced and dlq == 0, row
    return out


@pytest.mark.timeout(480)
def test_cdcnorm_up_starts_its_own_broker(redis_url: str) -> None:
    """``cdcnorm up --broker kafka --catalog rest``: the broker and the REST catalog server are
    started by ``up`` itself (nothing answers at the address given), named in the summary, and
    stopped; the tables are read back through the catalog."""
    from service.local import free_port

    out = run_up("--broker", "kafka", "--catalog", "rest", "--bootstrap", f"127.0.0.1:{free_port()}",
                 "--redis-url", redis_url, "--topic-prefix", f"up{uuid.uuid4().hex[:6]}")
    assert "broker: Apache Kafka 4." in out, out[-3000:]
    assert "the broker started by `up` is stopped now" in out
    assert "Iceberg tables, read back through the rest catalog at " in out, out[-3000:]


@pytest.mark.timeout(480)
def test_make_up_keeps_the_pipeline_running_to_look_at(redis_url: str) -> None:
    """``make up`` (``cdcnorm up --keep``, Tansu, a hadoop catalog): once every sample is through
    it prints the summary and the tables while the pipeline runs on, with the `cdcnorm tail`
    command to look at the records; that command works then; Ctrl-C stops everything quickly.
    Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group. The services
    `up` started have sessions of their own, so `up` stops them in order (the worker flushes to
    the broker before the broker goes) instead of all of them dying at once."""
    from service.local import broker_reachable, free_port

    prefix = f"up{uuid.uuid4().hex[:6]}"
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    env |= {k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "HOME", "CDCNORM_CACHE_DIR", "XDG_CACHE_HOME")}
    up = subprocess.Popen(
        [sys.executable, "-m", "cdcnorm.cli", "up", "--keep", "--bootstrap", f"127.0.0.1:{free_port()}",
         "--redis-url", redis_url, "--topic-prefix", prefix],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert up.stdout is not None
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.strip().startswith("cdcnorm tail "):
                break
        out = "\n".join(lines)
        assert "the pipeline keeps running; in another terminal look at the records with:" in out, out[-3000:]
        assert "broker: Tansu (memory only)" in out and "all samples processed" in out
        assert "Iceberg tables, read back through the hadoop catalog at " in out
        look = lines[-1].strip().split()
        assert look[:2] == ["cdcnorm", "tail"] and look[2] == f"{prefix}.tpch.region"
        bootstrap = look[look.index("--bootstrap") + 1]
        shown = subprocess.run([sys.executable, "-m", "cdcnorm.cli", *look[1:], "--count", "2"],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert len(shown.stdout.splitlines()) == 2 and '"op"' in shown.stdout
        assert up.poll() is None  # still running
        stopping = time.monotonic()
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C: the terminal signals its foreground process group
        rest, _ = up.communicate(timeout=60)
        took = time.monotonic() - stopping
    finally:
        if up.poll() is None:
            up.kill()
    print(f"Ctrl-C to exit: {took:.1f}s; exit code {up.returncode}")
    assert up.returncode == 0, rest[-3000:]
    assert "stopped everything `up` started" in rest and "error:" not in rest, rest[-3000:]
    assert took < 30
    assert not broker_reachable(bootstrap, 2.0)  # the broker it started is gone


@pytest.mark.timeout(480)
def test_cdcnorm_up_runs_the_samples(kafka_bootstrap: str, redis_url: str, connect_checker: Any) -> None:
    up_prefix = f"up{uuid.uuid4().hex[:6]}"
    out = run_up("--bootstrap", kafka_bootstrap, "--redis-url", redis_url, "--topic-prefix", up_prefix)
    assert f"broker: {kafka_bootstrap}" in out
    # every record `up` wrote to the normalized topics passes the real Connect runtime
    normalized = [t for t in list_topics(kafka_bootstrap, up_prefix) if not t.endswith(".dlq")]
    records = read_topics(kafka_bootstrap, normalized)
    assert len(records) > 100
    assert_records_accepted(connect_checker, records)
