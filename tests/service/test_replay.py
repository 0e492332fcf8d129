"""``cdcnorm dlq replay`` against a real broker (Apache Kafka) and Redis (``-m integration``), and its
produce-then-commit order with fakes."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app
from service.app import Normalizer
from service.config import parse_config
from service.dlq import (
    ERROR_CLASS,
    ERROR_MESSAGE,
    ERROR_OFFSET,
    ERROR_TOPIC,
    FORMAT_HEADER,
    ROW_INDEX,
    LetterContext,
    dead_letter,
)
from service.local import create_topics
from service.replay import (
    REPLAY_ATTEMPTS_HEADER,
    REPLAY_RUN_HEADER,
    ReadOnlyMetadata,
    ReadOnlyRowState,
    ReplayError,
    _produce_and_commit,
    _Replayer,
)
from tests.service.harness import read_topics
from tests.service.test_integration import canal
from transforms.decoders import Message
from transforms.errors import DecodeError
from transforms.metadata import InMemoryMetadataStore, InMemoryRowStateStore

GOOD = canal("INSERT", [{"id": "1", "name": "a", "email": "a@x"}])


class _Msg:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._where = (topic, partition, offset)

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]


class _Producer:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.callbacks: list[Any] = []

    def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        self.callbacks.append((on_delivery, _Msg(topic, 0, len(self.callbacks))))

    def flush(self, timeout: float) -> int:
        from confluent_kafka import KafkaError

        for callback, msg in self.callbacks:
            callback(KafkaError(KafkaError._MSG_TIMED_OUT) if self.fail else None, msg)
        return 0

    def poll(self, timeout: float) -> int:
        return 0


class _Consumer:
    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []

    def commit(self, *, offsets: Any, asynchronous: bool) -> None:
        assert not asynchronous
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])


def test_offsets_are_committed_only_after_every_record_is_acknowledged() -> None:
    batch = [(_Msg("dlq", 0, 7), [("out", b"k", b"v", [])]), (_Msg("dlq", 1, 3), [("out", b"k", b"v", [])])]
    consumer = _Consumer()
    _produce_and_commit(_Producer(fail=False), consumer, batch)
    assert consumer.commits == [[("dlq", 0, 8), ("dlq", 1, 4)]]

    consumer = _Consumer()
    with pytest.raises(ReplayError, match="produce failed, the batch is not committed"):
        _produce_and_commit(_Producer(fail=True), consumer, batch)
    assert consumer.commits == []


class _Letter(_Msg):
    """A consumed dead letter, as confluent-kafka hands it over."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]]) -> None:
        super().__init__(topic, partition, offset)
        self._record = (key, value, headers)

    def key(self) -> bytes | None:
        return self._record[0]

    def value(self) -> bytes | None:
        return self._record[1]

    def headers(self) -> list[tuple[str, bytes]]:
        return self._record[2]

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def test_an_oversized_message_is_not_replayed() -> None:
    """Its dead letter holds a prefix only: it goes back to the DLQ unchanged, with the original's
    coordinates in the reason."""
    config = parse_config({"worker": {"max_message_bytes": 1024, "oversized_prefix_bytes": 8},
                           "topics": [{"name": "src", "format": "canal-json"}]})
    normalizer = Normalizer(config)
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    outcome = normalizer.process(Message(b"x" * 4096, b"k", "src", 2, 99), runtime)
    assert outcome.dlq is not None
    topic, key, value, headers = outcome.dlq
    replayer = _Replayer(config, normalizer, "run-1", dry_run=False)
    result, writes = replayer.handle(_Letter(topic, 0, 5, key, value, list(headers)))
    assert result.outcome == "unreplayable" and result.error is not None
    assert "oversized message (4097 bytes)" in result.error and "src[2]@99" in result.error
    assert [(t, k, v) for t, k, v, _ in writes] == [(topic, b"k", b"xxxxxxxx")]


def test_a_row_letter_is_replayed_as_its_whole_message_once_every_row_decodes() -> None:
    """The dead letter of one bad row: while a row still fails nothing of the message is produced
    and the letter of its own row goes back; once every row decodes, the whole message is
    produced, the rows the worker wrote before included (the sink's upsert by key absorbs them)."""
    csv = b"\n".join([b"r_regionkey,r_name,r_comment", b"0,AFRICA,a", b"one,AMERICA,b", b"two,ASIA,c", b"3,EUROPE,d"])

    def entry(**options: str) -> Any:
        return parse_config({"topic_prefix": "p", "topics": [
            {"name": "src", "format": "arcion-csv", "options": {"table": "tpch.region", "key.columns": "r_regionkey",
                                                                  **options}}]})

    strict = entry(**{"column.types": "r_regionkey:int64"})
    worker = Normalizer(strict)
    runtime = worker.runtime_for("src")
    assert runtime is not None
    outcome = worker.process(Message(csv, b"k", "src", 0, 7), runtime)
    assert len([r for r in outcome.records if r.value is not None]) == 2 and len(outcome.row_letters) == 2
    second = outcome.row_letters[1]
    assert dict(second[3])[ROW_INDEX] == b"3"

    result, writes = _Replayer(strict, Normalizer(strict), "run-1", dry_run=False).handle(
        _Letter(second[0], 0, 5, second[1], second[2], list(second[3])))
    assert result.outcome == "failed" and result.source == ("src", 0, 7)
    ((topic, key, value, headers),) = writes  # its own row's letter goes back, nothing else
    assert (topic, key, value) == ("p.dlq", b"k", csv) and dict(headers)[ROW_INDEX] == b"3"

    lenient = entry()  # no column types: every value a string, every row decodes
    result, writes = _Replayer(lenient, Normalizer(lenient), "run-2", dry_run=False).handle(
        _Letter(second[0], 0, 5, second[1], second[2], list(second[3])))
    assert result.outcome == "replayed"
    keys = [orjson.loads(k)["payload"]["r_regionkey"] for t, k, v, _ in writes if v is not None and k is not None]
    assert keys == ["0", "one", "two", "3"]  # the whole message


def test_a_dry_run_writes_no_state() -> None:
    meta_base, rows_base = InMemoryMetadataStore(), InMemoryRowStateStore()
    meta_base.put("ns", "a", 1)
    rows_base.put_rows("t", {"k1": {"id": 1}})
    meta, rows = ReadOnlyMetadata(meta_base), ReadOnlyRowState(rows_base)
    meta.put("ns", "a", 2)
    meta.put("ns", "b", 3)
    rows.put_rows("t", {"k1": None, "k2": {"id": 2}})
    assert (meta.get("ns", "a"), meta.get("ns", "b"), meta_base.get("ns", "a"), meta_base.get("ns", "b")) == (2, 3, 1, None)
    assert rows.get_rows("t", ["k1", "k2", "k3"]) == [None, {"id": 2}, None]
    assert rows_base.get_rows("t", ["k1", "k2"]) == [{"id": 1}, None]


# ----------------------------------------------------------------------------- against the broker


def _dead_letters(dlq: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """What the worker wrote while the entry of ``src`` had the wrong format: a Canal message it
    could not decode (fixed by the new config), a message that is no JSON at all, a message of a
    topic the config no longer has, and a record without error headers."""
    def letter(value: bytes, topic: str, offset: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
        message = Message(value, b"key-%d" % offset, topic, 0, offset, None, (("trace-id", b"t%d" % offset),))
        rec = dead_letter(message, DecodeError("maxwell-json", "data", "expected an object"), LetterContext(dlq, "maxwell-json", "g"))
        return rec.key, rec.value, list(rec.headers)

    return [letter(GOOD, "src", 10), letter(b'{"not json', "src", 11), letter(GOOD, "gone", 12),
            (b"k", b"stray", [("x", b"1")])]


@pytest.fixture
def setup(kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path,
          request: pytest.FixtureRequest) -> dict[str, Any]:
    """A DLQ with four dead letters and a config replaying them; ``broker.group_protocol`` is the
    test's indirect parameter (classic by default)."""
    return _setup(kafka_bootstrap, redis_url, redis_prefix, tmp_path, getattr(request, "param", "classic"))


def _setup(kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path, protocol: str) -> dict[str, Any]:
    prefix = f"rp{uuid.uuid4().hex[:8]}"
    dlq = f"{prefix}.dlq"
    create_topics(kafka_bootstrap, [dlq], partitions=2)
    letters = _dead_letters(dlq)
    produce_with_headers(kafka_bootstrap, dlq, letters)
    config = {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": kafka_bootstrap, "session_timeout_s": 6,
                   "group_protocol": protocol},
        "redis": {"url": redis_url, "key_prefix": redis_prefix},
        "topics": [{"name": "src", "format": "canal-json"}],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return {"prefix": prefix, "dlq": dlq, "config": config, "path": path, "bootstrap": kafka_bootstrap,
            "group": f"{prefix}-replay"}


def produce_with_headers(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list[Any]]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(30) == 0


def _replay(s: dict[str, Any], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    result = CliRunner().invoke(app, ["dlq", "replay", "--config", str(s["path"]), "--group", s["group"],
                                      "--idle-timeout", "2", *args])
    lines = [orjson.loads(x) for x in result.stdout.splitlines()]
    return result.exit_code, lines, result.stderr


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_dry_run_says_what_would_happen_and_changes_nothing(setup: dict[str, Any],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    s = setup
    with caplog.at_level(logging.INFO):
        code, lines, summary = _replay(s, "--dry-run")
    assert code == 2, summary
    # the result lines say what would fail; a dry run dead-letters nothing, so it logs no dead letter
    assert not [r.getMessage() for r in caplog.records if r.getMessage().startswith("dead-letter")]
    assert [(x["dlq"]["offset"], x["outcome"]) for x in lines] == [
        (0, "would-replay"), (1, "failed"), (2, "unreplayable"), (3, "unreplayable"),
    ]
    assert lines[0]["source"] == {"topic": "src", "partition": 0, "offset": 10}
    assert lines[0]["entry"] == "src" and lines[0]["topics"] == {f"{s['prefix']}.shop.users": 1}
    assert lines[1]["error_class"] == "DecodeError" and "canal-json" in lines[1]["error"]
    assert "no topics[] entry of the config handles source topic 'gone'" in lines[2]["error"]
    assert "no __connect.errors.topic header" in lines[3]["error"]
    assert summary.splitlines()[-1] == (
        f"4 dead letters read from {s['dlq']}: 1 would succeed (1 records to 1 topics), 1 would still fail "
        "(DecodeError: 1), 2 cannot be replayed; dry run: nothing produced, no offset committed"
    )
    assert [r.offset for r in read_topics(s["bootstrap"], [s["dlq"]])] == [0, 1, 2, 3]  # nothing written back
    assert read_topics(s["bootstrap"], [f"{s['prefix']}.shop.users"]) == []
    assert _replay(s, "--dry-run")[1] == lines  # nothing committed: the same again


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_replay_on_a_kafka_that_just_started(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    """A broker just started loads its offsets topic before it coordinates a group: reading the
    group's offsets answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a moment, which
    the replay waits out (seen on Apache Kafka, when the replay was the session's first test)."""
    from service.local import start_broker

    broker = start_broker("kafka", log_dir=tmp_path / "broker")
    try:
        s = _setup(broker.address, redis_url, redis_prefix, tmp_path, "classic")
        code, lines, summary = _replay(s, "--dry-run")
        assert code == 2, summary
        assert [x["outcome"] for x in lines] == ["would-replay", "failed", "unreplayable", "unreplayable"]
    finally:
        broker.stop()


@pytest.mark.integration
@pytest.mark.timeout(180)
@pytest.mark.parametrize("setup", ["classic", "consumer"], indirect=True)
def test_replay_produces_requeues_and_commits(setup: dict[str, Any]) -> None:
    """Also with ``broker.group_protocol: consumer``, which the worker refuses: the replay never
    joins its group (it assigns the DLQ's partitions and commits as a simple group), so the
    protocol does not touch it, and its group remembers how far it got all the same."""
    s = setup
    code, lines, summary = _replay(s)
    assert code == 2, summary
    assert [x["outcome"] for x in lines] == ["replayed", "failed", "unreplayable", "unreplayable"]
    assert [x.get("requeued_to") for x in lines] == [None, s["dlq"], s["dlq"], s["dlq"]]

    # the replayed dead letter became what the worker makes of it now
    normalizer = Normalizer(parse_config(s["config"], for_worker=False))
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    want = normalizer.process(Message(GOOD, b"key-10", "src", 0, 10, None, (("trace-id", b"t10"),)), runtime).records
    out = read_topics(s["bootstrap"], [f"{s['prefix']}.shop.users"])
    assert [(r.key_json, r.value_json) for r in out] == [(w.key, w.value) for w in want]

    # the others are back in the DLQ, none lost: a fresh dead letter for the failure, the rest as they were
    records = read_topics(s["bootstrap"], [s["dlq"]])
    assert len(records) == 7
    again = {r.headers.get(ERROR_OFFSET, r.headers.get("x")): r for r in records[4:]}
    failed = again[b"11"]
    assert failed.value == b'{"not json' and failed.key == b"key-11" and failed.headers["trace-id"] == b"t11"
    assert failed.headers[ERROR_TOPIC] == b"src" and failed.headers[FORMAT_HEADER] == b"canal-json"
    assert failed.headers[ERROR_CLASS].endswith(b"DecodeError") and b"canal-json" in failed.headers[ERROR_MESSAGE]
    assert failed.headers[REPLAY_ATTEMPTS_HEADER] == b"1" and failed.headers[REPLAY_RUN_HEADER]
    gone = again[b"12"]
    assert gone.value == GOOD and gone.headers[ERROR_TOPIC] == b"gone" and gone.headers[FORMAT_HEADER] == b"maxwell-json"
    stray = again[b"1"]
    assert (stray.key, stray.value) == (b"k", b"stray")

    # the replay committed without ever being a member of its group
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": s["bootstrap"]})
    assert admin.describe_consumer_groups([s["group"]])[s["group"]].result(30).members == []

    # the group remembers: the next run replays only the three written back, once each
    code, lines, summary = _replay(s)
    assert code == 2, summary
    assert len(lines) == 3 and {x["outcome"] for x in lines} == {"failed", "unreplayable"}
    assert {(x["dlq"]["partition"], x["dlq"]["offset"]) for x in lines} == {(r.partition, r.offset) for r in records[4:]}
    first_run = failed.headers[REPLAY_RUN_HEADER]
    final = read_topics(s["bootstrap"], [s["dlq"]])
    second = [r for r in final if r.headers.get(REPLAY_RUN_HEADER, first_run) != first_run]
    assert len(final) == 10 and sorted(r.headers[REPLAY_ATTEMPTS_HEADER] for r in second) == [b"2"] * 3


@pytest.mark.timeout(60)
def test_an_unreachable_broker_is_a_one_line_error(tmp_path: Path) -> None:
    from service.local import free_port

    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"broker": {"bootstrap_servers": f"127.0.0.1:{free_port()}"},
                                    "topics": [{"name": "src", "format": "canal-json"}]}))
    result = CliRunner().invoke(app, ["dlq", "replay", "--config", str(path), "--connect-timeout", "1"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot reach the Kafka broker at 127.0.0.1:") and len(
        result.stderr.splitlines()) == 1
