"""canal-json: the semantics spelled out as assertions, bad input, and round-trip properties."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from transforms.connect import ConnectType, DecimalHandlingMode, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.canal_json import CanalJsonDecoder, column_for_type
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SchemaChangeEvent, SnapshotMarker, emit
from transforms.errors import ConfigError, DecodeError
from transforms.values import UNAVAILABLE


def msg(**fields: Any) -> Message:
    doc: dict[str, Any] = {
        "database": "db",
        "table": "t",
        "es": 1600161894000,
        "ts": 1600161894771,
        "id": 58,
        "isDdl": False,
        "sql": "",
        "pkNames": ["id"],
        "mysqlType": {"id": "bigint(20)", "v": "varchar(50)"},
        "sqlType": {"id": -5, "v": 12},
        "old": None,
    }
    doc.update(fields)
    return Message(orjson.dumps(doc), topic="topic")


def decode(message: Message, **options: Any) -> list[Any]:
    return create_decoder("canal-json", options).decode(message)


def changes(message: Message, **options: Any) -> list[Any]:
    """The decoded events, all of them row changes (typed loosely so tests can index images)."""
    events = decode(message, **options)
    assert all(isinstance(e, ChangeEvent) for e in events)
    return events


# ------------------------------------------------------------------------------ behaviour


def test_multi_row_data_gives_one_change_per_row_in_order() -> None:
    events = changes(
        msg(type="INSERT", data=[{"id": "3", "v": "c"}, {"id": "1", "v": "a"}, {"id": "2", "v": None}])
    )
    assert [e.op for e in events] == [Operation.CREATE] * 3
    assert [e.after["id"] for e in events] == [3, 1, 2]
    assert events[2].after["v"] is None
    assert all(e.before is None for e in events)


def test_update_before_is_data_overlaid_with_old() -> None:
    (event,) = changes(msg(type="UPDATE", data=[{"id": "1", "v": "new"}], old=[{"v": "old"}]))
    assert event.op is Operation.UPDATE
    assert event.after == {"id": 1, "v": "new"}
    assert event.before == {"id": 1, "v": "old"}


def test_update_old_null_value_is_a_real_null_before() -> None:
    (event,) = changes(msg(type="UPDATE", data=[{"id": "1", "v": "x"}], old=[{"v": None}]))
    assert event.before == {"id": 1, "v": None}


def test_update_rows_pair_with_old_rows_by_position() -> None:
    events = changes(
        msg(
            type="UPDATE",
            data=[{"id": "1", "v": "a2"}, {"id": "2", "v": "b2"}],
            old=[{"v": "a1"}, {"v": "b1"}],
        )
    )
    assert [(e.before["v"], e.after["v"]) for e in events] == [("a1", "a2"), ("b1", "b2")]


def test_update_without_old_has_unknown_before() -> None:
    (event,) = changes(msg(type="UPDATE", data=[{"id": "1", "v": "a"}]))
    assert event.before is None
    assert event.after == {"id": 1, "v": "a"}


def test_delete_rows_in_data() -> None:
    (event,) = changes(msg(type="DELETE", data=[{"id": "500000287", "v": None}]))
    assert event.op is Operation.DELETE
    assert event.before == {"id": 500000287, "v": None}
    assert event.after is None


def test_delete_legacy_layout_rows_in_old() -> None:
    (event,) = changes(msg(type="DELETE", data=None, old=[{"id": "7", "v": "aaa"}]))
    assert event.before == {"id": 7, "v": "aaa"}
    assert event.after is None


def test_delete_legacy_partial_row_marks_missing_columns_unavailable() -> None:
    (event,) = changes(msg(type="DELETE", data=None, old=[{"v": "aaa"}]))
    assert event.before == {"id": UNAVAILABLE, "v": "aaa"}


def test_column_typed_but_absent_from_row_is_unavailable_not_null() -> None:
    (event,) = changes(msg(type="INSERT", data=[{"id": "1"}]))
    assert event.after == {"id": 1, "v": UNAVAILABLE}


def test_init_rows_are_snapshot_reads() -> None:
    (event,) = changes(msg(type="INIT", data=[{"id": "1", "v": "a"}]))
    assert event.op is Operation.READ
    assert event.source.snapshot is SnapshotMarker.TRUE


def test_times_and_source_fields() -> None:
    (event,) = changes(
        msg(type="INSERT", data=[{"id": "1", "v": "a"}], gtid="uuid:12", serverId=3, sql="insert")
    )
    assert event.source.ts_ms == 1600161894000
    assert event.ts_ms == 1600161894771
    assert event.source.sequence is None
    assert event.source.fields == {"id": 58, "gtid": "uuid:12", "server_id": 3, "query": "insert"}
    assert (event.table.db, event.table.schema, event.table.table) == ("db", None, "t")


def test_pk_names_give_the_key_and_empty_list_gives_none() -> None:
    (keyed,) = changes(msg(type="INSERT", data=[{"id": "1", "v": "a"}]))
    assert keyed.table.key == ("id",)
    (unkeyed,) = changes(msg(type="INSERT", data=[{"id": "1", "v": "a"}], pkNames=[]))
    assert unkeyed.table.key == ()
    records = emit([unkeyed], EmitOptions())
    assert records[0].key is None


def test_bigint_is_a_json_number_in_the_emitted_record() -> None:
    (event,) = changes(msg(type="INSERT", data=[{"id": "9007199254740993", "v": "a"}]))
    (record,) = emit([event], EmitOptions())
    assert record.value is not None
    assert record.value["payload"]["after"]["id"] == 9007199254740993
    assert record.key == {"schema": record.key["schema"], "payload": {"id": 9007199254740993}}  # type: ignore[index]


def test_ddl_is_a_schema_change_with_the_sql() -> None:
    (event,) = decode(msg(type="DDL", isDdl=True, sql="CREATE TABLE t (id int)", mysqlType=None, data=None))
    assert isinstance(event, SchemaChangeEvent)
    assert event.ddl == "CREATE TABLE t (id int)"
    assert event.change_type == "CREATE"
    assert (event.db, event.table) == ("db", "t")
    assert event.ts_ms == 1600161894771


@pytest.mark.parametrize("kind, change", [("CREATE", "CREATE"), ("ALTER", "ALTER"), ("ERASE", "DROP")])
def test_ddl_types_without_is_ddl(kind: str, change: str) -> None:
    (event,) = decode(msg(type=kind, isDdl=None, sql="/* c */ x", data=None))
    assert isinstance(event, SchemaChangeEvent)
    assert event.change_type == change


def test_truncate_is_a_schema_change_then_a_truncate() -> None:
    ddl, trunc = decode(msg(type="TRUNCATE", isDdl=True, sql="truncate table t", data=None))
    assert isinstance(ddl, SchemaChangeEvent)
    assert isinstance(trunc, ChangeEvent)
    assert trunc.op is Operation.TRUNCATE
    assert trunc.before is None and trunc.after is None


@pytest.mark.parametrize("kind", ["GTID", "XACOMMIT", "XAROLLBACK", "MHEARTBEAT"])
def test_no_change_types(kind: str) -> None:
    assert decode(msg(type=kind, data=None)) == []


def test_empty_data_has_no_change_and_tombstone_input_is_empty() -> None:
    assert decode(msg(type="INSERT", data=[])) == []
    assert decode(Message(None)) == []


def test_missing_table_uses_default_table_option_then_topic() -> None:
    message = Message(b'{"data":[{"k":"1"}],"type":"INSERT"}', topic="events")
    (by_topic,) = changes(message)
    assert (by_topic.table.db, by_topic.table.table) == (None, "events")
    (by_option,) = changes(message, **{"default.table": "shop.orders"})
    assert (by_option.table.db, by_option.table.table) == ("shop", "orders")
    with pytest.raises(DecodeError) as err:
        decode(Message(b'{"data":[{"k":"1"}],"type":"INSERT"}'))
    assert err.value.field == "table"


def test_untyped_values_are_inferred_and_kept() -> None:
    message = Message(
        b'{"data":[{"id":1,"w":5.5,"s":"x","n":null}],"old":null,"type":"INSERT","database":"d","table":"t",'
        b'"pkNames":["id"]}'
    )
    (event,) = changes(message)
    assert event.after == {"id": 1, "w": 5.5, "s": "x", "n": None}
    types = {c.name: c.type for c in event.table.columns}
    assert types == {
        "id": ConnectType.INT64,
        "w": ConnectType.FLOAT64,
        "s": ConnectType.STRING,
        "n": ConnectType.STRING,
    }


# ------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    "mysql_type, sql_type, ctype, logical",
    [
        ("bigint(20)", -5, ConnectType.INT64, None),
        ("BIGINT", None, ConnectType.INT64, None),
        ("int(11) unsigned", 4, ConnectType.INT64, None),
        ("INT(8) unsigned zerofill", 4, ConnectType.INT64, None),
        ("int(11)", 4, ConnectType.INT32, None),
        ("TINYINT(1)", -6, ConnectType.INT16, None),
        ("BOOLEAN", -6, ConnectType.BOOLEAN, None),
        ("SMALLINT unsigned", 5, ConnectType.INT32, None),
        ("BIGINT UNSIGNED", -5, ConnectType.BYTES, Logical.DECIMAL),
        ("decimal(38,3)", 3, ConnectType.BYTES, Logical.DECIMAL),
        ("DECIMAL(8, 0)", 3, ConnectType.BYTES, Logical.DECIMAL),
        ("float", 7, ConnectType.FLOAT32, None),
        ("DOUBLE PRECISION(10,7) unsigned zerofill", 8, ConnectType.FLOAT64, None),
        ("datetime", 93, ConnectType.INT64, Logical.TIMESTAMP),
        ("datetime(3)", 93, ConnectType.INT64, Logical.TIMESTAMP),
        ("datetime(6)", 93, ConnectType.INT64, Logical.MICRO_TIMESTAMP),
        ("timestamp", 93, ConnectType.STRING, Logical.ZONED_TIMESTAMP),
        ("date", 91, ConnectType.INT32, Logical.DATE),
        ("time", 92, ConnectType.INT64, Logical.MICRO_TIME),
        ("year", 12, ConnectType.INT32, Logical.YEAR),
        ("json", 1111, ConnectType.STRING, Logical.JSON),
        ("ENUM('a','b')", 4, ConnectType.STRING, Logical.ENUM),
        ("SET('a','b')", -2, ConnectType.STRING, Logical.ENUM_SET),
        ("VARBINARY(10)", 2004, ConnectType.BYTES, None),
        ("TINYTEXT", -3, ConnectType.STRING, None),
        ("bit(1)", -7, ConnectType.BOOLEAN, None),
        ("bit(12)", -7, ConnectType.BYTES, Logical.BITS),
        ("POINT", -2, ConnectType.STRUCT, Logical.GEOMETRY),
        (None, -3, ConnectType.BYTES, None),
        (None, 3, ConnectType.STRUCT, Logical.VARIABLE_SCALE_DECIMAL),
        (None, 93, ConnectType.INT64, Logical.MICRO_TIMESTAMP),
    ],
)
def test_type_spellings(
    mysql_type: str | None, sql_type: int | None, ctype: ConnectType, logical: str | None
) -> None:
    col = column_for_type("c", mysql_type, sql_type)
    assert col is not None
    assert (col.type, col.logical) == (ctype, logical)


def typed(mysql_type: str, value: Any, options: dict[str, str] | None = None) -> Any:
    (event,) = changes(
        msg(
            type="INSERT",
            mysqlType={"c": mysql_type},
            sqlType={"c": 12},
            pkNames=[],
            data=[{"c": value}],
        ),
        **(options or {}),
    )
    return event.after["c"]


def test_typed_values() -> None:
    assert typed("bigint unsigned", "18446744073709551615") == Decimal("18446744073709551615")
    assert typed("bigint unsigned", "18446744073709551615", {"bigint.unsigned.handling.mode": "long"}) == -1
    assert typed("decimal(38,3)", "12345.110") == Decimal("12345.110")
    assert typed("datetime(6)", "2023-03-23 14:30:05.123456") == dt.datetime(2023, 3, 23, 14, 30, 5, 123456)
    assert typed("date", "2023-03-23") == dt.date(2023, 3, 23)
    assert typed("date", "0000-00-00") is None
    assert typed("time", "10:13:23") == dt.timedelta(hours=10, minutes=13, seconds=23)
    assert typed("year", "2023") == 2023
    assert typed("timestamp", "2023-03-23 00:10:00") == dt.datetime(2023, 3, 23, 0, 10, tzinfo=dt.UTC)
    assert typed("timestamp", "2023-03-23 08:10:00", {"timestamp.zone": "Asia/Shanghai"}) == dt.datetime(
        2023, 3, 23, 0, 10, tzinfo=dt.UTC
    )
    assert typed("ENUM('value1','value2','value3')", "2") == "value2"
    assert typed("ENUM('value1','value2')", "value1") == "value1"
    assert typed("SET('a','b','c','d')", "3") == "a,b"
    assert typed("SET('a','b','c','d')", "b,d") == "b,d"
    assert typed("varbinary(10)", "\u00ff\u0000a") == b"\xff\x00a"
    assert typed("bit(1)", "1") is True
    assert typed("bit(12)", "5") == b"\x05\x00"
    assert typed("point", "\u0000\u0000\u0000\u0000\u0001\u0001\u0000\u0000\u0000" + "\u0000" * 16) == {
        "wkb": b"\x01\x01\x00\x00\x00" + b"\x00" * 16,
        "srid": 0,
    }
    assert typed("float", "1.5") == 1.5
    assert typed("json", '{"a": 1}') == '{"a": 1}'


def test_decimal_handling_mode_applies_to_the_emitted_decimal() -> None:
    (event,) = changes(
        msg(
            type="INSERT",
            mysqlType={"c": "decimal(10,2)"},
            sqlType={"c": 3},
            pkNames=[],
            data=[{"c": "1.50"}],
        )
    )
    (precise,) = emit([event], EmitOptions())
    (as_string,) = emit([event], EmitOptions(decimal_mode=DecimalHandlingMode.STRING))
    (as_double,) = emit([event], EmitOptions(decimal_mode=DecimalHandlingMode.DOUBLE))
    assert precise.value is not None and as_string.value is not None and as_double.value is not None
    assert precise.value["payload"]["after"]["c"] == "AJY="
    assert as_string.value["payload"]["after"]["c"] == "1.50"
    assert as_double.value["payload"]["after"]["c"] == 1.5


def test_equal_table_schemas_are_reused() -> None:
    decoder = CanalJsonDecoder()
    (a,) = decoder.decode(msg(type="INSERT", data=[{"id": "1", "v": "a"}]))
    (b,) = decoder.decode(msg(type="INSERT", data=[{"id": "2", "v": "b"}]))
    assert isinstance(a, ChangeEvent) and isinstance(b, ChangeEvent)
    assert a.table is b.table


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "payload, field",
    [
        (b'{"data":[{"id":"1"}],"type":"INS', None),
        (b"[1, 2]", None),
        (b'{"data":[{"id":"1"}]}', "type"),
        (b'{"data":[{"id":"1"}],"type":"MERGE","table":"t"}', "type"),
        (b'{"data":{"id":"1"},"type":"INSERT","table":"t"}', "data"),
        (b'{"data":["x"],"type":"INSERT","table":"t"}', "data[0]"),
        (b'{"data":null,"type":"INSERT","table":"t"}', "data"),
        (b'{"data":null,"old":null,"type":"DELETE","table":"t"}', "data"),
        (b'{"data":[{"id":"1"}],"old":[{},{}],"type":"UPDATE","table":"t"}', "old"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":"t","es":"soon"}', "es"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":"t","pkNames":"id"}', "pkNames"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":"t","mysqlType":["int"]}', "mysqlType"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":"t","sqlType":{"id":"int"}}', "sqlType.id"),
        (b'{"data":[{"id":"x1"}],"type":"INSERT","table":"t","mysqlType":{"id":"int(11)"}}', "data[0].id"),
        (b'{"data":[{"d":"2020-13-45"}],"type":"INSERT","table":"t","mysqlType":{"d":"date"}}', "data[0].d"),
        (b'{"data":[{"e":"9"}],"type":"INSERT","table":"t","mysqlType":{"e":"enum(\'a\')"}}', "data[0].e"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":5}', "table"),
        (b'{"data":[{"id":"1"}],"type":"INSERT","table":"t","isDdl":"no"}', "isDdl"),
        (
            b'{"data":[{"id":"1"}],"old":[{"id":"x"}],"type":"UPDATE","table":"t","mysqlType":{"id":"int"}}',
            "old[0].id",
        ),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(payload: bytes, field: str | None) -> None:
    with pytest.raises(DecodeError) as err:
        decode(Message(payload, topic="t"))
    assert err.value.format_id == "canal-json"
    assert err.value.field == field
    assert "payload: " in str(err.value)


def test_unknown_option_and_bad_zone_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        create_decoder("canal-json", {"database.include": "x"})
    with pytest.raises(ConfigError):
        create_decoder("canal-json", {"timestamp.zone": "Mars/Olympus"})


# ------------------------------------------------------------------------------ properties

NAMES = st.text("abcdefgh_", min_size=1, max_size=6)
VALUES = st.one_of(st.none(), st.text(max_size=8), st.integers(-(2**63), 2**63 - 1).map(str))
TYPES = st.sampled_from(["varchar(20)", "bigint(20)", "BIGINT UNSIGNED"])


@st.composite
def canal_changes(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    types = {n: draw(TYPES) for n in names}
    op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE", "INIT"]))

    def value(name: str) -> Any:
        v = draw(VALUES)
        if v is not None and types[name] != "varchar(20)":
            v = str(draw(st.integers(0, 2**63 - 1)))
        return v

    rows = []
    for _ in range(draw(st.integers(1, 3))):
        present = draw(st.lists(st.sampled_from(names), unique=True))
        data = {n: value(n) for n in names if n in present}
        old = {n: value(n) for n in draw(st.lists(st.sampled_from(names), unique=True))}
        rows.append((data, old))
    legacy = draw(st.booleans())
    return {"names": names, "types": types, "op": op, "rows": rows, "legacy": legacy}


def expected_value(mysql_type: str, raw: Any) -> Any:
    if raw is None:
        return None
    if mysql_type == "varchar(20)":
        return raw
    return Decimal(raw) if "UNSIGNED" in mysql_type else int(raw)


@settings(max_examples=200, deadline=None)
@given(canal_changes())
def test_round_trip_keeps_op_images_and_absence(connect_checker: Any, change: dict[str, Any]) -> None:
    names, types, op, rows = change["names"], change["types"], change["op"], change["rows"]
    doc: dict[str, Any] = {
        "database": "db",
        "table": "t",
        "type": op,
        "isDdl": False,
        "mysqlType": types,
        "pkNames": [],
        "es": 1,
        "ts": 2,
    }
    datas = [d for d, _ in rows]
    olds = [o for _, o in rows]
    if op == "DELETE" and change["legacy"]:
        doc["data"], doc["old"] = None, datas  # DTS before 2022-03-20
    else:
        doc["data"] = datas
        doc["old"] = olds if op == "UPDATE" else None
    events = CanalJsonDecoder().decode(Message(orjson.dumps(doc)))
    assert len(events) == len(rows)
    assert_connect_accepts(connect_checker, emit(events, EmitOptions()))

    def image(row: dict[str, Any]) -> dict[str, Any]:
        return {n: expected_value(types[n], row[n]) if n in row else UNAVAILABLE for n in names}

    want_op = {
        "INSERT": Operation.CREATE,
        "UPDATE": Operation.UPDATE,
        "DELETE": Operation.DELETE,
        "INIT": Operation.READ,
    }[op]
    for event, (data, old) in zip(events, rows, strict=True):
        assert isinstance(event, ChangeEvent)
        assert event.op is want_op
        if op == "DELETE":
            assert event.before == image(data) and event.after is None
        elif op == "UPDATE":
            assert event.after == image(data)
            assert event.before == image({**data, **old})
        else:
            assert event.before is None and event.after == image(data)
        for img in (event.before, event.after):
            if img is not None:
                assert set(img) == set(names)


def test_a_table_schema_is_reused_only_for_the_same_types_in_the_same_order() -> None:
    """The decoder keeps a table's schema with the message shape it came from; a message whose
    type maps hold the same items in another order, or a ``sqlType`` code that is a boolean
    (``True == 1``), is not taken for a known shape; the same shape gets the very same schema."""
    decoder = create_decoder("canal-json", {})
    row = {"data": [{"id": "1", "v": "a"}], "type": "INSERT"}

    def schema(**fields: Any) -> Any:
        (event,) = decoder.decode(msg(**row, **fields))
        return event.table

    first = schema()
    assert schema() is first
    swapped = schema(mysqlType={"v": "varchar(50)", "id": "bigint(20)"}, sqlType={"v": 12, "id": -5})
    assert [c.name for c in swapped.columns] == ["v", "id"]
    assert [c.name for c in first.columns] == ["id", "v"]
    by_code = schema(mysqlType={}, sqlType={"id": 1, "v": 12})
    assert schema(mysqlType={}, sqlType={"id": 1, "v": 12}) is by_code
    with pytest.raises(DecodeError, match=r"sqlType\.id"):  # not the shape of code 1
        schema(mysqlType={}, sqlType={"id": True, "v": 12})
    assert schema() is first  # the first shape is still known
    assert schema(mysqlType={"id": "bigint(20)", "v": "varchar(50)", "w": "int"}) is not first
