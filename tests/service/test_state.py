"""Redis-backed stores: typed round trips, TTL/size bounds, and StateStoreError when Redis is down."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from service.app import Normalizer
from service.batches import normalize_with_retry
from service.config import parse_config
from service.local import free_port
from service.metrics import WorkerMetrics
from service.state import RedisMetadataStore, RedisRowStateStore, redis_client
from service.worker_types import WorkerState
from transforms.decoders import Message
from transforms.errors import StateStoreError
from transforms.metadata import MetadataStore, RowStateStore


def test_row_state_round_trip_and_bounds(redis_url: str, redis_prefix: str) -> None:
    client = redis_client(redis_url)
    store = RedisRowStateStore(client, redis_prefix, ttl_seconds=60, max_rows_per_table=3)
    assert isinstance(store, RowStateStore)
    row = {
        "id": 1,
        "amount": Decimal("10.50"),
        "day": dt.date(2024, 2, 3),
        "at": dt.datetime(2024, 2, 3, 4, 5, 6, 789000),
        "span": dt.timedelta(seconds=5),
        "blob": b"\x00\x01",
        "none": None,
        "tags": ["a", {"$t": "not-a-tag"}],
    }
    store.put_rows("db.t", {"k1": row})
    fresh = RedisRowStateStore(client, redis_prefix, ttl_seconds=60, max_rows_per_table=3)
    assert fresh.get_rows("db.t", ["k1", "missing"]) == [row, None]
    assert 0 < client.ttl(f"{redis_prefix}row:db.t:k1") <= 60
    store.put_rows("db.t", {f"k{i}": {"id": i} for i in range(2, 6)})
    assert client.zcard(f"{redis_prefix}rowidx:db.t") == 3
    store.put_rows("db.t", {"k5": None})
    assert fresh.get_rows("db.t", ["k5"]) == [None]


def test_metadata_store_shared_between_instances(redis_url: str, redis_prefix: str) -> None:
    a = RedisMetadataStore(redis_client(redis_url), redis_prefix)
    b = RedisMetadataStore(redis_client(redis_url), redis_prefix)
    assert isinstance(a, MetadataStore)
    assert b.get("qlik", "s1") is None
    a.put("qlik", "s1", {"columns": ["a", "b"]})
    assert b.get("qlik", "s1") == {"columns": ["a", "b"]}


def test_unreachable_redis_raises_state_store_error() -> None:
    metrics = WorkerMetrics()
    client = redis_client(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_s=0.5)
    meta = RedisMetadataStore(client, on_error=metrics.redis_error)
    rows = RedisRowStateStore(client, on_error=metrics.redis_error)
    with pytest.raises(StateStoreError):
        meta.get("ns", "k")
    with pytest.raises(StateStoreError):
        rows.put_rows("t", {"k": {"a": 1}})
    assert metrics.redis_errors.labels("get")._value.get() == 1


class FlakyStore:
    """A metadata store that fails ``failures`` times, then works."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.data: dict[tuple[str, str], Any] = {}

    def get(self, namespace: str, key: str) -> Any:
        if self.failures:
            self.failures -= 1
            raise StateStoreError("redis get failed: ConnectionError")
        return self.data.get((namespace, key))

    def put(self, namespace: str, key: str, value: Any) -> None:
        self.data[(namespace, key)] = value


def test_state_store_outage_retries_without_dead_letter() -> None:
    """While the store fails, the message is retried (not dead-lettered) and readiness drops."""
    lines = (Path(__file__).resolve().parents[1] / "data" / "qlik-json" / "vectors-metadata-then-data.txt").read_bytes().splitlines()
    cfg = parse_config(
        {
            "topic_prefix": "out",
            "worker": {"retry_initial_s": 0.01, "retry_max_s": 0.02},
            "topics": [{"name": "q", "format": "qlik-json"}],
        }
    )
    store = FlakyStore(failures=0)
    normalizer = Normalizer(cfg, store)
    state = WorkerState(started=True, joined=True)
    runtime = normalizer.runtime_for("q")
    assert runtime is not None
    seen_not_ready: list[bool] = []

    async def watch() -> None:
        while True:
            seen_not_ready.append(not state.ready)
            await asyncio.sleep(0.005)

    async def run() -> None:
        watcher = asyncio.ensure_future(watch())
        await normalize_with_retry(Message(lines[0], topic="q", partition=0, offset=0), runtime, normalizer, state)
        store.failures = 5
        pending = await normalize_with_retry(Message(lines[1], topic="q", partition=0, offset=1), runtime, normalizer, state)
        watcher.cancel()
        assert pending.dlq is None and len(pending.records) >= 1
        assert store.failures == 0

    asyncio.run(run())
    assert any(seen_not_ready)
    assert state.ready and state.redis_ok
    assert normalizer.metrics.dlq._metrics == {}
