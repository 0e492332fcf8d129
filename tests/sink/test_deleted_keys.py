"""Deleted keys are remembered: a stale change of a row that an earlier micro-batch deleted does
not re-create it, a newer one does; maintenance forgets them after the retention. The same for
a truncate and a change older than it that arrives a batch later. And a partial update is not
completed, inside its batch, from a change older than the stored row.

The micro-batch loop runs in this process on one local Spark session, fed batch by batch from
scripted records (``tests.sink.history.resurrection_history``) through a stand-in consumer, so
the batch boundaries are exactly the history's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sink.iceberg as ice
from sink.runner import MicroBatchSink
from tests.sink.history import History, resurrection_history, stale_fill_history, truncate_history
from tests.sink.scripted import TOPIC, scripted_config, scripted_sink, scripted_spark  # noqa: F401 (the spark fixture)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _orders(spark: Any, tid: str) -> dict[int, str]:
    return {r["id"]: r["customer"] for r in spark.table(tid).collect()}


def _want(state: dict[tuple[Any, ...], dict[str, Any]]) -> dict[int, str]:
    return {k[0]: row["customer"] for k, row in state.items()}


def test_a_stale_change_of_a_deleted_row_does_not_bring_it_back(spark: Any, tmp_path: Path) -> None:
    history = resurrection_history()
    config = scripted_config(tmp_path, namespace="remembered")
    sink, consumer = scripted_sink(spark, config)
    assert sink.tables is not None
    tid = sink.tables.table_id(("shop", "orders"))
    seen = []
    for i, want in enumerate(history.states):
        consumer.feed(history, i)
        report = sink.run_batch()
        assert report.rows_read > 0
        # the loop reports its progress: committed, nothing left to read
        assert report.lag == 0 and sink.health.last_commit is not None and sink.health.liveness()[0]
        assert "touched=shop.orders" in report.line()
        seen.append(_orders(spark, tid))
        assert seen[-1] == _want(want["orders"]), f"after batch {i + 1}: {seen}"
    print(f"orders after each batch: {seen}")
    # the delete (seq 7) of id 1 is remembered
    side = spark.table(sink.tables.deleted_keys_id(("shop", "orders"))).collect()
    assert [(r["id"], r["__cdc_seq"]) for r in side] == [(1, "s000000000007")]
    assert side[0]["__cdc_deleted_at"] is not None
    # the side table is not one of the sink's tables
    from sink.inspect import list_tables

    assert "remembered.orders" in list_tables(spark, config)
    assert "remembered.orders__cdc_deleted_keys" not in list_tables(spark, config)
    assert "remembered.orders__cdc_deleted_keys" in list_tables(spark, config, deleted_keys=True)


def test_without_the_memory_the_stale_change_resurrects_the_row(spark: Any, tmp_path: Path) -> None:
    """The control: with deleted_keys_retention_seconds 0 the replay of batch 2 brings id 1 back
    (the behaviour before deleted keys were remembered), so the test above tests something."""
    history = resurrection_history()
    sink, consumer = scripted_sink(spark, scripted_config(tmp_path, namespace="forgetful", deleted_keys_retention_seconds=0))
    assert sink.tables is not None
    for i in range(2):
        consumer.feed(history, i)
        sink.run_batch()
    assert _orders(spark, sink.tables.table_id(("shop", "orders"))) == {1: "updated", 2: "other"}
    assert not sink.tables._exists(sink.tables.deleted_keys_id(("shop", "orders")))


def test_maintenance_forgets_deleted_keys_after_the_retention(spark: Any, tmp_path: Path) -> None:
    history = resurrection_history()
    config = scripted_config(tmp_path, namespace="expiring", deleted_keys_retention_seconds=3600)
    sink, consumer = scripted_sink(spark, config)
    assert sink.tables is not None
    consumer.feed(history, 0)
    sink.run_batch()
    side = sink.tables.deleted_keys_id(("shop", "orders"))
    sink.tables.maintain(("shop", "orders"))  # within the retention: kept
    assert spark.table(side).count() == 1
    time.sleep(1.1)
    short = ice.IcebergTables(spark, config.model_copy(update={"deleted_keys_retention_seconds": 1}))
    short.maintain(("shop", "orders"))
    assert spark.table(side).count() == 0


def _each_batch(spark: Any, tmp_path: Path, history: History, namespace: str, table: str
                ) -> Iterator[tuple[int, dict[str, Any], str, MicroBatchSink]]:
    """Run ``history`` batch by batch; yields after each: its index, the expected state, the
    table's id and the sink."""
    sink, consumer = scripted_sink(spark, scripted_config(tmp_path, namespace=namespace))
    assert sink.tables is not None
    tid = sink.tables.table_id(("shop", table))
    for i, want in enumerate(history.states):
        consumer.feed(history, i)
        sink.run_batch()
        yield i, want, tid, sink


def test_a_change_older_than_an_applied_truncate_does_not_bring_its_row_back(spark: Any, tmp_path: Path) -> None:
    for i, want, tid, sink in _each_batch(spark, tmp_path, truncate_history(), "truncated", "users"):
        if i == 0:  # a new process (a restart) reads the remembered truncate back from the table
            sink.tables = ice.IcebergTables(spark, sink.config)
            sink._applied.clear()
        got = {(r["tenant"], r["uid"]): r["name"] for r in spark.table(tid).collect()}
        assert got == {k: v["name"] for k, v in want["users"].items()}, f"after batch {i + 1}"


def test_a_partial_update_is_not_completed_from_a_stale_change_of_its_batch(spark: Any, tmp_path: Path) -> None:
    """Batch 2 holds a late update (seq 3) and a partial one (seq 7, no customer): compaction fills
    the customer from seq 3, but the table's row (seq 5) is newer than that, so its value stays."""
    for i, want, tid, _ in _each_batch(spark, tmp_path, stale_fill_history(), "filled", "orders"):
        rows = {r["id"]: (r["customer"], r["amount"], r["__cdc_seq"]) for r in spark.table(tid).collect()}
        expected = {k[0]: (row["customer"], row["amount"]) for k, row in want["orders"].items()}
        assert {k: v[:2] for k, v in rows.items()} == expected, f"after batch {i + 1}: {rows}"
    assert rows[1][2] == "s000000000007"
