"""``sink.commit_interval_seconds``: a topic is read, and its tables written, once per interval;
meanwhile its records wait in Kafka (nothing is held in the sink), so a crash loses nothing and a
restart writes nothing twice (scripted batches against a real broker, one local Spark session:
tests.sink.scripted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sink.history import EVENTS, ORDERS, _source
from tests.sink.history import History as ScriptedHistory
from tests.sink.scripted import (  # noqa: F401 (the spark and broker fixtures)
    ScriptedBroker,
    scripted_broker,
    scripted_config,
    scripted_sink,
    scripted_spark,
    stored_id,
)
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
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "zero", "n": 0}, _source(2, ts + 2))],
        [ChangeEvent(Operation.UPDATE, ORDERS, _order(1, "a"), _order(1, "a2"), _source(3, ts + 3)),
         ChangeEvent(Operation.CREATE, ORDERS, None, _order(2, "b"), _source(4, ts + 4)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "one", "n": 1}, _source(5, ts + 5)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "two", "n": 2}, _source(6, ts + 6))],
        [ChangeEvent(Operation.DELETE, ORDERS, _order(2, "b"), None, _source(7, ts + 7)),
         ChangeEvent(Operation.CREATE, EVENTS, None, {"msg": "three", "n": 3}, _source(8, ts + 8))],
    ]
    return h


def _state(spark: Any, sink: Any) -> tuple[dict[int, str], list[str]]:
    tables = sink.tables
    orders = stored_id(sink, "orders")
    events = stored_id(sink, "events")
    got = {r["id"]: r["customer"] for r in spark.table(orders).collect()} if tables._exists(orders) else {}
    msgs = sorted(r["msg"] for r in spark.table(events).collect()) if tables._exists(events) else []
    return got, msgs


FINAL = ({1: "a2"}, ["one", "three", "two", "zero"])


def _config(namespace: str) -> Any:
    return scripted_config(namespace=namespace, commit_interval_seconds=HOUR,
                           deleted_keys_table=f"{namespace}_meta.deleted_keys")


def test_topics_are_read_once_per_interval_and_their_records_wait_in_kafka(
    spark: Any, broker: ScriptedBroker, tmp_path: Path
) -> None:
    history = _history()
    config = _config("interval")
    sink = scripted_sink(spark, config, broker)
    broker.feed(history, 0)
    report = sink.run_batch()  # a topic never read is due at once
    assert sorted(report.tables) == ["interval.events", "interval.orders"]
    assert _state(spark, sink) == ({1: "a"}, ["zero"])
    first = broker.commits(config.group_id)
    broker.feed(history, 1)
    report = sink.run_batch()
    # both topics wait for their interval: nothing read, nothing written, nothing acknowledged
    assert report.rows_read == 0 and report.tables == [] and report.waiting == 2
    assert "waiting_topics=2" in report.line()
    assert broker.commits(config.group_id) == first
    # the orders topic's interval is over: it alone is read and written, with all it gathered
    sink._last_read[ORDERS_TOPIC] -= HOUR
    broker.feed(history, 2)
    report = sink.run_batch()
    assert report.tables == ["interval.orders"] and report.rows_read == 3 + 1  # two updates, a delete, its tombstone
    assert _state(spark, sink) == ({1: "a2"}, ["zero"])
    commits = broker.commits(config.group_id)
    assert commits[(ORDERS_TOPIC, 0)] == broker.ends[(ORDERS_TOPIC, 0)]
    assert commits[(EVENTS_TOPIC, 0)] == first[(EVENTS_TOPIC, 0)]


def test_a_crash_while_topics_wait_loses_and_doubles_nothing(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    history = _history()
    config = _config("crashed")
    sink = scripted_sink(spark, config, broker)
    for i in range(3):
        broker.feed(history, i)
        sink.run_batch()
        if i == 1:  # orders due at batch 3, events still waiting when the process dies
            sink._last_read[ORDERS_TOPIC] -= HOUR
    assert _state(spark, sink) == ({1: "a2"}, ["zero"])
    sink.close()
    # a new process of the same group: reads the events again from the committed offsets
    again = scripted_sink(spark, config, broker)
    again.run(once=True)
    assert _state(spark, again) == FINAL  # each event appended once
    assert broker.commits(config.group_id) == broker.ends
