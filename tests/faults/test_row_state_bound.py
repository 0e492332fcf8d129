"""Bounded row state (issue 18 item 5): one table receives the row images of 1M distinct keys.

Against a redis-server of this test only (so ``INFO memory`` and ``DBSIZE`` count nothing else),
two store instances (two "replicas", each with its own connection, on two threads) write the
images through :class:`service.state.RedisRowStateStore`, 1000 rows a put, while a third
connection polls the table's size. Twice:

* ``max_rows_per_table`` 250000 (below 1M): the size never exceeds the bound, not even between
  a put and its eviction; at the end Redis holds exactly the bound (no image outside the index),
  the oldest-written images went first, and completing a partial change of an evicted row leaves
  its absent columns absent (the placeholder), while a kept row is completed with its values;
* ``max_rows_per_table`` 1000000: all 1M images are kept, then 10000 more keys keep it at 1M.

``used_memory`` is measured before and after each run and printed with the bytes per image.

End to end, smaller: a worker process completes the Qlik partial updates of
``test_redis_forgets``'s workload (120 keys per table) with ``max_rows_per_table`` 30: every
table's row state stays within 30 images, and no completed cell holds a wrong value (evicted rows
give placeholders). Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from service.local import LocalProcess, create_topics, start_redis
from service.state import RedisRowStateStore, encode_row, redis_client
from tests.faults.procs import wait_committed, worker_config
from tests.faults.test_redis_forgets import QLIK_TABLES, SCHEMA, check, generate
from tests.faults.workload import produce, read_all
from tests.service.harness import WorkerProcess
from transforms.completion import complete_partial_images, row_key
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, Operation, SourceInfo
from transforms.values import UNAVAILABLE

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(400)]

KEYS = 1_000_000
BATCH = 1000
PREFIX = "bound:"
TABLE = TableSchema(
    "shop", None, "orders",
    (Column("id", ConnectType.INT64), Column("ver", ConnectType.INT64), Column("name", ConnectType.STRING),
     Column("qty", ConnectType.INT64), Column("note", ConnectType.STRING)),
    ("id",),
)
STORE_TABLE = "shop.orders"  # the row-state table name completion uses for TABLE


def image(i: int) -> dict[str, Any]:
    return {"id": i, "ver": 1, "name": f"customer-{i:07d}", "qty": i % 1000, "note": "standard delivery"}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[LocalProcess]:
    """A redis-server of this test only: its memory figures and key count are ours alone."""
    server = start_redis(log_dir=tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


def used_memory(client: redis.Redis) -> int:
    info: Any = client.info("memory")
    return int(info["used_memory"])


def write_keys(url: str, bound: int, first: int, count: int) -> tuple[int, int]:
    """Images of keys ``first .. first+count-1`` written by two store instances at once, 1000 a
    put, while a third connection polls the index size; (largest size seen, images evicted)."""
    batches = itertools.count()
    lock = threading.Lock()
    stop = threading.Event()
    seen = [0]
    failures: list[BaseException] = []
    stores = [RedisRowStateStore(redis_client(url, socket_timeout_s=30), PREFIX, 3600, bound) for _ in range(2)]

    def writer(store: RedisRowStateStore) -> None:
        try:
            while True:
                with lock:
                    n = next(batches)
                start = first + n * BATCH
                if start >= first + count:
                    return
                rows = {row_key({"id": i}): image(i) for i in range(start, min(start + BATCH, first + count))}
                store.put_rows(STORE_TABLE, rows)
        except BaseException as exc:
            failures.append(exc)

    def observer() -> None:
        client = redis_client(url)
        while not stop.is_set():
            seen[0] = max(seen[0], index_size(client))

    threads = [threading.Thread(target=writer, args=(s,)) for s in stores]
    watch = threading.Thread(target=observer, daemon=True)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watch.join(5)
    assert not failures, failures
    return seen[0], sum(s.evicted for s in stores)


def kept_ids(client: redis.Redis) -> set[int]:
    members: Any = client.zrange(f"{PREFIX}rowidx:{STORE_TABLE}", 0, -1)
    return {int(m.decode().split(":")[1].rstrip("}")) for m in members}


def complete_update(url: str, bound: int, kid: int) -> dict[str, Any]:
    """The ``after`` image of a partial update of ``kid`` (``qty`` and ``note`` absent),
    completed by a fresh store (no local cache)."""
    store = RedisRowStateStore(redis_client(url), PREFIX, 3600, bound)
    change = ChangeEvent(
        Operation.UPDATE, TABLE,
        {"id": kid, "ver": 1, "name": f"customer-{kid:07d}", "qty": UNAVAILABLE, "note": UNAVAILABLE},
        {"id": kid, "ver": 2, "name": f"renamed-{kid}", "qty": UNAVAILABLE, "note": UNAVAILABLE},
        SourceInfo("qlik-json"),
    )
    (out,) = complete_partial_images([change], store)
    assert isinstance(out, ChangeEvent) and out.after is not None
    return out.after


def index_size(client: redis.Redis) -> int:
    """Images the store's index holds for the test table."""
    return int(client.zcard(f"{PREFIX}rowidx:{STORE_TABLE}"))  # type: ignore[arg-type]


@dataclass
class Fill:
    """:func:`fill` measured: Redis memory before and after, the writers' figures, the index size."""

    client: redis.Redis
    before: int
    after: int
    largest: int
    evicted: int
    seconds: float
    size: int


def fill(url: str, bound: int) -> Fill:
    """Write :data:`KEYS` distinct keys' images into one table bounded at ``bound``."""
    client = redis_client(url, socket_timeout_s=30)
    before = used_memory(client)
    started = time.monotonic()
    largest, evicted = write_keys(url, bound, 0, KEYS)
    seconds = time.monotonic() - started
    return Fill(client, before, used_memory(client), largest, evicted, seconds, index_size(client))


def test_row_state_bounded_below_1m(own_redis: LocalProcess) -> None:
    url, bound = own_redis.address, 250_000
    run = fill(url, bound)
    client, before, after, largest, evicted, seconds, size = (
        run.client, run.before, run.after, run.largest, run.evicted, run.seconds, run.size)
    keys = int(client.dbsize())  # type: ignore[arg-type]
    kept = kept_ids(client)
    oldest_kept, newest_evicted = min(kept), max(set(range(KEYS)) - kept)
    print(f"\ninjected: {KEYS} distinct keys' images (~{len(encode_row(image(0)))} B of JSON each) into one table, "
          f"max_rows_per_table={bound}, 2 writers x {BATCH} rows a put, {seconds:.1f}s")
    print(f"counted: largest size seen by a poller={largest} final size={size} redis keys={keys} (images + 1 index) "
          f"evicted={evicted} oldest kept id={oldest_kept} newest evicted id={newest_evicted}")
    print(f"counted: used_memory before={before} after={after} delta={after - before} "
          f"= {(after - before) / size:.0f} bytes per kept image")
    assert largest <= bound and size == bound
    assert keys == bound + 1, "an image outside the index escapes the bound"
    assert evicted == KEYS - bound
    # least recently written first: two writers interleave, so the edge is fuzzy by 2 puts
    assert oldest_kept >= KEYS - bound - 2 * BATCH and newest_evicted < KEYS - bound + 2 * BATCH

    gone, kept_id = 0, KEYS - 1
    degraded, completed = complete_update(url, bound, gone), complete_update(url, bound, kept_id)
    print(f"counted: partial update of evicted id {gone} -> qty={degraded['qty']!r} note={degraded['note']!r}; "
          f"of kept id {kept_id} -> qty={completed['qty']!r} note={completed['note']!r}")
    assert degraded["qty"] is UNAVAILABLE and degraded["note"] is UNAVAILABLE
    assert degraded["name"] == f"renamed-{gone}"
    assert (completed["qty"], completed["note"]) == (image(kept_id)["qty"], image(kept_id)["note"])


def test_row_state_bound_equal_1m(own_redis: LocalProcess) -> None:
    url, bound = own_redis.address, KEYS
    run = fill(url, bound)
    client, before, full, largest, evicted, seconds, size_full = (
        run.client, run.before, run.after, run.largest, run.evicted, run.seconds, run.size)
    more_largest, more_evicted = write_keys(url, bound, KEYS, 10_000)
    size = index_size(client)
    keys = int(client.dbsize())  # type: ignore[arg-type]
    print(f"\ninjected: {KEYS} distinct keys' images into one table, max_rows_per_table={bound}, {seconds:.1f}s; "
          f"then 10000 more keys")
    print(f"counted: size after 1M={size_full} (evicted {evicted}, largest seen {largest}); after 10000 more="
          f"{size} (evicted {more_evicted}, largest seen {more_largest}); redis keys={keys}")
    print(f"counted: used_memory before={before} at 1M images={full} delta={full - before} "
          f"= {(full - before) / size_full:.0f} bytes per image")
    assert size_full == KEYS and evicted == 0 and largest <= bound
    assert size == bound and more_largest <= bound and more_evicted == 10_000 and keys == bound + 1
    assert complete_update(url, bound, 0)["qty"] is UNAVAILABLE
    assert complete_update(url, bound, KEYS + 9_999)["qty"] == image(KEYS + 9_999)["qty"]


def test_row_state_bound_in_a_worker(kafka_bootstrap: str, own_redis: LocalProcess, tmp_path: Path) -> None:
    bound = 30
    prefix = f"rb{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-qlik"
    schema_ids = {t: uuid.uuid4().hex.upper() for t in QLIK_TABLES}
    w = generate(23, schema_ids, prefix)
    outputs = [f"{prefix}.{SCHEMA}.{t}" for t in QLIK_TABLES]
    create_topics(kafka_bootstrap, [source], partitions=1)
    create_topics(kafka_bootstrap, outputs, partitions=2)
    entry = {"name": source, "format": "qlik-json", "complete_partial_images": True,
             "row_state": {"max_rows_per_table": bound}}
    config = worker_config(kafka_bootstrap, own_redis.address, f"{prefix}:", prefix, [entry])
    group = config["worker"]["app_id"]
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready(90)
        ends = produce(kafka_bootstrap, source, w.qlik_metadata)  # the metadata first, as Replicate sends it
        wait_committed(kafka_bootstrap, group, source, ends, 60, worker)
        for phase in w.qlik:
            for p, end in produce(kafka_bootstrap, source, phase).items():
                ends[p] = max(ends.get(p, 0), end)
        wait_committed(kafka_bootstrap, group, source, ends, 120, worker)
        dlq_metric = worker.total("cdcnorm_dlq_total")
    finally:
        worker.stop()
    w.truth = {slot: row for slot, row in w.truth.items() if slot[0] in outputs}  # the arcion part is not sent
    client = redis_client(own_redis.address)
    sizes = {name.decode(): int(client.zcard(name)) for name in client.scan_iter(match=f"{prefix}:rowidx:*")}
    images = sum(1 for _ in client.scan_iter(match=f"{prefix}:row:*"))
    report = check(read_all(kafka_bootstrap, outputs, idle_s=2.0), w)
    keys = {t: len({kid for (topic, kid, _) in w.truth if topic.endswith(f".{t}")}) for t in QLIK_TABLES}
    print(f"\ninjected: {w.changes('qlik')} qlik changes ({len(w.partial)} partial updates) over keys per table "
          f"{keys}, row_state.max_rows_per_table={bound}, one worker process")
    print(f"counted: row-state sizes {sizes}, images in redis={images}; {report.line()}; dlq={dlq_metric:.0f}")
    assert len(sizes) == len(QLIK_TABLES) and all(n <= bound for n in sizes.values())
    assert images <= bound * len(QLIK_TABLES)
    assert not report.missing and not report.wrong and dlq_metric == 0, (report.missing[:5], report.wrong[:5])
    assert report.placeholders > 0, "no partial update met an evicted row"
