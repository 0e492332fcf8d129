"""arcion-kafka: Arcion's Debezium-like key/value records for Kafka."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.connect import ConnectType
from transforms.decoders import Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SnapshotMarker, emit
from transforms.errors import DecodeError

FORMAT = "arcion-kafka"
DATA = Path(__file__).parent.parent / "data" / FORMAT


def seed(name: str) -> list[dict[str, Any] | None]:
    return [orjson.loads(line) for line in (DATA / f"{name}.txt").read_bytes().splitlines() if line.strip()]


def decode(value: Any, key: Any = None, topic: str = "KAFKA_Connector.tpch.region") -> list[Any]:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    raw_key = None if key is None else orjson.dumps(key)
    return create_decoder(FORMAT).decode(Message(value=raw, key=raw_key, topic=topic))


def one(value: Any, key: Any = None) -> ChangeEvent:
    events = decode(value, key)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def test_snapshot_row_is_read_with_empty_before_as_null() -> None:
    key, value = seed("seed-snapshot-insert")
    event = one(value, key)
    assert event.op is Operation.READ
    assert event.before is None
    assert event.after == {
        "r_regionkey": 3,
        "r_name": "EUROPE",
        "r_comment": "ly final courts cajole furiously final excuse",
    }
    assert event.source.snapshot is SnapshotMarker.TRUE
    assert event.source.sequence is None  # no binlog position during the snapshot
    assert event.table.key == ("r_regionkey",)
    col = event.table.column("r_regionkey")
    assert col is not None and col.type is ConnectType.INT32 and not col.optional


def test_realtime_insert_keeps_arcion_source_fields() -> None:
    key, value = seed("seed-realtime-insert")
    event = one(value, key)
    assert event.op is Operation.CREATE and event.before is None
    src = event.source
    assert src.connector == FORMAT
    assert src.fields["source_connector"] == "MYSQL"
    assert src.fields["source_version"] == "5.7.41"
    assert src.fields["source_name"] == "KAFKA_Connector"
    assert src.fields["server_id"] == 1  # "1" made consistent with the int64 source field
    assert src.fields["file"] == "mysql-log.000013" and src.fields["pos"] == 30407
    assert src.fields["thread"] == 309
    assert src.ts_ms == 1680798995000
    assert src.sequence == "mysql-log.0000000013:00000000000000030407:00001"
    assert event.ts_ms == 1680779196386
    assert (event.table.db, event.table.table) == ("tpch", "region")


def test_update_and_delete_with_empty_after() -> None:
    key, value = seed("seed-update")
    update = one(value, key)
    assert update.op is Operation.UPDATE
    assert update.before is not None and update.before["r_comment"] == "hs use ironic, even requests. s"
    assert update.after is not None and update.after["r_comment"] == "TestReplication"
    key, value, tomb_key, tomb_value = seed("seed-delete-tombstone")
    delete = one(value, key)
    assert delete.op is Operation.DELETE and delete.after is None
    assert delete.before == {"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "TestReplication"}
    records = emit([delete], EmitOptions())
    assert len(records) == 2 and records[1].value is None
    assert records[1].key is not None and records[1].key["payload"] == {"r_regionkey": 1}
    # Arcion's own tombstone produces nothing (we write ours)
    assert tomb_value is None
    assert decode(b"null", tomb_key) == []
    assert create_decoder(FORMAT).decode(Message(value=None)) == []


def test_pk_update_stays_delete_then_insert() -> None:
    lines = seed("pk-update-delete-insert")
    ops: list[Operation] = []
    for key, value in zip(lines[::2], lines[1::2], strict=True):
        raw = b"null" if value is None else orjson.dumps(value)
        events = create_decoder(FORMAT).decode(Message(value=raw, key=orjson.dumps(key)))
        ops.extend(e.op for e in events if isinstance(e, ChangeEvent))
    assert ops == [Operation.DELETE, Operation.CREATE]


def test_strings_in_int_columns_are_made_ints_and_null_key_means_no_key() -> None:
    _, value = seed("seed-realtime-insert")
    assert isinstance(value, dict)
    doc = copy.deepcopy(value)
    doc["payload"]["after"]["r_regionkey"] = "12"
    event = one(doc, None)
    assert event.after is not None and event.after["r_regionkey"] == 12
    assert event.table.key == ()
    assert emit([event], EmitOptions())[0].key is None


def test_a_field_the_schema_does_not_declare_is_ignored_as_json_converter_ignores_it() -> None:
    _, value = seed("seed-realtime-insert")
    assert isinstance(value, dict)
    doc = copy.deepcopy(value)
    expected = one(copy.deepcopy(doc), None).after
    doc["payload"]["after"]["unknown"] = 1
    doc["payload"]["source"]["unknown"] = 2
    event = one(doc, None)
    assert event.after == expected
    # the source block leaves in cdcnorm's own form, whose schema declares what it keeps
    assert event.source.fields["unknown"] == 2


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda p: p.update(op="z"), "op"),
        (lambda p: p.pop("op"), "op"),
        (lambda p: p["after"].update(r_regionkey="twelve"), "after.r_regionkey"),
        (lambda p: p.update(after="x"), "after"),
        (lambda p: p["source"].update(snapshot="perhaps"), "source.snapshot"),
    ],
)
def test_bad_records(mutate: Any, field: str) -> None:
    _, value = seed("seed-realtime-insert")
    assert isinstance(value, dict)
    doc = copy.deepcopy(value)
    mutate(doc["payload"])
    with pytest.raises(DecodeError) as info:
        decode(doc)
    assert info.value.format_id == FORMAT and info.value.field == field and info.value.preview


def test_truncated_json_and_bad_key() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b'{"schema": {"type": "struct"')
    assert info.value.format_id == FORMAT and info.value.field is None
    _, value = seed("seed-realtime-insert")
    with pytest.raises(DecodeError) as info:
        create_decoder(FORMAT).decode(Message(value=orjson.dumps(value), key=b"{oops"))
    assert info.value.field == "key"


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(2**31), 2**31 - 1),
    st.text(max_size=20),
    st.one_of(st.none(), st.text(max_size=20)),
    st.booleans(),
)
def test_int_columns_accept_numbers_and_numeric_strings(
    key: int, name: str, comment: str | None, as_text: bool
) -> None:
    _, value = seed("seed-realtime-insert")
    assert isinstance(value, dict)
    doc = copy.deepcopy(value)
    doc["payload"]["after"] = {
        "r_regionkey": str(key) if as_text else key,
        "r_name": name,
        "r_comment": comment,
    }
    event = one(doc, {"r_regionkey": key})
    assert event.after == {"r_regionkey": key, "r_name": name, "r_comment": comment}
    record = emit([event], EmitOptions())[0]
    assert record.key is not None and record.key["payload"] == {"r_regionkey": key}
