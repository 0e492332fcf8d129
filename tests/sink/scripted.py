"""Scripted micro-batches for sink tests: the runner in this process on one local Spark session,
fed batch by batch from a :class:`tests.sink.history.History` through a stand-in consumer
(:class:`BatchConsumer`), so the batch boundaries are exactly the history's, and the Kafka
offsets the sink commits are recorded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import sink.iceberg as ice
from sink.config import SinkConfig
from sink.runner import MicroBatchSink
from tests.sink.history import History
from transforms.envelope import EmitOptions, emit

TOPIC = "cdcnorm.shop.orders"


@dataclass
class Record:
    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None
    value_: bytes | None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def error(self) -> None:
        return None


class BatchConsumer:
    """Hands out one scripted batch per poll window (then nothing), one partition per topic;
    remembers the committed offsets."""

    def __init__(self) -> None:
        self.pending: list[Record] = []
        self.commits: dict[tuple[str, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.log: list[Record] = []  # every record fed, in order

    def feed(self, history: History, batch: int) -> None:
        for rec in emit(history.batches[batch], EmitOptions(prefix="cdcnorm")):
            offset = self.ends.get((rec.topic, 0), 0)
            record = Record(rec.topic, 0, offset, rec.key_bytes(), rec.value_bytes())
            self.pending.append(record)
            self.log.append(record)
            self.ends[(rec.topic, 0)] = offset + 1

    def restart(self) -> BatchConsumer:
        """The consumer of a new process in the same group: it reads again from the committed offsets."""
        new = BatchConsumer()
        new.commits, new.ends, new.log = dict(self.commits), dict(self.ends), list(self.log)
        new.pending = [r for r in self.log if r.offset_ >= self.commits.get((r.topic_, r.partition_), 0)]
        return new

    def consume(self, num_messages: int, timeout: float) -> list[Record]:
        out, self.pending = self.pending[:num_messages], self.pending[num_messages:]
        return out

    def commit(self, offsets: list[Any], asynchronous: bool = False) -> None:
        for tp in offsets:
            self.commits[(tp.topic, tp.partition)] = tp.offset

    def assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(t, p) for t, p in self.ends]

    def position(self, partitions: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(p.topic, p.partition, self.commits.get((p.topic, p.partition), -1001)) for p in partitions]

    def committed(self, partitions: list[Any], timeout: float | None = None) -> list[Any]:
        return self.position(partitions)

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return 0, self.ends.get((partition.topic, partition.partition), 0)

    def pause(self, partitions: list[Any]) -> None:
        pass


def scripted_config(warehouse: Path, **sink: Any) -> SinkConfig:
    return SinkConfig.from_section({
        "topics": [TOPIC],
        "trigger_interval_seconds": 0.2,
        "poll_timeout_seconds": 0.1,
        "catalog": {"name": "dk", "warehouse": str(warehouse)},
        "maintenance": {"enabled": False},
        **sink,
    })


@pytest.fixture(scope="module", name="spark")
def scripted_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    session = ice.build_spark(scripted_config(tmp_path_factory.mktemp("warehouse")))
    try:
        yield session
    finally:
        session.stop()


def scripted_sink(spark: Any, config: SinkConfig) -> tuple[MicroBatchSink, BatchConsumer]:
    sink = MicroBatchSink(config, "unused:9092", report=lambda r: print(r.line()))
    sink.spark = spark
    sink.tables = ice.IcebergTables(spark, config)
    consumer = BatchConsumer()
    sink.consumer = consumer
    return sink, consumer
