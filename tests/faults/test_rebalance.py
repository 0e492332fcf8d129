"""Rebalances while the stream flows: nothing fetched across a generation change is lost.

A Canal JSON stream (3 tables, per-key ``ver``, see :mod:`tests.faults.workload`) is produced
at a steady rate into a 4-partition source topic while worker-1 consumes it. Mid-stream a second
worker joins (worker-1 keeps two partitions and gives two away), later it is stopped again (its
partitions are revoked back to worker-1); the stream goes on throughout. At the end every change
must be on the normalized topics at least once, in per-key order (replayed duplicates are
allowed: at-least-once), and no committed offset the group ever had may lie beyond a source
message whose change never arrived (a commit past unprocessed records is data loss).

Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.local import create_topics, wait_for
from tests.faults.procs import worker_config
from tests.faults.workload import DB, TABLES, SteadyProducer, check_order, generate, read_all
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

PARTITIONS = 4
KEYS_PER_TABLE = 60
SEED = 20261130
RATE = 250  # source messages per second
MAX_CHANGES = 60_000  # the stream is produced until the scenario ends; this is only its bound
# messages worker-1 consumes before worker-2 starts / after each rebalance settled
WARMUP, AFTER_JOIN, AFTER_LEAVE = 600, 1000, 1000


class CommitSampler:
    """Reads the group's committed offsets every 0.3 s in a thread (one reader, not a member)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        self._tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.samples: list[tuple[float, list[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-sampler", daemon=True)
        self._thread.start()

    def now(self) -> list[int]:
        return [tp.offset if tp.offset >= 0 else -1 for tp in self._consumer.committed(self._tps, timeout=10)]

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self.samples.append((time.monotonic(), self.now()))
            except Exception:  # a slow answer: the next sample
                continue

    def close(self) -> list[int]:
        self._stop.set()
        self._thread.join(20)
        last = self.now()
        self.samples.append((time.monotonic(), last))
        self._consumer.close()
        return last


def _runs(offsets: list[int]) -> list[str]:
    """``[3, 4, 5, 9]`` -> ``["3-5", "9"]``."""
    runs: list[list[int]] = []
    for o in sorted(offsets):
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    return [f"{a}-{b}" if a != b else str(a) for a, b in runs]


def _assigned(worker: WorkerProcess, topic: str) -> list[str]:
    return [p for p in worker.readiness().get("assigned_partitions", []) if p.startswith(f"{topic}[")]


def _consumed(worker: WorkerProcess, topic: str) -> int:
    try:
        return int(worker.total("cdcnorm_messages_in_total", topic=topic))
    except OSError:
        return -1


def test_rebalance_mid_stream_loses_nothing(kafka_bootstrap: str, redis_url: str, redis_prefix: str,
                                            tmp_path: Path) -> None:
    prefix = f"rb{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    outputs = [f"{prefix}.{DB}.{t}" for t in TABLES]
    create_topics(kafka_bootstrap, [source], partitions=PARTITIONS)
    create_topics(kafka_bootstrap, outputs, partitions=2)
    config = worker_config(kafka_bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    group = config["worker"]["app_id"]
    full = generate(MAX_CHANGES, KEYS_PER_TABLE, SEED)
    producer = SteadyProducer(kafka_bootstrap, source, full.messages, RATE)
    sampler: CommitSampler | None = None
    injected: list[str] = []
    started = time.monotonic()

    def at() -> str:
        return f"t={time.monotonic() - started:.1f}s produced={producer.sent}"

    first = WorkerProcess(config, tmp_path, "worker-1")
    second: WorkerProcess | None = None
    consumed: dict[str, int] = {}
    try:
        first.wait_ready(90, partitions=PARTITIONS)
        sampler = CommitSampler(kafka_bootstrap, group, source)
        producer.start()
        wait_for(lambda: _consumed(first, source) >= WARMUP, 60, f"worker-1 consuming {WARMUP}", 0.1)

        second = WorkerProcess(config, tmp_path, "worker-2")
        injected.append(f"worker-2 started at {at()} (worker-1 consumed {_consumed(first, source)})")
        wait_for(lambda: second is not None and len(_assigned(first, source)) + len(_assigned(second, source)) == PARTITIONS
                 and len(_assigned(second, source)) > 0 and second.readiness().get("ready") is True,
                 90, "the group of two", 0.2)
        kept = _assigned(first, source)
        injected.append(f"group of two at {at()}: worker-1 kept {kept}, worker-2 got {_assigned(second, source)}")
        base = _consumed(first, source) + _consumed(second, source)
        wait_for(lambda: second is not None and _consumed(first, source) + _consumed(second, source) >= base + AFTER_JOIN,
                 90, f"the group of two consuming {AFTER_JOIN}", 0.1)

        consumed["worker-2"] = _consumed(second, source)
        second.stop()
        injected.append(f"worker-2 stopped (SIGTERM, leaves the group) at {at()} after consuming {consumed['worker-2']}")
        wait_for(lambda: len(_assigned(first, source)) == PARTITIONS, 90, "worker-1 holding every partition again", 0.2)
        injected.append(f"worker-1 holds all {PARTITIONS} partitions again at {at()}")
        base = _consumed(first, source)
        wait_for(lambda: _consumed(first, source) >= base + AFTER_LEAVE, 90, f"worker-1 consuming {AFTER_LEAVE} more", 0.1)

        produced = producer.finish()
        ends = producer.ends()
        injected.append(f"producing stopped at {at()}: {produced} messages, source partition ends {ends}")

        def all_committed() -> bool:
            if not first.process.running:
                raise RuntimeError(f"worker-1 exited:\n{first.process.log_tail()}")
            assert sampler is not None
            got = sampler.now()
            return all(got[p] >= end for p, end in ends.items())

        wait_for(all_committed, 120, f"group {group} committing {ends}", 0.3)
        consumed["worker-1"] = _consumed(first, source)
    finally:
        if producer._thread is not None and producer._thread.is_alive():
            producer.finish()
        for wk in (second, first):
            if wk is not None:
                wk.stop()
        final = sampler.close() if sampler is not None else []

    for line in injected:
        print("injected:", line)
    stream = generate(produced, KEYS_PER_TABLE, SEED)  # the produced prefix (generate is prefix-stable)
    assert stream.messages == full.messages[:produced]
    records = read_all(kafka_bootstrap, outputs, idle_s=2.0)
    report = check_order(records, prefix, stream)

    # the source offsets whose change reached the normalized topics
    delivered: set[tuple[str, int, int]] = set()
    for r in records:
        if r.value is not None:
            payload = orjson.loads(r.value)["payload"]
            image = payload["before"] if payload["op"] == "d" else payload["after"]
            delivered.add((r.topic.removeprefix(f"{prefix}.{DB}."), int(image["id"]), int(image["ver"])))
    lost: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for i, (_key, value) in enumerate(stream.messages):
        body = orjson.loads(value)
        row = body["data"][0]
        if (body["table"], int(row["id"]), int(row["ver"])) not in delivered:
            partition, offset = producer.placed[i]
            lost[partition].append(offset)
    first_lost = {p: min(offs) if offs else None for p, offs in lost.items()}
    # a committed offset beyond a lost message: the group committed past records it never processed
    past = [
        f"t={t - started:.1f}s committed {offsets}"
        for t, offsets in (sampler.samples if sampler is not None else [])
        if any(first_lost[p] is not None and offsets[p] > first_lost[p] for p in range(PARTITIONS))  # type: ignore[operator]
    ]
    print(f"counted: produced={produced} {report.line()}; consumed per worker {consumed}; "
          f"final committed {final} (ends {ends})")
    print(f"counted: lost per source partition {({p: len(o) for p, o in lost.items()})}, "
          f"lost source offsets {({p: _runs(o)[:6] for p, o in lost.items() if o})}")
    print(f"counted: {len(sampler.samples) if sampler else 0} committed-offset samples, "
          f"{len(past)} beyond a lost message{': first ' + past[0] if past else ''}")
    assert report.missing == 0, f"{report.missing} changes never reached the normalized topics"
    assert not report.out_of_order, report.out_of_order[:5]
    assert not report.split_keys, report.split_keys[:5]
    assert report.changes - report.duplicates == stream.changes
    assert not past, past[:3]
    assert all(final[p] <= end for p, end in ends.items()), (final, ends)  # never beyond the source
    assert consumed["worker-2"] > 0


def test_rewind_only_moves_assigned_positions_back() -> None:
    """``_rewind_positions`` on aiokafka's own subscription state: a position beyond the first
    dropped offset goes back to it; one already at or before it, one awaiting its reset (a new
    assignment) and a partition not assigned are left alone."""
    import asyncio

    from aiokafka.consumer.subscription_state import SubscriptionState
    from aiokafka.structs import TopicPartition
    from faust.types import TP

    from service.transport import _rewind_positions

    class Consumer:
        def __init__(self) -> None:
            self._subscription = SubscriptionState()
            self.seeks: list[tuple[Any, int]] = []

        def seek(self, tp: Any, offset: int) -> None:
            self.seeks.append((tp, offset))
            self._subscription.seek(tp, offset)

    async def scenario() -> None:
        consumer = Consumer()
        subs = consumer._subscription
        subs.subscribe({"src"})
        tps = [TopicPartition("src", p) for p in range(4)]
        subs.assign_from_subscribed(set(tps[:3]))
        assignment = subs.subscription.assignment
        assignment.state_value(tps[0]).reset_to(100)  # fetched 60..99, dropped: back to 60
        assignment.state_value(tps[1]).reset_to(40)  # already rewound below the dropped 60
        # tps[2] awaits its reset (committed offset); tps[3] is not assigned
        dropped = {TP("src", 0): 60, TP("src", 1): 60, TP("src", 2): 5, TP("src", 3): 7}
        moved = await _rewind_positions(consumer, dropped)
        assert moved == {TP("src", 0): (100, 60)}
        assert consumer.seeks == [(TP("src", 0), 60)]
        assert assignment.state_value(tps[0]).position == 60
        assert assignment.state_value(tps[1]).position == 40
        assert not assignment.state_value(tps[2]).has_valid_position

        subs.assign_from_subscribed({tps[0]})  # a new assignment: its positions await their reset
        assert await _rewind_positions(consumer, {TP("src", 0): 10}) == {}
        assert len(consumer.seeks) == 1

    asyncio.run(scenario())
