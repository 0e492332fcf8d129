"""Processes of the fault tests: the worker and the sink as children, killed on purpose.

The sink runs in its own session (process group) so a SIGKILL can take its Spark JVM down at the
same instant, as a machine crash would.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from service.local import create_topics, wait_for
from service.local_kafka import KafkaCluster
from service.replay import committed_when_ready
from tests.catalogs import TestCatalog
from tests.service.harness import ROOT, WorkerProcess

__all__ = [
    "DiskBatches",
    "MidStream",
    "SinkResult",
    "WorkerRun",
    "alter_topic",
    "committed_offsets",
    "create_configured_topics",
    "dead_letter_line",
    "disk_batches",
    "kill_group",
    "kill_worker",
    "metric_total",
    "probe",
    "probe_port",
    "produce_mid_stream",
    "read_warehouses",
    "refuse_writes",
    "run_sink",
    "run_until_committed",
    "sink_batches",
    "sink_config",
    "start_sink",
    "topic_config",
    "wait_committed",
    "wait_consuming",
    "wait_position",
    "warehouse_files",
    "worker_config",
]

_RUNS = itertools.count(1)
_BATCH = re.compile(r"batch: read=(\d+) changes=(\d+) upserts=(\d+) deletes=(\d+)")


def worker_config(bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, topics: list[dict[str, Any]],
                  session_timeout_s: float = 6.0, **worker: Any) -> dict[str, Any]:
    """A worker config for the fault tests (short session timeout, fast commits)."""
    return {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": bootstrap, "session_timeout_s": session_timeout_s},
        "redis": {"url": redis_url, "key_prefix": redis_prefix},
        "worker": {"app_id": f"{prefix}-group", "commit_interval_s": 0.5, **worker},
        "topics": topics,
    }


def dead_letter_line(letter: Any) -> str:
    """A dead letter (``tests.service.harness.Record``) on one line: key, value size and headers
    (Connect's by their last name part), without the stack trace."""
    return (f"key={letter.key!r} value={len(letter.value or b'')} bytes "
            + " ".join(f"{k.rpartition('.errors.')[2] if '.errors.' in k else k}={v.decode()}"
                       for k, v in letter.headers.items() if not k.endswith("stacktrace")))


def wait_consuming(worker: WorkerProcess, topic: str, timeout_s: float = 90.0) -> None:
    """Until this worker process has consumed at least one message of ``topic``."""

    def consuming() -> bool:
        if not worker.process.running:
            raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
        try:
            return worker.total("cdcnorm_messages_in_total", topic=topic) > 0
        except OSError:
            return False

    wait_for(consuming, timeout_s, f"worker consuming {topic}", 0.1)


def wait_position(worker: WorkerProcess, base: int, target: int, timeout_s: float = 120.0) -> None:
    """Until ``base`` plus the messages this worker consumed reaches ``target``."""

    def reached() -> bool:
        if not worker.process.running:
            raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
        try:
            return base + worker.total("cdcnorm_messages_in_total") >= target
        except OSError:
            return False

    wait_for(reached, timeout_s, f"worker reaching stream position {target}", 0.05)


def kill_worker(worker: WorkerProcess) -> int:
    """SIGKILL the worker; returns how many messages it had consumed (last scrape)."""
    try:
        consumed = int(worker.total("cdcnorm_messages_in_total"))
    except OSError:
        consumed = -1
    worker.process.process.send_signal(signal.SIGKILL)
    worker.process.process.wait(10)
    return consumed


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset per partition (-1 when none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        # as the tools read them: a coordinator not ready yet (a broker just resumed or restarted)
        # is asked again, not taken for an answer
        tps = committed_when_ready(consumer, [TopicPartition(topic, p) for p in range(partitions)], group, 60)
        return [tp.offset if tp.offset >= 0 else -1 for tp in tps]
    finally:
        consumer.close()


def wait_committed(bootstrap: str, group: str, topic: str, ends: dict[int, int], timeout_s: float,
                   worker: WorkerProcess | None = None) -> None:
    """Until ``group`` has committed ``ends[p]`` on every partition of ``topic`` (so every
    source message was processed and its records acknowledged)."""

    def done() -> bool:
        if worker is not None and not worker.process.running:
            raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
        got = committed_offsets(bootstrap, group, topic, len(ends))
        return all(got[p] >= end for p, end in ends.items())

    wait_for(done, timeout_s, f"group {group} committing {ends}", 0.5)


@dataclass
class MidStream:
    """A canal-json source topic with ``injected`` messages produced in the middle of a stream
    (:func:`produce_mid_stream`), and where they landed."""

    prefix: str
    source: str
    dlq_topic: str
    outputs: list[str]
    ends: dict[int, int] = field(default_factory=dict)  # end offset per source partition
    at: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # injected key -> (partition, offset)

    def after(self, key: bytes) -> int:
        """Messages after the injected one of ``key`` in its partition."""
        partition, offset = self.at[key]
        return self.ends[partition] - offset - 1


def create_configured_topics(bootstrap: str, configs: dict[str, dict[str, str]], partitions: int = 2,
                             timeout_s: float = 15.0) -> None:
    """Create each topic of ``configs`` with its topic configs (e.g. ``max.message.bytes``), as an
    operator would with ``kafka-topics --create --config``; an existing topic is an error (its
    configs would not be these)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    if not configs:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config))
           for name, config in configs.items()]
    for future in admin.create_topics(new, operation_timeout=timeout_s).values():
        future.result(timeout_s)
    wait_for(lambda: set(configs) <= set(admin.list_topics(timeout=timeout_s).topics), timeout_s, "topics")


def topic_config(bootstrap: str, topic: str, name: str, timeout_s: float = 10.0) -> str:
    """The value of topic config ``name`` of ``topic``, as the broker describes it."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: its futures need it
    resource = ConfigResource("topic", topic)
    found = admin.describe_configs([resource])[resource].result(timeout_s)
    return str(found[name].value)


def alter_topic(bootstrap: str, topic: str, configs: dict[str, str], timeout_s: float = 10.0) -> None:
    """Set topic configs of ``topic`` while it is in use (IncrementalAlterConfigs, as
    ``kafka-configs --alter --add-config`` does), and wait until the broker describes them."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout_s)
    wait_for(lambda: all(topic_config(bootstrap, topic, k) == v for k, v in configs.items()), timeout_s,
             f"{topic} configs {configs}")


def produce_mid_stream(bootstrap: str, tag: str, stream: Any, injected: list[tuple[bytes, bytes]], *,
                       extra_outputs: tuple[str, ...] = (), produce_conf: dict[str, Any] | None = None,
                       source_config: dict[str, str] | None = None, output_config: dict[str, str] | None = None,
                       dlq_config: dict[str, str] | None = None) -> MidStream:
    """Topics ``<tag><hex>-src`` (2 partitions), the normalized ones of ``workload.TABLES`` (and
    ``extra_outputs``) and the DLQ, created with ``source_config``, ``output_config`` and
    ``dlq_config`` (topic configs, e.g. ``max.message.bytes``) when given; then the first half of
    ``stream``, each ``injected`` message (produced with ``produce_conf``), and the second half."""
    from tests.faults.workload import DB, TABLES, produce

    prefix = f"{tag}{uuid.uuid4().hex[:8]}"
    run = MidStream(prefix, f"{prefix}-src", f"{prefix}.dlq", [f"{prefix}.{DB}.{t}" for t in TABLES])
    outputs = [*run.outputs, *(f"{prefix}.{DB}.{t}" for t in extra_outputs)]
    configured = {run.source: source_config, **dict.fromkeys(outputs, output_config), run.dlq_topic: dlq_config}
    create_configured_topics(bootstrap, {t: c for t, c in configured.items() if c is not None})
    create_topics(bootstrap, [run.source], partitions=2)
    create_topics(bootstrap, [*run.outputs, *(f"{prefix}.{DB}.{t}" for t in extra_outputs), run.dlq_topic],
                  partitions=2)
    half = len(stream.messages) // 2
    run.ends = produce(bootstrap, run.source, stream.messages[:half])
    for key, value in injected:
        ((partition, end),) = produce(bootstrap, run.source, [(key, value)], **(produce_conf or {})).items()
        run.at[key] = (partition, end - 1)
    for p, end in produce(bootstrap, run.source, stream.messages[half:]).items():
        run.ends[p] = max(run.ends.get(p, 0), end)
    return run


@dataclass
class WorkerRun:
    """What :func:`run_until_committed` saw of the worker."""

    consumed: float
    dead_letters: float  # cdcnorm_dlq_total of the error class
    seconds: float  # from ready to every source offset committed
    running: bool  # the worker had not exited by then
    rss_mb: float


def run_until_committed(config: dict[str, Any], workdir: Path, run: MidStream, error_class: str) -> WorkerRun:
    """Start a worker on ``config``, wait until it committed ``run``'s source ends, stop it."""
    import psutil

    worker = WorkerProcess(config, workdir)
    try:
        worker.wait_ready(90)
        ready = time.monotonic()
        wait_committed(config["broker"]["bootstrap_servers"], config["worker"]["app_id"], run.source, run.ends, 120,
                       worker)
        return WorkerRun(
            worker.total("cdcnorm_messages_in_total"),
            worker.total("cdcnorm_dlq_total", error_class=error_class),
            time.monotonic() - ready,
            worker.process.running,
            float(psutil.Process(worker.process.process.pid).memory_info().rss) / 1e6,
        )
    finally:
        worker.stop()


def sink_config(path: Path, bootstrap: str, pattern: str, group: str, catalog: TestCatalog, **sink: Any) -> Path:
    """Write a pipeline config with a ``sink:`` section writing through ``catalog``; returns its path."""
    cfg = {
        "broker": {"bootstrap_servers": bootstrap},
        "topics": [{"name": "unused-source", "format": "canal-json"}],
        "sink": {
            "topic_pattern": pattern,
            "group_id": group,
            "trigger_interval_seconds": 2,
            "catalog": catalog.section(),
            # short-lived JVMs: C1 only halves a cold sink run here (the sink's own UTC flag kept)
            "spark_conf": {"spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:TieredStopAtLevel=1"},
            **sink,
        },
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@dataclass
class SinkResult:
    """The outcome of one sink process."""

    returncode: int
    stdout: str
    stderr: str
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)  # read, changes, upserts, deletes
    seconds: float = 0.0

    @property
    def read(self) -> int:
        return sum(b[0] for b in self.batches)


def _result(code: int, out: str, err: str) -> SinkResult:
    batches = [tuple(int(x) for x in m.groups()) for m in _BATCH.finditer(out)]
    return SinkResult(code, out, err, batches)  # type: ignore[arg-type]


def start_sink(config: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen[str]:
    """``python -m sink --config ...`` in a new session (its own process group)."""
    out: Any = subprocess.PIPE if log is None else log.open("w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "sink", "--config", str(config), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        if log is not None:
            out.close()


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group that ``proc`` leads (the sink and its JVM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def run_sink(config: Path, *args: str, env: dict[str, str] | None = None, timeout_s: float = 240.0,
             log: Path | None = None, kill_when: Callable[[], bool] | None = None) -> SinkResult:
    """Run the sink to its end (or its crash); the process group is killed on a timeout, or
    as soon as ``kill_when()`` (polled every 20 ms) is true.

    Its output goes to ``log`` (default: next to the config), and is returned as ``stdout``.
    """
    log = log or config.with_suffix(f".run{next(_RUNS)}.log")
    started = time.monotonic()
    proc = start_sink(config, *args, env={"PYTHONUNBUFFERED": "1", **(env or {})}, log=log)
    try:
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                kill_group(proc)
                raise AssertionError(f"sink did not finish in {timeout_s}s:\n{log.read_text(errors='replace')[-3000:]}")
            if kill_when is not None and kill_when():
                kill_group(proc)
                break
            time.sleep(0.02)
    except BaseException:  # e.g. the pytest timeout: leave no sink or JVM behind
        kill_group(proc)
        raise
    _reap_group(proc.pid)
    out = log.read_text(errors="replace")
    result = _result(proc.returncode, out, out[-5000:])
    result.seconds = time.monotonic() - started
    return result


def _reap_group(pgid: int, timeout_s: float = 20.0) -> None:
    """Wait until no process of the sink's group is left (its JVM exits once the driver is gone);
    kill what is still there after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


_READER = """
import sys, orjson
from sink.main import load_sink_config
from sink.inspect import read_tables
out = {}
for i, path in enumerate(sys.argv[1:]):
    config, _ = load_sink_config(path)
    config = config.model_copy(update={"catalog": config.catalog.model_copy(update={"name": f"w{i}"})})
    out[path] = read_tables(config, meta=True)
sys.stdout.buffer.write(orjson.dumps(out) + b"\\n")
"""


def read_warehouses(*configs: Path, timeout_s: float = 180.0) -> list[dict[str, Any]]:
    """Every table (rows with ``__cdc_seq``/``__cdc_ts_ms``) of each config's warehouse, read
    in one Spark session (one catalog per warehouse)."""
    proc = subprocess.run(
        [sys.executable, "-c", _READER, *map(str, configs)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, Any] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    return [found[str(c)] for c in configs]


def probe(worker: WorkerProcess, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """GET ``path`` of the worker's web server; ``(0, b"")`` when it does not answer in time."""
    return probe_port(worker.port, path, timeout_s)


def probe_port(port: int, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """GET ``path`` on a loopback port (the worker's web server, the sink's metrics port);
    ``(0, b"")`` when it does not answer in time."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@contextlib.contextmanager
def refuse_writes(directory: Path) -> Iterator[str]:
    """Make ``directory`` refuse new files (and renames, deletes) for the block, a real refusal
    of the file system; yields how. As root, whom permission bits do not stop, the directory is
    made immutable (``chattr +i``: EPERM for everyone); otherwise it loses its write bits."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True, capture_output=True)
        how = f"chattr +i {directory} (immutable: no file created there, even by root)"
    else:
        mode = directory.stat().st_mode
        directory.chmod(mode & ~0o222)
        how = f"chmod a-w {directory}"
    try:
        yield how
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(directory)], check=True, capture_output=True)
        else:
            directory.chmod(mode)


def metric_total(body: bytes, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` (with ``labels``) in a Prometheus text page."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def sink_batches(log: Path) -> list[tuple[int, int, int, int]]:
    """The ``batch:`` progress lines a sink wrote to ``log`` so far."""
    if not log.exists():
        return []
    return [(int(a), int(b), int(c), int(d)) for a, b, c, d in _BATCH.findall(log.read_text(errors="replace"))]


def warehouse_files(warehouse: Path) -> dict[str, tuple[int, int]]:
    """Per ``namespace.table`` of a warehouse (tables at ``<namespace>/<table>``, as the hadoop
    catalog and the REST catalog's JdbcCatalog place them): (metadata versions, data and
    delete files) on disk, committed or not (a kill mid-commit leaves uncommitted files). The
    table of deleted keys (``sink.deleted_keys_table``) is left out: its files are written
    before the tables' commits."""
    from sink.config import SinkConfig

    memory = SinkConfig.model_fields["deleted_keys_table"].default
    out: dict[str, tuple[int, int]] = {}
    for meta in sorted(warehouse.glob("*/*/metadata")):
        if f"{meta.parent.parent.name}.{meta.parent.name}" == memory:
            continue
        name = f"{meta.parent.parent.name}.{meta.parent.name}"
        versions = len(list(meta.glob("*.metadata.json")))  # hadoop: v<N>.; JdbcCatalog: <N>-<uuid>.
        files = len(list((meta.parent / "data").glob("*.parquet")))
        out[name] = (versions, files)
    return out


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # a v2 record batch's header, 61 bytes


@dataclass
class DiskBatches:
    """The record batches of some partitions on every replica's disk."""

    batches: int = 0
    records: int = 0
    not_idempotent: list[str] = field(default_factory=list)  # batches without a producer id or sequence
    producer_ids: set[int] = field(default_factory=set)


def disk_batches(cluster: KafkaCluster, topics: dict[str, int]) -> DiskBatches:
    """Every record batch of ``topics`` (name -> partitions) in every node's log segments
    (``<log.dirs>/<topic>-<partition>/*.log``), read from its header: an idempotent producer
    writes a producer id and a base sequence (both -1 otherwise)."""
    out = DiskBatches()
    for node in cluster.nodes:
        for topic, partitions in topics.items():
            for p in range(partitions):
                for segment in sorted((node.directory / "data" / f"{topic}-{p}").glob("*.log")):
                    try:
                        data = segment.read_bytes()
                    except FileNotFoundError:  # deleted (retention, compaction) since the listing
                        continue
                    at = 0
                    while at + _BATCH_HEADER.size <= len(data):
                        (base, length, _epoch, magic, _crc, _attrs, _delta, _ts, _max_ts, pid, _pepoch, seq,
                         records) = _BATCH_HEADER.unpack_from(data, at)
                        if length <= 0 or at + 12 + length > len(data):
                            break  # the end of what was written (or preallocated)
                        out.batches += 1
                        out.records += records
                        if magic != 2 or pid < 0 or seq < 0:
                            out.not_idempotent.append(
                                f"node {node.node_id} {topic}[{p}]@{base}: magic={magic} producer_id={pid} sequence={seq}")
                        else:
                            out.producer_ids.add(pid)
                        at += 12 + length
    return out
