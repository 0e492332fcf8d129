"""debezium-json: payload fields that the Connect schema does not declare are ignored.

``JsonConverter`` reads a struct by its schema's fields (``convertToConnect`` looks each declared
field up in the JSON object), so a member the schema does not declare is dropped, never an error.
Debezium 1.x MySQL records carry such a member: ``source.sequence: null`` beside a source schema
without it. The decoder drops them too, so the records it emits keep schema and payload in
agreement, and none of them is dead-lettered.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.goldens import DATA
from transforms.decoders import Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

GOLDEN = DATA / "debezium-json" / "debezium-1x-mysql-undeclared-source-sequence.txt"


def golden_messages() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in GOLDEN.read_bytes().splitlines() if line.strip()]


def process(doc: dict[str, Any], key: Any = None) -> list[dict[str, Any]]:
    """The emitted values of one message (raises DecodeError when it would be dead-lettered)."""
    pipeline = Pipeline(create_decoder("debezium-json"), EmitOptions(prefix="cdcnorm"))
    raw_key = None if key is None else orjson.dumps(key)
    records = pipeline.process(Message(value=orjson.dumps(doc), key=raw_key, topic="dbserver1.inventory.products"))
    return [orjson.loads(r.value_bytes()) for r in records]


def struct_fields(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["field"] == name)


def test_the_golden_input_carries_source_sequence_that_its_schema_does_not_declare() -> None:
    for doc in golden_messages():
        assert "sequence" in doc["payload"]["source"]
        declared = [f["field"] for f in struct_fields(doc["schema"], "source")["fields"]]
        assert "sequence" not in declared


def test_undeclared_source_sequence_is_dropped_and_nothing_is_dead_lettered() -> None:
    for doc in golden_messages():
        (value,) = process(doc)
        source = value["payload"]["source"]
        assert "sequence" not in source
        declared = [f["field"] for f in struct_fields(value["schema"], "source")["fields"]]
        assert list(source) == declared  # schema and payload agree, in the schema's order
        expected = {k: v for k, v in doc["payload"]["source"].items() if k != "sequence"}
        assert source == expected  # the declared fields are kept as they came


def with_after(doc: dict[str, Any], **members: Any) -> dict[str, Any]:
    payload = {**doc["payload"], "after": {**doc["payload"]["after"], **members}}
    return {"schema": doc["schema"], "payload": payload}


def test_undeclared_row_column_is_dropped() -> None:
    doc = golden_messages()[0]
    (value,) = process(with_after(doc, colour="red"))
    assert value["payload"]["after"] == doc["payload"]["after"]
    assert [f["field"] for f in struct_fields(value["schema"], "after")["fields"]] == list(doc["payload"]["after"])


def test_undeclared_member_of_a_nested_struct_column_is_dropped() -> None:
    doc = golden_messages()[0]
    dims = {
        "type": "struct",
        "optional": True,
        "field": "dims",
        "fields": [{"type": "int32", "optional": True, "field": "w"}],
    }
    schema = {
        **doc["schema"],
        "fields": [
            {**f, "fields": [*f["fields"], dims]} if f["field"] in ("before", "after") else f
            for f in doc["schema"]["fields"]
        ],
    }
    (value,) = process({"schema": schema, "payload": with_after(doc, dims={"w": 3, "h": 4})["payload"]})
    assert value["payload"]["after"]["dims"] == {"w": 3}


def test_undeclared_members_of_the_transaction_block_and_extra_envelope_fields_are_dropped() -> None:
    doc = golden_messages()[0]
    host = {"type": "string", "optional": True, "field": "host"}
    origin = {"type": "struct", "optional": True, "field": "origin", "fields": [host]}
    schema = {**doc["schema"], "fields": [*doc["schema"]["fields"], origin]}  # it declares transaction
    tx = {"id": "571:53195829", "total_order": 3, "data_collection_order": 2, "coordinator": None}
    payload = {**doc["payload"], "transaction": tx, "origin": {"host": "db1", "port": 3306}, "undeclared": 1}
    (value,) = process({"schema": schema, "payload": payload})
    assert value["payload"]["transaction"] == {"id": "571:53195829", "total_order": 3, "data_collection_order": 2}
    assert value["payload"]["origin"] == {"host": "db1"}
    assert "undeclared" not in value["payload"]


def test_undeclared_key_member_is_ignored() -> None:
    doc = golden_messages()[0]
    key_schema = {
        "type": "struct",
        "optional": False,
        "name": "dbserver1.inventory.products.Key",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
    }
    decoder = create_decoder("debezium-json")
    key = {"schema": key_schema, "payload": {"id": 101, "shard": 7}}
    (event,) = decoder.decode(Message(value=orjson.dumps(doc), key=orjson.dumps(key), topic="t"))
    assert isinstance(event, ChangeEvent)
    assert event.table.key == ("id",)


def test_a_source_schema_without_a_connectors_fields_gives_cdcnorms_own_source_block() -> None:
    # read as JsonConverter reads it, the block holds only db and table: not a connector's own
    doc = golden_messages()[0]
    keep = ("db", "table")
    schema = {
        **doc["schema"],
        "fields": [
            {**f, "fields": [m for m in f["fields"] if m["field"] in keep]} if f["field"] == "source" else f
            for f in doc["schema"]["fields"]
        ],
    }
    decoder = create_decoder("debezium-json")
    (event,) = decoder.decode(Message(value=orjson.dumps({"schema": schema, "payload": doc["payload"]}), topic="t"))
    assert isinstance(event, ChangeEvent) and event.source.native is None
    (value,) = process({"schema": schema, "payload": doc["payload"]})
    assert value["payload"]["source"]["connector"] == "debezium-json"


def test_a_nameless_or_twice_declared_field_is_a_schema_error() -> None:
    doc = golden_messages()[0]
    for fields in ([{"type": "string", "optional": True, "field": ""}], [{"type": "string", "optional": True,
                                                                          "field": "id"}]):
        schema = {
            **doc["schema"],
            "fields": [
                {**f, "fields": [*f["fields"], *fields]} if f["field"] == "transaction" else f
                for f in doc["schema"]["fields"]
            ],
        }
        with pytest.raises(DecodeError) as info:
            process({"schema": schema, "payload": doc["payload"]})
        assert info.value.field == "schema.transaction.fields"


def test_a_null_default_is_written_back_as_no_default() -> None:
    # JsonConverter reads "default": null as no default, and writes none back
    doc = golden_messages()[0]
    source = next(f for f in doc["schema"]["fields"] if f["field"] == "source")
    snapshot = next(m for m in source["fields"] if m["field"] == "snapshot")
    snapshot["default"] = None
    (value,) = process(doc)
    source_out = next(f for f in value["schema"]["fields"] if f["field"] == "source")
    assert "default" not in next(m for m in source_out["fields"] if m["field"] == "snapshot")


@pytest.mark.parametrize("source", ["kept", "renamed"])
def test_a_declared_extra_field_must_hold_what_its_schema_says(source: str) -> None:
    """An extra envelope field is written back as it came, so a required one that is null is the
    record's error (JsonConverter refuses it: "Invalid null value for required STRUCT field"),
    whether or not the envelope declares a connector's source block (the fuzz found it with the
    source field renamed: the record then gets cdcnorm's own block, and the renamed field stayed)."""
    doc = golden_messages()[0]
    fields = list(doc["schema"]["fields"])
    if source == "renamed":
        fields = [{**f, "field": "origin"} if f["field"] == "source" else f for f in fields]
        extra = "origin"
    else:
        fields.append({"type": "struct", "optional": False, "field": "extra", "fields": [
            {"type": "string", "optional": True, "field": "a"}]})
        extra = "extra"
    with pytest.raises(DecodeError) as info:
        process({"schema": {**doc["schema"], "fields": fields}, "payload": doc["payload"]})
    assert info.value.field == extra and "null in a required field" in str(info.value)


def test_a_schemaless_source_block_is_named_by_its_own_connector() -> None:
    """Two connectors whose source blocks have the same fields and value types: each record's
    source schema names its own connector (the schema was cached by the field shape alone, so the
    second took the first's name)."""

    pipeline = Pipeline(create_decoder("debezium-json"), EmitOptions(prefix="cdcnorm"))
    names = []
    for connector in ("mysql", "postgresql", "mysql"):
        source = {"version": "2.7.0", "connector": connector, "name": "srv", "ts_ms": 1, "db": "d", "table": "t"}
        value = orjson.dumps({"before": None, "after": {"id": 1}, "source": source, "op": "c", "ts_ms": 2})
        (record,) = pipeline.process(Message(value=value, topic="srv.d.t"))
        assert record.value is not None
        (source_field,) = [f for f in record.value["schema"]["fields"] if f["field"] == "source"]
        names.append(source_field["name"])
    assert names == ["io.debezium.connector.mysql.Source", "io.debezium.connector.postgresql.Source",
                     "io.debezium.connector.mysql.Source"]
