"""Consumer lag on Apache Kafka: the worker's ``cdcnorm_consumer_lag`` and the lag KEDA scales on.

Kafka reports a partition's high watermark as its last offset + 1, so lag is exact there (Tansu
reports the base offset of the last record batch + 1 and under-reports it; nothing of ours
decides "fully read" from watermarks). Checked on a real Kafka, whatever CDCNORM_TEST_BROKER says:

* the group lag as KEDA's kafka scaler computes it (per partition: the latest offset minus the
  committed one; with ``offsetResetPolicy: earliest`` and nothing committed, the latest offset;
  ``k8s/components/autoscaling/scaledobject.yaml``) equals the number of messages not processed:
  all of them before the worker starts, none once it has committed, and exactly the ones produced
  while it is stopped;
* the worker's ``cdcnorm_consumer_lag`` (high watermark minus the next offset to process, set with
  every processed batch from the fetch's watermark, and every 10 s from the broker's, where
  fetched records not processed yet count as lag: :mod:`service.lag`), scraped again and again
  while a backlog of :data:`BACKLOG` messages is processed in batches of 100: at every scrape, lag
  plus the messages counted in equals the backlog, and it ends at 0.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from service.local import create_topics, wait_for
from tests.service.harness import WorkerProcess
from tests.service.test_integration import base_config, canal, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BACKLOG = 20_000
LATER = 700


def keda_lag(bootstrap: str, group: str, topic: str) -> int:
    """The group's lag on ``topic`` as KEDA's kafka scaler computes it (offsetResetPolicy earliest,
    excludePersistentLag off): the sum over partitions of latest offset minus committed offset, or
    of the latest offset where the group committed nothing."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        deadline = time.monotonic() + 60
        while True:  # a new broker's group coordinator (the __consumer_offsets topic) may not be up yet
            try:
                committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
                break
            except KafkaException as exc:
                retriable = exc.args[0].code() in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                   KafkaError.COORDINATOR_NOT_AVAILABLE)
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        total = 0
        for tp in committed:
            _, latest = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            total += latest if tp.offset < 0 else latest - tp.offset
        return total
    finally:
        consumer.close()


def _messages(first: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(None, canal("INSERT", [{"id": str(i), "name": f"n{i}", "email": None}], es=i))
            for i in range(first, first + count)]


def _lag_and_in(worker: WorkerProcess, topic: str) -> tuple[float | None, float]:
    lag: float | None = None
    seen = 0.0
    for (name, labels), value in worker.metrics().items():
        d = dict(labels)
        if name == "cdcnorm_consumer_lag" and d.get("topic") == topic:
            lag = (lag or 0.0) + value
        elif name == "cdcnorm_messages_in_total" and d.get("topic") == topic:
            seen += value
    return lag, seen


def test_lag_on_kafka_is_exact_for_the_worker_metric_and_for_keda(
    apache_kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = apache_kafka_bootstrap
    prefix = f"lag{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    group = f"{prefix}-group"
    create_topics(bootstrap, [source], partitions=1)
    for start in range(0, BACKLOG, 1000):  # many produce batches: a per-batch watermark would show
        produce(bootstrap, source, _messages(start, 1000), partition=0)
    assert keda_lag(bootstrap, group, source) == BACKLOG

    config: dict[str, Any] = base_config(bootstrap, redis_url, redis_prefix, prefix,
                                         [{"name": source, "format": "canal-json"}])
    config["worker"] |= {"max_inflight": 200}  # fetched batches of 100 records: many lag updates
    worker = WorkerProcess(config, tmp_path / "w1")
    samples: list[tuple[float, float]] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert worker.process.running, worker.process.log_tail()
            try:
                lag, seen = _lag_and_in(worker, source)
            except OSError:
                time.sleep(0.02)
                continue
            if lag is not None:
                samples.append((lag, seen))
                if seen >= BACKLOG:
                    break
            time.sleep(0.01)
        worker.wait_processed(source, BACKLOG)
        mid = [(lag, seen) for lag, seen in samples if 0 < seen < BACKLOG]
        print(f"\n{len(samples)} scrapes, {len(mid)} mid-stream; first {samples[:3]}, last {samples[-1:]}")
        wrong = [(lag, seen) for lag, seen in samples if lag + seen != BACKLOG]
        assert not wrong, f"lag + messages in != {BACKLOG} at {len(wrong)} of {len(samples)} scrapes: {wrong[:5]}"
        assert mid, "no scrape landed while the backlog was being processed"
        assert _lag_and_in(worker, source) == (0.0, float(BACKLOG))
        wait_for(lambda: keda_lag(bootstrap, group, source) == 0, 30, "KEDA lag 0 after the commit", 0.5)
    finally:
        worker.stop()

    produce(bootstrap, source, _messages(BACKLOG, LATER), partition=0)  # while no worker runs
    assert keda_lag(bootstrap, group, source) == LATER
