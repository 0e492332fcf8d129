"""Scripted micro-batches for sink tests: the runner in this process on one local Spark session,
against a real broker (one per test; Apache Kafka, :mod:`tests.brokers`), fed batch by batch from a
:class:`tests.sink.history.History`: each batch's records are produced, then one micro-batch
reads them all, so the batch boundaries are exactly the history's. The group's committed offsets
are read back from the broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sink.iceberg as ice
from service.local import LocalBroker, create_topics
from sink.config import SinkConfig
from sink.runner import MicroBatchSink
from sink.spark_session import build_spark
from sink.table_settings import TableNames
from tests.brokers import start_test_broker
from tests.catalogs import start_test_catalog
from tests.sink.history import History
from transforms.envelope import EmitOptions, emit

TOPIC = "cdcnorm.shop.orders"
TOPICS = ("cdcnorm.shop.orders", "cdcnorm.shop.events", "cdcnorm.shop.users")


class ScriptedBroker:
    """A broker (:mod:`tests.brokers`) whose topics receive a history's batches on demand (one
    partition each)."""

    def __init__(self, broker: LocalBroker) -> None:
        from confluent_kafka import Producer

        self.broker = broker
        self.address = broker.address
        create_topics(self.address, TOPICS, partitions=1)
        self.producer = Producer({"bootstrap.servers": self.address, "linger.ms": 1})
        self.ends: dict[tuple[str, int], int] = {}
        self.sinks: list[MicroBatchSink] = []  # closed with the broker

    def feed(self, history: History, batch: int) -> int:
        """Produce the records of ``history.batches[batch]``; returns how many."""
        records = emit(history.batches[batch], EmitOptions(prefix="cdcnorm"))
        for rec in records:
            self.producer.produce(rec.topic, key=rec.key_bytes(), value=rec.value_bytes(), partition=0)
            self.ends[(rec.topic, 0)] = self.ends.get((rec.topic, 0), 0) + 1
        assert self.producer.flush(10) == 0
        return len(records)

    def stop(self, sink: MicroBatchSink) -> None:
        """Close ``sink`` (it leaves its group) before the test starts another."""
        sink.close()
        self.sinks.remove(sink)

    def rewind(self, sink: MicroBatchSink, group: str) -> None:
        """Stop ``sink`` and move its ``group``'s offsets back to the start of every topic: the
        next sink of the group replays everything."""
        from confluent_kafka import Consumer, TopicPartition

        self.stop(sink)
        reset = Consumer({"bootstrap.servers": self.address, "group.id": group})
        reset.commit(offsets=[TopicPartition(t, 0, 0) for t in TOPICS], asynchronous=False)
        reset.close()

    def close(self) -> None:
        """Destroy the producer before its broker stops (else librdkafka logs every failed reconnect)."""
        self.producer.flush(5)
        del self.producer

    def commits(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets of the partitions that have records (an empty
        partition's committed 0, or none, is left out)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.address, "group.id": group})
        try:
            got = consumer.committed([TopicPartition(t, 0) for t in TOPICS], timeout=10)
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset > 0}


_SESSION_CATALOG: dict[str, Any] = {}
"""The ``catalog`` section of the module's Spark session (set by its ``spark`` fixture): the
session holds one catalog, so every scripted config of the module writes through it."""


def stored_id(sink: MicroBatchSink, table: str, db: str = "shop") -> str:
    """The catalog id of the scripted source table ``db.table`` as ``sink`` names it
    (``sink.namespace``, ``name`` templates)."""
    assert sink.tables is not None
    names = TableNames(sink.config.tables, sink.config.namespace)
    return sink.tables.table_id(names.target(db, None, table, f"cdcnorm.{db}.{table}"))


def scripted_config(**sink: Any) -> SinkConfig:
    """A sink config on the module's Spark session's catalog (a test keeps apart by ``namespace``)."""
    assert _SESSION_CATALOG, "the spark fixture (scripted_spark) sets the module's catalog"
    return SinkConfig.from_section({
        "topics": list(TOPICS),
        "trigger_interval_seconds": 0.2,
        "poll_timeout_seconds": 0.5,
        "catalog": _SESSION_CATALOG,
        "maintenance": {"enabled": False},
        "group_id": f"scripted-{sink.get('namespace', 'sink')}",
        **sink,
    })


@pytest.fixture(scope="module", name="spark")
def scripted_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's Spark session, writing through its own catalog (the REST catalog server, or a
    hadoop folder: :mod:`tests.catalogs`)."""
    catalog = start_test_catalog(tmp_path_factory.mktemp("catalog"))
    _SESSION_CATALOG.clear()
    _SESSION_CATALOG.update(catalog.section("dk"))
    session = build_spark(scripted_config())
    try:
        yield session
    finally:
        session.stop()
        catalog.stop()
        _SESSION_CATALOG.clear()


@pytest.fixture(name="broker")
def scripted_broker(tmp_path: Path) -> Iterator[ScriptedBroker]:
    proc = start_test_broker(tmp_path / "broker")
    broker = ScriptedBroker(proc)
    try:
        yield broker
    finally:
        for sink in broker.sinks:
            sink.close()
        broker.close()
        proc.stop()


def scripted_sink(spark: Any, config: SinkConfig, broker: ScriptedBroker, compiled: bool = True) -> MicroBatchSink:
    """A sink of ``config`` on the shared Spark session, its consumer joined to the group
    (``compiled``: row deltas committed by the compiled helper, else through py4j steps)."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from sink.plan import Partitions

    sink = MicroBatchSink(config, broker.address, report=lambda r: print(r.line()))
    sink.spark = spark
    sink.tables = ice.IcebergTables(spark, config, compiled_commits=compiled)
    sink.partitions = Partitions(
        Consumer({"bootstrap.servers": broker.address, "group.id": config.group_id, "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"}),
        AdminClient({"bootstrap.servers": broker.address}),
    )
    sink.partitions.subscribe(list(config.topics))
    deadline = time.monotonic() + 30
    while not sink.partitions.assigned() and time.monotonic() < deadline:
        sink.partitions.poll()
        time.sleep(0.05)
    sink.partitions.poll()
    broker.sinks.append(sink)
    assert sink.partitions.assigned(), "the scripted sink did not join its group"
    return sink
