"""The worker's probes and lag without a broker: the consumer lag per owned partition (service.lag,
cdcnorm_consumer_lag), ``joined`` across a rebalance, the startup report, and the consumer-thread
read of watermarks and positions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from faust.types import TP

from service.app import create_app
from service.batches import BatchProcessor
from service.health import health_report, startup_report
from service.lag import LagOffsets
from service.output import BatchedOutput
from service.worker_types import WorkerState
from tests.service.test_agent import CANAL_INSERT, FakeProducer, config, normalizer, records

TP0, TP1 = TP("src.canal", 0), TP("src.canal", 1)


def lag_series(processor: BatchProcessor) -> dict[tuple[str, str], float]:
    """The cdcnorm_consumer_lag series in the worker's exposition, by (topic, partition)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = processor.normalizer.metrics.render().decode()
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "cdcnorm_consumer_lag"
    }


def reader(offsets: LagOffsets) -> Any:
    async def read(owned: Iterable[Any]) -> LagOffsets:
        return {tp: offsets[tp] for tp in owned if tp in offsets}

    return read


# ----------------------------------------------------------------------------- lag, rebalances


def test_lag_is_set_per_owned_partition_and_removed_on_revoke_and_stop() -> None:
    cfg = config()
    state = WorkerState(started=True)
    app = create_app(cfg, normalizer=normalizer(cfg), producer=FakeProducer(), state=state)
    processor: BatchProcessor = app.cdcnorm_processor

    async def run() -> None:
        assert not startup_report(state)["started"] and startup_report(state)["reason"] == "joining the consumer group"
        await app.on_partitions_revoked.send(set())  # the first join revokes nothing
        await app.on_partitions_assigned.send({TP0, TP1})
        assert state.joined and state.ready and startup_report(state)["started"]
        # nothing fetched yet: next offset to process is the consumer's position
        await processor.refresh_lag(reader({TP0: (10, 4), TP1: (7, 7)}))
        assert lag_series(processor) == {("src.canal", "0"): 6.0, ("src.canal", "1"): 0.0}

        await app.on_partitions_revoked.send({TP0, TP1})  # a rebalance begins
        assert lag_series(processor) == {}, "a revoked partition's series must go (another replica owns it now)"
        assert not state.joined and not state.ready and state.assigned == set()
        assert "joined" in health_report(state) and health_report(state)["joined"] is False
        await processor.refresh_lag(reader({TP0: (10, 4)}))  # while not joined: nothing
        assert lag_series(processor) == {}

        await app.on_partitions_assigned.send({TP1})
        assert state.joined and state.assigned == {TP1}
        await processor.refresh_lag(reader({TP0: (10, 4), TP1: (9, 7)}))
        assert lag_series(processor) == {("src.canal", "1"): 2.0}, "only owned partitions have a series"

        await app.on_before_shutdown.send()  # the stop: no series, not joined
        assert lag_series(processor) == {} and not state.joined

    asyncio.run(run())


def test_lag_counts_fetched_records_not_processed_and_is_refreshed_without_traffic() -> None:
    """The lag of a partition is its high watermark minus the next offset to process: set by each
    processed batch (the consumer's last fetch) and by the refresh from the broker, which goes on
    while nothing flows: records produced while the consumer does not fetch show as lag."""
    cfg = config()
    producer = FakeProducer()
    highs = {TP0: 3}
    state = WorkerState(started=True, joined=True)
    processor = BatchProcessor(normalizer(cfg), state, BatchedOutput(producer), max_inflight=100,
                               on_fatal=lambda exc: None, highwater=highs.get)

    async def run() -> None:
        processor.assigned({TP0})
        await processor.process({TP0: records("src.canal", 0, [(None, CANAL_INSERT)] * 3)})
        assert lag_series(processor) == {("src.canal", "0"): 0.0}
        await processor.wait_sent()
        producer.ack()
        await processor.drain()

        # 50 more records arrive; the consumer's position stays at 3 (it stopped fetching)
        await processor.refresh_lag(reader({TP0: (53, 3)}))
        assert lag_series(processor) == {("src.canal", "0"): 50.0}
        assert processor.lag.unfetched() == 50

        # the consumer fetched 10 of them (position 13) and the processor holds them, not processed
        batch = records("src.canal", 0, [(None, CANAL_INSERT)] * 10, first=3)
        processor.lag.fetched(TP0, batch[0].offset)
        await processor.refresh_lag(reader({TP0: (53, 13)}))
        assert lag_series(processor) == {("src.canal", "0"): 50.0}, "fetched, not processed: still lag"
        assert processor.lag.unfetched() == 40  # not fetched yet
        highs[TP0] = 53
        await processor.process({TP0: batch})
        assert lag_series(processor) == {("src.canal", "0"): 40.0}
        await processor.wait_sent()
        producer.ack()
        await processor.drain()
        await processor.stop()

    asyncio.run(run())


def test_a_refresh_read_across_a_rebalance_is_not_applied() -> None:
    cfg = config()
    state = WorkerState(started=True, joined=True)
    processor = BatchProcessor(normalizer(cfg), state, BatchedOutput(FakeProducer()), max_inflight=100,
                               on_fatal=lambda exc: None)

    async def run() -> None:
        processor.assigned({TP0})
        release = asyncio.Event()

        async def slow(owned: Iterable[Any]) -> LagOffsets:
            await release.wait()
            return {TP0: (100, 0)}

        refresh = asyncio.ensure_future(processor.refresh_lag(slow))
        await asyncio.sleep(0)
        processor.revoked({TP0})
        processor.assigned({TP0})  # the same partition again, maybe from another position
        release.set()
        await refresh
        assert lag_series(processor) == {}

        async def failing(owned: Iterable[Any]) -> LagOffsets:
            raise TimeoutError("no answer")

        await processor.refresh_lag(reader({TP0: (100, 0)}))
        await processor.refresh_lag(failing)  # the series keep their values
        assert lag_series(processor) == {("src.canal", "0"): 100.0}
        await processor.stop()

    asyncio.run(run())


def test_lag_offsets_reads_watermarks_from_the_broker_and_positions_from_the_subscription() -> None:
    """``service.transport._lag_offsets`` on aiokafka's own subscription state: the position of an
    assigned partition with one, None while it awaits its reset or when it is not assigned."""
    from aiokafka.consumer.subscription_state import SubscriptionState
    from aiokafka.structs import TopicPartition

    from service.transport import _lag_offsets

    class Consumer:
        def __init__(self) -> None:
            self._subscription = SubscriptionState()
            self.asked: list[Any] = []

        async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
            self.asked = list(partitions)
            return {TopicPartition(tp.topic, tp.partition): 100 + tp.partition for tp in partitions}

    async def scenario() -> None:
        consumer = Consumer()
        subs = consumer._subscription
        subs.subscribe({"src"})
        subs.assign_from_subscribed({TopicPartition("src", 0), TopicPartition("src", 1)})
        subs.subscription.assignment.state_value(TopicPartition("src", 0)).reset_to(40)
        wanted = [TP("src", 0), TP("src", 1), TP("src", 2)]
        assert await _lag_offsets(consumer, wanted, 5.0) == {
            TP("src", 0): (100, 40), TP("src", 1): (101, None), TP("src", 2): (102, None)
        }
        assert consumer.asked == wanted
        assert await _lag_offsets(consumer, [], 5.0) == {}

    asyncio.run(scenario())
