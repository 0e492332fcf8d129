"""Broker faults on a real 3-node Apache Kafka cluster (:mod:`service.local_kafka`), under a
running worker and a running sink, while changes flow.

The cluster: 3 KRaft nodes (each a broker and a controller), replication factor 3 and
``min.insync.replicas`` 2 for every topic (so ``acks=all`` needs two copies), unclean leader
election off (Kafka's default). Every producer on the way is idempotent with ``acks=all``: the
test's source producer (set here), the worker's output and dead letters
(:func:`service.rdkafka.producer_config`) and its metadata log
(:class:`service.metadata_log.MetadataLog`). After each run the record batches on every
replica's disk are read back, and each must carry a producer id and a sequence (written by an
idempotent producer).

Each test is one fault, run by :func:`run_scenario`:

* ``test_leader_sigkill_and_restart``: one node (the *victim*) is the preferred leader of every
  partition being read and written (the source topics, the normalized topics, the schema-change
  topic, the DLQ and the metadata log are created up front with an explicit replica assignment)
  and the group coordinator of the worker's and the sink's consumer groups (their group ids are
  chosen so); it is SIGKILLed mid-stream, stays down for :data:`DOWN_S`, and is started again
  with its data on disk;
* ``test_rolling_restart``: every node in turn is stopped (SIGTERM, a controlled shutdown),
  started again and waited for until every partition is in sync, as an operator's rolling
  restart does;
* ``test_frozen_broker``: the victim is frozen (SIGSTOP) for :data:`FREEZE_S`, longer than the
  worker's session timeout and the brokers' session timeout, then resumed (SIGCONT).

The workload (:mod:`tests.faults.workload`): 4 tables in 3 source formats (``canal-json`` twice,
``maxwell-json``, ``qlik-json`` whose data needs the metadata log and leaves ``qty`` out of some
updates, completed from the row state), produced at :data:`RATE` changes per second from before
the fault (once the worker is under way and the sink has committed a micro-batch) until
:data:`TAIL_S` after it; while the fault is on, one undecodable message (:data:`POISON`) is
produced, so a dead letter is written through it. One worker process and one sink process
(micro-batches every 2 s) run throughout: the worker drains, the sink catches up (its group
commits every offset of the normalized topics, read back to their ends), and both are stopped
(SIGTERM, exit 0). Counted as the fleet test counts: every change must be on the
normalized topics (lost 0), in per-key order (out of order 0), every record, duplicates too,
with its version's values (wrong values 0); the DLQ holds the one dead letter; the Iceberg
tables equal the final state of the history produced. Duplicates are counted and printed
(at-least-once allows them). Run with ``-s`` to see what was injected, when, on which node, for
how long, and the counts. ``CDCNORM_CLUSTER_RATE`` changes the rate. The nodes' JVMs run C1
only (:data:`JVM_OPTIONS`): a restart takes about half the time on a small machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.local import wait_for
from service.local_kafka import KafkaCluster, start_kafka
from service.maven import LocalServiceError
from tests.catalogs import TestCatalog  # the catalog is not what this test is about: hadoop
from tests.faults.procs import (
    committed_offsets,
    disk_batches,
    kill_group,
    read_warehouses,
    sink_batches,
    sink_config,
    start_sink,
    worker_config,
)
from tests.faults.workload import (
    CANAL,
    DB,
    MAXWELL,
    QLIK,
    SteadyProducer,
    assert_tables_equal_expected,
    check_order,
    generate,
    produce,
    read_all,
)
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(600)]

NODES = 3
RATE = float(os.environ.get("CDCNORM_CLUSTER_RATE", "200"))  # changes per second
MAX_CHANGES = 120_000  # the stream is cut TAIL_S after the fault; this only bounds it (600 s at 200/s)
KEYS_PER_TABLE = 300
SEED = 20261128
FORMATS = {"t0": CANAL, "t1": CANAL, "t2": MAXWELL, "t3": QLIK}
PARTITIONS = 2  # of every source and normalized topic
WARM_UP = 1000  # changes the worker has consumed before the fault (and the sink has committed a micro-batch)
TAIL_S = 5.0  # the stream goes on this long after the fault is over
SESSION_TIMEOUT_S = 6.0  # the worker's consumer group session
DOWN_S = 10.0  # how long the SIGKILLed broker stays down, at least (until its partitions have new leaders)
FREEZE_S = 20.0  # longer than the worker's session (6 s) and the brokers' (9 s)
OFFSETS_TOPIC = "__consumer_offsets"
PRODUCER = {"acks": "all", "enable.idempotence": True}  # the test's own source producer
POISON = (b"poison", b"not a canal-json message")  # dead-lettered: a DLQ write under the fault
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)  # C1 only: a node (re)starts in about half the time


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """The 3-node cluster of this module's tests; each test starts from every node up and every
    partition in sync (:func:`healthy`)."""
    started = time.monotonic()
    kafka = start_kafka(NODES, directory=tmp_path_factory.mktemp("kafka-cluster"), jvm_options=JVM_OPTIONS)
    print(f"\nstarted {kafka.description} in {time.monotonic() - started:.0f}s")
    try:
        yield kafka
    finally:
        kafka.stop()


def healthy(cluster: KafkaCluster) -> None:
    """Every node running (a frozen one resumed, a stopped one started) and in sync."""
    cluster.resume()
    for node in cluster.nodes:
        if not node.running:
            cluster.start_node(node.node_id)
    cluster.wait_registered()
    cluster.wait_in_sync()


# -- where the partitions and the group coordinators are ---------------------------------------


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit overflow)."""
    h = 0
    for unit in struct.unpack(f"<{len(text.encode('utf-16-le')) // 2}H", text.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``, whose leader is the group's coordinator
    (Kafka's ``Utils.abs(groupId.hashCode()) % partitions``)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def offsets_partitions(cluster: KafkaCluster) -> int:
    """The partition count of ``__consumer_offsets``, created first if the cluster has none yet
    (a coordinator lookup creates it)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.address, "log_level": 0})  # errors raise
    if OFFSETS_TOPIC not in admin.list_topics(timeout=10).topics:
        consumer = Consumer({"bootstrap.servers": cluster.address, "group.id": "cdcnorm-cluster-probe"})
        try:
            with contextlib.suppress(Exception):
                consumer.committed([TopicPartition("cdcnorm-cluster-probe", 0)], timeout=30)
        finally:
            consumer.close()
    cluster.wait_in_sync([OFFSETS_TOPIC], 60)
    return len(admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions)


def offsets_leaders(cluster: KafkaCluster, partitions: int, timeout_s: float = 30.0) -> dict[int, int]:
    """The leader of each ``__consumer_offsets`` partition (asked again while the node that
    answers does not know the topic yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = cluster.leaders([OFFSETS_TOPIC])
            return {p: found[(OFFSETS_TOPIC, p)] for p in range(partitions)}
        except LocalServiceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def group_led_by(cluster: KafkaCluster, node: int, base: str, partitions: int) -> str:
    """``base``, or ``base-<n>``: the first of those names whose group coordinator is ``node``."""
    by_partition = offsets_leaders(cluster, partitions)
    for n in range(200):
        name = base if n == 0 else f"{base}-{n}"
        if by_partition[coordinator_partition(name, partitions)] == node:
            return name
    raise AssertionError(f"node {node} leads no {OFFSETS_TOPIC} partition")


def create_led_topics(cluster: KafkaCluster, leader: int, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
    """Create ``topics`` (name -> partitions, config) with all of ``cluster``'s nodes as replicas
    and ``leader`` first in every partition's list: its preferred, and now its actual, leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    others = [n.node_id for n in cluster.nodes if n.node_id != leader]
    admin = AdminClient({"bootstrap.servers": cluster.address, "log_level": 0})  # errors raise
    new = [
        NewTopic(name, num_partitions=count,  # librdkafka wants the count with an assignment
                 replica_assignment=[[leader, *others[p % 2:], *others[:p % 2]] for p in range(count)], config=config)
        for name, (count, config) in topics.items()
    ]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(30)
    cluster.wait_in_sync(list(topics), 60)

    def led() -> bool:
        try:
            return set(cluster.leaders(topics).values()) == {leader}
        except LocalServiceError:  # a node whose metadata does not have the new topics yet
            return False

    wait_for(led, 30, f"node {leader} leading {sorted(topics)}", 0.2)


def leaders(cluster: KafkaCluster, topics: dict[str, int]) -> dict[int, int]:
    """How many of the partitions of ``topics`` (name -> partitions) each node leads now (-1: no
    leader; ``{-2: n}`` when no node answered)."""
    try:
        by_partition = cluster.leaders(topics, timeout_s=3.0)
    except Exception:
        return {-2: sum(topics.values())}
    count: dict[int, int] = {}
    for node in by_partition.values():
        count[node] = count.get(node, 0) + 1
    return dict(sorted(count.items()))


# -- the scenario --------------------------------------------------------------------------------


@dataclass
class Run:
    """One scenario's cluster, processes and timeline; a fault acts on it (:data:`Fault`)."""

    cluster: KafkaCluster
    victim: int  # leads every partition read and written, and the groups' coordinators
    led: dict[str, int]  # the topics the victim leads: name -> partitions
    worker: WorkerProcess
    sink: subprocess.Popen[str]
    sink_log: Path
    producer: SteadyProducer
    poison_topic: str  # where :meth:`poison` produces
    started: float = 0.0  # when the stream began (monotonic)
    injected: list[str] = field(default_factory=list)
    poisoned: threading.Thread | None = None
    poison_errors: list[str] = field(default_factory=list)

    def poison(self) -> None:
        """Produce :data:`POISON`, a message the worker dead-letters, from a thread (its delivery
        waits for a leader): the dead letter is written while the fault is on."""

        def send() -> None:
            try:
                produce(self.cluster.address, self.poison_topic, [POISON], **PRODUCER)
            except BaseException as exc:  # reported by the scenario
                self.poison_errors.append(repr(exc))

        self.note(f"an undecodable message to {self.poison_topic} (the worker dead-letters it)")
        self.poisoned = threading.Thread(target=send, name="poison", daemon=True)
        self.poisoned.start()

    def note(self, what: str) -> None:
        line = f"t={time.monotonic() - self.started:5.1f}s produced={self.producer.sent:6d}: {what}"
        self.injected.append(line)
        print("injected:", line, flush=True)

    def check_alive(self) -> None:
        """The worker and the sink are still the processes started before the fault."""
        assert self.worker.process.running, f"the worker exited:\n{self.worker.process.log_tail(60)}"
        assert self.sink.poll() is None, f"the sink exited:\n{self.sink_log.read_text(errors='replace')[-4000:]}"
        assert not self.producer.done, "the stream ended before the fault did (raise MAX_CHANGES)"

    def hold(self, seconds: float) -> None:
        """Wait ``seconds`` while checking that the worker and the sink run."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.check_alive()
            time.sleep(min(0.25, max(0.0, until - time.monotonic())))

    def wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Wait until ``check()``, checking that the worker and the sink run; returns the seconds."""
        began = time.monotonic()

        def done() -> bool:
            self.check_alive()
            try:
                return check()
            except Exception:  # a metadata request to a cluster in the middle of a fault
                return False

        wait_for(done, timeout_s, what, 0.25)
        return time.monotonic() - began

    def victim_leads_none(self) -> bool:
        """Every partition the victim led has another leader now (as a node that answers says)."""
        count = leaders(self.cluster, self.led)
        return -2 not in count and count.get(self.victim, 0) == 0


Fault = Callable[[Run], None]


def run_scenario(cluster: KafkaCluster, redis_url: str, tmp_path: Path, fault: Fault, label: str) -> None:
    """Start the worker and the sink on ``cluster``, stream changes, inject ``fault`` once both
    are busy, stream :data:`TAIL_S` more, drain, and count (see the module)."""
    t0 = time.monotonic()
    healthy(cluster)
    bootstrap = cluster.address
    prefix = f"kc{uuid.uuid4().hex[:8]}"
    sources = {fmt: f"{prefix}-{fmt}" for fmt in (CANAL, MAXWELL, QLIK)}
    outputs = [f"{prefix}.{DB}.{t}" for t in FORMATS]
    dlq = f"{prefix}.dlq"

    # the victim: the coordinator of the worker's group; the sink's group is picked to share it
    offsets = offsets_partitions(cluster)
    group = f"{prefix}-group"
    victim = offsets_leaders(cluster, offsets)[coordinator_partition(group, offsets)]
    sink_group = group_led_by(cluster, victim, f"{prefix}-sink", offsets)
    entries = [{"name": topic, "format": fmt, "complete_partial_images": fmt == QLIK} for fmt, topic in sources.items()]
    config = worker_config(bootstrap, redis_url, f"{prefix}:", prefix, entries, session_timeout_s=SESSION_TIMEOUT_S)
    assert config["worker"]["app_id"] == group
    metadata_topic = f"{group}.metadata"
    # written too: the schema-change topic (<prefix>: the Qlik metadata messages' events)
    led = {**dict.fromkeys(sources.values(), PARTITIONS), **dict.fromkeys(outputs, PARTITIONS), dlq: 1,
           metadata_topic: 1, prefix: PARTITIONS}
    create_led_topics(cluster, victim, {
        **{t: (n, {}) for t, n in led.items() if t != metadata_topic},
        metadata_topic: (1, {"cleanup.policy": "compact"}),
    })
    print(f"\n[{label}] node {victim} leads all {sum(led.values())} partitions of {len(led)} topics "
          f"(3 sources, {len(outputs)} normalized, schema changes, DLQ, metadata log) and coordinates the groups {group} "
          f"and {sink_group} ({OFFSETS_TOPIC}[{coordinator_partition(group, offsets)}] and "
          f"[{coordinator_partition(sink_group, offsets)}]); replication factor 3, min.insync.replicas 2")

    sink_cfg = sink_config(tmp_path / "sink.yaml", bootstrap, rf"{prefix}\.{DB}\..*", sink_group,
                           TestCatalog("hadoop", tmp_path), maintenance={"enabled": False})
    sink_log = tmp_path / "sink.log"
    sink = start_sink(sink_cfg, env={"PYTHONUNBUFFERED": "1"}, log=sink_log)  # first: Spark starts slowest
    worker = WorkerProcess(config, tmp_path)
    run: Run | None = None
    try:
        full = generate(MAX_CHANGES, KEYS_PER_TABLE, SEED, FORMATS)
        producer = SteadyProducer(bootstrap, [sources[fmt] for fmt in full.formats], full.messages, rate=RATE,
                                  conf=PRODUCER)
        run = Run(cluster, victim, led, worker, sink, sink_log, producer, sources[CANAL])
        ends = {sources[QLIK]: produce(bootstrap, sources[QLIK], full.preamble[QLIK], **PRODUCER)}
        worker.wait_ready(120)
        _wait_committed(bootstrap, group, ends, 60)
        producer.start()
        run.started = time.monotonic()
        # the fault hits a worker and a sink at work: the sink has committed a micro-batch
        run.wait(lambda: worker.total("cdcnorm_messages_in_total") >= WARM_UP and bool(sink_batches(sink_log)),
                 240, "the worker under way and the sink's first micro-batch")
        run.note(f"worker consumed {worker.total('cdcnorm_messages_in_total'):.0f}, sink read "
                 f"{sum(b[0] for b in sink_batches(sink_log))} in {len(sink_batches(sink_log))} micro-batches; "
                 f"leaders per node {leaders(cluster, led)}")
        fault(run)
        run.note(f"fault over; leaders per node {leaders(cluster, led)}")
        run.hold(TAIL_S)
        produced = producer.finish()
        streamed = time.monotonic() - run.started
        assert run.poisoned is not None, "the fault produced no undecodable message"
        run.poisoned.join(60)
        assert not run.poisoned.is_alive() and not run.poison_errors, run.poison_errors
        # where the sources end: read back (a delivery report may not know its offset, see
        # SteadyProducer), and every message is there once (the source producer is idempotent)
        source_records = read_all(bootstrap, list(sources.values()), idle_s=3.0, timeout_s=180)
        for r in source_records:
            ends.setdefault(r.topic, {})[r.partition] = max(ends.get(r.topic, {}).get(r.partition, 0), r.offset + 1)
        sent = [*full.preamble[QLIK], *full.messages[:produced], POISON]
        assert sorted((r.key, r.value) for r in source_records) == sorted(sent), "the sources hold copies or gaps"
        print(f"[{label}] stream: {produced} changes (and 1 undecodable message) in {streamed:.1f}s; "
              f"the sources hold each once; source ends {ends}")
        mark = time.monotonic()
        _wait_committed(bootstrap, group, ends, 180, run)
        print(f"[{label}] worker drained (every source offset committed) {time.monotonic() - mark:.1f}s after "
              "the stream ended")
        consumed = worker.total("cdcnorm_messages_in_total")
        dlq_metric = worker.total("cdcnorm_dlq_total")
        records = read_all(bootstrap, outputs, idle_s=3.0, timeout_s=180)
        out_ends: dict[tuple[str, int], int] = {}
        for r in records:
            out_ends[(r.topic, r.partition)] = max(out_ends.get((r.topic, r.partition), 0), r.offset + 1)
        mark = time.monotonic()
        run.wait(lambda: all(committed_offsets(bootstrap, sink_group, t, PARTITIONS)[p] >= end
                             for (t, p), end in out_ends.items()), 300, "the sink committing every normalized record")
        print(f"[{label}] sink caught up (every normalized offset committed) {time.monotonic() - mark:.1f}s after "
              "the worker")
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(120) == 0, sink_log.read_text(errors="replace")[-4000:]
        worker.stop()
        assert worker.process.process.returncode == 0, worker.process.log_tail(60)
    finally:
        if run is not None and run.producer._thread is not None and run.producer._thread.is_alive():
            with contextlib.suppress(AssertionError):
                run.producer.finish()
        worker.stop()
        if sink.poll() is None:
            kill_group(sink)

    continuous = sink_batches(sink_log)
    retried = sink_log.read_text(errors="replace").count("writing a micro-batch failed")
    stream = generate(produced, KEYS_PER_TABLE, SEED, FORMATS)  # the history produced: a prefix
    letters = read_all(bootstrap, [dlq], idle_s=1.0)
    report = check_order(records, prefix, stream)
    disk = disk_batches(cluster, {t: n for t, n in led.items()})
    lost, out_of_order, wrong = report.missing, len(report.out_of_order), len(report.wrong)
    print(f"[{label}] counted: produced={produced} consumed={consumed:.0f} {report.line()} dlq={len(letters)} "
          f"dlq_metric={dlq_metric:.0f}")
    print(f"[{label}] counted: lost={lost} out_of_order={out_of_order} wrong_values={wrong} "
          f"duplicates={report.duplicates} ({100 * report.duplicates / max(1, produced):.2f}% of the changes)")
    print(f"[{label}] sink: {len(continuous)} micro-batches read {sum(b[0] for b in continuous)} records "
          f"({retried} failed attempts retried) for {report.records} records on the normalized topics")
    print(f"[{label}] disk: {disk.batches} record batches ({disk.records} records) of the {len(led)} topics on "
          f"the 3 replicas, {len(disk.not_idempotent)} without a producer id and sequence; producer ids "
          f"{sorted(disk.producer_ids)}")
    assert not disk.not_idempotent, disk.not_idempotent[:5]
    assert [d.key for d in letters] == [POISON[0]] and dlq_metric == 1, [(d.key, d.value) for d in letters[:3]]
    assert lost == 0, f"{lost} changes never reached the normalized topics"
    assert not report.out_of_order, report.out_of_order[:5]
    assert not report.split_keys, report.split_keys[:5]
    assert not report.wrong, report.wrong[:10]
    assert report.changes - report.duplicates == stream.changes
    assert report.tombstones >= stream.counts["DELETE"]
    assert sum(b[0] for b in continuous) >= report.records
    (tables,) = read_warehouses(sink_cfg)
    assert_tables_equal_expected(tables, stream, f"[{label}] tables")
    print(f"[{label}] rows compared={sum(len(rows) for rows in stream.final.values())} over {len(FORMATS)} tables; "
          f"whole test {time.monotonic() - t0:.0f}s")


def _wait_committed(bootstrap: str, group: str, ends: dict[str, dict[int, int]], timeout_s: float,
                    run: Run | None = None) -> None:
    """Until ``group`` has committed ``ends[topic][p]`` on every partition of every topic."""

    def done() -> bool:
        if run is not None:
            assert run.worker.process.running, f"the worker exited:\n{run.worker.process.log_tail(60)}"
        return all(
            committed_offsets(bootstrap, group, topic, PARTITIONS)[p] >= end
            for topic, by_partition in ends.items() for p, end in by_partition.items()
        )

    wait_for(done, timeout_s, f"group {group} committing {ends}", 0.5)


# -- the faults -------------------------------------------------------------------------------------


def kill_leader(run: Run) -> None:
    """SIGKILL the victim; once its partitions have new leaders, keep it down until
    :data:`DOWN_S` after the kill, then start it again with its data and wait for it to catch up."""
    cluster, node = run.cluster, run.victim
    run.note(f"SIGKILL node {node} (leader of {sum(run.led.values())} partitions, coordinator of both groups)")
    killed = time.monotonic()
    cluster.kill(node)
    run.poison()
    moved = run.wait(run.victim_leads_none, 60, f"new leaders for node {node}'s partitions")
    run.note(f"node {node}'s partitions have new leaders {moved:.1f}s after the kill: "
             f"leaders per node {leaders(cluster, run.led)}")
    run.hold(max(0.0, DOWN_S - (time.monotonic() - killed)))
    began = time.monotonic()
    run.note(f"starting node {node} again (down {began - killed:.1f}s)")
    cluster.start_node(node)
    run.note(f"node {node} registered {time.monotonic() - began:.1f}s after its start")
    synced = run.wait(cluster.in_sync, 120, "every partition in sync")
    run.note(f"every partition in sync again {synced:.1f}s later; node {node} was away "
             f"{time.monotonic() - killed:.1f}s in all")


def rolling_restart(run: Run) -> None:
    """Each node in turn: SIGTERM (controlled shutdown), start again, wait until in sync."""
    cluster = run.cluster
    began = time.monotonic()
    for node in cluster.nodes:
        n = node.node_id
        before = leaders(cluster, run.led).get(n, 0)
        stopping = time.monotonic()
        run.note(f"SIGTERM node {n} (leads {before} of the {sum(run.led.values())} partitions)")
        cluster.stop_node(n)
        stopped = time.monotonic() - stopping
        run.note(f"node {n} stopped after {stopped:.1f}s (controlled shutdown); leaders per node "
                 f"{leaders(cluster, run.led)}")
        if run.poisoned is None:
            run.poison()
        run.check_alive()
        starting = time.monotonic()
        cluster.start_node(n)
        run.note(f"node {n} registered {time.monotonic() - starting:.1f}s after its start")
        synced = run.wait(cluster.in_sync, 120, "every partition in sync")
        run.note(f"every partition in sync {synced:.1f}s later; node {n} was away {time.monotonic() - stopping:.1f}s")
    run.note(f"rolling restart of {len(cluster.nodes)} nodes done in {time.monotonic() - began:.1f}s")


def freeze_leader(run: Run) -> None:
    """SIGSTOP the victim for :data:`FREEZE_S`, then SIGCONT, and wait until it is in sync again."""
    cluster, node = run.cluster, run.victim
    run.note(f"SIGSTOP node {node} (leader of {sum(run.led.values())} partitions, coordinator of both groups) "
             f"for {FREEZE_S:.0f}s")
    frozen = time.monotonic()
    cluster.freeze(node)
    try:
        run.poison()
        moved = run.wait(run.victim_leads_none, FREEZE_S + 30, f"new leaders for node {node}'s partitions")
        run.note(f"node {node}'s partitions have new leaders {moved:.1f}s after the freeze: "
                 f"leaders per node {leaders(cluster, run.led)}")
        run.hold(max(0.0, FREEZE_S - (time.monotonic() - frozen)))
    finally:
        cluster.resume(node)
    run.note(f"SIGCONT node {node} after {time.monotonic() - frozen:.1f}s")
    synced = run.wait(cluster.in_sync, 120, "every partition in sync")
    run.note(f"every partition in sync {synced:.1f}s after the SIGCONT")


def test_leader_sigkill_and_restart(cluster: KafkaCluster, redis_url: str, tmp_path: Path) -> None:
    run_scenario(cluster, redis_url, tmp_path, kill_leader, "leader SIGKILL")


def test_rolling_restart(cluster: KafkaCluster, redis_url: str, tmp_path: Path) -> None:
    run_scenario(cluster, redis_url, tmp_path, rolling_restart, "rolling restart")


def test_frozen_broker(cluster: KafkaCluster, redis_url: str, tmp_path: Path) -> None:
    run_scenario(cluster, redis_url, tmp_path, freeze_leader, "frozen broker")
