"""Behaviour of the ``dts-avro`` decoder (Alibaba DTS Avro ``Record``), on records encoded with
fastavro from the real schemas by ``tests/data/dts-avro/make_cases.py``."""

from __future__ import annotations

import datetime as dt
import importlib.util
import struct
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.goldens import shared_path
from transforms.connect import ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.dts_avro import DtsAvroDecoder, DtsSchemaVersion, _sequence, record_schema
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    TransactionEvent,
    TransactionStatus,
)
from transforms.errors import DecodeError
from transforms.metadata import InMemoryMetadataStore
from transforms.values import UNAVAILABLE

DATA = Path(__file__).parents[1] / "data" / "dts-avro"


def _load_cases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dts_make_cases", DATA / "make_cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mc = _load_cases()


def decode(payload: bytes | None, **options: str) -> list[Event]:
    return create_decoder("dts-avro", options).decode(Message(value=payload))


def one_change(payload: bytes, **options: str) -> ChangeEvent:
    events = decode(payload, **options)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


ORDERS = [("id", 3), ("sku", 253), ("qty", 2), ("price", 246)]
ROW = [mc.integer(1), mc.char("A-1"), mc.integer(2, 2), mc.decimal("9.90", 10, 2)]
PK = {"pk_uk_info": '{"PRIMARY":["id"],"uk_sku":["sku"]}'}


def rec(operation: str = "INSERT", **kw: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "object_name": "shop.orders",
        "fields": ORDERS,
        "before": None,
        "after": ROW,
        "record_id": 7,
        "ts": 1696984408,
        "position": "72469@78",
        "tags": PK,
    }
    defaults.update(kw)
    name = defaults.pop("object_name")
    fields = defaults.pop("fields")
    before = defaults.pop("before")
    after = defaults.pop("after")
    return mc.record(operation, name, fields, before, after, **defaults)


# ----------------------------------------------------------------------------- inputs


def test_golden_inputs_are_what_the_generator_writes() -> None:
    for name, content in mc.build().items():
        assert (DATA / name).read_bytes() == content, f"{name} is stale: run make_cases.py"


def test_schema_files_are_the_vendor_schemas_unmodified() -> None:
    current = shared_path("vectors", "dts-avro", "LioRoger-subscribe_example-Record.avsc")
    old = shared_path("vectors", "dts-avro", "LioRoger-subscribe_example-Record-2019-no-bornTimestamp.avsc")
    package = Path(__file__).resolve().parents[2] / "transforms" / "decoders" / "schemas"
    assert (package / "dts_record.avsc").read_bytes() == current.read_bytes()
    assert (package / "dts_record_2019.avsc").read_bytes() == old.read_bytes()


# ----------------------------------------------------------------------------- values and types


def test_every_mysql_image_type_becomes_a_typed_value() -> None:
    event = one_change(mc.mysql_types()[0])
    after = event.after
    assert after is not None and event.before is None and event.op is Operation.CREATE
    assert after["id"] == 1
    assert after["c_tinyint"] == -128 and after["c_smallint"] == 65535 and after["c_int"] == 4294967295
    assert after["c_bigint_unsigned"] == -1  # BIGINT UNSIGNED wraps like bigint.unsigned.handling.mode=long
    assert after["c_float"] == 1.5 and after["c_double"] == -2.25e10
    assert after["c_decimal"] == Decimal("12345.67")
    assert after["c_varchar"] == "héllo wörld 😀"
    assert after["c_char_latin1"] == "café" and after["c_char_gbk"] == "中文"
    assert after["c_varbinary"] == b"\x00\x01\xfe\xff"
    assert after["c_text"] == "long text" and after["c_blob"] == b"\x89PNG\r\n"
    assert after["c_date"] == dt.date(2024, 2, 29)
    assert after["c_time"] == -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=500000)
    assert after["c_datetime"] == dt.datetime(2024, 3, 1, 13, 14, 15, 123456)
    assert after["c_timestamp"] == dt.datetime(2024, 3, 1, 13, 14, 15, 250000, tzinfo=dt.UTC)
    assert after["c_year"] == 2024
    assert after["c_json"] == '{"a": [1, 2, {"b": null}]}'
    assert after["c_enum"] == "medium" and after["c_set"] == "a,c"
    assert after["c_geometry"] == {"wkb": mc.point_wkb(120.5, 30.25), "srid": 4326}

    cols = {c.name: c for c in event.table.columns}
    assert cols["c_tinyint"].type is ConnectType.INT16
    assert cols["c_bigint_unsigned"].type is ConnectType.INT64
    assert cols["c_float"].type is ConnectType.FLOAT32
    assert (cols["c_decimal"].logical, cols["c_decimal"].precision, cols["c_decimal"].scale) == (
        Logical.DECIMAL,
        10,
        2,
    )
    assert cols["c_varbinary"].type is ConnectType.BYTES and cols["c_text"].type is ConnectType.STRING
    assert cols["c_date"].logical == Logical.DATE and cols["c_time"].logical == Logical.MICRO_TIME
    assert cols["c_datetime"].logical == Logical.MICRO_TIMESTAMP
    assert cols["c_timestamp"].logical == Logical.ZONED_TIMESTAMP
    assert cols["c_year"].logical == Logical.YEAR and cols["c_json"].logical == Logical.JSON
    assert cols["c_geometry"].logical == Logical.GEOMETRY
    assert event.table.key == ("id",)


def test_empty_object_none_is_absent_and_null_is_sql_null() -> None:
    after = [mc.integer(1), mc.NULL, mc.NONE, None]
    event = one_change(mc.encode(rec(after=after)))
    assert event.after == {"id": 1, "sku": None, "qty": UNAVAILABLE, "price": None}


def test_zero_dates_are_null_and_times_may_exceed_a_day() -> None:
    event = one_change(mc.mysql_types()[2])
    assert event.after is not None
    assert event.after["c_date"] is None and event.after["c_datetime"] is None
    assert event.after["c_time"] == dt.timedelta(hours=25, seconds=1)


def test_a_column_keeps_its_type_when_its_values_are_all_null() -> None:
    store = InMemoryMetadataStore()
    first = DtsAvroDecoder(metadata=store).decode(Message(mc.mysql_types()[0]))[0]
    # a fresh decoder (another replica) sharing the store
    second = DtsAvroDecoder(metadata=store).decode(Message(mc.mysql_types()[1]))[0]
    assert isinstance(first, ChangeEvent) and isinstance(second, ChangeEvent)
    assert second.after is not None and second.after["c_decimal"] is None
    assert first.table.columns == second.table.columns
    # without a hint the number alone decides
    alone = one_change(mc.mysql_types()[1])
    cols = {c.name: c for c in alone.table.columns}
    assert cols["c_decimal"].logical == Logical.VARIABLE_SCALE_DECIMAL
    assert cols["c_varbinary"].type is ConnectType.STRING and cols["c_blob"].type is ConnectType.BYTES


def test_oracle_fractions_are_nanoseconds_and_zones_are_kept() -> None:
    events = decode(mc.oracle_txn()[1])
    event = events[0]
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["UPDATED"] == dt.datetime(2024, 3, 1, 13, 14, 15, 123456)
    seen = event.after["SEEN"]
    assert seen == dt.datetime(2024, 3, 1, 13, 14, 15, 500000, tzinfo=dt.timezone(dt.timedelta(hours=8)))
    assert event.after["SAL"] == Decimal("800.50") and event.after["PHOTO"] == b"\x01\x02"
    assert (event.table.db, event.table.schema, event.table.table) == ("ORCL", "SCOTT", "EMP")
    cols = {c.name: c for c in event.table.columns}
    assert cols["DOC"].logical == Logical.XML and cols["EMPNO"].type is ConnectType.INT64


def test_postgres_type_oids_decide_the_type() -> None:
    event = decode(mc.postgres()[1])[0]
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["flag"] is True
    assert event.after["created"] == dt.datetime(2024, 3, 1, 13, 14, 15, 654321)
    cols = {c.name: c for c in event.table.columns}
    assert cols["flag"].type is ConnectType.BOOLEAN and cols["payload"].logical == Logical.JSON


def test_geometry_wkb_with_and_without_srid_and_wkt() -> None:
    first, second, third = (decode(m)[0] for m in mc.geometry())
    assert (
        isinstance(first, ChangeEvent) and isinstance(second, ChangeEvent) and isinstance(third, ChangeEvent)
    )
    assert first.after is not None and first.after["shape"] == {"wkb": mc.point_wkb(1.5, 2.5), "srid": 4326}
    assert second.after is not None and second.after["shape"]["srid"] is None
    assert third.after is not None and third.after["shape"] == "POINT(1.5 2.5)"


# ----------------------------------------------------------------------------- operations


def test_update_and_delete() -> None:
    new = [mc.integer(1), mc.char("A-1"), mc.integer(5, 2), mc.NONE]
    update = one_change(mc.encode(rec("UPDATE", before=ROW, after=new)))
    assert update.op is Operation.UPDATE
    assert update.before is not None and update.before["qty"] == 2
    assert update.after is not None and update.after["qty"] == 5 and update.after["price"] == UNAVAILABLE
    delete = one_change(mc.encode(rec("DELETE", before=ROW, after=None)))
    assert delete.op is Operation.DELETE and delete.after is None and delete.before is not None


def test_key_comes_from_pk_uk_info_primary_only() -> None:
    assert one_change(mc.encode(rec())).table.key == ("id",)
    assert one_change(mc.encode(rec(tags={}))).table.key == ()
    assert one_change(mc.encode(rec(tags={"pk_uk_info": '{"uk_sku":["sku"]}'}))).table.key == ()


@pytest.mark.parametrize(
    ("object_name", "names"),
    [
        ("shop.orders", ("shop", None, "orders")),
        ("appdb.public.orders", ("appdb", "public", "orders")),
        ("shop.orders\\u002Earchive", ("shop", None, "orders.archive")),
    ],
)
def test_object_name(object_name: str, names: tuple[str | None, ...]) -> None:
    table = one_change(mc.encode(rec(object_name=object_name))).table
    assert (table.db, table.schema, table.table) == names


def test_ddl_is_a_schema_change_with_its_text() -> None:
    texts = {
        "CREATE TABLE t (id INT)": "CREATE",
        "drop table t": "DROP",
        "ALTER TABLE t ADD c INT": "ALTER",
        "CREATE DATABASE d": "ALTER",
    }
    for ddl, change_type in texts.items():
        (event,) = decode(mc.encode(rec("DDL", fields=None, after=ddl, tags={})))
        assert isinstance(event, SchemaChangeEvent)
        assert (event.ddl, event.change_type, event.db, event.table) == (ddl, change_type, "shop", "orders")


@pytest.mark.parametrize(
    "operation",
    [
        "ROLLBACK",
        "ABORT",
        "HEARTBEAT",
        "CHECKPOINT",
        "FILL",
        "FINISH",
        "CONTROL",
        "RDB",
        "NOOP",
        "INIT",
        "COMMAND",
    ],
)
def test_control_records_carry_no_change(operation: str) -> None:
    assert decode(mc.encode(rec(operation, object_name=None, fields=None, after=None, txid="99"))) == []


def test_begin_commit_are_transaction_boundaries_when_named() -> None:
    (begin,) = decode(mc.encode(rec("BEGIN", object_name=None, fields=None, after=None, txid="10.5.1234")))
    (end,) = decode(mc.encode(rec("COMMIT", object_name=None, fields=None, after=None, txid="10.5.1234")))
    assert isinstance(begin, TransactionEvent) and isinstance(end, TransactionEvent)
    assert (begin.status, end.status, begin.id) == (
        TransactionStatus.BEGIN,
        TransactionStatus.END,
        "10.5.1234",
    )
    change = one_change(mc.encode(rec(txid="10.5.1234")))
    assert change.transaction is not None and change.transaction.id == "10.5.1234"
    # MySQL records say sourceTxid "0": no transaction
    assert decode(mc.encode(rec("BEGIN", object_name=None, fields=None, after=None, txid="0"))) == []
    assert one_change(mc.encode(rec(txid="0"))).transaction is None


def test_source_fields_timestamps_and_sequence() -> None:
    event = one_change(
        mc.encode(
            rec(
                safe_position="72347@78",
                born=1696984409,
                process=[1696984409001, 1696984409120],
                source=("MySQL", "8.0.28"),
            )
        )
    )
    src = event.source
    assert src.connector == "dts-avro" and src.ts_ms == 1696984408000
    assert event.ts_ms == 1696984409120
    assert src.sequence == "0000000078.00000000000000072469.00000000000000000007"
    fields = dict(src.fields)
    assert fields["source_position"] == "72469@78" and fields["safe_source_position"] == "72347@78"
    assert (
        fields["source_txid"] == "0" and fields["record_id"] == 7 and fields["born_timestamp"] == 1696984409
    )
    assert fields["source_type"] == "MySQL" and fields["source_version"] == "8.0.28"
    assert "born_timestamp" not in dict(one_change(mc.encode(rec(), mc.V2019)).source.fields)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**9), st.integers(0, 2**40), st.integers(0, 2**62)), min_size=2, max_size=2
    )
)
def test_sequence_sorts_like_binlog_file_then_offset_then_id(positions: list[tuple[int, int, int]]) -> None:
    (f1, o1, i1), (f2, o2, i2) = positions
    s1, s2 = _sequence(f"{o1}@{f1}", i1), _sequence(f"{o2}@{f2}", i2)
    assert s1 is not None and s2 is not None
    assert (s1 < s2) == ((f1, o1, i1) < (f2, o2, i2))


# ----------------------------------------------------------------------------- schema versions


def test_2019_records_need_the_2019_schema_or_auto() -> None:
    old = mc.encode(rec(), mc.V2019)
    new = mc.encode(rec(), mc.CURRENT)
    assert len(new) == len(old) + 1  # bornTimestamp 0 is one byte
    for payload in (old, new):
        assert one_change(payload).after == one_change(payload, **{"schema.version": "auto"}).after
    assert one_change(old, **{"schema.version": "2019"}).after is not None
    with pytest.raises(DecodeError) as exc:
        decode(old, **{"schema.version": "current"})
    assert exc.value.field == "bornTimestamp" and "truncated" in exc.value.reason
    with pytest.raises(DecodeError) as exc:
        decode(new, **{"schema.version": "2019"})
    assert exc.value.field == "afterImages" and "trailing" in exc.value.reason


def test_schemas_are_parsed_once() -> None:
    assert record_schema(DtsSchemaVersion.CURRENT) is record_schema(DtsSchemaVersion.CURRENT)
    assert [n for n, _ in record_schema(DtsSchemaVersion.CURRENT).fields][-1] == "bornTimestamp"
    assert [n for n, _ in record_schema(DtsSchemaVersion.V2019).fields][-1] == "afterImages"


# ----------------------------------------------------------------------------- bad input


def test_tombstone_input_is_ignored() -> None:
    assert decode(None) == []


@pytest.mark.parametrize(
    ("payload", "field", "words"),
    [
        (b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4", "version", "invalid Avro"),
        (mc.encode(rec())[:40], "objectName", "truncated"),
        (mc.encode(rec()) + b"\x02\x04", "bornTimestamp", "trailing"),
        (mc.encode(rec("MERGE"), mc.WITH_MERGE), "operation", "unknown operation"),
        (mc.encode(rec(after=ROW[:3])), "afterImages", "expected 4 values"),
        (mc.encode(rec(tags={"pk_uk_info": "{PRIMARY"})), "tags.pk_uk_info", "JSON object"),
        (mc.encode(rec(tags={"pk_uk_info": '{"PRIMARY":["nope"]}'})), "tags.pk_uk_info", "not in fields"),
        (
            mc.encode(rec(after=[ROW[0], mc.char(b"\xff", "utf8mb4"), ROW[2], ROW[3]])),
            "afterImages.sku",
            "utf8mb4",
        ),
        (
            mc.encode(rec(after=[ROW[0], mc.char(b"x", "klingon"), ROW[2], ROW[3]])),
            "afterImages.sku",
            "charset",
        ),
        (mc.encode(rec(after=[ROW[0], ROW[1], mc.integer(2**40, 2), ROW[3]])), "afterImages.qty", "int32"),
        (
            mc.encode(rec(after=[ROW[0], ROW[1], ROW[2], mc.decimal("x", 10, 2)])),
            "afterImages.price",
            "decimal",
        ),
        (mc.encode(rec(object_name=None)), "objectName", "db.table"),
        (mc.encode(rec(object_name="a.b.c.d")), "objectName", "at most 3"),
        (mc.encode(rec(fields=None)), "fields", "column list"),
        (mc.encode(rec("DELETE", after=None)), "beforeImages", "found null"),
        (mc.encode(rec("DDL", fields=None, after=None)), "afterImages", "DDL text"),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(payload: bytes, field: str, words: str) -> None:
    with pytest.raises(DecodeError) as exc:
        decode(payload)
    assert exc.value.format_id == "dts-avro"
    assert exc.value.field == field
    assert words in str(exc.value)
    assert exc.value.preview


def test_invalid_calendar_date_is_an_error() -> None:
    fields = [("id", 3), ("d", 10)]
    with pytest.raises(DecodeError) as exc:
        decode(mc.encode(rec(fields=fields, after=[mc.integer(1), mc.date_time(2023, 2, 30)])))
    assert exc.value.field == "afterImages.d" and "invalid date" in exc.value.reason


def test_oversized_message_is_rejected() -> None:
    with pytest.raises(DecodeError) as exc:
        decode(mc.encode(rec()), **{"max.message.bytes": "10"})
    assert "exceeds" in exc.value.reason


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    try:
        decode(data)
    except DecodeError as exc:
        assert exc.format_id == "dts-avro"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_truncation_of_a_record_is_a_decode_error(data: st.DataObject) -> None:
    payload = mc.encode(rec("UPDATE", before=ROW, after=ROW))
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(DecodeError):
        decode(payload[:cut], **{"schema.version": "current"})
    if cut < len(payload) - 1:  # without its last byte (bornTimestamp 0) it is a valid 2019 record
        with pytest.raises(DecodeError):
            decode(payload[:cut])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=30),
    st.decimals(min_value=-(10**7), max_value=10**7, places=2, allow_nan=False, allow_infinity=False),
    st.one_of(st.none(), st.just("NULL"), st.just("NONE")),
)
def test_values_round_trip(number: int, text: str, price: Decimal, empty: str | None) -> None:
    fields = [("id", 8), ("sku", 253), ("qty", 2), ("price", 246)]
    qty: Any = None if empty is None else (mc.NS + "EmptyObject", empty)
    after = [mc.integer(number, 8), mc.char(text), qty, mc.decimal(str(price), 10, 2)]
    event = one_change(mc.encode(rec(fields=fields, after=after)))
    assert event.after == {
        "id": number,
        "sku": text,
        "qty": UNAVAILABLE if empty == "NONE" else None,
        "price": price,
    }


def test_wkb_detection_does_not_split_pure_wkb() -> None:
    pure = struct.pack("<BIdd", 1, 1, 0.0, 0.0)
    event = one_change(
        mc.encode(rec(fields=[("id", 3), ("g", 255)], after=[mc.integer(1), mc.wkb_geometry("POINT", pure)]))
    )
    assert event.after is not None and event.after["g"] == {"wkb": pure, "srid": None}
