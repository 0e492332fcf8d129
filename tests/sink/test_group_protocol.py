"""The sink's driver under both consumer group protocols (``broker.group_protocol``).

Fast checks of the librdkafka settings the driver joins with (librdkafka itself judges them:
a real ``Consumer`` is built), then, on real brokers (``-m integration``): the rebalance
callbacks of :class:`sink.plan.Partitions` with two members of one group, under the classic
protocol (eager: everything revoked, then assigned) and KIP-848's consumer protocol
(incremental: only what moves); a broker that refuses the consumer protocol stops the sink; a
broker without it at all (Tansu) leaves the driver waiting, and the driver says why.

The sink itself runs with one member per group (README "One sink per table"); two members here
exercise the callbacks as a replacement or a restart of the sink does, partition by partition.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.local import create_topics
from sink.main import load_sink_config, read_sink_config
from sink.plan import ConsumerGroupError, Partitions, driver_conf, subscription
from sink.source import RangeRead
from transforms.configfile import CLASSIC_GROUP_PROPERTIES, GroupProtocol, group_member_conf

PROTOCOLS = [p.value for p in GroupProtocol]


def _pipeline(tmp_path: Path, **broker: Any) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "broker": {"bootstrap_servers": "127.0.0.1:9092", **broker},
        "topics": [{"name": "src", "format": "canal-json"}],
        "sink": {"topics": ["cdcnorm.shop.orders"]},
    }))
    return path


# ----------------------------------------------------------------------------- settings


def test_the_sink_reads_the_group_protocol_from_the_broker_section(tmp_path: Path) -> None:
    _, broker, _ = read_sink_config(_pipeline(tmp_path, group_protocol="consumer"))
    assert broker.group_protocol is GroupProtocol.CONSUMER
    _, kafka = load_sink_config(_pipeline(tmp_path, group_protocol="consumer"))
    assert kafka["group.protocol"] == "consumer"
    _, kafka = load_sink_config(_pipeline(tmp_path))
    assert kafka["group.protocol"] == "classic"  # always explicit: librdkafka's default is to change


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_librdkafka_accepts_the_driver_settings_of_each_protocol(protocol: str) -> None:
    from confluent_kafka import Consumer

    conf = driver_conf("127.0.0.1:1", "g", {"group.protocol": protocol})
    assert conf["group.protocol"] == protocol
    left = [k for k in CLASSIC_GROUP_PROPERTIES if k in conf]
    assert left == ([] if protocol == "consumer" else ["session.timeout.ms", "heartbeat.interval.ms"])
    Consumer({**conf, "log_level": 0}).close()  # librdkafka refuses a classic-only property under consumer


def test_librdkafka_refuses_the_classic_properties_under_the_consumer_protocol() -> None:
    """Why :func:`group_member_conf` leaves them out: each alone stops the consumer's creation."""
    from confluent_kafka import Consumer, KafkaException

    values = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "partition.assignment.strategy": "range",
              "group.protocol.type": "consumer"}
    for key in CLASSIC_GROUP_PROPERTIES:
        base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0}
        with pytest.raises(KafkaException, match=f"`{key}` is not supported for `group.protocol=consumer`"):
            Consumer({**base, "group.protocol": "consumer", key: values[key]})
        assert group_member_conf({**base, "group.protocol": "consumer", key: values[key]}).get(key) is None
        Consumer(group_member_conf({**base, "group.protocol": "consumer", key: values[key]})).close()
        Consumer(group_member_conf({**base, key: values[key]})).close()  # classic keeps it


def test_a_topic_pattern_names_the_same_topics_under_both_protocols() -> None:
    """librdkafka searches a classic subscription's pattern in each name; the broker matches a
    consumer-protocol one against the whole name: wrapped as ``^(pattern).*`` it is one set."""
    assert subscription(["a", "b"], None) == ["a", "b"]
    assert subscription([], r"cdcnorm\.[^.]+\.[^.]+") == [r"^(cdcnorm\.[^.]+\.[^.]+).*"]
    assert subscription([], r"^cdcnorm\.shop") == [r"^(cdcnorm\.shop).*"]


# ----------------------------------------------------------------------------- on a broker


def _member(bootstrap: str, group: str, protocol: str, revoked: list[set[Any]] | None = None,
            **kwargs: Any) -> Partitions:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    conf = driver_conf(bootstrap, group, {"group.protocol": protocol, "log_level": 0})
    return Partitions(Consumer(conf), AdminClient({"bootstrap.servers": bootstrap}),
                      on_revoke=None if revoked is None else revoked.append, group_protocol=protocol, **kwargs)


def _poll_until(members: list[Partitions], done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if done():
            for _ in range(5):  # let the last callbacks run
                for m in members:
                    m.poll()
                time.sleep(0.05)
            return
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout:.0f}s: {[sorted(m.assigned()) for m in members]}")


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    deadline = time.monotonic() + 60
    try:
        while True:  # a fresh broker is not the group's coordinator until its offsets topic is up
            try:
                consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
                return
            except KafkaException as exc:
                error = exc.args[0]
                coordinator = error.code() in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                               KafkaError.COORDINATOR_NOT_AVAILABLE)
                if not (coordinator or error.retriable()) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_driver_keeps_its_positions_right_through_rebalances(apache_kafka_bootstrap: str, protocol: str) -> None:
    """Two members of one group share 4 partitions, then one leaves. Each member's positions are
    always exactly its assigned partitions: a newly assigned one starts at the group's committed
    offset, a revoked one is dropped. Under the classic protocol a rebalance revokes everything
    (the kept partitions restart from the committed offsets); under the consumer protocol only the
    partitions that move are revoked, and the kept ones keep how far this member has read."""
    from confluent_kafka import Producer

    bootstrap = apache_kafka_bootstrap
    topic = f"gp-{protocol}-{uuid.uuid4().hex[:6]}"
    group = f"{topic}-sink"
    create_topics(bootstrap, [topic], partitions=4)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(4):
        for i in range(6):
            producer.produce(topic, b"v%d" % i, partition=p)
    assert producer.flush(30) == 0
    everything = {(topic, p) for p in range(4)}
    _commit(bootstrap, group, dict.fromkeys(everything, 2))

    revoked_a: list[set[Any]] = []
    a = _member(bootstrap, group, protocol, revoked_a)
    a.subscribe([topic])
    _poll_until([a], lambda: a.assigned() == everything)
    assert a.positions == dict.fromkeys(everything, 2)
    # a micro-batch read every partition up to 5 and committed 3 of it
    a.advance([RangeRead(t, p, 2, 5, 3, True) for t, p in everything])
    a.commit(dict.fromkeys(everything, 3))
    assert a.positions == dict.fromkeys(everything, 5)

    b = _member(bootstrap, group, protocol)
    try:
        b.subscribe([topic])
        _poll_until([a, b], lambda: bool(b.assigned()) and a.assigned() | b.assigned() == everything
                    and not a.assigned() & b.assigned())
        kept, moved = a.assigned(), b.assigned()
        assert kept and moved
        assert set(a.positions) == kept and set(b.positions) == moved
        assert b.positions == dict.fromkeys(moved, 3)  # the new owner starts at the committed offset
        if protocol == "consumer":
            assert revoked_a == [moved]  # incremental: only what moved was revoked
            assert a.positions == dict.fromkeys(kept, 5)
        else:
            assert revoked_a[-1] == everything  # eager: all revoked, the kept ones assigned again
            assert a.positions == dict.fromkeys(kept, 3)
        assert a.generation >= 2 and b.generation >= 1
    finally:
        b.consumer.close()
    _poll_until([a], lambda: a.assigned() == everything)
    assert set(a.positions) == everything
    assert all(a.positions[tp] == 3 for tp in moved)  # given back: read from the committed offset
    if protocol == "consumer":
        assert all(a.positions[tp] == 5 for tp in kept) and revoked_a == [moved]
    a.consumer.close()


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_broker_that_refuses_the_consumer_protocol_stops_the_driver(tmp_path: Path) -> None:
    """An Apache Kafka whose group.coordinator.rebalance.protocols leaves out consumer answers
    the driver's ConsumerGroupHeartbeat with UNSUPPORTED_VERSION, librdkafka's fatal error: the
    sink stops with it and what the setting needs, instead of staying out of its group."""
    from service.local_kafka import start_kafka

    cluster = start_kafka(1, directory=tmp_path / "kafka", overrides={"group.coordinator.rebalance.protocols": "classic"})
    try:
        create_topics(cluster.address, ["refused"], partitions=1)
        member = _member(cluster.address, "refused-sink", "consumer")
        member.subscribe(["refused"])
        with pytest.raises(ConsumerGroupError) as info:
            _poll_until([member], lambda: False, timeout=30)
        message = str(info.value)
        assert "ConsumerGroupHeartbeat" in message
        assert "broker.group_protocol=consumer needs a broker that serves KIP-848's consumer protocol" in message
        assert "group.coordinator.rebalance.protocols" in message and message.endswith("else use classic")
        member.consumer.close()
        # the same broker takes the classic protocol
        classic = _member(cluster.address, "refused-sink", "classic")
        classic.subscribe(["refused"])
        _poll_until([classic], lambda: classic.assigned() == {("refused", 0)})
        classic.consumer.close()
    finally:
        cluster.stop()


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[str]:
    from service.local import start_broker

    broker = start_broker("tansu", log_dir=tmp_path / "tansu")
    try:
        yield broker.address
    finally:
        broker.stop()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_broker_without_the_consumer_protocol_gets_a_warning(tansu: str, caplog: pytest.LogCaptureFixture) -> None:
    """Tansu does not list ConsumerGroupHeartbeat: librdkafka waits for a coordinator that can
    serve it, silently. The driver warns once, naming what the protocol needs; the classic
    protocol joins the same broker."""
    create_topics(tansu, ["silent"], partitions=1)
    member = _member(tansu, "silent-sink", "consumer", join_warning_s=3.0)
    member.subscribe(["silent"])
    with caplog.at_level(logging.WARNING, logger="cdcnorm.sink"):
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            member.poll()
            time.sleep(0.1)
    assert not member.assigned() and member.generation == 0
    warnings = [r.getMessage() for r in caplog.records if "no partitions assigned" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "group.protocol=consumer" in warnings[0] and "group.coordinator.rebalance.protocols" in warnings[0]
    member.consumer.close()
    classic = _member(tansu, "silent-sink", "classic")
    classic.subscribe(["silent"])
    _poll_until([classic], lambda: classic.assigned() == {("silent", 0)})
    classic.consumer.close()
