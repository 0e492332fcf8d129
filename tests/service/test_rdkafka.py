"""The librdkafka output on a real broker: acknowledgements, partitioning, refusals (by
librdkafka's own check and by Apache Kafka for a topic's ``max.message.bytes``)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException

from service.limits import TopicLimits
from service.local import create_topics
from service.output import Refusal, key_partition, record_wire_bytes
from service.rdkafka import RdKafkaOutput, producer_config
from tests.faults.procs import alter_topic, create_configured_topics


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
    from service.config import WorkerConfig
    from service.worker_types import output_message_bytes

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


def _records(output: RdKafkaOutput, topic: str, big_at: int = 30, n: int = 60) -> tuple[bytes, list[tuple[str, bytes]]]:
    """``n`` records of about 400 bytes to ``topic`` under 3 keys, record ``big_at`` of 20000 bytes
    with a header; each its own origin. Returns the big one's value and headers."""
    big, headers = b"B" * 20_000, [("h", b"x" * 100)]
    for origin in range(n):
        output.origin = origin
        if origin == big_at:
            output.append(topic, b"k0", big, headers)
        else:
            output.append(topic, f"k{origin % 3}".encode(), f"{origin:04d}".encode() + b"s" * 400)
    return big, headers


async def _send(output: RdKafkaOutput) -> list[Refusal]:
    (future,) = await output.send()
    refused: list[Refusal] = await asyncio.wait_for(future, 30)
    return refused


def _in_order(records: list[tuple[int, bytes, bytes, list]]) -> bool:
    by_key: dict[bytes, list[int]] = {}
    for _, key, value, _ in records:
        by_key.setdefault(key, []).append(int(value[:4]))
    return all(v == sorted(v) for v in by_key.values())


@pytest.mark.integration
def test_the_broker_refuses_a_record_above_the_topics_max_message_bytes_and_only_that_one(
    apache_kafka_bootstrap: str,
) -> None:
    """Kafka's RecordTooLargeException, in the delivery report: the topic's max.message.bytes
    (10000) below librdkafka's message.max.bytes (1 MiB). With the topics' limits read from the
    broker, the output's batches stay within the topic's (batch.size 10000), so the broker refuses
    only the record too large on its own; its size counts its headers (a delivery report has none)."""
    bootstrap = apache_kafka_bootstrap
    topic = f"rdk-limit-{uuid.uuid4().hex[:8]}"
    create_configured_topics(bootstrap, {topic: {"max.message.bytes": "10000"}}, partitions=1)
    output = RdKafkaOutput(producer_config({"bootstrap.servers": bootstrap}, 1 << 20),
                           TopicLimits({"bootstrap.servers": bootstrap}))

    async def run() -> tuple[list[Refusal], bytes, list[tuple[str, bytes]]]:
        big, headers = _records(output, topic)
        refused = await _send(output)
        await output.close()
        return refused, big, headers

    refused, big, headers = asyncio.run(run())
    assert refused == [Refusal(topic, 30, record_wire_bytes(b"k0", big, headers),
                               "MSG_SIZE_TOO_LARGE: Broker: Message size too large")]
    assert output.batch_bytes == 10_000
    delivered = _read(bootstrap, topic, 59)
    assert len(delivered) == 59 and _in_order(delivered)


@pytest.mark.integration
def test_without_the_topics_limits_librdkafka_loses_the_whole_batch(apache_kafka_bootstrap: str) -> None:
    """Why the output reads the limits: librdkafka's batch (batch.size 1000000) of the 60 records is
    larger than the topic's 10000 bytes, and the broker refuses it whole; librdkafka does not split
    it (the Java producer does), so records that fit the topic are refused with the large one."""
    bootstrap = apache_kafka_bootstrap
    topic = f"rdk-batch-{uuid.uuid4().hex[:8]}"
    create_configured_topics(bootstrap, {topic: {"max.message.bytes": "10000"}}, partitions=1)
    output = RdKafkaOutput(producer_config({"bootstrap.servers": bootstrap}, 1 << 20))

    async def run() -> list[Refusal]:
        _records(output, topic)
        refused = await _send(output)
        await output.close()
        return refused

    refused = asyncio.run(run())
    origins = {r.origin for r in refused}
    assert 30 in origins and len(origins) > 1, origins
    assert all(r.error == "MSG_SIZE_TOO_LARGE: Broker: Message size too large" for r in refused)


@pytest.mark.integration
def test_a_limit_lowered_while_in_use_is_read_again_after_the_first_refusal(apache_kafka_bootstrap: str) -> None:
    """The topic's max.message.bytes lowered from Kafka's default to 10000 while the output writes to
    it: the records sent in the output's batches of then (1000000 bytes) can be refused with the
    large one; the refusal makes the output read the limit again, and from the next send on only the
    large record is refused."""
    bootstrap = apache_kafka_bootstrap
    topic = f"rdk-lowered-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic], partitions=1)
    output = RdKafkaOutput(producer_config({"bootstrap.servers": bootstrap}, 1 << 20),
                           TopicLimits({"bootstrap.servers": bootstrap}))

    async def run() -> tuple[int, list[Refusal], list[Refusal], int]:
        _records(output, topic, big_at=-1)
        assert await _send(output) == []
        before = output.batch_bytes
        alter_topic(bootstrap, topic, {"max.message.bytes": "10000"})
        _records(output, topic)
        during = await _send(output)
        _records(output, topic)
        after = await _send(output)
        await output.close()
        return before, during, after, output.batch_bytes

    before, during, after, batch_bytes = asyncio.run(run())
    assert before == 1_000_000 and batch_bytes == 10_000
    assert 30 in {r.origin for r in during}
    assert [r.origin for r in after] == [30]


def test_a_delivery_error_other_than_the_size_fails_the_send() -> None:
    """Any delivery error but a size refusal fails the send's future (the worker stops without
    committing); a size refusal only lists the record. The reports are handed to the delivery
    callback as librdkafka calls it (a timed-out delivery is not provoked here)."""
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
