"""cdl-json: Huawei CDL JSON message_version 1.0 and 2.0."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.connect import Logical
from transforms.decoders import Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, emit
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE

FORMAT = "cdl-json"
DATA = Path(__file__).parent.parent / "data" / FORMAT
V1: dict[str, Any] = orjson.loads((DATA / "seed-v1-insert.txt").read_bytes())
V2: dict[str, Any] = orjson.loads((DATA / "seed-v2-insert.txt").read_bytes())


def decode(value: Any, **options: Any) -> list[Any]:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    return create_decoder(FORMAT, options).decode(Message(value=raw))


def one(value: Any, **options: Any) -> ChangeEvent:
    events = decode(value, **options)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def v1(**payload: Any) -> dict[str, Any]:
    doc = copy.deepcopy(V1)
    doc["payload"].update(payload)
    return doc


def v2(**payload: Any) -> dict[str, Any]:
    doc = copy.deepcopy(V2)
    doc["payload"].update(payload)
    return doc


def test_v1_insert_from_the_seed() -> None:
    event = one(V1)
    assert event.op is Operation.CREATE
    assert event.before is None
    assert event.after == {"count1": 13, "id": 34, "time1": None, "decimalNum": None}
    assert (event.table.db, event.table.schema, event.table.table) == (None, "public", "ct_pg2hudi")
    assert event.table.key == ("id",)
    src = event.source
    assert src.connector == FORMAT
    assert src.ts_ms == 1707047996013
    assert src.fields["source_connector"] == "POSTGRESQL"
    assert src.fields["lsn"] == 163955221008 and src.fields["txId"] == 57227595
    assert src.fields["heartbeat_identifier"] == "279fb050-0143-45c1-b184-50bc48c2461c"
    assert src.sequence == "00000000163955221008"
    assert event.transaction is not None and event.transaction.id == "57227595"
    time1 = event.table.column("time1")
    assert time1 is not None and time1.logical == Logical.CONNECT_TIMESTAMP
    dec = event.table.column("decimalNum")
    assert dec is not None and dec.logical == Logical.VARIABLE_SCALE_DECIMAL


def test_v1_database_option_names_the_db() -> None:
    assert one(V1, database="cdl").table.db == "cdl"


def test_v2_insert_from_the_seed() -> None:
    event = one(V2)
    assert event.op is Operation.CREATE
    assert event.after == {"count1": 14, "id": 35, "time1": None, "decimalNum": None}
    assert (event.table.db, event.table.schema, event.table.table) == ("cdl", "public", "ct_pg2hudi")
    assert event.table.key == ("id",)
    assert event.source.fields["source_connector"] == "postgresql"
    assert event.source.fields["message_version"] == "2.0"
    assert event.source.sequence == "00000000163955586912"
    assert event.transaction is not None and event.transaction.id == "57227663"
    assert event.ts_ms == 1707048984208


def test_v1_operations_and_decimal_strings() -> None:
    data = {"count1": 14, "id": 34, "time1": 1707048000000, "decimalNum": "12.345"}
    before = {"count1": 13, "id": 34, "time1": None, "decimalNum": None}
    update = one(v1(OPERATION="UPDATE", data=data, before=before))
    assert update.op is Operation.UPDATE and update.before == before
    assert update.after is not None and update.after["decimalNum"] == Decimal("12.345")
    delete = one(v1(OPERATION="DELETE", data=None, before=data))
    assert delete.op is Operation.DELETE and delete.after is None
    assert [r.value is None for r in emit([delete], EmitOptions())] == [False, True]


def test_v1_delete_without_before_is_keyed_from_unique() -> None:
    event = one(v1(OPERATION="DELETE", data=None, before=None, unique={"id": 33}))
    assert event.before == {"count1": UNAVAILABLE, "id": 33, "time1": UNAVAILABLE, "decimalNum": UNAVAILABLE}


def test_lob_columns_absent_are_unavailable_present_null_is_null() -> None:
    absent = one(
        v1(OPERATION="UPDATE", data={"count1": 1, "id": 34, "time1": None}, LOB_COLUMNS="decimalNum")
    )
    assert absent.after is not None and absent.after["decimalNum"] == UNAVAILABLE
    assert absent.after["time1"] is None
    assert absent.source.fields["lob_columns"] == "decimalNum"
    present = one(
        v1(
            OPERATION="UPDATE",
            data={"count1": 1, "id": 34, "time1": None, "decimalNum": None},
            LOB_COLUMNS="decimalNum",
        )
    )
    assert present.after is not None and present.after["decimalNum"] is None
    # a LOB column not in the schema is still UNAVAILABLE (never NULL) when absent
    doc = v2(LOB_COLUMNS="payload_clob")
    event = one(doc)
    assert event.after is not None and event.after["payload_clob"] == UNAVAILABLE


def test_a_column_the_schema_does_not_declare_is_ignored_unless_lob_columns_lists_it() -> None:
    # CDL writes Connect JSON: JsonConverter reads a row by its schema's fields and ignores the rest
    event = one(v1(data={"count1": 1, "id": 34, "time1": None, "nope": 1}))
    assert event.after is not None and "nope" not in event.after and event.after["id"] == 34
    # LOB_COLUMNS declares a column of its own: present, it is data even where the schema lacks it
    event = one(v1(data={"count1": 1, "id": 34, "time1": None, "clob1": "text"}, LOB_COLUMNS="clob1"))
    assert event.after is not None and event.after["clob1"] == "text"


def test_heartbeats_produce_nothing() -> None:
    payload = {k: v for k, v in V1["payload"].items() if k not in ("OPERATION", "data", "before", "unique")}
    assert decode({"schema": V1["schema"], "payload": payload}) == []
    assert decode(v1(OPERATION="HEARTBEAT")) == []
    assert decode(V1, **{"heartbeat.tables": "public.ct_pg2hudi"}) == []
    assert decode(V2, **{"heartbeat.tables": "ct_pg2hudi"}) == []
    assert decode(b"null") == []


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (v1(OPERATION="MERGE"), "OPERATION"),
        (v1(TABLE_NAME=None), "TABLE_NAME"),
        (v1(TABLE_NAME=5), "TABLE_NAME"),
        (v1(data="x"), "data"),
        (v1(data={"id": "abc", "count1": 1}), "data.id"),
        (v1(OPERATION="UPDATE", data=None), "data"),
        (v1(OPERATION="DELETE", data=None, before=None, unique=None), "before"),
        (v1(transaction={"properties": "x"}), "transaction.properties"),
        (v1(transaction={"properties": [{"value": 1}]}), "transaction.properties[0]"),
        (v1(TIMESTAMP="yesterday"), "TIMESTAMP"),
        (v1(LOB_COLUMNS=5), "LOB_COLUMNS"),
        (v1(unique=[1]), "unique"),
        (v1(message_version="3.0"), "message_version"),
        (v2(op="x"), "op"),
        (v2(after=[1]), "after"),
        ({"schema": None, "payload": {"something": 1}}, "message_version"),
    ],
)
def test_bad_messages(value: Any, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(value)
    assert info.value.format_id == FORMAT and info.value.field == field and info.value.preview


def test_truncated_json() -> None:
    with pytest.raises(DecodeError) as info:
        decode(orjson.dumps(V1)[:-10])
    assert info.value.format_id == FORMAT and info.value.field is None


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(2**31), 2**31 - 1),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    st.one_of(
        st.none(),
        st.decimals(allow_nan=False, allow_infinity=False, places=4, max_value=10**9, min_value=-(10**9)),
    ),
    st.sampled_from(["1.0", "2.0"]),
)
def test_rows_decode_to_typed_values(
    row_id: int, count: int | None, dec: Decimal | None, version: str
) -> None:
    row = {"count1": count, "id": row_id, "time1": None, "decimalNum": None if dec is None else str(dec)}
    doc = v1(data=row, unique={"id": row_id}) if version == "1.0" else v2(after=row, unique={"id": row_id})
    event = one(doc)
    assert event.after == {**row, "decimalNum": dec}
    record = emit([event], EmitOptions())[0]
    assert record.key is not None and record.key["payload"] == {"id": row_id}
