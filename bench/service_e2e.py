"""Worker end-to-end throughput against a bare consume → produce loop, on Apache Kafka and on
Tansu, each ratio measured on one broker in the same run.

The workload is ``N`` canal-json messages built from the captured messages of
``tests/data/canal-json`` (every non-DDL message with a primary key, up to 2 KB; 1-9 rows each),
with the primary key of every row rewritten so that every output record has a distinct key.
For each broker (``--broker both``, the default: Apache Kafka 4.1 first, one KRaft node, then
Tansu; each started with :func:`service.local.start_broker` and stopped before the next) they
are produced once to a 4-partition source topic, then read, in rounds, by:

* **baseline**: a bare aiokafka loop in its own process: ``getmany`` → ``send`` the same bytes to
  another topic (not awaited per message) → await the acks of the batch → ``commit``. Its
  consumer fetches as the worker's does (records per poll, bytes per partition, fetch wait), its
  producer acknowledges as the worker's (``acks=all``, idempotent, linger 5 ms). Its output is
  counted (every message must be there);
* **worker**: ``cdcnorm worker`` (the Faust app of :mod:`service.app`) in its own process, with
  the canal-json decoder; the bench polls its ``/metrics`` and samples its CPU time with psutil.
  Its output topics are then read **until no fetch returns a record** (never by high
  watermark: Tansu's are wrong, see ENVIRONMENT.md) and the records counted against the count
  the pipeline produces offline for the same messages.

Reported per broker: messages/s of each and the ratio (target >= 0.7 on Kafka, >= 0.5 on Tansu,
one worker process), CPU per message (process CPU seconds / messages) of each, the broker's own
CPU per message during each, the share of the machine's cores busy, records/s of the worker;
and once, the normalize CPU per message without Kafka.

Run: ``python -m bench.service_e2e [--size tiny|small|full] [--broker both|kafka|tansu]
[--messages N] [--repeats R]``. ``--profile DIR`` runs ``py-spy record`` on the worker of each
broker's first round and writes speedscope JSON to ``DIR/<broker>/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import yaml

from bench.common import (
    BenchReport,
    Ratio,
    bench_parser,
    broker_pids,
    brokers_of,
    jvm_cpu_seconds,
    process_cpu_seconds,
    start_bench_broker,
    stop_bench_broker,
)
from service.local import LocalBroker, LocalProcess, create_topics, free_port, redis_reachable, start_redis

__all__ = [
    "BaselineResult",
    "Broker",
    "CanalWorkload",
    "Mark",
    "WorkerFleet",
    "WorkerResult",
    "canal_workload",
    "count_records",
    "main",
    "produce",
    "run_baseline",
    "run_workers",
]

ROOT = Path(__file__).resolve().parents[1]
CANAL_DIR = ROOT / "tests" / "data" / "canal-json"
MESSAGES = {"tiny": 20_000, "small": 50_000, "full": 200_000}
TARGETS = {"kafka": 0.7, "tansu": 0.5}
"""The worker's share of the bare loop's messages/s per broker: 0.7 on Apache Kafka (the
issue's), 0.5 on Tansu (the earlier rounds')."""
BROKER_NAMES = {"kafka": "Kafka", "tansu": "Tansu"}
PREFIX_KEY_STRIDE = 10  # rows per message < 10, so key = message index * 10 + row index is unique


# ----------------------------------------------------------------------------- workload


@dataclass
class CanalWorkload:
    """``messages`` (key, value) to produce, and what the worker must turn them into."""

    messages: list[tuple[bytes, bytes]]
    expected_records: int
    output_topics: list[str]
    prefix: str

    @property
    def bytes(self) -> int:
        return sum(len(v) for _, v in self.messages)

    def renamed(self, prefix: str) -> CanalWorkload:
        """The same messages for a worker with another ``topic_prefix`` (its own output topics)."""
        return CanalWorkload(self.messages, self.expected_records,
                             [t.replace(self.prefix, prefix, 1) for t in self.output_topics], prefix)


def canal_templates(max_bytes: int = 2048) -> list[dict[str, Any]]:
    """Every captured canal-json data message with a primary key (no DDL, no key change)."""
    out = []
    for path in sorted(CANAL_DIR.glob("*.txt")):
        for line in path.read_bytes().splitlines():
            line = line.strip()
            if not line.startswith(b"{") or len(line) > max_bytes:
                continue
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            pk = msg.get("pkNames") or []
            rows = msg.get("data") or []
            if msg.get("isDdl") or not pk or not rows or len(rows) >= PREFIX_KEY_STRIDE:
                continue
            if any(p in old for old in (msg.get("old") or []) for p in pk):
                continue
            if all(all(p in row for p in pk) for row in rows):
                out.append(msg)
    return out


def _with_keys(template: dict[str, Any], index: int) -> dict[str, Any]:
    msg = dict(template)
    pk = msg["pkNames"]
    msg["data"] = [
        {**row, **{p: str(index * PREFIX_KEY_STRIDE + j) for p in pk}} for j, row in enumerate(msg["data"])
    ]
    return msg


def canal_workload(n: int, prefix: str, source_topic: str = "src") -> CanalWorkload:
    """``n`` canal messages cycling over the templates, each row with its own primary key.

    The expected record count comes from the real pipeline run on the first message of each
    template (the count does not depend on the key values).
    """
    from service.app import Normalizer
    from service.config import parse_config
    from transforms.decoders import Message
    from transforms.metadata import InMemoryMetadataStore

    templates = canal_templates()
    cfg = parse_config({"topic_prefix": prefix, "web": {"enabled": False},
                        "topics": [{"name": source_topic, "format": "canal-json"}]})
    normalizer = Normalizer(cfg, InMemoryMetadataStore())
    runtime = normalizer.runtime_for(source_topic)
    assert runtime is not None
    per_template: list[int] = []
    topics: set[str] = set()
    for i, template in enumerate(templates):
        outcome = normalizer.process(Message(orjson.dumps(_with_keys(template, i)), topic=source_topic), runtime)
        if outcome.dlq is not None:
            raise RuntimeError(f"template {i} does not decode: {outcome.error_class}")
        per_template.append(len(outcome.records))
        topics.update(normalizer.output_topic(r.topic) for r in outcome.records)
    messages = []
    expected = 0
    for i in range(n):
        t = i % len(templates)
        msg = _with_keys(templates[t], i)
        key = f"{msg['database']}.{msg['table']}:{i}".encode()
        messages.append((key, orjson.dumps(msg)))
        expected += per_template[t]
    return CanalWorkload(messages, expected, sorted(topics), prefix)


def pipeline_cpu_us(workload: CanalWorkload, source_topic: str, sample: int = 20_000, repeats: int = 3) -> float:
    """CPU microseconds per message of the normalization alone (no Kafka), best of ``repeats``.

    What the worker does per message besides Kafka and Faust: ``Normalizer.process`` (decode,
    chain, emit) and the key/value serialization of every record, on the first ``sample``
    messages of the workload, in this process.
    """
    from service.app import Normalizer
    from service.config import parse_config
    from transforms.decoders import Message
    from transforms.metadata import InMemoryMetadataStore

    cfg = parse_config({"topic_prefix": workload.prefix, "web": {"enabled": False},
                        "topics": [{"name": source_topic, "format": "canal-json"}]})
    normalizer = Normalizer(cfg, InMemoryMetadataStore())
    runtime = normalizer.runtime_for(source_topic)
    assert runtime is not None
    messages = [Message(value, key, source_topic, 0, i) for i, (key, value) in enumerate(workload.messages[:sample])]
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for message in messages:
            for record in normalizer.process(message, runtime).records:
                record.key_bytes()
                record.value_bytes()
        best = min(best, time.process_time() - started)
    return best / len(messages) * 1e6


# ----------------------------------------------------------------------------- broker helpers


@dataclass
class Broker:
    """A broker address and the local processes (the broker, Redis) this bench started."""

    bootstrap: str
    redis_url: str
    kind: str = "tansu"
    description: str = ""
    local: LocalBroker | None = None
    started: list[LocalProcess] = field(default_factory=list)

    @classmethod
    def start(cls, kind: str, bootstrap: str | None, log_dir: Path) -> Broker:
        """Start a local broker of ``kind`` (``kafka`` or ``tansu``), unless ``bootstrap`` names
        a running one (of that kind), and Redis unless one answers on the default port."""
        local = None
        if bootstrap is None:
            local = start_bench_broker(kind, log_dir)
            bootstrap, description = local.address, local.description
        else:
            description = f"{BROKER_NAMES.get(kind, kind)} on {bootstrap} (not started by the bench)"
        started: list[LocalProcess] = []
        try:
            redis_url = "redis://127.0.0.1:6379/0"
            if not redis_reachable(redis_url):
                server = start_redis(log_dir=log_dir)
                started.append(server)
                redis_url = server.address
        except BaseException:
            if local is not None:
                stop_bench_broker(local)
            raise
        return cls(bootstrap, redis_url, kind, description, local, started)

    @property
    def pids(self) -> list[int]:
        """The broker's processes, when this bench started it (their CPU time is measured)."""
        return broker_pids(self.local) if self.local is not None else []

    def stop(self) -> None:
        for proc in reversed(self.started):
            proc.stop()
        if self.local is not None:
            stop_bench_broker(self.local)


def produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]]) -> float:
    """Produce ``messages`` with confluent-kafka (partitioned by key); the seconds it took."""
    from confluent_kafka import Producer

    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("produce did not complete")
    return time.perf_counter() - started


def count_records(bootstrap: str, topics: Sequence[str], idle_s: float = 2.0, timeout_s: float = 300.0,
                  *, distinct: bool = False, expect: int | None = None, patience_s: float = 30.0) -> dict[str, int]:
    """Records per topic, read from the beginning until no fetch has returned a record for ``idle_s``.

    Never uses high watermarks, on any broker (Tansu reports them per batch, not per record):
    the end is where fetches come back empty. Before the first record arrives (the consumer
    is still finding its partitions' leaders and first offsets), and while fewer than ``expect``
    records were read, the reading waits up to ``patience_s`` of silence instead of ``idle_s``:
    a slow start or a broker catching up is not taken for the end. Records beyond ``expect`` are
    counted all the same (reading goes on until ``idle_s`` of silence).

    With ``distinct``, records with the same key and value count once: the output is
    at-least-once, so a rebalance may replay a batch whose offsets were not committed yet.
    """
    import hashlib

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.max.bytes": 64 * 1024 * 1024})
    counts = dict.fromkeys(topics, 0)
    seen: set[bytes] = set()
    total = 0
    try:
        metadata = consumer.list_topics(timeout=10).topics
        assignment = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in metadata
                      for p in sorted(metadata[t].partitions)]
        if not assignment:
            return counts
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            quiet = time.monotonic() - last
            short = total == 0 or (expect is not None and total < expect)
            if quiet >= (max(idle_s, patience_s) if short else idle_s):
                break
            batch = consumer.consume(10_000, 0.2)
            got = 0
            for msg in batch:
                if msg.error():
                    continue
                got += 1  # a record read, counted or not
                if distinct:
                    digest = hashlib.blake2b(digest_size=16)
                    for part in (msg.topic() or "").encode(), msg.key() or b"", msg.value() or b"":
                        digest.update(len(part).to_bytes(8, "little"))
                        digest.update(part)
                    if msg.value() is None:
                        digest.update(b"tombstone")
                    if digest.digest() in seen:
                        continue
                    seen.add(digest.digest())
                counts[msg.topic() or ""] = counts.get(msg.topic() or "", 0) + 1
                total += 1
            if got:
                last = time.monotonic()
        return counts
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- baseline


class PerMessage:
    """The per-message figures of a measured interval (the bare loop's or the workers')."""

    messages: int
    seconds: float
    cpu_seconds: float
    broker_cpu_seconds: float
    broker_jit_seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_per_message_us(self) -> float:
        return self.cpu_seconds / self.messages * 1e6

    @property
    def broker_cpu_per_message_us(self) -> float:
        return self.broker_cpu_seconds / self.messages * 1e6

    @property
    def broker_serving_us(self) -> float:
        """The broker's CPU per message but its JIT compiler's (warming up is not serving)."""
        return (self.broker_cpu_seconds - self.broker_jit_seconds) / self.messages * 1e6


@dataclass
class BaselineResult(PerMessage):
    """The bare aiokafka loop: messages moved, wall seconds, process CPU seconds, and the broker's
    CPU seconds and the machine's busy share over the same interval."""

    messages: int
    seconds: float
    cpu_seconds: float
    copied: int = 0
    broker_cpu_seconds: float = 0.0
    machine_busy: float = 0.0
    broker_jit_seconds: float = 0.0  # the part of broker_cpu_seconds its JIT compiler threads took
    broker_gc_seconds: float = 0.0  # and its garbage collector's threads


FETCH_PARTITION_BYTES = 1024 * 1024
"""The worker's ``max_partition_fetch_bytes``: Faust's ``consumer_max_fetch_size``, which
:mod:`service.app` leaves at its default."""
FETCH_WAIT_MS = 1500
"""The worker's ``fetch_max_wait_ms``: Faust sets it so for its consumer."""


IDEMPOTENT_BASELINE = {"kafka": True, "tansu": False}
"""Whether the bare loop's producer is idempotent, as the worker's is. Tansu answers aiokafka's
``InitProducerId`` with ``UNKNOWN`` (librdkafka's it accepts), so there the loop produces
without it, as in the earlier rounds; ``acks=all`` on both."""


def baseline_settings(worker: dict[str, Any] | None = None, kind: str = "kafka") -> dict[str, Any]:
    """The client settings the bare loop shares with the worker: the records per poll the worker's
    consumer takes (``broker_max_poll_records`` of :func:`service.app._faust_settings` for the
    bench's worker config), the fetch sizes and wait of Faust's consumer, and the producer's
    acknowledgements, idempotence (:data:`IDEMPOTENT_BASELINE`) and linger of the worker's
    (:func:`service.rdkafka.producer_config`)."""
    from service.app import _faust_settings
    from service.config import parse_config
    from service.rdkafka import producer_config

    cfg = parse_config(worker_config("127.0.0.1:9092", "redis://127.0.0.1:6379/0", "bench", "src", 0, worker))
    faust = _faust_settings(cfg, Path(tempfile.gettempdir()))
    rd = producer_config({}, 1 << 20)
    return {
        "max_records": int(faust["broker_max_poll_records"]),
        "max_partition_fetch_bytes": FETCH_PARTITION_BYTES,
        "fetch_max_wait_ms": FETCH_WAIT_MS,
        "acks": rd["acks"],
        "enable_idempotence": bool(rd["enable.idempotence"]) and IDEMPOTENT_BASELINE.get(kind, True),
        "linger_ms": int(rd["linger.ms"]),
    }


async def _baseline_loop(bootstrap: str, source: str, target: str, n: int, settings: dict[str, Any],
                         pids: Sequence[int] = ()) -> dict[str, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    consumer = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id=f"bench-baseline-{uuid.uuid4().hex[:6]}",
        enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
        heartbeat_interval_ms=1000, max_partition_fetch_bytes=settings["max_partition_fetch_bytes"],
        fetch_max_wait_ms=settings["fetch_max_wait_ms"],
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=settings["acks"],
                                enable_idempotence=settings["enable_idempotence"], linger_ms=settings["linger_ms"])
    max_records = settings["max_records"]
    await producer.start()
    await consumer.start()
    seen = 0
    t0 = cpu0 = broker0 = busy0 = 0.0
    jvm0 = (0.0, 0.0)
    try:
        while seen < n:
            batches = await consumer.getmany(timeout_ms=1000, max_records=max_records)
            if not batches:
                continue
            if not seen:
                t0, cpu0 = time.perf_counter(), time.process_time()
                broker0, busy0, jvm0 = process_cpu_seconds(pids), machine_busy_seconds(), jvm_cpu_seconds(pids)
            futures = []
            offsets = {}
            for tp, records in batches.items():
                for r in records:
                    futures.append(await producer.send(target, r.value, key=r.key, headers=r.headers or None))
                offsets[TopicPartition(tp.topic, tp.partition)] = records[-1].offset + 1
                seen += len(records)
            await asyncio.gather(*futures)
            await consumer.commit(offsets)
        t1, cpu1 = time.perf_counter(), time.process_time()
        broker1, busy1, jvm1 = process_cpu_seconds(pids), machine_busy_seconds(), jvm_cpu_seconds(pids)
    finally:
        await consumer.stop()
        await producer.stop()
    return {"messages": seen, "seconds": t1 - t0, "cpu_seconds": cpu1 - cpu0, "broker_cpu_seconds": broker1 - broker0,
            "broker_jit_seconds": jvm1[0] - jvm0[0], "broker_gc_seconds": jvm1[1] - jvm0[1], "machine_busy": (busy1 - busy0) / ((t1 - t0) * (os.cpu_count() or 1))}


def run_baseline(broker: Broker, source: str, n: int, worker: dict[str, Any] | None = None,
                 verify: bool = True) -> BaselineResult:
    """The bare aiokafka consume → produce → commit loop in a child process, output counted
    (unless not ``verify``)."""
    bootstrap = broker.bootstrap
    target = f"{source}-copy-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [target], partitions=4)
    settings = {**baseline_settings(worker, broker.kind), "broker_pids": broker.pids}
    out = subprocess.run(
        [sys.executable, "-m", "bench.service_e2e", "_baseline", bootstrap, source, target, str(n), json.dumps(settings)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"baseline failed: {out.stderr[-2000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    result = BaselineResult(int(data["messages"]), data["seconds"], data["cpu_seconds"],
                            broker_cpu_seconds=data["broker_cpu_seconds"], machine_busy=data["machine_busy"],
                            broker_jit_seconds=data["broker_jit_seconds"], broker_gc_seconds=data["broker_gc_seconds"])
    if verify:
        result.copied = count_records(bootstrap, [target], expect=n)[target]
    return result


# ----------------------------------------------------------------------------- worker


def worker_config(bootstrap: str, redis_url: str, prefix: str, source: str, port: int,
                  worker: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": bootstrap, "session_timeout_s": 6},
        "redis": {"url": redis_url, "key_prefix": f"bench:{prefix}:"},
        "web": {"host": "127.0.0.1", "port": port},
        "worker": {"app_id": f"{prefix}-group", **(worker or {})},
        "topics": [{"name": source, "format": "canal-json"}],
    }


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("#") or not line:
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        out[base] = out.get(base, 0.0) + float(value)
    return out


@dataclass
class WorkerResult(PerMessage):
    """What the worker processes did: messages, records, wall and CPU seconds, peak RSS."""

    processes: int
    messages: int
    seconds: float
    cpu_seconds: float
    records_acked: int
    dlq: int
    peak_rss: int
    rss_samples: list[tuple[float, int, int]] = field(default_factory=list)
    records_read: int = -1
    normalize_seconds: float = 0.0  # the workers' cdcnorm_decode_seconds sum: normalize wall time
    machine_busy: float = 0.0  # the share of all the machine's cores busy (any process) meanwhile
    duplicates: int = 0  # output records read more than once (replays after a rebalance)
    broker_cpu_seconds: float = 0.0  # the broker's processes' CPU meanwhile (when the bench started it)
    broker_jit_seconds: float = 0.0  # the part of it its JIT compiler threads took
    broker_gc_seconds: float = 0.0  # and its garbage collector's threads


class Mark(NamedTuple):
    """Where a measurement starts: the clock, the workers' CPU seconds, the messages consumed so
    far, the machine's busy CPU seconds and the broker's CPU seconds."""

    time: float
    cpu: float
    messages: float
    machine_busy: float
    broker_cpu: float = 0.0
    broker_jvm: tuple[float, float] = (0.0, 0.0)  # the broker's JIT and GC threads' CPU seconds


def machine_busy_seconds() -> float:
    """CPU seconds all the machine's cores have spent not idle since boot (every process)."""
    import psutil

    t = psutil.cpu_times()
    # (guest time is already in user/nice on Linux; steal is another machine's)
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))


class WorkerFleet:
    """``cdcnorm worker`` child processes of one consumer group, each with its own web port."""

    def __init__(self, config: dict[str, Any], processes: int, workdir: Path, profile: Path | None = None,
                 broker_pids: Sequence[int] = ()) -> None:
        self.broker_pids = list(broker_pids)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.logs: list[Path] = []
        self.profilers: list[subprocess.Popen[bytes]] = []
        workdir.mkdir(parents=True, exist_ok=True)
        for i in range(processes):
            port = free_port()
            cfg = {**config, "web": {"host": "127.0.0.1", "port": port}}
            path = workdir / f"worker{i}.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            log = workdir / f"worker{i}.log"
            self.logs.append(log)
            self.ports.append(port)
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "cdcnorm.cli", "worker", "--config", str(path)],
                cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            ))
            if profile is not None:
                profile.mkdir(parents=True, exist_ok=True)
                spy = Path(sys.executable).with_name("py-spy")
                self.profilers.append(subprocess.Popen(
                    [str(spy), "record", "--pid", str(self.procs[-1].pid), "--rate", "200", "--idle", "--threads",
                     "--format", "speedscope", "-o", str(profile / f"worker{i}.speedscope.json")],
                    stdout=subprocess.DEVNULL, stderr=(profile / f"py-spy{i}.log").open("wb"),
                ))

    def _check(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")

    def totals(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for port in self.ports:
            for k, v in _metrics(port).items():
                total[k] = total.get(k, 0.0) + v
        return total

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(self.ports)
        while pending:
            self._check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not ready after {timeout_s}s:\n{self.logs[0].read_text()[-3000:]}")
            for port in list(pending):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                        if resp.status == 200:
                            pending.discard(port)
                except OSError:
                    pass
            time.sleep(0.1)

    def assignments(self) -> list[list[str]]:
        """The partitions each worker reports on ``/readyz`` (empty while not ready)."""
        out = []
        for port in self.ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                    out.append(list(json.loads(resp.read()).get("assigned_partitions", [])))
            except (OSError, ValueError):
                out.append([])
        return out

    def wait_assigned(self, partitions: int, timeout_s: float = 180.0) -> list[list[str]]:
        """Until the workers together own ``partitions`` partitions, each at least one (if it
        can), the same on two polls a second apart (the group has settled)."""
        deadline = time.monotonic() + timeout_s
        previous: list[list[str]] | None = None
        while True:
            self._check()
            current = self.assignments()
            settled = (
                sum(len(a) for a in current) == partitions
                and all(a for a in current[:partitions])
                and current == previous
            )
            if settled:
                return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions not assigned after {timeout_s}s: {current}")
            previous = current
            time.sleep(1.0)

    def cpu_seconds(self) -> float:
        import psutil

        total = 0.0
        for proc in self.procs:
            t = psutil.Process(proc.pid).cpu_times()
            total += t.user + t.system
        return total

    def rss(self) -> list[int]:
        import psutil

        return [int(psutil.Process(p.pid).memory_info().rss) for p in self.procs]

    def mark(self) -> Mark:
        """A start point for :meth:`measure`: now, before any message is consumed."""
        return Mark(time.perf_counter(), self.cpu_seconds(), 0.0, machine_busy_seconds(),
                    process_cpu_seconds(self.broker_pids), jvm_cpu_seconds(self.broker_pids))

    def measure(self, n: int, timeout_s: float, poll_s: float = 0.05, rss_every_s: float = 0.0,
                start: Mark | None = None, max_poll_s: float = 0.5) -> WorkerResult:
        """Poll until ``n`` messages were consumed and every output was acknowledged.

        Without ``start`` the clock starts at the first poll that sees a consumed message, and
        the rate is that of the messages consumed after it. A workload the workers consume
        entirely between two polls cannot be timed that way: that is an error, not a result.

        Each poll is a ``/metrics`` scrape, served on the worker's event loop, which the bare
        loop does not have to serve: once the workers are consuming, the polls are spaced to
        half the time the rest should take at the rate so far (at most ``max_poll_s``, at least
        ``poll_s``), so the end is still seen within ``poll_s`` and the workers answer a few
        scrapes a second instead of twenty.
        """
        deadline = time.monotonic() + timeout_s
        first = start
        peak = 0
        samples: list[tuple[float, int, int]] = []
        last_rss = 0.0
        started = time.monotonic()
        while True:
            self._check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not finish {n} messages in {timeout_s}s: {self.totals()}")
            now = time.perf_counter()
            cpu = self.cpu_seconds()
            try:
                m = self.totals()
            except OSError:
                time.sleep(poll_s)
                continue
            seen = m.get("cdcnorm_messages_in_total", 0.0)
            if rss_every_s and time.monotonic() - last_rss >= rss_every_s:
                last_rss = time.monotonic()
                rss = max(self.rss())
                peak = max(peak, rss)
                samples.append((round(time.monotonic() - started, 2), int(seen), rss))
            if first is None and seen > 0:
                if seen >= n:
                    raise RuntimeError(
                        f"the workers consumed all {n:,} messages before the first poll saw one: too few "
                        "messages to time; run with more (--messages)"
                    )
                first = Mark(now, cpu, seen, machine_busy_seconds(), process_cpu_seconds(self.broker_pids),
                             jvm_cpu_seconds(self.broker_pids))
            if seen >= n and m.get("cdcnorm_inflight_messages", 1.0) == 0:
                assert first is not None
                broker_cpu, jvm = process_cpu_seconds(self.broker_pids), jvm_cpu_seconds(self.broker_pids)
                peak = max(peak, *self.rss())
                return WorkerResult(
                    processes=len(self.procs),
                    messages=int(seen - first.messages),
                    seconds=now - first.time,
                    cpu_seconds=cpu - first.cpu,
                    machine_busy=(machine_busy_seconds() - first.machine_busy) / ((now - first.time) * (os.cpu_count() or 1)),
                    records_acked=int(m.get("cdcnorm_records_out_total", 0)),
                    dlq=int(m.get("cdcnorm_dlq_total", 0)),
                    peak_rss=peak,
                    rss_samples=samples,
                    normalize_seconds=m.get("cdcnorm_decode_seconds_sum", 0.0),
                    broker_cpu_seconds=broker_cpu - first.broker_cpu,
                    broker_jit_seconds=jvm[0] - first.broker_jvm[0],
                    broker_gc_seconds=jvm[1] - first.broker_jvm[1],
                )
            time.sleep(self._next_poll(n, seen, now, first, poll_s, rss_every_s or max_poll_s, max_poll_s))

    @staticmethod
    def _next_poll(n: int, seen: float, now: float, first: Mark | None, poll_s: float, rss_every_s: float,
                   max_poll_s: float) -> float:
        """Seconds to the next poll: ``poll_s`` until the first message and once all are consumed,
        else half the time the remaining messages should take at the rate so far, within
        ``[poll_s, min(max_poll_s, rss_every_s)]``."""
        if first is None or seen >= n or now <= first.time or seen <= first.messages:
            return poll_s
        rate = (seen - first.messages) / (now - first.time)
        return max(poll_s, min(max_poll_s, rss_every_s, (n - seen) / rate / 2))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for spy in self.profilers:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait(10)


def run_workers(
    broker: Broker,
    workload: CanalWorkload,
    source: str,
    processes: int,
    workdir: Path,
    *,
    verify: bool = True,
    profile: Path | None = None,
    rss_every_s: float = 0.0,
    worker: dict[str, Any] | None = None,
) -> WorkerResult:
    """Run ``processes`` workers over the (already produced) source topic until done; verify output.

    The output topics are created first, with the 4 partitions a broker gives an auto-created
    topic, as the bare loop's target topic is: creating 16 topics is not part of what is timed
    (on Kafka it takes the broker part of a second and much CPU, and a deployment has them)."""
    create_topics(broker.bootstrap, workload.output_topics, partitions=4)
    config = worker_config(broker.bootstrap, broker.redis_url, workload.prefix, source, 0, worker)
    fleet = WorkerFleet(config, processes, workdir, profile, broker.pids)
    try:
        n = len(workload.messages)
        fleet.wait_ready()
        result = fleet.measure(n, timeout_s=max(120.0, n / 500), rss_every_s=rss_every_s)
    finally:
        fleet.stop()
    if verify:
        counts = count_records(broker.bootstrap, [*workload.output_topics, f"{workload.prefix}.dlq"],
                               expect=workload.expected_records)
        result.records_read = sum(counts.values())
    return result


# ----------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = bench_parser("worker end-to-end throughput against a bare aiokafka loop, on Kafka and on Tansu",
                          broker="both", both=True)
    parser.add_argument("--messages", type=int, default=None, help="messages (default by --size: "
                        + ", ".join(f"{k} {v:,}" for k, v in MESSAGES.items()) + ")")
    parser.add_argument("--repeats", type=int, default=1, help="baseline/worker rounds per broker (best of)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="rounds per broker before the measured ones, not counted (a Kafka JVM just started "
                        "compiles its hot paths for a while: the first round's broker CPU is half JIT); default 1")
    parser.add_argument("--bootstrap", default=None,
                        help="use this running broker instead of starting one (--broker says which kind it is)")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy speedscope output directory")
    parser.add_argument("--max-inflight", type=int, default=None, help="worker.max_inflight (default: the config's)")
    return parser


def _rounds(repeats: int) -> Iterator[int]:
    yield from range(max(1, repeats))


@dataclass
class BrokerRun:
    """The rounds of one broker: each round's bare loop and worker, and what the broker is."""

    kind: str
    description: str
    baselines: list[BaselineResult] = field(default_factory=list)
    workers: list[WorkerResult] = field(default_factory=list)
    produce_seconds: float = 0.0

    @property
    def best_baseline(self) -> BaselineResult:
        return max(self.baselines, key=lambda b: b.rate)

    @property
    def best_worker(self) -> WorkerResult:
        return max(self.workers, key=lambda w: w.rate)

    @property
    def round_ratios(self) -> list[float]:
        return [w.rate / b.rate for b, w in zip(self.baselines, self.workers, strict=True)]

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "produce_seconds": round(self.produce_seconds, 2),
            "rounds": [
                {"baseline_msgs_per_s": round(b.rate), "worker_msgs_per_s": round(w.rate),
                 "ratio": round(w.rate / b.rate, 3),
                 "baseline_cpu_us": round(b.cpu_per_message_us, 1), "worker_cpu_us": round(w.cpu_per_message_us, 1),
                 "broker_cpu_us_baseline": round(b.broker_cpu_per_message_us, 1),
                 "broker_cpu_us_worker": round(w.broker_cpu_per_message_us, 1),
                 "broker_jit_gc_us_baseline": [round(b.broker_jit_seconds / b.messages * 1e6, 1),
                                               round(b.broker_gc_seconds / b.messages * 1e6, 1)],
                 "broker_jit_gc_us_worker": [round(w.broker_jit_seconds / w.messages * 1e6, 1),
                                             round(w.broker_gc_seconds / w.messages * 1e6, 1)],
                 "machine_busy_baseline": round(b.machine_busy, 3), "machine_busy_worker": round(w.machine_busy, 3)}
                for b, w in zip(self.baselines, self.workers, strict=True)
            ],
        }


def _jit(result: BaselineResult | WorkerResult) -> str:
    """`` (x% JIT, y% GC)``: the shares of the broker's CPU its JIT compiler and garbage collector
    threads took, when it has any (a JVM)."""
    if not (result.broker_jit_seconds or result.broker_gc_seconds) or not result.broker_cpu_seconds:
        return ""
    cpu = result.broker_cpu_seconds
    return f" ({result.broker_jit_seconds / cpu:.0%} JIT, {result.broker_gc_seconds / cpu:.0%} GC)"


def measure_broker(kind: str, bootstrap: str | None, workload: CanalWorkload, workdir: Path, repeats: int,
                   profile: Path | None, worker: dict[str, Any] | None, warmup: int = 1) -> BrokerRun:
    """Start the broker (unless ``bootstrap``), produce the workload, run ``warmup`` rounds that
    are not counted (a Kafka JVM just started is still compiling its hot paths: in a first round
    its JIT compiler threads took about 40% of its CPU), then ``repeats`` rounds of the bare loop
    and the worker, each worker with fresh output topics and group."""
    n = len(workload.messages)
    broker = Broker.start(kind, bootstrap, workdir / kind / "logs")
    run = BrokerRun(kind, broker.description)
    source = f"{workload.prefix}-src"
    try:
        create_topics(broker.bootstrap, [source], partitions=4)
        run.produce_seconds = produce(broker.bootstrap, source, workload.messages)
        name = BROKER_NAMES[kind]
        print(f"{name}: produced {n:,} canal messages ({workload.bytes / 1e6:.1f} MB) in {run.produce_seconds:.1f}s; "
              f"expecting {workload.expected_records:,} records in {len(workload.output_topics)} topics", flush=True)
        for w in range(warmup):
            warm = run_baseline(broker, source, n, worker, verify=False)
            warm_worker = run_workers(broker, workload.renamed(f"{workload.prefix}w{w}"), source, 1,
                                      workdir / kind / f"warmup{w}", verify=False, worker=worker)
            print(f"{name} warm-up {w} (not counted): baseline {warm.rate:,.0f} msg/s, worker {warm_worker.rate:,.0f} "
                  f"msg/s", flush=True)
        for r in _rounds(repeats):
            base = run_baseline(broker, source, n, worker)
            print(f"{name} round {r}: baseline {base.rate:,.0f} msg/s, {base.cpu_per_message_us:.1f} us CPU/msg, "
                  f"broker {base.broker_cpu_per_message_us:.1f} us CPU/msg{_jit(base)}, machine {base.machine_busy:.0%} busy, "
                  f"copied {base.copied:,}", flush=True)
            if base.copied != n:
                raise RuntimeError(f"{name}: baseline copied {base.copied} of {n} messages")
            round_workload = workload.renamed(f"{workload.prefix}r{r}")
            res = run_workers(broker, round_workload, source, 1, workdir / kind / f"round{r}",
                              profile=profile / kind if profile is not None and r == 0 else None, worker=worker)
            print(f"{name} round {r}: worker {res.rate:,.0f} msg/s, {res.cpu_per_message_us:.1f} us CPU/msg, "
                  f"broker {res.broker_cpu_per_message_us:.1f} us CPU/msg{_jit(res)}, machine {res.machine_busy:.0%} busy, "
                  f"records acked {res.records_acked:,}, read {res.records_read:,}; ratio {res.rate / base.rate:.3f}",
                  flush=True)
            if res.records_read != workload.expected_records or res.dlq:
                raise RuntimeError(f"{name}: worker output incomplete: read {res.records_read} records, "
                                   f"expected {workload.expected_records}, dlq {res.dlq}")
            run.baselines.append(base)
            run.workers.append(res)
    finally:
        broker.stop()
    return run


def _report_broker(report: BenchReport, run: BrokerRun, workload: CanalWorkload) -> None:
    name = BROKER_NAMES[run.kind]
    base, best = run.best_baseline, run.best_worker
    ratios = run.round_ratios
    spread = "" if len(ratios) < 2 else f"; rounds {', '.join(f'{r:.3f}' for r in ratios)}"
    report.add(Ratio(f"{name}: worker msgs/s (1 process)", best.rate, base.rate, "msgs/s", target=TARGETS[run.kind],
                     baseline_name="bare aiokafka loop",
                     note=f"best of {len(ratios)}{spread}; output verified: {best.records_read:,} records read"))
    report.add(Ratio(f"{name}: CPU per message", best.cpu_per_message_us, base.cpu_per_message_us,
                     "us/msg", lower_is_better=True, baseline_name="bare aiokafka loop"))
    if base.broker_cpu_seconds and best.broker_cpu_seconds:
        # the median over the rounds, without the JIT compiler's share: a JVM still warming up
        # in one round and not in another says nothing about what serving either side costs
        worker_us = statistics.median(w.broker_serving_us for w in run.workers)
        loop_us = statistics.median(b.broker_serving_us for b in run.baselines)
        report.add(Ratio(f"{name}: broker CPU per message", worker_us, loop_us, "us/msg", lower_is_better=True,
                         baseline_name="during the bare loop",
                         note=f"median of the rounds, JIT compiler threads left out (best rounds: worker{_jit(best)}, "
                         f"loop{_jit(base)}); {workload.expected_records / len(workload.messages):.2f} output "
                         "records of ~2 KB per message against the loop's 1 copy"))
    report.info(f"{name}: worker records/s", best.records_read / best.seconds, "records/s")
    report.info(f"{name}: normalize wall time per message in the worker",
                best.normalize_seconds / max(1, len(workload.messages)) * 1e6, "us/msg",
                "cdcnorm_decode_seconds sum / messages: the normalize step on the worker's loop, "
                "sharing the CPU with the consumer thread, librdkafka and the broker")
    report.info(f"{name}: worker peak RSS", best.peak_rss / 2**20, "MiB")
    report.info(f"{name}: machine CPU busy, worker / bare loop", f"{best.machine_busy:.0%} / {base.machine_busy:.0%}", "",
                f"all processes (worker or loop, broker, others) on {os.cpu_count()} cores")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_baseline":
        bootstrap, source, target, n = argv[1], argv[2], argv[3], int(argv[4])
        settings = json.loads(argv[5])
        result = asyncio.run(_baseline_loop(bootstrap, source, target, n, settings, settings.get("broker_pids", ())))
        print(json.dumps(result), flush=True)
        return 0
    parser = _parser()
    args = parser.parse_args(argv)
    kinds = brokers_of(args.broker)
    if args.bootstrap is not None and len(kinds) != 1:
        parser.error("--bootstrap names one running broker: say which kind with --broker kafka or --broker tansu")
    n = args.messages or MESSAGES[args.size]
    report = BenchReport("service_e2e", args.size)
    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-bench-e2e-"))
    prefix = f"be{uuid.uuid4().hex[:6]}"
    worker = {"max_inflight": args.max_inflight} if args.max_inflight else None
    load_before = os.getloadavg()
    workload = canal_workload(n, prefix, f"{prefix}-src")
    runs = [
        measure_broker(kind, args.bootstrap, workload.renamed(f"{prefix}{kind[0]}"), workdir, args.repeats,
                       args.profile, worker, args.warmup)
        for kind in kinds
    ]
    report.params.update(
        messages=n, records=workload.expected_records, bytes=workload.bytes, repeats=args.repeats, warmup=args.warmup,
        max_inflight=args.max_inflight, cpus=os.cpu_count(), load_avg_before=[round(x, 2) for x in load_before],
        load_avg_after=[round(x, 2) for x in os.getloadavg()],
        baseline_settings={kind: baseline_settings(worker, kind) for kind in kinds},
        brokers={run.kind: run.to_json() for run in runs},
    )
    for run in runs:
        _report_broker(report, run, workload)
    normalize_us = pipeline_cpu_us(workload, f"{prefix}-src")
    report.info("normalize CPU per message", normalize_us, "us/msg",
                "Normalizer.process + serialization in-process, no Kafka")
    for run in runs:
        report.info(f"{BROKER_NAMES[run.kind]}: worker CPU per message besides normalize",
                    run.best_worker.cpu_per_message_us - normalize_us, "us/msg",
                    "Faust, aiokafka consume, librdkafka produce, acks, metrics")
    shutil.rmtree(workdir, ignore_errors=True)
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
