"""Schema evolution, pausing on incompatible changes, and maintenance, with a real broker (Apache Kafka) + local Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.local import LocalBroker, create_topics
from tests.catalogs import TestCatalog
from tests.sink.test_sink_integration import _config, _run, _tables
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _produce(bootstrap: str, events: list[ChangeEvent]) -> None:
    from confluent_kafka import Producer

    records = emit(events, EmitOptions(prefix="cdcnorm"))
    create_topics(bootstrap, sorted({r.topic for r in records}), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        producer.produce(r.topic, key=r.key_bytes(), value=r.value_bytes())
    assert producer.flush(30) == 0


def _src(seq: int) -> SourceInfo:
    return SourceInfo("test", ts_ms=1_700_000_000_000 + seq, sequence=f"{seq:08d}")


def test_widening_new_columns_and_incompatible_change_pauses_only_that_table(
    broker: LocalBroker, tmp_path: Path, catalog: TestCatalog
) -> None:
    key = Column("id", ConnectType.INT32, False)
    narrow = TableSchema("shop", None, "widen", (key, Column("n", ConnectType.INT32)), ("id",))
    wide = TableSchema("shop", None, "widen", (key, Column("n", ConnectType.INT64), Column("extra", ConnectType.STRING)), ("id",))
    good = TableSchema("shop", None, "steady", (key, Column("v", ConnectType.STRING)), ("id",))
    as_int = TableSchema("shop", None, "broken", (key, Column("v", ConnectType.INT64)), ("id",))
    as_text = TableSchema("shop", None, "broken", (key, Column("v", ConnectType.STRING)), ("id",))
    events = [
        ChangeEvent(Operation.CREATE, narrow, None, {"id": 1, "n": 5}, _src(1)),
        ChangeEvent(Operation.CREATE, as_int, None, {"id": 1, "v": 7}, _src(2)),
        ChangeEvent(Operation.CREATE, good, None, {"id": 1, "v": "a"}, _src(3)),
    ]
    _produce(broker.address, events)
    config = _config(tmp_path, broker.address, "sink-evolution", max_records=100, catalog=catalog)
    proc = _run(config, "sink", "--once")
    assert proc.returncode == 0, proc.stderr[-3000:]
    later = [
        ChangeEvent(Operation.UPDATE, wide, {"id": 1, "n": 5}, {"id": 1, "n": 2**40, "extra": "x"}, _src(4)),
        ChangeEvent(Operation.UPDATE, as_text, {"id": 1, "v": 7}, {"id": 1, "v": "not a number"}, _src(5)),
        ChangeEvent(Operation.CREATE, good, None, {"id": 2, "v": "b"}, _src(6)),
    ]
    _produce(broker.address, later)
    proc = _run(config, "sink", "--once")
    output = proc.stdout + proc.stderr
    print(output[-2500:])
    assert proc.returncode == 0, output[-3000:]
    assert "pausing table shop.broken" in output
    tables = _tables(config)
    # safe widening (int -> bigint) and a new column were applied
    assert tables["shop.widen"]["rows"] == [{"id": 1, "n": 2**40, "extra": "x"}]
    # the incompatible change left the stored row alone ...
    assert tables["shop.broken"]["rows"] == [{"id": 1, "v": 7}]
    # ... while the other tables went on
    assert sorted(r["id"] for r in tables["shop.steady"]["rows"]) == [1, 2]


def test_maintenance_keeps_the_small_file_count_bounded(broker: LocalBroker, tmp_path: Path, catalog: TestCatalog) -> None:
    # not "files": on a REST catalog a new table named like a metadata table cannot be created (README)
    table = TableSchema("shop", None, "small_files", (Column("id", ConnectType.INT32, False), Column("v", ConnectType.INT64)), ("id",))
    events = [ChangeEvent(Operation.CREATE, table, None, {"id": i, "v": i}, _src(i)) for i in range(1, 401)]
    events += [ChangeEvent(Operation.UPDATE, table, {"id": i, "v": i}, {"id": i, "v": -i}, _src(1000 + i)) for i in range(1, 401)]
    _produce(broker.address, events)
    config = _config(tmp_path, broker.address, "sink-files", max_records=60, catalog=catalog)  # ~14 micro-batches
    proc = _run(config, "sink", "--once", timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    batches = proc.stdout.count("batch: read=")
    info = _tables(config)["shop.small_files"]
    print(f"batches={batches} data_files={info['data_files']} delete_files={info['delete_files']} snapshots={info['snapshots']}")
    assert batches >= 10
    assert info["count"] == 400 and all(r["v"] == -r["id"] for r in info["rows"])
    # maintenance every 3 commits rewrites the small files: far fewer files than commits
    assert info["data_files"] + info["delete_files"] <= 6, info
