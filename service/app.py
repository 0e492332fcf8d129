"""The Faust normalization worker: consume source topics, normalize, produce, commit after acks.

Faust runs the worker: the app, the consumer thread and its group membership, rebalances,
the commit timer, the producer, the web endpoints and the signal handling. The per-message
agent/stream machinery of Faust is **not** on the hot path: it cost ~16x a bare aiokafka loop
(``bench/SERVICE.md``). Instead the app uses :class:`service.transport.BatchApp`, whose consumer
hands every fetched record map (up to ``broker_max_poll_records`` records over the assigned
partitions) to one :class:`BatchProcessor`:

1. each record is normalized by :class:`Normalizer` (decode → key overrides → partial-image
   completion → chain → emit), in partition order;
2. a shipper task hands the output records of the batch to the producer, batch after batch,
   while the next batch is being processed: by default to librdkafka
   (:class:`service.rdkafka.RdKafkaOutput`, which partitions, batches and sends in C on its own
   threads), or with ``worker.output_client: aiokafka`` as one closed record batch per output
   topic-partition to Faust's aiokafka producer (:class:`service.output.BatchedOutput`);
3. an acker task waits for those batches' acknowledgements **in order** and only then marks
   the batch's source offsets committable; Faust's commit timer (``worker.commit_interval_s``),
   a rebalance and the shutdown commit exactly those. So an offset is committed only after all
   its records were acknowledged by the broker (at-least-once). After a crash the records of
   un-committed messages are produced again; the sink's idempotent merge (by key and
   ``source.sequence``) makes those duplicates harmless.

Output records are keyed by the canonical key JSON and partitioned like the Java client's
default partitioner (murmur2 of the key bytes), so all changes of one key land in one partition
in order.

A message that fails to decode or transform goes to the DLQ (``errors: dlq``) or stops the
worker (``errors: fail``, deliberately, without committing it). So does a message with a record
too large for the output: above ``worker.max_record_bytes`` (checked before producing), or
refused for its size by librdkafka or the broker (then the acker dead-letters the message, and
its batch's offsets become committable only once the dead letter is acknowledged). The output's
batches and the dead letters are sized to the topics' ``max.message.bytes``, read from the broker
(:mod:`service.limits`), so that the broker refuses only a record too large on its own; a dead
letter its DLQ topic refuses is sent again smaller, and one refused even in its smallest form is
logged with the message's coordinates and counted (``cdcnorm_dlq_refused_total``), and the worker
goes on. A Redis outage
(:class:`~transforms.errors.StateStoreError`) is retried with back-off and the message is neither
committed nor dead-lettered; meanwhile consumption waits and ``/readyz`` says not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from service.config import (
    ErrorPolicy,
    OutputClient,
    PipelineConfig,
    TopicEntry,
    WorkerConfig,
    build_chain_checked,
    check_worker_client,
)
from service.converters import RecordConverter, build_converter
from service.dlq import (
    DeadLetter,
    OversizedMessageError,
    RecordTooLargeError,
    dead_letter,
    letter_bytes,
    message_bytes,
    oversized_dead_letter,
    smaller_dead_letters,
    too_large_dead_letter,
)
from service.limits import BATCH_HEADER_BYTES, TopicLimits, session_timeout_refusal
from service.metrics import WorkerMetrics
from service.output import BatchedOutput, Output, OutputProducer, Record, Refusal, record_wire_bytes
from service.topics import valid_topic_name
from transforms.decoders import Decoder, Message, create_decoder
from transforms.envelope import EmitOptions, Event, OutRecord, TransactionEvent
from transforms.errors import CdcnormError, ConfigError, StateStoreError
from transforms.metadata import InMemoryMetadataStore, MetadataStore, RowStateStore, ScopedMetadataStore
from transforms.pipeline import Pipeline
from transforms.smt.base import TransformChain

__all__ = [
    "BatchProcessor",
    "BatchRefusedError",
    "EntryRuntime",
    "FatalMessageError",
    "Letter",
    "Normalizer",
    "Outcome",
    "ServicePipeline",
    "WorkerState",
    "create_app",
    "normalize_with_retry",
    "output_message_bytes",
    "output_record_bytes",
    "quiet_library_loggers",
    "run_worker",
]

log = logging.getLogger("cdcnorm.worker")

Completion = Callable[[list[Event]], list[Event]]

MAX_POLL_RECORDS = 2000
"""Records per fetched batch (over all assigned partitions; at most half of
``worker.max_inflight``): the unit of normalize → send → acknowledge. A batch starts while fewer
than ``max_inflight`` source messages wait for acknowledgements, so one batch is processed while
the one before it is on its way to the broker."""
BATCH_BYTES = 512 * 1024
"""Upper size of one produced record batch (one per output topic-partition and source batch)."""
MAX_MESSAGE_BYTES = 4 * BATCH_BYTES
"""Largest produce request (aiokafka) and record (librdkafka's ``message.max.bytes``), unless
:func:`output_message_bytes` needs more."""
DLQ_HEADROOM_BYTES = 256 * 1024
"""What a dead letter may add to its message: the context headers (a stack trace and an exception
message of at most 8000 characters each)."""


def output_message_bytes(worker: WorkerConfig) -> int:
    """The output producer's record size limit: :data:`MAX_MESSAGE_BYTES`, or more when the dead
    letter of a message of ``worker.max_message_bytes`` (or ``worker.max_record_bytes``) needs it.

    >>> output_message_bytes(WorkerConfig(max_message_bytes=8 * 1024 * 1024))
    8650752
    """
    return max(MAX_MESSAGE_BYTES, worker.max_message_bytes + DLQ_HEADROOM_BYTES, worker.max_record_bytes or 0)


def output_record_bytes(worker: WorkerConfig) -> int:
    """The largest output record the worker produces (:func:`service.output.record_wire_bytes`):
    ``worker.max_record_bytes``, by default the producer's limit (:func:`output_message_bytes`).

    >>> output_record_bytes(WorkerConfig()), output_record_bytes(WorkerConfig(max_record_bytes=100_000))
    (2097152, 100000)
    """
    return worker.max_record_bytes or output_message_bytes(worker)


def quiet_library_loggers(level: int = logging.INFO) -> None:
    """Set library loggers so that no DEBUG records are built (they cost ~10% CPU otherwise)."""
    floor = max(level, logging.INFO)
    for name in ("aiokafka", "kafka", "faust", "mode", "aiohttp", "venusian", "redis"):
        logging.getLogger(name).setLevel(max(floor, logging.WARNING) if name in ("aiokafka", "kafka") else floor)


class FatalMessageError(CdcnormError):
    """A message failed under ``errors: fail``; the worker stops without committing it."""


class BatchRefusedError(CdcnormError, RuntimeError):
    """The broker refused normalized records that fit their topic's ``max.message.bytes``, with the
    record batch they were sent in (the limit was lowered while the worker ran): the worker stops
    without committing them, and produces them again after its restart, its batches sized to the
    limit (:meth:`BatchProcessor._dead_letter_refused`)."""

    def __init__(self, topic: str, limit: int, refused: int) -> None:
        self.topic = topic
        self.limit = limit
        super().__init__(
            f"{refused} record(s) for topic {topic} that fit its max.message.bytes={limit} were refused with the "
            f"record batch they were sent in (the limit is below the batches the worker had sized to the topic: "
            f"lowered while it ran); stopping without committing them: restarted, the worker sizes its batches "
            f"to the limit and produces them again"
        )


class ServicePipeline(Pipeline):
    """The shared :class:`Pipeline` plus the service-only steps, in its :meth:`before_chain` hook.

    Order: decode → key overrides → partial-image completion (optional) → drop transaction
    boundaries unless enabled → chain → emit.
    """

    def __init__(
        self,
        decoder: Decoder,
        emit_options: EmitOptions,
        chain: TransformChain | None = None,
        key_overrides: Mapping[str, tuple[str, ...]] | None = None,
        completion: Completion | None = None,
        transactions: bool = False,
    ) -> None:
        super().__init__(decoder, emit_options, chain, key_overrides)
        self.completion = completion
        self.transactions = transactions

    def before_chain(self, events: list[Event]) -> list[Event]:
        if self.completion is not None and events:
            events = self.completion(events)
        if not self.transactions:
            events = [e for e in events if not isinstance(e, TransactionEvent)]
        return events


def _completion(store: RowStateStore) -> Completion:
    from transforms.completion import complete_partial_images

    def complete(events: list[Event]) -> list[Event]:
        result: list[Event] = complete_partial_images(events, store, None)
        return result

    return complete


@dataclass
class EntryRuntime:
    """A configured topic entry: its decoder pipeline and where its failures go."""

    index: int
    entry: TopicEntry
    pipeline: ServicePipeline
    dlq_topic: str
    converter: RecordConverter | None = None  # the entry's output converters; None: JSON with schemas

    @property
    def format_id(self) -> str:
        return self.entry.format


Letter = tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
"""A dead letter as the output appends it: (topic, key, value, headers)."""


@dataclass(slots=True)
class Outcome:
    """What one source message turned into: records, or a dead letter (also a record).

    A multi-row message whose rows partly fail to decode has the records of the rows that
    decoded and ``row_letters``: one dead letter per bad row (the whole message, with the row's
    index); ``dlq`` is the dead letter of a message that failed as a whole."""

    records: list[OutRecord]
    dlq: Letter | None = None
    error_class: str | None = None
    row_letters: tuple[Letter, ...] = ()

    @property
    def letters(self) -> tuple[Letter, ...]:
        """Every dead letter of the message: the whole message's, or its rows'."""
        return self.row_letters if self.dlq is None else (self.dlq, *self.row_letters)


@dataclass
class WorkerState:
    """Health flags shared by the agents and the HTTP endpoints."""

    started: bool = False
    joined: bool = False
    redis_ok: bool = True
    fatal: BaseException | None = None
    last_redis_error: str | None = None
    assigned: set[Any] = field(default_factory=set)
    metadata_status: Callable[[], str | None] | None = None  # the metadata log: None once loaded

    @property
    def live(self) -> bool:
        return self.fatal is None

    @property
    def metadata_error(self) -> str | None:
        """Why the metadata log is not loaded yet (None when it is, or when there is none)."""
        return None if self.metadata_status is None else self.metadata_status()

    @property
    def ready(self) -> bool:
        return (
            self.started and self.joined and self.redis_ok and self.fatal is None and self.metadata_error is None
        )


class Normalizer:
    """Format-agnostic per-message work of the worker; no Kafka here, so it is unit-testable."""

    def __init__(
        self,
        config: PipelineConfig,
        metadata: MetadataStore | None = None,
        row_state_factory: Callable[[TopicEntry], RowStateStore] | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.runtimes: list[EntryRuntime] = []
        self._by_topic: dict[str, EntryRuntime | None] = {}
        # one store for every entry, as the worker's Redis and metadata log are (an in-memory one
        # offline: `cdcnorm transform --config`), each entry seeing its own part of it
        shared: MetadataStore = metadata if metadata is not None else InMemoryMetadataStore()
        for index, entry in enumerate(config.topics):
            scoped = ScopedMetadataStore(shared, entry.label)
            self.runtimes.append(self._runtime(index, entry, scoped, row_state_factory))
        self._in: dict[tuple[str, str], Any] = {}
        self._out: dict[tuple[str, str], Any] = {}
        self.topic_names: dict[str, str] = {}  # output_topic's results, by entry topic
        # the largest dead letter (record_wire_bytes) each DLQ topic takes, from its max.message.bytes
        self.letter_limits: dict[str, int] = {}

    def _runtime(
        self,
        index: int,
        entry: TopicEntry,
        metadata: MetadataStore | None,
        row_state_factory: Callable[[TopicEntry], RowStateStore] | None,
    ) -> EntryRuntime:
        where = f"topics[{index}]"
        try:
            decoder = create_decoder(entry.format, entry.options, metadata)
        except ConfigError as exc:
            key = f"{where}.format" if exc.key == "format" else f"{where}.options.{exc.key}"
            raise ConfigError(key, exc.value, exc.reason) from exc
        emit_options = EmitOptions(
            prefix=self.config.topic_prefix,
            topic_template=entry.topic_template,
            decimal_mode=decoder.options.decimal_handling_mode,
            tombstones=entry.tombstones,
            transaction_topic=self.config.transaction_topic,
        )
        chain = build_chain_checked(entry.transforms, where, emit_options) if entry.transforms else None
        completion: Completion | None = None
        if entry.complete_partial_images:
            if row_state_factory is None:
                from transforms.metadata import InMemoryRowStateStore

                store: RowStateStore = InMemoryRowStateStore(entry.row_state.max_rows_per_table)
            else:
                store = row_state_factory(entry)
            try:
                completion = _completion(store)
            except ConfigError as exc:
                raise ConfigError(f"{where}.complete_partial_images", True, exc.reason) from exc
        pipeline = ServicePipeline(
            decoder,
            emit_options,
            chain=chain,
            key_overrides={k: tuple(v) for k, v in entry.key_columns.items()},
            completion=completion,
            transactions=entry.transaction_metadata,
        )
        return EntryRuntime(
            index, entry, pipeline, entry.output_dlq_topic(self.config.topic_prefix), build_converter(entry.output)
        )

    def runtime_for(self, topic: str) -> EntryRuntime | None:
        """The entry that handles ``topic`` (first match), cached per topic name."""
        try:
            return self._by_topic[topic]
        except KeyError:
            entry = self.config.entry_for(topic)
            rt = None if entry is None else self.runtimes[self.config.topics.index(entry)]
            self._by_topic[topic] = rt
            return rt

    def process(self, message: Message, runtime: EntryRuntime) -> Outcome:
        """Normalize one message.

        Raises :class:`StateStoreError` (retry later) and :class:`FatalMessageError`
        (``errors: fail``); any other failure becomes a dead letter.
        """
        worker = self.config.worker
        try:
            size = message_bytes(message)
            if size > worker.max_message_bytes:
                raise OversizedMessageError(size, worker.max_message_bytes)
            processed = runtime.pipeline.process_rows(message)
            records = processed.records
            if runtime.converter is not None:  # serialized here: a record it cannot write is a dead letter
                records = runtime.converter.convert(records)
        except StateStoreError:
            raise
        except Exception as exc:
            return self.refuse(message, runtime, exc)
        if processed.row_errors:  # a bad value loses only its own row: one dead letter per bad row
            letters = tuple(self._letter(message, runtime, exc) for exc in processed.row_errors)
            return Outcome(records, row_letters=letters)
        return Outcome(records)

    def refuse(self, message: Message, runtime: EntryRuntime, exc: Exception) -> Outcome:
        """The outcome of ``message`` failed with ``exc`` after :meth:`process` (e.g. a
        :class:`RecordTooLargeError`): its dead letter, or :class:`FatalMessageError` under
        ``errors: fail``."""
        return Outcome([], self._letter(message, runtime, exc), type(exc).__name__)

    def _letter(self, message: Message, runtime: EntryRuntime, exc: Exception) -> Letter:
        """The dead letter of ``message`` for ``exc`` (of the whole message, or of one row when
        ``exc.row`` is set), counted and logged; :class:`FatalMessageError` under ``errors: fail``."""
        fmt = runtime.format_id
        worker = self.config.worker
        if runtime.entry.errors is ErrorPolicy.FAIL:
            raise FatalMessageError(
                f"{type(exc).__name__} at {message.topic}[{message.partition}]@{message.offset} "
                f"(errors: fail on {runtime.entry.label})"
            ) from exc
        cap = self.letter_cap(runtime.dlq_topic)
        if isinstance(exc, OversizedMessageError):  # never decoded: a prefix, sizes and sha256
            letter = oversized_dead_letter(
                message, exc, worker.oversized_prefix_bytes, runtime.dlq_topic, fmt, worker.app_id
            )
        elif isinstance(exc, RecordTooLargeError):  # the message, or its prefix when it is too large too
            exc.cap = min(exc.cap, cap)
            letter = too_large_dead_letter(
                message, exc, worker.oversized_prefix_bytes, runtime.dlq_topic, fmt, worker.app_id
            )
        else:
            letter = dead_letter(
                message, exc, runtime.dlq_topic, fmt, worker.app_id,
                context_headers=runtime.entry.dlq_context_headers,
            )
            if letter_bytes(letter) > cap:  # too large for its DLQ topic: a prefix, sizes and sha256
                letter = oversized_dead_letter(
                    message, exc, worker.oversized_prefix_bytes, runtime.dlq_topic, fmt, worker.app_id, limit=cap
                )
        self.metrics.dlq.labels(message.topic, fmt, type(exc).__name__).inc()
        error_class, field_name = type(exc).__name__, getattr(exc, "field", None)
        row = getattr(exc, "row", None)
        if runtime.entry.log_errors:
            log.warning(
                "dead-letter topic=%s partition=%s offset=%s format=%s error_class=%s field=%s row=%s dlq=%s",
                message.topic,
                message.partition,
                message.offset,
                fmt,
                error_class,
                field_name,
                row,
                runtime.dlq_topic,
                extra={"topic": message.topic, "partition": message.partition, "offset": message.offset,
                       "format": fmt, "error_class": error_class, "field": field_name, "row": row,
                       "dlq_topic": runtime.dlq_topic},
            )
        log.debug("dead-letter detail: %s", exc)
        return letter.topic, letter.key, letter.value, letter.headers

    def letter_cap(self, dlq_topic: str) -> int:
        """The largest dead letter for ``dlq_topic`` (:func:`service.dlq.letter_bytes`): the output's
        record limit (:func:`output_record_bytes`), or less when the topic's ``max.message.bytes``
        (read from the broker, :attr:`letter_limits`) is lower."""
        cap = output_record_bytes(self.config.worker)
        known = self.letter_limits.get(dlq_topic)
        return cap if known is None else min(cap, known)

    def observe(self, fmt: str, seconds: Sequence[float]) -> None:
        """Per-message normalization times of ``fmt`` (``cdcnorm_decode_seconds``), a batch at a time."""
        if seconds:
            self.metrics.decode_seconds.observe_many(fmt, seconds)

    def output_topic(self, topic: str) -> str:
        """``topic`` as a valid Kafka topic name (:func:`service.topics.valid_topic_name`, the
        rule ``cdcnorm transform`` applies too), cached.

        >>> Normalizer.__new__(Normalizer).output_topic("p.$db.t")
        'p._db.t'
        """
        cache: dict[str, str] = self.__dict__.setdefault("topic_names", {})
        safe = cache.get(topic)
        if safe is None:
            safe = valid_topic_name(topic)
            if len(cache) < 100_000:
                cache[topic] = safe
        return safe

    def count_in(self, topic: str, fmt: str, n: int) -> None:
        """``n`` source messages of ``topic`` were consumed (``cdcnorm_messages_in``)."""
        counter = self._in.get((topic, fmt))
        if counter is None:
            counter = self._in[(topic, fmt)] = self.metrics.messages_in.labels(topic, fmt)
        counter.inc(n)

    def count_out(self, topic: str, fmt: str, n: int) -> None:
        """``n`` records produced from ``topic`` were acknowledged (``cdcnorm_records_out``)."""
        counter = self._out.get((topic, fmt))
        if counter is None:
            counter = self._out[(topic, fmt)] = self.metrics.records_out.labels(topic, fmt)
        counter.inc(n)


@dataclass(slots=True)
class _Part:
    """Source offsets and counts of the part of a fetched batch processed since the last handover."""

    offsets: dict[Any, int] = field(default_factory=dict)
    messages: int = 0
    produced: dict[tuple[str, str], int] = field(default_factory=dict)
    consumed: dict[tuple[str, str], int] = field(default_factory=dict)
    sources: list[Message] = field(default_factory=list)  # by origin (Record's last field)


@dataclass(slots=True)
class _InFlight:
    """A processed source batch whose output the broker has not acknowledged yet."""

    offsets: dict[Any, int]
    messages: int
    records: dict[tuple[str, str], int]
    output: dict[str, list[Record]]
    nbytes: int = 0  # keys, values and headers of ``output``
    futures: list[Awaitable[Any]] = field(default_factory=list)
    sources: list[Message] = field(default_factory=list)  # the source messages, by the records' origin


class BatchProcessor:
    """Normalizes fetched source batches, sends their output, and tracks committable offsets.

    This is the worker's agent: :class:`service.transport.BatchConsumer` calls :meth:`process`
    with each fetched record map. Records are processed in partition order and their output
    collected per batch. Two tasks take it from there, both in batch order: the shipper hands a
    batch's output to the producer (waiting, when need be, for the producer to take earlier
    batches of the same partitions, so the processing never waits for it), and the acker awaits
    the acknowledgements and only then makes the batch's source offsets :meth:`committable`.

    Back-pressure: at most ``max_inflight`` source messages, and about ``max_inflight_bytes`` of
    their output and dead-letter records (keys, values, headers), wait for acknowledgements.
    :meth:`process` waits for room before it starts a batch, and when the records of the batch in
    progress reach the byte bound, it hands over the part done so far (its offsets with it) and
    waits for room before it goes on. So what the producer holds, in Python and in librdkafka, is
    at most ``max_inflight_bytes`` plus one message's records; nothing is dropped while it waits,
    and no offset is committed before its records are acknowledged. A record refused for its size
    (:class:`service.output.Refusal`) dead-letters its source message (kept with the batch,
    :attr:`_InFlight.sources`) before the batch's offsets become committable. Any other produce
    failure, or a message under ``errors: fail``, calls ``on_fatal`` and stops processing; nothing
    after it becomes committable.

    With ``limits`` (:class:`service.limits.TopicLimits`), the DLQ topics' ``max.message.bytes``
    are read from the broker before the first batch, and a dead letter is made to fit its topic
    (:meth:`Normalizer.letter_cap`); a refusal's dead letter names the refusing topic's limit.
    """

    def __init__(
        self,
        normalizer: Normalizer,
        state: WorkerState,
        output: Output,
        *,
        max_inflight: int,
        on_fatal: Callable[[BaseException], None],
        highwater: Callable[[Any], int | None] | None = None,
        max_inflight_bytes: int | None = None,
        limits: TopicLimits | None = None,
    ) -> None:
        self.normalizer = normalizer
        self.state = state
        self.output = output
        self.limits = limits
        self._limits_read = limits is None
        self.max_inflight = max_inflight
        self.max_inflight_bytes = max_inflight_bytes if max_inflight_bytes is not None else 1 << 62
        self.record_limit = output_record_bytes(normalizer.config.worker)
        self._inflight_bytes = 0
        self._on_fatal = on_fatal
        self._highwater = highwater
        self._to_ship: asyncio.Queue[_InFlight] = asyncio.Queue()
        self._queue: asyncio.Queue[_InFlight] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._room = asyncio.Event()
        self._room.set()
        self._inflight = 0
        self._acked: dict[Any, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.failed: BaseException | None = None
        metrics = normalizer.metrics
        self._gauge = metrics.inflight
        self._bytes_gauge = metrics.inflight_bytes
        self._waits = metrics.backpressure_waits
        self._lag: dict[Any, Any] = {}
        self._lag_metric = metrics.consumer_lag

    # ------------------------------------------------------------------ processing

    async def process(self, records: Mapping[Any, Sequence[Any]]) -> None:
        """Normalize ``records`` (aiokafka ``ConsumerRecord``s per partition) and send the output."""
        if self.failed is not None:
            await asyncio.Event().wait()  # stopped: wait to be cancelled by the shutdown
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._ship_loop()), asyncio.ensure_future(self._ack_loop())]
        if not self._limits_read:  # the DLQ topics' limits, before the first dead letter is made
            self._limits_read = True
            await self._read_limits(rt.dlq_topic for rt in self.normalizer.runtimes)
        try:
            fatal = await self._process(records)
        except Exception as exc:  # a bug, or the producer refused a batch: stop, commit nothing more
            log.critical("processing failed; stopping error=%r", exc)
            self._fail(exc)
            raise
        if fatal is not None:
            await self._to_ship.join()
            await self._queue.join()
            self._fail(fatal)

    def _full(self) -> bool:
        return self._inflight >= self.max_inflight or self._inflight_bytes >= self.max_inflight_bytes

    async def _wait_for_room(self) -> None:
        if self._full():
            self._waits.inc()
            while self._full():
                self._room.clear()
                await self._room.wait()

    async def _process(self, records: Mapping[Any, Sequence[Any]]) -> FatalMessageError | None:
        fatal: FatalMessageError | None = None
        async with self._lock:
            await self._wait_for_room()
            normalizer = self.normalizer
            runtime_for = normalizer.runtime_for
            normalize = normalizer.process
            encode = self._encode
            output = self.output
            append = output.append
            room_bytes = self.max_inflight_bytes - self._inflight_bytes
            part = _Part()
            left = sum(len(batch) for batch in records.values())
            for tp, batch in records.items():
                if not batch:
                    continue
                topic = tp.topic
                runtime = runtime_for(topic)
                if runtime is None:  # not ours (e.g. a pattern matched an output topic): skip
                    part.offsets[tp] = batch[-1].offset + 1
                    left -= len(batch)
                    continue
                partition = tp.partition
                out = 0
                done = -1
                n = 0
                seconds: list[float] = []
                for rec in batch:
                    started = perf_counter()
                    message = Message(rec.value, rec.key, topic, partition, rec.offset, rec.timestamp,
                                      tuple(rec.headers) if rec.headers else ())
                    try:
                        try:
                            outcome = normalize(message, runtime)
                        except StateStoreError as exc:
                            outcome = await normalize_with_retry(message, runtime, normalizer, self.state, exc)
                            started = perf_counter()  # the retries' waits are not the message's cost
                        encoded = encode(outcome.records)
                        if type(encoded) is RecordTooLargeError:  # checked before producing: a dead letter
                            outcome, encoded = normalizer.refuse(message, runtime, encoded), []
                    except FatalMessageError as exc:
                        _log_fatal_message(message, exc)
                        fatal = exc
                        break
                    output.origin = len(part.sources)  # a size refusal of its records dead-letters it
                    part.sources.append(message)
                    for letter in outcome.letters:  # the message's, or its bad rows' (its other rows follow)
                        append(*letter)
                    for record in encoded:  # type: ignore[union-attr]
                        append(*record)
                    out += len(outcome.records)
                    done = rec.offset
                    n += 1
                    left -= 1
                    seconds.append(perf_counter() - started)
                    if left and output.pending_bytes >= room_bytes:
                        # the byte bound: hand over what is done, wait for acknowledgements, go on
                        normalizer.observe(runtime.format_id, seconds)
                        self._count(part, tp, runtime, n, out, done)
                        self._seal(part)
                        part, n, out, seconds = _Part(), 0, 0, []
                        await self._wait_for_room()
                        room_bytes = self.max_inflight_bytes - self._inflight_bytes
                normalizer.observe(runtime.format_id, seconds)
                self._count(part, tp, runtime, n, out, done)
                if fatal is not None:
                    break
            self._seal(part)
        return fatal

    def _encode(self, records: list[OutRecord]) -> list[tuple[str, bytes | None, bytes | None, Any]] | RecordTooLargeError:
        """``records`` serialized for the output (topic, key, value, headers), or the error of the
        first one larger than :attr:`record_limit` (``worker.max_record_bytes``)."""
        if not records:
            return []
        normalizer = self.normalizer
        topics = normalizer.topic_names  # output_topic's cache, read first
        limit = self.record_limit
        encoded = []
        for r in records:
            topic = topics.get(r.topic) or normalizer.output_topic(r.topic)
            key, value = r.key_bytes(), r.value_bytes()
            size = record_wire_bytes(key, value, r.headers)
            if size > limit:
                return RecordTooLargeError(topic, size, limit)
            encoded.append((topic, key, value, r.headers))
        return encoded

    def _count(self, part: _Part, tp: Any, runtime: EntryRuntime, n: int, out: int, done: int) -> None:
        """``n`` messages of ``tp`` up to offset ``done`` were processed into ``out`` records."""
        if not n:
            return
        part.offsets[tp] = done + 1
        part.messages += n
        key = (tp.topic, runtime.format_id)
        part.consumed[key] = part.consumed.get(key, 0) + n
        if out:
            part.produced[key] = part.produced.get(key, 0) + out
        self._update_lag(tp, done)

    def _seal(self, part: _Part) -> None:
        """Hand the records appended so far, with ``part``'s offsets, to the shipper."""
        output = self.output
        nbytes = output.pending_bytes
        # inflight first, then messages_in, with no await in between: a scrape never sees
        # all messages counted and nothing in flight while a batch is still unacknowledged
        self._inflight += part.messages
        self._gauge.inc(part.messages)
        self._inflight_bytes += nbytes
        self._bytes_gauge.inc(nbytes)
        for (topic, fmt), n in part.consumed.items():
            self.normalizer.count_in(topic, fmt, n)
        self._to_ship.put_nowait(
            _InFlight(part.offsets, part.messages, part.produced, output.take(), nbytes, sources=part.sources)
        )

    def _update_lag(self, tp: Any, offset: int) -> None:
        if self._highwater is None:
            return
        try:
            high = self._highwater(tp)
        except Exception:
            return
        if high is None:
            return
        gauge = self._lag.get(tp)
        if gauge is None:
            gauge = self._lag[tp] = self._lag_metric.labels(tp.topic, str(tp.partition))
        gauge.set(max(0, high - offset - 1))

    # ------------------------------------------------------------------ sending, acknowledgements

    async def _ship_loop(self) -> None:
        queue = self._to_ship
        send = self.output.send
        while True:
            item = await queue.get()
            try:
                item.futures = await send(item.output)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.critical("produce refused a batch; stopping without committing it error=%r", exc)
                queue.task_done()
                while not queue.empty():  # nothing after it is sent, nothing after it committed
                    queue.get_nowait()
                    queue.task_done()
                self._fail(exc)
                return
            item.output = {}
            self._queue.put_nowait(item)
            queue.task_done()

    async def _ack_loop(self) -> None:
        queue = self._queue
        count_out = self.normalizer.count_out
        while True:
            item = await queue.get()
            try:
                refused: list[Refusal] = []
                for fut in item.futures:
                    result = await fut
                    if type(result) is list:
                        refused += result
                if refused:  # dead-letter their source messages before the offsets become committable
                    await self._dead_letter_refused(item, refused)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.critical(
                    "produce failed; stopping without committing partitions=%s error=%r",
                    ",".join(f"{tp[0]}[{tp[1]}]@{off - 1}" for tp, off in item.offsets.items()), exc,
                )
                queue.task_done()
                while not queue.empty():  # nothing after a failed batch is committed
                    queue.get_nowait()
                    queue.task_done()
                self._fail(exc)
                return
            self._acked.update(item.offsets)
            for (topic, fmt), n in item.records.items():
                count_out(topic, fmt, n)
            self._inflight -= item.messages
            self._gauge.dec(item.messages)
            self._inflight_bytes -= item.nbytes
            self._bytes_gauge.dec(item.nbytes)
            if not self._full():
                self._room.set()
            queue.task_done()

    async def _read_limits(self, topics: Iterable[str]) -> dict[str, int | None]:
        """The ``max.message.bytes`` of ``topics`` (from the broker, :attr:`limits`); those of DLQ
        topics become the normalizer's :attr:`~Normalizer.letter_limits`."""
        if self.limits is None:
            return {}
        found = await self.limits.learn(topics)
        dlq_topics = {rt.dlq_topic for rt in self.normalizer.runtimes}
        for topic, limit in found.items():
            if limit is not None and topic in dlq_topics:
                self.normalizer.letter_limits[topic] = limit - BATCH_HEADER_BYTES
        return found

    async def _dead_letter_refused(self, item: _InFlight, refused: list[Refusal]) -> None:
        """Produce the dead letters of the source messages whose records were refused for their
        size, and wait for their acknowledgement. Raises (the worker stops) when a refused record
        has no source message, or under ``errors: fail``.

        The refusing topics' limits are read again first (the output forgot them: the broker
        refused a record, so a limit may have been lowered), and the dead letter's reason names the
        topic's ``max.message.bytes``. A normalized record that fits its topic's limit was refused
        with the record batch it was sent in: the limit was lowered below the batches the producer
        had sized to it while they were on their way. Its message is not dead-lettered then (the
        change would be out of the stream, and a replay puts it after newer changes of its row):
        :class:`BatchRefusedError` stops the worker without committing, and the restarted worker,
        whose batches are sized to the new limit from the start, produces the records again from
        the committed offsets (at least once, as after a crash). A dead letter refused with its
        batch is dead-lettered again. :meth:`_send_dead_letters` sends them."""
        normalizer = self.normalizer
        first: dict[int, Refusal] = {}
        for refusal in refused:
            if refusal.origin < 0 or refusal.origin >= len(item.sources):
                raise RuntimeError(f"a record for {refusal.topic} was refused ({refusal.error}) and has no source message")
            first.setdefault(refusal.origin, refusal)
        limits = await self._read_limits({r.topic for r in refused if not r.local})
        dlq_topics = {rt.dlq_topic for rt in normalizer.runtimes}
        for refusal in refused:
            limit = limits.get(refusal.topic)
            if (limit is not None and refusal.topic not in dlq_topics
                    and refusal.size + BATCH_HEADER_BYTES <= limit):
                raise BatchRefusedError(refusal.topic, limit, sum(1 for r in refused if r.topic == refusal.topic))
        letters: dict[int, tuple[Message, EntryRuntime, RecordTooLargeError, DeadLetter]] = {}
        for origin, refusal in first.items():
            message = item.sources[origin]
            runtime = normalizer.runtime_for(message.topic)
            if runtime is None:
                raise RuntimeError(f"a record for {refusal.topic} was refused ({refusal.error}); no entry for {message.topic}")
            error, limit = refusal.error, limits.get(refusal.topic)
            alone = limit is not None and refusal.size + BATCH_HEADER_BYTES <= limit
            if limit is not None:
                error += (f" (the topic's max.message.bytes is {limit}"
                          + ("; the record fits it, the record batch it was sent in did not)" if alone else ")"))
            # without the DLQ topic's limit, expect it to refuse what the output topic refused for its size
            cap = self.record_limit if alone or runtime.dlq_topic in normalizer.letter_limits else refusal.size - 1
            exc = RecordTooLargeError(refusal.topic, refusal.size, None, error, cap=min(self.record_limit, cap))
            try:
                outcome = normalizer.refuse(message, runtime, exc)
            except FatalMessageError as fatal:
                _log_fatal_message(message, fatal)
                raise
            assert outcome.dlq is not None
            topic, key, value, headers = outcome.dlq
            letters[origin] = (message, runtime, exc, DeadLetter(topic, key, value, tuple(headers)))
            counted = (message.topic, runtime.format_id)
            lost = sum(1 for r in refused if r.origin == origin)
            item.records[counted] = max(0, item.records.get(counted, 0) - lost)
        await self._send_dead_letters(letters)

    async def _send_dead_letters(self, letters: Mapping[int, tuple[Message, EntryRuntime, Exception, DeadLetter]]) -> None:
        """Send ``letters`` (by their message's origin) and wait for their acknowledgement.

        A dead letter the DLQ topic refuses although it fits the topic's limit (read again) was
        refused with its record batch: it is sent once more as it is. One it refuses for its size is
        sent again, smaller
        (:func:`service.dlq.smaller_dead_letters`: the prefix form, then the smallest, skipping a
        form larger than the topic's limit read again from the broker). When the topic refuses
        even the smallest, the message is logged at ERROR with its coordinates and counted
        (``cdcnorm_dlq_refused_total``), and the worker goes on: the message stays in its source
        topic only. Kafka Connect's dead-letter reporter does the same (it logs a failed DLQ
        produce and counts it); stopping instead would stop the worker at the same message after
        every restart, until the DLQ topic's limit is raised."""
        worker = self.normalizer.config.worker
        pending = {origin: entry[3] for origin, entry in letters.items()}
        smaller: dict[int, list[DeadLetter]] = {}
        resent: set[int] = set()
        while pending:
            batch: dict[str, list[Record]] = {}
            for origin, letter in pending.items():
                batch.setdefault(letter.topic, []).append((letter.key, letter.value, list(letter.headers), origin))
            again: dict[int, Refusal] = {}
            for fut in await self.output.send(batch):
                result = await fut
                if type(result) is list:
                    for refusal in result:
                        again.setdefault(refusal.origin, refusal)
            if not again:
                return
            await self._read_limits({r.topic for r in again.values() if not r.local})
            retry: dict[int, DeadLetter] = {}
            for origin, refusal in again.items():
                message, runtime, exc, _ = letters[origin]
                size = letter_bytes(pending[origin])
                known = self.normalizer.letter_limits.get(refusal.topic)
                if known is not None and size <= known and origin not in resent:
                    resent.add(origin)  # it fits: refused with its batch (the limit lowered meanwhile), once more
                    retry[origin] = pending[origin]
                    continue
                if origin not in smaller:
                    smaller[origin] = smaller_dead_letters(
                        message, exc, pending[origin], size - 1 if known is None else known,
                        worker.oversized_prefix_bytes, runtime.format_id, worker.app_id,
                    )
                forms = smaller[origin]
                while len(forms) > 1 and known is not None and letter_bytes(forms[0]) > known:
                    forms.pop(0)  # known not to fit: the next one
                if forms:
                    retry[origin] = forms.pop(0)
                    log.warning(
                        "dead letter refused by its DLQ topic for its size, sending a smaller one topic=%s "
                        "partition=%s offset=%s dlq=%s bytes=%d smaller=%d",
                        message.topic, message.partition, message.offset, refusal.topic, size,
                        letter_bytes(retry[origin]),
                        extra={"topic": message.topic, "partition": message.partition, "offset": message.offset,
                               "dlq_topic": refusal.topic},
                    )
                else:
                    self._dead_letter_lost(message, refusal, size)
            pending = retry

    def _dead_letter_lost(self, message: Message, refusal: Refusal, size: int) -> None:
        self.normalizer.metrics.dlq_refused.labels(message.topic, refusal.topic).inc()
        log.error(
            "dead letter refused by its DLQ topic even in its smallest form, going on without it: topic=%s "
            "partition=%s offset=%s dlq=%s bytes=%d error=%s; the message stays in its source topic only "
            "(cdcnorm tail %s --partition %s --offset %s --count 1); raise the DLQ topic's max.message.bytes",
            message.topic, message.partition, message.offset, refusal.topic, size, refusal.error,
            message.topic, message.partition, message.offset,
            extra={"topic": message.topic, "partition": message.partition, "offset": message.offset,
                   "dlq_topic": refusal.topic, "error_class": "RecordTooLargeError"},
        )

    def _fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = exc
            self._on_fatal(exc)

    async def wait_sent(self) -> None:
        """Wait until every processed batch was handed to the producer (or the worker failed)."""
        await self._to_ship.join()

    async def drain(self) -> None:
        """Wait until the batch in progress is sent and every sent batch is acknowledged (or failed)."""
        async with self._lock:
            await self._to_ship.join()
            await self._queue.join()

    def committable(self) -> dict[Any, int]:
        """Next offset to read per partition whose output was acknowledged since the last commit."""
        return dict(self._acked)

    def committed(self, offsets: Mapping[Any, int]) -> None:
        """``offsets`` were committed: forget them unless a later batch was acknowledged since."""
        acked = self._acked
        for tp, offset in offsets.items():
            if acked.get(tp) == offset:
                del acked[tp]

    @property
    def inflight(self) -> int:
        """Source messages processed whose output is not acknowledged yet."""
        return self._inflight

    async def stop(self) -> None:
        """Cancel the shipper and the acker and close the output (after :meth:`drain`, at shutdown)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.output.close()


def _log_fatal_message(message: Message, exc: FatalMessageError) -> None:
    log.critical(
        "stopping: message failed under errors=fail topic=%s partition=%s offset=%s "
        "error_class=%s field=%s; the offset is not committed",
        message.topic, message.partition, message.offset, type(exc.__cause__).__name__,
        getattr(exc.__cause__, "field", None),
        extra={"topic": message.topic, "partition": message.partition, "offset": message.offset,
               "error_class": type(exc.__cause__).__name__, "field": getattr(exc.__cause__, "field", None)},
    )
    # the reason can quote data values: only at DEBUG (no payloads in logs at INFO)
    log.debug("failure detail: %s", exc.__cause__)


async def normalize_with_retry(
    message: Message,
    runtime: EntryRuntime,
    normalizer: Normalizer,
    state: WorkerState,
    first_error: StateStoreError | None = None,
) -> Outcome:
    """:meth:`Normalizer.process`, retrying with jittered back-off while the state store fails.

    While it retries, ``state.redis_ok`` is false (``/readyz`` says not ready).
    """
    cfg = normalizer.config.worker
    delay = cfg.retry_initial_s
    attempt = 0
    error = first_error
    while True:
        if error is not None:
            attempt += 1
            state.redis_ok = False
            state.last_redis_error = str(error)
            if attempt == 1 or attempt % 10 == 0:
                log.warning(
                    "state store unavailable, pausing topic=%s partition=%s offset=%s attempt=%d retry_in=%.1fs error=%s",
                    message.topic, message.partition, message.offset, attempt, delay, error,
                    extra={"topic": message.topic, "partition": message.partition, "offset": message.offset,
                           "error_class": type(error).__name__},
                )
            await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
            delay = min(delay * 2, cfg.retry_max_s)
        try:
            outcome = normalizer.process(message, runtime)
            break
        except StateStoreError as exc:
            error = exc
    if attempt:
        log.info("state store is back topic=%s partition=%s offset=%s", message.topic, message.partition, message.offset)
    state.redis_ok = True
    return outcome


def _faust_settings(config: PipelineConfig, data_dir: Path) -> dict[str, Any]:
    broker = config.broker
    settings: dict[str, Any] = {
        "broker": [f"kafka://{s}" for s in broker.bootstrap_servers],
        "broker_client_id": broker.client_id,
        "broker_session_timeout": broker.session_timeout_s,
        "broker_heartbeat_interval": broker.heartbeat_interval_s,
        "broker_commit_interval": config.worker.commit_interval_s,
        "broker_rebalance_timeout": max(broker.session_timeout_s * 2, 10.0),
        "broker_max_poll_records": min(MAX_POLL_RECORDS, max(1, config.worker.max_inflight // 2)),
        "producer_acks": -1,
        "producer_linger": 0.005,
        "producer_max_batch_size": BATCH_BYTES,
        "producer_max_request_size": output_message_bytes(config.worker),
        "topic_partitions": 4,
        "topic_allow_declare": True,
        "topic_disable_leader": True,
        "web_enabled": config.web.enabled,
        "web_port": config.web.port,
        "web_bind": config.web.host,
        "web_host": config.web.host,
        "datadir": str(data_dir),
        "store": "memory://",
        "stream_wait_empty": True,
        "consumer_auto_offset_reset": "earliest",
        "value_serializer": "raw",
        "key_serializer": "raw",
        "logging_config": None,
    }
    from service.transport import faust_credentials

    credentials = faust_credentials(broker)
    if credentials is not None:
        settings["broker_credentials"] = credentials
    return settings


def create_app(
    config: PipelineConfig,
    *,
    normalizer: Normalizer | None = None,
    state: WorkerState | None = None,
    producer: OutputProducer | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
    data_dir: Path | None = None,
) -> Any:
    """Build the Faust app (source topics, batch processor, web endpoints, rebalance hooks).

    Without ``normalizer``, Redis-backed stores are created from ``config.redis``, the decoder
    metadata store on the metadata log (``config.metadata_log``), which starts loading here. ``producer``
    replaces the app's aiokafka producer (tests); ``on_fatal`` is called when the worker must
    stop. The :class:`BatchProcessor` is ``app.cdcnorm_processor``. Raises ConfigError for a
    setting Faust's aiokafka consumer cannot honour (``broker.group_protocol: consumer``).
    """
    from service.transport import BatchApp

    check_worker_client(config)  # parse_config reports it too; a config built in code gets here first
    quiet_library_loggers(logging.getLevelName(config.worker.log_level))
    state = state if state is not None else WorkerState()
    row_stores: list[Any] = []
    meta_store: Any = None
    if normalizer is None:
        normalizer, meta_store, row_stores = _redis_normalizer(config)
    if hasattr(meta_store, "start"):  # the metadata log: loaded in the background, before readiness
        meta_store.start()
        state.metadata_status = meta_store.status
    metrics = normalizer.metrics
    ddir = data_dir or config.worker.data_dir or Path(tempfile.mkdtemp(prefix="cdcnorm-faust-"))
    app = BatchApp(config.worker.app_id, **_faust_settings(config, ddir))
    app.cdcnorm_state = state  # type: ignore[attr-defined]
    app.cdcnorm_normalizer = normalizer  # type: ignore[attr-defined]

    stop_tasks: list[asyncio.Future[Any]] = []

    def default_fatal(exc: BaseException) -> None:
        stop_tasks.append(asyncio.ensure_future(app.stop()))

    fatal_cb = on_fatal or default_fatal

    def fatal(exc: BaseException) -> None:
        if state.fatal is None:
            state.fatal = exc
            metrics.ready.set(0)
            fatal_cb(exc)

    class _AppProducer:
        """The app's aiokafka producer, started on first use."""

        async def partitions_for(self, topic: str) -> set[int]:
            await app.maybe_start_producer()
            result: set[int] = await app.producer._ensure_producer().partitions_for(topic)  # type: ignore[attr-defined]
            return result

        def create_batch(self) -> Any:
            return app.producer._ensure_producer().create_batch()  # type: ignore[attr-defined]

        async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Awaitable[Any]:
            result: Awaitable[Any] = await app.producer._ensure_producer().send_batch(  # type: ignore[attr-defined]
                batch, topic, partition=partition
            )
            return result

    def highwater(tp: Any) -> int | None:
        high: int | None = app.consumer.highwater(tp)
        return high

    output: Output
    # the topics' max.message.bytes, read from the broker: batches and dead letters are sized to them
    limits = TopicLimits(config.broker.librdkafka()) if producer is None else None
    if producer is not None:
        output = BatchedOutput(producer)
    elif config.worker.output_client is OutputClient.AIOKAFKA:
        output = BatchedOutput(_AppProducer())
        app.idempotent_producer = True  # acks=all and idempotent, as the librdkafka output
    else:
        from service.rdkafka import RdKafkaOutput, producer_config

        output = RdKafkaOutput(
            producer_config(config.broker.librdkafka(), output_message_bytes(config.worker),
                            config.worker.max_inflight_bytes, config.worker.max_record_bytes),
            limits,
        )
    processor = BatchProcessor(
        normalizer,
        state,
        output,
        max_inflight=config.worker.max_inflight,
        max_inflight_bytes=config.worker.max_inflight_bytes,
        on_fatal=fatal,
        highwater=highwater if producer is None else None,
        limits=limits,
    )
    app.batch_handler = processor
    app.cdcnorm_processor = processor  # type: ignore[attr-defined]

    for entry in config.topics:
        if entry.name is not None:
            channel = app.topic(entry.name, key_type=bytes, value_type=bytes,
                                key_serializer="raw", value_serializer="raw")
        else:
            channel = app.topic(pattern=entry.pattern, key_type=bytes, value_type=bytes,
                                key_serializer="raw", value_serializer="raw")
        app.topics.add(channel)

    async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        state.joined = True
        state.assigned = set(assigned)
        for store in row_stores:
            store.clear_cache()
        # the group generation names the rebalance, so the lines of all replicas line up
        log.info("partitions assigned count=%d generation=%d", len(assigned), app.consumer_generation_id)

    app.on_partitions_assigned.connect(_assigned)  # type: ignore[arg-type]

    async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        log.info("partitions revoked count=%d generation=%d", len(revoked), app.consumer_generation_id)

    app.on_partitions_revoked.connect(_revoked)  # type: ignore[arg-type]

    async def _stopping(sender: Any, **kwargs: Any) -> None:
        await processor.stop()
        if hasattr(meta_store, "close"):
            await asyncio.to_thread(meta_store.close)

    app.on_before_shutdown.connect(_stopping)  # type: ignore[arg-type]

    async def _started() -> None:
        state.started = True
        # What start-up allocated (modules, Faust's and aiokafka's services) lives as long as
        # the process: move it out of the cyclic collector's generations, so collections
        # while processing scan only the objects made since (CPython's documented gc.freeze use).
        gc.collect()
        gc.freeze()

    app.task(_started)

    if config.web.enabled:
        _install_pages(app, state, metrics, meta_store)
    return app


def _redis_normalizer(config: PipelineConfig) -> tuple[Normalizer, Any, list[Any]]:
    from service.state import RedisMetadataStore, RedisRowStateStore, connect_redis

    metrics = WorkerMetrics()
    rc = config.redis
    client = connect_redis(rc)
    meta: Any = RedisMetadataStore(client, rc.key_prefix, rc.metadata_cache_ttl_s, on_error=metrics.redis_error)
    if config.metadata_log.enabled:  # the source of truth of the metadata; Redis its cache
        from service.metadata_log import MetadataLog, replica_id
        from service.state import LoggedMetadataStore

        ml = config.metadata_log
        log_ = MetadataLog(
            config.broker.librdkafka(),
            config.metadata_topic,
            replica=replica_id(config.worker.app_id),
            timeout_s=ml.timeout_s,
            replication_factor=ml.replication_factor,
            min_insync_replicas=ml.min_insync_replicas,
        )
        meta = LoggedMetadataStore(log_, meta)
    rows: list[Any] = []

    def row_store(entry: TopicEntry) -> RowStateStore:
        store = RedisRowStateStore(
            client,
            rc.key_prefix,
            entry.row_state.ttl_seconds,
            entry.row_state.max_rows_per_table,
            on_error=metrics.redis_error,
        )
        rows.append(store)
        return store

    normalizer = Normalizer(config, meta, row_store, metrics)
    return normalizer, meta, rows


def _install_pages(app: Any, state: WorkerState, metrics: WorkerMetrics, meta_store: Any) -> None:
    from service.health import health_report, redis_ping
    from service.metrics import CONTENT_TYPE_LATEST

    client = getattr(meta_store, "_redis", None)

    @app.page("/healthz")
    async def healthz(self: Any, request: Any) -> Any:
        ok = state.live
        return self.json({"status": "ok" if ok else "failed"}, status=200 if ok else 500)

    @app.page("/readyz")
    async def readyz(self: Any, request: Any) -> Any:
        if client is not None:
            state.redis_ok = await redis_ping(client.client)
        report = health_report(state)
        metrics.ready.set(1 if report["ready"] else 0)
        return self.json(report, status=200 if report["ready"] else 503)

    @app.page("/metrics")
    async def metrics_page(self: Any, request: Any) -> Any:
        metrics.ready.set(1 if state.ready else 0)
        return self.bytes(metrics.render(), content_type=CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4")


def run_worker(config: PipelineConfig, *, web_port: int | None = None) -> int:
    """Run the worker in this process until SIGTERM/SIGINT; the exit code (3 after a fatal stop)."""
    import os
    import signal

    import faust

    from service.exits import EXIT_FATAL, StartFailure, StopDeadline, describe_start_failure

    if web_port is not None:
        config = config.model_copy(update={"web": config.web.model_copy(update={"port": web_port})})
    from service.logs import configure_logging

    level = config.worker.log_level
    configure_logging(level)  # text or JSON (--log-format, CDCNORM_LOG_FORMAT); Faust keeps it
    refusal = session_timeout_refusal(config.broker.librdkafka(), config.broker.session_timeout_s,
                                      "broker.session_timeout_s")
    if refusal is not None:  # else the worker would run and never join its group
        log.critical("worker not started: %s", refusal)
        return 2
    state = WorkerState()

    def stop_process(exc: BaseException) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    app = create_app(config, state=state, on_fatal=stop_process)

    class _Worker(faust.Worker):
        async def on_stop(self) -> None:  # the first step of a stop: the deadline starts
            deadline.start()
            await super().on_stop()

    worker = _Worker(app, loglevel=level.lower(), quiet=True, redirect_stdouts=False, override_logging=False)
    deadline = StopDeadline(config.worker.shutdown_timeout_s, worker.loop)
    worker.spinner = None  # no terminal spinner codes among the log lines
    quiet_library_loggers(logging.getLevelName(level))
    log.info(
        "worker starting app_id=%s brokers=%s topics=%d web_port=%s",
        config.worker.app_id, config.broker.bootstrap, len(config.topics), config.web.port,
    )
    start_failure = StartFailure(lambda: state.started)
    faust_log = logging.getLogger("faust.worker")  # where Faust logs the exception a start failed with
    faust_log.addFilter(start_failure)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:  # Faust ends with sys.exit: 0, or 1 when the start raised
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        deadline.cancel()
        faust_log.removeFilter(start_failure)
    if state.fatal is not None:
        log.critical("worker stopped after a fatal error: %s", state.fatal)
        return EXIT_FATAL
    if not state.started and (code or start_failure.error is not None):  # it never ran
        log.critical("worker stopped: %s", describe_start_failure(start_failure.error))
        return EXIT_FATAL
    return 0
