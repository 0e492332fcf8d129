"""A message whose ``{"schema":...,"payload":`` opening was seen before is read by parsing its
payload alone (transforms.decoders.connect_keys.SchemaPrefixes), and gives exactly what
parsing it whole gives: the same records, the same errors, the same dead letters.

Each case runs a message through one decoder after a first message of the same schema (the
prefix is known) and through a fresh decoder (parsed whole), and compares the output bytes or
the error.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.goldens import DATA
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_keys import SchemaPrefixes
from transforms.envelope import EmitOptions
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

GOLDEN = DATA / "debezium-json" / "flink-debezium-data-schema-include.txt"
TOPIC = "dbserver1.inventory.products"


def lines() -> list[bytes]:
    return [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]


def outcome(pipeline: Pipeline, value: bytes) -> Any:
    """The records' key and value bytes, or the error's class and text."""
    try:
        records = pipeline.process(Message(value=value, topic=TOPIC))
    except DecodeError as exc:
        return ("error", str(exc))
    return [(r.key_bytes(), r.value_bytes()) for r in records]


def fresh(value: bytes, **options: str) -> Any:
    return outcome(Pipeline(create_decoder("debezium-json", options), EmitOptions(prefix="cdcnorm")), value)


def primed(first: bytes, value: bytes, **options: str) -> tuple[Pipeline, Any]:
    """The outcome of ``value`` after ``first`` (same schema) went through the same decoder."""
    pipeline = Pipeline(create_decoder("debezium-json", options), EmitOptions(prefix="cdcnorm"))
    outcome(pipeline, first)
    return pipeline, outcome(pipeline, value)


def prefixes(pipeline: Pipeline) -> SchemaPrefixes:
    return pipeline.decoder._reader.prefixes  # type: ignore[attr-defined,no-any-return]


def with_payload(line: bytes, payload: bytes) -> bytes:
    at = line.index(b',"payload":')
    return line[: at + len(b',"payload":')] + payload + b"}"


def test_every_golden_message_reads_the_same_by_its_payload_alone() -> None:
    messages = lines()
    assert len(messages) > 10 and all(m.startswith(b'{"schema":') for m in messages)
    pipeline = Pipeline(create_decoder("debezium-json"), EmitOptions(prefix="cdcnorm"))
    split = 0
    for value in messages:
        assert outcome(pipeline, value) == fresh(value)
        split += prefixes(pipeline).current is not None
    assert split >= len(messages) - 2  # all but the first of each schema


def test_a_repeated_schema_is_one_object_and_its_envelope_is_decided_once() -> None:
    first, second = lines()[:2]
    pipeline, _ = primed(first, second)
    shared = prefixes(pipeline).current
    assert shared is not None and shared.schema is not None and shared.envelope is not None
    outcome(pipeline, first)
    assert prefixes(pipeline).current is shared


@pytest.mark.parametrize(
    "payload",
    [
        b'{"before":null,"after":{"id":1,"name":"x"},"source":{},"op":"c"},"extra":1',  # a member after it
        b'{"before":null,"after":{"id":1,"name":"x"},"source":{},"op":"c"},"payload":null',  # twice
        b'{"before":null,"after":{"id":"one","name":"x"},"source":{},"op":"c"}',  # a bad value
        b'{"before":null,"after":{"id":1,"name":"x"},"source":{},"op":"q"}',  # a bad op
        b'{"before":null,"after":{"id":1,"weight":0.1000000000000000055511151231257827},"source":{},"op":"c"}',
        b"null",  # a tombstone
        b"[1]",  # not an object
        b'{"before":',  # cut short
        b'{"before":null,"after":' + b'{"id":1,"name":' * 70 + b"1" + b"}" * 70 + b',"op":"c"}',  # too deep
    ],
)
def test_whatever_follows_a_known_prefix_reads_as_parsed_whole(payload: bytes) -> None:
    first = lines()[0]
    value = with_payload(first, payload)
    assert primed(first, value)[1] == fresh(value)


def test_the_limits_hold_for_a_message_read_by_its_payload() -> None:
    first = lines()[0]
    big = with_payload(first, b'{"before":null,"after":{"id":1,"name":"' + b"x" * 5000 + b'"},"source":{},"op":"c"}')
    options = {"max.message.bytes": str(len(first) + 100)}
    _, got = primed(first, big, **options)
    assert got == fresh(big, **options) and got[0] == "error" and "exceeds the limit" in got[1]


def test_a_schema_with_a_member_named_payload_is_parsed_whole() -> None:
    doc = orjson.loads(lines()[0])
    doc["schema"]["fields"][0]["parameters"] = {"note": "x", "payload": "y"}  # ,"payload": inside the schema
    value = orjson.dumps(doc)
    assert value.index(b',"payload":') < value.index(b'},"payload":{')
    pipeline, got = primed(value, value)
    assert got == fresh(value) and got[0] != "error"
    assert prefixes(pipeline).current is None  # remembered as not a schema: parsed whole each time


def test_a_text_not_written_compact_is_parsed_whole() -> None:
    value = orjson.dumps(orjson.loads(lines()[0]), option=orjson.OPT_INDENT_2)
    pipeline, got = primed(value, value)
    assert got == fresh(value) and prefixes(pipeline).current is None


def test_messages_of_two_schemas_interleaved_read_as_parsed_whole() -> None:
    messages = lines()
    other = []
    for value in messages:  # a second table: its schema (and name) differ
        doc = orjson.loads(value)
        doc["schema"]["name"] = "dbserver1.inventory.others.Envelope"
        doc["payload"]["source"]["table"] = "others"
        other.append(orjson.dumps(doc))
    pipeline = Pipeline(create_decoder("debezium-json"), EmitOptions(prefix="cdcnorm"))
    for a, b in zip(messages, other, strict=True):
        for value in (a, b, b, a):
            assert outcome(pipeline, value) == fresh(value)
