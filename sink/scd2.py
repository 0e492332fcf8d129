"""History tables (``sink.tables`` mode: history): slowly changing dimension type 2.

Each version of a row is a row of the table, with its validity:

* ``__cdc_seq`` / ``__valid_from``: the sequence and source commit time of the change that began
  it (an insert, update or snapshot read; ``__cdc_op`` says which);
* ``__cdc_end_seq`` / ``__valid_to``: those of the change that ended it (the next change of the
  key, its delete, or a truncate), null while it is current;
* ``__is_current``: whether it is the key's current version (a deleted key has none).

How a micro-batch is applied (:class:`HistoryWriter`): the stored versions of the keys it touches
are read (a semi-join on the key), the key's timeline is rebuilt from them and the batch's changes
in sequence order (:func:`versions`), and one ``MERGE`` on (key, ``__cdc_seq``) inserts the new
versions and updates the ones whose end changed; a truncate also closes, in the same MERGE, every
current version of the keys the batch does not touch (``WHEN NOT MATCHED BY SOURCE``). So:

* a late change lands where its sequence puts it: it splits the version it falls in, which ends
  where it begins, and it ends where that version ended (a later update, or a delete);
* a replayed change (a sequence the table holds) changes nothing, and neither does a replay of
  the same offsets (the MERGE would write what is there; the snapshot-summary offsets skip it);
* a change that lacks some columns takes them from the version before it;
* nothing is resurrected: a stale change of a deleted key becomes a version that ended where the
  delete is.

The offsets and sequences go in the MERGE's snapshot summary, as for every table
(:mod:`sink.iceberg`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sink.sql import quote, sql_string
from sink.tasks import OP_COLUMN, SEQ_COLUMN, TS_COLUMN
from transforms.envelope import Operation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.changes import SinkChange

__all__ = ["HISTORY_COLUMNS", "Event", "HistoryWriter", "versions"]

SEQ, TS, OP = SEQ_COLUMN, TS_COLUMN, OP_COLUMN  # the columns every table of the sink has
END_SEQ = "__cdc_end_seq"
VALID_FROM = "__valid_from"
VALID_TO = "__valid_to"
IS_CURRENT = "__is_current"
# a history table's columns past the row, with their Spark SQL types
HISTORY_COLUMNS = {SEQ: "string", TS: "bigint", OP: "string", VALID_FROM: "timestamp", VALID_TO: "timestamp",
                   IS_CURRENT: "boolean", END_SEQ: "string"}
_ENDS = (Operation.DELETE.value, Operation.TRUNCATE.value)


def _time(ts_ms: int | None) -> dt.datetime | None:
    return None if ts_ms is None else dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)


def _ms(value: dt.datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return round(value.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Event:
    """One change of a key's timeline: ``op`` (c/u/r start a version, d/t end it), its row (data
    columns; ``None`` for d/t), the columns it lacks, its source time."""

    seq: str
    op: str
    row: dict[str, Any] | None
    ts_ms: int | None
    unavailable: frozenset[str] = frozenset()

    @classmethod
    def of(cls, change: SinkChange) -> Event:
        row = None if change.op.value in _ENDS else dict(change.row or {})
        return cls(change.seq, change.op.value, row, change.ts_ms, change.unavailable)


def _stored_events(stored: Sequence[dict[str, Any]], data_columns: Sequence[str]) -> dict[str, Event]:
    """The events a key's stored versions tell: each version's start, and each end that is not
    another version's start (a delete or a truncate)."""
    events: dict[str, Event] = {}
    for v in stored:
        events[v[SEQ]] = Event(v[SEQ], v[OP], {c: v.get(c) for c in data_columns}, _ms(v[VALID_FROM]))
    for v in stored:
        end = v.get(END_SEQ)
        if end is not None and end not in events:
            events[end] = Event(end, Operation.DELETE.value, None, _ms(v.get(VALID_TO)))
    return events


def versions(stored: Sequence[dict[str, Any]], changes: Iterable[Event], data_columns: Sequence[str]) -> list[dict[str, Any]]:
    """A key's versions (rows of the history table) from its stored versions and the batch's
    changes: its whole timeline rebuilt in sequence order. Only the versions that are new or whose
    end changed are returned (the rows the MERGE writes).

    >>> v = versions([], [Event("s1", "c", {"id": 1, "n": "a"}, 1000), Event("s2", "u", {"id": 1, "n": "b"}, 2000),
    ...                   Event("s3", "d", None, 3000)], ["id", "n"])
    >>> [(r["n"], r["__cdc_seq"], r["__cdc_end_seq"], r["__is_current"]) for r in v]
    [('a', 's1', 's2', False), ('b', 's2', 's3', False)]
    """
    timeline = _stored_events(stored, data_columns)
    for event in changes:
        if event.seq not in timeline or (timeline[event.seq].op in _ENDS and event.op not in _ENDS):
            timeline[event.seq] = event
    rows: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None  # the last version's row (for partial changes)
    for seq in sorted(timeline):
        event = timeline[seq]
        if rows and rows[-1][END_SEQ] is None:
            rows[-1][END_SEQ], rows[-1][VALID_TO], rows[-1][IS_CURRENT] = seq, _time(event.ts_ms), False
        if event.op in _ENDS:
            continue
        row = dict(event.row or {})
        for name in event.unavailable:
            row[name] = (previous or {}).get(name)
        previous = row
        rows.append({**row, SEQ: seq, TS: event.ts_ms, OP: event.op, VALID_FROM: _time(event.ts_ms),
                     VALID_TO: None, IS_CURRENT: True, END_SEQ: None})
    have = {v[SEQ]: v for v in stored}
    return [r for r in rows if r[SEQ] not in have or have[r[SEQ]].get(END_SEQ) != r[END_SEQ]]


class HistoryWriter:
    """Applies a history table's micro-batch (see the module) with Spark SQL."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def apply(self, tid: str, key: tuple[str, ...], changes: Sequence[SinkChange]) -> int:
        """Apply ``changes`` (the batch's changes of the table, any order); returns how many
        version rows were written."""
        truncates = sorted((c for c in changes if c.op is Operation.TRUNCATE), key=lambda c: c.seq)
        by_key: dict[tuple[Any, ...], list[Event]] = {}
        for c in changes:
            if c.key is not None and c.op is not Operation.TRUNCATE:
                by_key.setdefault(c.key, []).append(Event.of(c))
        table = self.spark.table(tid)
        data_columns = [n for n in table.columns if n not in HISTORY_COLUMNS]
        stored: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        if by_key:
            key_schema = table.select(*[quote(k) for k in key]).schema
            keys = self.spark.createDataFrame(list(by_key), key_schema)
            for r in table.join(keys, on=list(key), how="left_semi").collect():
                row = r.asDict()
                stored.setdefault(tuple(row[k] for k in key), []).append(row)
        cutoffs = [Event(t.seq, Operation.TRUNCATE.value, None, t.ts_ms) for t in truncates]
        out: list[dict[str, Any]] = []
        for k, events in by_key.items():
            out += versions(stored.get(k, []), [*events, *cutoffs], data_columns)
        if not out and not truncates:
            return 0
        floating = {f.name for f in table.schema.fields if f.dataType.typeName() in ("float", "double")}
        rows = [[float(v) if n in floating and type(v) is int else v for n, v in ((n, r.get(n)) for n in table.columns)]
                for r in out]
        # (Spark's Python-row conversion makes an int in a float column NULL: floats here)
        source = self.spark.createDataFrame(rows, table.schema, verifySchema=False)
        view = f"cdcnorm_history_{abs(hash((tid, id(source))))}"
        source.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in (*key, SEQ))
        sql = (f"MERGE INTO {tid} t USING {view} s ON {on} "
               "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        if truncates:
            first = truncates[0]
            ends = _time(first.ts_ms)
            valid_to = "CAST(NULL AS TIMESTAMP)" if ends is None else f"TIMESTAMP_MILLIS({first.ts_ms})"
            sql += (f" WHEN NOT MATCHED BY SOURCE AND t.{quote(IS_CURRENT)} AND t.{quote(SEQ)} < {sql_string(first.seq)} "
                    f"THEN UPDATE SET t.{quote(IS_CURRENT)} = false, t.{quote(VALID_TO)} = {valid_to}, "
                    f"t.{quote(END_SEQ)} = {sql_string(first.seq)}")
        try:
            self.spark.sql(sql)
        finally:
            self.spark.catalog.dropTempView(view)
        return len(out)
