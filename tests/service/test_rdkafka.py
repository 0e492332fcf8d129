"""The librdkafka output on a real broker: acknowledgements, partitioning, refusals."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException

from service.local import create_topics
from service.output import Refusal, key_partition
from service.rdkafka import RdKafkaOutput, producer_config


def test_producer_config_keeps_the_connection_settings_and_sets_delivery() -> None:
    from service.config import parse_config

    cfg = parse_config({
        "broker": {"bootstrap_servers": ["b:9093"], "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                   "sasl_username": "u", "sasl_password": "pw"},
        "topics": [{"name": "src", "format": "canal-json"}],
    })
    conf = producer_config(cfg.broker.librdkafka(), 2 << 20)
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "u" and conf["sasl.password"] == "pw"
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert conf["partitioner"] == "murmur2_random"  # Java-compatible: same partition for a key
    assert conf["message.max.bytes"] == 2 << 20
    assert "queue.buffering.max.kbytes" not in conf  # librdkafka's default unless a bound is given


def test_producer_buffer_is_sized_from_worker_max_inflight_bytes() -> None:
    """The queue holds the in-flight bound plus two of the largest records, so one always fits."""
    from service.app import output_message_bytes
    from service.config import WorkerConfig

    worker = WorkerConfig(max_inflight_bytes=1 << 20, max_message_bytes=4 << 20)
    conf = producer_config({}, output_message_bytes(worker), worker.max_inflight_bytes)
    assert conf["message.max.bytes"] == (4 << 20) + (256 << 10)
    assert conf["queue.buffering.max.kbytes"] == 1024 + 2 * (4096 + 256)
    assert "batch.size" not in conf  # librdkafka's 1000000
    assert producer_config({}, 2 << 20, None, 131_072)["batch.size"] == 131_072  # worker.max_record_bytes
    assert producer_config({}, 8 << 20, None, 4 << 20)["batch.size"] == 1_000_000


def _read(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[tuple[int, bytes, bytes, list]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[tuple[int, bytes, bytes, list]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.partition(), msg.key(), msg.value(), msg.headers() or []))
    finally:
        consumer.close()
    return out


@pytest.mark.integration
def test_send_completes_after_every_record_is_acknowledged(kafka_bootstrap: str) -> None:
    topic = f"rdk-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, [topic], partitions=4)
    output = RdKafkaOutput(producer_config({"bootstrap.servers": kafka_bootstrap}, 1 << 20))

    async def run() -> None:
        for i in range(200):
            output.append(topic, f"key-{i % 20}".encode(), f"v{i}".encode(), [("h", b"1")])
        assert output.pending == 200
        futures = await output.send()
        assert output.pending == 0 and len(futures) == 1
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        assert output.unacked == 0
        assert await output.send({}) == []
        await output.close()

    asyncio.run(run())
    records = _read(kafka_bootstrap, topic, 200)
    assert len(records) == 200
    # partitioned like the Java client (murmur2), in produce order within each key
    for partition, key, _, headers in records:
        assert partition == key_partition(key, 4)
        assert headers == [("h", b"1")]
    for k in range(20):
        values = [v for _, key, v, _ in records if key == f"key-{k}".encode()]
        assert values == [f"v{i}".encode() for i in range(k, 200, 20)]


@pytest.mark.integration
def test_a_record_refused_for_its_size_is_reported_and_the_others_delivered(kafka_bootstrap: str) -> None:
    """librdkafka's own ``message.max.bytes`` check (MSG_SIZE_TOO_LARGE from ``produce()``): the
    record is reported as a refusal with its origin, the records around it are delivered."""
    topic = f"rdk-big-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    output = RdKafkaOutput(producer_config({"bootstrap.servers": kafka_bootstrap}, 1000))

    async def run() -> list[Refusal]:
        for origin, value in enumerate([b"a", b"x" * 5000, b"b"]):
            output.origin = origin
            output.append(topic, b"k", value)
        (future,) = await output.send()
        refused: list[Refusal] = await asyncio.wait_for(future, 30)
        await output.close()
        return refused

    refused = asyncio.run(run())
    assert [(r.topic, r.origin, r.size) for r in refused] == [(topic, 1, 5037)]
    assert refused[0].error.startswith("MSG_SIZE_TOO_LARGE")
    assert [v for *_, v, _ in _read(kafka_bootstrap, topic, 2)] == [b"a", b"b"]


def test_a_broker_size_refusal_in_a_delivery_report_is_a_refusal_other_errors_fail() -> None:
    """The broker's RecordTooLargeException (MSG_SIZE_TOO_LARGE in the delivery report) cannot be
    provoked on Tansu (it ignores a topic's max.message.bytes): the report librdkafka would make
    is handed to the delivery callback as it calls it."""
    from confluent_kafka import KafkaError, Message

    from service.rdkafka import _Delivery

    async def run() -> None:
        output = RdKafkaOutput({})
        loop = asyncio.get_running_loop()
        ok: asyncio.Future[list[Refusal]] = loop.create_future()
        delivery = _Delivery(ok, 2, output)
        record = Message(topic="out", key=b"k", value=b"v" * 100)
        delivery.delivered_from(4, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), record)
        assert not ok.done()
        delivery.delivered_from(5, None, record)
        assert ok.result() == [Refusal("out", 4, 137, "MSG_SIZE_TOO_LARGE: Broker: Message size too large")]
        failed: asyncio.Future[list[Refusal]] = loop.create_future()
        _Delivery(failed, 2, output).delivered(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"), record)
        with pytest.raises(KafkaException, match="timed out"):
            failed.result()

    asyncio.run(run())
