"""The Faust normalization worker: consume source topics, normalize, produce, ack after delivery.

Per source topic entry (``topics:`` in the config) one agent runs with concurrency 1, so the
order of messages in a partition is kept. For each message the agent runs
:class:`Normalizer` (decode → key overrides → partial-image completion → chain → emit), hands
the records to the producer without waiting, and queues the message with its delivery
futures. A separate acker task waits for those futures **in order** and only then acks the
message to Faust, which commits the offset on its next commit. So an offset is committed only
after all its records were acknowledged by the broker (at-least-once). After a crash the
records of un-committed messages are produced again; the sink's idempotent merge (by key and
``source.sequence``) makes those duplicates harmless.

Output records are keyed by the canonical key JSON and partitioned by the producer's default
partitioner (murmur2 of the key bytes, as in the Java client), so all changes of one key land in
one partition in order.

A message that fails to decode or transform goes to the DLQ (``errors: dlq``) or stops the
worker (``errors: fail``, deliberately, without committing it). A Redis outage
(:class:`~transforms.errors.StateStoreError`) is retried with back-off and the message is neither
acked nor dead-lettered; meanwhile consumption of that partition waits and ``/readyz`` says not
ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from service.config import ErrorPolicy, PipelineConfig, TopicEntry, build_chain_checked
from service.dlq import dead_letter
from service.metrics import WorkerMetrics
from transforms.decoders import Decoder, Message, create_decoder
from transforms.envelope import EmitOptions, Event, OutRecord, TransactionEvent
from transforms.errors import ConfigError, StateStoreError
from transforms.metadata import MetadataStore, RowStateStore
from transforms.pipeline import Pipeline
from transforms.smt.base import TransformChain

__all__ = [
    "EntryRuntime",
    "FatalMessageError",
    "Normalizer",
    "Outcome",
    "RecordSender",
    "ServicePipeline",
    "WorkerState",
    "create_app",
    "quiet_library_loggers",
    "run_worker",
]

log = logging.getLogger("cdcnorm.worker")

_INVALID_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")

Completion = Callable[[list[Event]], list[Event]]


def quiet_library_loggers(level: int = logging.INFO) -> None:
    """Set library loggers so that no DEBUG records are built (they cost ~10% CPU otherwise)."""
    floor = max(level, logging.INFO)
    for name in ("aiokafka", "kafka", "faust", "mode", "aiohttp", "venusian", "redis"):
        logging.getLogger(name).setLevel(max(floor, logging.WARNING) if name in ("aiokafka", "kafka") else floor)


class FatalMessageError(Exception):
    """A message failed under ``errors: fail``; the worker stops without committing it."""


class RecordSender(Protocol):
    """Hands a record to the producer; the returned awaitable completes on broker ack."""

    async def __call__(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
    ) -> Awaitable[Any]: ...


class ServicePipeline(Pipeline):
    """The shared :class:`Pipeline` plus the service-only steps.

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

    def events(self, message: Message) -> list[Event]:
        events = self.decoder.decode(message)
        if self.key_overrides:
            events = [self._override_key(e) for e in events]
        if self.completion is not None and events:
            events = self.completion(events)
        if not self.transactions:
            events = [e for e in events if not isinstance(e, TransactionEvent)]
        if self.chain.steps and events:
            events = self.chain.apply(events)
        return events


def _completion(store: RowStateStore) -> Completion:
    try:
        from transforms.completion import complete_partial_images
    except ImportError as exc:
        raise ConfigError(
            "complete_partial_images", True, "partial-image completion is not available in this build"
        ) from exc

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

    @property
    def format_id(self) -> str:
        return self.entry.format


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one source message turned into: records, or a dead letter (also a record)."""

    records: list[OutRecord]
    dlq: tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]] | None = None
    error_class: str | None = None


@dataclass
class WorkerState:
    """Health flags shared by the agents and the HTTP endpoints."""

    started: bool = False
    joined: bool = False
    redis_ok: bool = True
    fatal: BaseException | None = None
    last_redis_error: str | None = None
    assigned: set[Any] = field(default_factory=set)

    @property
    def live(self) -> bool:
        return self.fatal is None

    @property
    def ready(self) -> bool:
        return self.started and self.joined and self.redis_ok and self.fatal is None


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
        for index, entry in enumerate(config.topics):
            self.runtimes.append(self._runtime(index, entry, metadata, row_state_factory))
        self._in: dict[tuple[str, str], Any] = {}
        self._out: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

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
        return EntryRuntime(index, entry, pipeline, entry.output_dlq_topic(self.config.topic_prefix))

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
        fmt = runtime.format_id
        counter = self._in.get((message.topic, fmt))
        if counter is None:
            counter = self._in[(message.topic, fmt)] = self.metrics.messages_in.labels(message.topic, fmt)
        counter.inc()
        started = time.perf_counter()
        try:
            records = runtime.pipeline.process(message)
        except StateStoreError:
            raise
        except Exception as exc:
            if runtime.entry.errors is ErrorPolicy.FAIL:
                raise FatalMessageError(
                    f"{type(exc).__name__} at {message.topic}[{message.partition}]@{message.offset} "
                    f"(errors: fail on {runtime.entry.label})"
                ) from exc
            letter = dead_letter(message, exc, runtime.dlq_topic, fmt, self.config.worker.app_id)
            self.metrics.dlq.labels(message.topic, fmt, type(exc).__name__).inc()
            log.warning(
                "dead-letter topic=%s partition=%s offset=%s format=%s error_class=%s field=%s dlq=%s",
                message.topic,
                message.partition,
                message.offset,
                fmt,
                type(exc).__name__,
                getattr(exc, "field", None),
                runtime.dlq_topic,
            )
            log.debug("dead-letter detail: %s", exc)
            return Outcome([], (letter.topic, letter.key, letter.value, letter.headers), type(exc).__name__)
        latency = self._latency.get(fmt)
        if latency is None:
            latency = self._latency[fmt] = self.metrics.decode_seconds.labels(fmt)
        latency.observe(time.perf_counter() - started)
        return Outcome(records)

    def output_topic(self, topic: str) -> str:
        """A valid Kafka topic name: characters outside ``[A-Za-z0-9._-]`` become ``_``
        (as Debezium's topic naming does), at most 249 characters.

        >>> Normalizer.__new__(Normalizer).output_topic("p.$db.t")
        'p._db.t'
        """
        cache = self.__dict__.setdefault("_topics", {})
        safe: str | None = cache.get(topic)
        if safe is None:
            safe = _INVALID_TOPIC_CHARS.sub("_", topic)[:249] or "_"
            if safe in (".", ".."):
                safe = "_"
            if len(cache) < 100_000:
                cache[topic] = safe
        return safe

    def count_out(self, topic: str, fmt: str, n: int) -> None:
        counter = self._out.get((topic, fmt))
        if counter is None:
            counter = self._out[(topic, fmt)] = self.metrics.records_out.labels(topic, fmt)
        counter.inc(n)


@dataclass
class _Pending:
    event: Any
    futures: list[Awaitable[Any]]
    topic: str
    fmt: str
    records: int


class _Acker:
    """Acks stream events in order, each after all its produced records are acknowledged."""

    def __init__(self, stream: Any, normalizer: Normalizer, state: WorkerState, max_inflight: int,
                 on_fatal: Callable[[BaseException], None]) -> None:
        self._stream = stream
        self._normalizer = normalizer
        self._state = state
        self._on_fatal = on_fatal
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_inflight)
        self._task: asyncio.Task[None] | None = None
        self._gauge = normalizer.metrics.inflight

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def push(self, pending: _Pending) -> None:
        self._gauge.inc()
        await self._queue.put(pending)

    async def drain(self) -> None:
        await self._queue.join()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                for fut in pending.futures:
                    await fut
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                message = pending.event.message
                log.critical(
                    "produce failed; stopping without committing topic=%s partition=%s offset=%s error=%r",
                    message.topic, message.partition, message.offset, exc,
                )
                self._on_fatal(exc)
                return
            await self._stream.ack(pending.event)
            if pending.records:
                self._normalizer.count_out(pending.topic, pending.fmt, pending.records)
            self._gauge.dec()
            self._queue.task_done()


def to_message(message: Any) -> Message:
    """A Faust/aiokafka message as a decoder :class:`Message`."""
    headers = message.headers
    if headers is None:
        hdrs: tuple[tuple[str, bytes], ...] = ()
    elif isinstance(headers, Mapping):
        hdrs = tuple((k, v) for k, v in headers.items())
    else:
        hdrs = tuple((k, v) for k, v in headers)
    ts = message.timestamp
    return Message(
        value=message.value,
        key=message.key,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        timestamp_ms=int(ts * 1000) if ts else None,
        headers=hdrs,
    )


async def process_event(
    event: Any,
    normalizer: Normalizer,
    state: WorkerState,
    send: RecordSender,
) -> _Pending:
    """Normalize one stream event and hand its records to the producer (not awaited)."""
    message = to_message(event.message)
    runtime = normalizer.runtime_for(message.topic)
    if runtime is None:
        return _Pending(event, [], message.topic, "", 0)
    cfg = normalizer.config.worker
    delay = cfg.retry_initial_s
    attempt = 0
    while True:
        try:
            outcome = normalizer.process(message, runtime)
            break
        except StateStoreError as exc:
            attempt += 1
            state.redis_ok = False
            state.last_redis_error = str(exc)
            if attempt == 1 or attempt % 10 == 0:
                log.warning(
                    "state store unavailable, pausing topic=%s partition=%s offset=%s attempt=%d retry_in=%.1fs error=%s",
                    message.topic, message.partition, message.offset, attempt, delay, exc,
                )
            await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
            delay = min(delay * 2, cfg.retry_max_s)
    if attempt:
        log.info("state store is back topic=%s partition=%s offset=%s", message.topic, message.partition, message.offset)
    state.redis_ok = True
    futures: list[Awaitable[Any]] = []
    if outcome.dlq is not None:
        topic, key, value, headers = outcome.dlq
        futures.append(await send(topic, key, value, headers))
    for record in outcome.records:
        topic = normalizer.output_topic(record.topic)
        futures.append(await send(topic, record.key_bytes(), record.value_bytes(), record.headers))
    return _Pending(event, futures, message.topic, runtime.format_id, len(outcome.records))


def _faust_settings(config: PipelineConfig, data_dir: Path) -> dict[str, Any]:
    broker = config.broker
    settings: dict[str, Any] = {
        "broker": [f"kafka://{s}" for s in broker.bootstrap_servers],
        "broker_client_id": broker.client_id,
        "broker_session_timeout": broker.session_timeout_s,
        "broker_heartbeat_interval": broker.heartbeat_interval_s,
        "broker_commit_interval": config.worker.commit_interval_s,
        "broker_rebalance_timeout": max(broker.session_timeout_s * 2, 10.0),
        "producer_acks": -1,
        "producer_linger_ms": 5,
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
    if broker.security_protocol.value != "PLAINTEXT":
        import faust

        password = broker.sasl_password.get_secret_value() if broker.sasl_password else None
        ssl_context = None
        if broker.security_protocol.value in ("SSL", "SASL_SSL"):
            import ssl

            ssl_context = ssl.create_default_context(cafile=str(broker.ssl_cafile) if broker.ssl_cafile else None)
            if broker.ssl_certfile:
                ssl_context.load_cert_chain(
                    str(broker.ssl_certfile),
                    str(broker.ssl_keyfile) if broker.ssl_keyfile else None,
                    broker.ssl_password.get_secret_value() if broker.ssl_password else None,
                )
        if broker.security_protocol.value == "SSL":
            settings["broker_credentials"] = faust.SSLCredentials(ssl_context)
        else:
            settings["broker_credentials"] = faust.SASLCredentials(
                username=broker.sasl_username,
                password=password,
                ssl_context=ssl_context,
                mechanism=broker.sasl_mechanism.value if broker.sasl_mechanism else "PLAIN",
            )
    return settings


def create_app(
    config: PipelineConfig,
    *,
    normalizer: Normalizer | None = None,
    state: WorkerState | None = None,
    sender: RecordSender | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
    data_dir: Path | None = None,
) -> Any:
    """Build the Faust app (agents, web endpoints, rebalance hooks) for ``config``.

    Without ``normalizer``, Redis-backed stores are created from ``config.redis``. ``sender``
    replaces the Faust producer (tests); ``on_fatal`` is called when the worker must stop.
    """
    import faust

    quiet_library_loggers(logging.getLevelName(config.worker.log_level))
    state = state if state is not None else WorkerState()
    row_stores: list[Any] = []
    meta_store: Any = None
    if normalizer is None:
        normalizer, meta_store, row_stores = _redis_normalizer(config)
    metrics = normalizer.metrics
    ddir = data_dir or config.worker.data_dir or Path(tempfile.mkdtemp(prefix="cdcnorm-faust-"))
    app = faust.App(config.worker.app_id, **_faust_settings(config, ddir))
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
            # The failed message is never acked: do not let shutdown wait for it.
            app.conf.stream_wait_empty = False
            fatal_cb(exc)

    async def producer_send(
        topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        producer = app.producer
        result: Awaitable[Any] = await producer.send(topic, key, value, None, None, list(headers) or None)
        return result

    send: RecordSender = sender if sender is not None else producer_send

    for index, entry in enumerate(config.topics):
        if entry.name is not None:
            channel = app.topic(entry.name, key_type=bytes, value_type=bytes,
                                key_serializer="raw", value_serializer="raw")
        else:
            channel = app.topic(pattern=entry.pattern, key_type=bytes, value_type=bytes,
                                key_serializer="raw", value_serializer="raw")

        async def normalize(stream: Any) -> None:
            if sender is None:
                await app.maybe_start_producer()
            manual = stream.noack()
            acker = _Acker(manual, normalizer, state, config.worker.max_inflight, fatal)
            acker.start()
            try:
                async for event in manual.events():
                    try:
                        pending = await process_event(event, normalizer, state, send)
                    except FatalMessageError as exc:
                        m = event.message
                        log.critical(
                            "stopping: message failed under errors=fail topic=%s partition=%s offset=%s "
                            "error_class=%s; the offset is not committed",
                            m.topic, m.partition, m.offset, type(exc.__cause__).__name__,
                        )
                        log.critical("failure detail: %s", exc.__cause__)
                        await acker.drain()
                        fatal(exc)
                        await asyncio.Event().wait()
                        return
                    await acker.push(pending)
                    _update_lag(app, metrics, event.message)
            finally:
                await acker.stop()

        app.agent(channel, name=f"cdcnorm.normalize.{index}", concurrency=1)(normalize)

    async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        state.joined = True
        state.assigned = set(assigned)
        for store in row_stores:
            store.clear_cache()
        log.info("partitions assigned count=%d", len(assigned))

    app.on_partitions_assigned.connect(_assigned)  # type: ignore[arg-type]

    async def _started() -> None:
        state.started = True

    app.task(_started)

    if config.web.enabled:
        _install_pages(app, state, metrics, meta_store)
    return app


def _update_lag(app: Any, metrics: WorkerMetrics, message: Any) -> None:
    try:
        tp = message.tp
        high = app.consumer.highwater(tp)
    except Exception:
        return
    if high is not None:
        metrics.consumer_lag.labels(message.topic, str(message.partition)).set(max(0, high - message.offset - 1))


def _redis_normalizer(config: PipelineConfig) -> tuple[Normalizer, Any, list[Any]]:
    from service.state import RedisMetadataStore, RedisRowStateStore, redis_client

    metrics = WorkerMetrics()
    rc = config.redis
    client = redis_client(rc.url, rc.password.get_secret_value() if rc.password else None, rc.socket_timeout_s)
    meta = RedisMetadataStore(client, rc.key_prefix, rc.metadata_cache_ttl_s, on_error=metrics.redis_error)
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

    if web_port is not None:
        config = config.model_copy(update={"web": config.web.model_copy(update={"port": web_port})})
    level = config.worker.log_level
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    state = WorkerState()

    def stop_process(exc: BaseException) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    app = create_app(config, state=state, on_fatal=stop_process)
    worker = faust.Worker(app, loglevel=level.lower(), quiet=True, redirect_stdouts=False)
    quiet_library_loggers(logging.getLevelName(level))
    log.info(
        "worker starting app_id=%s brokers=%s topics=%d web_port=%s",
        config.worker.app_id, config.broker.bootstrap, len(config.topics), config.web.port,
    )
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()
    if state.fatal is not None:
        log.critical("worker stopped after a fatal error: %s", state.fatal)
        return 3
    return 0
