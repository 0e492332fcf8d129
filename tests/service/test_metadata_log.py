"""The durable metadata log (service.metadata_log) and LoggedMetadataStore on a real broker and Redis.

The log is the source of truth: a second replica loads what the first wrote, follows its later
writes, reads past deletions, and the store answers from the log when Redis forgot everything
(FLUSHALL) and rebuilds Redis from it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from service.local import free_port, start_redis, wait_for
from service.metadata_log import MetadataLog, decode_key, encode_key
from service.state import LoggedMetadataStore, RedisMetadataStore, redis_client
from transforms.errors import StateStoreError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def topic() -> str:
    return f"meta-{uuid.uuid4().hex[:10]}.metadata"


@pytest.fixture
def logs(kafka_bootstrap: str, topic: str) -> Iterator[Any]:
    """Opens MetadataLogs on ``topic`` (as replicas would) and closes them afterwards."""
    opened: list[MetadataLog] = []

    def open_log(replica: str = "r1", start: bool = True, timeout_s: float = 10.0) -> MetadataLog:
        log = MetadataLog({"bootstrap.servers": kafka_bootstrap}, topic, replica=replica, timeout_s=timeout_s)
        opened.append(log)
        if start:
            log.start()
            assert log.wait_loaded(30), log.status()
        return log

    yield open_log
    for log in opened:
        log.close()


def test_record_keys_round_trip() -> None:
    assert decode_key(encode_key("qlik.schema", "a:b")) == ("qlik.schema", "a:b")
    assert decode_key(b"not json") is None and decode_key(b'{"a":1}') is None and decode_key(None) is None


def test_a_second_replica_loads_and_follows_the_log(logs: Any, kafka_bootstrap: str, topic: str) -> None:
    a = logs("a")
    a.write("qlik.schema", "S1", b'{"v":1}', {"v": 1})
    a.write("qlik.schema", "S1", b'{"v":2}', {"v": 2})
    a.write("arcion.columns", "db.t", b'["x","y"]', ["x", "y"])
    a.write("gone", "k", b"1", 1)
    a.write("gone", "k", None)

    b = logs("b")  # a replica started later reads everything written before, in order
    assert b.get("qlik.schema", "S1").value == {"v": 2}
    assert b.get("arcion.columns", "db.t").value == ["x", "y"]
    gone = b.get("gone", "k")
    assert gone is not None and gone.deleted and gone.value is None
    assert len(b) == 2 and sorted((ns, k) for ns, k, _ in b.items()) == [("arcion.columns", "db.t"), ("qlik.schema", "S1")]

    a.write("qlik.schema", "S2", b'{"v":3}', {"v": 3})  # later writes reach b by its tail, or by sync()
    b.sync()
    assert b.get("qlik.schema", "S2").value == {"v": 3}

    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert list(admin.list_topics(timeout=5).topics[topic].partitions) == [0]
    resource = ConfigResource("topic", topic)
    policy = admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value
    print(f"\ntopic {topic}: 1 partition, cleanup.policy={policy}; b loaded in {b.load_seconds:.2f}s "
          f"({b.records_read} records incl. sync markers)")
    assert policy == "compact"


def test_own_writes_are_not_undone_by_an_older_record(logs: Any) -> None:
    a = logs("a")
    first = a.write("ns", "k", b"1", 1)
    second = a.write("ns", "k", b"2", 2)
    a._apply("ns", "k", first)  # the tail reading the older record after the newer one was applied
    assert a.get("ns", "k") == second


def test_the_topic_is_created_with_its_min_insync_replicas(kafka_bootstrap: str, topic: str) -> None:
    """``metadata_log.min_insync_replicas`` is set on the topic the worker creates (a topic
    config, not the broker's default), so that its acks=all writes need that many copies."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    log = MetadataLog({"bootstrap.servers": kafka_bootstrap}, topic, replica="r", timeout_s=10.0, min_insync_replicas=1)
    log.start()
    try:
        assert log.wait_loaded(30), log.status()
        resource = ConfigResource("topic", topic)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept: its futures die with it
        described = admin.describe_configs([resource])[resource].result(10)
        insync, policy = described["min.insync.replicas"], described["cleanup.policy"]
        assert (insync.value, insync.source) == ("1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        assert policy.value == "compact"
    finally:
        log.close()


def test_unreachable_broker_raises_state_store_error() -> None:
    log = MetadataLog({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "nowhere.metadata", replica="r",
                      timeout_s=1.0)
    log.start()
    try:
        assert not log.wait_loaded(2.0)
        assert "reading metadata log nowhere.metadata" in (log.status() or "")
        started = time.monotonic()
        # whichever comes first: our own wait (not acknowledged) or librdkafka's message.timeout.ms (failed)
        with pytest.raises(StateStoreError, match=r"nowhere\.metadata (not acknowledged|failed)|not open"):
            log.write("ns", "k", b"1", 1)
        assert time.monotonic() - started < 5
    finally:
        log.close()


def store(log: MetadataLog, redis_url: str, prefix: str, **kwargs: Any) -> LoggedMetadataStore:
    return LoggedMetadataStore(log, RedisMetadataStore(redis_client(redis_url), prefix, 30.0), **kwargs)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test only, so it can be flushed."""
    try:
        server = start_redis(log_dir=tmp_path / "redis")
    except Exception as exc:  # pragma: no cover - no redis-server binary
        pytest.skip(f"cannot start redis-server: {exc}")
    try:
        yield server.address
    finally:
        server.stop()


def test_store_survives_flushall_and_rebuilds_redis(logs: Any, own_redis: str) -> None:
    url, redis_prefix = own_redis, "cdcnorm:"
    client = redis.Redis.from_url(url)
    a = store(logs("a", start=False), url, redis_prefix, check_interval_s=0.2)
    with pytest.raises(StateStoreError, match="reading metadata log"):
        a.get("qlik.schema", "S1")  # not loaded yet: the worker retries, nothing is guessed
    a.start()
    assert a.log.wait_loaded(30)
    a.put("qlik.schema", "S1", {"cols": ["ID", "NAME"]})
    a.put("arcion.columns", "db.t", ["x", "y"])
    a.put("shareplex-json.update-before", "t\x1f1\x1fr", {"A": "1"})  # cache-only: Redis alone
    assert client.get(f"{redis_prefix}meta:qlik.schema:S1") == b'{"cols":["ID","NAME"]}'
    a.log.sync()
    records = a.log.records_read
    a.put("qlik.schema", "S1", {"cols": ["ID", "NAME"]})  # unchanged: not written to the log again
    a.log.sync()
    assert a.log.records_read == records + 1  # only the sync marker

    client.flushall()
    print(f"\ninjected: FLUSHALL with {len(a.log)} documents in the log")
    b = store(logs("b", start=False), url, redis_prefix, check_interval_s=0.2)
    b.start()
    assert b.log.wait_loaded(30)
    assert b.get("qlik.schema", "S1") == {"cols": ["ID", "NAME"]}
    assert b.get("arcion.columns", "db.t") == ["x", "y"]
    assert a.get("qlik.schema", "S1") == {"cols": ["ID", "NAME"]}
    assert b.get("shareplex-json.update-before", "t\x1f1\x1fr") is None  # a cache, forgotten

    wait_for(lambda: client.exists(f"{redis_prefix}meta:arcion.columns:db.t"), 10, "redis rebuilt", 0.1)
    assert client.get(f"{redis_prefix}meta:qlik.schema:S1") == b'{"cols":["ID","NAME"]}'
    assert client.exists(f"{redis_prefix}meta-log:{a.log.topic}")
    print(f"counted: rebuilds a={a.rebuilds} b={b.rebuilds}, documents written back a={a.restored} b={b.restored}")
    assert a.rebuilds + b.rebuilds >= 2  # each at start-up, one more after the flush
    client.close()


def test_store_sees_another_replicas_write_despite_a_flush(
    logs: Any, redis_url: str, redis_prefix: str
) -> None:
    """b's copy may not have a's newest write yet and Redis lost it: b reads the log to its
    end before it answers "unknown", and writes what it found back to Redis."""
    a = store(logs("a"), redis_url, redis_prefix)
    b = store(logs("b"), redis_url, redis_prefix, resync_after_s=60)
    assert b.get("arcion.columns", "db.late") is None  # absent everywhere, after one sync
    client = redis.Redis.from_url(redis_url)
    for i in range(20):
        a.put("arcion.columns", f"db.new{i}", [f"c{i}"])
        client.delete(f"{redis_prefix}meta:arcion.columns:db.new{i}")
        assert b.get("arcion.columns", f"db.new{i}") == [f"c{i}"]
    wait_for(lambda: client.get(f"{redis_prefix}meta:arcion.columns:db.new19") == b'["c19"]', 5, "write-back", 0.1)
    client.close()


def test_documents_only_in_redis_are_adopted_into_the_log(
    logs: Any, redis_url: str, redis_prefix: str
) -> None:
    """Metadata written by a worker before the log existed moves into the log on first read."""
    client = redis.Redis.from_url(redis_url)
    client.set(f"{redis_prefix}meta:qlik.schema:OLD", b'{"legacy":true}')
    a = store(logs("a"), redis_url, redis_prefix)
    assert a.get("qlik.schema", "OLD") == {"legacy": True}
    b = logs("b")
    assert b.get("qlik.schema", "OLD").value == {"legacy": True}
    client.close()


def test_redis_down_reads_come_from_the_log_and_writes_fail(logs: Any, redis_url: str, redis_prefix: str) -> None:
    a = store(logs("a"), redis_url, redis_prefix)
    a.put("qlik.schema", "S1", {"v": 1})
    down = LoggedMetadataStore(
        a.log, RedisMetadataStore(redis_client(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_s=0.3), redis_prefix)
    )
    assert down.get("qlik.schema", "S1") == {"v": 1}  # no Redis call at all
    with pytest.raises(StateStoreError, match="redis"):
        down.put("qlik.schema", "S2", {"v": 2})  # the log has it; the retry writes Redis again
    assert a.log.get("qlik.schema", "S2") is not None
