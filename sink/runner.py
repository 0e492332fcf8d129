"""The micro-batch loop: Kafka offset ranges → Spark tasks that read, parse and write files →
one Iceberg commit per table → the Kafka offset commit.

Per micro-batch (a trigger interval apart, as Spark's ``ProcessingTime`` trigger; an idle sink
looks for records every ``poll_timeout_seconds``):

1. plan an offset range per assigned partition with new records (:mod:`sink.plan`);
2. **read job**: Spark tasks fetch the ranges and parse the records (:mod:`sink.source`); the
   changes stay cached in the executors, a summary per table comes back (:mod:`sink.tasks`);
3. per table: read its offsets and newest sequences (once), check its owner, create or evolve it,
   and choose how to write it (:mod:`sink.write_plan`): a **row delta** when every change is newer
   than what the table holds, else a **MERGE** (:mod:`sink.iceberg`);
4. **write job**: for the row-delta tables, Spark tasks compact the changes per key and write the
   Parquet data and equality-delete files; the driver commits each table in one snapshot tagged
   with its offsets (the MERGE tables' changes are collected and merged as before);
5. commit the Kafka offsets, only after every table's Iceberg commit;
6. print one progress line and update the metrics; run maintenance on its cadence.

A micro-batch whose writes fail is retried (:meth:`MicroBatchSink.run`): its offsets stay
uncommitted, its ranges are read again, and after a capped exponential back-off
(``sink.write_retry``) what an Iceberg commit already holds is skipped, as after a crash.

The loop keeps :class:`sink.health.SinkHealth` up to date (a batch in flight, each commit, the lag
after each plan), which ``/healthz`` and ``cdcnorm_sink_seconds_since_progress`` read.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import logging
import random
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from sink.arrow import storage_options
from sink.changes import SinkChange, TableBatch, compact, in_source_order
from sink.config import SinkConfig
from sink.faults import crash_point
from sink.health import SinkHealth
from sink.iceberg import IcebergTables, IncompatibleSchemaError
from sink.maintenance import DELETED_KEYS, Maintenance
from sink.plan import Partitions, driver_conf, subscription
from sink.retry import Backoff, describe_failure, failure_reason, is_retried
from sink.source import Range, TopicPartition, reader_conf, split_tasks
from sink.spark_session import build_spark, local_cores
from sink.table_settings import TableMode, TableNames
from sink.table_shape import TableSettingsError
from sink.tasks import (
    DeletedKeysFile,
    TableFiles,
    TablePlan,
    TableSummary,
    TaskSummary,
    first_item,
    of_tables,
    read_partition,
    route,
    slot,
    write_partition,
    write_tables,
)
from sink.write_plan import WriteMethod, WritePlan
from transforms.configfile import GroupProtocol

__all__ = ["BatchReport", "MicroBatchSink", "RunSummary", "serve_metrics"]

log = logging.getLogger("cdcnorm.sink")

ROWS_READ = Counter("cdcnorm_sink_rows_read_total", "Records read from normalized topics")
UPSERTS = Counter("cdcnorm_sink_upserts_total", "Rows upserted after compaction", ["table"])
DELETES = Counter("cdcnorm_sink_deletes_total", "Rows deleted after compaction", ["table"])
BAD_RECORDS = Counter("cdcnorm_sink_bad_records_total", "Records that are not canonical change events")
COMMIT_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Up to 10 minutes (the client's default buckets end at 10 s): the alert CdcnormSinkSlowCommits
fires on a p95 above 60 s, which ``histogram_quantile`` can only report with buckets above it."""
COMMIT_SECONDS = Histogram("cdcnorm_sink_commit_seconds", "Iceberg commit time per micro-batch",
                           buckets=COMMIT_SECONDS_BUCKETS)
FRESHNESS = Gauge("cdcnorm_sink_freshness_seconds", "Now minus the newest source ts_ms applied")
PAUSED = Gauge("cdcnorm_sink_paused_tables", "Tables paused on an incompatible schema change")
WRITE_FAILING = Gauge(
    "cdcnorm_sink_write_failing",
    "1 while a micro-batch whose writes failed is being retried (its Kafka offsets not committed), else 0",
)
WRITE_FAILURES = Counter(
    "cdcnorm_sink_write_failures_total",
    "Failed attempts to write a micro-batch, by table ('-': not a table's write, e.g. the Kafka offset "
    "commit) and reason (permission-denied, no-space, commit-conflict, commit-state-unknown, io, kafka, error)",
    ["table", "reason"],
)
COMMIT_CONFLICTS = Counter(
    "cdcnorm_sink_commit_conflicts_total",
    "Micro-batches read again because another writer of the table (a second sink of the group, during a "
    "rollout) committed to it first; its offsets are checked against the table before the retry",
    ["table"],
)
LAG = Gauge(
    "cdcnorm_sink_lag",
    "Records on a partition the sink has not read yet: high watermark minus consumer position, after each "
    "poll window. Best effort: the client's cached high watermark, and only as right as the broker's "
    "(the local Tansu broker's watermarks are wrong and under-report)",
    ["topic", "partition"],
)
LAST_COMMIT = Gauge(
    "cdcnorm_sink_last_commit_timestamp_seconds",
    "Unix time of the last micro-batch whose Iceberg commits and Kafka offset commit succeeded",
)
WAITING = Gauge(
    "cdcnorm_sink_waiting_topics",
    "Topics with records the sink has not read yet because their commit interval is not over "
    "(sink.commit_interval_seconds); their records wait in Kafka",
)
TABLE_WRITES = Counter(
    "cdcnorm_sink_table_writes_total",
    "Table commits by how the micro-batch was written: row-delta (equality deletes and new rows, no Spark "
    "job) or merge (a Spark MERGE: late or replayed changes, partial rows, truncates, upsert_mode merge)",
    ["mode"],
)
SINCE_PROGRESS = Gauge(
    "cdcnorm_sink_seconds_since_progress",
    "Seconds the sink has had records to read or a micro-batch in flight without committing one "
    "(0 while it has nothing to read); /healthz fails above sink.liveness_stall_seconds",
)


Table = tuple[str, str]
_Item = tuple[Table, TableBatch, dict[str, int]]  # a table, its compacted batch, its offsets
_T = TypeVar("_T")
_R = TypeVar("_R")

TOUCHED_SHOWN = 8
STALL_SECONDS = 10.0  # a read task gives up on a broker that sends nothing, not even end-of-partition  # table names on a progress line; the rest as "+N"


@dataclass
class BatchReport:
    """What one micro-batch did: the counts, how long it took from its plan to its Kafka commit
    (``seconds``: the read job, then ``commit_seconds`` of table work, of which ``files_seconds``
    the write job), and the lag left after it (``lag``)."""

    rows_read: int = 0
    changes: int = 0
    upserts: int = 0
    deletes: int = 0
    appends: int = 0
    truncates: int = 0
    tables: list[str] = field(default_factory=list)
    commit_seconds: float = 0.0
    read_seconds: float = 0.0  # the read job (fetch and parse)
    files_seconds: float = 0.0  # the write job (the row-delta tables' files)
    newest_ts_ms: int | None = None
    skipped_applied: int = 0
    seconds: float = 0.0
    lag: int | None = None
    row_deltas: int = 0  # tables written by a row delta
    merges: int = 0  # tables written by a MERGE
    waiting: int = 0  # topics whose commit interval is not over (commit_interval_seconds)

    @property
    def rows_per_second(self) -> float:
        """Records read per second of processing (read, parse, write and commits; not the wait for the trigger)."""
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        fresh = "-"
        if self.newest_ts_ms:
            fresh = f"{max(0.0, time.time() - self.newest_ts_ms / 1000):.1f}s"
        touched = ",".join(self.tables[:TOUCHED_SHOWN]) or "-"
        if len(self.tables) > TOUCHED_SHOWN:
            touched += f",+{len(self.tables) - TOUCHED_SHOWN}"
        return (
            f"batch: read={self.rows_read} changes={self.changes} upserts={self.upserts} deletes={self.deletes} "
            f"appends={self.appends} truncates={self.truncates} tables={len(self.tables)} "
            f"commit={self.commit_seconds:.2f}s freshness={fresh} rows/s={self.rows_per_second:.0f} "
            f"jobs={self.read_seconds:.2f}s+{self.files_seconds:.2f}s "
            f"lag={'-' if self.lag is None else self.lag} touched={touched}"
            + (f" row_deltas={self.row_deltas} merges={self.merges}" if self.tables else "")
            + (f" waiting_topics={self.waiting}" if self.waiting else "")
            + (f" skipped(already applied)={self.skipped_applied}" if self.skipped_applied else "")
        )


RECENT_REPORTS = 100


@dataclass
class RunSummary:
    """What :meth:`MicroBatchSink.run` did: totals, and the reports of the last non-empty batches
    only (an endless run keeps constant memory)."""

    batches: int = 0
    rows_read: int = 0
    recent: deque[BatchReport] = field(default_factory=lambda: deque(maxlen=RECENT_REPORTS))

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        self.rows_read += report.rows_read
        self.recent.append(report)


def serve_metrics(port: int, health: SinkHealth) -> Any:
    """Serve the sink's Prometheus metrics on ``/metrics``, and ``/healthz`` and ``/readyz`` from
    ``health`` (:func:`sink.health.serve`); returns the server."""
    from sink.health import serve

    return serve(port, health)




def _merged(summaries: list[TaskSummary]) -> tuple[dict[Table, TableSummary], TaskSummary]:
    """The tasks' summaries folded: per table, and the ranges read and bad records of all."""
    tables: dict[Table, TableSummary] = {}
    whole = TaskSummary()
    for s in summaries:
        whole.reads += s.reads
        whole.bad += s.bad
        whole.bad_count += s.bad_count
        for table, summary in s.tables.items():
            if table in tables:
                tables[table].merge(summary)
            else:
                tables[table] = summary
    return tables, whole


@dataclass
class _Batch:
    """One micro-batch in the driver: its ranges, the cached read, what it decided per table."""

    ranges: list[Range]
    rdd: Any = None
    tables: dict[Table, TableSummary] = field(default_factory=dict)
    tasks_of: dict[Table, set[int]] = field(default_factory=dict)  # the read tasks that hold a table's changes
    paused_first: dict[TopicPartition, int] = field(default_factory=dict)  # where a paused table's changes start


class MicroBatchSink:
    """Consumes normalized topics into Iceberg tables, one micro-batch at a time."""

    def __init__(
        self,
        config: SinkConfig,
        bootstrap_servers: str,
        consumer_conf: dict[str, Any] | None = None,
        report: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.config = config
        self._names = TableNames(config.tables, config.namespace)  # how the read tasks name tables
        self.bootstrap_servers = bootstrap_servers
        self.consumer_conf = consumer_conf or {}
        self.report = report or (lambda r: log.info(r.line()))
        self._stop = False
        self._paused_tables: dict[Table, str] = {}
        self.spark: Any = None
        self.tables: IcebergTables | None = None
        self.partitions: Partitions | None = None
        self._next_batch: float | None = None  # when the next micro-batch may start (monotonic)
        retry = config.write_retry
        self._backoff = Backoff(retry.initial_backoff_seconds, retry.max_backoff_seconds)
        self._batch_start: dict[TopicPartition, int] = {}  # the current batch's first offset per partition
        self._failed_attempts = 0  # consecutive failed attempts of the current batch
        self._failing_since: float | None = None  # when its first attempt failed (monotonic)
        self._conflicts = 0  # consecutive attempts of the current batch that lost a commit race
        self.health = SinkHealth(config.liveness_stall_seconds)
        SINCE_PROGRESS.set_function(self.health.seconds_since_progress)
        self._lag_labels: set[TopicPartition] = set()
        self._pool: ThreadPoolExecutor | None = None  # commits the tables of a batch (table_parallelism)
        self._last_read: dict[str, float] = {}  # per topic, when a batch last read it (commit_interval_seconds)
        self._known: set[Table] = set()  # tables whose owner and offsets this process has read
        self._draining = False  # a run with ``once`` found nothing else to do: waiting topics are read now
        self._maintenance: Maintenance | None = None

    @property
    def maintenance(self) -> Maintenance:
        """The background maintenance of the tables (:mod:`sink.maintenance`), made on first use."""
        if self._maintenance is None:
            self._maintenance = Maintenance(self.tables, self.spark)
        return self._maintenance

    @property
    def consumer(self) -> Any:
        return None if self.partitions is None else self.partitions.consumer

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.spark = build_spark(self.config)
        self.tables = IcebergTables(self.spark, self.config)
        if self.config.take_over_tables_from:
            claimed = self.tables.take_over(self.config.take_over_tables_from)
            log.warning("took over %d tables from group %s: %s", len(claimed), self.config.take_over_tables_from,
                        ", ".join(claimed) or "none found")
        conf = driver_conf(self.bootstrap_servers, self.config.group_id, self.consumer_conf)
        admin_conf = {k: v for k, v in conf.items() if not k.startswith(("group.", "enable.", "auto.", "session.",
                                                                           "heartbeat.", "queued.", "partition.", "fetch.",
                                                                           "max.poll", "isolation."))}
        self.partitions = Partitions(Consumer(conf), AdminClient(admin_conf), group_protocol=conf["group.protocol"])
        log.info("joining consumer group %s (group.protocol=%s)", self.config.group_id, conf["group.protocol"])
        self.partitions.subscribe(subscription(self.config.topics, self.config.topic_pattern))

    def stop(self) -> None:
        self._stop = True
        self.health.stopping = True

    def close(self) -> None:
        if self._maintenance is not None:
            self._maintenance.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.partitions is not None:
            self.partitions.consumer.close()
            self.partitions = None

    def run(self, once: bool = False, max_batches: int | None = None) -> RunSummary:
        """Run micro-batches until stopped; ``once`` stops when a plan finds nothing more to read
        (reading the topics that wait for their commit interval first)."""
        if self.partitions is None:
            self.start()
        self.health.started = True
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, lambda *_: self.stop())
        summary = RunSummary()
        idle_batches = 0
        began = time.monotonic()
        self._next_batch = None
        self._draining = False  # a previous run's drain is over: topics wait for their interval again
        try:
            while not self._stop:
                try:
                    report = self.run_batch()
                except Exception as exc:
                    if not is_retried(exc):
                        raise
                    self._retry_later(exc)
                    continue
                if report.rows_read or report.tables:
                    self._writes_succeed()
                    summary.add(report)
                    self.report(report)
                    idle_batches = 0
                else:
                    idle_batches += 1
                    if once and not summary.batches and not self._joined(began):
                        idle_batches = 0  # still joining the group: nothing could be read yet
                if max_batches is not None and summary.batches >= max_batches:
                    break
                # "once": stop when a plan finds nothing to read (after a first batch, or after
                # the group join); topics waiting for their commit interval are read first
                if once and idle_batches >= (2 if summary.batches else 8):
                    if not report.waiting:
                        if self._maintenance is not None and self._maintenance.pending:
                            log.info("waiting for the maintenance of %d tables before stopping", self._maintenance.pending)
                            self._maintenance.drain()
                        break
                    self._draining = True
                    idle_batches = 0
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return summary

    ONCE_JOIN_TIMEOUT_S = 60.0
    ONCE_JOIN_TIMEOUT_CONSUMER_PROTOCOL_S = 90.0

    def _joined(self, since: float) -> bool:
        """Whether the consumer has partitions assigned. After a crash, the join waits for the
        dead member's session to time out (11 s against Tansu with a 6 s session), which can
        outlast the idle batches ``once`` allows; gives up after ``ONCE_JOIN_TIMEOUT_S``. Under
        ``group.protocol=consumer`` that session is the broker's
        (``group.consumer.session.timeout.ms``: 45 s by default, at most
        ``group.consumer.max.session.timeout.ms``, 60 s), so the wait is
        ``ONCE_JOIN_TIMEOUT_CONSUMER_PROTOCOL_S``."""
        assert self.partitions is not None
        limit = self.ONCE_JOIN_TIMEOUT_S
        if self.partitions.group_protocol is GroupProtocol.CONSUMER:
            limit = max(limit, self.ONCE_JOIN_TIMEOUT_CONSUMER_PROTOCOL_S)
        if time.monotonic() - since > limit:
            return True
        return bool(self.partitions.assigned())

    # -- retries ------------------------------------------------------------------------------

    # a batch that lost this many commit races in a row is retried as a failed write (the back-off,
    # /readyz, give_up_after_seconds): past this, something other than a rollout is writing
    CONFLICTS_BEFORE_FAILING = 8

    def _retry_later(self, exc: Exception) -> None:
        """A micro-batch failed to write: say why (log, metrics, ``/readyz``), rewind its ranges,
        forget what is cached of the tables and their offsets (read again from Iceberg, where the
        tables that did commit recorded theirs), and wait the back-off. Raises ``exc`` once the
        batch has failed for ``give_up_after_seconds``. A lost commit race (another writer
        committed to the table first) is not a failure: the batch is read again at once, after a
        short random pause, its offsets checked against the table."""
        table = getattr(exc, "table", "-")
        reason = failure_reason(exc)
        if reason == "commit-conflict" and self._conflicts < self.CONFLICTS_BEFORE_FAILING:
            self._conflicts += 1
            COMMIT_CONFLICTS.labels(table).inc()
            log.info("table %s: another writer committed to it first (%s); the micro-batch is read again and "
                     "what the table already holds skipped", table, describe_failure(exc))
            self._read_again(random.uniform(0.05, 0.1 * 2 ** min(self._conflicts, 5)))
            return
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self._failed_attempts += 1
        what = describe_failure(exc)
        WRITE_FAILURES.labels(table, reason).inc()
        WRITE_FAILING.set(1)
        give_up = self.config.write_retry.give_up_after_seconds
        if give_up is not None and now - self._failing_since >= give_up:
            log.error(
                "writing a micro-batch failed %d times in %.0fs (table %s, %s): %s; giving up "
                "(sink.write_retry.give_up_after_seconds: %g), its Kafka offsets are not committed",
                self._failed_attempts, now - self._failing_since, table, reason, what, give_up,
            )
            raise exc
        delay = self._backoff.delay(self._failed_attempts)
        log.warning(
            "writing a micro-batch failed (attempt %d, table %s, %s): %s; its Kafka offsets are not "
            "committed, it is read again and retried in %.1fs",
            self._failed_attempts, table, reason, what, delay,
            exc_info=self._failed_attempts == 1,
        )
        self.health.write_failed(f"table {table}: {reason}: {what}", delay)
        self._read_again(delay)

    def _read_again(self, delay: float) -> None:
        """Rewind the batch's ranges, forget what is cached of the tables, wait ``delay`` seconds
        (serving the group's callbacks)."""
        assert self.partitions is not None
        self.partitions.rewind(self._batch_start)
        self._known.clear()
        if self.tables is not None:
            self.tables.forget_cached()
        deadline = time.monotonic() + delay
        while not self._stop and time.monotonic() < deadline:
            self.partitions.poll()
            time.sleep(max(0.0, min(0.2, deadline - time.monotonic())))
        self._next_batch = None  # the retry starts at once

    def _writes_succeed(self) -> None:
        """A micro-batch committed: the end of a run of failed attempts, if there was one."""
        if self._failing_since is not None:
            log.warning(
                "writes succeed again after %d failed attempts in %.0fs",
                self._failed_attempts, time.monotonic() - self._failing_since,
            )
        self._failed_attempts = 0
        self._failing_since = None
        self._conflicts = 0
        WRITE_FAILING.set(0)

    # -- one batch --------------------------------------------------------------------------

    def _wait_for_trigger(self) -> None:
        """Until the next micro-batch may start, serving the group's callbacks meanwhile."""
        assert self.partitions is not None
        self.partitions.poll()
        while not self._stop and self._next_batch is not None and time.monotonic() < self._next_batch:
            time.sleep(max(0.0, min(0.1, self._next_batch - time.monotonic())))
            self.partitions.poll()

    def _plan(self, report: BatchReport) -> list[Range]:
        """The ranges of this micro-batch; with a commit interval, a topic is read once its
        interval since it was last read is over (the others wait in Kafka)."""
        assert self.partitions is not None
        interval = self.config.commit_interval_seconds
        now = time.monotonic()
        waiting = {t for t, at in self._last_read.items() if interval > 0 and now - at < interval and not self._draining}
        ranges = self.partitions.plan()
        due = [r for r in ranges if r.topic not in waiting]
        report.waiting = len({r.topic for r in ranges} - {r.topic for r in due})
        WAITING.set(report.waiting)
        return due

    def run_batch(self) -> BatchReport:
        """One micro-batch: plan, read, write each table, commit the Kafka offsets."""
        assert self.tables is not None and self.partitions is not None
        self._wait_for_trigger()
        started = time.monotonic()
        report = BatchReport()
        ranges = self._plan(report)
        interval = self.config.trigger_interval_seconds
        if not ranges:
            # idle: look again after a poll timeout, not a whole interval (a record arriving now
            # starts a batch within about poll_timeout_seconds)
            self._next_batch = time.monotonic() + min(interval, self.config.poll_timeout_seconds)
            report.lag = self._observe_lag()
            self.health.observe_lag(report.lag)
            return report
        self._next_batch = started + interval  # as Spark's ProcessingTime trigger
        self._batch_start = {r.tp: r.start for r in ranges}
        self.health.batch_started(sum(r.end - r.start for r in ranges))
        batch = _Batch(ranges)
        try:
            self._read(batch, report)
            now = time.monotonic()
            for topic in {r.topic for r in ranges}:
                self._last_read[topic] = now
            self._write(batch, report)
        finally:
            if batch.rdd is not None:
                batch.rdd.unpersist()
        crash_point("after-iceberg-commit")
        COMMIT_SECONDS.observe(report.commit_seconds)
        if report.newest_ts_ms:
            FRESHNESS.set(max(0.0, time.time() - report.newest_ts_ms / 1000))
        self._commit(batch)
        self.health.committed()
        LAST_COMMIT.set(time.time())
        crash_point("after-kafka-commit")
        report.seconds = time.monotonic() - started
        report.lag = self._observe_lag()
        self.health.observe_lag(report.lag)
        return report

    def _tasks(self) -> int:
        if self.config.tasks is not None:
            return self.config.tasks
        cores = local_cores(self.config.spark_master)
        return cores if cores is not None else max(1, self.spark.sparkContext.defaultParallelism)

    def _read(self, batch: _Batch, report: BatchReport) -> None:
        """The read job: Spark tasks fetch and parse the ranges; the changes stay cached in the
        executors, the per-table summaries come back."""
        from pyspark import StorageLevel

        assert self.partitions is not None
        started = time.monotonic()
        tasks = split_tasks(batch.ranges, self._tasks(), self.config.max_records_per_batch)
        sc = self.spark.sparkContext
        sc.setJobDescription(f"cdcnorm read: {len(batch.ranges)} ranges")
        read = functools.partial(
            read_partition,
            conf=reader_conf(self.consumer_conf, self.bootstrap_servers, self.config.group_id),
            registry=self.config.schema_registry,
            names=self._names,
            # a range ends at its end or where a fetch returns nothing; this is only the
            # bound on a broker that does not answer
            stall_seconds=max(STALL_SECONDS, self.config.poll_timeout_seconds),
        )
        batch.rdd = sc.parallelize(tasks, len(tasks)).mapPartitionsWithIndex(read).persist(StorageLevel.MEMORY_AND_DISK)
        # each task's summary is the first item of its cached partition: the second pass
        # unpickles only that, not the changes
        done = sorted((s for s in batch.rdd.mapPartitions(first_item).collect() if s is not None), key=lambda s: s.index)
        tables, whole = _merged(done)
        for s in done:
            for table in s.tables:
                batch.tasks_of.setdefault(table, set()).add(s.index)
        report.read_seconds = time.monotonic() - started
        self.partitions.advance(whole.reads)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("read: %s", ", ".join(
                f"{r.topic}[{r.partition}] {r.start}->{r.next_offset} ({r.records}{'' if r.exhausted else ', more'})"
                for r in whole.reads))
        report.rows_read = sum(r.records for r in whole.reads)
        ROWS_READ.inc(report.rows_read)
        self.health.batch_started(report.rows_read)
        if whole.bad_count:
            BAD_RECORDS.inc(whole.bad_count)
            for bad in whole.bad:
                log.error("skipping a record that is not a canonical change: %s", bad.reason)
            if whole.bad_count > len(whole.bad):
                log.error("skipped %d more records that are not canonical changes", whole.bad_count - len(whole.bad))
        for table, summary in tables.items():
            if table in self._paused_tables:
                for tp, (first, _) in summary.offsets.items():
                    batch.paused_first[tp] = min(first, batch.paused_first.get(tp, first))
            else:
                batch.tables[table] = summary

    def _write(self, batch: _Batch, report: BatchReport) -> None:
        """Per table: offsets, owner, DDL, row delta or MERGE; the commits."""
        tables = self.tables
        assert tables is not None
        first_seen = [t for t in batch.tables if t not in self._known]
        self._each_table(tables.applied_offsets, first_seen)  # a metadata read per table (on the pool)
        todo: dict[Table, TableSummary] = {}
        for table, summary in batch.tables.items():
            applied = tables.applied_offsets(table)
            if all(last < applied.get(f"{t}:{p}", 0) for (t, p), (_, last) in summary.offsets.items()):
                report.skipped_applied += summary.changes  # all in the table already (a replay)
            else:
                todo[table] = summary
        self._each_table(tables.check_owner, sorted(set(first_seen) | set(todo)))
        self._known.update(first_seen)
        started = time.monotonic()
        planned: dict[Table, WritePlan] = {}  # how each table is written, and why (sink.write_plan)
        deltas: dict[Table, TablePlan] = {}
        merges: dict[Table, WritePlan] = {}
        for table, summary in todo.items():
            try:
                tables.note_sources(table, summary.sources)
                tables.ensure_columns(table, tuple(summary.columns.values()), summary.key_columns)
            except (IncompatibleSchemaError, TableSettingsError) as exc:
                self._pause(table, str(exc), summary, batch)
                continue
            plan = planned[table] = tables.write_plan(table, summary)
            if plan.row_delta:
                location, schema = tables.plan_of(table)
                layout = tables.layout(table)
                deltas[table] = TablePlan(table, tables.iceberg_name(table), location, schema,
                                          tables.key_of(table), tables.applied_offsets(table),
                                          layout.partition, layout.sort,
                                          tables.mode_of(table) is TableMode.CHANGELOG)
            else:
                merges[table] = plan
        jobbed = time.monotonic()
        files = self._write_files(batch, deltas)
        report.files_seconds = time.monotonic() - jobbed
        for table, written in list(files.items()):
            if written.fallback is not None:
                merges[table] = planned[table].fall_back(written.fallback)
                del files[table]
        for table, plan in merges.items():
            log.info("table %s: MERGE (%s)", ".".join(table), plan.reason)
        written_merges = self._merge_tables(batch, merges, report)
        outcomes = self._commit_files(batch, files, report) + written_merges
        report.commit_seconds = time.monotonic() - started
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            raise failure

    def _write_files(self, batch: _Batch, plans: dict[Table, TablePlan]) -> dict[Table, TableFiles]:
        """The write job: per row-delta table, its compacted changes as Parquet files; and the
        batch's deleted keys, committed to the memory table before any table's commit."""
        assert self.tables is not None
        if not plans:
            return {}
        sc = self.spark.sparkContext
        sc.setJobDescription(f"cdcnorm write: {len(plans)} tables")
        memory = self.tables.deleted_keys.plan() if any(batch.tables[t].changes for t in plans) else None
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        storage = storage_options(self.config.catalog.properties)  # the executors' pyarrow: the catalog's S3 settings
        if all(len(batch.tasks_of.get(t, ())) <= 1 for t in plans):
            # each table's changes are in one read task's cache (a table is a topic, whose
            # partitions were read together): that task writes it, no shuffle
            mine: dict[int, set[Table]] = {}
            for table in plans:
                for index in batch.tasks_of.get(table, ()):
                    mine.setdefault(index, set()).add(table)
            write = functools.partial(write_partition, tables={i: frozenset(t) for i, t in mine.items()},
                                      plans=plans, deleted_keys=memory, now=now, storage=storage)
            results = batch.rdd.mapPartitionsWithIndex(write).collect()
        else:
            # a table read by several tasks: its changes are brought together first
            n = min(self._tasks(), len(plans))
            slots: dict[Table, int] = {}
            loads = [0] * n
            for table in sorted(plans, key=lambda t: -batch.tables[t].changes):  # largest first, lightest slot
                lightest = loads.index(min(loads))
                slots[table] = lightest
                loads[lightest] += batch.tables[table].changes
            write_slot = functools.partial(write_tables, plans=plans, deleted_keys=memory, now=now, storage=storage)
            results = (
                batch.rdd.flatMap(functools.partial(route, slots)).partitionBy(n, slot).mapPartitions(write_slot).collect()
            )
        self.tables.deleted_keys.remember([r for r in results if isinstance(r, DeletedKeysFile)])
        return {r.table: r for r in results if isinstance(r, TableFiles)}

    def _commit_files(self, batch: _Batch, files: dict[Table, TableFiles], report: BatchReport) -> list[Any]:
        """Commit each row-delta table's files (on the table pool); returns the failures."""
        tables = self.tables
        assert tables is not None

        def commit(table: Table) -> bool:
            summary = batch.tables[table]
            written = files[table]
            done = tables.commit_files(table, written, self._offsets(table, summary), summary.newest)
            crash_point("between-table-commits")
            if done and tables.maintenance_due(table):
                self.maintenance.submit(table)
            return done

        failures: list[Any] = []
        for table, outcome in self._in_pool(commit, sorted(files)):
            if isinstance(outcome, BaseException):
                failures.append(outcome)
                continue
            written = files[table]
            report.skipped_applied += written.skipped_applied
            if not outcome:
                continue
            TABLE_WRITES.labels(WriteMethod.ROW_DELTA.value).inc()
            report.row_deltas += 1
            self._account(report, table, batch.tables[table], {
                "upserts": written.upserts, "deletes": written.deleted, "appends": written.appends, "truncates": 0,
            })
        if tables.deleted_keys.maintenance_due():
            self.maintenance.submit(DELETED_KEYS)
        return failures

    def _offsets(self, table: Table, summary: TableSummary) -> dict[str, int]:
        """The offsets a table's commit records: what it held, and past this batch's changes."""
        assert self.tables is not None
        offsets = dict(self.tables.applied_offsets(table))
        for (topic, partition), (_, last) in summary.offsets.items():
            key = f"{topic}:{partition}"
            offsets[key] = max(offsets.get(key, 0), last + 1)
        return offsets

    def _merge_tables(self, batch: _Batch, merges: dict[Table, WritePlan], report: BatchReport) -> list[Any]:
        """The MERGE tables: their changes collected to the driver, compacted, merged (on the
        table pool); returns the failures."""
        tables = self.tables
        assert tables is not None
        if not merges:
            return []
        self.spark.sparkContext.setJobDescription(f"cdcnorm collect: {len(merges)} tables to MERGE")
        changes: list[SinkChange] = batch.rdd.filter(functools.partial(of_tables, frozenset(merges))).collect()
        fresh: list[SinkChange] = []
        for ch in changes:
            if ch.offset < tables.applied_offsets(ch.table).get(f"{ch.topic}:{ch.partition}", 0):
                report.skipped_applied += 1
            else:
                fresh.append(ch)
        # changelog and history tables: every change a row or a version, uncompacted
        logs = {t for t in merges if tables.mode_of(t) is not TableMode.UPSERT}
        batches = compact(c for c in fresh if c.table not in logs)
        for table in logs:
            batches[table] = TableBatch(table, appends=in_source_order(c for c in fresh if c.table == table))
        todo = [(t, b, self._offsets(t, batch.tables[t])) for t, b in batches.items()]

        def write(item: _Item) -> dict[str, int]:
            table, tbatch, offsets = item
            counts = tables.write_batch(tbatch, offsets)
            crash_point("between-table-commits")
            if tables.maintenance_due(table):
                self.maintenance.submit(table)
            return counts

        failures: list[Any] = []
        for (table, _, _), outcome in self._in_pool(write, todo):
            if isinstance(outcome, IncompatibleSchemaError):
                self._pause(table, str(outcome), batch.tables[table], batch)
            elif isinstance(outcome, BaseException):
                failures.append(outcome)
            elif outcome.pop("row_delta", 0):  # an ordered history batch (sink.scd2)
                TABLE_WRITES.labels(WriteMethod.ROW_DELTA.value).inc()
                report.row_deltas += 1
                self._account(report, table, batch.tables[table], outcome)
            else:
                TABLE_WRITES.labels(WriteMethod.MERGE.value).inc()
                report.merges += 1
                self._account(report, table, batch.tables[table], outcome)
        return failures

    def _account(self, report: BatchReport, table: Table, summary: TableSummary, counts: dict[str, int]) -> None:
        name = ".".join(table)
        report.tables.append(name)
        report.changes += summary.changes
        report.upserts += counts["upserts"]
        report.deletes += counts["deletes"]
        report.appends += counts["appends"]
        report.truncates += counts["truncates"]
        UPSERTS.labels(name).inc(counts["upserts"])
        DELETES.labels(name).inc(counts["deletes"])
        if summary.newest_ts_ms and (report.newest_ts_ms is None or summary.newest_ts_ms > report.newest_ts_ms):
            report.newest_ts_ms = summary.newest_ts_ms

    def _each_table(self, work: Callable[[_T], object], items: list[_T]) -> None:
        """``work`` for each of ``items`` (tables), on the table pool when ``table_parallelism``
        allows, else one after the other; raises the first failure once all have finished."""
        for _, outcome in self._in_pool(work, items):
            if isinstance(outcome, BaseException):
                raise outcome

    def _in_pool(self, work: Callable[[_T], _R], items: list[_T]) -> list[tuple[_T, _R | BaseException]]:
        """``work`` over ``items``, on the table pool (created on first use) when
        ``table_parallelism`` allows, waiting for all; each item's result or exception."""
        if self.config.table_parallelism <= 1 or len(items) <= 1:
            out: list[tuple[_T, _R | BaseException]] = []
            for item in items:
                try:
                    out.append((item, work(item)))
                except Exception as exc:
                    out.append((item, exc))
            return out
        if self._pool is None:
            spark = self.spark
            slots = itertools.count()

            def name_pool() -> None:
                # a FAIR pool per thread (created on first use, weight 1): tables share the
                # executors; and the session active in the thread (Spark reads catalog settings
                # from the calling thread's active session)
                if spark is not None:
                    spark.sparkContext.setLocalProperty("spark.scheduler.pool", f"cdcnorm-table-{next(slots)}")
                    spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)

            self._pool = ThreadPoolExecutor(
                self.config.table_parallelism, thread_name_prefix="cdcnorm-table", initializer=name_pool
            )
        futures = [(item, self._pool.submit(work, item)) for item in items]
        results: list[tuple[_T, _R | BaseException]] = []
        for item, future in futures:
            try:
                results.append((item, future.result()))
            except BaseException as exc:
                results.append((item, exc))
        return results

    # -- lag ----------------------------------------------------------------------------------

    def _observe_lag(self) -> int | None:
        """Per assigned partition, the high watermark of the last plan minus what was read, into
        ``cdcnorm_sink_lag``; returns the sum over the partitions that are not paused, or
        ``None`` when no partition's lag is known. Only as right as the broker's watermarks (the
        local Tansu broker's are wrong); it decides nothing but the metric and the probe."""
        assert self.partitions is not None
        lags = self.partitions.lag()
        total: int | None = None
        for tp, lag in lags.items():
            LAG.labels(tp[0], str(tp[1])).set(lag)
            self._lag_labels.add(tp)
            if tp not in self.partitions.paused:
                total = (total or 0) + lag
        for gone in self._lag_labels - set(lags):
            LAG.remove(gone[0], str(gone[1]))
            self._lag_labels.discard(gone)
        return total

    def _pause(self, table: Table, reason: str, summary: TableSummary, batch: _Batch) -> None:
        log.error("pausing table %s: %s (other tables go on)", ".".join(table), reason)
        self._paused_tables[table] = reason
        PAUSED.set(len(self._paused_tables))
        for tp, (first, _) in summary.offsets.items():
            batch.paused_first[tp] = min(first, batch.paused_first.get(tp, first))

    def _commit(self, batch: _Batch) -> None:
        """Commit the offsets of the partitions read: each up to what was read of it, but not past
        the first change of a paused table (and those partitions are not read any more)."""
        assert self.partitions is not None
        offsets: dict[TopicPartition, int] = {}
        for r in batch.ranges:
            offset = self.partitions.positions.get(r.tp)
            if offset is None:
                continue  # revoked meanwhile: its new owner starts from the committed offset
            if r.tp in batch.paused_first:
                offset = min(offset, batch.paused_first[r.tp])
                self.partitions.positions[r.tp] = offset
                self.partitions.paused.add(r.tp)
            offsets[r.tp] = offset
        self.partitions.commit(offsets)
