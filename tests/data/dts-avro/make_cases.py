"""Writes the dts-avro golden inputs: DTS ``Record``s encoded with fastavro from the real schemas.

Run ``.venv/bin/python tests/data/dts-avro/make_cases.py`` from the repository root after changing
a case, then regenerate the expected files. ``tests/formats/test_dts_avro.py`` checks that the
committed ``*.txt`` files are exactly what this script writes.

The schemas are the package copies of the DTS subscribe example's ``Record.avsc`` (current, with
``bornTimestamp``) and its 2019 version (without). Every case file holds one base64 message per
line.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
from pathlib import Path
from typing import Any

from fastavro import schemaless_writer
from fastavro.schema import parse_schema

HERE = Path(__file__).parent
SCHEMAS = HERE.parents[2] / "transforms" / "decoders" / "schemas"
NS = "com.alibaba.dts.formats.avro."


def load_schema(file: str, extra_operation: str | None = None) -> Any:
    types = json.loads((SCHEMAS / file).read_text())
    if extra_operation:
        types = copy.deepcopy(types)
        for field in types[-1]["fields"]:
            if field["name"] == "operation":
                field["type"]["symbols"].append(extra_operation)
    named: dict[str, Any] = {}
    for item in types[:-1]:
        parse_schema(item, named_schemas=named)
    return parse_schema(types[-1], named_schemas=named)


CURRENT = load_schema("dts_record.avsc")
V2019 = load_schema("dts_record_2019.avsc")
WITH_MERGE = load_schema("dts_record.avsc", extra_operation="MERGE")


# ----------------------------------------------------------------------------- images


def integer(value: int, precision: int = 4) -> tuple[str, Any]:
    return (NS + "Integer", {"precision": precision, "value": str(value)})


def char(text: str | bytes, charset: str = "utf8mb4") -> tuple[str, Any]:
    codec = {"utf8mb4": "utf-8", "AL32UTF8": "utf-8", "latin1": "cp1252"}.get(charset, charset)
    raw = text if isinstance(text, bytes) else text.encode(codec)
    return (NS + "Character", {"charset": charset, "value": raw})


def decimal(value: str, precision: int, scale: int) -> tuple[str, Any]:
    return (NS + "Decimal", {"value": value, "precision": precision, "scale": scale})


def floating(value: float, precision: int = 0, scale: int = 0) -> tuple[str, Any]:
    return (NS + "Float", {"value": value, "precision": precision, "scale": scale})


def timestamp(seconds: int, micros: int = 0) -> tuple[str, Any]:
    return (NS + "Timestamp", {"timestamp": seconds, "millis": micros})


def date_time(
    year: int | None = None,
    month: int | None = None,
    day: int | None = None,
    hour: int | None = None,
    minute: int | None = None,
    second: int | None = None,
    fraction: int | None = None,
) -> tuple[str, Any]:
    body = {"year": year, "month": month, "day": day, "hour": hour, "minute": minute, "second": second}
    return (NS + "DateTime", {**body, "millis": fraction})


def zoned(value: tuple[str, Any], zone: str) -> tuple[str, Any]:
    return (NS + "TimestampWithTimeZone", {"value": value[1], "timezone": zone})


def wkb_geometry(kind: str, raw: bytes) -> tuple[str, Any]:
    return (NS + "BinaryGeometry", {"type": kind, "value": raw})


def wkt_geometry(kind: str, text: str) -> tuple[str, Any]:
    return (NS + "TextGeometry", {"type": kind, "value": text})


def binary(kind: str, raw: bytes) -> tuple[str, Any]:
    return (NS + "BinaryObject", {"type": kind, "value": raw})


def text(kind: str, value: str) -> tuple[str, Any]:
    return (NS + "TextObject", {"type": kind, "value": value})


NULL = (NS + "EmptyObject", "NULL")
NONE = (NS + "EmptyObject", "NONE")


def point_wkb(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def polygon_wkb(points: list[tuple[float, float]]) -> bytes:
    body = struct.pack("<BII", 1, 3, 1) + struct.pack("<I", len(points))
    return body + b"".join(struct.pack("<dd", x, y) for x, y in points)


# ----------------------------------------------------------------------------- records


def record(
    operation: str,
    object_name: str | None,
    fields: list[tuple[str, int]] | None = None,
    before: list[Any] | str | None = None,
    after: list[Any] | str | None = None,
    *,
    record_id: int,
    ts: int,
    position: str,
    safe_position: str = "",
    txid: str = "0",
    source: tuple[str, str] = ("MySQL", "8.0.28"),
    tags: dict[str, str] | None = None,
    process: list[int] | None = None,
    born: int = 0,
) -> dict[str, Any]:
    return {
        "version": 0,
        "id": record_id,
        "sourceTimestamp": ts,
        "sourcePosition": position,
        "safeSourcePosition": safe_position,
        "sourceTxid": txid,
        "source": {"sourceType": source[0], "version": source[1]},
        "operation": operation,
        "objectName": object_name,
        "processTimestamps": process,
        "tags": tags or {},
        "fields": None if fields is None else [{"name": n, "dataTypeNumber": t} for n, t in fields],
        "beforeImages": before,
        "afterImages": after,
        "bornTimestamp": born,
    }


def encode(rec: dict[str, Any], schema: Any = CURRENT) -> bytes:
    out = io.BytesIO()
    if schema is V2019:
        rec = {k: v for k, v in rec.items() if k != "bornTimestamp"}
    schemaless_writer(out, schema, rec)
    return out.getvalue()


PK_ID = {"pk_uk_info": '{"PRIMARY":["id"]}', "thread_id": "163931", "readerThroughoutTime": "1696984408050"}

ALL_TYPES_FIELDS = [
    ("id", 8),
    ("c_tinyint", 1),
    ("c_smallint", 2),
    ("c_mediumint", 9),
    ("c_int", 3),
    ("c_bigint_unsigned", 8),
    ("c_bit", 16),
    ("c_float", 4),
    ("c_double", 5),
    ("c_decimal", 246),
    ("c_varchar", 253),
    ("c_char_latin1", 254),
    ("c_char_gbk", 254),
    ("c_varbinary", 253),
    ("c_text", 252),
    ("c_blob", 252),
    ("c_date", 10),
    ("c_time", 11),
    ("c_datetime", 12),
    ("c_timestamp", 7),
    ("c_year", 13),
    ("c_json", 245),
    ("c_enum", 247),
    ("c_set", 248),
    ("c_geometry", 255),
]

ALL_TYPES_VALUES = [
    integer(1, 8),
    integer(-128, 1),
    integer(65535, 2),
    integer(-8388608, 3),
    integer(4294967295, 4),
    integer(18446744073709551615, 8),
    integer(5, 1),
    floating(1.5, 12, 0),
    floating(-2.25e10, 22, 0),
    decimal("12345.67", 10, 2),
    char("héllo wörld 😀"),
    char("café", "latin1"),
    char("中文", "gbk"),
    char(b"\x00\x01\xfe\xff", "binary"),
    char("long text", "utf8mb4"),
    binary("BLOB", b"\x89PNG\r\n"),
    date_time(2024, 2, 29),
    date_time(hour=-838, minute=-59, second=-59, fraction=-500000),
    date_time(2024, 3, 1, 13, 14, 15, 123456),
    timestamp(1709298855, 250000),
    date_time(2024),
    text("JSON", '{"a": [1, 2, {"b": null}]}'),
    text("ENUM", "medium"),
    text("SET", "a,c"),
    wkb_geometry("POINT", struct.pack("<I", 4326) + point_wkb(120.5, 30.25)),
]


def mysql_types() -> list[bytes]:
    common: dict[str, Any] = {"tags": PK_ID}
    nulls = [integer(2, 8)] + [NULL if i % 2 else None for i in range(1, len(ALL_TYPES_FIELDS))]
    minimal_before = [integer(1, 8)] + [NONE] * (len(ALL_TYPES_FIELDS) - 1)
    minimal_after = [integer(1, 8)] + [NONE] * (len(ALL_TYPES_FIELDS) - 1)
    minimal_after[2] = integer(7, 2)
    minimal_after[16] = date_time(0, 0, 0)  # zero date
    minimal_after[18] = date_time(0, 0, 0, 0, 0, 0, 0)  # zero datetime
    minimal_after[17] = date_time(hour=25, minute=0, second=1)
    return [
        encode(
            record(
                "INSERT",
                "shop.all_types",
                ALL_TYPES_FIELDS,
                None,
                ALL_TYPES_VALUES,
                record_id=100,
                ts=1709298855,
                position="72469@78",
                safe_position="72347@78",
                born=1709298855,
                **common,
            )
        ),
        encode(
            record(
                "INSERT",
                "shop.all_types",
                ALL_TYPES_FIELDS,
                None,
                nulls,
                record_id=101,
                ts=1709298856,
                position="73001@78",
                safe_position="72347@78",
                born=1709298856,
                **common,
            )
        ),
        encode(
            record(
                "UPDATE",
                "shop.all_types",
                ALL_TYPES_FIELDS,
                minimal_before,
                minimal_after,
                record_id=102,
                ts=1709298857,
                position="120@79",
                safe_position="4@79",
                born=1709298857,
                **common,
            )
        ),
    ]


ORDER_FIELDS = [("id", 3), ("sku", 253), ("qty", 2), ("price", 246)]


def mysql_dml() -> list[bytes]:
    tags = {"pk_uk_info": '{"PRIMARY":["id"],"uk_sku":["sku"]}', "thread_id": "77", "server_id": "26957161"}
    begin_tags = {"GTID": "9d437549-9a4c-11ea-9659-9efc635af2ae:558572086", "thread_id": "77"}
    row1 = [integer(1), char("A-1"), integer(2, 2), decimal("9.90", 10, 2)]
    row1b = [integer(1), char("A-1"), integer(5, 2), decimal("9.90", 10, 2)]
    row2 = [integer(2), char("A-1"), integer(5, 2), decimal("9.90", 10, 2)]
    base: dict[str, Any] = {"ts": 1696984408, "txid": "0", "born": 1696984408}
    return [
        encode(record("BEGIN", None, record_id=1, position="100@12", tags=begin_tags, **base)),
        encode(
            record(
                "INSERT",
                "shop.orders",
                ORDER_FIELDS,
                None,
                row1,
                record_id=2,
                position="200@12",
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "UPDATE",
                "shop.orders",
                ORDER_FIELDS,
                row1,
                row1b,
                record_id=3,
                position="300@12",
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "UPDATE",
                "shop.orders",
                ORDER_FIELDS,
                row1b,
                row2,
                record_id=4,
                position="400@12",
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "DELETE",
                "shop.orders",
                ORDER_FIELDS,
                row2,
                None,
                record_id=5,
                position="500@12",
                tags=tags,
                **base,
            )
        ),
        encode(record("COMMIT", None, record_id=6, position="600@12", **base)),
        # no pk_uk_info: no key; escaped dot in the table name
        encode(
            record(
                "INSERT",
                "shop.orders\\u002Earchive",
                ORDER_FIELDS,
                None,
                row1,
                record_id=7,
                position="700@12",
                process=[1696984409001, 1696984409120],
                **base,
            )
        ),
    ]


def mysql_ddl_control() -> list[bytes]:
    base: dict[str, Any] = {"ts": 1696984500, "position": "900@12", "txid": "0"}
    out = [
        encode(
            record(
                "DDL",
                "shop.orders",
                after="CREATE TABLE orders (id INT PRIMARY KEY, sku VARCHAR(20))",
                record_id=10,
                **base,
            )
        ),
        encode(
            record(
                "DDL", "shop.orders", after="ALTER TABLE orders ADD COLUMN note TEXT", record_id=11, **base
            )
        ),
        encode(record("DDL", "shop", after="CREATE DATABASE IF NOT EXISTS shop", record_id=12, **base)),
        encode(record("DDL", "shop.orders", after="DROP TABLE orders", record_id=13, **base)),
    ]
    for i, op in enumerate(
        [
            "HEARTBEAT",
            "CHECKPOINT",
            "ROLLBACK",
            "ABORT",
            "FILL",
            "FINISH",
            "CONTROL",
            "RDB",
            "NOOP",
            "INIT",
            "COMMAND",
        ]
    ):
        out.append(
            encode(
                record(
                    op,
                    None,
                    record_id=20 + i,
                    tags={"dts_heartbeat": "1"} if op == "HEARTBEAT" else None,
                    **base,
                )
            )
        )
    return out


EMP_FIELDS = [
    ("EMPNO", 2),
    ("ENAME", 1),
    ("SAL", 2),
    ("HIREDATE", 12),
    ("UPDATED", 180),
    ("SEEN", 181),
    ("PHOTO", 113),
    ("NOTES", 112),
    ("DOC", 58),
    ("BONUS", 2),
]


def oracle_txn() -> list[bytes]:
    src = ("Oracle", "11.2.0.4")
    tags = {"pk_uk_info": '{"PRIMARY":["EMPNO"]}'}
    row = [
        integer(7369, 4),
        char("SMITH", "AL32UTF8"),
        decimal("800.50", 7, 2),
        date_time(1980, 12, 17, 0, 0, 0),
        date_time(2024, 3, 1, 13, 14, 15, 123456789),
        zoned(date_time(2024, 3, 1, 13, 14, 15, 500000000), "+08:00"),
        binary("BLOB", b"\x01\x02"),
        text("CLOB", "long notes"),
        text("XML", "<a>1</a>"),
        decimal("100", 0, 0),
    ]
    row2 = list(row)
    row2[2] = decimal("900.00", 7, 2)
    row2[5] = zoned(date_time(2024, 3, 2, 1, 0, 0, 0), "Asia/Shanghai")
    row2[9] = NULL
    base: dict[str, Any] = {"ts": 1709298855, "txid": "10.5.1234", "source": src}
    return [
        encode(record("BEGIN", None, record_id=1, position="scn:1000", **base)),
        encode(
            record(
                "INSERT",
                "ORCL.SCOTT.EMP",
                EMP_FIELDS,
                None,
                row,
                record_id=2,
                position="scn:1001",
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "UPDATE",
                "ORCL.SCOTT.EMP",
                EMP_FIELDS,
                row,
                row2,
                record_id=3,
                position="scn:1002",
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "DELETE",
                "ORCL.SCOTT.EMP",
                EMP_FIELDS,
                row2,
                None,
                record_id=4,
                position="scn:1003",
                tags=tags,
                **base,
            )
        ),
        encode(record("COMMIT", None, record_id=5, position="scn:1004", **base)),
    ]


def postgres() -> list[bytes]:
    src = ("PostgreSQL", "13.4")
    fields = [
        ("id", 20),
        ("payload", 3802),
        ("created", 1114),
        ("created_tz", 1184),
        ("flag", 16),
        ("d", 1082),
        ("t", 1083),
    ]
    row = [
        integer(42, 8),
        text("JSONB", '{"k": "v"}'),
        date_time(2024, 3, 1, 13, 14, 15, 654321),
        zoned(date_time(2024, 3, 1, 13, 14, 15, 654321), "-05:30"),
        text("BOOL", "true"),
        date_time(2024, 3, 1),
        date_time(hour=23, minute=59, second=58, fraction=1),
    ]
    base: dict[str, Any] = {"ts": 1709298855, "txid": "5821", "source": src, "position": "0/16B3748"}
    tags = {"pk_uk_info": '{"PRIMARY":["id"]}'}
    return [
        encode(record("BEGIN", None, record_id=1, **base)),
        encode(record("INSERT", "appdb.public.orders", fields, None, row, record_id=2, tags=tags, **base)),
        encode(record("COMMIT", None, record_id=3, **base)),
    ]


def geometry() -> list[bytes]:
    fields = [("id", 3), ("shape", 255)]
    tags = {"pk_uk_info": '{"PRIMARY":["id"]}'}
    square = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 0.0)]
    base: dict[str, Any] = {"ts": 1709298855, "position": "10@3"}
    return [
        encode(
            record(
                "INSERT",
                "geo.places",
                fields,
                None,
                [integer(1), wkb_geometry("POINT", struct.pack("<I", 4326) + point_wkb(1.5, 2.5))],
                record_id=1,
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "INSERT",
                "geo.places",
                fields,
                None,
                [integer(2), wkb_geometry("POLYGON", polygon_wkb(square))],
                record_id=2,
                tags=tags,
                **base,
            )
        ),
        encode(
            record(
                "INSERT",
                "geo.shapes",
                fields,
                None,
                [integer(3), wkt_geometry("POINT", "POINT(1.5 2.5)")],
                record_id=3,
                tags=tags,
                **base,
            )
        ),
    ]


def legacy_records() -> list[dict[str, Any]]:
    tags = {"pk_uk_info": '{"PRIMARY":["id"]}'}
    row = [integer(1), char("A-1"), integer(2, 2), decimal("9.90", 10, 2)]
    row2 = [integer(1), char("A-1"), NONE, decimal("10.00", 10, 2)]
    base: dict[str, Any] = {"ts": 1573700000, "txid": "0", "source": ("MySQL", "5.6.47-log")}
    return [
        record(
            "INSERT", "legacy.orders", ORDER_FIELDS, None, row, record_id=1, position="4@1", tags=tags, **base
        ),
        record(
            "UPDATE", "legacy.orders", ORDER_FIELDS, row, row2, record_id=2, position="5@1", tags=tags, **base
        ),
        record(
            "DELETE",
            "legacy.orders",
            ORDER_FIELDS,
            row2,
            None,
            record_id=3,
            position="6@1",
            tags=tags,
            **base,
        ),
        record("DDL", "legacy.orders", after="TRUNCATE TABLE orders", record_id=4, position="7@1", **base),
    ]


def legacy_2019() -> list[bytes]:
    return [encode(r, V2019) for r in legacy_records()]


def mixed_auto() -> list[bytes]:
    out = []
    for i, rec in enumerate(legacy_records()):
        out.append(encode(rec, V2019 if i % 2 == 0 else CURRENT))
    return out


def bad_input() -> list[bytes]:
    row = [integer(1), char("A-1"), integer(2, 2), decimal("9.90", 10, 2)]
    tags = {"pk_uk_info": '{"PRIMARY":["id"]}'}
    base: dict[str, Any] = {"ts": 1696984408, "position": "1@1", "born": 1696984408}
    good = encode(record("INSERT", "shop.orders", ORDER_FIELDS, None, row, record_id=1, tags=tags, **base))
    return [
        b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4",  # garbage
        good[: len(good) // 2],  # truncated
        good + b"\x02\x04",  # trailing bytes
        encode(
            record("MERGE", "shop.orders", ORDER_FIELDS, None, row, record_id=2, tags=tags, **base),
            WITH_MERGE,
        ),
        encode(record("INSERT", "shop.orders", ORDER_FIELDS, None, row[:3], record_id=3, tags=tags, **base)),
        encode(
            record(
                "INSERT",
                "shop.orders",
                ORDER_FIELDS,
                None,
                row,
                record_id=4,
                tags={"pk_uk_info": "{PRIMARY"},
                **base,
            )
        ),
        encode(
            record(
                "INSERT",
                "shop.orders",
                ORDER_FIELDS,
                None,
                row,
                record_id=5,
                tags={"pk_uk_info": '{"PRIMARY":["nope"]}'},
                **base,
            )
        ),
        encode(
            record(
                "INSERT",
                "shop.orders",
                ORDER_FIELDS,
                None,
                [row[0], char(b"\xff\xfe", "utf8mb4"), row[2], row[3]],
                record_id=6,
                tags=tags,
                **base,
            )
        ),
        encode(record("INSERT", None, ORDER_FIELDS, None, row, record_id=7, tags=tags, **base)),
        encode(record("DELETE", "shop.orders", ORDER_FIELDS, None, None, record_id=8, tags=tags, **base)),
        encode(
            record(
                "INSERT",
                "shop.orders",
                ORDER_FIELDS,
                None,
                [row[0], row[1], integer(2**40, 2), row[3]],
                record_id=9,
                tags=tags,
                **base,
            )
        ),
        good,  # decoding goes on after bad lines
    ]


def strict_current() -> list[bytes]:
    """Under ``schema.version=current`` a 2019 record (no bornTimestamp) fails; the current one decodes."""
    return [*legacy_2019()[:1], encode(legacy_records()[0], CURRENT)]


CASES = {
    "mysql-types": mysql_types,
    "mysql-dml": mysql_dml,
    "mysql-ddl-control": mysql_ddl_control,
    "oracle-txn": oracle_txn,
    "postgres": postgres,
    "geometry": geometry,
    "legacy-2019": legacy_2019,
    "mixed-auto": mixed_auto,
    "bad-input": bad_input,
    "strict-current": strict_current,
}
OPTIONS = {
    "legacy-2019": {"schema.version": "2019"},
    "strict-current": {"schema.version": "current"},
}


def build() -> dict[str, bytes]:
    """File name → content of every generated file."""
    out: dict[str, bytes] = {}
    for name, make in CASES.items():
        out[f"{name}.txt"] = b"".join(base64.b64encode(m) + b"\n" for m in make())
    for name, opts in OPTIONS.items():
        out[f"{name}.options.json"] = (json.dumps(opts, sort_keys=True) + "\n").encode()
    return out


def main() -> None:
    for name, content in build().items():
        (HERE / name).write_bytes(content)


if __name__ == "__main__":
    main()
