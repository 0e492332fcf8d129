"""Changelog tables (``sink.tables`` mode: changelog): every change of the topics appended once,
deletes and truncates too, with its op, sequence, source timestamp, position and commit time;
a replay of the same offsets adds nothing; both ways of writing it (the write tasks' files, and the
driver's Spark append when the row delta cannot be taken) give the same rows."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.sink.history import History, scripted_history
from tests.sink.scripted import (  # noqa: F401 (the spark and broker fixtures)
    TOPICS,
    ScriptedBroker,
    scripted_broker,
    scripted_config,
    scripted_sink,
    scripted_spark,
    stored_id,
)
from transforms.envelope import EmitOptions, emit

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CHANGELOG = {"mode": "changelog"}


def _expected(history: History) -> dict[str, list[tuple[int, str, Any]]]:
    """Per topic, each record's (offset, op, the image's first column) in production order (one
    partition; tombstones take an offset but are not changes)."""
    out: dict[str, list[tuple[int, str, Any]]] = {t: [] for t in TOPICS}
    offsets = dict.fromkeys(TOPICS, 0)
    for rec in emit(history.events, EmitOptions(prefix="cdcnorm")):
        offset = offsets[rec.topic]
        offsets[rec.topic] += 1
        if rec.value is None:
            continue
        payload = orjson.loads(rec.value_bytes())["payload"]
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        first = next(iter(image.values())) if image else None
        out[rec.topic].append((offset, payload["op"], first))
    return out


def _log(spark: Any, tid: str, first: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.sql(f"SELECT * FROM {tid} ORDER BY __cdc_offset").collect()]


@pytest.mark.parametrize("compiled", [True, False], ids=["files", "driver-append"])
def test_every_change_is_appended_once_and_a_replay_adds_nothing(spark: Any, broker: ScriptedBroker, compiled: bool) -> None:
    """The scripted history (inserts, updates, partial rows, deletes, key changes, a truncate,
    redeliveries, stale changes, a new column) into three changelog tables. ``driver-append``:
    the tables are partitioned and the compiled commit helper is off, so each batch is appended
    by the driver through Spark (the row delta's fallback)."""
    history = scripted_history(n_keys=16, n_changes=120, seed=21)
    history.batches = [history.events[i:i + 50] for i in range(0, len(history.events), 50)]
    namespace = "changelog_files" if compiled else "changelog_driver"
    shape = CHANGELOG if compiled else {**CHANGELOG, "partition_by": ["bucket(2, __cdc_op)"]}
    config = scripted_config(namespace=namespace, deleted_keys_table=f"{namespace}_meta.deleted_keys",
                             tables={"shop.*": shape})
    sink = scripted_sink(spark, config, broker, compiled=compiled)
    appended = 0
    for i in range(len(history.batches)):
        broker.feed(history, i)
        report = sink.run_batch()
        appended += report.appends
        assert (report.merges == 0) if compiled else (report.row_deltas == 0), report.line()
    want = _expected(history)
    assert appended == sum(len(v) for v in want.values())
    for table, first in (("orders", "id"), ("users", "tenant"), ("events", "msg")):
        rows = _log(spark, stored_id(sink, table), first)
        got = [(r["__cdc_offset"], r["__cdc_op"], r[first]) for r in rows]
        assert got == want[f"cdcnorm.shop.{table}"], table
        assert all(r["__cdc_topic"] == f"cdcnorm.shop.{table}" and r["__cdc_partition"] == 0 for r in rows)
        assert all(r["__cdc_committed_at"] is not None and r["__cdc_seq"] for r in rows)
        assert sink.tables.mode_of((namespace, table)).value == "changelog"
    users = _log(spark, stored_id(sink, "users"), "tenant")
    assert any(r["__cdc_op"] == "t" for r in users), "the truncate is a row of the changelog"
    # a replay of the same offsets (the group's offsets reset to the start) adds nothing
    broker.rewind(sink, config.group_id)
    again = scripted_sink(spark, config, broker, compiled=compiled)
    report = again.run_batch()
    assert report.appends == 0 and report.skipped_applied > 0, report.line()
    assert len(_log(spark, stored_id(sink, "users"), "tenant")) == len(users)
