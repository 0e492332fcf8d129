"""The deleted-keys memory: one Iceberg table (``sink.deleted_keys_table``) holding, for every
table of the sink, the keys it deleted, each with the sequence of the delete and when the sink
recorded it. A late or replayed change that a remembered delete supersedes is left out of the
MERGE (:func:`sink.merge._not_deleted_sql`); the deletes are remembered for
``sink.deleted_keys_retention_seconds``, then expired by maintenance.

:class:`DeletedKeys` creates the table on the first delete, commits the files the write tasks
wrote for it (row deltas) or writes them itself (the MERGE path, in the background), tells whether
a batch needs the anti-join, and expires old markers. :class:`sink.iceberg.IcebergTables` owns one
(``tables.deleted_keys``).
"""

from __future__ import annotations

import datetime as dt
import logging
import operator
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from sink.changes import SinkChange
from sink.commits import in_this_thread
from sink.config import SinkConfig
from sink.retry import TableWriteError
from sink.sql import DISTRIBUTION_PROPERTIES, location_clause, older_than, quote
from sink.tasks import (
    DELETED_AT_COLUMN,
    KEY_COLUMN,
    SEQ_COLUMN,
    TABLE_COLUMN,
    deleted_key_rows,
    deleted_keys_file,
    seq_class,
)
from transforms.envelope import Operation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.iceberg import _TableState

__all__ = ["DELETED_KEYS_PROPERTY", "DeletedKeys"]

log = logging.getLogger("cdcnorm.sink")
_SEQ = operator.attrgetter("seq")

# the table property that marks the deleted-keys table
DELETED_KEYS_PROPERTY = "cdcnorm.deleted-keys"


class JavaTable(Protocol):
    """:meth:`sink.iceberg.IcebergTables.java_table`: the Iceberg ``Table`` of ``namespace, name``
    (``None``: it does not exist)."""

    def __call__(self, ident: tuple[str, str], refresh: bool = True) -> Any: ...


class DeletedKeys:
    """The deleted-keys memory of one sink: its table (created on first use), the appends to it,
    the expiry of old markers. ``java_table`` looks tables up through the catalog the
    :class:`sink.iceberg.IcebergTables` that owns this one keeps."""

    def __init__(self, spark: SparkSession, config: SinkConfig, java_table: JavaTable) -> None:
        self.spark = spark
        self.config = config
        self._java_table = java_table
        self._plan: tuple[str, str] | None = None  # its location and schema JSON, once created
        self._absent = False  # looked up and not there (see exist)
        self._lock = threading.Lock()
        self._remember_lock = threading.Lock()
        # the MERGE path's deleted-keys appends, in the background (no thread until the first)
        self._rememberer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdcnorm-deleted-keys")
        self._batches = 0  # batches that remembered deleted keys (their table's maintenance cadence)

    @property
    def jvm(self) -> Any:
        return self.spark.sparkContext._jvm

    def table_id(self) -> str:
        """The table remembering the deleted keys of every table (``sink.deleted_keys_table``)."""
        ns, name = self.config.deleted_keys_table.rsplit(".", 1)
        return f"{quote(self.config.catalog.name)}.{quote(ns)}.{quote(name)}"

    def forget_absent(self) -> None:
        """Look the table up again on next use (after a failed write left the catalog in doubt)."""
        self._absent = False

    def exist(self) -> bool:
        """Whether the deleted-keys table exists (looked up once: only this sink's deletes are
        remembered for its tables, and it creates the table on its first delete)."""
        if self._plan is None and self._absent:
            return False
        exists = self.plan(create=False) is not None
        self._absent = not exists
        return exists

    def plan(self, create: bool = True) -> tuple[str, str] | None:
        """The location and Iceberg schema (JSON) of the deleted-keys memory table, created on
        first use (``create``); ``None`` when it does not exist (or is not kept)."""
        if self.config.deleted_keys_retention_seconds <= 0:
            return None
        with self._lock:
            if self._plan is None:
                ns, name = self.config.deleted_keys_table.rsplit(".", 1)
                jt = self._java_table((ns, name))
                if jt is None:
                    if not create:
                        return None
                    self._create()
                    jt = self._java_table((ns, name))
                self._plan = (jt.location(), self.jvm.org.apache.iceberg.SchemaParser.toJson(jt.schema()))
            return self._plan

    def _create(self) -> None:
        ns = self.config.deleted_keys_table.rsplit(".", 1)[0]
        side = self.table_id()
        defs = [f"{quote(TABLE_COLUMN)} string", f"{quote(KEY_COLUMN)} string", f"{quote(SEQ_COLUMN)} string",
                f"{quote(DELETED_AT_COLUMN)} timestamp"]
        props = {
            "format-version": "2",
            **dict.fromkeys(DISTRIBUTION_PROPERTIES, "none"),
            **self.config.table_properties,
            # appended to by every batch with deletes, read only by a MERGE of late changes, and
            # deleted from only when markers expire (maintenance): copy-on-write keeps the reads
            # free of delete files (old files usually expire whole, a metadata-only delete)
            "write.delete.mode": "copy-on-write",
            "write.update.mode": "copy-on-write",
            "write.merge.mode": "copy-on-write",
            DELETED_KEYS_PROPERTY: "true",
        }
        props_sql = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(self.config.catalog.name)}.{quote(ns)}")
        location = location_clause(self.config.catalog.table_location, ns, self.config.deleted_keys_table.rsplit(".", 1)[1])
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {side} ({', '.join(defs)}) USING iceberg{location} TBLPROPERTIES ({props_sql})")
        log.info("created table %s: the deleted keys of every table", side)

    def remember(self, files: list[Any]) -> None:
        """Commit the deleted-keys files the write tasks wrote (:class:`sink.tasks.DeletedKeysFile`),
        one append for the whole batch, before any table's commit: a crash in between leaves
        markers that only say what is true (the key was deleted at that sequence)."""
        if not files:
            return
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        from sink.datafiles import FileEntries

        ns, name = self.config.deleted_keys_table.rsplit(".", 1)
        with self._remember_lock:  # MERGEd tables remember theirs from the table pool: one append at a time
            try:
                jt = self._java_table((ns, name), refresh=False)  # its only writer is this sink (a retry refreshes)
                entries = FileEntries(self.jvm, jt)
                append = jt.newAppend().scanManifestsWith(in_this_thread(self.jvm))
                for f in files:
                    append = append.appendFile(entries.data_file(f.file))
                append.commit()
            except (Py4JError, PySparkException, OSError) as exc:
                raise TableWriteError(self.config.deleted_keys_table, exc) from exc
            self._batches += 1

    def may_be_superseded(self, state: _TableState, changes: list[SinkChange]) -> bool:
        """Whether a remembered delete (of an earlier batch) can supersede one of ``changes``:
        only when some change that is not a delete is not newer than the table's newest
        sequence (which counts its deletes). In an ordered stream every change is newer, and the
        MERGE skips the anti-join against the memory; a replay or a late change needs it.
        Compaction leaves one change per key in a batch, so the batch's own deletes never
        supersede its other changes."""
        if not state.key or not self.exist():
            return False
        newest = state.newest
        if newest is not None and changes:
            oldest = min(map(_SEQ, changes))
            if oldest.startswith("s") and oldest > newest.get("s", ""):
                return False  # the usual case, at C speed: source sequences ("s" sorts after "k"), all newer
        return any(
            c.op != Operation.DELETE and (newest is None or c.seq <= newest.get(seq_class(c.seq), ""))
            for c in changes
        )

    def remember_async(self, table_id: str, state: _TableState, changes: list[SinkChange]) -> Future[None] | None:
        """Append the key and sequence of every delete of the batch to the deleted-keys memory
        (created on the first delete), in a background thread (one for the sink: the appends take
        turns anyway): a Parquet file written there and one small append commit, as the write
        tasks' files are (no Spark job). ``table_id``: the table's name in the memory
        (:meth:`sink.iceberg.IcebergTables.iceberg_name`). ``None`` when the batch has nothing to
        remember."""
        if not state.key:
            return None
        deletes = [c for c in changes if c.op == Operation.DELETE and c.key is not None]
        if not deletes:
            return None
        memory = self.plan()
        if memory is None:
            return None
        return self._rememberer.submit(self._remember, table_id, deletes, memory)

    def _remember(self, table_id: str, deletes: list[SinkChange], memory: tuple[str, str]) -> None:
        from sink.arrow import storage_options  # pyarrow: only where files are written

        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        try:
            file = deleted_keys_file(memory, deleted_key_rows(table_id, deletes, now),
                                     storage_options(self.config.catalog.properties))
        except OSError as exc:
            raise TableWriteError(self.config.deleted_keys_table, exc) from exc
        self.remember([file])

    def expire(self) -> None:
        """Forget the deletes recorded more than ``deleted_keys_retention_seconds`` ago, then
        compact the memory table and expire its snapshots (maintenance)."""
        if not self.exist():
            return
        m = self.config.maintenance
        side = self.table_id()
        cutoff = older_than(self.config.deleted_keys_retention_seconds)
        self.spark.sql(f"DELETE FROM {side} WHERE {quote(DELETED_AT_COLUMN)} < TIMESTAMP '{cutoff}'")
        cat = quote(self.config.catalog.name)
        ns, name = self.config.deleted_keys_table.rsplit(".", 1)
        ident = f"{quote(ns)}.{quote(name)}"
        self.spark.sql(
            f"CALL {cat}.system.rewrite_data_files(table => '{ident}', "
            f"options => map('min-input-files', '{m.min_input_files}'))"
        ).collect()
        self.spark.sql(
            f"CALL {cat}.system.expire_snapshots(table => '{ident}', "
            f"older_than => TIMESTAMP '{older_than(m.expire_older_than_seconds)}', retain_last => {m.retain_last})"
        ).collect()
        log.info("maintenance done on %s", side)

    def maintenance_due(self) -> bool:
        """Whether the deleted-keys memory is due for maintenance: every
        ``maintenance.every_batches`` batches that appended to it."""
        m = self.config.maintenance
        if not m.enabled or self._batches == 0 or self._batches % m.every_batches:
            return False
        self._batches += 1  # once per cadence, even if no batch appends before the next check
        return True
