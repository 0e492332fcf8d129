"""A Faust transport whose consumer hands whole fetched batches to the worker.

Faust's own consumer loop (``Consumer._drain_messages``) turns every fetched record into a
``Message``, runs ``wait_first(callback(message), suspend_flow.wait())`` for it (two tasks per
message), routes it through the conductor into a stream queue and on into an agent as an
``Event``; acks are then tracked per message. That machinery cost ~16x the work of a bare aiokafka
loop here (``bench/SERVICE.md``). :class:`BatchConsumer` keeps everything else of Faust's
aiokafka consumer (the consumer thread, group membership, rebalance callbacks, seeking to the
committed offsets, flow control, the commit timer, the livelock detector) and replaces only:

* the drain loop: each fetched record map goes to the app's :class:`BatchHandler` as one call;
* commits: the offsets come from :meth:`BatchHandler.committable` (source offsets whose output
  the broker acknowledged) instead of Faust's per-message ack lists;
* ``wait_empty`` (called on stop and before partitions are revoked): waits for the handler's
  in-flight output to be acknowledged, then commits.

:class:`BatchApp` is a :class:`faust.App` that uses this transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from time import monotonic
from typing import Any, Protocol, cast

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TransportT
from mode import Service, ServiceT

__all__ = ["BatchApp", "BatchConsumer", "BatchHandler", "BatchTransport"]


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
                generation = app.consumer_generation_id
                records, active = await self._wait_next_records(1.0)
                if not records or self.should_stop:
                    continue
                if not self.flow_active or app.consumer_generation_id != generation:
                    # fetched before a rebalance: these partitions are read again from the
                    # committed offsets after the assignment
                    continue
                if active is not None:
                    records = {tp: recs for tp, recs in records.items() if tp in active}
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


class BatchTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`BatchConsumer`."""

    Consumer = BatchConsumer


class BatchApp(faust.App):
    """A Faust app on :class:`BatchTransport`; set :attr:`batch_handler` before it starts."""

    batch_handler: BatchHandler | None = None

    def _new_transport(self) -> TransportT:
        return BatchTransport(self.conf.broker_consumer, self)
