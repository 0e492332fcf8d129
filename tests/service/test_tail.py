"""``cdcnorm tail``: its flags against a real Tansu broker (``-m integration``), the record shapes
and the one-line errors."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from cdcnorm.cli import app
from service.app import Normalizer
from service.config import parse_config
from service.local import create_topics, free_port
from service.tail import unwrap_value, without_schema
from tests.service.harness import ROOT
from tests.service.test_integration import canal, produce
from transforms.decoders import Message

ROWS = [{"id": str(i), "name": f"n{i}", "email": f"{i}@x"} for i in range(1, 4)]


def _normalized(transforms: list[dict[str, Any]] | None = None) -> list[tuple[bytes | None, bytes | None]]:
    """Canonical records (key, value) of an insert, an update and a delete, with the delete's tombstone."""
    entry: dict[str, Any] = {"name": "src", "format": "canal-json"}
    if transforms:
        entry["transforms"] = transforms
    normalizer = Normalizer(parse_config({"topics": [entry]}))
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    messages = [canal("INSERT", ROWS[:1]), canal("UPDATE", [{**ROWS[0], "name": "m1"}], [{"name": "n1"}], es=2),
                canal("DELETE", [{**ROWS[0], "name": "m1"}], es=3)]
    out = []
    for offset, value in enumerate(messages):
        outcome = normalizer.process(Message(value, None, "src", 0, offset), runtime)
        assert outcome.dlq is None
        out += [(r.key_bytes(), r.value_bytes()) for r in outcome.records]
    return out


def test_unwrap_gives_the_row_extract_new_record_state_gives() -> None:
    records = _normalized()
    rewritten = _normalized([{"type": "unwrap", "delete.handling.mode": "rewrite", "drop.tombstones": False}])
    assert len(records) == len(rewritten) == 4  # c, u, d, tombstone
    for (_, value), (_, row) in zip(records, rewritten, strict=True):
        ours = unwrap_value(None if value is None else orjson.loads(value))
        theirs = None if row is None else without_schema(orjson.loads(row))
        assert ours == theirs
    assert unwrap_value(orjson.loads(records[2][1] or b"null"))["__deleted"] == "true"


def test_other_records_are_not_unwrapped() -> None:
    truncate = {"schema": {}, "payload": {"op": "t", "before": None, "after": None}}
    ddl = {"schema": {}, "payload": {"ddl": "CREATE TABLE t (id int)"}}
    assert unwrap_value(truncate) is truncate and unwrap_value(ddl) is ddl and unwrap_value(None) is None
    assert without_schema({"payload": 1}) == {"payload": 1}


def test_an_unreachable_broker_is_a_one_line_error() -> None:
    port = free_port()  # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "cdcnorm.cli", "tail", "t", "--bootstrap", f"127.0.0.1:{port}", "--connect-timeout", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error: cannot reach the Kafka broker at 127.0.0.1:{port}: Failed to get metadata: Local: Broker transport "
        "failure"
    ]
    assert proc.stdout == ""


def test_from_beginning_and_offset_exclude_each_other() -> None:
    result = CliRunner().invoke(app, ["tail", "t", "--from-beginning", "--offset", "3"])
    assert result.exit_code == 1 and result.output == "error: give --from-beginning or --offset, not both\n"


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """Two partitions: partition 0 holds the four canonical records, partition 1 ten plain JSON values."""
    name = f"tail-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, [name], partitions=2)
    produce(kafka_bootstrap, name, _normalized(), partition=0)
    produce(kafka_bootstrap, name, [(str(i).encode(), orjson.dumps({"n": i})) for i in range(10)], partition=1)
    return name


def _tail(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["tail", *args])
    assert result.exit_code == 0, result.output
    return [orjson.loads(x) for x in result.stdout.splitlines()]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_partition_offset_and_count(kafka_bootstrap: str, topic: str) -> None:
    everything = _tail(topic, "--bootstrap", kafka_bootstrap, "--from-beginning", "--idle-timeout", "2")
    assert sorted((r["partition"], r["offset"]) for r in everything) == [(0, o) for o in range(4)] + [
        (1, o) for o in range(10)
    ]
    some = _tail(topic, "--bootstrap", kafka_bootstrap, "--partition", "1", "--offset", "4", "--count", "3")
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in some] == [
        (1, 4, 4, {"n": 4}), (1, 5, 5, {"n": 5}), (1, 6, 6, {"n": 6})
    ]
    # a count larger than what is there ends with the idle timeout: watermarks are never asked
    rest = _tail(topic, "--bootstrap", kafka_bootstrap, "-p", "1", "--offset", "8", "-n", "5", "--idle-timeout", "2")
    assert [r["offset"] for r in rest] == [8, 9]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_payload_only_and_unwrap(kafka_bootstrap: str, topic: str) -> None:
    args = [topic, "--bootstrap", kafka_bootstrap, "--partition", "0", "--from-beginning", "--count", "4"]
    whole = _tail(*args)
    assert all(set(r["key"]) == {"schema", "payload"} for r in whole)
    bare = _tail(*args, "--payload-only")
    assert [r["key"] for r in bare] == [{"id": 1}] * 4
    assert [r["value"] for r in bare] == [r["value"]["payload"] for r in whole[:3]] + [None]
    rows = _tail(*args, "--unwrap")
    assert [r["value"] for r in rows] == [
        {"id": 1, "name": "n1", "email": "1@x", "__deleted": "false"},
        {"id": 1, "name": "m1", "email": "1@x", "__deleted": "false"},
        {"id": 1, "name": "m1", "email": "1@x", "__deleted": "true"},
        None,
    ]
    assert rows[0]["key"] == whole[0]["key"]  # --unwrap leaves keys alone; --payload-only drops their schema
    assert _tail(*args, "--unwrap", "--payload-only")[0]["key"] == {"id": 1}


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_missing_topic_or_partition_is_a_one_line_error(kafka_bootstrap: str, topic: str) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["tail", topic, "--bootstrap", kafka_bootstrap, "--partition", "7"])
    assert result.exit_code == 1 and result.output == f"error: topic {topic!r} has no partition 7 (it has 2)\n"
    missing = f"{topic}-missing"
    result = runner.invoke(app, ["tail", missing, "--bootstrap", kafka_bootstrap])
    assert result.exit_code == 1 and result.output == f"error: topic {missing!r} does not exist\n"
