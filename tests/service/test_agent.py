"""The worker's batch processor and the per-message normalizer, without a broker (a fake producer)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from service.app import Normalizer, create_app
from service.config import parse_config
from service.dlq import ERROR_CLASS, ERROR_OFFSET, ERROR_PARTITION, ERROR_TOPIC, FORMAT_HEADER
from service.metrics import BulkHistogram
from service.output import key_partition, murmur2, murmur2_many
from service.worker_types import FatalMessageError
from transforms.decoders import Message
from transforms.errors import StateStoreError
from transforms.metadata import InMemoryMetadataStore

CANAL_INSERT = orjson.dumps(
    {
        "data": [{"id": "1", "name": "a", "email": "a@x"}, {"id": "2", "name": "b", "email": "b@x"}],
        "database": "shop",
        "table": "users",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1700000000000,
        "ts": 1700000000100,
        "mysqlType": {"id": "int", "name": "varchar(10)", "email": "varchar(20)"},
        "sqlType": {"id": 4, "name": 12, "email": 12},
        "old": None,
    }
)
CANAL_DELETE = orjson.dumps(
    {
        "data": [{"id": "1", "name": "a", "email": "a@x"}],
        "database": "shop",
        "table": "users",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "DELETE",
        "es": 1700000001000,
        "ts": 1700000001100,
        "mysqlType": {"id": "int", "name": "varchar(10)", "email": "varchar(20)"},
        "sqlType": {"id": 4, "name": 12, "email": 12},
        "old": None,
    }
)


class FakeBatch:
    """What ``create_batch`` returns: records appended, then closed."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]] = []
        self.closed = False

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]] = ()) -> object:
        assert not self.closed and isinstance(headers, list)  # as aiokafka's record builder
        self.records.append((key, value, tuple(headers)))
        return object()

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    """Records sent batches. Each batch's future stays pending until :meth:`ack` (broker ack)."""

    def __init__(self, partitions: int = 4) -> None:
        self.partitions = partitions
        self.batches: list[tuple[str, int, FakeBatch, asyncio.Future[Any]]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Awaitable[Any]:
        assert batch.closed
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.batches.append((topic, partition, batch, fut))
        return fut

    def ack(self, error: BaseException | None = None) -> None:
        for *_, fut in self.batches:
            if not fut.done():
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

    @property
    def sent(self) -> list[tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]:
        return [(topic, *record) for topic, _, batch, _ in self.batches for record in batch.records]


def records(topic: str, partition: int, values: list[tuple[bytes | None, bytes]], first: int = 0,
            headers: list[tuple[str, bytes]] | None = None) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        ConsumerRecord(topic, partition, first + i, 1700000000000, 0, key, value, None,
                       len(key or b""), len(value), headers or [])
        for i, (key, value) in enumerate(values)
    ]


def config(**entry: Any) -> Any:
    return parse_config(
        {
            "topic_prefix": "out",
            "web": {"enabled": False},
            "topics": [
                {"name": "src.canal", "format": "canal-json", **entry},
                {"pattern": "other\\..*", "format": "debezium-json"},
            ],
        }
    )


def normalizer(cfg: Any) -> Normalizer:
    return Normalizer(cfg, InMemoryMetadataStore())


def test_normalizer_keys_and_tombstones() -> None:
    cfg = config()
    n = normalizer(cfg)
    rt = n.runtime_for("src.canal")
    assert rt is not None and rt.format_id == "canal-json"
    records = n.process(Message(CANAL_INSERT, topic="src.canal", partition=0, offset=0), rt).records
    assert [r.topic for r in records] == ["out.shop.users", "out.shop.users"]
    assert [orjson.loads(r.key_bytes() or b"null")["payload"] for r in records] == [{"id": 1}, {"id": 2}]
    records = n.process(Message(CANAL_DELETE, topic="src.canal", partition=0, offset=1), rt).records
    assert [r.value is None for r in records] == [False, True]
    assert records[0].value is not None and records[0].value["payload"]["op"] == "d"
    assert records[1].key == records[0].key


def test_normalizer_tombstones_off_and_template() -> None:
    n = normalizer(config(tombstones=False, topic_template="{prefix}.x.{table}"))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_DELETE, topic="src.canal"), rt).records
    assert [r.topic for r in records] == ["out.x.users"]


def test_normalizer_key_override() -> None:
    n = normalizer(config(key_columns={"shop.users": ["email"]}))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_INSERT, topic="src.canal"), rt).records
    assert orjson.loads(records[0].key_bytes() or b"null")["payload"] == {"email": "a@x"}


def test_normalizer_chain_applied() -> None:
    n = normalizer(config(transforms=[{"type": "mask", "fields": "email"}]))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_INSERT, topic="src.canal"), rt).records
    assert records[0].value is not None
    assert records[0].value["payload"]["after"]["email"] != "a@x"


def test_normalizer_routing() -> None:
    n = normalizer(config())
    other = n.runtime_for("other.topic")
    assert other is not None and other.format_id == "debezium-json"
    assert n.runtime_for("unrelated") is None
    assert n.runtime_for("out.shop.users") is None


def test_normalizer_dead_letter_and_fail() -> None:
    n = normalizer(config())
    rt = n.runtime_for("src.canal")
    assert rt is not None
    msg = Message(b"{not json", key=b"k1", topic="src.canal", partition=2, offset=9, headers=(("h", b"v"),))
    outcome = n.process(msg, rt)
    assert outcome.records == [] and outcome.dlq is not None
    topic, key, value, headers = outcome.dlq
    assert (topic, key, value) == ("out.dlq", b"k1", b"{not json")
    h = dict(headers)
    assert h["h"] == b"v"
    assert h[ERROR_TOPIC] == b"src.canal" and h[ERROR_PARTITION] == b"2" and h[ERROR_OFFSET] == b"9"
    assert h[ERROR_CLASS].endswith(b"DecodeError") and h[FORMAT_HEADER] == b"canal-json"
    failing = normalizer(config(errors="fail"))
    rt = failing.runtime_for("src.canal")
    assert rt is not None
    with pytest.raises(FatalMessageError):
        failing.process(msg, rt)


def test_batch_processor_routes_keys_and_dead_letters() -> None:
    cfg = config(transforms=[{"type": "mask", "fields": "email"}])
    producer = FakeProducer()
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)
    batch = records("src.canal", 0, [(b"a", CANAL_INSERT), (b"bad", b"garbage"), (b"b", CANAL_DELETE)])
    batch[1] = ConsumerRecord("src.canal", 0, 1, 1700000000000, 0, b"bad", b"garbage", None, 3, 7, [("x", b"1")])

    async def run() -> None:
        await processor.process({tp: batch})
        await processor.wait_sent()
        assert processor.committable() == {}, "nothing is committable before the broker acks"
        assert processor.inflight == 3
        producer.ack()
        await processor.drain()
        assert processor.committable() == {tp: 3}
        assert processor.inflight == 0
        await processor.stop()

    asyncio.run(run())
    # one subscription per topic entry: a name and a pattern
    assert {t.pattern.pattern if t.pattern else t.topics for t in app.topics} == {("src.canal",), "other\\..*"}
    sent = producer.sent
    assert sorted(s[0] for s in sent) == ["out.dlq", "out.shop.users", "out.shop.users", "out.shop.users", "out.shop.users"]
    dlq = next(s for s in sent if s[0] == "out.dlq")
    assert dlq[1] == b"bad" and dlq[2] == b"garbage"
    assert dict(dlq[3])[ERROR_TOPIC] == b"src.canal" and dict(dlq[3])["x"] == b"1"
    data = [s for s in sent if s[0] != "out.dlq"]
    # one key, one partition, in source order: id 1 (insert, delete, tombstone), id 2 (insert)
    by_partition: dict[int, list[Any]] = {}
    for topic, partition, b, _ in producer.batches:
        if topic == "out.shop.users":
            by_partition.setdefault(partition, []).extend(b.records)
    for part, recs in by_partition.items():
        assert part == key_partition(recs[0][0], 4)
        assert all(key_partition(r[0], 4) == part for r in recs)
    keys = [orjson.loads(s[1])["payload"] for s in data]
    assert sorted(k["id"] for k in keys) == [1, 1, 1, 2]
    id1 = [orjson.loads(s[2]) if s[2] else None for s in data if orjson.loads(s[1])["payload"] == {"id": 1}]
    assert id1[0]["payload"]["op"] == "c" and id1[0]["payload"]["after"]["email"] != "a@x"
    assert id1[1]["payload"]["op"] == "d" and id1[2] is None
    metrics = processor.normalizer.metrics
    assert metrics.messages_in.labels("src.canal", "canal-json")._value.get() == 3
    assert metrics.records_out.labels("src.canal", "canal-json")._value.get() == 4
    assert metrics.dlq.labels("src.canal", "canal-json", "DecodeError")._value.get() == 1
    page = metrics.render().decode()
    assert 'cdcnorm_decode_seconds_count{format="canal-json"} 3.0' in page  # dead letters included
    assert 'cdcnorm_decode_seconds_bucket{format="canal-json",le="+Inf"} 3.0' in page


def test_bulk_histogram_exposition_is_prometheus_clients() -> None:
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    buckets = (0.001, 0.01, 0.1, 1.0)
    amounts = [0.0005, 0.001, 0.002, 0.01, 0.5, 1.0, 3.0, 0.0]
    theirs = CollectorRegistry()
    reference = Histogram("h_seconds", "doc", ["format"], buckets=buckets, registry=theirs)
    for amount in amounts:
        reference.labels("a").observe(amount)
    reference.labels("b").observe(0.05)
    ours = CollectorRegistry()
    bulk = BulkHistogram("h_seconds", "doc", "format", buckets, ours)
    bulk.observe_many("a", amounts[:3])
    bulk.observe_many("a", amounts[3:])
    bulk.observe_many("b", [0.05])
    bulk.observe_many("c", [])  # nothing observed: a series of zeros, like a Histogram's labels("c")
    reference.labels("c")

    def lines(registry: CollectorRegistry) -> tuple[list[str], dict[str, float]]:
        text = generate_latest(registry).decode().splitlines()
        sums = {line.split()[0]: float(line.split()[1]) for line in text if line.startswith("h_seconds_sum")}
        return [line for line in text if "_created" not in line and "_sum" not in line], sums

    (our_lines, our_sums), (their_lines, their_sums) = lines(ours), lines(theirs)
    assert our_lines == their_lines
    assert our_sums == pytest.approx(their_sums)  # summed in another order


def test_batch_processor_commits_only_acknowledged_batches_in_order() -> None:
    cfg = config()
    producer = FakeProducer()
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer)
    processor = app.cdcnorm_processor
    tp0, tp1 = TP("src.canal", 0), TP("src.canal", 1)

    async def run() -> None:
        await processor.process({tp0: records("src.canal", 0, [(None, CANAL_INSERT)] * 2)})
        await processor.wait_sent()
        first = list(producer.batches)
        await processor.process({tp0: records("src.canal", 0, [(None, CANAL_DELETE)], first=2),
                                 tp1: records("src.canal", 1, [(None, CANAL_INSERT)])})
        await processor.wait_sent()
        # the second batch is acknowledged first: nothing may be committed before the first
        for *_, fut in producer.batches[len(first):]:
            fut.set_result(None)
        await asyncio.sleep(0.01)
        assert processor.committable() == {}
        for *_, fut in first:
            fut.set_result(None)
        await processor.drain()
        assert processor.committable() == {tp0: 3, tp1: 1}
        processor.committed({tp0: 3})
        assert processor.committable() == {tp1: 1}
        await processor.stop()

    asyncio.run(run())


def test_batch_processor_produce_failure_is_fatal_and_commits_nothing_after() -> None:
    cfg = config()
    producer = FakeProducer()
    fatal: list[BaseException] = []
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer, on_fatal=fatal.append)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)

    async def run() -> None:
        await processor.process({tp: records("src.canal", 0, [(None, CANAL_INSERT)])})
        await processor.process({tp: records("src.canal", 0, [(None, CANAL_INSERT)], first=1)})
        await processor.wait_sent()
        producer.batches[0][3].set_exception(RuntimeError("broker down"))
        await processor.drain()
        producer.ack()
        await asyncio.sleep(0.01)
        assert processor.committable() == {}
        await processor.stop()

    asyncio.run(run())
    assert len(fatal) == 1 and "broker down" in str(fatal[0])
    assert app.cdcnorm_state.fatal is fatal[0]


def test_batch_processor_errors_fail_stops_before_the_bad_message() -> None:
    cfg = config(errors="fail")
    producer = FakeProducer()
    fatal: list[BaseException] = []
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer, on_fatal=fatal.append)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)

    async def run() -> None:
        batch = records("src.canal", 0, [(None, CANAL_INSERT), (None, b"garbage"), (None, CANAL_INSERT)])
        task = asyncio.ensure_future(processor.process({tp: batch}))
        await _wait_for(lambda: bool(producer.batches))
        producer.ack()
        await _wait_for(lambda: bool(fatal))
        assert processor.committable() == {tp: 1}, "the good message before the bad one only"
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await processor.stop()

    asyncio.run(run())
    assert isinstance(fatal[0], FatalMessageError)
    assert len(producer.sent) == 2  # the first message's records only


async def _wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def test_murmur2_matches_the_java_partitioner() -> None:
    import os

    from aiokafka.partitioner import murmur2 as reference

    for n in range(0, 260):
        data = os.urandom(n)
        assert murmur2(data) == reference(data), n


def test_murmur2_many_matches_one_by_one() -> None:
    import os
    import random

    rng = random.Random(7)
    keys = [os.urandom(rng.choice([0, 1, 2, 3, 5, 8, 61, 62, 170])) for _ in range(500)]
    assert murmur2_many(keys) == [murmur2(k) for k in keys]


def test_batch_processor_retries_while_the_state_store_is_down() -> None:
    cfg = config()
    cfg = cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"retry_initial_s": 0.01, "retry_max_s": 0.02})})
    n = normalizer(cfg)
    real = n.process
    failures = [StateStoreError("redis down"), StateStoreError("redis down")]
    seen_not_ready: list[bool] = []

    def flaky(message: Message, runtime: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(message, runtime)

    n.process = flaky  # type: ignore[method-assign]
    producer = FakeProducer()
    app = create_app(cfg, normalizer=n, producer=producer)
    processor, state = app.cdcnorm_processor, app.cdcnorm_state
    state.started = state.joined = True

    async def run() -> None:
        async def watch() -> None:
            while True:
                seen_not_ready.append(not state.ready)
                await asyncio.sleep(0.002)

        watcher = asyncio.ensure_future(watch())
        await processor.process({TP("src.canal", 0): records("src.canal", 0, [(None, CANAL_INSERT)])})
        watcher.cancel()
        await processor.wait_sent()
        producer.ack()
        await processor.drain()
        assert processor.committable() == {TP("src.canal", 0): 1}
        await processor.stop()

    asyncio.run(run())
    assert not failures and any(seen_not_ready) and state.ready
    assert [s[0] for s in producer.sent] == ["out.shop.users", "out.shop.users"]


def test_batch_processor_does_not_wait_for_the_producer_to_take_batches() -> None:
    class SlowProducer(FakeProducer):
        """Takes a batch only when allowed (aiokafka waits while a partition's batch is queued)."""

        def __init__(self) -> None:
            super().__init__()
            self.allow = asyncio.Event()

        async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Awaitable[Any]:
            await self.allow.wait()
            return await super().send_batch(batch, topic, partition=partition)

    cfg = config()
    producer = SlowProducer()
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)

    async def run() -> None:
        await asyncio.wait_for(processor.process({tp: records("src.canal", 0, [(None, CANAL_INSERT)])}), 5)
        await asyncio.wait_for(processor.process({tp: records("src.canal", 0, [(None, CANAL_DELETE)], first=1)}), 5)
        assert producer.batches == [] and processor.inflight == 2
        producer.allow.set()
        await processor.wait_sent()
        producer.ack()
        await processor.drain()
        assert processor.committable() == {tp: 2}
        await processor.stop()

    asyncio.run(run())
    ops = [orjson.loads(s[2])["payload"]["op"] if s[2] else None for s in producer.sent]
    assert sorted(ops, key=str) == sorted(["c", "c", "d", None], key=str)


def test_batch_processor_waits_at_the_byte_bound_mid_batch_and_loses_nothing() -> None:
    """worker.max_inflight_bytes: 30 dead letters of ~1 KiB in one fetched batch, bound 4 KiB. The
    processor hands over parts of the batch and waits for their acknowledgements: never more than
    the bound plus one message's records unacknowledged, no offset committable before its records
    are acknowledged, every dead letter sent once and in order."""
    cfg = parse_config({"topic_prefix": "out", "web": {"enabled": False}, "worker": {"max_inflight_bytes": 4096},
                        "topics": [{"name": "src.canal", "format": "canal-json", "dlq_context_headers": False}]})
    producer = FakeProducer()
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)
    bad = [(b"k%02d" % i, b"{" + b"%02d" % i + b"x" * 1021) for i in range(30)]  # 1024 bytes + key: no JSON
    peaks: list[int] = []

    async def run() -> None:
        task = asyncio.ensure_future(processor.process({tp: records("src.canal", 0, bad)}))
        while not task.done():
            await asyncio.sleep(0.01)
            unacked = [b for b in producer.batches if not b[3].done()]
            peaks.append(sum(len(k or b"") + len(v or b"") for *_, batch, _ in unacked for k, v, _ in batch.records))
            acked_offsets = processor.committable().get(tp, 0)
            acked_records = sum(len(b[2].records) for b in producer.batches if b[3].done())
            assert acked_offsets <= acked_records  # nothing committable before it is acknowledged
            if unacked:
                unacked[0][3].set_result(None)  # the broker acknowledges one batch at a time
        producer.ack()
        await processor.drain()
        assert processor.committable() == {tp: 30}
        await processor.stop()

    asyncio.run(asyncio.wait_for(run(), 10))
    assert [(k, v) for _, k, v, _ in producer.sent] == bad
    assert max(peaks) <= 4096 + 1027, peaks
    assert len(producer.batches) >= 7  # handed over in parts of at most ~4 KiB
    assert processor.normalizer.metrics.backpressure_waits._value.get() >= 6


def test_a_record_above_max_record_bytes_dead_letters_its_message_and_the_rest_goes_on() -> None:
    """The check before producing: the message of a too large record is dead-lettered whole (none
    of its records produced), with the reason; the messages around it are not affected."""
    wide = orjson.loads(CANAL_INSERT)
    wide.update(type="UPDATE", data=[{"id": "9", "name": "w" * 40_000, "email": "w@x"}], old=[{"email": "v@x"}])
    cfg = parse_config({"topic_prefix": "out", "web": {"enabled": False}, "worker": {"max_record_bytes": 65_536},
                        "topics": [{"name": "src.canal", "format": "canal-json"}]})
    producer = FakeProducer()
    app = create_app(cfg, normalizer=normalizer(cfg), producer=producer)
    processor = app.cdcnorm_processor
    tp = TP("src.canal", 0)
    source = orjson.dumps(wide)

    async def run() -> None:
        await processor.process({tp: records("src.canal", 0, [(b"a", CANAL_INSERT), (b"w", source), (b"b", CANAL_DELETE)])})
        await processor.wait_sent()
        producer.ack()
        await processor.drain()
        assert processor.committable() == {tp: 3}
        await processor.stop()

    asyncio.run(run())
    sent = producer.sent
    assert [s[0] for s in sent].count("out.shop.users") == 4  # 2 inserts, a delete and its tombstone
    # the update's before and after images of the 40 kB row (80 kB) are refused, its 40 kB message is not
    assert all(b"w" * 1000 not in (s[2] or b"") for s in sent if s[0] != "out.dlq")
    ((_, key, value, headers),) = [s for s in sent if s[0] == "out.dlq"]
    h = dict(headers)
    assert (key, value) == (b"w", source)  # the source message itself: it fits
    assert h[ERROR_CLASS] == b"service.dlq.RecordTooLargeError" and h["__connect.errors.stage"] == b"KAFKA_PRODUCE"
    assert (h[ERROR_TOPIC], h[ERROR_PARTITION], h[ERROR_OFFSET]) == (b"src.canal", b"0", b"1")
    assert h["__cdcnorm.too_large.topic"] == b"out.shop.users" and h["__cdcnorm.too_large.limit"] == b"65536"
    assert int(h["__cdcnorm.too_large.bytes"]) > 65_536
    assert b"exceeds worker.max_record_bytes=65536" in h["__connect.errors.exception.message"]
    assert processor.normalizer.metrics.dlq.labels("src.canal", "canal-json", "RecordTooLargeError")._value.get() == 1
