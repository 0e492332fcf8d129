"""The Spark tasks' side of a micro-batch without Spark: per-table summaries, and the files the
write tasks make (pyarrow, read back here), from parsed canonical records."""

from __future__ import annotations

import datetime as dt
import pickle
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sink.arrow import FIELD_ID
from sink.changes import SinkChange, parse_record
from sink.source import BadRecord, RangeRead
from sink.tasks import (
    DeletedKeysFile,
    TableFiles,
    TablePlan,
    TableSummary,
    TaskSummary,
    first_item,
    seq_class,
    write_partition,
    write_tables,
)
from tests.sink.history import EVENTS, ORDERS
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

# the Iceberg schema of the orders table as the driver sends it (SchemaParser.toJson)
ORDERS_SCHEMA = (
    '{"type":"struct","schema-id":0,"fields":['
    '{"id":1,"name":"id","required":true,"type":"long"},'
    '{"id":2,"name":"customer","required":false,"type":"string"},'
    '{"id":3,"name":"amount","required":false,"type":"decimal(10, 2)"},'
    '{"id":4,"name":"created","required":false,"type":"timestamp"},'
    '{"id":5,"name":"day","required":false,"type":"date"},'
    '{"id":6,"name":"__cdc_seq","required":false,"type":"string"},'
    '{"id":7,"name":"__cdc_ts_ms","required":false,"type":"long"}]}'
)
EVENTS_SCHEMA = (
    '{"type":"struct","schema-id":0,"fields":['
    '{"id":1,"name":"msg","required":false,"type":"string"},'
    '{"id":2,"name":"n","required":false,"type":"long"},'
    '{"id":3,"name":"__cdc_seq","required":false,"type":"string"},'
    '{"id":4,"name":"__cdc_ts_ms","required":false,"type":"long"},'
    '{"id":5,"name":"__cdc_op","required":false,"type":"string"}]}'
)
MEMORY_SCHEMA = (
    '{"type":"struct","schema-id":0,"fields":['
    '{"id":1,"name":"__cdc_table","required":false,"type":"string"},'
    '{"id":2,"name":"__cdc_key","required":false,"type":"string"},'
    '{"id":3,"name":"__cdc_seq","required":false,"type":"string"},'
    '{"id":4,"name":"__cdc_deleted_at","required":false,"type":"timestamptz"}]}'
)
NOW = dt.datetime(2026, 1, 1, 12)


def _order(oid: int, customer: str) -> dict[str, Any]:
    return {"id": oid, "customer": customer, "amount": Decimal("1.50") * oid, "created": dt.datetime(2024, 1, 1),
            "day": dt.date(2024, 1, 2)}


def _changes(events: list[ChangeEvent], partition: int = 0) -> list[SinkChange]:
    out = []
    for offset, rec in enumerate(emit(events, EmitOptions(prefix="cdcnorm"))):
        ch = parse_record(rec.topic, partition, offset, rec.key_bytes(), rec.value_bytes())
        if ch is not None:
            out.append(ch)
    return out


def _src(seq: int) -> SourceInfo:
    return SourceInfo("shop", ts_ms=1_700_000_000_000 + seq, sequence=f"{seq:012d}")


HISTORY = [
    ChangeEvent(Operation.CREATE, ORDERS, None, _order(1, "a"), _src(1)),
    ChangeEvent(Operation.CREATE, ORDERS, None, _order(2, "b"), _src(2)),
    ChangeEvent(Operation.UPDATE, ORDERS, _order(1, "a"), _order(1, "a2"), _src(3)),
    ChangeEvent(Operation.DELETE, ORDERS, _order(2, "b"), None, _src(4)),
    ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "one", "n": 1}, _src(5)),
]


def test_a_summary_holds_what_the_driver_decides_on() -> None:
    changes = _changes(HISTORY)
    summary = TaskSummary(3)  # as read_partition adds each item a read task yields
    for item in [*changes, RangeRead("cdcnorm.shop.orders", 0, 0, 9, 9, True), BadRecord("cdcnorm.shop.orders", 0, 8, "not JSON")]:
        summary.add(item)
    assert summary.index == 3 and summary.bad_count == 1 and len(summary.reads) == 1
    orders = summary.tables[("shop", "orders")]
    assert orders.changes == 4 and orders.key_columns == ("id",)
    assert list(orders.columns) == ["id", "customer", "amount", "created", "day"]
    assert orders.oldest == {"s": "s000000000001"} and orders.newest == {"s": "s000000000004"}
    assert not orders.partial and orders.truncate_seq is None
    assert orders.newest_ts_ms == 1_700_000_000_004
    assert summary.tables[("shop", "events")].key_columns == ()
    # summaries of two tasks fold into one
    other = TableSummary(("shop", "orders"), changes=1, oldest={"s": "s000000000000"}, newest={"s": "s000000000009"},
                         offsets={("cdcnorm.shop.orders", 1): (4, 7)})
    orders.merge(other)
    assert orders.changes == 5 and orders.oldest == {"s": "s000000000000"} and orders.newest == {"s": "s000000000009"}
    assert orders.offsets[("cdcnorm.shop.orders", 1)] == (4, 7)


def test_a_read_partition_yields_its_summary_first() -> None:
    """The driver takes each cached partition's first item only (first_item)."""
    summary, *rest = [TaskSummary(4), *_changes(HISTORY)]
    assert first_item(iter([summary, *rest])) == [summary] and first_item(iter([])) == [None]
    assert pickle.loads(pickle.dumps(summary)).index == 4


def test_sequence_classes() -> None:
    assert seq_class("s000000000004") == "s"
    assert seq_class("k0012:00000000000000000004") == "k0012"


def _plans(tmp_path: Path, applied: dict[str, int] | None = None) -> dict[tuple[str, str], TablePlan]:
    return {
        ("shop", "orders"): TablePlan(("shop", "orders"), "shop.orders", f"file:{tmp_path}/orders", ORDERS_SCHEMA,
                                      ("id",), applied or {}),
        ("shop", "events"): TablePlan(("shop", "events"), "shop.events", str(tmp_path / "events"), EVENTS_SCHEMA,
                                      (), {}),
    }


def _rows(path: str) -> list[dict[str, Any]]:
    return pq.read_table(path.removeprefix("file:")).to_pylist()


def test_the_write_tasks_compact_and_write_rows_equality_deletes_and_deleted_keys(tmp_path: Path) -> None:
    out = list(write_tables(((0, c) for c in _changes(HISTORY)), _plans(tmp_path),
                            (str(tmp_path / "memory"), MEMORY_SCHEMA), NOW))
    files = {f.table: f for f in out if isinstance(f, TableFiles)}
    (memory,) = [f for f in out if isinstance(f, DeletedKeysFile)]
    orders = files[("shop", "orders")]
    # the last change per key: id 1 updated (a row and its key), id 2 deleted (its key only)
    assert (orders.upserts, orders.deleted, orders.appends) == (1, 1, 0)
    assert [(r["id"], r["customer"], r["__cdc_seq"]) for r in _rows(orders.data.path)] == [(1, "a2", "s000000000003")]
    assert sorted(r["id"] for r in _rows(orders.deletes.path)) == [1, 2]
    assert orders.data.path.startswith(f"file:{tmp_path}/orders/data/") and orders.data.record_count == 1
    # the Parquet schema carries the Iceberg field ids; the key column is required
    schema = pq.read_schema(orders.deletes.path.removeprefix("file:"))
    assert schema.field("id").metadata[FIELD_ID] == b"1" and not schema.field("id").nullable
    # the delete is remembered, for the memory table
    assert memory.keys == 1
    assert [(r["__cdc_table"], r["__cdc_key"], r["__cdc_seq"]) for r in _rows(memory.file.path)] == [
        ("shop.orders", "[2]", "s000000000004")
    ]
    # a table without a key: appended, with its op
    events = files[("shop", "events")]
    assert events.deletes is None and events.appends == 1
    assert [(r["msg"], r["__cdc_op"]) for r in _rows(events.data.path)] == [("one", "c")]


def test_changes_the_table_holds_already_are_skipped(tmp_path: Path) -> None:
    """A replay after a crash: the orders table's snapshot holds offsets up to 3."""
    out = list(write_tables(((0, c) for c in _changes(HISTORY)), _plans(tmp_path, {"cdcnorm.shop.orders:0": 3}), None, NOW))
    orders = next(f for f in out if isinstance(f, TableFiles) and f.table == ("shop", "orders"))
    assert orders.skipped_applied == 3 and (orders.upserts, orders.deleted) == (0, 1) and orders.data is None
    assert not any(isinstance(f, DeletedKeysFile) for f in out)  # no memory: not written


def test_a_value_parquet_cannot_hold_sends_the_table_to_the_merge(tmp_path: Path) -> None:
    changes = _changes(HISTORY[:1])
    huge = SinkChange(**{**{f: getattr(changes[0], f) for f in SinkChange.__dataclass_fields__},
                         "row": {**(changes[0].row or {}), "amount": Decimal("123456789012.5")}})
    (orders,) = list(write_tables([(0, huge)], _plans(tmp_path), None, NOW))
    assert isinstance(orders, TableFiles) and orders.fallback is not None and "amount" in orders.fallback


def test_a_write_task_without_a_shuffle_writes_only_its_own_tables(tmp_path: Path) -> None:
    changes = _changes(HISTORY)
    mine = {0: frozenset({("shop", "events")}), 1: frozenset({("shop", "orders")})}
    first = list(write_partition(0, iter(changes), mine, _plans(tmp_path), None, NOW))
    assert [f.table for f in first if isinstance(f, TableFiles)] == [("shop", "events")]
    assert list(write_partition(2, iter(changes), mine, _plans(tmp_path), None, NOW)) == []


@pytest.mark.parametrize("item", [RangeRead("t", 0, 0, 1, 1, True), BadRecord("t", 0, 0, "x")])
def test_what_the_read_tasks_report_pickles(item: Any) -> None:
    assert pickle.loads(pickle.dumps(item)) == item


def test_a_change_pickles_to_an_equal_change_with_every_field() -> None:
    # changes travel from the read job's cache to the write tasks; SinkChange pickles itself as a
    # flat tuple (SinkChange.__reduce__), which must carry every field
    (plain,) = _changes(HISTORY[:1])
    partial = replace(plain, unavailable=frozenset({"customer"}), filled={"amount": "s0007"}, ts_ms=None, key=None)
    for change in (plain, partial):
        again = pickle.loads(pickle.dumps(change))
        assert again == change and again.filled == change.filled and again.op is change.op
        assert all(getattr(again, f) == getattr(change, f) for f in SinkChange.__dataclass_fields__)
    assert len(pickle.loads(pickle.dumps(plain)).__reduce__()[1]) == len(SinkChange.__dataclass_fields__)
    # two changes without filled values do not come back sharing one dict
    a, b = pickle.loads(pickle.dumps([plain, replace(plain, offset=plain.offset + 1)]))
    assert a.filled == b.filled == {} and a.filled is not b.filled
