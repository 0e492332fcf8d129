"""Behaviour of the maxwell-json decoder: row types, old overlay, key, transaction, DDL, errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from tests.formats.strategies import json_values
from transforms.connect import ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.maxwell_json import MaxwellJsonDecoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SchemaChangeEvent, SnapshotMarker, emit
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE

ROW = {"database": "test", "table": "product", "ts": 1596684893, "xid": 7152, "commit": True}


def decode(doc: Any, key: Any = None) -> list[Any]:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return MaxwellJsonDecoder().decode(Message(raw, None if key is None else orjson.dumps(key)))


def one_change(doc: Any, key: Any = None) -> ChangeEvent:
    events = decode(doc, key)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def test_registered() -> None:
    assert isinstance(create_decoder("maxwell-json"), MaxwellJsonDecoder)


def test_update_before_is_data_overlaid_with_old() -> None:
    data = {"id": 106, "name": "hammer", "description": "18oz carpenter hammer", "weight": 1.0}
    event = one_change(
        {**ROW, "type": "update", "data": data, "old": {"description": "16oz carpenter's hammer"}}
    )
    assert event.op is Operation.UPDATE
    assert event.after == data
    assert event.before == {**data, "description": "16oz carpenter's hammer"}


def test_old_null_is_a_real_null_in_before() -> None:
    event = one_change({**ROW, "type": "update", "data": {"id": 1, "d": "x"}, "old": {"d": None}})
    assert event.before == {"id": 1, "d": None}
    column = event.table.column("d")
    assert column is not None and column.type is ConnectType.STRING


def test_update_without_old_has_unchanged_before() -> None:
    event = one_change({**ROW, "type": "update", "data": {"id": 1, "n": 2}})
    assert event.before == event.after == {"id": 1, "n": 2}


def test_old_column_missing_from_data_is_unavailable_in_after() -> None:
    event = one_change({**ROW, "type": "update", "data": {"id": 1}, "old": {"gone": 5}})
    assert event.after == {"id": 1, "gone": UNAVAILABLE}
    assert event.before == {"id": 1, "gone": 5}


def test_insert_delete_and_bootstrap_insert() -> None:
    insert = one_change({**ROW, "type": "insert", "data": {"id": 1}})
    assert (insert.op, insert.before, insert.after) == (Operation.CREATE, None, {"id": 1})
    delete = one_change({**ROW, "type": "delete", "data": {"id": 1}})
    assert (delete.op, delete.before, delete.after) == (Operation.DELETE, {"id": 1}, None)
    read = one_change({**ROW, "type": "bootstrap-insert", "data": {"id": 1}})
    assert read.op is Operation.READ and read.source.snapshot is SnapshotMarker.TRUE
    assert decode({**ROW, "type": "bootstrap-start", "data": {}}) == []
    assert decode({**ROW, "type": "bootstrap-complete", "data": {}}) == []


def test_source_time_transaction_and_position() -> None:
    doc = {**ROW, "type": "insert", "xoffset": 3, "position": "master.000006:800911", "data": {"id": 1}}
    doc.pop("commit")
    event = one_change(doc)
    assert event.source.ts_ms == 1596684893000
    assert event.source.fields["file"] == "master.000006" and event.source.fields["pos"] == 800911
    assert event.source.sequence == "0000000006:00000000000000800911"
    assert event.transaction is not None
    assert (event.transaction.id, event.transaction.total_order) == ("7152", 4)
    assert event.table.db == "test" and event.table.table == "product"


def test_sequence_sorts_across_binlog_files() -> None:
    seqs = [
        one_change({**ROW, "type": "insert", "position": pos, "data": {"id": 1}}).source.sequence or ""
        for pos in ("mysql-bin.999999:9000", "mysql-bin.1000000:4", "mysql-bin.1000000:120")
    ]
    assert seqs == sorted(seqs)


def test_typed_values_are_inferred() -> None:
    data = {
        "i": 2**40,
        "f": 1.5,
        "b": True,
        "s": "x",
        "j": {"a": [1]},
        "set": ["a", "b"],
        "n": None,
        "u": 2**64 - 1,
    }
    event = one_change({**ROW, "type": "insert", "data": data})
    table = event.table
    types = {c.name: (c.type, c.logical) for c in table.columns}
    assert types["i"] == (ConnectType.INT64, None)
    assert types["f"] == (ConnectType.FLOAT64, None)
    assert types["b"] == (ConnectType.BOOLEAN, None)
    assert types["s"] == (ConnectType.STRING, None)
    assert types["j"] == (ConnectType.STRING, Logical.JSON)
    assert types["set"][0] is ConnectType.ARRAY
    assert types["n"] == (ConnectType.STRING, None)
    assert types["u"] == (ConnectType.BYTES, Logical.DECIMAL)
    assert event.after is not None and event.after["j"] == '{"a":[1]}' and event.after["n"] is None


def test_key_from_primary_key_columns() -> None:
    event = one_change(
        {**ROW, "type": "insert", "data": {"id": 1, "c": 2}, "primary_key_columns": ["id", "c"]}
    )
    assert event.table.key == ("id", "c")


@pytest.mark.parametrize(
    "key",
    [{"database": "test", "table": "product", "pk.id": 1}, ["test", "product", [{"id": 1}]]],
)
def test_key_from_kafka_key_matches_case_insensitively(key: Any) -> None:
    event = one_change({**ROW, "type": "insert", "data": {"ID": 1, "c": 2}}, key)
    assert event.table.key == ("ID",)


def test_no_key_without_key_information() -> None:
    event = one_change(
        {**ROW, "type": "insert", "data": {"id": 1}}, {"database": "t", "table": "p", "_uuid": "x"}
    )
    assert event.table.key == ()


def test_ddl_becomes_schema_change_with_table_definition() -> None:
    doc = {
        "type": "table-alter",
        "database": "test",
        "table": "e",
        "ts": 1477053308000,
        "sql": "alter table test.e add column torvalds bigint unsigned after m",
        "position": "master.000006:804398",
        "def": {
            "database": "test",
            "table": "e",
            "columns": [
                {"type": "int", "name": "id", "signed": True},
                {"type": "decimal", "name": "p", "precision": 10, "scale": 2},
                {"type": "datetime", "name": "d", "column-length": 6},
            ],
            "primary-key": ["id"],
        },
    }
    (event,) = decode(doc)
    assert isinstance(event, SchemaChangeEvent)
    assert (event.db, event.table, event.change_type) == ("test", "e", "ALTER")
    assert event.ddl is not None and event.ddl.startswith("alter table")
    assert event.source.ts_ms == 1477053308000  # DDL ts is already in milliseconds
    assert event.new_table is not None and event.new_table.key == ("id",)
    cols = {c.name: c for c in event.new_table.columns}
    assert cols["p"].is_decimal and cols["p"].scale == 2
    assert cols["d"].logical == Logical.MICRO_TIMESTAMP


def test_database_ddl_has_no_table() -> None:
    (event,) = decode({"type": "database-create", "database": "shop", "ts": 1, "sql": "create database shop"})
    assert isinstance(event, SchemaChangeEvent)
    assert (event.db, event.table, event.change_type, event.new_table) == ("shop", None, "CREATE", None)


def test_tombstone_input_is_ignored() -> None:
    assert MaxwellJsonDecoder().decode(Message(None)) == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"database":"test","table":"e","type":"insert","data":{"id":1}', None),
        (b"[1]", None),
        ({"database": "test", "table": "e", "type": "merge", "data": {}}, "type"),
        ({"database": "test", "table": "e", "data": {}}, "type"),
        ({"database": "test", "table": "e", "type": 1, "data": {}}, "type"),
        ({"database": "test", "type": "insert", "data": {"id": 1}}, "table"),
        ({"table": "e", "type": "insert", "data": {"id": 1}}, "database"),
        ({"database": "test", "table": "e", "type": "insert", "data": None}, "data"),
        ({"database": "test", "table": "e", "type": "update", "data": {"id": 1}, "old": []}, "old"),
        ({"database": "test", "table": "e", "type": "insert", "ts": "x", "data": {"id": 1}}, "ts"),
        (
            {"database": "test", "table": "e", "type": "insert", "position": "f", "data": {"id": 1}},
            "position",
        ),
        ({"database": "test", "table": "e", "type": "insert", "xid": 1.5, "data": {"id": 1}}, "xid"),
        ({"database": "test", "table": "e", "type": "insert", "xoffset": "a", "data": {"id": 1}}, "xoffset"),
        ({"database": "test", "table": "e", "type": "insert", "commit": 1, "data": {"id": 1}}, "commit"),
        (
            {
                "database": "test",
                "table": "e",
                "type": "insert",
                "data": {"id": 1},
                "primary_key_columns": ["x"],
            },
            "primary_key_columns",
        ),
        ({"database": "test", "table": "e", "type": "table-create", "def": {"columns": {}}}, "def.columns"),
        (
            {"database": "test", "table": "e", "type": "table-create", "def": {"columns": [{"name": "a"}]}},
            "def.columns[0].type",
        ),
        ({"database": "test", "type": "table-create"}, "table"),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(raw: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(raw)
    err = info.value
    assert err.format_id == "maxwell-json"
    assert err.field == field
    assert err.preview and "payload:" in str(err)


_values = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=5))
_rows = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _values, min_size=1)


@settings(max_examples=200, deadline=None)
@given(data=_rows, old=_rows)
def test_property_update_before_is_data_merged_with_old(data: dict[str, Any], old: dict[str, Any]) -> None:
    event = one_change({**ROW, "type": "update", "data": data, "old": old})
    assert event.before is not None and event.after is not None
    for name in set(data) | set(old):
        expected_before = old[name] if name in old else data[name]
        assert event.before[name] == expected_before or str(event.before[name]) == str(expected_before)
        if name in data:
            assert event.after[name] is not UNAVAILABLE and event.after[name] != UNAVAILABLE
        else:
            assert event.after[name] == UNAVAILABLE
        if data.get(name, 0) is None and name in data:
            assert event.after[name] is None


_json = json_values
_docs = st.fixed_dictionaries(
    {},
    optional={
        "database": _json | st.just("db"),
        "table": _json | st.just("t"),
        "type": _json | st.sampled_from(["insert", "update", "delete", "bootstrap-insert", "table-alter"]),
        "data": _json | st.just({"id": 1}),
        "old": _json,
        "ts": _json,
        "xid": _json,
        "xoffset": _json,
        "commit": _json,
        "position": _json | st.just("f.1:2"),
        "primary_key_columns": _json,
        "def": _json,
    },
)


@settings(max_examples=200, deadline=None)
@given(doc=_docs)
def test_property_only_decode_errors_escape(doc: dict[str, Any], connect_checker: Any) -> None:
    try:
        records = emit(decode(doc), EmitOptions())
    except DecodeError as err:
        assert err.format_id in ("maxwell-json", "emit")
        return
    assert_connect_accepts(connect_checker, records)  # what decodes is valid for Kafka Connect
