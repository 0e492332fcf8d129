"""Deleted keys are remembered: a stale change of a row that an earlier micro-batch deleted does
not re-create it, a newer one does; maintenance forgets them after the retention. The same for
a truncate and a change older than it that arrives a batch later. And a partial update is not
completed, inside its batch, from a change older than the stored row.

The micro-batch loop runs in this process on one local Spark session, fed batch by batch from
scripted records (``tests.sink.history.resurrection_history``) through a real broker, so the
batch boundaries are exactly the history's (``tests.sink.scripted``).
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
from tests.sink.scripted import (  # noqa: F401 (the spark and broker fixtures)
    ScriptedBroker,
    scripted_broker,
    scripted_config,
    scripted_sink,
    scripted_spark,
    stored_id,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _orders(spark: Any, tid: str) -> dict[int, str]:
    return {r["id"]: r["customer"] for r in spark.table(tid).collect()}


def _want(state: dict[tuple[Any, ...], dict[str, Any]]) -> dict[int, str]:
    return {k[0]: row["customer"] for k, row in state.items()}


def _config(namespace: str, **sink: Any) -> Any:
    """One namespace and one deleted-keys memory per test (the Spark session and its warehouse
    are the module's)."""
    return scripted_config(namespace=namespace, deleted_keys_table=f"{namespace}_meta.deleted_keys", **sink)


def test_a_stale_change_of_a_deleted_row_does_not_bring_it_back(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    """Batch 1 updates id 1 (seq 5) and deletes it (seq 7); batch 2 replays the update seq 5: a
    row delta wrote batch 1, and the replay takes a MERGE that consults the remembered delete."""
    history = resurrection_history()
    config = _config("remembered")
    sink = scripted_sink(spark, config, broker)
    assert sink.tables is not None
    tid = stored_id(sink, "orders")
    seen = []
    modes = []
    for i, want in enumerate(history.states):
        broker.feed(history, i)
        report = sink.run_batch()
        assert report.rows_read > 0
        # the loop reports its progress: committed, nothing left to read
        assert report.lag == 0 and sink.health.last_commit is not None and sink.health.liveness()[0]
        assert "touched=remembered.orders" in report.line()
        modes.append((report.row_deltas, report.merges))
        seen.append(_orders(spark, tid))
        assert seen[-1] == _want(want["orders"]), f"after batch {i + 1}: {seen}"
    print(f"orders after each batch: {seen}; (row deltas, merges) per batch: {modes}")
    # in order: a row delta; the replays of the seq 5 update: a MERGE
    assert modes == [(1, 0), (0, 1), (1, 0), (0, 1)]
    # the delete (seq 7) of id 1 is remembered
    side = spark.table(sink.tables.deleted_keys.table_id()).collect()
    assert [(r["__cdc_table"], r["__cdc_key"], r["__cdc_seq"]) for r in side] == [("remembered.orders", "[1]", "s000000000007")]
    assert side[0]["__cdc_deleted_at"] is not None
    # the memory is not one of the sink's tables
    from sink.inspect import list_tables

    assert "remembered.orders" in list_tables(spark, config)
    assert "remembered_meta.deleted_keys" not in list_tables(spark, config)
    assert "remembered_meta.deleted_keys" in list_tables(spark, config, deleted_keys=True)
    assert broker.commits(config.group_id) == broker.ends


def test_without_the_memory_the_stale_change_resurrects_the_row(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    """The control: with deleted_keys_retention_seconds 0 the replay of batch 2 brings id 1 back
    (the behaviour before deleted keys were remembered), so the test above tests something."""
    history = resurrection_history()
    sink = scripted_sink(spark, _config("forgetful", deleted_keys_retention_seconds=0), broker)
    assert sink.tables is not None
    for i in range(2):
        broker.feed(history, i)
        sink.run_batch()
    assert _orders(spark, stored_id(sink, "orders")) == {1: "updated", 2: "other"}
    assert not sink.tables._exists(sink.tables.deleted_keys.table_id())


def test_maintenance_forgets_deleted_keys_after_the_retention(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    history = resurrection_history()
    config = _config("expiring", deleted_keys_retention_seconds=3600)
    sink = scripted_sink(spark, config, broker)
    assert sink.tables is not None
    broker.feed(history, 0)
    sink.run_batch()
    side = sink.tables.deleted_keys.table_id()
    sink.tables.deleted_keys.expire()  # within the retention: kept
    assert spark.table(side).count() == 1
    time.sleep(1.1)
    short = ice.IcebergTables(spark, config.model_copy(update={"deleted_keys_retention_seconds": 1}))
    short.deleted_keys.expire()
    assert spark.table(side).count() == 0


def _each_batch(spark: Any, broker: ScriptedBroker, tmp_path: Path, history: History, namespace: str, table: str
                ) -> Iterator[tuple[int, dict[str, Any], str, MicroBatchSink]]:
    """Run ``history`` batch by batch; yields after each: its index, the expected state, the
    table's id and the sink."""
    sink = scripted_sink(spark, _config(namespace), broker)
    assert sink.tables is not None
    tid = stored_id(sink, table)
    for i, want in enumerate(history.states):
        broker.feed(history, i)
        sink.run_batch()
        yield i, want, tid, sink


def test_a_change_older_than_an_applied_truncate_does_not_bring_its_row_back(
    spark: Any, broker: ScriptedBroker, tmp_path: Path
) -> None:
    for i, want, tid, sink in _each_batch(spark, broker, tmp_path, truncate_history(), "truncated", "users"):
        if i == 0:  # a new process (a restart) reads the remembered truncate back from the table
            sink.tables = ice.IcebergTables(spark, sink.config)
            sink._known.clear()
        got = {(r["tenant"], r["uid"]): r["name"] for r in spark.table(tid).collect()}
        assert got == {k: v["name"] for k, v in want["users"].items()}, f"after batch {i + 1}"


def test_a_partial_update_is_not_completed_from_a_stale_change_of_its_batch(
    spark: Any, broker: ScriptedBroker, tmp_path: Path
) -> None:
    """Batch 2 holds a late update (seq 3) and a partial one (seq 7, no customer): compaction fills
    the customer from seq 3, but the table's row (seq 5) is newer than that, so its value stays."""
    for i, want, tid, _ in _each_batch(spark, broker, tmp_path, stale_fill_history(), "filled", "orders"):
        rows = {r["id"]: (r["customer"], r["amount"], r["__cdc_seq"]) for r in spark.table(tid).collect()}
        expected = {k[0]: (row["customer"], row["amount"]) for k, row in want["orders"].items()}
        assert {k: v[:2] for k, v in rows.items()} == expected, f"after batch {i + 1}: {rows}"
    assert rows[1][2] == "s000000000007"
