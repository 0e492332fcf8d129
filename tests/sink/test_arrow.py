"""sink.arrow without Spark: Iceberg schema JSON to Arrow with every field id, change rows to
Arrow values as the Spark path stores them (or Unrepresentable), Parquet files and their footers.

The Spark side (the files read back through Iceberg, equal to what the MERGE path writes) is in
test_arrow_iceberg.py.
"""

from __future__ import annotations

import datetime as dt
import doctest
import math
import pickle
import struct
import timeit
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from sink import arrow
from sink.arrow import FIELD_ID, Unrepresentable, WrittenFile, arrow_schema, to_arrow_table, write_parquet

# SchemaParser.toJson of a table the sink could create (captured from Iceberg 1.9.2): every
# column type of tests/sink/test_iceberg_frame.py COLUMNS, a required key and a required nested
# field, and a map of lists of structs of maps
SCHEMA_JSON = (
    '{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","required":true,"type":"long"},'
    '{"id":2,"name":"f","required":false,"type":"float"},{"id":3,"name":"d","required":false,"type":"double"},'
    '{"id":4,"name":"i","required":false,"type":"int"},{"id":5,"name":"bo","required":false,"type":"boolean"},'
    '{"id":6,"name":"s","required":false,"type":"string"},{"id":7,"name":"bin","required":false,"type":"binary"},'
    '{"id":8,"name":"dec","required":false,"type":"decimal(38, 10)"},'
    '{"id":9,"name":"dec2","required":false,"type":"decimal(5, 2)"},'
    '{"id":10,"name":"day","required":false,"type":"date"},{"id":11,"name":"ntz","required":false,"type":"timestamp"},'
    '{"id":12,"name":"tz","required":false,"type":"timestamptz"},'
    '{"id":13,"name":"st","required":false,"type":{"type":"struct","fields":['
    '{"id":17,"name":"x","required":true,"type":"int"},{"id":18,"name":"y","required":false,"type":"binary"},'
    '{"id":19,"name":"z","required":false,"type":"decimal(10, 2)"}]}},'
    '{"id":14,"name":"arr","required":false,"type":{"type":"list","element-id":20,"element":"string",'
    '"element-required":false}},'
    '{"id":15,"name":"m","required":false,"type":{"type":"map","key-id":21,"key":"string","value-id":22,'
    '"value":"long","value-required":false}},'
    '{"id":16,"name":"deep","required":false,"type":{"type":"map","key-id":23,"key":"string","value-id":24,'
    '"value":{"type":"list","element-id":25,"element":{"type":"struct","fields":['
    '{"id":26,"name":"a","required":false,"type":"float"},{"id":27,"name":"b","required":false,"type":'
    '{"type":"map","key-id":28,"key":"int","value-id":29,"value":"timestamptz","value-required":false}}]},'
    '"element-required":false},"value-required":false}}]}'
)

UTC8 = dt.timezone(dt.timedelta(hours=8))


def _schema(*fields: tuple[str, Any, bool]) -> pa.Schema:
    """An Arrow schema from (name, Iceberg type JSON, required), ids 1, 2, ... (nested ids from 100)."""
    doc = {"type": "struct", "fields": [
        {"id": i, "name": name, "required": required, "type": t} for i, (name, t, required) in enumerate(fields, 1)
    ]}
    return arrow_schema(orjson.dumps(doc).decode())


def _ids(field: pa.Field, path: str = "") -> dict[str, int]:
    """Every field's id by its dotted path, nested fields included."""
    path = f"{path}.{field.name}" if path else field.name
    assert field.metadata is not None and FIELD_ID in field.metadata, f"{path} has no field id"
    ids = {path: int(field.metadata[FIELD_ID])}
    t = field.type
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_map(t):
        children = [t.key_field, t.item_field]
    elif pa.types.is_list(t):
        children = [t.value_field]
    else:
        children = []
    for child in children:
        ids.update(_ids(child, path))
    return ids


def _float32(x: float) -> float:
    rounded: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return rounded


def _micros(value: dt.datetime) -> int:
    """The UTC instant of an aware datetime (a naive one: as UTC) in microseconds."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# -- schema ------------------------------------------------------------------------------------


def test_schema_types_and_every_field_id() -> None:
    schema = arrow_schema(SCHEMA_JSON)
    assert schema.names == ["id", "f", "d", "i", "bo", "s", "bin", "dec", "dec2", "day", "ntz", "tz", "st", "arr", "m", "deep"]
    types = {f.name: f.type for f in schema}
    assert types["id"] == pa.int64() and not schema.field("id").nullable
    assert (types["f"], types["d"], types["i"], types["bo"]) == (pa.float32(), pa.float64(), pa.int32(), pa.bool_())
    assert (types["s"], types["bin"]) == (pa.string(), pa.binary())
    assert (types["dec"], types["dec2"]) == (pa.decimal128(38, 10), pa.decimal128(5, 2))
    assert (types["day"], types["ntz"], types["tz"]) == (pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC"))
    assert all(f.nullable for f in schema if f.name != "id")
    st = types["st"]
    assert not st.field("x").nullable and st.field("y").nullable and st.field("z").type == pa.decimal128(10, 2)
    assert types["arr"].value_field.name == "element" and types["arr"].value_field.nullable
    assert (types["m"].key_field.name, types["m"].item_field.name) == ("key", "value")
    assert not types["m"].key_field.nullable and types["m"].item_field.nullable
    deep = types["deep"].item_type.value_type
    assert deep.field("a").type == pa.float32() and deep.field("b").type.item_type == pa.timestamp("us", tz="UTC")

    ids: dict[str, int] = {}
    for field in schema:
        ids.update(_ids(field))
    assert ids == {
        "id": 1, "f": 2, "d": 3, "i": 4, "bo": 5, "s": 6, "bin": 7, "dec": 8, "dec2": 9, "day": 10, "ntz": 11, "tz": 12,
        "st": 13, "st.x": 17, "st.y": 18, "st.z": 19, "arr": 14, "arr.element": 20, "m": 15, "m.key": 21, "m.value": 22,
        "deep": 16, "deep.key": 23, "deep.value": 24, "deep.value.element": 25, "deep.value.element.a": 26,
        "deep.value.element.b": 27, "deep.value.element.b.key": 28, "deep.value.element.b.value": 29,
    }


def test_schema_types_the_sink_does_not_make() -> None:
    schema = _schema(("t", "time", False), ("u", "uuid", True), ("fx", "fixed[7]", False), ("dd", "decimal(9,0)", False),
                     ("req", {"type": "list", "element-id": 100, "element": "int", "element-required": True}, False),
                     ("mr", {"type": "map", "key-id": 101, "key": "string", "value-id": 102, "value": "date",
                             "value-required": True}, False))
    assert schema.field("t").type == pa.time64("us")
    assert schema.field("u").type == pa.binary(16) and not schema.field("u").nullable
    assert schema.field("fx").type == pa.binary(7)
    assert schema.field("dd").type == pa.decimal128(9, 0)
    assert not schema.field("req").type.value_field.nullable
    assert not schema.field("mr").type.item_field.nullable


@pytest.mark.parametrize(
    ("type_json", "column"),
    [
        ("timestamp_ns", "c"),
        ("variant", "c"),
        ("unknown", "c"),
        ("decimal(5)", "c"),
        ({"type": "list", "element-id": 100, "element": "timestamptz_ns", "element-required": False}, "c.element"),
        ({"type": "struct", "fields": [{"id": 100, "name": "g", "required": False, "type": "geometry"}]}, "c.g"),
        ({"type": "map", "key-id": 100, "key": "string", "value-id": 101, "value": "variant", "value-required": False},
         "c.value"),
    ],
)
def test_schema_type_without_fast_path(type_json: Any, column: str) -> None:
    with pytest.raises(Unrepresentable) as info:
        _schema(("c", type_json, False))
    assert info.value.column == column
    assert "has no Parquet fast path" in str(info.value)


def test_select_and_field_ids_keep_the_ids() -> None:
    schema = arrow_schema(SCHEMA_JSON)
    keys = arrow.select(schema, ["s", "id"])
    assert keys.names == ["s", "id"]
    assert keys.field("id") == schema.field("id") and keys.field("id").metadata == {FIELD_ID: b"1"}
    assert arrow.field_ids(schema, ["s", "id"]) == [6, 1]
    with pytest.raises(KeyError):
        arrow.select(schema, ["nope"])


# -- values ------------------------------------------------------------------------------------


def test_values_as_spark_stores_them() -> None:
    schema = arrow_schema(SCHEMA_JSON)
    nan = float("nan")
    rows: list[dict[str, Any]] = [
        {
            "id": 2**63 - 1, "f": 0.1, "d": -0.0, "i": 2**31 - 1, "bo": True, "s": 'héllo "q" \n\x00 ✓ 𝄞', "bin": b"",
            "dec": Decimal("1234567890123456789012345678.0123456789"), "dec2": Decimal("-999.99"),
            "day": dt.date(1, 1, 1), "ntz": dt.datetime(1, 1, 1, 0, 0, 0, 1),
            "tz": dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=UTC8),
            "st": {"x": 1, "y": b"\x00\xff", "z": Decimal("1.50"), "ignored": 1}, "arr": ["a", None, ""],
            "m": {"k": 1, "": None},
            "deep": {"k": [{"a": 2, "b": {1: dt.datetime(1, 1, 1, 9, tzinfo=UTC8), 2: None}}, None], "e": [], "n": None},
        },
        {
            "id": -(2**63), "f": 1e-45, "d": nan, "i": -(2**31), "bo": False, "s": "", "dec": Decimal("0E-10"),
            "dec2": Decimal("1E+2"), "day": dt.date(9999, 12, 31), "ntz": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "tz": dt.datetime(2024, 1, 1, 1, 2, 3), "st": None, "arr": [], "m": {},
        },
        {"id": 0, "f": 1e300, "d": 2**70, "st": {"x": -5}},
        {"id": 1, "f": 16777217, "d": float("-inf")},
        {"id": 2, "f": -1e-46, "d": 3, "i": 0, "tz": dt.datetime(1900, 1, 1, tzinfo=dt.timezone(-dt.timedelta(hours=5, minutes=30)))},
        {"id": 3, "f": nan, "d": 5e-324, "tz": dt.datetime(1, 1, 1, tzinfo=UTC8)},
    ]
    table = to_arrow_table(schema, rows)
    assert table.schema == schema and table.schema.equals(schema, check_metadata=True)
    col = {name: table.column(name).to_pylist() for name in table.column_names if name != "tz"}

    f = col["f"]
    assert f[0] == _float32(0.1) != 0.1
    assert f[1] == _float32(1e-45) == 1.401298464324817e-45  # a float32 denormal
    assert f[2] == math.inf  # beyond float32: Java's (float) cast gives Infinity
    assert f[3] == 16777216.0  # an int: its double, rounded to float32
    assert f[4] == 0.0 and math.copysign(1, f[4]) == -1  # rounds to -0.0
    assert math.isnan(f[5])
    d = col["d"]
    assert d[0] == 0.0 and math.copysign(1, d[0]) == -1
    assert math.isnan(d[1]) and d[2] == float(2**70) and d[3] == -math.inf and d[4] == 3.0 and type(d[4]) is float
    assert d[5] == 5e-324
    assert col["i"] == [2**31 - 1, -(2**31), None, None, 0, None]
    assert col["bo"] == [True, False, None, None, None, None]
    assert col["s"][:2] == ['héllo "q" \n\x00 ✓ 𝄞', ""] and col["bin"][:2] == [b"", None]
    assert col["dec"][:2] == [Decimal("1234567890123456789012345678.0123456789"), Decimal("0E-10")]
    assert col["dec2"][:2] == [Decimal("-999.99"), Decimal("100.00")]
    assert col["day"][:2] == [dt.date(1, 1, 1), dt.date(9999, 12, 31)]
    assert col["ntz"][:2] == [dt.datetime(1, 1, 1, 0, 0, 0, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    tz = table.column("tz").cast(pa.int64()).to_pylist()
    assert tz[0] == _micros(rows[0]["tz"])  # the UTC instant
    assert tz[1] == _micros(dt.datetime(2024, 1, 1, 1, 2, 3, tzinfo=dt.UTC))  # naive: UTC, as the session zone reads it
    assert tz[4] == _micros(rows[4]["tz"])
    assert tz[5] == _micros(dt.datetime(1, 1, 1, tzinfo=dt.UTC)) - 8 * 3_600_000_000  # before year 1 in UTC
    assert col["st"][:3] == [{"x": 1, "y": b"\x00\xff", "z": Decimal("1.50")}, None, {"x": -5, "y": None, "z": None}]
    assert col["arr"][:3] == [["a", None, ""], [], None]
    assert col["m"][:3] == [[("k", 1), ("", None)], [], None]
    deep = col["deep"][0]
    assert deep[0][0] == "k" and deep[0][1][1] is None and deep[1] == ("e", []) and deep[2] == ("n", None)
    inner = deep[0][1][0]
    assert inner["a"] == 2.0  # an int in a nested float field: the number
    assert inner["b"][0] == (1, dt.datetime(1, 1, 1, 1, tzinfo=dt.UTC)) and inner["b"][1] == (2, None)


def test_every_nan_is_the_canonical_nan() -> None:
    """Spark's row writer stores any NaN as Java's Float.NaN / Double.NaN: so does the fast path
    (a NaN computed in Python, such as inf - inf, has the sign bit set; others carry a payload)."""
    negative = -float("nan")
    payload = struct.unpack(">d", bytes.fromhex("7ff8000000000123"))[0]
    schema = _schema(("f", "float", False), ("d", "double", False),
                     ("nest", {"type": "list", "element-id": 100, "element": "float", "element-required": False}, False))
    table = to_arrow_table(schema, [{"f": negative, "d": negative, "nest": [negative, payload, 1.0]},
                                    {"f": payload, "d": payload}, {"f": 1.0, "d": None}])
    bits32 = [struct.pack(">f", v).hex() if v is not None else None for v in table.column("f").to_pylist()]
    bits64 = [struct.pack(">d", v).hex() if v is not None else None for v in table.column("d").to_pylist()]
    assert bits32 == ["7fc00000", "7fc00000", "3f800000"]
    assert bits64 == ["7ff8000000000000", "7ff8000000000000", None]
    nested = table.column("nest").combine_chunks().flatten().cast(pa.float32())
    raw = nested.buffers()[1].to_pybytes()[: 3 * 4]
    assert raw == bytes.fromhex("0000c07f0000c07f0000803f")  # little-endian float32: NaN, NaN, 1.0


def test_columns_absent_from_every_row_are_null_and_extra_keys_are_ignored() -> None:
    schema = _schema(("k", "long", True), ("v", "string", False), ("st", {"type": "struct", "fields": [
        {"id": 100, "name": "a", "required": False, "type": "int"}]}, False))
    table = to_arrow_table(schema, [{"k": 1, "not_a_column": object()}, {"k": 2, "v": "x"}])
    assert table.to_pylist() == [{"k": 1, "v": None, "st": None}, {"k": 2, "v": "x", "st": None}]
    empty = to_arrow_table(schema, [])
    assert empty.num_rows == 0 and empty.schema == schema


_NESTED_FLOAT = {"type": "struct", "fields": [{"id": 100, "name": "a", "required": False, "type": "float"}]}
_REQUIRED_MEMBER = {"type": "struct", "fields": [{"id": 100, "name": "a", "required": True, "type": "int"}]}
_LIST_REQUIRED = {"type": "list", "element-id": 100, "element": "long", "element-required": True}
_MAP = {"type": "map", "key-id": 100, "key": "string", "value-id": 101, "value": "timestamp", "value-required": False}


@pytest.mark.parametrize(
    ("type_json", "value", "reason"),
    [
        ("int", 2**31, "too large"),
        ("int", -(2**31) - 1, ""),
        ("long", 2**63, ""),
        ("long", 2**70, ""),  # beyond 64 bits
        ("long", True, "expected int64, found bool True"),  # pyarrow would store 1
        ("long", 2.0, "found float 2.0"),  # pyarrow would store 2
        ("long", "1", "found str '1'"),
        ("double", 2**1100, "beyond the double range"),
        ("float", True, "found bool"),  # pyarrow would store 1.0
        ("double", "NaN", "found str"),  # Spark's JSON reader would take it; the MERGE path does
        ("double", Decimal("1.5"), "found Decimal"),
        ("boolean", 1, "expected bool, found int 1"),
        ("string", b"x", "found bytes"),  # pyarrow would decode it
        ("string", "\ud800", "UnicodeEncodeError"),  # a lone surrogate has no UTF-8
        ("binary", "x", "found str"),  # pyarrow would encode it; Spark's JSON path reads base64
        ("fixed[2]", b"abc", "length"),
        ("decimal(5, 2)", Decimal("1000.00"), "precision"),  # more digits than the column
        ("decimal(5, 2)", Decimal("1.555"), "data loss"),  # more scale than the column
        ("decimal(5, 2)", Decimal("NaN"), ""),
        ("decimal(5, 2)", Decimal("Infinity"), ""),
        ("decimal(5, 2)", 1.5, "found float"),
        ("decimal(38, 0)", Decimal("9" * 39), "precision"),
        ("date", dt.datetime(2020, 1, 1, 5), "expected date32[day], found datetime"),  # pyarrow would drop the time
        ("date", "2020-01-01", "found str"),
        ("timestamp", dt.datetime(2020, 1, 1, tzinfo=UTC8), "expected a naive value"),  # pyarrow would shift it
        ("timestamp", dt.date(2020, 1, 1), "found date"),
        ("timestamptz", dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=1, microseconds=5))),
         "fraction of a second"),
        ("timestamptz", 1_700_000_000_000, "found int"),
        ("time", dt.time(1, 2, tzinfo=dt.UTC), "expected a time without zone"),
        (_NESTED_FLOAT, {"a": True}, "expected float, found bool"),
        (_NESTED_FLOAT, {"a": 2**1100}, "beyond the double range"),
        (_NESTED_FLOAT, ["a"], "found list"),
        (_REQUIRED_MEMBER, {}, "expected int32, found NULL in a required field"),
        (_REQUIRED_MEMBER, {"a": 2**40}, ""),
        (_LIST_REQUIRED, [1, None], "found NULL"),
        (_LIST_REQUIRED, {"a": 1}, "found dict"),
        (_LIST_REQUIRED, "ab", "found str"),
        (_MAP, {None: None}, "expected string, found NULL"),
        (_MAP, {1: None}, "found int"),
        (_MAP, {"k": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)}, "expected a naive value"),
        (_MAP, [("k", None)], "found list"),
    ],
)
def test_unrepresentable(type_json: Any, value: Any, reason: str) -> None:
    schema = _schema(("k", "long", True), ("c", type_json, False))
    rows = [{"k": 1, "c": None}, {"k": 2, "c": value}]
    with pytest.raises(Unrepresentable) as info:
        to_arrow_table(schema, rows)
    assert info.value.column == "c"
    assert reason in info.value.reason
    assert str(info.value).startswith("column c: ")
    again = pickle.loads(pickle.dumps(info.value))  # raised in an executor, read on the driver
    assert (again.column, again.reason, str(again)) == (info.value.column, info.value.reason, str(info.value))


def test_null_in_a_required_column() -> None:
    schema = _schema(("k", "long", True), ("v", "string", False))
    for rows in ([{"k": None}], [{"v": "x"}], [{"k": 1}, {}]):
        with pytest.raises(Unrepresentable, match="column k: NULL in a required column"):
            to_arrow_table(schema, rows)


def test_hot_path_speed() -> None:
    """20,000 rows x 6 columns of the usual kinds: a column is checked by its set of types, not
    value by value (printed, and bounded loosely against a per-value regression)."""
    schema = _schema(("id", "long", True), ("name", "string", False), ("amount", "decimal(12, 2)", False),
                     ("ratio", "double", False), ("at", "timestamptz", False), ("__cdc_seq", "string", False))
    rows = [
        {"id": i, "name": f"name {i}", "amount": Decimal(i) / 100, "ratio": i / 7 if i % 2 else i,
         "at": dt.datetime(2024, 1, 1, tzinfo=UTC8) + dt.timedelta(seconds=i), "__cdc_seq": f"s{i:012d}"}
        for i in range(20_000)
    ]
    runs = 5
    seconds = min(timeit.repeat(lambda: to_arrow_table(schema, rows), number=1, repeat=runs))
    print(f"to_arrow_table: 20,000 rows x 6 columns in {seconds * 1000:.1f} ms (best of {runs})")
    assert seconds < 0.5


# -- files -------------------------------------------------------------------------------------


def _table() -> pa.Table:
    schema = arrow_schema(SCHEMA_JSON)
    return to_arrow_table(schema, [
        {"id": i, "f": i / 3, "s": f"row {i}", "dec": Decimal(i), "dec2": Decimal(i) / 100, "st": {"x": i, "z": Decimal(i)},
         "arr": [str(i)], "m": {"k": i}, "deep": {"k": [{"a": 1.5, "b": {i: dt.datetime(2020, 1, 1, tzinfo=dt.UTC)}}]}}
        for i in range(100)
    ])


def test_write_parquet_local(tmp_path: Path) -> None:
    table = _table()
    path = str(tmp_path / "db" / "t" / "data" / "f.parquet")  # parents created
    written = write_parquet(table, path)
    assert written == WrittenFile(path, Path(path).stat().st_size, 100, written.footer)
    assert pq.read_table(path).equals(table)

    raw = Path(path).read_bytes()
    assert raw[-8 - len(written.footer) : -8] == written.footer
    assert int.from_bytes(raw[-8:-4], "little") == len(written.footer) and raw[-4:] == b"PAR1"
    # the footer alone parses back to the file's metadata
    only_footer = pa.BufferReader(b"PAR1" + written.footer + len(written.footer).to_bytes(4, "little") + b"PAR1")
    meta = pq.read_metadata(only_footer)
    assert meta.equals(pq.read_metadata(path)) and meta.num_rows == 100

    file = pq.ParquetFile(path)
    assert file.metadata.metadata is None or b"ARROW:schema" not in file.metadata.metadata  # small footer
    ids: dict[str, int] = {}
    for field in file.schema_arrow:
        ids.update(_ids(field))  # every Parquet field, nested ones too, carries its id
    expected: dict[str, int] = {}
    for field in table.schema:
        expected.update(_ids(field))
    assert ids == expected
    physical = {file.schema.column(i).path: file.schema.column(i).physical_type for i in range(len(file.schema))}
    # decimals as Iceberg's own writer stores them
    assert (physical["dec2"], physical["st.z"], physical["dec"]) == ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY")
    logical = {file.schema.column(i).path: str(file.schema.column(i).logical_type) for i in range(len(file.schema))}
    assert "isAdjustedToUTC=false" in logical["ntz"] and "isAdjustedToUTC=true" in logical["tz"]
    assert "arr.list.element" in physical and "m.key_value.key" in physical  # the spec's 3-level lists and maps
    assert file.metadata.row_group(0).column(0).compression == "ZSTD"
    assert file.metadata.row_group(0).column(0).statistics.has_min_max


def test_write_parquet_file_uris_and_compression(tmp_path: Path) -> None:
    table = _table()
    for uri in (f"file:{tmp_path}/a/x.parquet", f"file://{tmp_path}/b/x.parquet"):
        written = write_parquet(table, uri, compression="snappy")
        assert written.path == uri  # as the table location spells it
        local = uri.removeprefix("file:").removeprefix("//")
        assert written.size == Path(local).stat().st_size and written.record_count == 100
        assert pq.ParquetFile(local).metadata.row_group(0).column(0).compression == "SNAPPY"
    with pytest.raises(ValueError, match="a file: URI with a host"):
        write_parquet(table, "file://host/x.parquet")


def test_write_parquet_other_file_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table()
    # an explicit file system: the path within it is the URI without its scheme
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    written = write_parquet(table, "s3a://bucket/wh/t/data/x.parquet", filesystem=fs)
    assert written.path == "s3a://bucket/wh/t/data/x.parquet"
    assert pq.read_table(tmp_path / "bucket" / "wh" / "t" / "data" / "x.parquet").equals(table)

    # a URI: pyarrow's file system of its scheme (s3a and s3n are s3), one per bucket
    arrow._uri_filesystem.cache_clear()
    opened: list[str] = []
    real = pafs.FileSystem.from_uri

    def from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
        opened.append(uri)
        return real("mock:///") if uri.startswith("mock") else (pafs.LocalFileSystem(), str(tmp_path / "s3root"))

    # pyarrow's types are immutable: the module's view of pyarrow.fs is replaced instead
    monkeypatch.setattr(arrow, "pafs", SimpleNamespace(FileSystem=SimpleNamespace(from_uri=from_uri),
                                                       LocalFileSystem=pafs.LocalFileSystem))
    write_parquet(table, "s3a://bucket/t/data/1.parquet")
    write_parquet(table, "s3n://bucket/t/data/2.parquet")
    write_parquet(table, "s3://bucket/t/data/3.parquet")
    assert opened == ["s3://bucket/"]
    assert sorted(p.name for p in (tmp_path / "s3root" / "t" / "data").iterdir()) == ["1.parquet", "2.parquet", "3.parquet"]
    written = write_parquet(table, "mock://b/t/data/m.parquet")
    mock, _ = arrow._uri_filesystem("mock", "b")
    with mock.open_input_file("/t/data/m.parquet") as f:
        assert f.size() == written.size
    arrow._uri_filesystem.cache_clear()


def test_written_file_pickles(tmp_path: Path) -> None:
    written = write_parquet(_table(), str(tmp_path / "x.parquet"))
    assert pickle.loads(pickle.dumps(written)) == written  # travels from the executors to the driver
    with pytest.raises(AttributeError):
        written.size = 1  # type: ignore[misc]


def test_new_data_path() -> None:
    a = arrow.new_data_path("file:/wh/db/t", "data")
    b = arrow.new_data_path("file:/wh/db/t/", "eq-deletes")
    assert a.startswith("file:/wh/db/t/data/") and a.endswith("-data.parquet") and len(a.rsplit("/", 1)[1]) == 36 + 13
    assert b.startswith("file:/wh/db/t/data/") and b.endswith("-eq-deletes.parquet")
    assert a != arrow.new_data_path("file:/wh/db/t", "data")
    with pytest.raises(ValueError, match="letters, digits"):
        arrow.new_data_path("/wh", "../x")


def test_docstring_examples() -> None:
    result = doctest.testmod(arrow)
    assert result.attempted >= 6 and result.failed == 0
