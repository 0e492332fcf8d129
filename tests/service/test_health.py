"""The worker's probes and lag without a broker: liveness from progress (service.health.Progress),
the consumer lag per owned partition (service.lag, cdcnorm_consumer_lag), ``joined`` across a
rebalance, the startup report, and the consumer-thread read of watermarks and positions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from faust.types import TP

from service.app import create_app
from service.batches import BatchProcessor
from service.config import parse_config
from service.health import Progress, health_report, liveness_report, startup_report
from service.lag import LagOffsets
from service.output import BatchedOutput
from service.worker_types import WorkerState
from tests.clock import Clock
from tests.service.test_agent import CANAL_INSERT, FakeProducer, config, normalizer, records

STALL = 60.0
TP0, TP1 = TP("src.canal", 0), TP("src.canal", 1)


@pytest.fixture
def progress(clock: Clock) -> Progress:
    return Progress(STALL, clock=clock)


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


# ----------------------------------------------------------------------------- liveness


def test_an_idle_worker_is_alive_however_long_nothing_arrives(progress: Progress, clock: Clock) -> None:
    progress.observe_lag(0)
    clock.now += 10 * STALL
    progress.observe_lag(None)  # unknown: nothing owned, or the broker did not answer
    clock.now += 10 * STALL
    assert progress.stalled() is None
    assert progress.seconds_since_progress() == 0.0
    state = WorkerState(progress=progress)
    assert state.live and liveness_report(state)["live"]


def test_lag_without_progress_for_longer_than_the_stall_fails_liveness(progress: Progress, clock: Clock) -> None:
    clock.now += 10 * STALL  # idle before: the stall clock starts when the lag appears, not before
    progress.observe_lag(1200)
    clock.now += STALL - 1
    assert progress.stalled() is None
    clock.now += 2
    assert progress.seconds_since_progress() == pytest.approx(STALL + 1)
    state = WorkerState(progress=progress)
    assert not state.live
    report = liveness_report(state)
    assert report["live"] is False and report["lag"] == 1200 and report["seconds_since_progress"] == 61.0
    assert report["reason"] == "no progress for 61s with lag 1200 (worker.liveness_stall_seconds: 60)"
    assert health_report(state)["live"] is False  # /readyz's body says so too

    progress.progressed()  # a message processed: alive again, the clock restarts
    assert state.live and progress.seconds_since_progress() == 0.0
    clock.now += STALL + 1
    assert not state.live  # still lag and nothing since


def test_fetched_messages_never_acknowledged_fail_liveness(progress: Progress, clock: Clock) -> None:
    progress.observe_lag(0)
    progress.observe_unacked(500)
    clock.now += STALL + 5
    reason = progress.stalled()
    assert reason == "no progress for 65s with 500 fetched messages not acknowledged (worker.liveness_stall_seconds: 60)"
    progress.progressed()
    progress.observe_unacked(0)  # acknowledged: nothing to do
    clock.now += 10 * STALL
    assert progress.stalled() is None


def test_a_worker_retrying_through_a_redis_outage_stays_alive_but_shows_no_progress(
    progress: Progress, clock: Clock
) -> None:
    progress.observe_unacked(10)
    for _ in range(10):  # attempts every 30 s (worker.retry_max_s), each one coming back failed
        clock.now += 30
        progress.retried()
    assert progress.stalled() is None
    assert progress.seconds_since_progress() == pytest.approx(300)
    clock.now += STALL + 1  # an attempt that hangs
    assert progress.stalled() is not None


def test_a_fatal_error_is_not_live_with_its_reason() -> None:
    state = WorkerState(fatal=RuntimeError("broker refused a batch"))
    report = liveness_report(state)
    assert not state.live and report["reason"] == "fatal error: RuntimeError: broker refused a batch"


def test_the_stall_limit_is_a_worker_key_with_a_default_and_a_named_error() -> None:
    from transforms.errors import ConfigError

    base = {"topic_prefix": "p", "topics": [{"name": "src", "format": "canal-json"}]}
    assert parse_config(base).worker.liveness_stall_seconds == 600
    for worker, key, reason in (
        ({"liveness_stall_seconds": 0}, "worker.liveness_stall_seconds", "greater than 0"),
        ({"liveness_stall_seconds": 20}, "worker.liveness_stall_seconds", "must be above retry_max_s (30)"),
        ({"retry_max_s": 900}, "worker.retry_max_s", "must be below liveness_stall_seconds (600)"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_config({**base, "worker": worker})
        assert info.value.key == key and reason in info.value.reason


def test_the_processor_reports_unacknowledged_messages_and_progress(clock: Clock) -> None:
    """Through the batch processor: fetched messages whose output the broker never acknowledges
    stall the worker after the configured time; the acknowledgement is progress; the gauge
    cdcnorm_seconds_since_progress shows the clock."""
    cfg = config()
    cfg = cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"liveness_stall_seconds": STALL})})
    producer = FakeProducer()
    state = WorkerState(started=True, joined=True, progress=Progress(clock=clock))
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer, state=state)
    processor: BatchProcessor = app.cdcnorm_processor
    metrics = processor.normalizer.metrics
    assert state.progress.stall_seconds == STALL  # from worker.liveness_stall_seconds

    async def run() -> None:
        await processor.process({TP0: records("src.canal", 0, [(None, CANAL_INSERT)] * 3)})
        await processor.wait_sent()
        assert state.progress.unacked == 3
        clock.now += STALL + 1
        assert not state.live
        assert "3 fetched messages not acknowledged" in liveness_report(state)["reason"]
        page = metrics.render().decode()
        assert "cdcnorm_seconds_since_progress 61.0" in page
        producer.ack()
        await processor.drain()
        assert state.live and state.progress.unacked == 0
        assert "cdcnorm_seconds_since_progress 0.0" in metrics.render().decode()
        await processor.stop()

    asyncio.run(run())


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
        assert state.progress.lag == 6

        await app.on_partitions_revoked.send({TP0, TP1})  # a rebalance begins
        assert lag_series(processor) == {}, "a revoked partition's series must go (another replica owns it now)"
        assert not state.joined and not state.ready and state.assigned == set()
        assert state.progress.lag is None
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


def test_lag_counts_fetched_records_not_processed_and_is_refreshed_without_traffic(clock: Clock) -> None:
    """The lag of a partition is its high watermark minus the next offset to process: set by each
    processed batch (the consumer's last fetch) and by the refresh from the broker, which goes on
    while nothing flows; records produced while the consumer does not fetch show as lag and, with
    no progress, stall the worker."""
    cfg = config()
    producer = FakeProducer()
    highs = {TP0: 3}
    state = WorkerState(started=True, joined=True, progress=Progress(STALL, clock=clock))
    processor = BatchProcessor(normalizer(cfg), state, BatchedOutput(producer), max_inflight=100,
                               on_fatal=lambda exc: None, highwater=highs.get)

    async def run() -> None:
        processor.assigned({TP0})
        await processor.process({TP0: records("src.canal", 0, [(None, CANAL_INSERT)] * 3)})
        assert lag_series(processor) == {("src.canal", "0"): 0.0}
        await processor.wait_sent()
        producer.ack()
        await processor.drain()
        assert state.progress.seconds_since_progress() == 0.0  # idle

        # 50 more records arrive; the consumer's position stays at 3 (it stopped fetching)
        await processor.refresh_lag(reader({TP0: (53, 3)}))
        assert lag_series(processor) == {("src.canal", "0"): 50.0}
        clock.now += STALL + 1
        await processor.refresh_lag(reader({TP0: (53, 3)}))
        assert not state.live and "lag 50" in liveness_report(state)["reason"]

        # the consumer fetched 10 of them (position 13) and the processor holds them, not processed
        batch = records("src.canal", 0, [(None, CANAL_INSERT)] * 10, first=3)
        processor.lag.fetched(TP0, batch[0].offset)
        await processor.refresh_lag(reader({TP0: (53, 13)}))
        assert lag_series(processor) == {("src.canal", "0"): 50.0}, "fetched, not processed: still lag"
        assert state.progress.lag == 40  # not fetched yet
        highs[TP0] = 53
        await processor.process({TP0: batch})
        assert lag_series(processor) == {("src.canal", "0"): 40.0}
        assert state.live  # processed: progress
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
        assert state.progress.lag == 100
        await processor.refresh_lag(failing)  # unknown while the broker does not answer
        assert state.progress.lag is None and lag_series(processor) == {("src.canal", "0"): 100.0}
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
