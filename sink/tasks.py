"""What the Spark tasks of a micro-batch run, in the executors' Python workers.

A micro-batch is two Spark jobs over the changes the read tasks parsed (:mod:`sink.source`):

1. **read**: each task reads its offset ranges and parses the records; the changes stay cached in
   the executors, and only a :class:`TaskSummary` per task comes back to the driver: per table the
   columns, the key, the sequences and offsets it spans, what kinds of change it holds.
2. **write**: for the tables the driver sends down the fast path (:class:`TablePlan`), the changes
   are grouped by table, compacted per key (:func:`sink.changes.compact`) and written as Parquet
   files in the table's data folder: the new rows, and an equality-delete file of the keys they
   replace or delete (:func:`write_tables`). Only the files' descriptions come back; the driver
   commits each table's files in one Iceberg snapshot.

The driver's own work per change is nothing: it plans, decides per table, and commits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sink.changes import SinkChange, compact, in_source_order, key_text
from sink.partitioning import PartitionField
from sink.source import BadRecord, RangeRead, ReadTask, TopicPartition, parser_for, read_task
from sink.table_settings import SortTerm, TableNames
from sink.types import ColumnSpec, widening
from transforms.envelope import Operation

__all__ = [
    "CHANGELOG_COLUMNS",
    "COMMITTED_AT_COLUMN",
    "DELETED_KEY_COLUMNS",
    "KEY_COLUMN",
    "OFFSET_COLUMN",
    "OP_COLUMN",
    "PARTITION_COLUMN",
    "SEQ_COLUMN",
    "TABLE_COLUMN",
    "TOPIC_COLUMN",
    "TS_COLUMN",
    "TableFiles",
    "TablePlan",
    "TableSummary",
    "TaskSummary",
    "changelog_row",
    "first_item",
    "of_tables",
    "read_partition",
    "route",
    "seq_class",
    "slot",
    "write_partition",
    "write_tables",
]

SEQ_COLUMN = "__cdc_seq"
TS_COLUMN = "__cdc_ts_ms"
OP_COLUMN = "__cdc_op"
# a changelog table's (sink.tables mode: changelog) columns past the row: where each change was
# read (its topic, partition and offset) and when the sink committed it, with its op, sequence
# and source timestamp (OP_COLUMN, SEQ_COLUMN, TS_COLUMN)
TOPIC_COLUMN = "__cdc_topic"
PARTITION_COLUMN = "__cdc_partition"
OFFSET_COLUMN = "__cdc_offset"
COMMITTED_AT_COLUMN = "__cdc_committed_at"
CHANGELOG_COLUMNS = {OP_COLUMN: "string", SEQ_COLUMN: "string", TS_COLUMN: "bigint", TOPIC_COLUMN: "string",
                     PARTITION_COLUMN: "int", OFFSET_COLUMN: "bigint", COMMITTED_AT_COLUMN: "timestamp"}
# the deleted-keys memory (one table for every table of the sink): table, key, sequence, when
TABLE_COLUMN = "__cdc_table"
KEY_COLUMN = "__cdc_key"
DELETED_AT_COLUMN = "__cdc_deleted_at"
DELETED_KEY_COLUMNS = (TABLE_COLUMN, KEY_COLUMN, SEQ_COLUMN, DELETED_AT_COLUMN)


def seq_class(seq: str) -> str:
    """What a sequence orders against: a source sequence (``s...``) against every source
    sequence of its table; a partition/offset position (``k0003:...``) only against those of its
    partition (:func:`sink.changes.ordering`).

    >>> seq_class("s000123"), seq_class("k0003:00000000000000000042")
    ('s', 'k0003')
    """
    return "s" if seq.startswith("s") else seq[:5]


def _fold_newest(into: dict[str, str], seq: str) -> None:
    cls = seq_class(seq)
    if seq > into.get(cls, ""):
        into[cls] = seq


def fold_oldest(into: dict[str, str], seq: str) -> None:
    """Keep in ``into`` the lowest sequence of ``seq``'s class (:func:`seq_class`)."""
    cls = seq_class(seq)
    old = into.get(cls)
    if old is None or seq < old:
        into[cls] = seq


@dataclass
class TableSummary:
    """What a micro-batch read of one table, without its rows: enough for the driver to create or
    evolve the table and to choose how to write it."""

    table: tuple[str, str]
    changes: int = 0
    columns: dict[str, ColumnSpec] = field(default_factory=dict)
    key_columns: tuple[str, ...] = ()
    oldest: dict[str, str] = field(default_factory=dict)  # seq class -> lowest sequence (truncates apart)
    newest: dict[str, str] = field(default_factory=dict)  # seq class -> highest sequence
    truncate_seq: str | None = None  # the last truncate read
    partial: bool = False  # a change lacks some columns (completed from the stored row: MERGE)
    unkeyed: bool = False  # a change of a keyed table without its key
    offsets: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # first, last offset
    newest_ts_ms: int | None = None
    sources: set[tuple[str, str]] = field(default_factory=set)  # the source tables, where named otherwise

    def add(self, ch: SinkChange) -> None:
        self.changes += 1
        for col in ch.columns:
            seen = self.columns.get(col.name)
            if seen is None:
                self.columns[col.name] = col
            elif seen.sql_type != col.sql_type:
                wider = widening(seen.sql_type, col.sql_type)
                self.columns[col.name] = col if wider is None else ColumnSpec(col.name, wider, col.optional)
        if ch.key_columns:
            self.key_columns = ch.key_columns
        if ch.op is Operation.TRUNCATE:
            if self.truncate_seq is None or ch.seq > self.truncate_seq:
                self.truncate_seq = ch.seq
        else:
            fold_oldest(self.oldest, ch.seq)
            if ch.key is None and ch.key_columns:
                self.unkeyed = True
        _fold_newest(self.newest, ch.seq)
        if ch.unavailable:
            self.partial = True
        tp = (ch.topic, ch.partition)
        span = self.offsets.get(tp)
        self.offsets[tp] = (ch.offset, ch.offset) if span is None else (min(span[0], ch.offset), max(span[1], ch.offset))
        if ch.ts_ms is not None and (self.newest_ts_ms is None or ch.ts_ms > self.newest_ts_ms):
            self.newest_ts_ms = ch.ts_ms
        if ch.source is not None:
            self.sources.add(ch.source)

    def merge(self, other: TableSummary) -> None:
        """Fold another task's summary of the same table into this one."""
        self.changes += other.changes
        for name, col in other.columns.items():
            seen = self.columns.get(name)
            if seen is None:
                self.columns[name] = col
            elif seen.sql_type != col.sql_type:
                wider = widening(seen.sql_type, col.sql_type)
                self.columns[name] = col if wider is None else ColumnSpec(name, wider, col.optional)
        self.key_columns = self.key_columns or other.key_columns
        for seq in other.oldest.values():
            fold_oldest(self.oldest, seq)
        for seq in other.newest.values():
            _fold_newest(self.newest, seq)
        if other.truncate_seq is not None and (self.truncate_seq is None or other.truncate_seq > self.truncate_seq):
            self.truncate_seq = other.truncate_seq
        self.partial |= other.partial
        self.unkeyed |= other.unkeyed
        for tp, (first, last) in other.offsets.items():
            span = self.offsets.get(tp)
            self.offsets[tp] = (first, last) if span is None else (min(span[0], first), max(span[1], last))
        if other.newest_ts_ms is not None and (self.newest_ts_ms is None or other.newest_ts_ms > self.newest_ts_ms):
            self.newest_ts_ms = other.newest_ts_ms
        self.sources |= other.sources


@dataclass
class TaskSummary:
    """One read task's outcome: how far it read each range, its tables, its bad records.
    ``index``: the task's partition of the read job (where its changes are cached)."""

    index: int = 0
    reads: list[RangeRead] = field(default_factory=list)
    tables: dict[tuple[str, str], TableSummary] = field(default_factory=dict)
    bad: list[BadRecord] = field(default_factory=list)  # the first few described
    bad_count: int = 0

    def add(self, item: SinkChange | RangeRead | BadRecord) -> None:
        if isinstance(item, SinkChange):
            summary = self.tables.get(item.table)
            if summary is None:
                summary = self.tables[item.table] = TableSummary(item.table)
            summary.add(item)
        elif isinstance(item, RangeRead):
            self.reads.append(item)
        else:
            self.bad_count += 1
            if len(self.bad) < _BAD_KEPT:
                self.bad.append(item)


_BAD_KEPT = 20


def first_item(items: Iterable[Any]) -> list[Any]:
    """A read task's summary, the first item of its cached partition: only that one is
    unpickled, not the changes after it."""
    return [next(iter(items), None)]


@dataclass(frozen=True)
class TablePlan:
    """A table the write job writes files for: where, with which schema (the Iceberg schema as
    JSON, after this batch's DDL), its key (empty: append-only), and the offsets its snapshots
    already hold (changes below them are skipped)."""

    table: tuple[str, str]
    table_id: str  # namespace.name, as the deleted-keys memory names it
    location: str
    schema_json: str
    key: tuple[str, ...]
    applied: dict[str, int]  # "topic:partition" -> next offset not in the table
    # the table's current partition spec (empty: unpartitioned) and the column order its data
    # files are written in (sink.table_settings)
    partition: tuple[PartitionField, ...] = ()
    sort: tuple[SortTerm, ...] = ()
    changelog: bool = False  # every change appended as a row (sink.tables mode: changelog)


@dataclass(frozen=True)
class TableFiles:
    """What the write job wrote for one table: the data files (the rows to add: ``data`` for an
    unpartitioned table, ``parts`` one per partition with its tuple as JSON for a partitioned
    one), an equality-delete file (the keys whose stored row goes: updated or deleted), the
    counts; or why it could not (``fallback``: the driver MERGEs the table instead)."""

    table: tuple[str, str]
    data: Any = None  # sink.arrow.WrittenFile
    deletes: Any = None  # sink.arrow.WrittenFile
    parts: tuple[tuple[Any, str], ...] = ()  # (sink.arrow.WrittenFile, partition JSON)
    upserts: int = 0
    deleted: int = 0
    appends: int = 0
    unkeyed: int = 0
    skipped_applied: int = 0
    fallback: str | None = None

    def data_files(self) -> list[tuple[Any, str | None]]:
        """Every data file with its partition JSON (``None``: the table is unpartitioned)."""
        return ([] if self.data is None else [(self.data, None)]) + list(self.parts)

    @property
    def empty(self) -> bool:
        return self.data is None and not self.parts and self.deletes is None


@dataclass(frozen=True)
class DeletedKeysFile:
    """The deleted keys a write task remembers (one file per task, committed once per batch)."""

    file: Any  # sink.arrow.WrittenFile
    keys: int


def write_tables(
    items: Iterable[tuple[int, SinkChange]],
    plans: dict[tuple[str, str], TablePlan],
    deleted_keys: tuple[str, str] | None,
    now: dt.datetime,
    storage: tuple[tuple[str, str], ...] = (),
) -> Iterator[TableFiles | DeletedKeysFile]:
    """Write the files of the tables in one write task (its changes arrive grouped by table
    slot): skip what the table holds already, compact, convert, write. ``deleted_keys``: the
    location and schema JSON of the deleted-keys memory table (``None``: not remembered).
    ``storage``: the catalog's object-store settings (:func:`sink.arrow.storage_options`)."""
    from sink.arrow import Unrepresentable, arrow_schema, table_filesystem

    by_table: dict[tuple[str, str], list[SinkChange]] = {}
    skipped: dict[tuple[str, str], int] = {}
    for _, ch in items:
        plan = plans[ch.table]
        if ch.offset < plan.applied.get(f"{ch.topic}:{ch.partition}", 0):
            skipped[ch.table] = skipped.get(ch.table, 0) + 1
            continue
        by_table.setdefault(ch.table, []).append(ch)
    remembered: list[dict[str, Any]] = []
    for table in skipped.keys() - by_table.keys():
        yield TableFiles(table, skipped_applied=skipped[table])
    for table, changes in by_table.items():
        plan = plans[table]
        fs = table_filesystem(plan.location, storage)
        try:
            schema = arrow_schema(plan.schema_json)
            if plan.changelog:
                committed_at = now.replace(tzinfo=dt.UTC)
                rows = [changelog_row(c, committed_at) for c in in_source_order(changes)]
                data, parts = write_rows(plan, schema, rows, fs)
                yield TableFiles(table, data, parts=parts, appends=len(rows), skipped_applied=skipped.get(table, 0))
                continue
            batch = compact(changes)[table]
            if plan.key:
                rows = [_data_row(c) for c in batch.changes if c.op is not Operation.DELETE]
                keys = [dict(zip(plan.key, c.key or (), strict=True)) for c in batch.changes]
                data, parts = write_rows(plan, schema, rows, fs)
                dels = write_equality_deletes(plan.location, schema, plan.key, keys, fs)
                deletes = [c for c in batch.changes if c.op is Operation.DELETE]
                remembered += deleted_key_rows(plan.table_id, deletes, now)
                yield TableFiles(
                    table, data, dels, parts, upserts=len(rows), deleted=len(deletes), unkeyed=len(batch.appends),
                    skipped_applied=skipped.get(table, 0),
                )
            else:
                rows = [_data_row(c, with_op=True) for c in batch.appends]
                data, parts = write_rows(plan, schema, rows, fs)
                yield TableFiles(table, data, parts=parts, appends=len(rows), skipped_applied=skipped.get(table, 0))
        except Unrepresentable as exc:
            yield TableFiles(table, fallback=str(exc), skipped_applied=skipped.get(table, 0))
    if deleted_keys is not None and remembered:
        yield deleted_keys_file(deleted_keys, remembered, storage)


def write_equality_deletes(location: str, schema: Any, columns: Sequence[str], rows: list[dict[str, Any]], fs: Any) -> Any:
    """An equality-delete file of ``rows`` (the values of ``columns``) in the table at ``location``
    (``None`` for no rows): it deletes the earlier rows whose ``columns`` equal one of them."""
    from sink.arrow import new_data_path, select, to_arrow_table, write_parquet

    if not rows:
        return None
    return write_parquet(to_arrow_table(select(schema, columns), rows), new_data_path(location, "eq-deletes"), filesystem=fs)


def write_rows(plan: TablePlan, schema: Any, rows: list[dict[str, Any]], fs: Any) -> tuple[Any, tuple[tuple[Any, str], ...]]:
    """The data files of ``rows``: one file for an unpartitioned table (``(file, ())``), else one
    per partition with its tuple (``(None, parts)``); each in the table's write order."""
    from sink.arrow import new_data_path, to_arrow_table, write_parquet
    from sink.partitioning import partition_json, partitioner

    def write(part: list[dict[str, Any]]) -> Any:
        table = to_arrow_table(schema, part)
        if plan.sort:
            placement = "at_start" if plan.sort[0].nulls_first else "at_end"
            table = table.sort_by([(t.column, "descending" if t.descending else "ascending") for t in plan.sort],
                                  null_placement=placement)
        return write_parquet(table, new_data_path(plan.location, "data"), filesystem=fs)

    if not rows:
        return None, ()
    if not plan.partition:
        return write(rows), ()
    of = partitioner(plan.partition)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(of(row), []).append(row)
    return None, tuple((write(part), partition_json(values)) for values, part in groups.items())


def deleted_key_rows(table_id: str, deletes: Iterable[SinkChange], now: dt.datetime) -> list[dict[str, Any]]:
    """The deleted-keys memory's rows of these deletes of the table ``table_id``."""
    return [
        {TABLE_COLUMN: table_id, KEY_COLUMN: key_text(c.key), SEQ_COLUMN: c.seq, DELETED_AT_COLUMN: now}
        for c in deletes if c.key is not None
    ]


def deleted_keys_file(deleted_keys: tuple[str, str], rows: list[dict[str, Any]],
                      storage: tuple[tuple[str, str], ...] = ()) -> DeletedKeysFile:
    """``rows`` (:func:`deleted_key_rows`) as a Parquet data file of the deleted-keys memory table
    (its location and schema JSON), to commit with ``DeletedKeys.remember`` (:mod:`sink.deleted_keys`)."""
    from sink.arrow import arrow_schema, new_data_path, table_filesystem, to_arrow_table, write_parquet

    location, schema_json = deleted_keys
    table = to_arrow_table(arrow_schema(schema_json), rows)
    written = write_parquet(table, new_data_path(location, "data"), filesystem=table_filesystem(location, storage))
    return DeletedKeysFile(written, len(rows))


def changelog_row(ch: SinkChange, committed_at: dt.datetime) -> dict[str, Any]:
    """A change as a changelog table's row: its image (the new row; a delete's old row; none for
    a truncate), its op, sequence, source timestamp, where it was read, and ``committed_at``."""
    row = dict(ch.row or {})
    row[OP_COLUMN] = str(ch.op)
    row[SEQ_COLUMN] = ch.seq
    row[TS_COLUMN] = ch.ts_ms
    row[TOPIC_COLUMN] = ch.topic
    row[PARTITION_COLUMN] = ch.partition
    row[OFFSET_COLUMN] = ch.offset
    row[COMMITTED_AT_COLUMN] = committed_at
    return row


def _data_row(ch: SinkChange, with_op: bool = False) -> dict[str, Any]:
    row = dict(ch.row or {})
    row[SEQ_COLUMN] = ch.seq
    row[TS_COLUMN] = ch.ts_ms
    if with_op:
        row[OP_COLUMN] = str(ch.op)
    return row


# -- the functions the jobs map (module functions: pickled by reference) -------------------------


def read_partition(
    index: int, tasks: Iterable[ReadTask], conf: dict[str, Any], registry: Any, names: TableNames, stall_seconds: float
) -> Iterator[TaskSummary | SinkChange]:
    """The read job's task: read and parse its ranges (:func:`sink.source.read_task`), naming
    each table by ``names``; yields its :class:`TaskSummary` first, then its changes (all cached
    in the executor: the summary for the driver, :func:`first_item`; the changes for the write job)."""
    parser = parser_for(registry, names)
    out = TaskSummary(index)
    changes: list[SinkChange] = []
    for task in tasks:
        for item in read_task(task, conf, parser, stall_seconds):
            out.add(item)
            if isinstance(item, SinkChange):
                changes.append(item)
    yield out
    yield from changes


def write_partition(
    index: int,
    changes: Iterable[Any],
    tables: dict[int, frozenset[tuple[str, str]]],
    plans: dict[tuple[str, str], TablePlan],
    deleted_keys: tuple[str, str] | None,
    now: dt.datetime,
    storage: tuple[tuple[str, str], ...] = (),
) -> Iterator[TableFiles | DeletedKeysFile]:
    """The write job's task when each row-delta table's changes are all in one read task (a
    table is a topic, and a topic's partitions were read together): it writes the tables of its
    own cached partition (``tables[index]``), no shuffle."""
    mine = tables.get(index, frozenset())
    if mine:
        ours = ((index, c) for c in changes if isinstance(c, SinkChange) and c.table in mine)
        yield from write_tables(ours, plans, deleted_keys, now, storage)


def route(slots: dict[tuple[str, str], int], item: Any) -> list[tuple[int, SinkChange]]:
    """A change of a row-delta table, keyed by its table's write task (``slots``)."""
    if isinstance(item, SinkChange):
        at = slots.get(item.table)
        if at is not None:
            return [(at, item)]
    return []


def slot(key: int) -> int:
    """The write job's partitioner: the slot is the partition."""
    return key


def of_tables(tables: frozenset[tuple[str, str]], item: Any) -> bool:
    """Whether ``item`` is a change of one of ``tables`` (those a MERGE writes)."""
    return isinstance(item, SinkChange) and item.table in tables
