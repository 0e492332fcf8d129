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

**Ordered batches without a MERGE** (:meth:`HistoryWriter.write_delta`). When every change of a
batch is newer than anything the table was given and none truncates it (a stream read in order,
the usual case), only the keys' *current* versions can change: each gets its end, and the new
versions follow it. The writer then writes the new versions and the closed ones as a Parquet data
file and an equality-delete file on (key, ``__cdc_seq``) of the versions it closes, committed in one
``RowDelta`` as upserts are: no MERGE, no scan of the table. The current versions it closes come
from :class:`CurrentVersions`, the table's current versions as this sink's last commit left them
(loaded once per run with one read of the table's current versions while they fit
``sink.history_cache_rows``, then kept up to date by each commit); a table whose current versions
do not fit, or that changed since by a commit other than a compaction, has its touched keys'
current versions read per batch instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sink.commits import snapshots_since
from sink.sql import quote, sql_string
from sink.tasks import OP_COLUMN, SEQ_COLUMN, TS_COLUMN, TableFiles, TablePlan, fold_oldest
from sink.types import IncompatibleSchemaError
from sink.write_plan import not_newer
from transforms.envelope import Operation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.changes import SinkChange

log = logging.getLogger("cdcnorm.sink")

__all__ = ["HISTORY_COLUMNS", "CurrentVersions", "Event", "HistoryWriter", "in_order", "versions"]

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


def in_order(changes: Iterable[SinkChange], newest: dict[str, str] | None) -> bool:
    """Whether every change is newer than anything the table was given (``newest``: per sequence
    class, as :mod:`sink.write_plan` compares them; ``None``: not known) and none truncates it.

    >>> from types import SimpleNamespace as C
    >>> in_order([C(seq="s0005", op=Operation.UPDATE)], {"s": "s0004"}), in_order([C(seq="s0004", op=Operation.UPDATE)], {"s": "s0004"})
    (True, False)
    """
    if newest is None:
        return False
    oldest: dict[str, str] = {}
    for c in changes:
        if c.op is Operation.TRUNCATE:
            return False
        fold_oldest(oldest, c.seq)
    return not_newer(oldest, newest) is None


def key_of(values: Iterable[Any]) -> tuple[Any, ...]:
    """A key as the history writer compares keys: a zoned datetime as its UTC wall time (as Spark
    returns a ``timestamp`` in the sink's UTC session), binary as ``bytes``."""
    return tuple(
        v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo is not None
        else bytes(v) if isinstance(v, bytearray) else v
        for v in values
    )


def unchanged_since(jt: Any, snapshot_id: int | None) -> bool:
    """Whether the Java table ``jt`` holds the rows it held at ``snapshot_id`` (``None``: before
    its first snapshot): every snapshot since is a compaction (operation ``replace``)."""
    since = snapshots_since(jt, snapshot_id)
    return since is not None and all(s.operation() == "replace" for s in since)


@dataclass
class CurrentVersions:
    """A history table's current version per key as of its snapshot ``snapshot_id`` (every key
    that has one: a key not here has none)."""

    snapshot_id: int | None
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)


def _check_strings(tid: str, strings: Iterable[str], rows: list[dict[str, Any]]) -> None:
    """Raise :class:`IncompatibleSchemaError` when a row holds a value that is not text in a
    string column (Spark's row conversion would store it as a Java object's text, e.g. a date as
    ``java.util.GregorianCalendar[...]``): two sources that disagree on the column's type."""
    for name in strings:
        for row in rows:
            value = row.get(name)
            if value is not None and not isinstance(value, str):
                raise IncompatibleSchemaError(
                    f"table {tid}: column {name} is a string column, a change holds {type(value).__name__} "
                    f"{value!r} (changes of this table disagree on the column's type); the table is paused"
                )


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: bytes(v) if isinstance(v, bytearray) else v for k, v in row.items()}


class HistoryWriter:
    """Applies a history table's micro-batch (see the module): a row delta for an ordered batch
    (:meth:`write_delta`), else one MERGE (:meth:`apply`). ``budget_rows``: how many current
    versions the writer keeps in memory across its tables (``sink.history_cache_rows``)."""

    def __init__(self, spark: SparkSession, budget_rows: int = 0) -> None:
        self.spark = spark
        self.budget = budget_rows
        self._current: dict[str, CurrentVersions] = {}  # by table id
        self._unfit: set[str] = set()  # tables whose current versions did not fit: read per batch (this run)
        self._lock = threading.Lock()  # tables are written in parallel (the runner's table pool)

    def _read(self, tid: str, key: tuple[str, ...], keys: Iterable[tuple[Any, ...]], current_only: bool,
              ) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
        """The stored versions of ``keys`` (a semi-join on the key), per key."""
        table = self.spark.table(tid)
        if current_only:
            table = table.where(quote(IS_CURRENT))
        key_schema = table.select(*[quote(k) for k in key]).schema
        frame = self.spark.createDataFrame(list(keys), key_schema)
        stored: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in table.join(frame, on=list(key), how="left_semi").collect():
            row = _plain(r.asDict())
            stored.setdefault(key_of(row[k] for k in key), []).append(row)
        return stored

    def current_versions(self, tid: str, jt: Any, key: tuple[str, ...], keys: Sequence[tuple[Any, ...]],
                         ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The current versions of ``keys`` (keys without one are left out): from the table's
        :class:`CurrentVersions` while it holds the table's rows, loaded first when they fit the
        budget; else read."""
        with self._lock:
            cached = self._current.get(tid)
            if cached is not None and not unchanged_since(jt, cached.snapshot_id):
                del self._current[tid]
                cached = None
            room = self.budget - sum(len(c.rows) for t, c in self._current.items() if t != tid)
        if cached is None and room > 0 and tid not in self._unfit:
            snapshot = jt.currentSnapshot()
            at = None if snapshot is None else snapshot.snapshotId()
            rows = [] if at is None else self.spark.sql(
                f"SELECT * FROM {tid} VERSION AS OF {at} WHERE {quote(IS_CURRENT)} LIMIT {room + 1}").collect()
            if len(rows) <= room:
                loaded = (_plain(r.asDict()) for r in rows)
                cached = CurrentVersions(at, {key_of(row[k] for k in key): row for row in loaded})
                with self._lock:
                    self._current[tid] = cached
            else:  # not loaded again in this run: each batch reads its keys' current versions
                log.info("history table %s: its current versions do not fit sink.history_cache_rows (%d left); "
                         "each batch reads the current versions of its keys", tid, room)
                self._unfit.add(tid)
        if cached is not None:
            return {k: cached.rows[k] for k in keys if k in cached.rows}
        return {k: versions[0] for k, versions in self._read(tid, key, keys, current_only=True).items()}

    def _remember(self, tid: str, key: tuple[str, ...], keys: Iterable[tuple[Any, ...]], written: list[dict[str, Any]],
                  snapshot_id: int) -> None:
        """The table's current versions after this sink's commit ``snapshot_id`` of ``written``."""
        with self._lock:
            cached = self._current.get(tid)
            if cached is None:
                return
            for k in keys:
                cached.rows.pop(k, None)
            for row in written:
                if row[IS_CURRENT]:
                    cached.rows[key_of(row[k] for k in key)] = row
            cached.snapshot_id = snapshot_id
            if sum(len(c.rows) for c in self._current.values()) > self.budget:
                del self._current[tid]  # read per batch from now on
                self._unfit.add(tid)

    def write_delta(self, tid: str, jt: Any, plan: TablePlan, changes: Sequence[SinkChange],
                    commit: Callable[[TableFiles], int], storage: tuple[tuple[str, str], ...] = ()) -> int:
        """Write an ordered batch (:func:`in_order`) as a row delta (see the module): the new
        versions and the current versions they close as data, the closed ones' (key,
        ``__cdc_seq``) as equality deletes; ``commit`` commits the files and returns the snapshot.
        Returns how many version rows were written. Raises :class:`sink.arrow.Unrepresentable`
        (nothing written) for a value a Parquet file cannot hold here: MERGE instead."""
        from sink.arrow import arrow_schema, table_filesystem
        from sink.tasks import write_equality_deletes, write_rows

        key = plan.key
        by_key: dict[tuple[Any, ...], list[Event]] = {}
        for c in changes:
            if c.key is not None:
                by_key.setdefault(key_of(c.key), []).append(Event.of(c))
        schema = arrow_schema(plan.schema_json)
        data_columns = [f.name for f in schema if f.name not in HISTORY_COLUMNS]
        current = self.current_versions(tid, jt, key, list(by_key))
        out: list[dict[str, Any]] = []
        closed: list[dict[str, Any]] = []
        for k, events in by_key.items():
            stored = current.get(k)
            rows = versions([stored] if stored is not None else [], events, data_columns)
            out += rows
            if stored is not None and any(r[SEQ] == stored[SEQ] for r in rows):
                closed.append({c: stored[c] for c in (*key, SEQ)})
        if not out:
            return 0
        fs = table_filesystem(plan.location, storage)
        data, parts = write_rows(plan, schema, out, fs)
        deletes = write_equality_deletes(plan.location, schema, (*key, SEQ), closed, fs)
        snapshot = commit(TableFiles(plan.table, data, deletes, parts, upserts=len(out)))
        self._remember(tid, key, by_key, out, snapshot)
        return len(out)

    def apply(self, tid: str, key: tuple[str, ...], changes: Sequence[SinkChange]) -> int:
        """Apply ``changes`` (the batch's changes of the table, any order); returns how many
        version rows were written. A value that is not text in a string column raises
        :class:`sink.types.IncompatibleSchemaError`, nothing written (:func:`_check_strings`)."""
        truncates = sorted((c for c in changes if c.op is Operation.TRUNCATE), key=lambda c: c.seq)
        by_key: dict[tuple[Any, ...], list[Event]] = {}
        for c in changes:
            if c.key is not None and c.op is not Operation.TRUNCATE:
                by_key.setdefault(key_of(c.key), []).append(Event.of(c))
        table = self.spark.table(tid)
        data_columns = [n for n in table.columns if n not in HISTORY_COLUMNS]
        stored = self._read(tid, key, by_key, current_only=False) if by_key else {}
        cutoffs = [Event(t.seq, Operation.TRUNCATE.value, None, t.ts_ms) for t in truncates]
        out: list[dict[str, Any]] = []
        for k, events in by_key.items():
            out += versions(stored.get(k, []), [*events, *cutoffs], data_columns)
        if not out and not truncates:
            return 0
        _check_strings(tid, (f.name for f in table.schema.fields if f.dataType.typeName() == "string"), out)
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
