"""How a table's micro-batch is written, and why: the one place that decides it.

* a **row delta**: the write tasks write a Parquet data file of the new rows and an
  equality-delete file of their keys (:mod:`sink.tasks`), committed in one ``RowDelta``
  (:meth:`sink.iceberg.IcebergTables.commit_files`), when that applies the batch exactly: every
  change is newer than anything the table was given, and none lacks columns, truncates the table
  or falls before a remembered truncate;
* else a **MERGE** (:meth:`sink.iceberg.IcebergTables.write_batch`): late or replayed changes,
  partial rows, truncates, ``sink.upsert_mode: merge``, or a value the write tasks could not put
  in a Parquet file (:meth:`WritePlan.fall_back`).

:func:`plan_write` decides from the table's batch summary, what the table holds (its newest
sequences, its remembered truncate: :meth:`sink.iceberg.IcebergTables.write_plan` gathers them) and
the upsert mode; the micro-batch loop (:mod:`sink.runner`) asks the plan which path a table takes
and logs its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sink.config import UpsertMode
from sink.tasks import TableSummary, seq_class

__all__ = ["WriteMethod", "WritePlan", "not_newer", "plan_write"]

ALL_NEWER = "every change is newer than the table"


class WriteMethod(StrEnum):
    """How a table's batch is written (the values label ``cdcnorm_sink_table_writes_total``)."""

    ROW_DELTA = "row-delta"
    MERGE = "merge"


@dataclass(frozen=True)
class WritePlan:
    """How one table's micro-batch is written (``method``) and why (``reason``, as logged)."""

    method: WriteMethod
    reason: str

    @property
    def row_delta(self) -> bool:
        return self.method is WriteMethod.ROW_DELTA

    def fall_back(self, cause: str) -> WritePlan:
        """The plan once the write tasks could not write this row delta's files (``cause``: a
        value a Parquet file cannot hold here, :attr:`sink.tasks.TableFiles.fallback`): a MERGE.

        >>> WritePlan(WriteMethod.ROW_DELTA, ALL_NEWER).fall_back("decimal(40,2)").reason
        'a value a Parquet file cannot hold here (decimal(40,2))'
        """
        return WritePlan(WriteMethod.MERGE, f"a value a Parquet file cannot hold here ({cause})")


def plan_write(summary: TableSummary, newest: dict[str, str], truncate: str | None, mode: UpsertMode) -> WritePlan:
    """How a table's micro-batch is written: a row delta when it applies the batch exactly, else a
    MERGE, with the first reason that rules the row delta out.

    >>> s = TableSummary(("db", "t"), oldest={"s": "s0005"})
    >>> plan_write(s, {"s": "s0004"}, None, UpsertMode.ROW_DELTA)
    WritePlan(method=<WriteMethod.ROW_DELTA: 'row-delta'>, reason='every change is newer than the table')
    >>> plan_write(s, {"s": "s0005"}, None, UpsertMode.ROW_DELTA).reason
    'a change not newer than the table (s0005 <= s0005): late or replayed'
    """
    reason = _merge_reason(summary, newest, truncate, mode)
    if reason is None:
        return WritePlan(WriteMethod.ROW_DELTA, ALL_NEWER)
    return WritePlan(WriteMethod.MERGE, reason)


def _merge_reason(summary: TableSummary, newest: dict[str, str], truncate: str | None, mode: UpsertMode) -> str | None:
    """Why a table's micro-batch needs a MERGE, or ``None`` when a row delta applies it exactly:
    every change is newer than anything the table was given (per sequence class: a source
    sequence against every one; a partition/offset position against those of its partition,
    and never past a source sequence, as the MERGE compares them), and none lacks columns,
    truncates the table, or falls before a remembered truncate."""
    if mode is UpsertMode.MERGE:
        return "sink.upsert_mode is merge"
    if summary.truncate_seq is not None:
        return "a truncate"
    if summary.partial:
        return "a change without some columns (completed from the stored row)"
    reason = not_newer(summary.oldest, newest)
    if reason is None and truncate is not None:
        oldest = summary.oldest.get(seq_class(truncate))
        if oldest is not None and oldest <= truncate:
            reason = "a change older than the table's last truncate"
    return reason


def not_newer(oldest: dict[str, str], newest: dict[str, str]) -> str | None:
    """Why a batch whose oldest sequence per class is ``oldest`` is not newer than a table that
    was given ``newest`` (per class: a source sequence against every one; a partition/offset
    position against those of its partition, and never past a source sequence), or ``None``.

    >>> not_newer({"s": "s0005"}, {"s": "s0004"}) is None, not_newer({"k0001": "k0001:7"}, {"s": "s0004"})
    (True, 'a change without a source sequence in a table ordered by source sequences')
    """
    for cls, seq in oldest.items():
        stored = newest.get(cls)
        if stored is not None and seq <= stored:
            return f"a change not newer than the table ({seq} <= {stored}): late or replayed"
        if cls != "s" and "s" in newest:
            return "a change without a source sequence in a table ordered by source sequences"
    return None
