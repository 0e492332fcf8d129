"""``cdcnorm worker`` with JSON logs, against a real Tansu broker and Redis (``-m integration``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from service.local import create_topics
from tests.service.harness import WorkerProcess
from tests.service.test_integration import base_config, canal, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_every_worker_log_line_is_a_json_object(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"lg{uuid.uuid4().hex[:8]}"
    source = f"{prefix}-src"
    create_topics(kafka_bootstrap, [source], partitions=1)
    good = canal("INSERT", [{"id": "1", "name": "a", "email": "a@x"}])
    produce(kafka_bootstrap, source, [(b"k", good), (b"bad", b'{"not json'), (b"k", good)], partition=0)
    monkeypatch.setenv("CDCNORM_LOG_FORMAT", "json")  # the worker child inherits it
    worker = WorkerProcess(
        base_config(kafka_bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}]),
        tmp_path,
    )
    try:
        worker.wait_ready()
        worker.wait_processed(source, 3)
    finally:
        worker.stop()
    lines = [x for x in (tmp_path / "worker.log").read_bytes().splitlines() if x.strip()]
    objects = [orjson.loads(x) for x in lines]  # each line is one JSON object, Faust's own lines too
    assert all({"level", "logger", "message", "time"} <= set(o) for o in objects)
    assert any(o["logger"].startswith("faust") for o in objects)
    assert any(o["message"].startswith("worker starting") for o in objects)
    dead = [o for o in objects if o["message"].startswith("dead-letter")]
    assert [(o["level"], o["topic"], o["partition"], o["offset"], o["format"], o["error_class"], o["dlq_topic"])
            for o in dead] == [("WARNING", source, 0, 1, "canal-json", "DecodeError", f"{prefix}.dlq")]
