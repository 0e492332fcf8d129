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
import gc
import logging
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from service.batches import BatchProcessor
from service.config import (
    ErrorPolicy,
    OutputClient,
    PipelineConfig,
    TopicEntry,
    build_chain_checked,
    check_worker_client,
)
from service.converters import build_converter
from service.dlq import (
    LetterContext,
    OversizedMessageError,
    RecordTooLargeError,
    dead_letter,
    letter_bytes,
    message_bytes,
    oversized_dead_letter,
    too_large_dead_letter,
)
from service.limits import TopicLimits, session_timeout_refusal
from service.metrics import WorkerMetrics
from service.output import BatchedOutput, Output, OutputProducer
from service.topics import valid_topic_name
from service.worker_types import (
    BATCH_BYTES,
    MAX_POLL_RECORDS,
    Completion,
    EntryRuntime,
    FatalMessageError,
    Letter,
    Outcome,
    ServicePipeline,
    WorkerState,
    _completion,
    output_message_bytes,
    output_record_bytes,
)
from transforms.compiled import status as compiled_status
from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions
from transforms.errors import ConfigError, StateStoreError
from transforms.metadata import InMemoryMetadataStore, MetadataStore, RowStateStore, ScopedMetadataStore
from transforms.table_budget import set_table_budget

__all__ = ["LAG_REFRESH_SECONDS", "Normalizer", "create_app", "quiet_library_loggers", "run_worker"]

log = logging.getLogger("cdcnorm.worker")

LAG_REFRESH_SECONDS = 10.0
"""How often the owned partitions' high watermarks and positions are read from the broker
(``cdcnorm_consumer_lag`` and the liveness probe's work, :mod:`service.lag`), records flowing or not."""


def quiet_library_loggers(level: int = logging.INFO) -> None:
    """Set library loggers so that no DEBUG records are built (they cost ~10% CPU otherwise)."""
    floor = max(level, logging.INFO)
    for name in ("aiokafka", "kafka", "faust", "mode", "aiohttp", "venusian", "redis"):
        logging.getLogger(name).setLevel(max(floor, logging.WARNING) if name in ("aiokafka", "kafka") else floor)


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
        # what decoders, transforms and the emitter keep per table is bounded by this (process-wide)
        set_table_budget(config.worker.table_cache_columns)
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
        worker = self.config.worker
        letters = LetterContext(entry.output_dlq_topic(self.config.topic_prefix), entry.format, worker.app_id,
                                worker.oversized_prefix_bytes, entry.dlq_context_headers)
        return EntryRuntime(index, entry, pipeline, letters, build_converter(entry.output))

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
        ``exc.row`` is set), counted and logged; :class:`FatalMessageError` under ``errors: fail``.

        The one place the worker turns a failure into a dead letter: a decode or transform failure
        (:meth:`process`), a record too large for the output, found before producing or refused by
        the broker (:meth:`refuse`, from the batch's encoding and its acknowledgement), and an
        oversized message all come here, written with the entry's :class:`~service.dlq.LetterContext`.
        The acknowledger only re-forms a letter its DLQ topic refused
        (:func:`service.dlq.smaller_dead_letters`, same context)."""
        fmt = runtime.format_id
        if runtime.entry.errors is ErrorPolicy.FAIL:
            raise FatalMessageError(
                f"{type(exc).__name__} at {message.topic}[{message.partition}]@{message.offset} "
                f"(errors: fail on {runtime.entry.label})"
            ) from exc
        cap = self.letter_cap(runtime.dlq_topic)
        if isinstance(exc, OversizedMessageError):  # never decoded: a prefix, sizes and sha256
            letter = oversized_dead_letter(message, exc, runtime.letters)
        elif isinstance(exc, RecordTooLargeError):  # the message, or its prefix when it is too large too
            exc.cap = min(exc.cap, cap)
            letter = too_large_dead_letter(message, exc, runtime.letters)
        else:
            letter = dead_letter(message, exc, runtime.letters)
            if letter_bytes(letter) > cap:  # too large for its DLQ topic: a prefix, sizes and sha256
                letter = oversized_dead_letter(message, exc, runtime.letters, limit=cap)
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
    from service.transport import BatchApp, BatchConsumer

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
    state.progress.stall_seconds = config.worker.liveness_stall_seconds
    metrics.seconds_since_progress.set_function(state.progress.seconds_since_progress)
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

    # A rebalance revokes every partition (aiokafka's eager protocol), then assigns the new set,
    # maybe empty: the worker is a member of its group again. Between the two it is not joined.
    async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        state.joined = True
        state.assigned = set(assigned)
        processor.assigned(assigned)
        for store in row_stores:
            store.clear_cache()
        # the group generation names the rebalance, so the lines of all replicas line up
        log.info("partitions assigned count=%d generation=%d", len(assigned), app.consumer_generation_id)

    app.on_partitions_assigned.connect(_assigned)  # type: ignore[arg-type]

    async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        state.joined = False
        state.assigned = state.assigned - set(revoked)
        processor.revoked(revoked)
        log.info("partitions revoked count=%d generation=%d", len(revoked), app.consumer_generation_id)

    app.on_partitions_revoked.connect(_revoked)  # type: ignore[arg-type]

    async def _stopping(sender: Any, **kwargs: Any) -> None:
        state.joined = False
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

    async def _refresh_lag() -> None:
        consumer = cast(BatchConsumer, app.consumer)
        # the broker's answer within the interval; the consumer thread's within two (else the
        # timer would wait for ever, and the lag stay what it was)
        await processor.refresh_lag(lambda owned: asyncio.wait_for(
            consumer.lag_offsets(owned, LAG_REFRESH_SECONDS), 2 * LAG_REFRESH_SECONDS))

    app.timer(LAG_REFRESH_SECONDS, name="cdcnorm-consumer-lag")(_refresh_lag)

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
    from service.health import health_report, liveness_report, redis_ping, startup_report
    from service.metrics import CONTENT_TYPE_LATEST

    client = getattr(meta_store, "_redis", None)

    @app.page("/healthz")
    async def healthz(self: Any, request: Any) -> Any:
        report = liveness_report(state)
        ok = report["live"]
        return self.json({"status": "ok" if ok else "failed", **report}, status=200 if ok else 503)

    @app.page("/startupz")
    async def startupz(self: Any, request: Any) -> Any:
        report = startup_report(state)
        return self.json(report, status=200 if report["started"] else 503)

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
        "worker starting app_id=%s brokers=%s topics=%d web_port=%s transforms=%s",
        config.worker.app_id, config.broker.bootstrap, len(config.topics), config.web.port, compiled_status(),
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
