"""``cdcnorm up``: the whole pipeline on one machine, fed with the sample messages of every format.

Steps:

1. Use the broker given (``bootstrap``) if it answers, else start one on loopback: a memory-only
   Tansu broker (``broker="tansu"``, the default; the ``local`` extra) or Apache Kafka itself, one
   KRaft node (``broker="kafka"``; jars fetched once from Maven Central, :mod:`service.local_kafka`);
   the same for Redis (``redis-server``).
2. Create one source topic per sample format and produce the samples
   (``cdcnorm/samples/<format>.txt``; binary formats hold base64 lines, a ``"__key_lines": true``
   in ``<format>.options.json`` means lines alternate key and value). All samples of a format go
   to partition 0, so metadata messages are read before the data that needs them.
3. Write a pipeline config into a fresh work directory and run the worker as a child process
   (``cdcnorm worker``); show progress from its ``/metrics`` until every sample was read and
   nothing is in flight (``keep``: run on until Ctrl-C; ``duration_s``: stop then).
4. With ``with_sink``, once every sample is through: run the Iceberg sink once over the normalized
   data topics (``python -m sink --once``) and read the tables back (``sink.inspect``) through the
   catalog: a hadoop warehouse in the work directory (``catalog="hadoop"``, the default), or
   Apache Iceberg's REST catalog server started with its state in the work directory
   (``catalog="rest"``; jars fetched once from Maven Central, :mod:`service.local_catalog`).
5. Return the counts per format (produced, messages in, records out, DLQ), the output topics and
   the tables.

Everything it started is stopped at the end or on Ctrl-C; the work directory (config, logs,
warehouse) stays. :data:`AFTER_START_HOOKS` run once the worker started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from service.local import (
    LocalProcess,
    broker_reachable,
    create_topics,
    free_port,
    redis_reachable,
    start_broker,
    start_redis,
)
from service.maven import LocalServiceError

__all__ = ["AFTER_START_HOOKS", "CATALOGS", "SAMPLES", "Sample", "UpContext", "UpResult", "UpStepError", "load_samples",
           "run_up"]


class UpStepError(LocalServiceError):
    """A part `cdcnorm up` runs stopped (the worker, the sink, reading the tables back): the
    message says which, with the end of its log; the CLI prints it as one error, not a traceback."""

SAMPLES = Path(__file__).parent / "samples"


@dataclass(frozen=True)
class Sample:
    """The sample messages of one format, ready to produce."""

    format_id: str
    options: dict[str, Any]
    messages: list[tuple[bytes | None, bytes | None]]


def load_samples(directory: Path = SAMPLES) -> list[Sample]:
    """Every ``<format>.txt`` in ``directory`` whose decoder is available, in file-name order."""
    from transforms.decoders import decoder_class
    from transforms.errors import ConfigError

    out = []
    for path in sorted(directory.glob("*.txt")):
        fmt = path.stem
        try:
            binary = decoder_class(fmt).binary
        except ConfigError:
            continue
        opt_path = path.with_suffix(".options.json")
        options = json.loads(opt_path.read_text()) if opt_path.exists() else {}
        key_lines = bool(options.pop("__key_lines", False))
        lines = [ln for ln in path.read_bytes().splitlines() if ln.strip()]
        pairs: list[tuple[bytes | None, bytes]] = (
            list(zip(lines[0::2], lines[1::2], strict=False)) if key_lines else [(None, ln) for ln in lines]
        )
        messages: list[tuple[bytes | None, bytes | None]] = []
        for key, raw in pairs:
            value: bytes | None = base64.b64decode(raw.strip()) if binary else raw
            if value == b"null" and key_lines:
                value = None
            messages.append((key, value))
        out.append(Sample(fmt, options, messages))
    return out


@dataclass
class UpContext:
    """What `up` set up: the broker, Redis, topics, work directory and the processes it started."""

    bootstrap: str
    redis_url: str
    prefix: str
    source_topics: dict[str, str]
    workdir: Path
    processes: list[Any] = field(default_factory=list)
    """What ``up`` started (brokers, Redis, the worker, a catalog): each has ``name`` and ``stop()``."""
    broker: str = ""
    """What the broker is: its description when ``up`` started it, else the address given."""
    catalog: str = ""
    """The Iceberg catalog the sink wrote through (once it ran)."""


AFTER_START_HOOKS: list[Callable[[UpContext], LocalProcess | None]] = []
"""Called once the worker runs; a returned process is stopped with the others at the end."""


@dataclass
class UpResult:
    """Per-format counts after the run."""

    rows: list[dict[str, Any]]
    output_topics: list[str]
    finished: bool
    context: UpContext
    tables: dict[str, Any] = field(default_factory=dict)
    sink_log: Path | None = None


CATALOGS = ("hadoop", "rest")
"""The Iceberg catalogs ``cdcnorm up`` writes through."""


def start_catalog(context: UpContext, kind: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The sink's catalog section for a catalog of ``kind``; a REST catalog server is started
    (and added to the context's processes, stopped at the end)."""
    if kind == "hadoop":
        return {"warehouse": str(context.workdir / "warehouse")}
    if kind != "rest":
        raise ValueError(f"unknown catalog {kind!r}; expected one of {', '.join(CATALOGS)}")
    from service.local_catalog import start_rest_catalog

    log("starting the Iceberg REST catalog (Apache Iceberg's RESTCatalogServer) on loopback")
    server = start_rest_catalog(context.workdir / "rest", progress=log)
    context.processes.append(server)
    log(f"started {server.extra['description']}")
    return server.section()


def run_sink_once(
    context: UpContext, topics: list[str], log: Callable[[str], None], catalog: str = "hadoop"
) -> tuple[dict[str, Any], Path]:
    """Run the Iceberg sink over the normalized topics until drained, then read the tables back."""
    section = start_catalog(context, catalog, log)
    where = section["properties"]["uri"] if catalog == "rest" else section["warehouse"]
    context.catalog = f"{catalog} catalog at {where}"
    config = {
        "topic_prefix": context.prefix,
        "broker": {"bootstrap_servers": context.bootstrap, "session_timeout_s": 6},
        "topics": [{"name": "unused", "format": "canal-json"}],
        "sink": {
            "topics": topics,
            "group_id": f"cdcnorm-up-sink-{context.workdir.name}",
            "trigger_interval_seconds": 2,
            "catalog": section,
        },
    }
    path = context.workdir / "sink.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    sink_log = context.workdir / "sink.log"
    log(f"running the Iceberg sink over {len(topics)} normalized topics ({context.catalog}, log: {sink_log})")
    with sink_log.open("ab") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "sink", "--config", str(path), "--once"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600, check=False,
        )
    if proc.returncode != 0:
        raise UpStepError(f"the sink exited with {proc.returncode}; see {sink_log}")
    shown = subprocess.run(
        [sys.executable, "-m", "sink.inspect", "--config", str(path), "--limit", "3"],
        capture_output=True, timeout=300, check=False,
    )
    if shown.returncode != 0:
        raise UpStepError(f"reading the Iceberg tables failed: {shown.stderr.decode()[-2000:]}")
    import orjson

    tables: dict[str, Any] = orjson.loads(shown.stdout.strip().splitlines()[-1])
    return tables, sink_log


def _metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _sum(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    total = 0.0
    for (n, lbls), value in metrics.items():
        if n != name:
            continue
        d = dict(lbls)
        if all(d.get(k) == v for k, v in labels.items()):
            total += value
    return total


def run_up(
    bootstrap: str | None = None,
    redis_url: str = "redis://127.0.0.1:6379/0",
    duration_s: float | None = None,
    keep: bool = False,
    prefix: str = "cdcnorm",
    broker: str = "tansu",
    catalog: str = "hadoop",
    samples_dir: Path = SAMPLES,
    with_sink: bool = True,
    progress: Callable[[str], None] | None = None,
    log: Callable[[str], None] = print,
    on_ready: Callable[[UpResult], None] | None = None,
) -> UpResult:
    """Run the pipeline over the samples; see the module docstring. ``on_ready`` is given the
    result as soon as every sample is through (and the sink ran): with ``keep`` the pipeline
    then runs on, so the user can look at it, until Ctrl-C or ``duration_s``."""
    from confluent_kafka import Producer

    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-up-"))
    started: list[Any] = []
    run = uuid.uuid4().hex[:8]
    try:
        described = bootstrap or ""
        if bootstrap is None or not broker_reachable(bootstrap, 3.0):
            if bootstrap is not None:
                log(f"broker {bootstrap} does not answer; starting a local one ({broker})")
            if broker == "kafka":
                log("starting Apache Kafka (KRaft, 1 node) on loopback")
            local = start_broker(broker, log_dir=workdir, progress=log)
            started.append(local)
            bootstrap = local.address
            described = local.description
            log(f"started {described}")
        if not redis_reachable(redis_url):
            redis = start_redis(log_dir=workdir)
            started.append(redis)
            log(f"Redis at {redis_url} does not answer; started redis-server on {redis.address}")
            redis_url = redis.address
        samples = load_samples(samples_dir)
        source = {s.format_id: f"cdcnorm-samples.{run}.{s.format_id}" for s in samples}
        create_topics(bootstrap, source.values(), partitions=4)
        web_port = free_port()
        config = {
            "topic_prefix": prefix,
            "broker": {"bootstrap_servers": bootstrap, "session_timeout_s": 6},
            "redis": {"url": redis_url, "key_prefix": f"cdcnorm:up:{run}:"},
            "web": {"host": "127.0.0.1", "port": web_port},
            "worker": {"app_id": f"cdcnorm-up-{run}", "data_dir": str(workdir / "faust")},
            "topics": [{"name": source[s.format_id], "format": s.format_id, "options": s.options} for s in samples],
        }
        config_path = workdir / "pipeline.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for s in samples:
            for key, value in s.messages:
                producer.produce(source[s.format_id], value=value, key=key, partition=0)
        producer.flush(30)
        del producer
        log(f"produced {sum(len(s.messages) for s in samples)} sample messages of {len(samples)} formats")
        worker = subprocess.Popen(
            [sys.executable, "-m", "cdcnorm.cli", "worker", "--config", str(config_path)],
            stdout=(workdir / "worker.log").open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # stopped by `up` before the broker, not by the terminal's Ctrl-C
        )
        worker_proc = LocalProcess("worker", worker, f"http://127.0.0.1:{web_port}", workdir / "worker.log")
        started.append(worker_proc)
        log(f"worker started (log: {workdir / 'worker.log'}, metrics: http://127.0.0.1:{web_port}/metrics)")
        context = UpContext(bootstrap, redis_url, prefix, source, workdir, started, described)
        for hook in AFTER_START_HOOKS:
            proc = hook(context)
            if proc is not None:
                started.append(proc)
        expected = {source[s.format_id]: len(s.messages) for s in samples}
        deadline = None if duration_s is None else time.monotonic() + duration_s
        metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        result: UpResult | None = None

        def summary(finished: bool) -> UpResult:
            rows = [
                {
                    "format": s.format_id,
                    "source_topic": source[s.format_id],
                    "produced": len(s.messages),
                    "messages_in": int(_sum(metrics, "cdcnorm_messages_in_total", topic=source[s.format_id])),
                    "records_out": int(_sum(metrics, "cdcnorm_records_out_total", topic=source[s.format_id])),
                    "dlq": int(_sum(metrics, "cdcnorm_dlq_total", topic=source[s.format_id])),
                }
                for s in samples
            ]
            from confluent_kafka.admin import AdminClient

            topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics
            outputs = sorted(t for t in topics if t == prefix or t.startswith(prefix + "."))
            return UpResult(rows, outputs, finished, context)

        try:
            while True:
                if not worker_proc.running:
                    raise UpStepError(f"the worker exited with {worker.returncode}:\n{worker_proc.log_tail()}")
                with contextlib.suppress(OSError):
                    metrics = _metrics(web_port)
                seen = {t: _sum(metrics, "cdcnorm_messages_in_total", topic=t) for t in expected}
                inflight = _sum(metrics, "cdcnorm_inflight_messages")
                if progress is not None:
                    progress(
                        f"in {int(sum(seen.values()))}/{sum(expected.values())}  "
                        f"out {int(_sum(metrics, 'cdcnorm_records_out_total'))}  "
                        f"dlq {int(_sum(metrics, 'cdcnorm_dlq_total'))}  inflight {int(inflight)}"
                        + ("  (running; Ctrl-C stops)" if result is not None else "")
                    )
                if result is None and metrics and all(seen[t] >= n for t, n in expected.items()) and inflight == 0:
                    result = summary(finished=True)  # every sample is through: the sink, then the summary
                    if with_sink:
                        data_topics = [t for t in result.output_topics
                                       if t not in (prefix, f"{prefix}.dlq", f"{prefix}.transaction")]
                        result.tables, result.sink_log = run_sink_once(context, data_topics, log, catalog)
                    if on_ready is not None:
                        on_ready(result)
                    if not keep:
                        return result
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
        except KeyboardInterrupt:
            log("interrupted; stopping")
        if result is None:  # stopped before every sample was through: what was done, no sink
            result = summary(finished=False)
            if on_ready is not None:
                on_ready(result)
        return result
    finally:
        for service in reversed(started):
            service.stop()
