"""Dead letters carry Kafka Connect's DeadLetterQueueReporter context headers, in its order and
value formats: topic, partition, offset, connector.name, task.id, stage, class.name (the class of
the failing stage), exception.class.name, exception.message, exception.stacktrace."""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Any

import orjson
import pytest

from service.app import Normalizer
from service.config import parse_config
from service.dlq import (
    CONTEXT_HEADERS,
    ERROR_CLASS,
    ERROR_CONNECTOR,
    ERROR_EXECUTING_CLASS,
    ERROR_MESSAGE,
    ERROR_OFFSET,
    ERROR_PARTITION,
    ERROR_STACKTRACE,
    ERROR_STAGE,
    ERROR_TASK_ID,
    ERROR_TOPIC,
    FORMAT_HEADER,
    OVERSIZED_BYTES,
    OVERSIZED_HEADERS,
    ROW_INDEX,
    LetterContext,
    dead_letter,
    failure_stage,
    task_id,
)
from transforms.decoders import Message, decoder_class
from transforms.errors import DecodeError, TransformError

CANAL_INSERT = orjson.dumps(
    {
        "data": [{"id": "1", "name": "a", "email": "a@x"}],
        "database": "shop",
        "table": "users",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1700000000000,
        "ts": 1700000000100,
        "mysqlType": {"id": "int", "name": "varchar(10)", "email": "varchar(20)"},
        "sqlType": {"id": 4, "name": 12, "email": 12},
        "old": None,
    }
)


def normalizer(worker: dict[str, Any] | None = None, **entry: Any) -> Normalizer:
    cfg = parse_config({
        "topic_prefix": "out",
        "worker": {"app_id": "norm-eu", **(worker or {})},
        "topics": [{"name": "src", "format": "canal-json", **entry}],
    })
    return Normalizer(cfg)


def dead_letter_of(n: Normalizer, value: bytes) -> tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]:
    runtime = n.runtime_for("src")
    assert runtime is not None
    message = Message(value, key=b"k", topic="src", partition=3, offset=42, headers=(("trace", b"t1"),))
    outcome = n.process(message, runtime)
    assert outcome.records == [] and outcome.dlq is not None
    return outcome.dlq


def test_decode_failure_has_every_connect_header_in_order() -> None:
    topic, key, value, headers = dead_letter_of(normalizer(), b"{not json")
    assert (topic, key, value) == ("out.dlq", b"k", b"{not json")
    assert headers[0] == ("trace", b"t1")  # the original headers first, unchanged
    names = [name for name, _ in headers[1:]]
    assert names == [*CONTEXT_HEADERS, FORMAT_HEADER]
    h = dict(headers)
    assert h[ERROR_TOPIC] == b"src" and h[ERROR_PARTITION] == b"3" and h[ERROR_OFFSET] == b"42"
    assert h[ERROR_CONNECTOR] == b"norm-eu"
    assert h[ERROR_TASK_ID] == f"norm-eu-{socket.gethostname()}-{os.getpid()}".encode()
    assert h[ERROR_STAGE] == b"VALUE_CONVERTER"
    canal = decoder_class("canal-json")
    assert h[ERROR_EXECUTING_CLASS] == f"{canal.__module__}.{canal.__qualname__}".encode()
    assert h[ERROR_CLASS] == b"transforms.errors.DecodeError"
    assert h[ERROR_MESSAGE].startswith(b"canal-json: ")
    assert b"Traceback" in h[ERROR_STACKTRACE] and b"DecodeError" in h[ERROR_STACKTRACE]
    assert h[FORMAT_HEADER] == b"canal-json"


def test_auto_names_the_configured_decoder() -> None:
    n = normalizer(format="auto", options={"formats": "canal-json,maxwell-json"})
    h = dict(dead_letter_of(n, b'{"type": "MERGE", "data": [], "database": "d", "table": "t"}')[3])
    auto = decoder_class("auto")
    assert h[ERROR_STAGE] == b"VALUE_CONVERTER"
    assert h[ERROR_EXECUTING_CLASS] == f"{auto.__module__}.{auto.__qualname__}".encode()


def test_transform_failure_names_the_transform_class() -> None:
    n = normalizer(transforms=[{"type": "filter", "table.regex": "tmp_.*"}, {"type": "replace-field", "exclude": "id"}])
    h = dict(dead_letter_of(n, CANAL_INSERT)[3])
    assert h[ERROR_STAGE] == b"TRANSFORMATION"
    assert h[ERROR_EXECUTING_CLASS] == b"transforms.smt.replace_field.ReplaceField"
    assert h[ERROR_CLASS] == b"transforms.errors.TransformError"


def test_a_failing_predicate_or_transform_bug_is_the_transformation_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    from transforms.smt.predicates import TableMatches

    def broken(self: Any, event: Any) -> bool:
        raise RuntimeError("predicate bug")

    monkeypatch.setattr(TableMatches, "test", broken)
    n = normalizer(transforms=[{"type": "mask", "fields": "email", "predicate": {"type": "table-matches", "regex": "x"}}])
    h = dict(dead_letter_of(n, CANAL_INSERT)[3])
    # Connect names the step's transform class for its predicate too
    assert h[ERROR_STAGE] == b"TRANSFORMATION"
    assert h[ERROR_EXECUTING_CLASS] == b"transforms.smt.mask.MaskField"
    assert h[ERROR_CLASS] == b"builtins.RuntimeError"


def test_writing_the_canonical_record_is_the_converter_stage() -> None:
    # the decoder takes a null key column; the emitter refuses it (a Connect key field is never optional)
    row = {"id": None, "name": "a", "email": "a@x"}
    null_key = orjson.dumps({**orjson.loads(CANAL_INSERT), "data": [row]})
    h = dict(dead_letter_of(normalizer(), null_key)[3])
    assert (h[ERROR_STAGE], h[ERROR_EXECUTING_CLASS]) == (b"VALUE_CONVERTER", b"transforms.envelope.emit")
    assert h[ERROR_CLASS] == b"transforms.envelope.RequiredColumnError"


def test_other_failures_are_the_task_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    import transforms.completion

    def broken(*args: Any) -> Any:
        raise KeyError("row state")

    monkeypatch.setattr(transforms.completion, "complete_partial_images", broken)
    h = dict(dead_letter_of(normalizer(complete_partial_images=True), CANAL_INSERT)[3])
    assert (h[ERROR_STAGE], h[ERROR_EXECUTING_CLASS]) == (b"TASK_PUT", b"service.app.Normalizer")


def test_without_context_headers_the_dead_letter_is_the_original_record() -> None:
    message = Message(b"v", key=b"k", topic="t", partition=1, offset=7, headers=(("h", b"1"),))
    letter = dead_letter(message, ValueError("boom"), LetterContext("dlq", "canal-json", "app", context_headers=False))
    assert (letter.topic, letter.key, letter.value, letter.headers) == ("dlq", b"k", b"v", (("h", b"1"),))


def test_the_exception_message_header_is_capped_like_the_stack_trace() -> None:
    message = Message(b"v", key=b"k", topic="t", partition=1, offset=7)
    huge = ValueError("bad value " + "\u00e9" * 1_000_000)  # 2 MB once encoded: a quoted column value
    headers = dict(dead_letter(message, huge, LetterContext("dlq", "canal-json", "app", task="app-1")).headers)
    text = headers["__connect.errors.exception.message"].decode()
    assert len(text) == 8000 and text == str(huge)[:8000]
    assert len(headers["__connect.errors.exception.stacktrace"].decode()) == 8000
    short = dict(dead_letter(message, ValueError("boom"), LetterContext("dlq", "canal-json", "app", task="app-1")).headers)
    assert short["__connect.errors.exception.message"] == b"boom"


def test_unraised_exceptions_and_unknown_positions() -> None:
    assert failure_stage(DecodeError("x", None, "bad")) == ("VALUE_CONVERTER", "transforms.decoders.base.Decoder")
    assert failure_stage(TransformError("mask", "bad")) == ("TRANSFORMATION", "transforms.smt.base.Transform")
    assert failure_stage(ValueError()) == ("TASK_PUT", "service.app.Normalizer")
    h = dict(dead_letter(Message(b"v", topic="t"), ValueError(), LetterContext("dlq", "f", "app")).headers)
    assert h[ERROR_PARTITION] == b"-1" and h[ERROR_OFFSET] == b"-1"
    assert h[ERROR_MESSAGE] == b""
    assert h[ERROR_TASK_ID] == task_id("app").encode() and task_id("app").startswith("app-")


def test_normalizer_honours_the_entry_flags(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="cdcnorm.worker")
    _, _, _, headers = dead_letter_of(normalizer(dlq_context_headers=False, log_errors=False), b"{not json")
    assert headers == (("trace", b"t1"),)
    assert "dead-letter" not in caplog.text


def test_an_oversized_message_is_refused_with_a_bounded_dead_letter() -> None:
    """Over worker.max_message_bytes (key + value + headers): never decoded; the dead letter holds
    the first oversized_prefix_bytes of key and value, the sizes, the limit, the sha256 and the
    source coordinates, even with dlq_context_headers off."""
    n = normalizer({"max_message_bytes": 4096, "oversized_prefix_bytes": 16}, dlq_context_headers=False)
    value = CANAL_INSERT + b" " * (4096 - len(CANAL_INSERT))  # valid JSON, + 8 bytes of key and header
    _, key, dlq_value, headers = dead_letter_of(n, value)
    h = dict(headers)
    assert (key, dlq_value) == (b"k", value[:16])
    assert [k for k, _ in headers] == ["trace", *CONTEXT_HEADERS, FORMAT_HEADER, *OVERSIZED_HEADERS[:-1]]
    assert h[OVERSIZED_BYTES] == b"4104" and h["__cdcnorm.oversized.limit"] == b"4096"
    assert h["__cdcnorm.oversized.prefix.bytes"] == b"16"
    assert h["__cdcnorm.oversized.value.bytes"] == b"4096"
    assert h["__cdcnorm.oversized.value.sha256"] == hashlib.sha256(value).hexdigest().encode()
    assert h["__cdcnorm.oversized.key.sha256"] == hashlib.sha256(b"k").hexdigest().encode()
    assert (h[ERROR_TOPIC], h[ERROR_PARTITION], h[ERROR_OFFSET]) == (b"src", b"3", b"42")
    assert h[ERROR_STAGE] == b"KAFKA_CONSUME" and h[ERROR_CLASS] == b"service.dlq.OversizedMessageError"
    assert h[ERROR_MESSAGE] == b"message of 4104 bytes (key + value + headers) exceeds worker.max_message_bytes=4096"
    # one byte less is normalized
    runtime = n.runtime_for("src")
    assert runtime is not None
    fits = Message(value[:-8], key=b"k", topic="src", partition=3, offset=43, headers=(("trace", b"t1"),))
    assert n.process(fits, runtime).dlq is None


def test_an_oversized_message_drops_headers_that_do_not_fit_the_prefix() -> None:
    n = normalizer({"max_message_bytes": 1024, "oversized_prefix_bytes": 4})
    runtime = n.runtime_for("src")
    assert runtime is not None
    message = Message(b"x" * 2000, key=None, topic="src", partition=0, offset=1, headers=(("trace", b"t1"),))
    outcome = n.process(message, runtime)
    assert outcome.dlq is not None and outcome.error_class == "OversizedMessageError"
    _, key, value, headers = outcome.dlq
    h = dict(headers)
    assert key is None and value == b"xxxx" and "trace" not in h
    assert h["__cdcnorm.oversized.headers.dropped"] == b"1" and "__cdcnorm.oversized.key.sha256" not in h


def test_an_oversized_message_stops_an_errors_fail_entry() -> None:
    from service.worker_types import FatalMessageError

    n = normalizer({"max_message_bytes": 1024, "oversized_prefix_bytes": 16}, errors="fail")
    runtime = n.runtime_for("src")
    assert runtime is not None
    with pytest.raises(FatalMessageError):
        n.process(Message(b"x" * 2000, topic="src", partition=0, offset=1), runtime)


# ------------------------------------------------------------------------------- a bad row of many

NINE_ROWS = orjson.loads(CANAL_INSERT)
NINE_ROWS["data"] = [{"id": str(i), "name": f"n{i}", "email": f"{i}@x"} for i in range(1, 10)]
NINE_ROWS["data"][7]["id"] = "A101"  # the id column is an int
NINE_ROWS_ONE_BAD = orjson.dumps(NINE_ROWS)


def test_a_bad_row_is_dead_lettered_alone_and_the_other_rows_are_emitted() -> None:
    n = normalizer()
    runtime = n.runtime_for("src")
    assert runtime is not None
    message = Message(NINE_ROWS_ONE_BAD, key=b"k", topic="src", partition=3, offset=42, headers=(("trace", b"t1"),))
    outcome = n.process(message, runtime)
    assert [r.key["payload"]["id"] for r in outcome.records if r.value is not None] == [1, 2, 3, 4, 5, 6, 7, 9]
    assert outcome.dlq is None and outcome.error_class is None
    ((topic, key, value, headers),) = outcome.row_letters
    assert outcome.letters == outcome.row_letters
    assert (topic, key, value) == ("out.dlq", b"k", NINE_ROWS_ONE_BAD)  # the whole original message
    assert [name for name, _ in headers] == ["trace", *CONTEXT_HEADERS, FORMAT_HEADER, ROW_INDEX]
    h = dict(headers)
    assert h[ROW_INDEX] == b"7" and h[ERROR_OFFSET] == b"42" and h[ERROR_PARTITION] == b"3"
    assert h[ERROR_CLASS] == b"transforms.errors.DecodeError" and h[ERROR_STAGE] == b"VALUE_CONVERTER"
    assert b"data[7].id" in h[ERROR_MESSAGE] and b"A101" in h[ERROR_MESSAGE]
    assert n.metrics.dlq.labels("src", "canal-json", "DecodeError")._value.get() == 1


def test_a_bad_row_without_context_headers_still_names_its_row() -> None:
    n = normalizer(dlq_context_headers=False)
    runtime = n.runtime_for("src")
    assert runtime is not None
    outcome = n.process(Message(NINE_ROWS_ONE_BAD, key=b"k", topic="src", partition=0, offset=1), runtime)
    ((_, _, value, headers),) = outcome.row_letters
    assert value == NINE_ROWS_ONE_BAD and headers == ((ROW_INDEX, b"7"),)


def test_a_bad_row_under_errors_fail_stops_the_worker_before_any_row_is_emitted() -> None:
    from service.worker_types import FatalMessageError

    n = normalizer(errors="fail")
    runtime = n.runtime_for("src")
    assert runtime is not None
    with pytest.raises(FatalMessageError):
        n.process(Message(NINE_ROWS_ONE_BAD, topic="src", partition=0, offset=1), runtime)


def test_a_required_column_failure_names_the_envelopes_public_error_class() -> None:
    """The emitter's own error is named as it is imported, transforms.envelope.RequiredColumnError,
    whichever module of the envelope holds its code."""
    from transforms.envelope import RequiredColumnError

    letter = dead_letter(Message(b"v", topic="t"), RequiredColumnError("db.t", "id", True), LetterContext("dlq", "f", "app"))
    assert dict(letter.headers)[ERROR_CLASS] == b"transforms.envelope.RequiredColumnError"
