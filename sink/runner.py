"""The micro-batch loop: Kafka (confluent-kafka, on the driver) → compaction → Iceberg MERGE.

Per micro-batch:

1. read up to ``max_records_per_batch`` records or until the poll window ends (windows end one
   trigger interval after the previous poll ended, so a record waits at most about one interval
   plus the commit time);
2. parse canonical records into changes, skipping those already applied (the offsets recorded in
   each table's newest cdcnorm snapshot);
3. compact per table and key, then MERGE each table in one commit tagged with its offsets;
4. commit the Kafka offsets, only after every table's Iceberg commit;
5. print one progress line and update the metrics; run maintenance on its cadence.

A micro-batch whose writes fail (a table's Iceberg commit refused, the Kafka offset commit
failing) is retried (:meth:`MicroBatchSink.run`): its offsets stay uncommitted, the consumer is
rewound to its first records, and after a capped exponential back-off (``sink.write_retry``)
they are read again; what an Iceberg commit already holds is skipped, as after a crash.

The loop keeps :class:`sink.health.SinkHealth` up to date (a batch in flight, each commit, the lag
after each poll window), which ``/healthz`` and ``cdcnorm_sink_seconds_since_progress`` read.
"""

from __future__ import annotations

import itertools
import logging
import signal
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from sink.changes import ChangeParseError, RecordParser, SinkChange, TableBatch, compact
from sink.config import SinkConfig
from sink.faults import crash_point
from sink.health import SinkHealth
from sink.iceberg import IcebergTables, IncompatibleSchemaError, build_spark
from sink.pending import HeldChanges
from sink.retry import Backoff, describe_failure, failure_reason, is_retried

__all__ = ["BatchReport", "MicroBatchSink", "RunSummary", "serve_metrics"]

log = logging.getLogger("cdcnorm.sink")

ROWS_READ = Counter("cdcnorm_sink_rows_read_total", "Records read from normalized topics")
UPSERTS = Counter("cdcnorm_sink_upserts_total", "Rows upserted after compaction", ["table"])
DELETES = Counter("cdcnorm_sink_deletes_total", "Rows deleted after compaction", ["table"])
BAD_RECORDS = Counter("cdcnorm_sink_bad_records_total", "Records that are not canonical change events")
COMMIT_SECONDS = Histogram("cdcnorm_sink_commit_seconds", "Iceberg commit time per micro-batch")
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
HELD = Gauge(
    "cdcnorm_sink_held_changes",
    "Changes read but not written yet, held until their table's commit interval is over "
    "(sink.commit_interval_seconds); their partitions' Kafka offsets are committed only up to the first",
)
HELD_AGE = Gauge("cdcnorm_sink_oldest_held_seconds", "Seconds since the oldest held change was read (0: none held)")
SINCE_PROGRESS = Gauge(
    "cdcnorm_sink_seconds_since_progress",
    "Seconds the sink has had records to read or a micro-batch in flight without committing one "
    "(0 while it has nothing to read); /healthz fails above sink.liveness_stall_seconds",
)


_Item = tuple[tuple[str, str], TableBatch, dict[str, int]]  # a table, its compacted batch, its offsets
_T = TypeVar("_T")
_R = TypeVar("_R")

TOUCHED_SHOWN = 8  # table names on a progress line; the rest as "+N"


@dataclass
class BatchReport:
    """What one micro-batch did: the counts, and how long it took from the end of its poll
    window to its Kafka commit (``seconds``), and the lag left after it (``lag``)."""

    rows_read: int = 0
    changes: int = 0
    upserts: int = 0
    deletes: int = 0
    appends: int = 0
    truncates: int = 0
    tables: list[str] = field(default_factory=list)
    commit_seconds: float = 0.0
    newest_ts_ms: int | None = None
    skipped_applied: int = 0
    seconds: float = 0.0
    lag: int | None = None
    held: int = 0  # changes read and held for a later batch (commit_interval_seconds)

    @property
    def rows_per_second(self) -> float:
        """Records read per second of processing (parse, MERGE and commits; not the poll wait)."""
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
            f"lag={'-' if self.lag is None else self.lag} touched={touched}"
            + (f" held={self.held}" if self.held else "")
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


def _tp(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _first_offsets(msgs: list[Any]) -> dict[tuple[str, int], int]:
    """The offset of the first record of each partition in ``msgs``."""
    first: dict[tuple[str, int], int] = {}
    for msg in msgs:
        if not msg.error():
            first.setdefault((msg.topic(), msg.partition()), msg.offset())
    return first


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
        self.bootstrap_servers = bootstrap_servers
        self.consumer_conf = consumer_conf or {}
        self.report = report or (lambda r: log.info(r.line()))
        self._stop = False
        self._applied: dict[tuple[str, str], dict[str, int]] = {}
        self._paused_tables: dict[tuple[str, str], str] = {}
        self._paused_tps: set[tuple[str, int]] = set()
        self.spark: Any = None
        self.tables: IcebergTables | None = None
        self.consumer: Any = None
        self._window_end: float | None = None  # when the current poll window ends (monotonic)
        self.parser = RecordParser.from_settings(config.schema_registry)  # JSON with/without schemas, Avro
        retry = config.write_retry
        self._backoff = Backoff(retry.initial_backoff_seconds, retry.max_backoff_seconds)
        self._batch_start: dict[tuple[str, int], int] = {}  # the current batch's first offset per partition
        self._failed_attempts = 0  # consecutive failed attempts of the current batch
        self._failing_since: float | None = None  # when its first attempt failed (monotonic)
        self.health = SinkHealth(config.liveness_stall_seconds)
        SINCE_PROGRESS.set_function(self.health.seconds_since_progress)
        HELD_AGE.set_function(lambda: self._held.oldest_age(time.monotonic()))
        self._start_positions: dict[tuple[str, int], int | None] = {}  # where unread partitions start
        self._lag_labels: set[tuple[str, int]] = set()
        self._pool: ThreadPoolExecutor | None = None  # writes the tables of a batch (table_parallelism)
        self._held = HeldChanges(config.commit_interval_seconds, config.max_held_changes)
        self._read_to: dict[tuple[str, int], int] = {}  # per partition, the offset after the last record read

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        from confluent_kafka import Consumer

        self.spark = build_spark(self.config)
        self.tables = IcebergTables(self.spark, self.config)
        if self.config.take_over_tables_from:
            claimed = self.tables.take_over(self.config.take_over_tables_from)
            log.warning("took over %d tables from group %s: %s", len(claimed), self.config.take_over_tables_from,
                        ", ".join(claimed) or "none found")
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.config.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "enable.partition.eof": False,
            **self.consumer_conf,
        }
        self.consumer = Consumer(conf)
        topics = list(self.config.topics)
        if self.config.topic_pattern:
            topics.append("^" + self.config.topic_pattern.lstrip("^"))
        self.consumer.subscribe(topics)

    def stop(self) -> None:
        self._stop = True
        self.health.stopping = True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def run(self, once: bool = False, max_batches: int | None = None) -> RunSummary:
        """Run micro-batches until stopped; ``once`` stops at the first empty batch."""
        if self.consumer is None:
            self.start()
        self.health.started = True
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, lambda *_: self.stop())
        summary = RunSummary()
        idle_batches = 0
        began = time.monotonic()
        self._window_end = None
        try:
            while not self._stop:
                # no pause between batches: each poll waits for the end of its own window
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
                        idle_batches = 0  # still joining the group: nothing could be fetched yet
                if max_batches is not None and summary.batches >= max_batches:
                    break
                # "once": stop when nothing more arrives (a fetch returning nothing, never watermarks:
                # some brokers report wrong high watermarks). Allow a first idle batch for the group join.
                if once and idle_batches >= (2 if summary.batches else 8):
                    break
            self._flush_held(summary)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return summary

    def _flush_held(self, summary: RunSummary) -> None:
        """At the end of a run, write the tables holding changes (``commit_interval_seconds``).
        A failure is logged, not retried: their offsets are not committed, the next run reads them again."""
        if not self._held:
            return
        log.info("writing %d held changes of %d tables before stopping", self._held.count, self._held.tables)
        try:
            report = self.run_batch(flush=True)
        except Exception as exc:
            if not is_retried(exc):
                raise
            log.error("could not write the held changes (%s); their offsets are not committed, the next run "
                      "reads them again", describe_failure(exc))
            self._held.clear()
            return
        if report.tables:
            summary.add(report)
            self.report(report)

    ONCE_JOIN_TIMEOUT_S = 60.0

    def _joined(self, since: float) -> bool:
        """Whether the consumer has partitions assigned. After a crash, the join waits for the
        dead member's session to time out (11 s against Tansu with a 6 s session), which can
        outlast the idle batches ``once`` allows; gives up after ``ONCE_JOIN_TIMEOUT_S``."""
        if time.monotonic() - since > self.ONCE_JOIN_TIMEOUT_S:
            return True
        return bool(self.consumer.assignment())

    # -- retries ------------------------------------------------------------------------------

    def _retry_later(self, exc: Exception) -> None:
        """A micro-batch failed to write: say why (log, metrics, ``/readyz``), rewind the consumer
        to the batch's first records, forget what is cached of the tables and their offsets (read
        again from Iceberg, where the tables that did commit recorded theirs), and wait the
        back-off. Raises ``exc`` once the batch has failed for ``give_up_after_seconds``."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self._failed_attempts += 1
        table = getattr(exc, "table", "-")
        reason = failure_reason(exc)
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
        self._rewind()
        self._held.clear()  # read again: the rewind goes back to the first held change too
        HELD.set(0)
        self._applied.clear()
        if self.tables is not None:
            self.tables.forget_cached()
        deadline = time.monotonic() + delay
        while not self._stop and time.monotonic() < deadline:
            time.sleep(max(0.0, min(0.2, deadline - time.monotonic())))

    def _check_owners(self, tables: set[tuple[str, str]]) -> None:
        """Before a batch writes anything or commits an offset: stop (``TableOwnershipError``)
        if another sink's group owns one of ``tables``, the tables the batch writes and those
        first seen in it (even when all their changes are applied already, so a second sink
        stops at its first batch). See :meth:`sink.iceberg.IcebergTables.check_owner`."""
        assert self.tables is not None
        self._each_table(self.tables.check_owner, sorted(tables))  # a metadata read per table (~40 ms)

    def _writes_succeed(self) -> None:
        """A micro-batch committed: the end of a run of failed attempts, if there was one."""
        if self._failing_since is not None:
            log.warning(
                "writes succeed again after %d failed attempts in %.0fs",
                self._failed_attempts, time.monotonic() - self._failing_since,
            )
        self._failed_attempts = 0
        self._failing_since = None
        WRITE_FAILING.set(0)

    def _rewind(self) -> None:
        """Seek each partition of the failed batch back to its first record. A partition no longer
        assigned is left alone: its new owner starts from the committed offset. Raises when a seek
        fails."""
        from confluent_kafka import KafkaException, TopicPartition

        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for (topic, partition), offset in self._batch_start.items():
            if (topic, partition) not in assigned:
                continue
            self._read_to.pop((topic, partition), None)
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                # going on would commit past the batch's records: stop, a restart reads them again
                raise RuntimeError(
                    f"cannot rewind {topic}[{partition}] to offset {offset} to retry the failed micro-batch "
                    f"({exc}); stopping so that a restart reads it again from the committed offsets"
                ) from exc

    # -- one batch --------------------------------------------------------------------------

    def _poll(self) -> list[Any]:
        """The records of one micro-batch: until ``max_records_per_batch``, the end of the poll
        window, or a fetch returning nothing once some records arrived.

        A window ends one trigger interval after the previous poll ended, not after the previous
        commit (like Spark's ``ProcessingTime`` trigger): records that arrive during a commit
        were fetched in the background and are in the next batch, due one interval after they
        could first be polled. A window already over when the commit ends (a commit slower than
        the interval) takes what the consumer has fetched, waiting one poll timeout at most when
        it has nothing yet.
        """
        interval = self.config.trigger_interval_seconds
        poll_timeout = self.config.poll_timeout_seconds
        deadline = self._window_end if self._window_end is not None else time.monotonic() + interval
        out: list[Any] = []
        limit = self.config.max_records_per_batch
        waited = False
        while len(out) < limit:
            remaining = deadline - time.monotonic()
            # within the window: wait for records; after it, only take what is already fetched
            timeout = min(remaining, poll_timeout) if remaining > 0 else 0.0
            waited = waited or timeout > 0
            msgs = self.consumer.consume(num_messages=min(10_000, limit - len(out)), timeout=timeout)
            before = len(out)
            for msg in msgs:
                if msg.error():
                    log.warning("consumer error: %s", msg.error())
                    continue
                out.append(msg)
            if len(out) > before:
                continue
            if remaining > 0:
                if out and not msgs:
                    break  # a fetch returned nothing: what had arrived is all in
                continue
            if out or waited:
                break
            # overdue from the start and nothing fetched yet: wait one poll timeout for records
            deadline = time.monotonic() + poll_timeout
        self._window_end = time.monotonic() + interval
        return out

    def _applied_for(self, table: tuple[str, str]) -> dict[str, int]:
        applied = self._applied.get(table)
        if applied is None:
            assert self.tables is not None
            applied = self._applied[table] = self.tables.applied_offsets(table)
        return applied

    def _load_applied(self, tables: set[tuple[str, str]]) -> None:
        """Read the offsets recorded in the newest cdcnorm snapshot of each table not seen yet
        (a query per table: on the table pool, so a first batch over hundreds of tables does not
        wait for them one after the other)."""
        self._each_table(self._applied_for, [t for t in tables if t not in self._applied])

    def run_batch(self, flush: bool = False) -> BatchReport:
        """One micro-batch: poll, parse, hold or write each table, commit the Kafka offsets.

        ``flush`` (at the end of a run): no poll, write every held table."""
        assert self.tables is not None
        msgs = [] if flush else self._poll()
        first = _first_offsets(msgs)
        if self._held:
            # held changes that are being read again (a rewind, a re-assignment) or whose
            # partition went to another sink are forgotten: they come again from Kafka
            assigned = None if flush else {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            if self._held.drop(keep=first, assigned=assigned):
                HELD.set(self._held.count)
        # where a retry reads the batch again: its first records, or the first held change
        self._batch_start = {**first}
        for tp, offset in self._held.first_offsets().items():
            self._batch_start[tp] = min(offset, self._batch_start.get(tp, offset))
        known = set(self._applied)  # tables seen before this batch (their offsets read)
        report = BatchReport(rows_read=len(msgs))
        now = time.monotonic()
        if not msgs and not self._held.due(now, everything=flush):
            self.health.observe_lag(self._measure_lag())
            report.held = self._held.count
            return report
        polled = time.monotonic()
        self.health.batch_started(len(msgs))
        ROWS_READ.inc(len(msgs))
        for msg in msgs:  # per partition in offset order: the last one read wins
            self._read_to[(msg.topic(), msg.partition())] = msg.offset() + 1
        first_paused: dict[tuple[str, int], int] = {}
        parsed: list[SinkChange] = []
        for msg in msgs:
            try:
                change = self.parser.parse(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
            except ChangeParseError as exc:
                BAD_RECORDS.inc()
                log.error("skipping a record that is not a canonical change: %s", exc)
                continue
            if change is None:
                continue
            if change.table in self._paused_tables:
                first_paused.setdefault((msg.topic(), msg.partition()), msg.offset())
                continue
            parsed.append(change)
        del msgs  # the raw records are parsed: free them before the merge (driver peak memory)
        self._load_applied({c.table for c in parsed})
        fresh: list[SinkChange] = []
        for change in parsed:
            if change.offset < self._applied[change.table].get(_tp(change.topic, change.partition), 0):
                report.skipped_applied += 1
                continue
            fresh.append(change)
        del parsed
        report.changes = len(fresh)
        self._held.add(fresh, now)
        due = self._held.due(now, everything=flush)
        changes = self._held.take(due)
        table_offsets: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for change in changes:
            offsets = table_offsets[change.table]
            key = _tp(change.topic, change.partition)
            offsets[key] = max(offsets.get(key, 0), change.offset + 1)
        self._check_owners(set(self._applied) - known | set(table_offsets))
        started = time.monotonic()
        for table, batch, counts in self._write_tables(compact(changes), table_offsets, changes, first_paused):
            report.tables.append(".".join(table))
            report.upserts += counts["upserts"]
            report.deletes += counts["deletes"]
            report.appends += counts["appends"]
            report.truncates += counts["truncates"]
            UPSERTS.labels(".".join(table)).inc(counts["upserts"])
            DELETES.labels(".".join(table)).inc(counts["deletes"])
            newest = max((c.ts_ms for c in batch.changes + batch.appends if c.ts_ms), default=None)
            if newest and (report.newest_ts_ms is None or newest > report.newest_ts_ms):
                report.newest_ts_ms = newest
        report.commit_seconds = time.monotonic() - started
        crash_point("after-iceberg-commit")
        COMMIT_SECONDS.observe(report.commit_seconds)
        if report.newest_ts_ms:
            FRESHNESS.set(max(0.0, time.time() - report.newest_ts_ms / 1000))
        # the partitions read now and those of the changes just written: each up to what was
        # read of it, but not past its first held (or paused) change
        self._commit(set(first) | {(c.topic, c.partition) for c in changes}, first_paused)
        self.health.committed()
        LAST_COMMIT.set(time.time())
        HELD.set(self._held.count)
        crash_point("after-kafka-commit")
        report.held = self._held.count
        report.seconds = time.monotonic() - polled
        report.lag = self._measure_lag()
        self.health.observe_lag(report.lag)
        return report

    def _write_tables(
        self,
        batches: dict[tuple[str, str], TableBatch],
        table_offsets: dict[tuple[str, str], dict[str, int]],
        changes: list[SinkChange],
        first_paused: dict[tuple[str, int], int],
    ) -> list[_Item]:
        """Write every table's compacted batch, each in its own Iceberg commit tagged with its
        offsets, ``table_parallelism`` tables at a time; returns what was written, per table.

        Table DDL (create, add or widen columns) runs first, one table after the other: it is
        rare after the first batch, and namespace creation is not safe to race. Then the MERGEs
        and commits run from a thread pool, each thread's Spark jobs in a FAIR pool of its own,
        so one table's planning and commit I/O overlap another's jobs. A table with an
        incompatible schema change is paused, the others go on. Any other failure is raised
        after every started table has finished (its commit either happened, recorded with its
        offsets, or not): the Kafka offsets are then not committed, and a retry skips what the
        committed tables already hold.
        """
        assert self.tables is not None
        tables = self.tables
        todo: list[_Item] = []
        for table, batch in batches.items():
            try:
                tables.ensure_table(batch)
            except IncompatibleSchemaError as exc:
                self._pause(table, str(exc), changes, first_paused)
                continue
            todo.append((table, batch, {**self._applied_for(table), **table_offsets[table]}))

        def write(item: _Item) -> dict[str, int]:
            table, batch, offsets = item
            counts = tables.write_batch(batch, offsets)
            crash_point("between-table-commits")
            tables.maybe_maintain(table)
            return counts

        outcomes: list[tuple[_Item, dict[str, int] | BaseException]]
        if self.config.table_parallelism > 1 and len(todo) > 1:
            outcomes = self._in_pool(write, todo)
        else:
            outcomes = []
            for item in todo:
                try:
                    outcomes.append((item, write(item)))
                except Exception as exc:
                    outcomes.append((item, exc))
                    if not isinstance(exc, IncompatibleSchemaError):
                        break
        written: list[_Item] = []
        failure: BaseException | None = None
        for (table, batch, offsets), outcome in outcomes:
            if isinstance(outcome, IncompatibleSchemaError):
                self._pause(table, str(outcome), changes, first_paused)
            elif isinstance(outcome, BaseException):
                failure = failure or outcome
            else:
                self._applied[table] = offsets
                written.append((table, batch, outcome))
        if failure is not None:
            raise failure
        return written

    def _each_table(self, work: Callable[[_T], object], items: list[_T]) -> None:
        """``work`` for each of ``items`` (tables), on the table pool when ``table_parallelism``
        allows, else one after the other; raises the first failure once all have finished."""
        if self.config.table_parallelism > 1 and len(items) > 1:
            for _, outcome in self._in_pool(work, items):
                if isinstance(outcome, BaseException):
                    raise outcome
            return
        for item in items:
            work(item)

    def _in_pool(self, work: Callable[[_T], _R], items: list[_T]) -> list[tuple[_T, _R | BaseException]]:
        """``work`` over ``items`` on the table pool (created on first use), waiting for all."""
        if self._pool is None:
            spark = self.spark
            slots = itertools.count()

            def name_pool() -> None:
                # a FAIR pool per thread (created on first use, weight 1): tables share the executors
                if spark is not None:
                    spark.sparkContext.setLocalProperty("spark.scheduler.pool", f"cdcnorm-table-{next(slots)}")

            self._pool = ThreadPoolExecutor(
                self.config.table_parallelism, thread_name_prefix="cdcnorm-table", initializer=name_pool
            )
        futures = [(item, self._pool.submit(work, item)) for item in items]
        out: list[tuple[_T, _R | BaseException]] = []
        for item, future in futures:
            try:
                out.append((item, future.result()))
            except BaseException as exc:
                out.append((item, exc))
        return out

    # -- lag ----------------------------------------------------------------------------------

    def _measure_lag(self) -> int | None:
        """Per assigned partition, the high watermark (as the client last saw it: no request)
        minus the consumer's position, into ``cdcnorm_sink_lag``; returns the sum over the
        partitions that are not paused, or ``None`` when no partition's lag is known.

        A partition the sink has not read from in this process has no position yet: its
        committed offset (else its low watermark) stands in, asked once per assignment.
        Best effort: a broker with wrong high watermarks (Tansu) makes this wrong; it decides
        nothing but the metric and the liveness probe.
        """
        from confluent_kafka import KafkaException, TopicPartition

        try:
            assigned = [(tp.topic, tp.partition) for tp in self.consumer.assignment()]
            positions = {
                (tp.topic, tp.partition): tp.offset
                for tp in self.consumer.position([TopicPartition(t, p) for t, p in assigned])
            }
        except KafkaException as exc:
            log.debug("lag unknown: %s", exc)
            return None
        total: int | None = None
        for tp in assigned:
            position = positions.get(tp, -1)
            if position < 0:
                position = self._start_position(tp)
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            except KafkaException:
                high = -1
            if position is None or position < 0 or high < 0:
                continue
            lag = max(0, high - position)
            LAG.labels(tp[0], str(tp[1])).set(lag)
            self._lag_labels.add(tp)
            if tp not in self._paused_tps:
                total = (total or 0) + lag
        for gone in self._lag_labels - set(assigned):
            LAG.remove(gone[0], str(gone[1]))
            self._lag_labels.discard(gone)
        self._start_positions = {tp: v for tp, v in self._start_positions.items() if tp in assigned}
        return total

    def _start_position(self, tp: tuple[str, int]) -> int | None:
        if tp in self._start_positions:
            return self._start_positions[tp]
        from confluent_kafka import KafkaException, TopicPartition

        start: int | None = None
        try:
            (committed,) = self.consumer.committed([TopicPartition(*tp)], timeout=2.0)
            start = committed.offset if committed.offset >= 0 else None
            if start is None:
                start, _ = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=2.0)
        except KafkaException as exc:
            log.debug("no start position for %s[%d]: %s", tp[0], tp[1], exc)
        self._start_positions[tp] = start
        return start

    def _pause(
        self,
        table: tuple[str, str],
        reason: str,
        changes: list[SinkChange],
        first_paused: dict[tuple[str, int], int],
    ) -> None:
        log.error("pausing table %s: %s (other tables go on)", ".".join(table), reason)
        self._paused_tables[table] = reason
        PAUSED.set(len(self._paused_tables))
        for ch in changes:
            if ch.table == table:
                tp = (ch.topic, ch.partition)
                first_paused[tp] = min(first_paused.get(tp, ch.offset), ch.offset)

    def _commit(self, partitions: set[tuple[str, int]], first_paused: dict[tuple[str, int], int]) -> None:
        """Commit ``partitions``' offsets: each up to what the sink has read of it, but not past
        its first held change (``commit_interval_seconds``) or the first change of a paused table."""
        from confluent_kafka import TopicPartition

        held = self._held.first_offsets()
        commits = []
        to_pause = []
        for tp in sorted(partitions):
            offset = self._read_to.get(tp)
            if offset is None:
                continue
            if tp in held:
                offset = min(offset, held[tp])
            if tp in first_paused:
                offset = min(offset, first_paused[tp])
                if tp not in self._paused_tps:
                    to_pause.append(TopicPartition(tp[0], tp[1]))
                    self._paused_tps.add(tp)
            commits.append(TopicPartition(tp[0], tp[1], offset))
        if commits:
            self.consumer.commit(offsets=commits, asynchronous=False)
        if to_pause:
            self.consumer.pause(to_pause)
