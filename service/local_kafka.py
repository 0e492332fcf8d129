"""A real Apache Kafka on loopback: one KRaft node, or a cluster of N, started from Maven's jars.

The jars come from the pinned pom ``service/maven/kafka.pom.xml`` (:func:`service.maven.fetch_artifacts`,
fetched once into a cache). Every node is a combined KRaft broker and controller
(``process.roles=broker,controller``) with a static quorum of all nodes, on two free ports of
127.0.0.1 (clients and controllers), in a folder of its own under the cluster's directory
(``node-<id>/``: ``server.properties``, ``data/``, ``server.log``). The storage is formatted once
(``kafka.tools.StorageTool format``), so a node stopped or killed comes back with its data.

Settings, for tests that must look like production where it matters and start fast where not:

* replication factor ``min(3, nodes)`` for new topics and the internal ones, ``min.insync.replicas``
  2 from 3 nodes on (1 below), so ``acks=all`` needs two copies;
* topics are auto-created with 4 partitions (as the Tansu default, so code that relies on
  auto-creation meets the same partition count on both), ``group.initial.rebalance.delay.ms=0``;
* everything else is Kafka's default; ``overrides`` sets any ``server.properties`` key.

:class:`KafkaCluster` also injects the faults the fault tests need: :meth:`~KafkaCluster.kill`
(SIGKILL), :meth:`~KafkaCluster.stop_node` (SIGTERM: a controlled shutdown),
:meth:`~KafkaCluster.start_node`, :meth:`~KafkaCluster.freeze`/:meth:`~KafkaCluster.resume`
(SIGSTOP/SIGCONT), and tells which node leads a partition (:meth:`~KafkaCluster.leader`,
:meth:`~KafkaCluster.leaders`) and whether every replica is in sync (:meth:`~KafkaCluster.in_sync`).
A node counts as up once its current process has logged that it started and the cluster lists it
(:meth:`~KafkaCluster.wait_registered`): a node killed a moment ago stays listed until its broker
session times out.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import subprocess
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.local import free_port, log_tail, port_open, wait_for
from service.maven import LocalServiceError, fetch_artifacts, java_command, pom_path

__all__ = ["KAFKA_VERSION", "KafkaCluster", "KafkaNode", "kafka_version", "new_cluster_id", "start_kafka"]

_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""
_STARTED = b"] Kafka Server started (kafka.server.KafkaRaftServer)"


def kafka_version() -> str:
    """The Apache Kafka version the pinned pom names (``org.apache.kafka:kafka_2.13``)."""
    root = ET.parse(pom_path("kafka")).getroot()
    for dep in root.iterfind("m:dependencies/m:dependency", _POM_NS):
        if dep.findtext("m:artifactId", namespaces=_POM_NS) == "kafka_2.13":
            return str(dep.findtext("m:version", namespaces=_POM_NS))
    raise LocalServiceError(f"{pom_path('kafka')} names no org.apache.kafka:kafka_2.13")


KAFKA_VERSION = kafka_version()


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a :class:`KafkaCluster`."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    log_start: int = 0  # the size of server.log when the current process started: its lines follow

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    @property
    def started(self) -> bool:
        """The current process has logged that it started: its broker is registered and unfenced
        and serves requests (``KafkaRaftServer ... Kafka Server started``)."""
        if not self.running or not self.log_path.exists():
            return False
        with self.log_path.open("rb") as log:
            log.seek(self.log_start)
            return _STARTED in log.read()


class KafkaCluster:
    """Apache Kafka nodes this program started on loopback; :meth:`stop` ends them all."""

    name = "kafka"

    def __init__(self, nodes: list[KafkaNode], libs: Path, cluster_id: str, directory: Path,
                 heap: str = "512m", owns_directory: bool = False, jvm_options: Sequence[str] = ()) -> None:
        self.nodes = nodes
        self.libs = libs
        self.cluster_id = cluster_id
        self.directory = directory
        self.heap = heap
        self.jvm_options = tuple(jvm_options)
        self.version = KAFKA_VERSION
        self._owns_directory = owns_directory

    # -- what it is ---------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The bootstrap servers: every node, comma separated."""
        return ",".join(node.address for node in self.nodes)

    @property
    def description(self) -> str:
        count = len(self.nodes)
        return f"Apache Kafka {self.version} (KRaft, {count} node{'s' if count != 1 else ''}) on {self.address}"

    @property
    def running(self) -> bool:
        return any(node.running for node in self.nodes)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The first node's process (a one-node cluster's only one)."""
        proc = self.nodes[0].process
        if proc is None:
            raise LocalServiceError("Kafka node 1 is not running")
        return proc

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- node {n.node_id}:\n{n.log_tail(lines)}" for n in self.nodes)

    # -- processes -----------------------------------------------------------------------------

    def _command(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        return [
            java_command(), f"-Xms{min(256, _megabytes(self.heap))}m", f"-Xmx{self.heap}", "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", *self.jvm_options,
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            "-cp", f"{self.libs}/*", main, *args,
        ]

    def start_node(self, node_id: int, wait: bool = True, timeout_s: float = 90.0) -> None:
        """Start node ``node_id`` (again, with its data), and wait until it is a registered broker."""
        node = self.node(node_id)
        if node.running:
            return
        node.log_start = node.log_path.stat().st_size if node.log_path.exists() else 0
        with node.log_path.open("ab") as out:
            node.process = subprocess.Popen(
                self._command(node, "kafka.Kafka", str(node.config_path)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        if wait:
            self.wait_registered([node_id], timeout_s)

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: Kafka's controlled shutdown (leadership moves first); SIGKILL after ``timeout_s``."""
        node = self.node(node_id)
        proc = node.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id``: no shutdown, its data stays on disk as the crash left it."""
        proc = self.node(node_id).process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def freeze(self, node_id: int | None = None) -> None:
        """SIGSTOP node ``node_id`` (every node when None): it holds its sockets but answers nothing."""
        for node in self.nodes if node_id is None else [self.node(node_id)]:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGSTOP)

    def resume(self, node_id: int | None = None) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        for node in self.nodes if node_id is None else [self.node(node_id)]:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every node (SIGTERM, SIGKILL after ``timeout_s``); a temporary directory is removed."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGCONT)
                    node.process.terminate()
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(10)
        if self._owns_directory:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)

    # -- cluster state -------------------------------------------------------------------------

    def _admin(self, timeout_s: float = 5.0) -> Any:
        from confluent_kafka.admin import AdminClient

        live = ",".join(n.address for n in self.nodes if n.running and port_open(n.port)) or self.address
        return AdminClient({
            "bootstrap.servers": live,
            "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000)),
            "log_level": 0,  # a node that is down is expected here: no connection errors on stderr
        })

    def registered(self, timeout_s: float = 3.0) -> set[int]:
        """The node ids the cluster's metadata lists as brokers now (empty when none answers)."""
        from confluent_kafka import KafkaException

        try:
            return set(self._admin(timeout_s).list_topics(timeout=timeout_s).brokers)
        except KafkaException:
            return set()

    def wait_registered(self, node_ids: Iterable[int] | None = None, timeout_s: float = 90.0) -> None:
        """Wait until every node of ``node_ids`` (default: all) is a registered, unfenced broker,
        registered by its current process.

        The cluster's metadata alone does not tell: a node killed a moment ago stays registered
        until its broker session times out (``broker.session.timeout.ms``, 9 s), and its new
        process cannot register before that. So each node's current process must also have
        logged that it started (:attr:`KafkaNode.started`)."""
        wanted = {n.node_id for n in self.nodes} if node_ids is None else set(node_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if n.node_id in wanted and n.process is not None and n.process.poll() is not None]
            if dead:
                node = dead[0]
                raise LocalServiceError(
                    f"Kafka node {node.node_id} exited with {node.process.returncode if node.process else '?'}:\n"
                    f"{node.log_tail()}"
                )
            if all(n.started for n in self.nodes if n.node_id in wanted) and wanted <= self.registered(2.0):
                return
            time.sleep(0.2)
        raise LocalServiceError(
            f"Kafka nodes {sorted(wanted)} did not register within {timeout_s:.0f}s:\n{self.log_tail(15)}"
        )

    def leader(self, topic: str, partition: int = 0, timeout_s: float = 5.0) -> int:
        """The node that leads ``topic[partition]`` now (-1: none)."""
        return self.leaders([topic], timeout_s)[(topic, partition)]

    def leaders(self, topics: Iterable[str], timeout_s: float = 5.0) -> dict[tuple[str, int], int]:
        """The node that leads each partition of ``topics`` now (-1: none), from one metadata request."""
        names = sorted(set(topics))
        found = self._admin(timeout_s).list_topics(timeout=timeout_s).topics
        out: dict[tuple[str, int], int] = {}
        for name in names:
            meta = found.get(name)
            if meta is None or meta.error is not None:
                raise LocalServiceError(f"topic {name}: {'not found' if meta is None else meta.error}")
            out.update({(name, p): int(part.leader) for p, part in meta.partitions.items()})
        return out

    def in_sync(self, topics: Iterable[str] | None = None, timeout_s: float = 3.0) -> bool:
        """Whether every partition of ``topics`` (default: all) has a leader and all its replicas in
        sync now (False when no node answers within ``timeout_s``, or a topic is not known yet)."""
        from confluent_kafka import KafkaException

        names = None if topics is None else set(topics)
        try:
            meta = self._admin(timeout_s).list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        if names is not None and not names <= set(meta.topics):
            return False
        for name, topic in meta.topics.items():
            if names is not None and name not in names:
                continue
            if topic.error is not None:
                return False
            for p in topic.partitions.values():
                if p.leader < 0 or set(p.isrs) != set(p.replicas):
                    return False
        return True

    def wait_in_sync(self, topics: Iterable[str] | None = None, timeout_s: float = 120.0) -> None:
        """Wait until every partition of ``topics`` (default: all) has a leader and all its replicas in sync."""
        names = None if topics is None else sorted(set(topics))
        wait_for(lambda: self.in_sync(names), timeout_s, "Kafka replicas in sync", 0.5)


def _megabytes(size: str) -> int:
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    unit = size[-1].lower()
    return int(float(size[:-1]) * units[unit]) if unit in units else int(size) // (1024 * 1024)


def _node_properties(node: KafkaNode, voters: str, nodes: int, overrides: Mapping[str, Any]) -> str:
    replication = min(3, nodes)
    min_isr = 2 if nodes >= 3 else 1
    settings: dict[str, Any] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": node.directory / "data",
        "num.partitions": 4,
        "auto.create.topics.enable": "true",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 4,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        **overrides,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def new_cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.randomUuid()`` makes it: a UUID in URL-safe base64
    without padding, drawn again while it starts with ``-`` (the storage tool's argument parser
    would read such an id as an option: "argument --cluster-id/-t: expected one argument", one
    start in 64).

    >>> all(not new_cluster_id().startswith("-") and len(new_cluster_id()) == 22 for _ in range(500))
    True
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def start_kafka(
    nodes: int = 1,
    directory: Path | None = None,
    heap: str = "512m",
    overrides: Mapping[str, Any] | None = None,
    timeout_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
    jvm_options: Sequence[str] = (),
) -> KafkaCluster:
    """Start ``nodes`` Apache Kafka KRaft nodes on 127.0.0.1 and wait until every one is a
    registered broker. ``directory`` holds their configs, data and logs (default: a temporary
    folder, removed by :meth:`KafkaCluster.stop`). ``jvm_options`` are more flags of every node's
    JVM, e.g. ``-XX:TieredStopAtLevel=1`` (C1 only: a node starts in about half the time on a
    small, busy machine, at a lower peak throughput)."""
    if nodes < 1:
        raise LocalServiceError(f"a Kafka cluster needs at least one node, not {nodes}")
    libs = fetch_artifacts("kafka", progress)
    owns = directory is None
    root = Path(tempfile.mkdtemp(prefix="cdcnorm-kafka-")) if directory is None else directory
    root.mkdir(parents=True, exist_ok=True)
    members = [KafkaNode(i, free_port(), free_port(), root / f"node-{i}") for i in range(1, nodes + 1)]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in members)
    cluster_id = new_cluster_id()
    cluster = KafkaCluster(members, libs, cluster_id, root, heap, owns, jvm_options)
    for node in members:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(_node_properties(node, voters, nodes, overrides or {}))
        (node.directory / "log4j2.properties").write_text(_LOG4J2)
    # the nodes' storage is formatted in parallel: each format is a JVM start of its own
    formats = [
        subprocess.Popen(
            cluster._command(node, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.config_path)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        for node in members
    ]
    for node, proc in zip(members, formats, strict=True):
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise LocalServiceError(f"formatting Kafka node {node.node_id} failed: {output.decode(errors='replace')[-2000:]}")
    try:
        for node in members:
            cluster.start_node(node.node_id, wait=False)
        cluster.wait_registered(timeout_s=timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster
