"""Alibaba DTS Avro: a field's column (Connect type, MySQL spelling, decimal, geometry) from its
type number, the source database and the value sampled for it. Used by
:class:`transforms.decoders.dts_avro.DtsAvroDecoder`."""

from __future__ import annotations

from typing import Any

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders.base import check_decimal_params
from transforms.decoders.mysql_types import (
    BigintUnsignedHandlingMode,
    MySqlType,
    mysql_column,
)

# ----------------------------------------------------------------------------- types

_NS = "com.alibaba.dts.formats.avro."  # the DTS schema's namespace: its type names start with it
_MYSQL_FAMILY = frozenset({"MySQL", "DRDS"})
_MICROS_FRACTION = frozenset({"MySQL", "PostgreSQL"})


def _mysql(spelled: str, args: tuple[int, ...] = (), unsigned: bool = False) -> tuple[ConnectType, str | None]:
    """The Connect type and logical name of a MySQL type, by the mapping every MySQL-typed format
    shares (``mysql_types``); BIGINT UNSIGNED in long mode, as DTS can only wrap it."""
    col = mysql_column("", MySqlType(spelled.lower(), args, unsigned), BigintUnsignedHandlingMode.LONG)
    assert col is not None, spelled
    return col.type, col.logical


# The record does not say whether an integer column is signed: each integer type number is typed as
# the UNSIGNED type, whose Connect type holds the signed values too (TINYINT UNSIGNED int16,
# SMALLINT UNSIGNED and MEDIUMINT UNSIGNED int32, INT UNSIGNED int64, BIGINT UNSIGNED int64 in
# long mode, wrapping above 2^63-1). BIT's length is not in the record either: int64.
_INT_TYPES = {
    number: (spelled, _mysql(spelled, unsigned=True)[0])
    for number, spelled in {1: "TINYINT", 2: "SMALLINT", 9: "MEDIUMINT", 3: "INT", 8: "BIGINT"}.items()
}
_INT_TYPES[16] = ("BIT", ConnectType.INT64)
_TEXT_TYPES = {15: "VARCHAR", 253: "VARCHAR", 254: "CHAR"}
_BLOB_TYPES = {249: "TINYBLOB", 250: "MEDIUMBLOB", 251: "LONGBLOB", 252: "BLOB"}
# DATETIME: the fraction digits are not in the record, and the images carry microseconds
_FIXED_TYPES: dict[int, tuple[str, ConnectType, str | None]] = {
    number: (spelled, *_mysql(spelled, args))
    for number, (spelled, args) in {
        4: ("FLOAT", ()),
        5: ("DOUBLE", ()),
        7: ("TIMESTAMP", ()),
        17: ("TIMESTAMP", ()),
        10: ("DATE", ()),
        14: ("DATE", ()),
        11: ("TIME", ()),
        19: ("TIME", ()),
        12: ("DATETIME", (6,)),
        18: ("DATETIME", (6,)),
        13: ("YEAR", ()),
        245: ("JSON", ()),
    }.items()
}
# DTS knows no ENUM/SET values: no Debezium ``allowed`` parameter; NULL columns are strings
_FIXED_TYPES.update(
    {
        6: ("NULL", ConnectType.STRING, None),
        247: ("ENUM", ConnectType.STRING, Logical.ENUM),
        248: ("SET", ConnectType.STRING, Logical.ENUM_SET),
    }
)
_DECIMAL_TYPES = {0: "DECIMAL", 246: "DECIMAL"}
_GEOMETRY = 255

_POSTGRES_TYPES: dict[int, tuple[str, ConnectType, str | None]] = {
    16: ("BOOL", ConnectType.BOOLEAN, None),
    21: ("INT2", ConnectType.INT16, None),
    23: ("INT4", ConnectType.INT32, None),
    20: ("INT8", ConnectType.INT64, None),
    700: ("FLOAT4", ConnectType.FLOAT32, None),
    701: ("FLOAT8", ConnectType.FLOAT64, None),
    25: ("TEXT", ConnectType.STRING, None),
    1043: ("VARCHAR", ConnectType.STRING, None),
    17: ("BYTEA", ConnectType.BYTES, None),
    114: ("JSON", ConnectType.STRING, Logical.JSON),
    3802: ("JSONB", ConnectType.STRING, Logical.JSON),
    142: ("XML", ConnectType.STRING, Logical.XML),
    2950: ("UUID", ConnectType.STRING, Logical.UUID),
    1082: ("DATE", ConnectType.INT32, Logical.DATE),
    1083: ("TIME", ConnectType.INT64, Logical.MICRO_TIME),
    1114: ("TIMESTAMP", ConnectType.INT64, Logical.MICRO_TIMESTAMP),
    1184: ("TIMESTAMPTZ", ConnectType.STRING, Logical.ZONED_TIMESTAMP),
}
"""PostgreSQL type OIDs (DTS writes them as ``dataTypeNumber`` for PostgreSQL sources)."""

_UNAMBIGUOUS_MYSQL = frozenset({*_INT_TYPES, *_FIXED_TYPES})
"""MySQL type numbers whose Connect type does not depend on the values (others need a sample)."""
_HINTS_NAMESPACE = "dts-avro.type-hints"

_GEOMETRY_FIELDS = (Column("wkb", ConnectType.BYTES, False), Column("srid", ConnectType.INT32, True))

Image = tuple[str, Any] | None
"""One value of an image as fastavro reads it: ``(kind, body)`` or ``None`` (Avro null)."""


def _kind(value: Image) -> str | None:
    return None if value is None else value[0].removeprefix(_NS)


def _is_binary(kind: str | None, body: Any) -> bool:
    if kind == "Character":
        return str(body["charset"]).lower() == "binary"
    return kind in ("BinaryObject", "BinaryGeometry")


def _hint_body(kind: str, body: Any) -> dict[str, Any]:
    """The part of a value that decides its column's type (stored as a type hint)."""
    if kind == "Decimal":
        return {"precision": body["precision"], "scale": body["scale"]}
    if kind == "Character":
        return {"charset": "binary" if _is_binary(kind, body) else "text"}
    if kind == "TextObject":
        return {"type": body["type"]}
    if kind == "DateTime":
        return {k: None if body[k] is None else 1 for k in ("year", "month", "hour")}
    return {}


def _geometry(name: str) -> Column:
    return Column(
        name, ConnectType.STRUCT, True, Logical.GEOMETRY, fields=_GEOMETRY_FIELDS, source_type="GEOMETRY"
    )


def _decimal(name: str, body: Any, source_type: str | None) -> Column:
    """A decimal column; ValueError when the value's precision or scale is out of range."""
    precision, scale = body["precision"], body["scale"]
    if precision is None or precision <= 0 or scale is None:
        return Column.decimal(name, None, None, source_type=source_type)
    try:
        check_decimal_params(precision, scale)
    except ValueError as exc:
        raise ValueError(f"column {name!r}: {exc}") from exc
    return Column.decimal(name, precision, scale, source_type=source_type)


def _column_from_image(name: str, kind: str | None, body: Any, source_type: str | None = None) -> Column:
    """A column typed by the kind of value the record holds (non-MySQL sources, unknown numbers)."""
    if kind == "Integer":
        return Column(name, ConnectType.INT64, source_type=source_type)
    if kind == "Decimal":
        return _decimal(name, body, source_type)
    if kind == "Float":
        return Column(name, ConnectType.FLOAT64, source_type=source_type)
    if kind in ("Timestamp", "TimestampWithTimeZone"):
        return Column(name, ConnectType.STRING, logical=Logical.ZONED_TIMESTAMP, source_type=source_type)
    if kind == "DateTime":
        has_date = body["year"] is not None
        has_time = body["hour"] is not None
        if has_date and has_time:
            return Column(name, ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP, source_type=source_type)
        if has_date and body["month"] is None:
            return Column(name, ConnectType.INT32, logical=Logical.YEAR, source_type=source_type)
        if has_date:
            return Column(name, ConnectType.INT32, logical=Logical.DATE, source_type=source_type)
        return Column(name, ConnectType.INT64, logical=Logical.MICRO_TIME, source_type=source_type)
    if kind == "BinaryGeometry":
        return _geometry(name)
    if kind == "TextObject":
        obj_type = str(body["type"]).upper()
        if obj_type in ("JSON", "JSONB"):
            return Column(name, ConnectType.STRING, logical=Logical.JSON, source_type=source_type)
        if obj_type == "XML":
            return Column(name, ConnectType.STRING, logical=Logical.XML, source_type=source_type)
    if _is_binary(kind, body):
        return Column(name, ConnectType.BYTES, source_type=source_type)
    return Column(name, ConnectType.STRING, source_type=source_type)


def _mysql_column(name: str, number: int, kind: str | None, body: Any) -> Column:
    """A column typed by its MySQL type number, refined by a sample value (may be absent)."""
    if number in _INT_TYPES:
        source_type, ctype = _INT_TYPES[number]
        return Column(name, ctype, source_type=source_type)
    if number in _FIXED_TYPES:
        source_type, ctype, logical = _FIXED_TYPES[number]
        return Column(name, ctype, logical=logical, source_type=source_type)
    if number in _DECIMAL_TYPES:
        if kind == "Decimal":
            return _decimal(name, body, "DECIMAL")
        return Column.decimal(name, None, None, source_type="DECIMAL")
    if number in _TEXT_TYPES:
        binary = kind is not None and _is_binary(kind, body)
        source_type = ("VARBINARY" if number != 254 else "BINARY") if binary else _TEXT_TYPES[number]
        return Column(name, ConnectType.BYTES if binary else ConnectType.STRING, source_type=source_type)
    if number in _BLOB_TYPES:
        text = kind in ("Character", "TextObject") and not _is_binary(kind, body)
        source_type = _BLOB_TYPES[number].replace("BLOB", "TEXT") if text else _BLOB_TYPES[number]
        return Column(name, ConnectType.STRING if text else ConnectType.BYTES, source_type=source_type)
    if number == _GEOMETRY:
        if kind == "TextGeometry":
            return Column(name, ConnectType.STRING, source_type="GEOMETRY")
        return _geometry(name)
    return _column_from_image(name, kind, body)
