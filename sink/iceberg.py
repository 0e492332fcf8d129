"""Iceberg: table creation and evolution, and the two ways a micro-batch is written, each table
in one Iceberg commit tagged with the Kafka offsets it covers (the Spark session:
:mod:`sink.spark_session`).

* **Row deltas** (the fast path, :meth:`IcebergTables.commit_files`): the write tasks wrote a
  Parquet data file of the new rows and an equality-delete file of their keys
  (:mod:`sink.tasks`); the driver commits both in one ``RowDelta`` through the Iceberg Java API,
  the way Flink's and Kafka Connect's Iceberg sinks write upserts. No Spark job, no read of the
  table: it is taken when every change of the batch is newer than anything the table holds (the
  sequences each commit records, ``cdcnorm.newest``), which is the case of an ordered stream
  (:meth:`IcebergTables.write_plan`, decided by :mod:`sink.write_plan`).
* **MERGE** (:meth:`IcebergTables.write_batch`): a Spark ``MERGE INTO`` that compares each change
  with the stored row's sequence: for late or replayed changes, partial rows, truncates, and
  ``sink.upsert_mode: merge``. Its Spark SQL is :mod:`sink.merge`'s; the deleted keys it consults
  are :mod:`sink.deleted_keys`'.

The offsets are written into the snapshot summary (``cdcnorm.offsets``; for MERGE through
Iceberg's ``CommitMetadata.withCommitProperties``) and read back on start, so a crash between the
Iceberg commit and the Kafka commit neither loses nor double-applies a change.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from sink.changes import TableBatch
from sink.commits import snapshots_since
from sink.config import SinkConfig, WriteMode
from sink.deleted_keys import DeletedKeys
from sink.faults import crash_point
from sink.maintenance import drop_dangling_equality_deletes
from sink.merge import MergeWriter, after_truncate, truncate_sql
from sink.ownership import OWNER_PROPERTY, TableOwnershipError, claim, verify_owner
from sink.retry import TableWriteError
from sink.scd2 import HISTORY_COLUMNS, HistoryWriter, in_order
from sink.sql import DISTRIBUTION_PROPERTIES, location_clause, older_than, quote, sql_string
from sink.table_settings import (
    DEFAULT_SETTINGS,
    TableMode,
    TableNames,
    TableSettings,
    differing_sources,
    settings_for,
)
from sink.table_shape import TableLayout, TableSettingsError, apply_shape, layout_of
from sink.tasks import (
    CHANGELOG_COLUMNS,
    OP_COLUMN,
    SEQ_COLUMN,
    TABLE_COLUMN,
    TS_COLUMN,
    TableFiles,
    TablePlan,
    TableSummary,
    seq_class,
)
from sink.types import ColumnSpec, IncompatibleSchemaError, widening
from sink.write_plan import WriteMethod, WritePlan, plan_write
from transforms.envelope import Operation
from transforms.errors import CdcnormError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "NEWEST_PROPERTY",
    "OFFSETS_PROPERTY",
    "OWNER_PROPERTY",
    "SEQ_COLUMN",
    "TS_COLUMN",
    "IcebergTables",
    "IncompatibleSchemaError",
    "TableOwnershipError",
]

log = logging.getLogger("cdcnorm.sink")

OFFSETS_PROPERTY = "cdcnorm.offsets"
# the table's last truncate, {"seq": ..., "at": epoch ms}, carried in every commit's summary while
# it is remembered (sink.deleted_keys_retention_seconds), like the offsets
TRUNCATED_PROPERTY = "cdcnorm.truncated"
KEY_PROPERTY = "cdcnorm.key-columns"
# per sequence class (sink.tasks.seq_class), the newest sequence the table has been given (rows,
# deletes, truncates): a batch whose changes are all newer can skip the MERGE's comparison
NEWEST_PROPERTY = "cdcnorm.newest"
# what the table holds (sink.table_settings.TableMode: upsert, changelog, history), set when it is created
MODE_PROPERTY = "cdcnorm.mode"
# the snapshot the commit's offsets and sequences were read from (its writer's view of the table):
# the cdcnorm commits between it and this one, by another writer of the same group, are folded in
# when the summary is read (_read_summary)
BASE_PROPERTY = "cdcnorm.base"


class ConcurrentCommitError(CdcnormError):
    """Another writer (a second sink of the same group, during a rollout) committed to the table
    after the snapshot this sink's offsets and sequences were read from: the batch is read again
    and its offsets re-checked against the table (:meth:`sink.runner.MicroBatchSink.run`)."""


def _not_found(exc: Exception) -> bool:
    """Whether a Spark error says the table does not exist."""
    return "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower()


@dataclass
class _TableState:
    columns: dict[str, str]  # name -> spark sql type (data columns only)
    key: tuple[str, ...]
    commits: int = 0
    truncated: tuple[str, int] | None = None  # the last truncate remembered: (sequence, epoch ms)
    summary_loaded: bool = False  # offsets, newest and truncated were read from the newest cdcnorm snapshot
    # the snapshot those describe (read at, or committed by this sink); None: the table had none
    snapshot_id: int | None = None
    offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset not in the table
    # per sequence class, the newest sequence the table was given (None: not known, a table
    # written before cdcnorm.newest was recorded: worked out once, see newest_sequences)
    newest: dict[str, str] | None = None
    location: str | None = None
    schema_json: str | None = None  # the Iceberg schema as JSON (after the last DDL)
    key_ids: list[int] = field(default_factory=list)  # the key's Iceberg field ids
    shaped: bool = False  # sink.tables applied in this run (sink.table_shape)
    mode: TableMode = TableMode.UPSERT  # what it holds (MODE_PROPERTY)
    layout: TableLayout | None = None  # its partition spec and write order (None: read again)


class _JavaCallable:
    """``work`` as a ``java.util.concurrent.Callable`` for py4j; keeps the exception it raised."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.work: Callable[[], object] | None = work
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            if self.work is not None:
                self.work()
        except CdcnormError as exc:  # a refusal of ours (before any write): raised after the Java call
            self.error = exc  # returns, not through py4j (which would log it with a traceback)
        except BaseException as exc:  # surfaced after the Java call returns
            self.error = exc
            raise
        return None

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]


class IcebergTables:
    """Creates, evolves and merges into the Iceberg tables of one catalog."""

    def __init__(self, spark: SparkSession, config: SinkConfig, compiled_commits: bool = True) -> None:
        self.spark = spark
        self.config = config
        self._compiled_commits = compiled_commits  # False: commit row deltas through py4j steps (sink.commits)
        self._commits: Any = None
        self._state: dict[str, _TableState] = {}
        self._callback_ready = False
        self._callback_lock = threading.Lock()
        self._jcatalog: Any = None
        self._jtables: dict[tuple[str, str], Any] = {}  # Java Table handles (java_table)
        self._sources: dict[tuple[str, str], set[tuple[str, str]]] = {}  # note_sources
        self._catalog_lock = threading.Lock()
        self.deleted_keys = DeletedKeys(spark, config, self.java_table)  # the deleted-keys memory (sink.deleted_keys)
        self.merger = MergeWriter(spark, self.deleted_keys.table_id)  # the MERGE path's Spark SQL (sink.merge)
        self.history = HistoryWriter(spark, config.history_cache_rows)  # history tables' versions (sink.scd2)

    # -- naming -----------------------------------------------------------------------

    # A table is its (namespace, name) in the catalog: the parser names it (sink.table_settings.
    # TableNames: sink.namespace, a `name` template), ``sources`` keeps which source tables land
    # in it (what sink.tables' patterns match), where they are named otherwise.

    def namespace_id(self, table: tuple[str, str]) -> str:
        return f"{quote(self.config.catalog.name)}.{quote(table[0])}"

    def table_id(self, table: tuple[str, str]) -> str:
        return f"{self.namespace_id(table)}.{quote(table[1])}"

    def iceberg_name(self, table: tuple[str, str]) -> str:
        """``namespace.table`` as the deleted-keys memory and log lines name a table."""
        return f"{table[0]}.{table[1]}"

    # -- the Iceberg Java API -----------------------------------------------------------

    @property
    def jvm(self) -> Any:
        return self.spark.sparkContext._jvm

    def _catalog(self) -> Any:
        """The Iceberg catalog behind Spark's (the same cached table objects Spark SQL uses).
        Looked up within the session (Spark finds a catalog's settings in the SQL conf of the
        calling thread's active session, which a py4j thread of the table pool has none of)."""
        with self._catalog_lock:
            if self._jcatalog is None:
                jspark = self.spark._jsparkSession
                self.jvm.org.apache.spark.sql.SparkSession.setActiveSession(jspark)
                self._jcatalog = jspark.sessionState().catalogManager().catalog(self.config.catalog.name).icebergCatalog()
        return self._jcatalog

    def java_table(self, ident: tuple[str, str], refresh: bool = True) -> Any:
        """The Iceberg ``Table`` of ``namespace, name`` (``refresh``: its current metadata read
        first), or ``None`` when it does not exist. The handle is kept (a py4j round trip costs
        the driver's Python about a tenth of a millisecond, and a micro-batch makes a few dozen
        per table); the catalog's own ``loadTable`` tells a dropped table."""
        from py4j.protocol import Py4JJavaError

        table = self._jtables.get(ident)
        if table is None:
            jvm = self.jvm
            gateway = self.spark.sparkContext._gateway
            assert gateway is not None
            names = gateway.new_array(jvm.String, 1)
            names[0] = ident[0]
            tid = jvm.org.apache.iceberg.catalog.TableIdentifier.of(jvm.org.apache.iceberg.catalog.Namespace.of(names), ident[1])
            try:
                table = self._catalog().loadTable(tid)
            except Py4JJavaError as exc:
                if "NoSuchTableException" in str(exc.java_exception.getClass().getName()):
                    return None
                raise
            self._jtables[ident] = table
        elif refresh:
            try:
                table.refresh()
            except Exception as exc:
                if "NoSuchTableException" in str(exc) or "NotFoundException" in str(exc):
                    del self._jtables[ident]  # dropped meanwhile
                    return self.java_table(ident)
                raise
        return table

    def _java(self, table: tuple[str, str], refresh: bool = True) -> Any:
        return self.java_table(table, refresh)

    def _key_ids(self, table: tuple[str, str], jt: Any) -> list[int]:
        """The Iceberg field ids of the table's key (looked up once)."""
        state = self._state[self.table_id(table)]
        if len(state.key_ids) != len(state.key):
            schema = jt.schema()
            state.key_ids = [schema.findField(k).fieldId() for k in state.key]
        return state.key_ids

    @property
    def commits(self) -> Any:
        """How the row deltas are committed (:mod:`sink.commits`), made on first use."""
        from sink.commits import make_commits

        with self._catalog_lock:
            if self._commits is None:
                self._commits = make_commits(self.spark, self._compiled_commits)
        return self._commits

    # -- schema -------------------------------------------------------------------------

    def _load_state(self, table: tuple[str, str]) -> _TableState | None:
        """What is known of a table (columns, key, location, schema): read once from its
        metadata, then kept up to date by this sink's DDL. ``None``: it does not exist."""
        tid = self.table_id(table)
        state = self._state.get(tid)
        if state is not None:
            return state
        jt = self._java(table)
        if jt is None:
            return None
        state = self._state[tid] = self._state_of(jt)
        return state

    def _state_of(self, jt: Any) -> _TableState:
        jvm = self.jvm
        cols: dict[str, str] = {}
        for field_ in jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(jt.schema()).fields():
            name = field_.name()
            if name not in CHANGELOG_COLUMNS and name not in HISTORY_COLUMNS:
                cols[name] = field_.dataType().simpleString()
        key = tuple(k for k in (jt.properties().get(KEY_PROPERTY) or "").split(",") if k)
        mode = TableMode(jt.properties().get(MODE_PROPERTY) or TableMode.UPSERT)
        return _TableState(
            cols, key, location=jt.location(), schema_json=jvm.org.apache.iceberg.SchemaParser.toJson(jt.schema()),
            mode=mode,
        )

    def _exists(self, tid: str) -> bool:
        try:
            self.spark.table(tid).schema  # noqa: B018 - resolves the table
        except Exception as exc:
            if _not_found(exc):
                return False
            raise
        return True

    def forget_cached(self) -> None:
        """Drop what is cached of the tables (schema, key, offsets, the last truncate, the Java
        handles): read again from the catalog on next use, after a failed write left it in doubt."""
        self._state.clear()
        self._jtables.clear()
        self.deleted_keys.forget_absent()

    def key_of(self, table: tuple[str, str]) -> tuple[str, ...]:
        """The table's key columns (empty: append-only)."""
        return self._state[self.table_id(table)].key

    def plan_of(self, table: tuple[str, str]) -> tuple[str, str]:
        """The table's location and Iceberg schema (JSON), as the write tasks need them."""
        state = self._state[self.table_id(table)]
        if state.location is None or state.schema_json is None:
            jt = self._java(table)
            state.location = jt.location()
            state.schema_json = self.jvm.org.apache.iceberg.SchemaParser.toJson(jt.schema())
        return state.location, state.schema_json

    def mode_of(self, table: tuple[str, str]) -> TableMode:
        """What the table holds (known once it exists: :meth:`ensure_columns`)."""
        return self._state[self.table_id(table)].mode

    def note_sources(self, table: tuple[str, str], sources: set[tuple[str, str]]) -> None:
        """Remember the source tables a batch read for ``table`` where they are named otherwise
        (their ``sink.tables`` settings are the table's); sources whose settings differ in
        anything but the name pause the table (:class:`TableSettingsError`)."""
        known = self._sources.setdefault(table, set())
        if not sources <= known and (problem := differing_sources(self.config.tables, known | sources)):
            raise TableSettingsError(f"table {self.table_id(table)}: {problem}")
        known |= sources

    def settings_of(self, table: tuple[str, str]) -> TableSettings:
        """The table's ``sink.tables`` settings: those of its source ``db.table``."""
        if not self.config.tables:
            return DEFAULT_SETTINGS
        sources = self._sources.get(table)
        db, name = min(sources) if sources else table
        return settings_for(self.config.tables, db, name)

    def layout(self, table: tuple[str, str]) -> TableLayout:
        """The table's partition spec and write order as the write tasks need them (read once,
        again after this sink changed them)."""
        state = self._state[self.table_id(table)]
        if state.layout is None:
            state.layout = layout_of(self._java(table))
        return state.layout

    def _shape(self, table: tuple[str, str], tid: str, state: _TableState) -> None:
        """Apply the table's ``sink.tables`` settings once per run (:mod:`sink.table_shape`)."""
        settings = self.settings_of(table)
        if settings.mode is not state.mode:
            raise TableSettingsError(
                f"table {tid} holds mode {state.mode.value} (its {MODE_PROPERTY} property, set when it was created), "
                f"sink.tables says {settings.mode.value}: a table's mode does not change; give the {settings.mode.value} "
                "table its own name (a transform or topic prefix), or drop the table to have it created again"
            )
        if settings is not DEFAULT_SETTINGS:
            changed = apply_shape(self.jvm, self._java(table), settings, tid)
            if changed:
                log.info("table %s: %s (metadata only: existing files stay as they are)", tid, "; ".join(changed))
                state.layout = None
                state.schema_json = None
        state.shaped = True

    # -- ownership ----------------------------------------------------------------------

    def check_owner(self, table: tuple[str, str]) -> None:
        """Make sure this sink may write ``table``: its :data:`OWNER_PROPERTY` names this sink's
        group, or names nobody (a table from before owners, or whose marker an operator cleared)
        or the group of ``take_over_tables_from``, and is then claimed. Raises
        :class:`TableOwnershipError` when another group owns it. Reads the table's current
        metadata (a few milliseconds through the Iceberg API), so a claim by another sink since
        the last batch is seen. A table that does not exist yet gets this sink's group when it is
        created."""
        jt = self._java(table, refresh=False)
        if jt is None:
            return
        owner = self.commits.owner(jt, OWNER_PROPERTY)  # reads its metadata again
        if owner == self.config.group_id:
            return
        tid = self.table_id(table)
        if owner is None or owner == self.config.take_over_tables_from:
            claim(jt, tid, self.config.group_id, owner)
            return
        raise TableOwnershipError(tid, owner, self.config.group_id)

    def take_over(self, previous: str) -> list[str]:
        """Claim every table of the catalog (of ``sink.namespace``, else of every namespace) that
        the sink of group ``previous`` owns; returns their ids."""
        cat = quote(self.config.catalog.name)
        fixed = TableNames(self.config.tables, self.config.namespace).fixed_namespace
        if fixed:
            namespaces = [fixed]
        else:
            namespaces = [r[0] for r in self.spark.sql(f"SHOW NAMESPACES IN {cat}").collect()]
        claimed = []
        for ns in namespaces:
            for row in self.spark.sql(f"SHOW TABLES IN {cat}.{quote(ns)}").collect():
                name = row["tableName"]
                jt = self.java_table((ns, name))
                if jt is not None and jt.properties().get(OWNER_PROPERTY) == previous:
                    tid = f"{cat}.{quote(ns)}.{quote(name)}"
                    claim(jt, tid, self.config.group_id, previous)
                    claimed.append(tid)
        return claimed

    def ensure_table(self, batch: TableBatch) -> str:
        """Create the table, or add new columns / apply safe widening. Returns the table id."""
        self.note_sources(batch.table, {c.source for c in (*batch.changes, *batch.appends) if c.source is not None})
        return self.ensure_columns(batch.table, batch.columns, batch.key_columns)

    def ensure_columns(self, table: tuple[str, str], columns: tuple[ColumnSpec, ...], key: tuple[str, ...]) -> str:
        """Create the table with ``columns`` and ``key``, or add the columns it lacks and widen
        those a change widens. Raises :class:`IncompatibleSchemaError` for a change of type that
        is not a safe widening. Returns the table id."""
        tid = self.table_id(table)
        state = self._load_state(table)
        if state is None:
            mode = self.settings_of(table).mode
            if mode is TableMode.CHANGELOG:
                key = ()  # every change is a row of its own
            elif mode is TableMode.HISTORY and not key:
                raise TableSettingsError(f"table {tid}: mode history needs a key (versions of a row), and its changes "
                                         "carry none; use mode changelog for a keyless table")
            self._create(table, tid, columns, key, mode)
            state = self._state[tid] = _TableState({c.name: c.sql_type for c in columns}, key, summary_loaded=True,
                                                   newest={}, mode=mode)
            self._shape(table, tid, state)
            return tid
        changed = False
        for col in columns:
            stored = state.columns.get(col.name)
            if stored is None:
                self.spark.sql(f"ALTER TABLE {tid} ADD COLUMN {quote(col.name)} {col.sql_type}")
                state.columns[col.name] = col.sql_type
                changed = True
                log.info("table %s: added column %s %s", tid, col.name, col.sql_type)
                continue
            target = widening(stored, col.sql_type)
            if target is None:
                raise IncompatibleSchemaError(
                    f"table {tid}: column {col.name} is {stored}, a change brings {col.sql_type} (not a safe widening)"
                )
            if target.replace(" ", "").lower() != stored.replace(" ", "").lower():
                self.spark.sql(f"ALTER TABLE {tid} ALTER COLUMN {quote(col.name)} TYPE {target}")
                state.columns[col.name] = target
                log.info("table %s: widened column %s %s -> %s", tid, col.name, stored, target)
                changed = True
        if changed:
            state.schema_json = None  # read again for the write tasks
            state.layout = None
        if not state.shaped:
            self._shape(table, tid, state)
        return tid

    def _create(self, table: tuple[str, str], tid: str, columns: tuple[ColumnSpec, ...], key: tuple[str, ...],
                mode: TableMode) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace_id(table)}")
        defs = []
        for col in columns:
            not_null = " NOT NULL" if col.name in key else ""
            defs.append(f"{quote(col.name)} {col.sql_type}{not_null}")
        if mode is TableMode.CHANGELOG:
            defs += [f"{quote(name)} {sql_type}" for name, sql_type in CHANGELOG_COLUMNS.items()]
        elif mode is TableMode.HISTORY:
            defs += [f"{quote(name)} {sql_type}" for name, sql_type in HISTORY_COLUMNS.items()]
        else:
            defs.append(f"{quote(SEQ_COLUMN)} string")
            defs.append(f"{quote(TS_COLUMN)} bigint")
            if not key:
                defs.append(f"{quote(OP_COLUMN)} string")
        row_level = self.config.write_mode.value
        props = {
            "format-version": "2",
            "write.merge.mode": row_level,
            "write.update.mode": row_level,
            "write.delete.mode": row_level,
            # the tables are unpartitioned: no shuffle of the merged rows before writing them
            # (Iceberg's default clusters them by data file, one more exchange per MERGE)
            **dict.fromkeys(DISTRIBUTION_PROPERTIES, "none"),
            # merge-on-read: one position-delete file per MERGE task. With Iceberg's default
            # (file scope) a MERGE rewrites one delete file, earlier deletes included, for every
            # data file holding a changed key: with keys spread over the table, every data file
            # on every commit. Readers check the partition-scoped files against each data file
            # until maintenance (rewrite_data_files, rewrite_position_delete_files) folds them.
            "write.delete.granularity": "partition",
            KEY_PROPERTY: ",".join(key),
            MODE_PROPERTY: mode.value,
            **self.config.table_properties,
            **self.settings_of(table).properties,
        }
        props_sql = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        props_sql += f", '{OWNER_PROPERTY}'={sql_string(self.config.group_id)}"
        location = location_clause(self.config.catalog.table_location, table[0], table[1])
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {tid} ({', '.join(defs)}) USING iceberg{location} TBLPROPERTIES ({props_sql})")
        verify_owner(self._java(table), tid, self.config.group_id)  # another sink may have created it first
        if key and self.config.write_mode is WriteMode.COPY_ON_WRITE:
            # Iceberg 1.9.2 on Spark 3.5 fails merge-on-read writes to tables with identifier
            # fields ("Cannot add fieldId 1 as an identifier field"); the key is then kept in
            # the cdcnorm.key-columns property only.
            self.spark.sql(f"ALTER TABLE {tid} SET IDENTIFIER FIELDS {', '.join(quote(k) for k in key)}")
        log.info("created table %s key=%s mode=%s write_mode=%s", tid, ",".join(key) or "-", mode.value, props["write.merge.mode"])

    # -- offsets and sequences -------------------------------------------------------------

    def applied_offsets(self, table: tuple[str, str]) -> dict[str, int]:
        """The ``topic:partition -> next offset`` recorded with the table's newest cdcnorm commit."""
        state = self._load_state(table)
        if state is None:
            return {}
        if not state.summary_loaded:
            self._read_summary(table, state)
        return dict(state.offsets)

    def _read_summary(self, table: tuple[str, str], state: _TableState) -> None:
        """The offsets, newest sequences and remembered truncate of the table's newest cdcnorm
        commit (the newest snapshot, going back past maintenance ones), into ``state``. Its
        writer read them at the snapshot it names (:data:`BASE_PROPERTY`); a cdcnorm commit by
        another writer in between (possible only on the MERGE path, whose commit Spark makes) is
        folded in: offsets and sequences only move forward."""
        jt = self._java(table)
        current = jt.currentSnapshot() if jt is not None else None
        state.snapshot_id = None if current is None else current.snapshotId()
        state.summary_loaded = True
        found, snapshot = _cdcnorm_summary(jt, current)
        if found is None:
            state.offsets = {}
            if state.newest is None and current is None:
                state.newest = {}  # an empty table: nothing in it can be newer than a change
            return
        offsets: dict[str, int] = orjson.loads(found[OFFSETS_PROPERTY])
        newest: dict[str, str] | None = orjson.loads(found[NEWEST_PROPERTY]) if found[NEWEST_PROPERTY] else None
        base = found[BASE_PROPERTY]
        if base:
            parent = snapshot.parentId()
            between = jt.snapshot(parent) if parent is not None else None
            while between is not None and str(between.snapshotId()) != base:
                other = between.summary()
                if other.get(OFFSETS_PROPERTY) is not None:
                    for tp, offset in orjson.loads(other.get(OFFSETS_PROPERTY)).items():
                        offsets[tp] = max(offset, offsets.get(tp, 0))
                    if newest is not None and other.get(NEWEST_PROPERTY):
                        _fold(newest, orjson.loads(other.get(NEWEST_PROPERTY)).values())
                parent = between.parentId()
                between = jt.snapshot(parent) if parent is not None else None
        state.offsets = offsets
        if found[TRUNCATED_PROPERTY]:
            truncated = orjson.loads(found[TRUNCATED_PROPERTY])
            state.truncated = (truncated["seq"], int(truncated["at"]))
        if newest is not None:
            state.newest = newest

    def _conflicting_commit(self, jt: Any, base: int | None) -> bool:
        """Whether a cdcnorm commit landed on the table after the snapshot ``base`` (or ``base``
        is no longer in its history): this sink's view of the table is out of date."""
        since = snapshots_since(jt, base)
        return since is None or any(s.summary().get(OFFSETS_PROPERTY) is not None for s in since)

    def newest_sequences(self, table: tuple[str, str]) -> dict[str, str]:
        """Per sequence class, the newest sequence the table was given: recorded with each
        commit; for a table whose commits do not record it yet (written by an older cdcnorm),
        worked out once from its rows, its remembered deletes and its last truncate."""
        state = self._load_state(table)
        if state is None:
            return {}
        if not state.summary_loaded:
            self._read_summary(table, state)
        if state.newest is None:
            newest: dict[str, str] = {}
            seq = quote(SEQ_COLUMN)
            cls = f"CASE WHEN {seq} LIKE 's%' THEN 's' ELSE substring({seq}, 1, 5) END"
            queries = [f"SELECT {cls} AS class, max({seq}) AS newest FROM {self.table_id(table)} WHERE {seq} IS NOT NULL GROUP BY 1"]
            if self.deleted_keys.exist():
                queries.append(
                    f"SELECT {cls} AS class, max({seq}) AS newest FROM {self.deleted_keys.table_id()} "
                    f"WHERE {quote(TABLE_COLUMN)} = {sql_string(self.iceberg_name(table))} GROUP BY 1"
                )
            for query in queries:
                _fold(newest, [row["newest"] for row in self.spark.sql(query).collect() if row["newest"] is not None])
            if state.truncated is not None:
                _fold(newest, [state.truncated[0]])
            state.newest = newest
        return dict(state.newest)

    def _commit_properties(self, state: _TableState, offsets: dict[str, int], seqs: dict[str, str],
                           truncated: tuple[str, int] | None) -> dict[str, str]:
        """The summary properties of a cdcnorm commit: the offsets it covers, the newest
        sequences (the table's, with the batch's folded in), the truncate it remembers."""
        newest = dict(state.newest or {})
        _fold(newest, seqs.values())
        props = {
            OFFSETS_PROPERTY: orjson.dumps(offsets, option=orjson.OPT_SORT_KEYS).decode(),
            NEWEST_PROPERTY: orjson.dumps(newest, option=orjson.OPT_SORT_KEYS).decode(),
        }
        if truncated is not None:
            props[TRUNCATED_PROPERTY] = orjson.dumps({"seq": truncated[0], "at": truncated[1]}).decode()
        if state.snapshot_id is not None:
            props[BASE_PROPERTY] = str(state.snapshot_id)
        return props

    def _committed(self, state: _TableState, props: dict[str, str], truncated: tuple[str, int] | None,
                   snapshot_id: int | None) -> None:
        """The table's state after this sink's commit ``snapshot_id`` (``None``: a commit Spark
        made, whose snapshot is looked up when the summary is next needed)."""
        state.commits += 1
        state.truncated = truncated
        state.offsets = orjson.loads(props[OFFSETS_PROPERTY])
        state.newest = orjson.loads(props[NEWEST_PROPERTY])
        state.summary_loaded = snapshot_id is not None
        state.snapshot_id = snapshot_id

    # -- writes -------------------------------------------------------------------------

    def _with_commit_properties(self, props: dict[str, str], work: Callable[[], object]) -> None:
        """Run ``work`` (Spark SQL writes) so its Iceberg commits carry ``props`` in the summary."""
        from pyspark.java_gateway import ensure_callback_server_started

        sc = self.spark.sparkContext
        gateway = sc._gateway
        with self._callback_lock:  # tables are written from several threads (sink.table_parallelism)
            if not self._callback_ready:
                ensure_callback_server_started(gateway)
                self._callback_ready = True
        jvm = sc._jvm
        assert jvm is not None
        java_props = jvm.java.util.HashMap()
        for k, v in props.items():
            java_props.put(k, v)

        callable_ = _JavaCallable(work)
        exc_class = jvm.java.lang.Class.forName("java.lang.RuntimeException")
        try:
            jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(java_props, callable_, exc_class)
        except Exception:
            if callable_.error is not None:
                raise callable_.error from None
            raise
        finally:
            # py4j keeps objects passed to Java until the JVM collects their proxies, which can
            # be many batches later: drop the work (and the batch it holds) now
            callable_.work = None
        if callable_.error is not None:
            raise callable_.error

    def write_batch(self, batch: TableBatch, offsets: dict[str, int]) -> dict[str, int]:
        """Apply one compacted table batch in Iceberg commits tagged with ``offsets``.

        Returns counts: upserts, deletes, appends, truncates. A failure of Spark, Iceberg or the
        file system is raised as :class:`TableWriteError` naming the table.
        """
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        try:
            return self._write_batch(batch, offsets)
        except (Py4JError, PySparkException, OSError) as exc:
            raise TableWriteError(".".join(batch.table), exc) from exc

    def _write_batch(self, batch: TableBatch, offsets: dict[str, int]) -> dict[str, int]:
        tid = self.ensure_table(batch)
        state = self._state[tid]
        if not state.summary_loaded:
            self._read_summary(batch.table, state)
        if self._conflicting_commit(self._java(batch.table), state.snapshot_id):
            # Spark's MERGE validates from the snapshot it reads, not from the one the batch's
            # offsets were read from: a commit since then is found here, and the batch read again
            raise TableWriteError(tid, ConcurrentCommitError(f"table {tid} changed since snapshot {state.snapshot_id}"))
        counts = {"upserts": 0, "deletes": 0, "appends": 0, "truncates": 0, "unkeyed": 0}
        snapshot: int | None = None  # the snapshot this sink committed itself (None: Spark's, looked up later)
        if state.mode is not TableMode.UPSERT:
            # every change a row, or a version (the batch's changes, uncompacted: sink.runner)
            newest_log: dict[str, str] = {}
            _fold(newest_log, [c.seq for c in batch.appends])
            props = self._commit_properties(state, offsets, newest_log, None)
            if state.mode is TableMode.CHANGELOG:
                self._with_commit_properties(props, lambda: self.merger.append_changelog(tid, state, batch.appends))
                counts["appends"] = len(batch.appends)
            else:
                snapshot = self._history_delta(batch, state, tid, props)
                if snapshot is None:
                    self._with_commit_properties(props, lambda: self.history.apply(tid, state.key, batch.appends))
                counts["row_delta"] = int(snapshot is not None)
                counts["deletes"] = sum(c.op is Operation.DELETE for c in batch.appends)
                counts["upserts"] = len(batch.appends) - counts["deletes"]
            self._committed(state, props, None, snapshot)
            return counts
        truncated = self._truncate_watermark(state, batch.truncate_seq)
        newest: dict[str, str] = {}
        _fold(newest, [c.seq for c in (*batch.changes, *batch.appends)] + ([batch.truncate_seq] if batch.truncate_seq else []))
        props = self._commit_properties(state, offsets, newest, truncated)
        if truncated is not None:
            batch = after_truncate(batch, truncated[0])
        # the batch's deletes are remembered first, in their own commit: a crash before the
        # table's commit leaves markers that only say what is true (the key was deleted at that
        # sequence); the batch is read again and applied as before. The append runs in the
        # background while the MERGE's source is built, and every write of the table waits for it.
        consult = self.deleted_keys.may_be_superseded(state, batch.changes)  # by an earlier batch's delete
        remembered = self.deleted_keys.remember_async(self.iceberg_name(batch.table), state, batch.changes)

        def remembered_first() -> None:
            if remembered is not None:
                remembered.result()

        def work() -> None:
            crash_point("mid-merge")
            if batch.truncate:
                remembered_first()
                self.spark.sql(truncate_sql(tid, batch.truncate_seq))
                counts["truncates"] = 1
            if batch.changes:
                deleted_keys = self.iceberg_name(batch.table) if consult else None
                self.merger.merge(tid, state, batch.changes, counts, deleted_keys=deleted_keys, before_write=remembered_first)
            if batch.appends and state.key:
                # a change whose key is unknown (e.g. a delete whose key column was absent)
                # cannot be applied to a keyed table; it is counted and logged, not guessed
                counts["unkeyed"] = len(batch.appends)
                log.warning("table %s: %d changes without a key skipped (the table is keyed)", tid, len(batch.appends))
            elif batch.appends:
                remembered_first()
                self.merger.append(tid, state, batch.appends)
                counts["appends"] = len(batch.appends)
        try:
            self._with_commit_properties(props, work)
        except BaseException:
            # never leave the append running past the batch (a retry would race it)
            if remembered is not None:
                with contextlib.suppress(Exception):
                    remembered.result()
            raise
        remembered_first()  # already done unless the batch wrote nothing; its failure is raised
        self._committed(state, props, truncated, None)
        return counts

    def commit_files(self, table: tuple[str, str], files: TableFiles, offsets: dict[str, int], newest: dict[str, str]) -> bool:
        """Commit what the write tasks wrote for ``table`` (:class:`sink.tasks.TableFiles`) in one
        Iceberg snapshot: a ``RowDelta`` of the new rows and the equality deletes of the keys they
        replace or delete (an append for a table without a key), with the offsets it covers and
        the newest sequences in its summary. Returns whether a snapshot was committed (not when
        the batch brought nothing to write). A failure is raised as :class:`TableWriteError`."""
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        if files.empty:
            return False
        tid = self.table_id(table)
        state = self._state[tid]
        try:
            jt = self._java(table, refresh=False)  # refreshed by this batch's owner check
            key_ids = self._key_ids(table, jt) if files.deletes is not None else []
            truncated = self._truncate_watermark(state, None)
            props = self._commit_properties(state, offsets, newest, truncated)
            crash_point("mid-merge")
            snapshot = self.commits.commit(table, jt, files, key_ids, props, state.snapshot_id)
        except (Py4JError, PySparkException, OSError) as exc:
            raise TableWriteError(".".join(table), exc) from exc
        self._committed(state, props, truncated, snapshot)
        return True

    def _history_delta(self, batch: TableBatch, state: _TableState, tid: str, props: dict[str, str]) -> int | None:
        """Write an ordered history batch as a row delta (:meth:`sink.scd2.HistoryWriter.write_delta`);
        returns its snapshot, or ``None`` when it is to be MERGEd (late changes, a truncate, a
        value Parquet cannot hold here, a partitioned table the commit helper cannot write)."""
        from sink.arrow import Unrepresentable, storage_options

        table = batch.table
        layout = self.layout(table)
        if not in_order(batch.appends, self.newest_sequences(table)) or (layout.partition and not (
                layout.row_deltas and self.commits.partitions)):
            return None
        location, schema = self.plan_of(table)
        plan = TablePlan(table, self.iceberg_name(table), location, schema, state.key, {}, layout.partition, layout.sort)
        jt = self._java(table, refresh=False)  # refreshed by this batch's conflict check
        key_ids = [*self._key_ids(table, jt), jt.schema().findField(SEQ_COLUMN).fieldId()]
        committed: list[int] = []

        def commit(files: TableFiles) -> int:
            crash_point("mid-merge")
            committed.append(self.commits.commit(table, jt, files, key_ids, props, state.snapshot_id))
            return committed[-1]

        try:
            self.history.write_delta(tid, jt, plan, batch.appends, commit, storage_options(self.config.catalog.properties))
        except Unrepresentable as exc:
            log.info("table %s: %s; the batch is MERGEd", tid, exc)
        return committed[-1] if committed else None

    def _truncate_watermark(self, state: _TableState, truncate_seq: str | None) -> tuple[str, int] | None:
        """The truncate to remember with this batch's commit: the batch's own, else the table's
        last one while it is within ``deleted_keys_retention_seconds``."""
        retention_ms = self.config.deleted_keys_retention_seconds * 1000
        if retention_ms <= 0:
            return None
        now = int(time.time() * 1000)
        if truncate_seq is not None and (state.truncated is None or truncate_seq >= state.truncated[0]):
            return truncate_seq, now
        if state.truncated is not None and now - state.truncated[1] <= retention_ms:
            return state.truncated
        return None

    def remembered_truncate(self, table: tuple[str, str]) -> str | None:
        """The sequence of the table's last truncate while it is remembered (changes not newer
        than it are left out, :func:`sink.merge.after_truncate`)."""
        state = self._load_state(table)
        if state is None:
            return None
        if not state.summary_loaded:
            self._read_summary(table, state)
        truncated = self._truncate_watermark(state, None)
        return truncated[0] if truncated else None

    def write_plan(self, table: tuple[str, str], summary: TableSummary) -> WritePlan:
        """How the table's micro-batch (``summary``: what the read tasks found of it) is written,
        row delta or MERGE, and why (:func:`sink.write_plan.plan_write`): against the table's
        newest sequences and its remembered truncate, under ``sink.upsert_mode``."""
        if self.mode_of(table) is TableMode.CHANGELOG:
            plan = WritePlan(WriteMethod.ROW_DELTA, "a changelog: every change appended")
        elif self.mode_of(table) is TableMode.HISTORY:
            return WritePlan(WriteMethod.MERGE, "a history table: the versions of the keys it touches are MERGEd")
        else:
            plan = plan_write(summary, self.newest_sequences(table), self.remembered_truncate(table), self.config.upsert_mode)
        if plan.row_delta and self.layout(table).partition:
            if not self.layout(table).row_deltas:
                return WritePlan(WriteMethod.MERGE, "a partitioned table without an unpartitioned spec (created "
                                 "partitioned outside the sink) or partitioned by a nested column")
            if not self.commits.partitions:
                return WritePlan(WriteMethod.MERGE, "a partitioned table, and the compiled commit helper is not available")
        return plan

    # -- maintenance --------------------------------------------------------------------

    def maintenance_due(self, table: tuple[str, str]) -> bool:
        """Whether the table is due for maintenance: every ``maintenance.every_batches`` commits
        to it (counted in this process, the first time after at least that many), at a commit
        count offset per table (its name's hash), so tables written by the same micro-batches come
        due in different ones."""
        m = self.config.maintenance
        tid = self.table_id(table)
        state = self._state.get(tid)
        if not m.enabled or state is None or state.commits < m.every_batches:
            return False
        return (state.commits + _stagger(tid, m.every_batches)) % m.every_batches == 0

    def maintain(self, table: tuple[str, str]) -> None:
        """Compact the table's data files, fold its delete files into them (position and
        equality deletes: ``delete-file-threshold`` 1, then the deletes that no longer apply to
        any data file are dropped), and expire old snapshots."""
        m = self.config.maintenance
        tid = self.table_id(table)
        cat = quote(self.config.catalog.name)
        ident = f"{quote(table[0])}.{quote(table[1])}"
        self.spark.sql(
            f"CALL {cat}.system.rewrite_data_files(table => '{ident}', "
            f"options => map('min-input-files', '{m.min_input_files}', 'delete-file-threshold', '1', "
            f"'remove-dangling-deletes', 'true'))"
        ).collect()
        dropped = drop_dangling_equality_deletes(self.spark, self._java(table), tid)
        self.spark.sql(
            f"CALL {cat}.system.rewrite_position_delete_files(table => '{ident}', "
            f"options => map('rewrite-all', 'true'))"
        ).collect()
        self.spark.sql(
            f"CALL {cat}.system.expire_snapshots(table => '{ident}', "
            f"older_than => TIMESTAMP '{older_than(m.expire_older_than_seconds)}', retain_last => {m.retain_last})"
        ).collect()
        log.info("maintenance done on %s (%d equality-delete files folded in)", tid, dropped)

def _stagger(name: str, every: int) -> int:
    """A stable offset in ``[0, every)`` for ``name`` (not Python's salted ``hash``).

    >>> _stagger("`lake`.`db`.`t`", 20) == _stagger("`lake`.`db`.`t`", 20) < 20
    True
    """
    return zlib.crc32(name.encode()) % every


def _cdcnorm_summary(jt: Any, snapshot: Any) -> tuple[dict[str, str] | None, Any]:
    """The cdcnorm properties of the newest snapshot from ``snapshot`` back that has them (past
    maintenance's snapshots; ``""``: one it lacks), and that snapshot; ``(None, None)``: no
    cdcnorm commit."""
    while snapshot is not None:
        found = snapshot.summary()
        if found.get(OFFSETS_PROPERTY) is not None:
            keys = (OFFSETS_PROPERTY, TRUNCATED_PROPERTY, NEWEST_PROPERTY, BASE_PROPERTY)
            return {k: found.get(k) or "" for k in keys}, snapshot
        parent = snapshot.parentId()
        snapshot = jt.snapshot(parent) if parent is not None else None
    return None, None


def _fold(newest: dict[str, str], seqs: Any) -> None:
    """Fold sequences into ``newest`` (per sequence class, the highest)."""
    for seq in seqs:
        cls = seq_class(seq)
        if seq > newest.get(cls, ""):
            newest[cls] = seq
