"""service.limits.TopicLimits: topics' max.message.bytes as Apache Kafka describes them, and what
happens where a broker cannot tell (Tansu, none at all)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from service.limits import TopicLimits
from service.local import free_port, start_tansu
from tests.faults.procs import alter_topic, create_configured_topics


@pytest.mark.integration
def test_limits_come_from_the_topic_or_for_a_new_topic_from_the_brokers(apache_kafka_bootstrap: str) -> None:
    """A topic's override, Kafka's default (the brokers' message.max.bytes, 1048588) for a topic
    that does not exist yet; cached until forgotten (a lowered limit is read again only then)."""
    bootstrap = apache_kafka_bootstrap
    topic, absent = f"lim-{uuid.uuid4().hex[:8]}", f"lim-absent-{uuid.uuid4().hex[:8]}"
    create_configured_topics(bootstrap, {topic: {"max.message.bytes": "150000"}}, partitions=1)
    limits = TopicLimits({"bootstrap.servers": bootstrap})

    async def run() -> list[dict[str, int | None]]:
        first = await limits.learn([topic, absent])
        alter_topic(bootstrap, topic, {"max.message.bytes": "90000"})
        cached = await limits.learn([topic])
        limits.forget(topic)
        again = await limits.learn([topic])
        return [first, cached, again]

    first, cached, again = asyncio.run(run())
    assert first == {topic: 150_000, absent: 1_048_588}
    assert cached == {topic: 150_000} and again == {topic: 90_000}
    assert limits.get(topic) == 90_000 and limits.get("never-asked") is None


@pytest.mark.integration
def test_a_broker_that_keeps_no_topic_configs_leaves_the_limit_unknown(tmp_path: Path) -> None:
    """Tansu describes a topic with no configs: the limit is unknown (the worker goes by its own
    settings), and it is not asked again before ``retry_s``."""
    tansu = start_tansu(log_dir=tmp_path)
    try:
        limits = TopicLimits({"bootstrap.servers": tansu.address}, retry_s=60.0)

        async def run() -> tuple[dict[str, int | None], float]:
            first = await limits.learn(["some-topic"])
            started = time.monotonic()
            await limits.learn(["some-topic"])
            return first, time.monotonic() - started

        first, second_s = asyncio.run(run())
    finally:
        tansu.stop()
    assert first == {"some-topic": None}
    assert second_s < 0.05  # from the memory of the failed lookup, no request


def test_no_broker_at_all_leaves_the_limit_unknown_without_raising() -> None:
    limits = TopicLimits({"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0}, timeout_s=1.0)
    started = time.monotonic()
    found = asyncio.run(limits.learn(["t"]))
    assert found == {"t": None} and time.monotonic() - started < 10
