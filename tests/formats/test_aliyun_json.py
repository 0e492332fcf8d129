"""Behaviour of the aliyun-json (DataWorks) decoder: typed columns, ops, DDL, markers, errors."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from tests.formats.strategies import json_values
from transforms.connect import ConnectType, Logical
from transforms.decoders import Message
from transforms.decoders.aliyun_json import AliyunJsonDecoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SchemaChangeEvent, emit
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE

SCHEMA = {
    "dataColumn": [
        {"name": "id", "type": "LONG"},
        {"name": "val", "type": "DOUBLE"},
        {"name": "name", "type": "STRING"},
        {"name": "create_time", "type": "DATE"},
        {"name": "bin", "type": "BYTES"},
        {"name": "ok", "type": "BOOLEAN"},
    ],
    "primaryKey": ["id"],
    "source": {"dbType": "MySQL", "dbName": "bigdata_test", "tableName": "sync_test_table"},
}
ROW = {"id": 2, "val": "1.100000", "name": "a", "create_time": 1731661114000, "bin": "AAE=", "ok": True}
TIMES = {"eventTime": 1731662085000, "systemTime": 1731663848953, "checkpointTime": 1731662085000}


def message(op: str, before: Any = None, after: Any = None, **payload: Any) -> dict[str, Any]:
    body = {
        "before": None if before is None else {"dataColumn": before},
        "after": None if after is None else {"dataColumn": after},
        "sequenceId": "1731663842292000000",
        "timestamp": TIMES,
        "op": op,
        "ddl": None,
        **payload,
    }
    return {"schema": SCHEMA, "payload": body, "version": "0.0.1"}


def decode(doc: Any) -> list[Any]:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return AliyunJsonDecoder().decode(Message(raw))


def one_change(doc: Any) -> ChangeEvent:
    events = decode(doc)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def test_insert_types_values_from_the_schema() -> None:
    event = one_change(message("INSERT", after=ROW))
    assert event.op is Operation.CREATE and event.before is None
    assert event.after == {
        "id": 2,
        "val": 1.1,
        "name": "a",
        "create_time": dt.datetime(2024, 11, 15, 8, 58, 34),
        "bin": b"\x00\x01",
        "ok": True,
    }
    cols = {c.name: (c.type, c.logical) for c in event.table.columns}
    assert cols["create_time"] == (ConnectType.INT64, Logical.TIMESTAMP)
    assert cols["val"] == (ConnectType.FLOAT64, None)
    assert event.table.key == ("id",)
    assert (event.table.db, event.table.table) == ("bigdata_test", "sync_test_table")


def test_times_and_sequence() -> None:
    event = one_change(message("INSERT", after=ROW))
    assert event.source.ts_ms == 1731662085000 and event.ts_ms == 1731663848953
    assert event.source.sequence == "1731663842292000000".zfill(24)
    full_load = one_change(
        message("INSERT", after=ROW, sequenceId="-1", timestamp={"eventTime": -1, "systemTime": 5})
    )
    assert full_load.source.ts_ms is None and full_load.source.sequence is None


def test_update_after_carries_both_images_and_update_before_alone_is_nothing() -> None:
    event = one_change(message("UPDATE_AFTER", before=ROW, after={**ROW, "val": "2.2"}))
    assert event.op is Operation.UPDATE
    assert event.before is not None and event.before["val"] == 1.1
    assert event.after is not None and event.after["val"] == 2.2
    assert decode(message("UPDATE_BEFORE", before=ROW)) == []


def test_delete_and_missing_columns() -> None:
    event = one_change(message("DELETE", before={"id": 1}))
    assert event.after is None
    assert event.before == {
        "id": 1,
        "val": UNAVAILABLE,
        "name": UNAVAILABLE,
        "create_time": UNAVAILABLE,
        "bin": UNAVAILABLE,
        "ok": UNAVAILABLE,
    }


def test_ddl_and_markers() -> None:
    (ddl,) = decode(message("ALTER", ddl="ALTER TABLE t ADD c INT"))
    assert (
        isinstance(ddl, SchemaChangeEvent)
        and ddl.ddl == "ALTER TABLE t ADD c INT"
        and ddl.change_type == "ALTER"
    )
    (drop,) = decode(message("ERASE", ddl="DROP TABLE t"))
    assert isinstance(drop, SchemaChangeEvent) and drop.change_type == "DROP"
    assert one_change(message("TRUNCATE")).op is Operation.TRUNCATE
    for marker in ("MHEARTBEAT", "TRANSACTION_BEGIN", "TRANSACTION_END"):
        assert decode({"schema": None, "payload": {"op": marker}}) == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"payload":{"op":"INSERT"}', None),
        ({"payload": {"op": "UPSERT"}}, "payload.op"),
        ({"payload": "x"}, "payload"),
        ({"payload": {"op": "INSERT"}}, "schema"),
        ({**message("INSERT", after=ROW), "schema": {**SCHEMA, "source": None}}, "schema.source"),
        ({**message("INSERT", after=ROW), "schema": {**SCHEMA, "dataColumn": {}}}, "schema.dataColumn"),
        (message("INSERT"), "payload.after"),
        (message("DELETE", after=ROW), "payload.before"),
        (message("INSERT", after={**ROW, "id": "x"}), "payload.after.dataColumn.id"),
        (message("INSERT", after={**ROW, "extra": 1}), "payload.after.dataColumn"),
        (message("INSERT", after={**ROW, "bin": "%%"}), "payload.after.dataColumn.bin"),
        (message("INSERT", after=ROW, timestamp=[1]), "payload.timestamp"),
        (message("INSERT", after=ROW, sequenceId=[1]), "payload.sequenceId"),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(raw: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(raw)
    err = info.value
    assert err.format_id == "aliyun-json"
    assert err.field == field
    assert err.preview and "payload:" in str(err)


_json = json_values


@settings(max_examples=200, deadline=None)
@given(
    op=_json | st.sampled_from(["INSERT", "UPDATE_AFTER", "DELETE", "ALTER", "TRUNCATE"]),
    before=_json,
    after=_json,
    schema=_json | st.just(SCHEMA),
    times=_json,
)
def test_property_only_decode_errors_escape(
    op: Any, before: Any, after: Any, schema: Any, times: Any, connect_checker: Any
) -> None:
    doc = {"schema": schema, "payload": {"op": op, "before": before, "after": after, "timestamp": times}}
    try:
        records = emit(decode(doc), EmitOptions())
    except DecodeError as err:
        assert err.format_id in ("aliyun-json", "emit")
        return
    assert_connect_accepts(connect_checker, records)  # what decodes is valid for Kafka Connect
