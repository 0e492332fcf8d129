"""The worker's batches: a fetched batch of source messages normalized, sent and acknowledged in order
(:class:`BatchProcessor`: bounded in flight, offsets committable only once everything a message
became is acknowledged, dead letters of refused records), and the retry of a batch through a Redis
outage (:func:`normalize_with_retry`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

from service.dlq import (
    DeadLetter,
    RecordTooLargeError,
    letter_bytes,
    smaller_dead_letters,
)
from service.lag import ConsumerLag, LagOffsets
from service.limits import BATCH_HEADER_BYTES, TopicLimits
from service.output import Output, Record, Refusal, record_wire_bytes
from service.worker_types import (
    BatchRefusedError,
    EntryRuntime,
    FatalMessageError,
    Outcome,
    WorkerState,
    output_record_bytes,
)
from transforms.decoders import Message
from transforms.envelope import OutRecord
from transforms.errors import StateStoreError

if TYPE_CHECKING:
    from service.app import Normalizer

__all__ = ["BatchProcessor", "normalize_with_retry"]

log = logging.getLogger("cdcnorm.worker")


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

    It keeps the worker's stall clock (``state.progress``, the liveness probe) and the consumer lag
    (:attr:`lag`, :class:`service.lag.ConsumerLag`) up to date: the messages fetched whose output
    is not acknowledged yet, each message processed and each batch acknowledged, the partitions
    assigned and revoked (:meth:`assigned`, :meth:`revoked`) and the lag read from the broker
    (:meth:`refresh_lag`).
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
        self.lag = ConsumerLag(metrics.consumer_lag)
        self._progress = state.progress
        self._fetched = 0  # messages of the batch in progress not handed to the shipper yet

    # ------------------------------------------------------------------ processing

    async def process(self, records: Mapping[Any, Sequence[Any]]) -> None:
        """Normalize ``records`` (aiokafka ``ConsumerRecord``s per partition) and send the output."""
        if self.failed is not None:
            await asyncio.Event().wait()  # stopped: wait to be cancelled by the shutdown
        # before any await: a lag refresh that runs meanwhile counts these records as not processed
        fetched = 0
        for tp, batch in records.items():
            if batch:
                self.lag.fetched(tp, batch[0].offset)
                fetched += len(batch)
        self._fetched = fetched
        self._progress.observe_unacked(self._fetched + self._inflight)
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
        finally:
            self._fetched = 0  # handed over, skipped, or never to be processed (a fatal error)
            self._progress.observe_unacked(self._inflight)
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
                    self._processed(tp, batch[-1].offset)
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
        self._processed(tp, done)

    def _seal(self, part: _Part) -> None:
        """Hand the records appended so far, with ``part``'s offsets, to the shipper."""
        output = self.output
        nbytes = output.pending_bytes
        # inflight first, then messages_in, with no await in between: a scrape never sees
        # all messages counted and nothing in flight while a batch is still unacknowledged
        self._inflight += part.messages
        self._fetched -= part.messages
        self._gauge.inc(part.messages)
        self._inflight_bytes += nbytes
        self._bytes_gauge.inc(nbytes)
        for (topic, fmt), n in part.consumed.items():
            self.normalizer.count_in(topic, fmt, n)
        self._to_ship.put_nowait(
            _InFlight(part.offsets, part.messages, part.produced, output.take(), nbytes, sources=part.sources)
        )

    def _processed(self, tp: Any, offset: int) -> None:
        """``tp`` was processed up to ``offset``: progress, and its lag from the consumer's last fetch."""
        self._progress.progressed()
        high: int | None = None
        if self._highwater is not None:
            try:
                high = self._highwater(tp)
            except Exception:
                high = None
        self.lag.processed(tp, offset + 1, high)

    # ------------------------------------------------------------------ ownership, lag

    def assigned(self, partitions: Iterable[Any]) -> None:
        """The consumer group assigned ``partitions`` (the whole assignment)."""
        self.lag.assigned(partitions)
        self._progress.observe_lag(self.lag.unfetched())

    def revoked(self, partitions: Iterable[Any]) -> None:
        """``partitions`` were revoked (a rebalance began): their lag series go."""
        self.lag.revoked(partitions)
        self._progress.observe_lag(self.lag.unfetched())

    async def refresh_lag(self, read: Callable[[frozenset[Any]], Awaitable[LagOffsets]]) -> None:
        """Read the owned partitions' (high watermark, position) with ``read`` (the consumer's
        :meth:`~service.transport.BatchConsumer.lag_offsets`) and set their lag; nothing while the
        consumer is not a member of its group. What was read across an assignment or revocation is
        not applied. When the read fails the records to fetch are unknown until the next one (an
        unreachable broker is not a stall of the worker); the series keep their values."""
        lag = self.lag
        owned, epoch = lag.owned, lag.epoch
        if not self.state.joined or not owned:
            return
        try:
            offsets = await read(owned)
        except Exception as exc:
            log.debug("consumer lag not refreshed error=%r", exc)
            self._progress.observe_lag(None)
            return
        self._progress.observe_lag(lag.refresh(offsets, epoch))

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
            self._progress.progressed()
            self._progress.observe_unacked(self._fetched + self._inflight)
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
                        message, exc, pending[origin], size - 1 if known is None else known, runtime.letters
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
        """Cancel the shipper and the acker and close the output (after :meth:`drain`, at shutdown);
        the lag series go (the partitions are not the worker's any more)."""
        self.lag.clear()
        self._progress.observe_lag(None)
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

    While it retries, ``state.redis_ok`` is false (``/readyz`` says not ready); each failed attempt
    that comes back keeps the worker alive (:meth:`service.health.Progress.retried`), the stall
    clock goes on.
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
            state.progress.retried()  # the attempt came back: waiting out an outage is alive
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
