"""The driver's high watermarks when a partition's leader changes, on a real Apache Kafka.

librdkafka's admin client asks ListOffsets with the leader epoch of its cached metadata and does
not refresh it when the broker answers ``FENCED_LEADER_EPOCH``: after a broker restart the sink
asked the stale epoch for ever, planned no more reads and looked idle
(tests/faults/test_kafka_cluster_faults.py, the rolling restart). A restart of the only node of
a one-node KRaft cluster changes every leader epoch too, which is all this needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.local import create_topics
from service.local_kafka import start_kafka
from sink.plan import Partitions
from tests.faults.workload import produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_watermarks_and_plan_follow_a_leader_change(tmp_path: Path) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    kafka = start_kafka(1, directory=tmp_path / "kafka", jvm_options=("-XX:TieredStopAtLevel=1",))
    consumer = None
    try:
        create_topics(kafka.address, ["orders", "items"], partitions=2)
        for topic in ("orders", "items"):
            produce(kafka.address, topic, [(f"k{i}".encode(), b"v") for i in range(20)])
        admin = AdminClient({"bootstrap.servers": kafka.address})
        consumer = Consumer({"bootstrap.servers": kafka.address, "group.id": "plan-leader-change"})
        parts = Partitions(consumer, admin)
        parts.positions = {(t, p): 0 for t in ("orders", "items") for p in range(2)}
        parts.refresh_watermarks()
        before = dict(parts.watermarks)
        assert sum(before.values()) == 40 and set(before) == set(parts.positions)

        (node,) = kafka.nodes
        kafka.stop_node(node.node_id)  # every partition gets a new leader epoch
        kafka.start_node(node.node_id)
        kafka.wait_in_sync(["orders", "items"])
        ends = {("orders", p): end for p, end in produce(kafka.address, "orders", [(b"k1", b"v"), (b"k2", b"v")]).items()}
        parts.positions = dict(before)  # everything known so far was read

        ranges = parts.plan()
        assert {tp: parts.watermarks[tp] for tp in ends} == ends, parts.watermarks
        assert {(r.topic, r.partition): (r.start, r.end) for r in ranges} == {tp: (before[tp], end) for tp, end in ends.items()}
    finally:
        if consumer is not None:
            consumer.close()
        kafka.stop()
