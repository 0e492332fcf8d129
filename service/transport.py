"""A Faust transport whose consumer hands whole fetched batches to the worker.

Faust's own consumer loop (``Consumer._drain_messages``) turns every fetched record into a
``Message``, runs ``wait_first(callback(message), suspend_flow.wait())`` for it (two tasks per
message), routes it through the conductor into a stream queue and on into an agent as an
``Event``; acks are then tracked per message. That machinery cost ~16x the work of a bare aiokafka
loop here (``bench/SERVICE.md``). :class:`BatchConsumer` keeps everything else of Faust's
aiokafka consumer (the consumer thread, group membership, rebalance callbacks, seeking to the
committed offsets, flow control, the commit timer, the livelock detector) and replaces only:

* the drain loop: each fetched record map goes to the app's :class:`BatchHandler` as one call;
  a map it does not process (fetched across a rebalance, or of a partition paused meanwhile) is
  read again: the fetch positions of those partitions go back to the first dropped record;
* commits: the offsets come from :meth:`BatchHandler.committable` (source offsets whose output
  the broker acknowledged) instead of Faust's per-message ack lists;
* ``wait_empty`` (called on stop and before partitions are revoked): waits for the handler's
  in-flight output to be acknowledged, then commits.

It adds :meth:`BatchConsumer.lag_offsets`: the high watermarks (from the broker) and positions of
partitions, for the consumer lag (:mod:`service.lag`).

Its producer (:class:`IdempotentProducer`) is idempotent with ``acks=all`` when it is the
output (``worker.output_client: aiokafka``, :attr:`BatchApp.idempotent_producer`): Faust asks
for idempotence only inside transactions, so a batch retried after a broker failure could be
written twice.

:class:`BatchApp` is a :class:`faust.App` that uses this transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from time import monotonic
from typing import Any, Protocol, cast

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TransportT
from mode import Service, ServiceT

from transforms.configfile import BrokerConfig, SecurityProtocol

__all__ = ["BatchApp", "BatchConsumer", "BatchHandler", "BatchTransport", "IdempotentProducer"]


class BatchHandler(Protocol):
    """Processes fetched record batches and says which source offsets may be committed."""

    async def process(self, records: Mapping[TP, Sequence[Any]]) -> None:
        """Normalize and send ``records`` (aiokafka ``ConsumerRecord``s per partition)."""

    async def drain(self) -> None:
        """Wait until every processed record's output is acknowledged (or failed)."""

    def committable(self) -> dict[TP, int]:
        """Next offset to read per partition, for output acknowledged since the last commit."""

    def committed(self, offsets: Mapping[TP, int]) -> None:
        """``offsets`` were committed."""


class BatchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with a batch drain loop and handler-driven commits."""

    @property
    def batch_handler(self) -> BatchHandler | None:
        return cast(BatchApp, self.app).batch_handler

    async def _drain_messages(self, fetcher: ServiceT) -> None:  # pragma: no cover - needs a broker
        handler = self.batch_handler
        if handler is None:
            await super()._drain_messages(fetcher)
            return
        app = self.app
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
        read_offset = self._read_offset
        inbound = app.monitor.stream_inbound_time
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                if not self.flow_active:
                    # A rebalance is in progress. Wait for it here, not inside _wait_next_records,
                    # so the generation taken below is the one the fetch runs in: a fetch made
                    # after the assignment is then not mistaken for one that crossed it.
                    await self.wait(self.can_resume_flow)  # type: ignore[arg-type]
                generation = app.consumer_generation_id
                records, active = await self._wait_next_records(1.0)
                if not records or self.should_stop:
                    continue
                dropped: Mapping[TP, Sequence[Any]] = {}
                if not self.flow_active or app.consumer_generation_id != generation:
                    # The fetch crossed a rebalance (or one started): do not process it while
                    # partitions are being revoked and assigned. Its records were consumed from
                    # the fetcher's positions all the same, so they are rewound below.
                    dropped, records = records, {}
                elif active is not None and any(tp not in active for tp in records):
                    # partitions paused since the fetch began: their records wait too
                    dropped = {tp: recs for tp, recs in records.items() if tp not in active}
                    records = {tp: recs for tp, recs in records.items() if tp in active}
                if dropped:
                    await self._rewind_dropped(dropped)
                if not records:
                    continue
                now = monotonic()
                for tp, recs in records.items():
                    read_offset[tp] = recs[-1].offset
                    inbound[tp] = now
                await handler.process(records)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise

    async def _rewind_dropped(self, dropped: Mapping[TP, Sequence[Any]]) -> None:
        """Make the next fetch of each partition in ``dropped`` start no later than its first
        dropped record.

        Dropping a fetched batch does not undo the fetch: aiokafka moved the partitions'
        positions past those records when it returned them. A fetch that waits across a
        rebalance returns records of the new assignment (aiokafka waits for the assignment and
        discards what it fetched for the old one), read from positions already reset to the
        committed offsets; nothing resets them again, so the next batches, and the next commit,
        would go on past records never processed, for kept and newly assigned partitions alike.
        The same holds for a partition paused while the fetch ran.

        For each partition still assigned, the position becomes min(position, first dropped
        offset), read and set in one synchronous step on the consumer thread's event loop (where
        aiokafka and every Faust seek run), so no fetch, assignment or seek can come in between:

        * it never moves a position forward: a position already rewound (by Faust's seek to the
          committed offsets when the assignment completes, or by a reset) stays where it is;
        * Faust's seek to the committed offsets may still follow and move it forward, to a
          committed offset; that skips nothing, because this worker and its peers commit only
          offsets whose records were processed and their output acknowledged
          (:meth:`BatchHandler.committable`);
        * a partition awaiting a position reset (a new assignment's first position) is left to
          the reset: it starts from the committed offset (or ``auto_offset_reset``), as Faust's
          own ``perform_seek`` would put it. ``perform_seek`` is not used here: aiokafka skips
          partitions without a committed offset there, and it would rewind every partition.

        A record read again is processed again: duplicates are allowed (at-least-once), losses not.
        """
        first = {tp: recs[0].offset for tp, recs in dropped.items() if recs}
        if not first:
            return
        thread = cast(faust_aiokafka.AIOKafkaConsumerThread, self._thread)
        rewound = await thread.call_thread(_rewind_positions, thread._ensure_consumer(), first)
        for tp, (position, offset) in rewound.items():
            self.log.info("fetch dropped across a rebalance or pause: %s[%s] rewound from %s to %s",
                          tp.topic, tp.partition, position, offset)

    async def lag_offsets(self, partitions: Iterable[TP], timeout_s: float) -> dict[TP, tuple[int | None, int | None]]:
        """(high watermark, position) of each of ``partitions``: the watermark asked from the broker
        (ListOffsets, whether records flow or not), the position the consumer's (None while it
        awaits its reset, or for a partition not assigned). Raises when the broker does not answer
        within ``timeout_s``."""
        thread = cast(faust_aiokafka.AIOKafkaConsumerThread, self._thread)
        result: dict[TP, tuple[int | None, int | None]] = await thread.call_thread(
            _lag_offsets, thread._ensure_consumer(), list(partitions), timeout_s
        )
        return result

    async def commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        handler = self.batch_handler
        if handler is None:
            return await super().commit(topics, start_new_transaction)
        if await self.maybe_wait_for_commit_to_finish():
            return False
        self._commit_fut = asyncio.Future(loop=self.loop)
        try:
            offsets = handler.committable()
            if topics is not None:
                offsets = {tp: o for tp, o in offsets.items() if tp in topics or tp.topic in topics}
            if not offsets:
                return False
            did_commit = await self._commit(offsets)
            if did_commit:
                handler.committed(offsets)
                self._committed_offset.update(offsets)
            return did_commit
        finally:
            fut, self._commit_fut = self._commit_fut, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def wait_empty(self) -> None:
        handler = self.batch_handler
        if handler is not None:
            await handler.drain()
            await self.commit()
        await super().wait_empty()


async def _rewind_positions(consumer: Any, first: Mapping[TP, int]) -> dict[TP, tuple[int, int]]:
    """On the consumer thread's loop: for each assigned partition with a valid position beyond
    ``first[tp]``, seek to ``first[tp]``. No await: the read and the seek are one step. Returns
    ``{tp: (old position, new position)}`` for the partitions it moved."""
    # aiokafka has no synchronous position accessor: its subscription state is read directly
    # (Faust's driver uses the same internals, e.g. ``_fetcher._subscriptions``).
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    if assignment is None or not assignment.active:
        return {}
    moved: dict[TP, tuple[int, int]] = {}
    for tp, offset in first.items():
        state = assignment.state_value(tp)
        if state is None or not state.has_valid_position:  # not ours, or awaiting its reset
            continue
        position = state.position
        if position > offset:
            consumer.seek(tp, offset)  # also discards what the fetcher buffered for tp
            moved[tp] = (position, offset)
    return moved


async def _lag_offsets(consumer: Any, partitions: list[TP], timeout_s: float) -> dict[TP, tuple[int | None, int | None]]:
    """On the consumer thread's loop: :meth:`BatchConsumer.lag_offsets`. The positions are read
    after the watermarks, from aiokafka's subscription state (as :func:`_rewind_positions` does), so
    a position is never older than its watermark."""
    if not partitions:
        return {}
    highs: Mapping[Any, int] = await asyncio.wait_for(consumer.end_offsets(partitions), timeout_s)
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    out: dict[TP, tuple[int | None, int | None]] = {}
    for tp in partitions:
        state = assignment.state_value(tp) if assignment is not None and assignment.active else None
        position = state.position if state is not None and state.has_valid_position else None
        out[tp] = (highs.get(tp), position)
    return out


class IdempotentProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer, idempotent and with ``acks=all`` outside transactions too when
    the app says so (:attr:`BatchApp.idempotent_producer`).

    Faust sets ``enable_idempotence`` only for its exactly-once transactions. Without it a
    batch whose acknowledgement was lost (a leader killed after it wrote, a request timing out)
    is sent again and written twice; with it the broker drops the copy (producer id and
    sequence number), as it does for librdkafka's output (:mod:`service.rdkafka`). Faust starts
    this producer even when it sends nothing, so it asks for a producer id only when it is the
    output (some Kafka-protocol brokers, Tansu among them, refuse aiokafka's request).
    """

    def _settings_extra(self) -> Mapping[str, Any]:
        extra = dict(super()._settings_extra())
        if getattr(self.app, "idempotent_producer", False):
            extra.update({"acks": "all", "enable_idempotence": True})
        return extra


class BatchTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`BatchConsumer` and :class:`IdempotentProducer`."""

    Consumer = BatchConsumer
    Producer = IdempotentProducer


class BatchApp(faust.App):
    """A Faust app on :class:`BatchTransport`; set :attr:`batch_handler` before it starts."""

    batch_handler: BatchHandler | None = None
    idempotent_producer: bool = False
    """Whether Faust's producer is idempotent with ``acks=all`` (:class:`IdempotentProducer`):
    set when it produces the output; set it before the producer starts."""

    def _new_transport(self) -> TransportT:
        return BatchTransport(self.conf.broker_consumer, self)


def faust_credentials(broker: BrokerConfig) -> Any:
    """Faust's ``broker_credentials`` for ``broker``, or None for PLAINTEXT.

    Faust turns them into the same aiokafka arguments as :meth:`BrokerConfig.aiokafka_auth`
    (``faust.transport.drivers.aiokafka.credentials_to_aiokafka_auth``).
    """
    if broker.security_protocol is SecurityProtocol.PLAINTEXT:
        return None
    context = broker.ssl_context()
    if not broker.uses_sasl:
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(
        username=broker.sasl_username,
        password=broker.sasl_password.get_secret_value() if broker.sasl_password else None,
        ssl_context=context,
        mechanism=broker.sasl_mechanism.value if broker.sasl_mechanism else None,
    )
