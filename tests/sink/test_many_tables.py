"""50 tables in every micro-batch (issue 16): each Iceberg table equals its expected state.

A history of inserts, updates, deletes and re-inserts over 50 tables (a topic each, 2
partitions) is produced as canonical records; the sink (``python -m sink --once``, the default
``table_parallelism``) reads it in micro-batches that each touch every table. The expected
state of every table is kept in plain Python while the history is generated, from the values
themselves (not by parsing the records).
"""

from __future__ import annotations

import random
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from service.local import LocalBroker, create_topics
from tests.sink.test_sink_integration import _run, _tables
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

TABLES = 50
CHANGES_PER_TABLE = 60
KEYS = 12


def _schema(i: int) -> TableSchema:
    return TableSchema(
        "many",
        None,
        f"t{i:02d}",
        (
            Column("id", ConnectType.INT64, False),
            Column("name", ConnectType.STRING),
            Column("qty", ConnectType.INT32),
            Column.decimal("amount", 10, 2),
        ),
        ("id",),
    )


def _history(seed: int) -> tuple[list[tuple[str, bytes | None, bytes | None]], dict[str, dict[int, dict[str, Any]]]]:
    """Records round-robin over the tables, and each table's expected rows by id."""
    rnd = random.Random(seed)
    opts = EmitOptions(prefix="cdcnorm")
    schemas = [_schema(i) for i in range(TABLES)]
    state: dict[str, dict[int, dict[str, Any]]] = {s.table: {} for s in schemas}
    records: list[tuple[str, bytes | None, bytes | None]] = []
    seq = 0
    for _ in range(CHANGES_PER_TABLE):
        for schema in schemas:
            seq += 1
            rows = state[schema.table]
            key = rnd.randrange(KEYS)
            row = {
                "id": key,
                "name": f"{schema.table}-{key}-{seq}",
                "qty": rnd.randrange(100),
                "amount": Decimal(rnd.randrange(100_000)) / 100,
            }
            source = SourceInfo("many", ts_ms=1_700_000_000_000 + seq, sequence=f"{seq:012d}")
            if key in rows and rnd.random() < 0.3:
                event = ChangeEvent(Operation.DELETE, schema, rows.pop(key), None, source)
            elif key in rows:
                event = ChangeEvent(Operation.UPDATE, schema, rows[key], row, source)
                rows[key] = row
            else:
                event = ChangeEvent(Operation.CREATE, schema, None, row, source)
                rows[key] = row
            topic = f"cdcnorm.many.{schema.table}"
            records.extend((topic, r.key_bytes(), r.value_bytes()) for r in emit([event], opts))
    return records, state


def test_fifty_tables_each_equal_their_expected_state(broker: LocalBroker, tmp_path: Path) -> None:
    records, state = _history(seed=16)
    create_topics(broker.address, sorted({t for t, _, _ in records}), partitions=2)
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 5})
    for topic, key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "broker": {"bootstrap_servers": broker.address},
        "topics": [{"name": "unused-source", "format": "canal-json"}],
        "sink": {
            "topic_pattern": r"cdcnorm\.many\..*",
            "group_id": "sink-many",
            "trigger_interval_seconds": 2,
            "max_records_per_batch": 100_000,
            "catalog": {"warehouse": str(tmp_path / "warehouse")},
            "maintenance": {"enabled": False},
        },
    }))
    proc = _run(config, "sink", "--once", timeout=480)
    lines = [line for line in proc.stdout.splitlines() if "batch: read=" in line]
    print("\n".join(lines))
    assert proc.returncode == 0, proc.stderr[-3000:]
    touched = [int(m[1]) for line in lines if (m := re.search(r" tables=(\d+) ", line))]
    assert sum(touched) >= TABLES, f"micro-batches touched {touched} tables"
    tables = _tables(config)
    compared = 0
    for name, want in state.items():
        got = tables[f"many.{name}"]["rows"]
        by_id = {r["id"]: r for r in got}
        assert len(by_id) == len(got), f"duplicate keys in many.{name}"
        assert set(by_id) == set(want), f"many.{name}: keys {sorted(by_id)} != {sorted(want)}"
        for key, row in want.items():
            assert by_id[key] == {**row, "amount": f"{row['amount']:.2f}"}, f"many.{name}[{key}]"
            compared += 1
    print(f"{len(records)} records over {TABLES} tables in {len(lines)} micro-batches; {compared} rows compared")
