"""Table maintenance off the micro-batch's path.

A table comes due for maintenance every ``maintenance.every_batches`` commits to it
(:meth:`sink.iceberg.IcebergTables.maintenance_due`); the micro-batch loop queues it here, and one
background thread maintains the queued tables one at a time (compaction, folding delete files in,
snapshot expiry: :meth:`~sink.iceberg.IcebergTables.maintain`; the deleted-keys table:
:meth:`~sink.deleted_keys.DeletedKeys.expire`), its Spark jobs in a FAIR pool of their
own. Maintenance costs seconds per table, a row delta tens of milliseconds: run inline, a database
of tables would stall the sink's freshness whenever tables come due.

Maintenance and the sink's commits may meet on a table: Iceberg retries a commit that lost the
race, and a compaction that finds new position deletes on files it rewrote fails its validation;
it is logged and tried again at the table's next cadence. Nothing maintenance does changes a
table's rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

__all__ = ["DELETED_KEYS", "Maintenance", "drop_dangling_equality_deletes"]

log = logging.getLogger("cdcnorm.sink")

DELETED_KEYS = ("", "")  # the queue's name for the deleted-keys table

QUEUED = Gauge("cdcnorm_sink_maintenance_queued", "Tables due for maintenance, waiting for the maintenance thread")
RUNS = Counter("cdcnorm_sink_maintenance_total", "Table maintenance runs, by outcome (done, failed)", ["outcome"])
SECONDS = Histogram("cdcnorm_sink_maintenance_seconds", "Seconds of one table's maintenance",
                    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600))


class Maintenance:
    """The queue of tables due for maintenance and the thread that maintains them."""

    def __init__(self, tables: Any, spark: Any = None) -> None:
        self.tables = tables
        self.spark = spark
        self._queue: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Condition()
        self._busy = False
        self._stop = False
        self._thread: threading.Thread | None = None

    def submit(self, table: tuple[str, str]) -> None:
        """Queue ``table`` (:data:`DELETED_KEYS`: the deleted-keys table) unless it is queued."""
        with self._lock:
            if self._stop:
                return
            self._queue[table] = None
            QUEUED.set(len(self._queue))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cdcnorm-maintenance", daemon=True)
                self._thread.start()
            self._lock.notify_all()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + self._busy

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued table is maintained (``sink --once`` does before it ends);
        returns whether they were within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self, timeout: float = 600.0) -> None:
        """Stop: the table being maintained is finished, the queued ones are left (they come due
        again at their next cadence)."""
        with self._lock:
            self._stop = True
            if self._queue:
                log.info("maintenance stopped with %d tables still queued", len(self._queue))
            self._queue.clear()
            QUEUED.set(0)
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        if self.spark is not None:
            sc = self.spark.sparkContext
            sc.setLocalProperty("spark.scheduler.pool", "cdcnorm-maintenance")
            sc.setJobDescription("cdcnorm maintenance")
            sc._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
        while True:
            with self._lock:
                while not self._queue and not self._stop:
                    self._lock.wait()
                if self._stop:
                    return
                table, _ = self._queue.popitem(last=False)
                QUEUED.set(len(self._queue))
                self._busy = True
            started = time.monotonic()
            try:
                if table == DELETED_KEYS:
                    self.tables.deleted_keys.expire()
                else:
                    self.tables.maintain(table)
                RUNS.labels("done").inc()
            except Exception as exc:  # the next cadence tries again; the sink goes on
                RUNS.labels("failed").inc()
                log.warning("maintenance of %s failed (tried again at its next cadence): %s: %s",
                            ".".join(table) or "the deleted-keys table", type(exc).__name__, str(exc).splitlines()[0][:500])
            finally:
                SECONDS.observe(time.monotonic() - started)
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()


def drop_dangling_equality_deletes(spark: Any, jt: Any, tid: str) -> int:
    """Remove the table's equality-delete files that apply to no live data file any more: those
    whose sequence number is not above the lowest of the data files (an equality delete applies
    to older data only), which is all of them once ``rewrite_data_files`` folded them in. Iceberg's
    own ``remove-dangling-deletes`` leaves unpartitioned deletes to their commits, which keep them
    (seen with 1.9.2; the sink's are unpartitioned in partitioned tables too, global deletes):
    without this, every row-delta commit's delete file would stay, and every read would load them
    all. ``jt``: the Java table (``None``: nothing to do). Returns how many."""
    (row,) = spark.sql(
        f"SELECT min(sequence_number) AS m FROM {tid}.entries WHERE status <> 2 AND data_file.content = 0"
    ).collect()
    snapshot = jt.currentSnapshot() if jt is not None else None
    if snapshot is None:
        return 0
    lowest = row["m"]
    io, specs = jt.io(), jt.specs()
    read = spark.sparkContext._jvm.org.apache.iceberg.ManifestFiles.readDeleteManifest
    rewrite = jt.newRewrite()
    dropped = 0
    for manifest in snapshot.deleteManifests(io):
        reader = read(manifest, io, specs)
        try:
            files = reader.iterator()
            while files.hasNext():
                f = files.next()
                if f.content().toString() == "EQUALITY_DELETES" and (lowest is None or f.dataSequenceNumber() <= lowest):
                    rewrite = rewrite.deleteFile(f.copy())
                    dropped += 1
        finally:
            reader.close()
    if dropped:
        rewrite.validateFromSnapshot(snapshot.snapshotId()).commit()
    return dropped
