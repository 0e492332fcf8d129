"""How each table's micro-batch is written, row delta or MERGE, and why (sink.write_plan): the
decision the micro-batch loop takes per table, without Spark."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sink.config import UpsertMode
from sink.tasks import TableSummary
from sink.write_plan import WriteMethod, WritePlan, plan_write


def _summary(**kw: Any) -> TableSummary:
    return TableSummary(("db", "t"), **kw)


ROW_DELTA = UpsertMode.ROW_DELTA


def test_a_batch_newer_than_its_table_is_a_row_delta() -> None:
    plan = plan_write(_summary(oldest={"s": "s0005"}), {"s": "s0004"}, None, ROW_DELTA)
    assert plan.method is WriteMethod.ROW_DELTA and plan.row_delta
    assert plan.reason == "every change is newer than the table"
    assert plan_write(_summary(oldest={"s": "s0005"}), {}, None, ROW_DELTA).row_delta  # a new table


@pytest.mark.parametrize(("summary", "newest", "truncate", "why"), [
    (_summary(oldest={"s": "s0005"}), {"s": "s0005"}, None, "late or replayed"),
    (_summary(oldest={"s": "s0005"}, truncate_seq="s0006"), {}, None, "a truncate"),
    (_summary(oldest={"s": "s0005"}, partial=True), {}, None, "without some columns"),
    (_summary(oldest={"s": "s0005"}), {"s": "s0002"}, "s0007", "older than the table's last truncate"),
    # positions order only within their partition, and never past a source sequence
    (_summary(oldest={"k0001": "k0001:00000000000000000003"}), {"k0001": "k0001:00000000000000000003"}, None,
     "late or replayed"),
    (_summary(oldest={"k0001": "k0001:00000000000000000003"}), {"s": "s0001"}, None, "without a source sequence"),
])
def test_late_partial_and_truncating_batches_take_a_merge(summary: TableSummary, newest: dict[str, str],
                                                          truncate: str | None, why: str) -> None:
    plan = plan_write(summary, newest, truncate, ROW_DELTA)
    assert plan.method is WriteMethod.MERGE and not plan.row_delta and why in plan.reason


def test_partitions_order_their_own_positions() -> None:
    """A position of partition 2 is not compared with those of partition 1."""
    summary = _summary(oldest={"k0002": "k0002:00000000000000000001"})
    assert plan_write(summary, {"k0001": "k0001:00000000000000000009"}, None, ROW_DELTA).row_delta


def test_upsert_mode_merge_always_merges() -> None:
    plan = plan_write(_summary(oldest={"s": "s0005"}), {}, None, UpsertMode.MERGE)
    assert plan == WritePlan(WriteMethod.MERGE, "sink.upsert_mode is merge")


def test_the_first_reason_wins() -> None:
    """The conditions are checked in one order: the upsert mode, a truncate, a partial change, then
    each sequence class's oldest change."""
    summary = _summary(oldest={"s": "s0005"}, truncate_seq="s0006", partial=True)
    assert plan_write(summary, {"s": "s0009"}, None, UpsertMode.MERGE).reason == "sink.upsert_mode is merge"
    assert plan_write(summary, {"s": "s0009"}, None, ROW_DELTA).reason == "a truncate"
    assert plan_write(_summary(oldest={"s": "s0005"}, partial=True), {"s": "s0009"}, None, ROW_DELTA).reason == (
        "a change without some columns (completed from the stored row)")


def test_a_row_delta_whose_files_cannot_be_written_falls_back_to_a_merge() -> None:
    plan = plan_write(_summary(oldest={"s": "s0005"}), {}, None, ROW_DELTA)
    fallen = plan.fall_back("decimal(40,2) overflows")
    assert fallen == WritePlan(WriteMethod.MERGE, "a value a Parquet file cannot hold here (decimal(40,2) overflows)")
    assert plan.row_delta  # the plan itself is frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.reason = "changed"  # type: ignore[misc]


def test_the_methods_are_the_table_writes_metric_labels() -> None:
    """cdcnorm_sink_table_writes_total{mode=...} keeps its label values."""
    assert [m.value for m in WriteMethod] == ["row-delta", "merge"]
