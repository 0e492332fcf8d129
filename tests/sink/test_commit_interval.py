"""``sink.commit_interval_seconds``: tables hold their changes over several micro-batches and are
written once per interval; nothing held is acknowledged to Kafka, so a crash loses nothing and
a restart writes nothing twice (scripted batches, one local Spark session: tests.sink.scripted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sink.history import EVENTS, ORDERS, _source
from tests.sink.history import History as ScriptedHistory
from tests.sink.scripted import scripted_config, scripted_sink, scripted_spark  # noqa: F401 (the spark fixture)
from transforms.envelope import ChangeEvent, Operation

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ORDERS_TOPIC, EVENTS_TOPIC = "cdcnorm.shop.orders", "cdcnorm.shop.events"
HOUR = 3600.0


def _order(oid: int, customer: str) -> dict[str, Any]:
    import datetime as dt
    from decimal import Decimal

    return {"id": oid, "customer": customer, "amount": Decimal("1.50") * oid, "created": dt.datetime(2024, 1, 1),
            "day": dt.date(2024, 1, 2)}


def _history() -> ScriptedHistory:
    """Three batches over a keyed table (orders) and an append-only one (events)."""
    ts = 1_700_000_000_000
    h = ScriptedHistory()
    h.batches = [
        [ChangeEvent(Operation.CREATE, ORDERS, None, _order(1, "a"), _source(1, ts + 1)),
         ChangeEvent(Operation.CREATE, ORDERS, None, _order(2, "b"), _source(2, ts + 2))],
        [ChangeEvent(Operation.UPDATE, ORDERS, _order(1, "a"), _order(1, "a2"), _source(3, ts + 3)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "one", "n": 1}, _source(4, ts + 4)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "two", "n": 2}, _source(5, ts + 5))],
        [ChangeEvent(Operation.DELETE, ORDERS, _order(2, "b"), None, _source(6, ts + 6)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "three", "n": 3}, _source(7, ts + 7))],
    ]
    return h


def _state(spark: Any, sink: Any) -> tuple[dict[int, str], list[str]]:
    tables = sink.tables
    orders = tables.table_id(("shop", "orders"))
    events = tables.table_id(("shop", "events"))
    got = {r["id"]: r["customer"] for r in spark.table(orders).collect()} if tables._exists(orders) else {}
    msgs = sorted(r["msg"] for r in spark.table(events).collect()) if tables._exists(events) else []
    return got, msgs


FINAL = ({1: "a2"}, ["one", "three", "two"])


def test_tables_are_written_once_per_interval_and_offsets_wait_for_them(spark: Any, tmp_path: Path) -> None:
    history = _history()
    sink, consumer = scripted_sink(spark, scripted_config(tmp_path, namespace="held", commit_interval_seconds=HOUR))
    for i in range(2):
        consumer.feed(history, i)
        report = sink.run_batch()
        assert report.tables == [] and report.held == sum(len(b) for b in history.batches[: i + 1])
        assert "held=" in report.line()
        # nothing acknowledged: the offsets stay at the first held change of each partition
        assert consumer.commits.get((ORDERS_TOPIC, 0), 0) == 0 and consumer.commits.get((EVENTS_TOPIC, 0), 0) == 0
    assert _state(spark, sink) == ({}, [])
    # the orders table's interval is over (its oldest change was read an hour ago): it alone is written
    sink._held._tables[("shop", "orders")].since -= HOUR
    consumer.feed(history, 2)
    report = sink.run_batch()
    assert report.tables == ["shop.orders"] and report.held == 3  # the three events
    assert _state(spark, sink) == ({1: "a2"}, [])
    assert consumer.commits[(ORDERS_TOPIC, 0)] == consumer.ends[(ORDERS_TOPIC, 0)]
    assert consumer.commits[(EVENTS_TOPIC, 0)] == 0
    # the end of a run writes what is held
    summary = sink.run(once=True)
    assert summary.batches == 1 and summary.recent[-1].tables == ["shop.events"]
    assert _state(spark, sink) == FINAL
    assert consumer.commits == consumer.ends


def test_a_crash_while_changes_are_held_loses_and_doubles_nothing(spark: Any, tmp_path: Path) -> None:
    history = _history()
    config = scripted_config(tmp_path, namespace="crashed", commit_interval_seconds=HOUR)
    sink, consumer = scripted_sink(spark, config)
    for i in range(3):
        consumer.feed(history, i)
        sink.run_batch()
        if i == 1:  # orders written at batch 2, events still held when the process dies
            sink._held._tables[("shop", "orders")].since -= HOUR
    assert _state(spark, sink) == ({1: "a2"}, [])
    # a new process of the same group: reads again from the committed offsets
    again, _ = scripted_sink(spark, config)
    again.consumer = consumer.restart()
    assert len(again.consumer.pending) == 3  # the events only: orders' offsets were committed
    again.run(once=True)
    assert _state(spark, again) == FINAL  # each event appended once
    assert again.consumer.commits == consumer.ends


def test_held_changes_read_again_after_a_rewind_are_not_doubled(spark: Any, tmp_path: Path) -> None:
    """A rewind (a failed batch retried, a partition re-assigned) delivers held records again:
    the held copies are dropped, so an append-only table gets each row once."""
    history = _history()
    sink, consumer = scripted_sink(spark, scripted_config(tmp_path, namespace="rewound", commit_interval_seconds=HOUR))
    consumer.feed(history, 1)
    sink.run_batch()
    assert sink._held.count == 3
    consumer.pending = list(consumer.log)  # the same records once more, from offset 0
    sink.run_batch()
    assert sink._held.count == 3
    sink.run(once=True)
    assert _state(spark, sink) == ({1: "a2"}, ["one", "two"])
