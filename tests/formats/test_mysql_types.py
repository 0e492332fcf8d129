"""The one MySQL type → Connect column mapping (transforms.decoders.mysql_types), and that every
MySQL-typed decoder (canal-json mysqlType, maxwell-json def, dts-avro type numbers) follows it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.dts_avro import _mysql_column as dts_mysql_column
from transforms.decoders.mysql_types import (
    BigintUnsignedHandlingMode,
    MySqlType,
    column_for_mysql_type,
    mysql_column,
    parse_mysql_type,
    wrap_unsigned_bigint,
)
from transforms.envelope import ChangeEvent, SchemaChangeEvent

PRECISE = BigintUnsignedHandlingMode.PRECISE
LONG = BigintUnsignedHandlingMode.LONG
DECIMAL_20_0 = (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "20"), ("scale", "0")))

# MySQL type as spelled -> (Connect type, logical name, schema parameters), precise mode.
# Debezium's MySQL connector (MySqlValueConverters, default modes), except REAL (MySQL's REAL is a
# DOUBLE; a double column holds every float) and POINT (a Geometry, like the other spatial types).
MAPPING: list[tuple[str, tuple[ConnectType, str | None, tuple[tuple[str, str], ...]]]] = [
    ("bool", (ConnectType.BOOLEAN, None, ())),
    ("BOOLEAN", (ConnectType.BOOLEAN, None, ())),
    ("bit", (ConnectType.BOOLEAN, None, ())),
    ("bit(1)", (ConnectType.BOOLEAN, None, ())),
    ("bit(12)", (ConnectType.BYTES, Logical.BITS, (("length", "12"),))),
    ("bit(64)", (ConnectType.BYTES, Logical.BITS, (("length", "64"),))),
    ("tinyint(1)", (ConnectType.INT16, None, ())),
    ("tinyint(4)", (ConnectType.INT16, None, ())),
    ("tinyint(3) unsigned", (ConnectType.INT16, None, ())),
    ("TINYINT UNSIGNED ZEROFILL", (ConnectType.INT16, None, ())),
    ("smallint(6)", (ConnectType.INT16, None, ())),
    ("smallint(5) unsigned", (ConnectType.INT32, None, ())),
    ("SMALLINT ZEROFILL", (ConnectType.INT32, None, ())),
    ("int2 unsigned", (ConnectType.INT32, None, ())),
    ("mediumint(9)", (ConnectType.INT32, None, ())),
    ("mediumint(8) unsigned", (ConnectType.INT32, None, ())),
    ("middleint", (ConnectType.INT32, None, ())),
    ("int(11)", (ConnectType.INT32, None, ())),
    ("INTEGER", (ConnectType.INT32, None, ())),
    ("int(10) unsigned", (ConnectType.INT64, None, ())),
    ("INT(8) unsigned zerofill", (ConnectType.INT64, None, ())),
    ("bigint(20)", (ConnectType.INT64, None, ())),
    ("int8", (ConnectType.INT64, None, ())),
    ("bigint(20) unsigned", DECIMAL_20_0),
    ("BIGINT UNSIGNED ZEROFILL", DECIMAL_20_0),
    ("serial", DECIMAL_20_0),
    ("float", (ConnectType.FLOAT32, None, ())),
    ("float unsigned", (ConnectType.FLOAT32, None, ())),
    ("float(23)", (ConnectType.FLOAT32, None, ())),
    ("float(24)", (ConnectType.FLOAT64, None, ())),
    ("float(10,2)", (ConnectType.FLOAT64, None, ())),
    ("double", (ConnectType.FLOAT64, None, ())),
    ("double precision", (ConnectType.FLOAT64, None, ())),
    ("DOUBLE PRECISION(10,7) unsigned zerofill", (ConnectType.FLOAT64, None, ())),
    ("real", (ConnectType.FLOAT64, None, ())),
    ("REAL(10,7) unsigned zerofill", (ConnectType.FLOAT64, None, ())),
    (
        "decimal(10,2)",
        (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "10"), ("scale", "2"))),
    ),
    (
        "DECIMAL(8, 0)",
        (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "8"), ("scale", "0"))),
    ),
    (
        "numeric(65,30)",
        (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "65"), ("scale", "30"))),
    ),
    (
        "fixed(40,3) unsigned",
        (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "40"), ("scale", "3"))),
    ),
    ("dec(12)", (ConnectType.BYTES, Logical.DECIMAL, (("connect.decimal.precision", "12"), ("scale", "0")))),
    ("decimal", (ConnectType.STRUCT, Logical.VARIABLE_SCALE_DECIMAL, ())),
    ("date", (ConnectType.INT32, Logical.DATE, ())),
    ("datetime", (ConnectType.INT64, Logical.TIMESTAMP, ())),
    ("datetime(3)", (ConnectType.INT64, Logical.TIMESTAMP, ())),
    ("datetime(4)", (ConnectType.INT64, Logical.MICRO_TIMESTAMP, ())),
    ("datetime(6)", (ConnectType.INT64, Logical.MICRO_TIMESTAMP, ())),
    ("timestamp", (ConnectType.STRING, Logical.ZONED_TIMESTAMP, ())),
    ("timestamp(6)", (ConnectType.STRING, Logical.ZONED_TIMESTAMP, ())),
    ("time", (ConnectType.INT64, Logical.MICRO_TIME, ())),
    ("time(3)", (ConnectType.INT64, Logical.MICRO_TIME, ())),
    ("year", (ConnectType.INT32, Logical.YEAR, ())),
    ("year(4)", (ConnectType.INT32, Logical.YEAR, ())),
    ("json", (ConnectType.STRING, Logical.JSON, ())),
    ("enum('a','b','it''s')", (ConnectType.STRING, Logical.ENUM, (("allowed", "a,b,it's"),))),
    ("SET('x','y')", (ConnectType.STRING, Logical.ENUM_SET, (("allowed", "x,y"),))),
    ("char(10)", (ConnectType.STRING, None, ())),
    ("varchar(255)", (ConnectType.STRING, None, ())),
    ("tinytext", (ConnectType.STRING, None, ())),
    ("longtext", (ConnectType.STRING, None, ())),
    ("binary(16)", (ConnectType.BYTES, None, ())),
    ("varbinary(10)", (ConnectType.BYTES, None, ())),
    ("tinyblob", (ConnectType.BYTES, None, ())),
    ("longblob", (ConnectType.BYTES, None, ())),
    ("geometry", (ConnectType.STRUCT, Logical.GEOMETRY, ())),
    ("point", (ConnectType.STRUCT, Logical.GEOMETRY, ())),
    ("multipolygon", (ConnectType.STRUCT, Logical.GEOMETRY, ())),
    ("geomcollection", (ConnectType.STRUCT, Logical.GEOMETRY, ())),
]


def _shape(col: Column | None) -> tuple[ConnectType, str | None, tuple[tuple[str, str], ...]]:
    assert col is not None
    return col.type, col.logical, col.params


@pytest.mark.parametrize("spelled, expected", MAPPING, ids=[m[0] for m in MAPPING])
def test_mapping_table(spelled: str, expected: tuple[Any, ...]) -> None:
    assert _shape(column_for_mysql_type("c", spelled, PRECISE)) == expected


@pytest.mark.parametrize(
    "spelled", ["bigint(20) unsigned", "BIGINT UNSIGNED ZEROFILL", "serial", "int8 unsigned"]
)
def test_bigint_unsigned_is_int64_in_long_mode(spelled: str) -> None:
    assert _shape(column_for_mysql_type("c", spelled, LONG)) == (ConnectType.INT64, None, ())


def test_only_bigint_unsigned_depends_on_the_mode() -> None:
    for spelled, _ in MAPPING:
        if "bigint" in spelled.lower() or spelled == "serial":
            continue
        precise = column_for_mysql_type("c", spelled, PRECISE)
        assert precise == column_for_mysql_type("c", spelled, LONG), spelled


def test_parse_keeps_the_spelling_and_enum_values() -> None:
    parsed = parse_mysql_type(" INT(8) UNSIGNED ZEROFILL ")
    assert parsed is not None
    assert (parsed.base, parsed.args, parsed.unsigned, parsed.text) == (
        "int",
        (8,),
        True,
        "INT(8) UNSIGNED ZEROFILL",
    )
    parsed = parse_mysql_type("enum('a,b','c''d')")
    assert parsed is not None and parsed.labels == ("a,b", "c'd") and parsed.args == ()


def test_geometry_struct_and_source_spelling() -> None:
    col = column_for_mysql_type("g", "POINT")
    assert col is not None and [(f.name, f.type, f.optional) for f in col.fields] == [
        ("wkb", ConnectType.BYTES, False),
        ("srid", ConnectType.INT32, True),
    ]
    assert col.source_type == "POINT"
    assert mysql_column("n", MySqlType("int", unsigned=True), source_type="INT UNSIGNED") == Column(
        "n", ConnectType.INT64, source_type="INT UNSIGNED"
    )


@pytest.mark.parametrize("spelled", ["geography", "hstore", "1nt", ""])
def test_unknown_types_are_none(spelled: str) -> None:
    assert column_for_mysql_type("c", spelled) is None


@pytest.mark.parametrize("spelled", ["bit(65)", "decimal(2000,3)", "decimal(10,1001)"])
def test_sizes_out_of_range_are_errors(spelled: str) -> None:
    with pytest.raises(ValueError):
        column_for_mysql_type("c", spelled)


@pytest.mark.parametrize(
    "raw, wrapped",
    [
        (18446744073709551615, -1),
        ("18446744073709551615", -1),
        (" 9223372036854775808 ", -(2**63)),
        (2**63 - 1, 2**63 - 1),
        (0, 0),
        (-5, -5),
        (2**64, 2**64),  # beyond BIGINT UNSIGNED: left for the range check to reject
        ("abc", "abc"),
        (True, True),
        (1.5, 1.5),
    ],
)
def test_wrap_unsigned_bigint_is_twos_complement(raw: Any, wrapped: Any) -> None:
    assert wrap_unsigned_bigint(raw) == wrapped
    assert type(wrap_unsigned_bigint(raw)) is type(wrapped)


# ----------------------------------------------------------------------- the decoders agree

# (canal mysqlType, maxwell def column): the same MySQL column as each format writes it
SAME_COLUMNS: list[tuple[str, dict[str, Any]]] = [
    ("tinyint(3) unsigned", {"type": "tinyint", "signed": False}),
    ("tinyint(4)", {"type": "tinyint", "signed": True}),
    ("smallint(5) unsigned", {"type": "smallint", "signed": False}),
    ("smallint(6)", {"type": "smallint", "signed": True}),
    ("mediumint(8) unsigned", {"type": "mediumint", "signed": False}),
    ("int(10) unsigned", {"type": "int", "signed": False}),
    ("int(11)", {"type": "int", "signed": True}),
    ("bigint(20)", {"type": "bigint", "signed": True}),
    ("bigint(20) unsigned", {"type": "bigint", "signed": False}),
    ("float", {"type": "float"}),
    ("double", {"type": "double"}),
    ("decimal(40,3)", {"type": "decimal", "precision": 40, "scale": 3}),
    ("date", {"type": "date"}),
    ("datetime", {"type": "datetime", "column-length": 0}),
    ("datetime(6)", {"type": "datetime", "column-length": 6}),
    ("timestamp(3)", {"type": "timestamp", "column-length": 3}),
    ("time", {"type": "time"}),
    ("year", {"type": "year"}),
    ("json", {"type": "json"}),
    ("enum('a','b')", {"type": "enum", "enum-values": ["a", "b"]}),
    ("set('x','y')", {"type": "set", "enum-values": ["x", "y"]}),
    ("bit(1)", {"type": "bit"}),
    ("varchar(10)", {"type": "varchar", "charset": "utf8mb4"}),
    ("blob", {"type": "blob", "charset": "binary"}),
    ("geometry", {"type": "geometry"}),
]


def _canal_column(mysql_type: str, options: dict[str, str]) -> Column:
    doc = {
        "database": "db",
        "table": "t",
        "type": "INSERT",
        "isDdl": False,
        "mysqlType": {"c": mysql_type},
        "pkNames": [],
        "data": [{"c": None}],
    }
    (event,) = create_decoder("canal-json", options).decode(Message(orjson.dumps(doc)))
    assert isinstance(event, ChangeEvent)
    col = event.table.column("c")
    assert col is not None
    return col


def _maxwell_column(definition: dict[str, Any], options: dict[str, str]) -> Column:
    doc = {
        "type": "table-create",
        "database": "db",
        "table": "t",
        "ts": 1,
        "def": {"database": "db", "table": "t", "columns": [{"name": "c", **definition}], "primary-key": []},
    }
    (event,) = create_decoder("maxwell-json", options).decode(Message(orjson.dumps(doc)))
    assert isinstance(event, SchemaChangeEvent) and event.new_table is not None
    col = event.new_table.column("c")
    assert col is not None
    return col


@pytest.mark.parametrize("mode", ["precise", "long"])
@pytest.mark.parametrize("mysql_type, definition", SAME_COLUMNS, ids=[c[0] for c in SAME_COLUMNS])
def test_canal_and_maxwell_agree(mysql_type: str, definition: dict[str, Any], mode: str) -> None:
    options = {"bigint.unsigned.handling.mode": mode}
    canal = _canal_column(mysql_type, options)
    maxwell = _maxwell_column(definition, options)
    assert _shape(canal) == _shape(maxwell)
    assert [(f.name, f.type) for f in canal.fields] == [(f.name, f.type) for f in maxwell.fields]
    assert _shape(canal) == _shape(column_for_mysql_type("c", mysql_type, BigintUnsignedHandlingMode(mode)))


@pytest.mark.parametrize(
    "number, unsigned_type",
    [
        (1, "tinyint unsigned"),
        (2, "smallint unsigned"),
        (9, "mediumint unsigned"),
        (3, "int unsigned"),
        (8, "bigint unsigned"),
        (4, "float"),
        (5, "double"),
        (7, "timestamp"),
        (10, "date"),
        (11, "time"),
        (12, "datetime(6)"),
        (13, "year"),
        (245, "json"),
    ],
)
def test_dts_type_numbers_follow_the_mapping(number: int, unsigned_type: str) -> None:
    """DTS does not say whether an integer is signed: it is typed as the UNSIGNED type (which
    holds both), BIGINT as BIGINT UNSIGNED in long mode (the only mode DTS can honour)."""
    dts = dts_mysql_column("c", number, None, None)
    assert _shape(dts) == _shape(column_for_mysql_type("c", unsigned_type, LONG))


# ------------------------------------------------------------------ bigint.unsigned.handling.mode


def _canal_after(
    mysql: dict[str, str] | None, sql: dict[str, int] | None, row: dict[str, Any], mode: str
) -> Any:
    doc: dict[str, Any] = {"database": "db", "table": "t", "type": "INSERT", "pkNames": [], "data": [row]}
    if mysql is not None:
        doc["mysqlType"] = mysql
    if sql is not None:
        doc["sqlType"] = sql
    (event,) = create_decoder("canal-json", {"bigint.unsigned.handling.mode": mode}).decode(
        Message(orjson.dumps(doc))
    )
    assert isinstance(event, ChangeEvent) and event.after is not None
    return event.after


def test_option_defaults_to_precise_in_both_formats() -> None:
    for fid in ("canal-json", "maxwell-json"):
        options = create_decoder(fid).options
        assert options.bigint_unsigned_handling_mode is PRECISE  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["precise", "long"])
@pytest.mark.parametrize(
    "mysql, sql, raw",
    [
        (None, {"v": -5}, "18446744073709551615"),  # an unsigned BIGINT known by its sqlType only
        (None, {"v": -5}, "9223372036854775808"),
        ({"v": "bigint(20)"}, None, "18446744073709551615"),
    ],
)
def test_canal_never_emits_an_int64_beyond_its_range(
    mysql: dict[str, str] | None, sql: dict[str, int] | None, raw: str, mode: str
) -> None:
    after = _canal_after(mysql, sql, {"v": raw}, mode)
    assert after["v"] == int(raw) - 2**64


def test_canal_bigint_unsigned_per_mode() -> None:
    mysql = {"v": "bigint(20) unsigned"}
    assert (
        str(_canal_after(mysql, None, {"v": "18446744073709551615"}, "precise")["v"])
        == "18446744073709551615"
    )
    assert _canal_after(mysql, None, {"v": "18446744073709551615"}, "long")["v"] == -1
    assert _canal_after(mysql, None, {"v": 18446744073709551615}, "long")["v"] == -1
    assert _canal_after(mysql, None, {"v": "5"}, "long")["v"] == 5


def _maxwell_after(data: dict[str, Any], mode: str, old: dict[str, Any] | None = None) -> ChangeEvent:
    doc: dict[str, Any] = {
        "database": "db",
        "table": "t",
        "type": "update" if old else "insert",
        "ts": 1,
        "data": data,
    }
    if old:
        doc["old"] = old
    (event,) = create_decoder("maxwell-json", {"bigint.unsigned.handling.mode": mode}).decode(
        Message(orjson.dumps(doc))
    )
    assert isinstance(event, ChangeEvent)
    return event


def test_maxwell_rows_per_mode() -> None:
    precise = _maxwell_after({"id": 18446744073709551615, "n": 1}, "precise")
    col = precise.table.column("id")
    assert col is not None and col.logical == Logical.DECIMAL and col.scale == 0
    assert precise.after is not None and str(precise.after["id"]) == "18446744073709551615"

    long = _maxwell_after({"id": 18446744073709551615, "n": 1}, "long", old={"id": 9223372036854775808})
    col = long.table.column("id")
    assert col is not None and col.type is ConnectType.INT64 and col.logical is None
    assert long.after == {"id": -1, "n": 1}
    assert long.before == {"id": -(2**63), "n": 1}


def test_maxwell_def_bigint_unsigned_per_mode() -> None:
    definition = {"type": "bigint", "signed": False}
    assert _shape(_maxwell_column(definition, {})) == DECIMAL_20_0
    long = _maxwell_column(definition, {"bigint.unsigned.handling.mode": "long"})
    assert _shape(long) == (ConnectType.INT64, None, ())
    assert long.source_type == "bigint unsigned"


@pytest.mark.parametrize(
    "definition",
    [
        {"type": "bit", "column-length": 65},
        {"type": "datetime", "column-length": -1},
        {"type": "decimal", "precision": 2000, "scale": 2},
        {"type": "enum", "enum-values": "a,b"},
    ],
)
def test_maxwell_bad_def_columns_are_decode_errors(definition: dict[str, Any]) -> None:
    from transforms.errors import DecodeError

    with pytest.raises(DecodeError):
        _maxwell_column(definition, {})


def _maxwell_ddl(type_: str, columns: list[dict[str, Any]] | None, table: str = "t") -> bytes:
    doc: dict[str, Any] = {"type": type_, "database": "db", "table": table, "ts": 1}
    if columns is not None:
        doc["def"] = {"database": "db", "table": table, "columns": columns, "primary-key": ["id"]}
    return orjson.dumps(doc)


def _maxwell_insert(data: dict[str, Any], table: str = "t") -> bytes:
    return orjson.dumps({"database": "db", "table": table, "type": "insert", "ts": 1, "data": data})


def test_maxwell_rows_type_a_def_bigint_unsigned_column_as_decimal_from_the_start() -> None:
    """Debezium's precise mode types BIGINT UNSIGNED as Decimal(20,0) whatever the value; a Maxwell
    row carries no types, but the table's def (from a DDL message) says which columns are."""
    from transforms.metadata import InMemoryMetadataStore

    store = InMemoryMetadataStore()
    decoder = create_decoder("maxwell-json", metadata=store)
    columns = [
        {"type": "bigint", "name": "id", "signed": False},
        {"type": "bigint", "name": "n", "signed": True},
    ]
    decoder.decode(Message(_maxwell_ddl("table-create", columns)))
    for value in (1, 18446744073709551615):
        (event,) = decoder.decode(Message(_maxwell_insert({"id": value, "n": 5})))
        assert isinstance(event, ChangeEvent) and event.after is not None
        assert _shape(event.table.column("id")) == DECIMAL_20_0
        assert _shape(event.table.column("n")) == (ConnectType.INT64, None, ())
        assert event.after["id"] == value and str(event.after["id"]) == str(value)

    # a replica sharing the metadata store knows it too; another table does not
    (event,) = create_decoder("maxwell-json", metadata=store).decode(
        Message(_maxwell_insert({"id": 1, "n": 5}))
    )
    assert isinstance(event, ChangeEvent) and _shape(event.table.column("id")) == DECIMAL_20_0
    (event,) = decoder.decode(Message(_maxwell_insert({"id": 1}, table="other")))
    assert isinstance(event, ChangeEvent) and _shape(event.table.column("id")) == (
        ConnectType.INT64,
        None,
        (),
    )

    # in long mode the column stays int64 (values above 2^63-1 wrap); its own store: the precise
    # decoders' inferred types (kept in theirs) never narrow
    long = create_decoder("maxwell-json", {"bigint.unsigned.handling.mode": "long"})
    long.decode(Message(_maxwell_ddl("table-create", columns)))
    (event,) = long.decode(Message(_maxwell_insert({"id": 18446744073709551615, "n": 5})))
    assert isinstance(event, ChangeEvent) and event.after is not None and event.after["id"] == -1
    assert _shape(event.table.column("id")) == (ConnectType.INT64, None, ())

    # an alter that makes it signed: the inferred type (kept in the store, for every decoder
    # sharing it) remembers the 2^64-1 seen in the column, as it would across a restart
    decoder.decode(Message(_maxwell_ddl("table-alter", [{"type": "bigint", "name": "id", "signed": True}])))
    for replica in (decoder, create_decoder("maxwell-json", metadata=store)):
        (event,) = replica.decode(Message(_maxwell_insert({"id": 1})))
        assert isinstance(event, ChangeEvent) and _shape(event.table.column("id")) == (
            ConnectType.BYTES,
            Logical.DECIMAL,
            (("scale", "0"),),
        )
    # a drop, or a create, forgets it
    decoder.decode(Message(_maxwell_ddl("table-create", columns)))
    decoder.decode(Message(_maxwell_ddl("table-drop", None)))
    (event,) = create_decoder("maxwell-json", metadata=store).decode(Message(_maxwell_insert({"id": 1})))
    assert isinstance(event, ChangeEvent) and _shape(event.table.column("id")) == (
        ConnectType.INT64,
        None,
        (),
    )


def test_maxwell_def_bigint_unsigned_column_with_a_non_integer_value_is_inferred() -> None:
    from transforms.metadata import InMemoryMetadataStore

    decoder = create_decoder("maxwell-json", metadata=InMemoryMetadataStore())
    decoder.decode(Message(_maxwell_ddl("table-create", [{"type": "bigint", "name": "id", "signed": False}])))
    (event,) = decoder.decode(Message(_maxwell_insert({"id": "x"})))
    assert isinstance(event, ChangeEvent) and _shape(event.table.column("id")) == (
        ConnectType.STRING,
        None,
        (),
    )
