"""Reading offset ranges as the read tasks do (sink.source.read_task), against both real brokers:
Apache Kafka, and Tansu, whose high watermarks are wrong (the base offset of a partition's last
record batch, plus one). Every record is read once, in order, however the ranges are planned and
cut; a planned end below the partition's end (Tansu's watermark, or a range cut by the budget) is
read on to the end where a fetch returns nothing."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from service.local import LocalBroker, create_topics, start_broker
from sink.changes import SinkChange
from sink.source import BadRecord, Range, RangeRead, ReadTask, parser_for, read_task, reader_conf
from tests.sink.history import ORDERS
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

pytestmark = [pytest.mark.integration]

STALL = 10.0


def _produce(broker: LocalBroker, topic: str, partitions: int, per_partition: int, batches: int = 3) -> None:
    """``per_partition`` orders per partition, produced in ``batches`` record batches each."""
    create_topics(broker.address, [topic], partitions=partitions)
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 50})
    seq = 0
    for _ in range(batches):
        for p in range(partitions):
            for _i in range(per_partition // batches):
                seq += 1
                row = {"id": seq, "customer": f"c{seq}", "amount": None, "created": None, "day": None}
                event = ChangeEvent(Operation.CREATE, ORDERS, None, row, SourceInfo("shop", sequence=f"{seq:012d}"))
                (rec,) = emit([event], EmitOptions(prefix="cdcnorm"))
                producer.produce(topic, key=rec.key_bytes(), value=rec.value_bytes(), partition=p)
        producer.flush()


def _read(broker: LocalBroker, task: ReadTask) -> tuple[list[SinkChange], dict[tuple[str, int], RangeRead], list[BadRecord]]:
    items = list(read_task(task, reader_conf({}, broker.address, "test-source"), parser_for(None), STALL))
    changes = [i for i in items if isinstance(i, SinkChange)]
    reads = {i.tp: i for i in items if isinstance(i, RangeRead)}
    return changes, reads, [i for i in items if isinstance(i, BadRecord)]


def _offsets(changes: list[SinkChange]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for c in changes:
        out.setdefault((c.topic, c.partition), []).append(c.offset)
    return out


@pytest.fixture(scope="module", params=["kafka", "tansu"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """Each test runs on Apache Kafka and on Tansu (whatever CDCNORM_TEST_BROKER says)."""
    started = start_broker(request.param, log_dir=Path(tmp_path_factory.mktemp(request.param)))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def orders(broker: LocalBroker) -> Iterator[str]:
    _produce(broker, "src.orders", partitions=3, per_partition=60)
    yield "src.orders"


def test_a_wrong_watermark_still_reads_the_whole_partition(broker: LocalBroker, orders: str) -> None:
    # Tansu's high watermark of these partitions is 41 (the last batch starts at 40); Kafka's is 60
    changes, reads, bad = _read(broker, ReadTask(tuple(Range(orders, p, 0, 41) for p in range(3)), 10_000))
    assert not bad
    assert _offsets(changes) == {(orders, p): list(range(60)) for p in range(3)}
    assert all(r.next_offset == 60 and r.records == 60 and r.exhausted for r in reads.values())


def test_a_range_with_nothing_new_ends_at_once(broker: LocalBroker, orders: str) -> None:
    started = time.monotonic()
    changes, reads, _ = _read(broker, ReadTask((Range(orders, 0, 60, 61),), 100))
    assert changes == [] and reads[(orders, 0)].next_offset == 60 and reads[(orders, 0)].exhausted
    assert time.monotonic() - started < STALL / 2, "waited for the stall bound, not the end of the partition"


def test_the_budget_is_shared_and_what_is_left_is_read_next_time(broker: LocalBroker, orders: str) -> None:
    ranges = [Range(orders, p, 0, 41) for p in range(3)]
    seen: Counter[tuple[str, int, int]] = Counter()
    rounds = 0
    while ranges:
        rounds += 1
        changes, reads, _ = _read(broker, ReadTask(tuple(ranges), 50))
        assert len(changes) <= 50
        per = Counter((c.topic, c.partition) for c in changes)
        if rounds == 1:  # a fair share each: no partition starves behind another
            assert all(n >= 16 for n in per.values()) and len(per) == 3, per
        seen.update((c.topic, c.partition, c.offset) for c in changes)
        ranges = [Range(r.topic, r.partition, r.next_offset, r.next_offset + 1) for r in reads.values() if not r.exhausted]
    assert max(seen.values()) == 1, "a record read twice"
    assert sorted(seen) == [(orders, p, o) for p in range(3) for o in range(60)]
    assert rounds == 4


def test_a_capped_range_takes_the_budget_the_others_left(broker: LocalBroker, orders: str) -> None:
    """Partition 0 has 60 records, the others 10 left: with 90 of budget, partition 0 reads
    past its share of 30 once the others are done, without skipping what arrived after its pause."""
    ranges = (Range(orders, 0, 0, 41), Range(orders, 1, 50, 51), Range(orders, 2, 50, 51))
    changes, reads, _ = _read(broker, ReadTask(ranges, 90))
    assert _offsets(changes)[(orders, 0)] == list(range(60))
    assert all(r.exhausted for r in reads.values()) and len(changes) == 80


def test_a_range_is_exhausted_only_where_a_fetch_returned_nothing(broker: LocalBroker) -> None:
    """A planned end below the partition's end (a wrong or stale watermark) does not end the
    range: with small fetches, the records past it arrive in later fetches, and the range reads
    on to the fetch that returns nothing."""
    topic = "src.small-fetches"
    _produce(broker, topic, partitions=1, per_partition=60, batches=60)
    items = list(read_task(ReadTask((Range(topic, 0, 0, 30),), 10_000),
                           reader_conf({"max.partition.fetch.bytes": 512, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
                                       broker.address, "t"),
                           parser_for(None), STALL))
    changes = [i for i in items if isinstance(i, SinkChange)]
    (read,) = [i for i in items if isinstance(i, RangeRead)]
    assert [c.offset for c in changes] == list(range(60))
    assert read.exhausted and read.next_offset == 60


def test_a_budget_that_runs_out_at_the_planned_end_leaves_the_range_open(broker: LocalBroker, orders: str) -> None:
    """Tansu's watermark of partition 0 is 41, inside its last batch (40-59): a budget that ends
    there is no end of the partition, and the next plan must read it again."""
    changes, reads, _ = _read(broker, ReadTask((Range(orders, 0, 0, 41),), 41))
    assert _offsets(changes)[(orders, 0)] == list(range(41))
    assert reads[(orders, 0)].next_offset == 41 and not reads[(orders, 0)].exhausted
    changes, reads, _ = _read(broker, ReadTask((Range(orders, 0, 41, 42),), 100))
    assert _offsets(changes)[(orders, 0)] == list(range(41, 60)) and reads[(orders, 0)].exhausted


def test_records_that_are_not_changes_are_reported_and_the_rest_is_read(broker: LocalBroker) -> None:
    create_topics(broker.address, ["src.mixed"], partitions=1)
    producer = Producer({"bootstrap.servers": broker.address})
    good = [r for r in emit([ChangeEvent(Operation.CREATE, ORDERS, None, {"id": 1, "customer": "x", "amount": None,
                                                                        "created": None, "day": None},
                                         SourceInfo("shop", sequence="000000000001"))], EmitOptions(prefix="cdcnorm"))]
    producer.produce("src.mixed", value=b"{not json", partition=0)
    producer.produce("src.mixed", key=good[0].key_bytes(), value=good[0].value_bytes(), partition=0)
    producer.produce("src.mixed", key=b'{"id":2}', value=None, partition=0)  # a tombstone: not a change
    producer.flush()
    changes, reads, bad = _read(broker, ReadTask((Range("src.mixed", 0, 0, 1),), 100))
    assert [c.offset for c in changes] == [1]
    assert [(b.offset, "not JSON" in b.reason) for b in bad] == [(0, True)]
    assert reads[("src.mixed", 0)].next_offset == 3 and reads[("src.mixed", 0)].records == 3
