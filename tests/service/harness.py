"""Helpers for the service integration tests: worker child processes and topic readers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from service.local import LocalProcess, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]

    @property
    def key_json(self) -> Any:
        return None if self.key is None else json.loads(self.key)

    @property
    def value_json(self) -> Any:
        return None if self.value is None else json.loads(self.value)


class WorkerProcess:
    """``cdcnorm worker`` in a child process with its own web port."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str = "worker") -> None:
        self.port = free_port()
        config = {**config, "web": {"host": "127.0.0.1", "port": self.port}}
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        log = workdir / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdcnorm.cli", "worker", "--config", str(self.config_path)],
            cwd=ROOT,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.process = LocalProcess(name, proc, f"http://127.0.0.1:{self.port}", log)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def readiness(self) -> dict[str, Any]:
        try:
            status, body = self.get("/readyz")
        except OSError:
            return {"ready": False}
        report: dict[str, Any] = json.loads(body)
        report["status"] = status
        return report

    def wait_ready(self, timeout_s: float = 60.0, partitions: int | None = None) -> None:
        def ok() -> bool:
            if not self.process.running:
                raise RuntimeError(f"worker exited:\n{self.process.log_tail()}")
            report = self.readiness()
            if not report.get("ready"):
                return False
            return partitions is None or len(report.get("assigned_partitions", [])) == partitions

        wait_for(ok, timeout_s, "worker readiness", 0.2)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        _, body = self.get("/metrics")
        out = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def total(self, name: str, **labels: str) -> float:
        total = 0.0
        for (n, lbls), value in self.metrics().items():
            d = dict(lbls)
            if n == name and all(d.get(k) == v for k, v in labels.items()):
                total += value
        return total

    def wait_processed(self, topic: str, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` messages of ``topic`` were consumed and every output was acked."""

        def done() -> bool:
            if not self.process.running:
                raise RuntimeError(f"worker exited:\n{self.process.log_tail()}")
            try:
                return (
                    self.total("cdcnorm_messages_in_total", topic=topic) >= count
                    and self.total("cdcnorm_inflight_messages") == 0
                )
            except OSError:
                return False

        wait_for(done, timeout_s, f"{count} messages of {topic}", 0.2)

    def stop(self) -> None:
        self.process.stop(20)


def read_topics(bootstrap: str, topics: list[str], idle_s: float = 1.5, timeout_s: float = 30.0) -> list[Record]:
    """Every record of ``topics`` from the beginning; done when a poll round returns nothing
    for ``idle_s`` (never trusts high watermarks)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cdcnorm-test-reader", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(timeout=10).topics
        assignment = [
            TopicPartition(t, p, OFFSET_BEGINNING)
            for t in topics
            if t in metadata
            for p in sorted(metadata[t].partitions)
        ]
        if not assignment:
            return []
        consumer.assign(assignment)
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            last = time.monotonic()
            out.append(
                Record(
                    msg.topic() or "",
                    msg.partition() or 0,
                    msg.offset() or 0,
                    msg.key(),
                    msg.value(),
                    {k: v for k, v in (msg.headers() or [])},
                )
            )
        return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))
    finally:
        consumer.close()


def list_topics(bootstrap: str, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return sorted(t for t in topics if t == prefix or t.startswith(prefix + "."))
