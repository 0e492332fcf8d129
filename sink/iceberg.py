"""Spark + Iceberg: sessions, table creation and evolution, MERGE with commit properties.

All Spark code of the sink lives here. The MERGE of a compacted batch and the Kafka offsets it
covers are committed in one Iceberg snapshot: the offsets are written into the snapshot summary
(``cdcnorm.offsets``) through Iceberg's ``CommitMetadata.withCommitProperties``, and read back
on start, so a crash between the Iceberg commit and the Kafka commit neither loses nor
double-applies a change.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from service.extras import require_extras
from sink.changes import SinkChange, TableBatch
from sink.config import JarSource, SinkConfig, WriteMode
from sink.faults import crash_point
from sink.types import SinkColumn, widening
from transforms.envelope import Operation
from transforms.errors import MissingExtraError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELETED_AT_COLUMN",
    "DELETED_KEYS_SUFFIX",
    "OFFSETS_PROPERTY",
    "OWNER_PROPERTY",
    "SEQ_COLUMN",
    "TS_COLUMN",
    "IcebergTables",
    "IncompatibleSchemaError",
    "TableOwnershipError",
    "TableWriteError",
    "build_spark",
    "iceberg_jar",
]

log = logging.getLogger("cdcnorm.sink")

OFFSETS_PROPERTY = "cdcnorm.offsets"
# the table's last truncate, {"seq": ..., "at": epoch ms}, carried in every commit's summary while
# it is remembered (sink.deleted_keys_retention_seconds), like the offsets
TRUNCATED_PROPERTY = "cdcnorm.truncated"
KEY_PROPERTY = "cdcnorm.key-columns"
# the group_id of the sink that writes the table (check_owner): one writer per table
OWNER_PROPERTY = "cdcnorm.owner"
SEQ_COLUMN = "__cdc_seq"
TS_COLUMN = "__cdc_ts_ms"
OP_COLUMN = "__cdc_op"
UNAVAILABLE_COLUMN = "__cdc_unavailable"
# column -> sequence of the earlier change of the batch a partial change's value was taken from
FILLED_COLUMN = "__cdc_filled"
# Deleted keys: a side table per keyed table, ``<table>__cdc_deleted_keys`` in the same namespace,
# holding the key, the sequence of the delete and when the sink recorded it (see write_batch)
DELETED_KEYS_SUFFIX = "__cdc_deleted_keys"
DELETED_KEYS_OF_PROPERTY = "cdcnorm.deleted-keys-of"
DELETED_AT_COLUMN = "__cdc_deleted_at"
DELETED_SEQ = "__cdc_deleted_seq"
# the op of a delete as a SQL literal (the MERGE source's __cdc_op column holds Operation values)
_DELETE = f"'{Operation.DELETE.value}'"


_DISTRIBUTION_PROPERTIES = (
    "write.distribution-mode",
    "write.merge.distribution-mode",
    "write.update.distribution-mode",
    "write.delete.distribution-mode",
)


class IncompatibleSchemaError(Exception):
    """A change's schema cannot be applied to the stored table (not a safe widening)."""


class TableWriteError(Exception):
    """Writing a table's batch failed in Spark, Iceberg or the file system (the cause is chained):
    nothing of the batch is committed to that table; the sink tries the batch again
    (:mod:`sink.retry`)."""

    def __init__(self, table: str, cause: BaseException) -> None:
        super().__init__(f"writing table {table} failed: {type(cause).__name__}")
        self.table = table


class TableOwnershipError(Exception):
    """Another sink owns the table (:data:`OWNER_PROPERTY`): this sink stops without writing it."""

    def __init__(self, tid: str, owner: str | None, group: str) -> None:
        super().__init__(
            f"table {tid} belongs to another sink: its {OWNER_PROPERTY} table property names consumer group "
            f"{owner!r}, and this sink's group_id is {group!r}. Two sinks writing one table conflict on every "
            "commit, and with a catalog that cannot fence concurrent commits (hadoop on a local or object-store "
            "file system) can lose changes, so this sink stops without writing it. If that sink is gone for good "
            f"and this one replaces it, set sink.take_over_tables_from: {owner!r} (or clear the marker: ALTER TABLE "
            f"{tid} UNSET TBLPROPERTIES ('{OWNER_PROPERTY}')) and start this sink again; a sink still running "
            "under that group then stops at its next micro-batch."
        )
        self.table = tid
        self.owner = owner


def _not_found(exc: Exception) -> bool:
    """Whether a Spark error says the table does not exist."""
    return "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower()


def _sql_string(value: str) -> str:
    r"""A Spark SQL string literal.

    >>> print(_sql_string("it's a\\b"))
    'it\'s a\\b'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def iceberg_jar() -> str:
    """The Iceberg Spark runtime jar shipped in the ``snowpark-connect-deps-iceberg`` wheel."""
    try:
        import snowpark_connect_deps_iceberg as wheel
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            "the Iceberg runtime jar (sink.jar_source: wheel)", ["sink"], ["snowpark_connect_deps_iceberg"]
        ) from exc
    jars = glob.glob(os.path.join(os.path.dirname(wheel.__file__), "jars", "iceberg-spark-runtime-3.5_2.12-*.jar"))
    if not jars:
        raise RuntimeError("no iceberg-spark-runtime-3.5 jar in snowpark-connect-deps-iceberg (pin 1.0.1)")
    return jars[0]


def _local_cores(master: str) -> int | None:
    """The task slots of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``).

    >>> _local_cores("local[2]"), _local_cores("local"), _local_cores("spark://h:7077")
    (2, 1, None)
    """
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match[1] == "*" else int(match[1])


def spark_conf(config: SinkConfig) -> dict[str, str]:
    """The Spark conf of the sink session: jar, extensions, catalog, then the user's passthrough."""
    cat = config.catalog
    prefix = f"spark.sql.catalog.{cat.name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # MERGE joins on a shuffle: one partition per local core (no straggler task in a second
        # wave, fewer files per commit); 4 on a cluster master
        "spark.sql.shuffle.partitions": str(_local_cores(config.spark_master) or 4),
        "spark.sql.session.timeZone": "UTC",
        # the tables of a micro-batch are written from several driver threads at once
        # (sink.table_parallelism), each in its own pool: FAIR shares the executors between them
        # instead of running one table's jobs to the end before the next table's start
        "spark.scheduler.mode": "FAIR",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    }
    if cat.type in ("hadoop", "rest", "hive", "glue"):
        if cat.type == "glue":
            conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.aws.glue.GlueCatalog"
        else:
            conf[f"{prefix}.type"] = cat.type
    if cat.type == "hadoop" or cat.warehouse:
        conf[f"{prefix}.warehouse"] = config.warehouse_path()
    for key, value in cat.properties.items():
        conf[f"{prefix}.{key}"] = value
    if config.jar_source is JarSource.WHEEL:
        conf["spark.jars"] = iceberg_jar()
    elif config.jar_source is JarSource.PACKAGES:
        conf["spark.jars.packages"] = config.jar_packages
    conf.update(config.spark_conf)
    return conf


def build_spark(config: SinkConfig) -> SparkSession:
    """A Spark session configured for the sink."""
    require_extras("a Spark session (the Iceberg sink)", "sink")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(config.spark_master).appName("cdcnorm-sink")
    for key, value in spark_conf(config).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def quote(name: str) -> str:
    """A backtick-quoted SQL identifier.

    >>> quote("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


@dataclass
class _TableState:
    columns: dict[str, str]  # name -> spark sql type (data columns only)
    key: tuple[str, ...]
    commits: int = 0
    deleted_keys: bool | None = None  # whether the deleted-keys side table exists (None: not looked up)
    truncated: tuple[str, int] | None = None  # the last truncate remembered: (sequence, epoch ms)
    summary_loaded: bool = False  # truncated was read from the newest cdcnorm snapshot
    # the highest sequence remembered in the deleted-keys side table (None: none), once read
    newest_delete: str | None = None
    newest_delete_known: bool = False


class _JavaCallable:
    """``work`` as a ``java.util.concurrent.Callable`` for py4j; keeps the exception it raised."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work: Callable[[], None] | None = work
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            if self.work is not None:
                self.work()
        except BaseException as exc:  # surfaced after the Java call returns
            self.error = exc
            raise
        return None

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]


class IcebergTables:
    """Creates, evolves and merges into the Iceberg tables of one catalog."""

    def __init__(self, spark: SparkSession, config: SinkConfig) -> None:
        self.spark = spark
        self.config = config
        self._state: dict[str, _TableState] = {}
        self._callback_ready = False
        self._callback_lock = threading.Lock()

    # -- naming -----------------------------------------------------------------------

    def namespace_id(self, table: tuple[str, str]) -> str:
        return f"{quote(self.config.catalog.name)}.{quote(self.config.namespace or table[0])}"

    def table_id(self, table: tuple[str, str]) -> str:
        return f"{self.namespace_id(table)}.{quote(table[1])}"

    def deleted_keys_id(self, table: tuple[str, str]) -> str:
        """The side table remembering the table's deleted keys (:meth:`write_batch`)."""
        return f"{self.namespace_id(table)}.{quote(table[1] + DELETED_KEYS_SUFFIX)}"

    # -- schema -------------------------------------------------------------------------

    def _load_state(self, tid: str) -> _TableState | None:
        state = self._state.get(tid)
        if state is not None:
            return state
        if not self._exists(tid):
            return None
        cols: dict[str, str] = {}
        for field in self.spark.table(tid).schema.fields:
            if field.name in (SEQ_COLUMN, TS_COLUMN, OP_COLUMN):
                continue
            cols[field.name] = field.dataType.simpleString()
        props = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {tid}").collect()}
        key = tuple(k for k in props.get(KEY_PROPERTY, "").split(",") if k)
        state = self._state[tid] = _TableState(cols, key)
        return state

    def _exists(self, tid: str) -> bool:
        try:
            self.spark.table(tid).schema  # noqa: B018 - resolves the table
        except Exception as exc:
            if _not_found(exc):
                return False
            raise
        return True

    def forget_cached(self) -> None:
        """Drop what is cached of the tables (schema, key, the last truncate): read again from
        the catalog on next use, after a failed write left it in doubt."""
        self._state.clear()

    # -- ownership ----------------------------------------------------------------------

    def check_owner(self, table: tuple[str, str]) -> None:
        """Make sure this sink may write ``table``: its :data:`OWNER_PROPERTY` names this sink's
        group, or names nobody (a table from before owners, or whose marker an operator cleared)
        or the group of ``take_over_tables_from``, and is then claimed. Raises
        :class:`TableOwnershipError` when another group owns it. Reads the table's current
        metadata (the catalog caches tables), so a claim by another sink since the last batch is
        seen. A table that does not exist yet gets this sink's group when it is created."""
        tid = self.table_id(table)
        try:
            self.spark.sql(f"REFRESH TABLE {tid}")
        except Exception as exc:
            if _not_found(exc):
                return
            raise
        owner = self._owner(tid)
        if owner == self.config.group_id:
            return
        if owner is None or owner == self.config.take_over_tables_from:
            self._claim(tid, owner)
            return
        raise TableOwnershipError(tid, owner, self.config.group_id)

    def take_over(self, previous: str) -> list[str]:
        """Claim every table of the catalog (of ``sink.namespace``, else of every namespace) that
        the sink of group ``previous`` owns; returns their ids."""
        cat = quote(self.config.catalog.name)
        if self.config.namespace:
            namespaces = [self.config.namespace]
        else:
            namespaces = [r[0] for r in self.spark.sql(f"SHOW NAMESPACES IN {cat}").collect()]
        claimed = []
        for ns in namespaces:
            for row in self.spark.sql(f"SHOW TABLES IN {cat}.{quote(ns)}").collect():
                name = row["tableName"]
                tid = f"{cat}.{quote(ns)}.{quote(name)}"
                if not name.endswith(DELETED_KEYS_SUFFIX) and self._owner(tid) == previous:
                    self._claim(tid, previous)
                    claimed.append(tid)
        return claimed

    def _owner(self, tid: str) -> str | None:
        props = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {tid}").collect()}
        return props.get(OWNER_PROPERTY)

    def _claim(self, tid: str, previous: str | None) -> None:
        """Set this sink's group as the table's owner, then read it back: of two sinks claiming
        at once, the one whose claim was overwritten stops (:class:`TableOwnershipError`)."""
        group = self.config.group_id
        self.spark.sql(f"ALTER TABLE {tid} SET TBLPROPERTIES ('{OWNER_PROPERTY}'={_sql_string(group)})")
        self._verify_owner(tid)
        log.warning(
            "table %s now belongs to this sink (group %s); it %s", tid, group,
            f"belonged to group {previous}" if previous else "had no owner",
        )

    def _verify_owner(self, tid: str) -> None:
        self.spark.sql(f"REFRESH TABLE {tid}")
        owner = self._owner(tid)
        if owner != self.config.group_id:
            raise TableOwnershipError(tid, owner, self.config.group_id)

    def ensure_table(self, batch: TableBatch) -> str:
        """Create the table, or add new columns / apply safe widening. Returns the table id."""
        tid = self.table_id(batch.table)
        columns = batch.columns
        key = batch.key_columns
        state = self._load_state(tid)
        if state is None:
            self._create(tid, self.namespace_id(batch.table), columns, key)
            self._state[tid] = _TableState({c.name: c.sql_type for c in columns}, key, summary_loaded=True)
            return tid
        for col in columns:
            stored = state.columns.get(col.name)
            if stored is None:
                self.spark.sql(f"ALTER TABLE {tid} ADD COLUMN {quote(col.name)} {col.sql_type}")
                state.columns[col.name] = col.sql_type
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
                if col.name in state.key and self._has_deleted_keys(batch.table, state):
                    side = self.deleted_keys_id(batch.table)
                    self.spark.sql(f"ALTER TABLE {side} ALTER COLUMN {quote(col.name)} TYPE {target}")
        return tid

    def _create(self, tid: str, namespace: str, columns: tuple[SinkColumn, ...], key: tuple[str, ...]) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        defs = []
        for col in columns:
            not_null = " NOT NULL" if col.name in key else ""
            defs.append(f"{quote(col.name)} {col.sql_type}{not_null}")
        defs.append(f"{quote(SEQ_COLUMN)} string")
        defs.append(f"{quote(TS_COLUMN)} bigint")
        if not key:
            defs.append(f"{quote(OP_COLUMN)} string")
        mode = self.config.write_mode.value
        props = {
            "format-version": "2",
            "write.merge.mode": mode,
            "write.update.mode": mode,
            "write.delete.mode": mode,
            # the tables are unpartitioned: no shuffle of the merged rows before writing them
            # (Iceberg's default clusters them by data file, one more exchange per MERGE)
            **dict.fromkeys(_DISTRIBUTION_PROPERTIES, "none"),
            # merge-on-read: one position-delete file per MERGE task. With Iceberg's default
            # (file scope) a MERGE rewrites one delete file, earlier deletes included, for every
            # data file holding a changed key: with keys spread over the table, every data file
            # on every commit. Readers check the partition-scoped files against each data file
            # until maintenance (rewrite_data_files, rewrite_position_delete_files) folds them.
            "write.delete.granularity": "partition",
            KEY_PROPERTY: ",".join(key),
            **self.config.table_properties,
        }
        props_sql = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        props_sql += f", '{OWNER_PROPERTY}'={_sql_string(self.config.group_id)}"
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {tid} ({', '.join(defs)}) USING iceberg TBLPROPERTIES ({props_sql})")
        self._verify_owner(tid)  # another sink may have created it first
        if key and self.config.write_mode is WriteMode.COPY_ON_WRITE:
            # Iceberg 1.9.2 on Spark 3.5 fails merge-on-read writes to tables with identifier
            # fields ("Cannot add fieldId 1 as an identifier field"); the key is then kept in
            # the cdcnorm.key-columns property only.
            self.spark.sql(f"ALTER TABLE {tid} SET IDENTIFIER FIELDS {', '.join(quote(k) for k in key)}")
        log.info("created table %s key=%s mode=%s", tid, ",".join(key) or "-", mode)

    # -- offsets ------------------------------------------------------------------------

    def applied_offsets(self, table: tuple[str, str]) -> dict[str, int]:
        """The ``topic:partition -> next offset`` recorded with the table's newest cdcnorm commit."""
        tid = self.table_id(table)
        state = self._load_state(tid)
        if state is None:
            return {}
        return self._read_summary(tid, state)

    def _read_summary(self, tid: str, state: _TableState) -> dict[str, int]:
        """The offsets of the table's newest cdcnorm commit; its remembered truncate into ``state``."""
        rows = self.spark.sql(
            f"SELECT summary['{OFFSETS_PROPERTY}'] AS o, summary['{TRUNCATED_PROPERTY}'] AS tr FROM {tid}.snapshots "
            f"WHERE summary['{OFFSETS_PROPERTY}'] IS NOT NULL ORDER BY committed_at DESC LIMIT 1"
        ).collect()
        state.summary_loaded = True
        if not rows:
            return {}
        if rows[0]["tr"]:
            truncated = orjson.loads(rows[0]["tr"])
            state.truncated = (truncated["seq"], int(truncated["at"]))
        offsets: dict[str, int] = orjson.loads(rows[0]["o"])
        return offsets

    # -- writes -------------------------------------------------------------------------

    def _with_commit_properties(self, props: dict[str, str], work: Callable[[], None]) -> None:
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
        counts = {"upserts": 0, "deletes": 0, "appends": 0, "truncates": 0, "unkeyed": 0}
        props = {OFFSETS_PROPERTY: orjson.dumps(offsets, option=orjson.OPT_SORT_KEYS).decode()}
        truncated = self._truncate_watermark(tid, state, batch)
        if truncated is not None:
            props[TRUNCATED_PROPERTY] = orjson.dumps({"seq": truncated[0], "at": truncated[1]}).decode()
            batch = _after_truncate(batch, truncated[0])
        # the batch's deletes are remembered first, in their own commit: a crash before the
        # table's commit leaves markers that only say what is true (the key was deleted at that
        # sequence); the batch is read again and applied as before
        consult = self._may_be_superseded(batch.table, state, batch.changes)  # by an earlier batch's delete
        self._remember_deletes(batch.table, state, batch.changes)
        deleted_keys = self.deleted_keys_id(batch.table) if consult else None

        def work() -> None:
            crash_point("mid-merge")
            if batch.truncate:
                self.spark.sql(f"DELETE FROM {tid}")
                counts["truncates"] = 1
            if batch.changes:
                self._merge(tid, state, batch.changes, counts, deleted_keys=deleted_keys)
            if batch.appends and state.key:
                # a change whose key is unknown (e.g. a delete whose key column was absent)
                # cannot be applied to a keyed table; it is counted and logged, not guessed
                counts["unkeyed"] = len(batch.appends)
                log.warning("table %s: %d changes without a key skipped (the table is keyed)", tid, len(batch.appends))
            elif batch.appends:
                self._append(tid, state, batch.appends)
                counts["appends"] = len(batch.appends)
            if not (batch.truncate or batch.changes or batch.appends):
                return
        self._with_commit_properties(props, work)
        state.commits += 1
        state.truncated = truncated
        return counts

    def _truncate_watermark(self, tid: str, state: _TableState, batch: TableBatch) -> tuple[str, int] | None:
        """The truncate to remember with this batch's commit: the batch's own, else the table's
        last one while it is within ``deleted_keys_retention_seconds``."""
        retention_ms = self.config.deleted_keys_retention_seconds * 1000
        if retention_ms <= 0:
            return None
        if not state.summary_loaded:
            self._read_summary(tid, state)
        now = int(time.time() * 1000)
        if batch.truncate_seq is not None and (state.truncated is None or batch.truncate_seq >= state.truncated[0]):
            return batch.truncate_seq, now
        if state.truncated is not None and now - state.truncated[1] <= retention_ms:
            return state.truncated
        return None

    def _frame(self, state: _TableState, changes: list[SinkChange], with_unavailable: bool) -> Any:
        names = list(state.columns)
        cols_sql = [f"{quote(n)} {state.columns[n]}" for n in names]
        cols_sql += [f"{quote(OP_COLUMN)} string", f"{quote(SEQ_COLUMN)} string", f"{quote(TS_COLUMN)} bigint"]
        if with_unavailable:
            cols_sql.append(f"{quote(UNAVAILABLE_COLUMN)} array<string>")
            cols_sql.append(f"{quote(FILLED_COLUMN)} map<string,string>")
        schema = ", ".join(cols_sql)
        docs = _json_documents(state.columns, changes, with_unavailable)
        if docs is not None:
            # Built in the JVM from JSON text: no Python worker processes, and a source the MERGE
            # can read more than once cheaply. FAILFAST: a value Spark cannot parse is an error,
            # never a silently null column.
            from pyspark.sql import DataFrame

            jspark = self.spark._jsparkSession
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None
            dataset = jspark.createDataset(docs, jvm.org.apache.spark.sql.Encoders.STRING())
            return DataFrame(jspark.read().schema(schema).option("mode", "FAILFAST").json(dataset), self.spark)
        rows = []
        # an integral JSON number in a float/double column: a float, as the JSON path reads it
        # (Spark's Python-row conversion turns an int into NULL for these types)
        floating = [i for i, n in enumerate(names) if state.columns[n] in ("float", "double")]
        for ch in changes:
            image = ch.row or {}
            values: list[Any] = [image.get(n) for n in names]
            for i in floating:
                if type(values[i]) is int:
                    with contextlib.suppress(OverflowError):
                        values[i] = float(values[i])
            values += [str(ch.op), ch.seq, ch.ts_ms]
            if with_unavailable:
                values.append(sorted(ch.unavailable) if ch.unavailable else [])
                values.append(dict(ch.filled))
            rows.append(values)
        return self.spark.createDataFrame(rows, schema=schema, verifySchema=False)

    def _merge(
        self,
        tid: str,
        state: _TableState,
        changes: list[SinkChange],
        counts: dict[str, int],
        deleted_keys: str | None = None,
    ) -> None:
        """MERGE the batch's changes; with ``deleted_keys`` (the side table), a change that is not
        a delete and is not newer than a remembered delete of its key is left out of the source."""
        key = state.key or changes[-1].key_columns
        # the columns some change of the batch did not carry (partial images): an update keeps
        # their stored value where its change lacks them, or where the value was filled from an
        # earlier change of the batch that is not newer than the stored row. Usually none: then
        # every column is a plain assignment, the source frame has no unavailable array, and Spark
        # prunes the target scan (and the join's shuffle) to the key, the sequence and the row position.
        partial = frozenset().union(*(ch.unavailable for ch in changes), *(ch.filled for ch in changes))
        frame = self._frame(state, changes, with_unavailable=bool(partial))
        view = f"cdcnorm_src_{abs(hash(tid)) % 10**8}"
        frame.createOrReplaceTempView(view)
        views = [view]
        if deleted_keys is not None and any(c.op != Operation.DELETE for c in changes):
            raw, view = view, f"{view}_live"
            self.spark.sql(_not_deleted_sql(raw, deleted_keys, key)).createOrReplaceTempView(view)
            views.append(view)
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        newer = f"(t.{quote(SEQ_COLUMN)} IS NULL OR s.{quote(SEQ_COLUMN)} > t.{quote(SEQ_COLUMN)})"
        not_older = f"(t.{quote(SEQ_COLUMN)} IS NULL OR s.{quote(SEQ_COLUMN)} >= t.{quote(SEQ_COLUMN)})"
        sets = []
        for name in state.columns:
            q = quote(name)
            if name in partial:
                lit = "'" + name.replace("'", "''") + "'"
                sets.append(
                    f"t.{q} = CASE WHEN array_contains(s.{quote(UNAVAILABLE_COLUMN)}, {lit}) THEN t.{q} "
                    f"WHEN try_element_at(s.{quote(FILLED_COLUMN)}, {lit}) <= t.{quote(SEQ_COLUMN)} THEN t.{q} "
                    f"ELSE s.{q} END"
                )
            else:
                sets.append(f"t.{q} = s.{q}")
        sets.append(f"t.{quote(SEQ_COLUMN)} = s.{quote(SEQ_COLUMN)}")
        sets.append(f"t.{quote(TS_COLUMN)} = s.{quote(TS_COLUMN)}")
        insert_cols = [*state.columns, SEQ_COLUMN, TS_COLUMN]
        self.spark.sql(
            f"MERGE INTO {tid} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.{quote(OP_COLUMN)} = {_DELETE} AND {not_older} THEN DELETE "
            f"WHEN MATCHED AND s.{quote(OP_COLUMN)} <> {_DELETE} AND {newer} THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED AND s.{quote(OP_COLUMN)} <> {_DELETE} THEN INSERT ({', '.join(quote(c) for c in insert_cols)}) "
            f"VALUES ({', '.join('s.' + quote(c) for c in insert_cols)})"
        )
        for name in views:
            self.spark.catalog.dropTempView(name)
        counts["deletes"] = sum(1 for c in changes if c.op == Operation.DELETE)
        counts["upserts"] = len(changes) - counts["deletes"]

    def _append(self, tid: str, state: _TableState, changes: list[SinkChange]) -> None:
        frame = self._frame(state, changes, with_unavailable=False)
        cols = [*state.columns, SEQ_COLUMN, TS_COLUMN, OP_COLUMN]
        frame.select(*[quote(c) for c in cols]).writeTo(tid).append()

    # -- deleted keys -------------------------------------------------------------------

    def _has_deleted_keys(self, table: tuple[str, str], state: _TableState) -> bool:
        if state.deleted_keys is None:
            state.deleted_keys = bool(state.key) and self._exists(self.deleted_keys_id(table))
        return state.deleted_keys

    def _consults_deleted_keys(self, table: tuple[str, str], state: _TableState) -> bool:
        return self.config.deleted_keys_retention_seconds > 0 and bool(state.key) and self._has_deleted_keys(table, state)

    def _may_be_superseded(self, table: tuple[str, str], state: _TableState, changes: list[SinkChange]) -> bool:
        """Whether a remembered delete (of an earlier batch) can supersede one of ``changes``:
        only when some change that is not a delete is not newer than the newest remembered
        delete. In an ordered stream every change is newer, and the MERGE skips the anti-join
        against the side table; a replay or a late change needs it. Compaction leaves one change
        per key in a batch, so the batch's own deletes never supersede its other changes."""
        if not self._consults_deleted_keys(table, state):
            return False
        oldest = min((c.seq for c in changes if c.op != Operation.DELETE), default=None)
        if oldest is None:
            return False
        if not state.newest_delete_known:
            (row,) = self.spark.sql(f"SELECT max({quote(SEQ_COLUMN)}) AS newest FROM {self.deleted_keys_id(table)}").collect()
            state.newest_delete, state.newest_delete_known = row["newest"], True
        return state.newest_delete is not None and oldest <= state.newest_delete

    def _remember_deletes(self, table: tuple[str, str], state: _TableState, changes: list[SinkChange]) -> None:
        """Append the key and sequence of every delete of the batch to the table's side table
        (created on the first delete): an append, no row-level delete, one small commit."""
        if self.config.deleted_keys_retention_seconds <= 0 or not state.key:
            return
        deletes = [c for c in changes if c.op == Operation.DELETE and c.key is not None]
        if not deletes:
            return
        side = self.deleted_keys_id(table)
        if not self._has_deleted_keys(table, state):
            self._create_deleted_keys(table, side, state)
            state.deleted_keys = True
        key_state = _TableState({k: state.columns[k] for k in state.key}, state.key)
        rows = [replace(c, row=dict(zip(c.key_columns, c.key or (), strict=False)), unavailable=frozenset()) for c in deletes]
        frame = self._frame(key_state, rows, with_unavailable=False)
        frame.selectExpr(
            *(quote(k) for k in state.key), quote(SEQ_COLUMN), f"current_timestamp() AS {quote(DELETED_AT_COLUMN)}"
        ).writeTo(side).append()
        if state.newest_delete_known:
            newest = max(c.seq for c in deletes)
            if state.newest_delete is None or newest > state.newest_delete:
                state.newest_delete = newest

    def _create_deleted_keys(self, table: tuple[str, str], side: str, state: _TableState) -> None:
        defs = [f"{quote(k)} {state.columns[k]}" for k in state.key]  # nullable: appended from a frame
        defs += [f"{quote(SEQ_COLUMN)} string", f"{quote(DELETED_AT_COLUMN)} timestamp"]
        props = {
            "format-version": "2",
            **dict.fromkeys(_DISTRIBUTION_PROPERTIES, "none"),
            **self.config.table_properties,
            # appended to by every batch with deletes, read by every MERGE that may insert, and
            # deleted from only when markers expire (maintenance): copy-on-write keeps the reads
            # free of delete files (old files usually expire whole, a metadata-only delete)
            "write.delete.mode": "copy-on-write",
            "write.update.mode": "copy-on-write",
            "write.merge.mode": "copy-on-write",
            KEY_PROPERTY: ",".join(state.key),
            DELETED_KEYS_OF_PROPERTY: ".".join(table),
        }
        props_sql = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {side} ({', '.join(defs)}) USING iceberg TBLPROPERTIES ({props_sql})")
        log.info("created table %s: the deleted keys of %s", side, ".".join(table))

    def expire_deleted_keys(self, table: tuple[str, str]) -> None:
        """Forget the deletes recorded more than ``deleted_keys_retention_seconds`` ago, then
        compact the side table and expire its snapshots (maintenance)."""
        tid = self.table_id(table)
        state = self._load_state(tid)
        if state is None or not self._has_deleted_keys(table, state):
            return
        m = self.config.maintenance
        side = self.deleted_keys_id(table)
        cutoff = _older_than(self.config.deleted_keys_retention_seconds)
        self.spark.sql(f"DELETE FROM {side} WHERE {quote(DELETED_AT_COLUMN)} < TIMESTAMP '{cutoff}'")
        cat = quote(self.config.catalog.name)
        ident = f"{quote(self.config.namespace or table[0])}.{quote(table[1] + DELETED_KEYS_SUFFIX)}"
        self.spark.sql(
            f"CALL {cat}.system.rewrite_data_files(table => '{ident}', "
            f"options => map('min-input-files', '{m.min_input_files}'))"
        ).collect()
        self.spark.sql(
            f"CALL {cat}.system.expire_snapshots(table => '{ident}', "
            f"older_than => TIMESTAMP '{_older_than(m.expire_older_than_seconds)}', retain_last => {m.retain_last})"
        ).collect()

    # -- maintenance --------------------------------------------------------------------

    def maybe_maintain(self, table: tuple[str, str]) -> bool:
        """Compact files and expire snapshots every ``maintenance.every_batches`` commits."""
        m = self.config.maintenance
        tid = self.table_id(table)
        state = self._state.get(tid)
        if not m.enabled or state is None or state.commits == 0 or state.commits % m.every_batches:
            return False
        self.maintain(table)
        return True

    def maintain(self, table: tuple[str, str]) -> None:
        m = self.config.maintenance
        tid = self.table_id(table)
        cat = quote(self.config.catalog.name)
        ident = f"{quote(self.config.namespace or table[0])}.{quote(table[1])}"
        self.spark.sql(
            f"CALL {cat}.system.rewrite_data_files(table => '{ident}', "
            f"options => map('min-input-files', '{m.min_input_files}', 'delete-file-threshold', '1'))"
        ).collect()
        self.spark.sql(
            f"CALL {cat}.system.rewrite_position_delete_files(table => '{ident}', "
            f"options => map('rewrite-all', 'true'))"
        ).collect()
        self.spark.sql(
            f"CALL {cat}.system.expire_snapshots(table => '{ident}', "
            f"older_than => TIMESTAMP '{_older_than(m.expire_older_than_seconds)}', retain_last => {m.retain_last})"
        ).collect()
        self.expire_deleted_keys(table)
        log.info("maintenance done on %s", tid)


_JSON_CHUNK_BYTES = 8 * 1024 * 1024
_FLOAT32 = struct.Struct("<f")


class _NotJson(Exception):
    """A batch value that JSON text cannot carry exactly (the batch takes the Python-rows path)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _NotJson(f"decimal {value}")
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")  # Spark's JSON reader decodes base64 binary
    raise _NotJson(f"{type(value).__name__} value")


def _float32(value: Any) -> Any:
    """A float column's value rounded to float32 here, as the Python-rows path does in the JVM."""
    if isinstance(value, float):
        try:
            rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
        except (OverflowError, struct.error) as exc:
            raise _NotJson(f"float32 {value}") from exc
        return rounded
    return value


def _json_documents(
    columns: dict[str, str], changes: list[SinkChange], with_unavailable: bool
) -> list[str] | None:
    """The rows of a source frame as JSON array texts of at most ~8 MB each, or ``None`` when a
    value cannot be carried exactly (then the frame is built from Python rows).

    Values are what :mod:`sink.types` decoders return: dates and datetimes (ISO text, with the
    offset for zoned ones), ``Decimal`` (text, parsed at the column's scale), ``bytes`` (base64),
    numbers, strings, ``dict``/``list`` for structs, maps and arrays.
    """
    names = list(columns)
    if any("float" in t and t != "float" for t in columns.values()):
        return None  # float32 nested in a struct/array/map: keep the exact rows path
    floats = [n for n in names if columns[n] == "float"]
    dumps, default = orjson.dumps, _json_default
    docs: list[str] = []
    chunk: list[bytes] = []
    size = 0
    try:
        for ch in changes:
            image = ch.row or {}
            doc = {n: image.get(n) for n in names}
            for n in floats:
                doc[n] = _float32(doc[n])
            doc[OP_COLUMN] = str(ch.op)
            doc[SEQ_COLUMN] = ch.seq
            doc[TS_COLUMN] = ch.ts_ms
            if with_unavailable:
                doc[UNAVAILABLE_COLUMN] = sorted(ch.unavailable) if ch.unavailable else []
                doc[FILLED_COLUMN] = ch.filled
            text = dumps(doc, default=default)
            chunk.append(text)
            size += len(text) + 1
            if size >= _JSON_CHUNK_BYTES:
                docs.append((b"[" + b",".join(chunk) + b"]").decode())
                chunk, size = [], 0
    except (_NotJson, orjson.JSONEncodeError) as exc:
        log.debug("source frame from Python rows: %s", exc)
        return None
    if chunk:
        docs.append((b"[" + b",".join(chunk) + b"]").decode())
    return docs


def _orders_globally(seq: str) -> bool:
    """Whether a sequence orders against every change of its table: a source sequence does,
    a partition/offset position (``k...``, from :func:`sink.changes.ordering`) only within its
    partition."""
    return seq.startswith("s")


def _after_truncate(batch: TableBatch, truncate_seq: str) -> TableBatch:
    """``batch`` without the changes older than a truncate that an earlier batch (or this one)
    applied: a change of another partition may arrive a batch after the truncate, and would
    otherwise bring back a row the truncate removed. Deletes stay (harmless). Only changes
    whose sequence, like the truncate's, is a source sequence are compared."""
    if not _orders_globally(truncate_seq):
        return batch

    def kept(c: SinkChange) -> bool:
        return c.op == Operation.DELETE or not _orders_globally(c.seq) or c.seq > truncate_seq

    changes = [c for c in batch.changes if kept(c)]
    appends = [c for c in batch.appends if kept(c)]
    if len(changes) == len(batch.changes) and len(appends) == len(batch.appends):
        return batch
    log.info(
        "table %s: %d changes older than its last truncate left out",
        ".".join(batch.table),
        len(batch.changes) - len(changes) + len(batch.appends) - len(appends),
    )
    return replace(batch, changes=changes, appends=appends)


def _not_deleted_sql(source: str, deleted_keys: str, key: tuple[str, ...]) -> str:
    """The rows of ``source`` without the changes that a remembered delete supersedes: a change
    that is not a delete, of a key deleted at a sequence at least its own. The side table is
    first cut down to the batch's keys (a semi join that broadcasts them), so its scan is not
    shuffled however many keys it remembers."""
    keys = ", ".join(quote(k) for k in key)
    m_keys = ", ".join(f"m.{quote(k)}" for k in key)
    on_batch = " AND ".join(f"m.{quote(k)} = b.{quote(k)}" for k in key)
    on_source = " AND ".join(f"s.{quote(k)} = d.{quote(k)}" for k in key)
    op, seq = quote(OP_COLUMN), quote(SEQ_COLUMN)
    return (
        f"WITH b AS (SELECT DISTINCT {keys} FROM {source} WHERE {op} <> {_DELETE}), "
        f"d AS (SELECT /*+ BROADCAST(b) */ {m_keys}, max(m.{seq}) AS {quote(DELETED_SEQ)} "
        f"FROM {deleted_keys} m LEFT SEMI JOIN b ON {on_batch} GROUP BY {m_keys}) "
        f"SELECT s.* FROM {source} s LEFT ANTI JOIN d ON {on_source} "
        f"AND s.{op} <> {_DELETE} AND d.{quote(DELETED_SEQ)} >= s.{seq}"
    )


def _older_than(seconds: int) -> str:
    import datetime as dt

    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
