"""MySQL column types as Kafka Connect columns: the one mapping every MySQL-typed decoder uses.

Canal's ``mysqlType`` (``bigint(20) unsigned``, ``ENUM('a','b')``), Maxwell's DDL ``def`` columns
(``{"type": "smallint", "signed": false}``) and DTS's MySQL type numbers all name MySQL column
types; :func:`mysql_column` turns one into the Connect column that Debezium's MySQL connector
gives it (``MySqlValueConverters`` with its defaults: ``time.precision.mode=adaptive_time_microseconds``,
``binary.handling.mode=bytes``), with ``bigint.unsigned.handling.mode`` as an option:

=====================================  ===========================================================
MySQL type                             Connect column
=====================================  ===========================================================
BOOL, BOOLEAN, BIT, BIT(1)             boolean
BIT(n), n > 1                          bytes ``io.debezium.data.Bits`` (``length`` = n)
TINYINT[ UNSIGNED], SMALLINT           int16
SMALLINT UNSIGNED, MEDIUMINT[ UNS.]    int32
INT, INTEGER                           int32
INT UNSIGNED, BIGINT                   int64
BIGINT UNSIGNED, SERIAL                int64 (``long``) or Decimal(20,0) (``precise``)
FLOAT, FLOAT(p) with p < 24            float (Connect FLOAT32)
FLOAT(p) p >= 24, FLOAT(M,D), DOUBLE,  double
REAL, DOUBLE PRECISION
DECIMAL(M,D), NUMERIC, FIXED, DEC      ``org.apache.kafka.connect.data.Decimal`` (scale D,
                                       precision M); without (M,D) a VariableScaleDecimal
DATE                                   int32 ``io.debezium.time.Date``
DATETIME(p)                            int64 ``io.debezium.time.Timestamp`` (p <= 3) or
                                       ``io.debezium.time.MicroTimestamp`` (p > 3)
TIMESTAMP(p)                           string ``io.debezium.time.ZonedTimestamp``
TIME(p)                                int64 ``io.debezium.time.MicroTime``
YEAR                                   int32 ``io.debezium.time.Year``
JSON                                   string ``io.debezium.data.Json``
ENUM(...), SET(...)                    string ``io.debezium.data.Enum``/``EnumSet``
                                       (``allowed`` = the comma-joined values)
CHAR, VARCHAR, *TEXT                   string
BINARY, VARBINARY, *BLOB               bytes
GEOMETRY, POINT, LINESTRING, ...       struct ``io.debezium.data.geometry.Geometry`` (wkb, srid)
=====================================  ===========================================================

Where this departs from Debezium, it is on purpose: ``REAL`` is ``double`` (MySQL's ``REAL`` is
``DOUBLE`` unless the ``REAL_AS_FLOAT`` SQL mode is set, and a double holds every float exactly,
while Debezium's ``float`` would round a double), and ``POINT`` is a ``Geometry`` like the other
spatial types (Debezium gives it its own ``io.debezium.data.geometry.Point`` struct with x/y
beside the WKB; one struct for every spatial type carries the same WKB and SRID).
A few non-MySQL spellings that Canal-JSON producers write (``int4``, ``bigserial``, ``jsonb``,
``timestamptz``, ``bpchar`` ...) map like their MySQL counterparts.

``bigint.unsigned.handling.mode``: ``precise`` (the default here, lossless) makes BIGINT UNSIGNED a
Decimal(20,0); ``long`` makes it int64, and a value above 2^63-1 wraps to its two's complement
(:func:`wrap_unsigned_bigint`), as Debezium's long mode does: 18446744073709551615 becomes -1.
Never is a number beyond int64 put in an int64 field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import Field

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders.base import check_decimal_params
from transforms.options import FormatOptions

__all__ = [
    "MAX_BIT_LENGTH",
    "BigintUnsignedHandlingMode",
    "MySqlType",
    "MySqlTypeOptions",
    "column_for_mysql_type",
    "mysql_column",
    "parse_mysql_type",
    "wrap_unsigned_bigint",
]

MAX_BIT_LENGTH = 64
"""MySQL BIT(M): M is 1..64."""

_UNSIGNED_TOP = 1 << 64
_SIGNED_TOP = 1 << 63


class BigintUnsignedHandlingMode(StrEnum):
    """Debezium's ``bigint.unsigned.handling.mode``."""

    PRECISE = "precise"
    LONG = "long"


class MySqlTypeOptions(FormatOptions):
    """The options of a format whose columns are typed by MySQL type names."""

    bigint_unsigned_handling_mode: BigintUnsignedHandlingMode = Field(
        BigintUnsignedHandlingMode.PRECISE,
        alias="bigint.unsigned.handling.mode",
        description="BIGINT UNSIGNED as Decimal(20,0) (precise, lossless) or as int64 (long, wraps above 2^63-1).",
    )


@dataclass(frozen=True, slots=True)
class MySqlType:
    """A MySQL column type, parsed: the lower-case base name (``bigint``, ``double precision``),
    the numeric arguments (``(20)``, ``(10,2)``), whether it is unsigned (``UNSIGNED`` or
    ``ZEROFILL``), the values of an ENUM/SET, and the type as the source spelled it."""

    base: str
    args: tuple[int, ...] = ()
    unsigned: bool = False
    labels: tuple[str, ...] = ()
    text: str = ""
    modifiers: tuple[str, ...] = ()


_TYPE_RE = re.compile(
    r"^\s*([a-z_][a-z0-9_]*(?:\s+(?:precision|varying))?)\s*(?:\((.*)\))?(.*)$", re.IGNORECASE | re.DOTALL
)
_LABEL_RE = re.compile(r"'((?:[^']|'')*)'")


def _args(text: str | None) -> tuple[int, ...]:
    """``"10, 2"`` → ``(10, 2)``; anything but non-negative integers (an ENUM's labels) → ``()``."""
    if not text:
        return ()
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not part.isascii() or len(part) > 18:
            return ()
        out.append(int(part))
    return tuple(out)


@lru_cache(maxsize=4096)
def parse_mysql_type(text: str) -> MySqlType | None:
    """Parse a MySQL column type as Canal and ``SHOW COLUMNS`` spell it; None if it is not one.

    >>> parse_mysql_type("INT(8) unsigned zerofill")
    MySqlType(base='int', args=(8,), unsigned=True, labels=(), text='INT(8) unsigned zerofill', modifiers=('unsigned', 'zerofill'))
    >>> parse_mysql_type("enum('a','it''s')").labels
    ('a', "it's")
    """
    m = _TYPE_RE.match(text)
    if not m:
        return None
    base = " ".join(m.group(1).lower().split())
    raw_args = m.group(2)
    modifiers = tuple((m.group(3) or "").lower().split())
    labels: tuple[str, ...] = ()
    if base in ("enum", "set"):
        labels = tuple(v.replace("''", "'") for v in _LABEL_RE.findall(raw_args or ""))
    return MySqlType(
        base,
        _args(raw_args),
        "unsigned" in modifiers or "zerofill" in modifiers,  # ZEROFILL implies UNSIGNED
        labels,
        text.strip(),
        modifiers,
    )


_TINYINT = frozenset({"tinyint", "int1"})
_SMALLINT = frozenset({"smallint", "int2", "smallserial"})
_MEDIUMINT = frozenset({"mediumint", "middleint", "int3"})
_INT = frozenset({"int", "integer", "int4", "serial4"})
_BIGINT = frozenset({"bigint", "int8", "bigserial", "serial8"})
_FLOAT = frozenset({"float", "float4"})
_DOUBLE = frozenset({"double", "double precision", "float8", "real"})
_DECIMAL = frozenset({"decimal", "numeric", "fixed", "dec"})
_GEOMETRY = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    }
)
_STRINGS = frozenset(
    {
        "char",
        "varchar",
        "tinytext",
        "text",
        "mediumtext",
        "longtext",
        "long",
        "nchar",
        "nvarchar",
        "character",
        "character varying",
        "string",
        "clob",
        "uuid",
        "bpchar",
        "citext",
        "xml",
        "inet",
        "cidr",
        "macaddr",
    }
)
_BINARIES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bytea", "raw"})
_GEOMETRY_FIELDS = (Column("wkb", ConnectType.BYTES, False), Column("srid", ConnectType.INT32, True))


def mysql_column(
    name: str,
    mysql_type: MySqlType,
    unsigned_mode: BigintUnsignedHandlingMode = BigintUnsignedHandlingMode.PRECISE,
    source_type: str | None = None,
) -> Column | None:
    """The Debezium column of a MySQL type (see the module table); None for a type it does not know.

    ``source_type`` is what the column records as its source spelling (default: the type's text).
    Raises ValueError for a size out of range (``BIT(65)``, ``DECIMAL(2000,3)``).

    >>> mysql_column("n", MySqlType("smallint", unsigned=True)).type
    <ConnectType.INT32: 'int32'>
    >>> mysql_column("n", MySqlType("bigint", unsigned=True)).params
    (('connect.decimal.precision', '20'), ('scale', '0'))
    """
    base, args = mysql_type.base, mysql_type.args
    st = source_type if source_type is not None else (mysql_type.text or None)

    def col(
        ctype: ConnectType, logical: str | None = None, params: tuple[tuple[str, str], ...] = ()
    ) -> Column:
        return Column(name, ctype, logical=logical, params=params, source_type=st)

    unsigned = mysql_type.unsigned
    if base in _TINYINT:
        return col(ConnectType.INT16)  # 0..255 fits int16 too
    if base in _SMALLINT:
        return col(ConnectType.INT32 if unsigned and base != "smallserial" else ConnectType.INT16)
    if base in _MEDIUMINT:
        return col(ConnectType.INT32)  # 0..16777215 fits int32 too
    if base in _INT:
        return col(ConnectType.INT64 if unsigned else ConnectType.INT32)
    if base in _BIGINT or base == "serial":
        # MySQL's SERIAL is BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
        if (unsigned or base == "serial") and unsigned_mode is BigintUnsignedHandlingMode.PRECISE:
            return Column.decimal(name, 20, 0, source_type=st)
        return col(ConnectType.INT64)
    if base in ("bool", "boolean"):
        return col(ConnectType.BOOLEAN)
    if base == "bit":
        length = args[0] if args else 1
        if length > MAX_BIT_LENGTH:
            raise ValueError(f"BIT({length}) is longer than {MAX_BIT_LENGTH} bits")
        if length <= 1:
            return col(ConnectType.BOOLEAN)
        return col(ConnectType.BYTES, Logical.BITS, (("length", str(length)),))
    if base in _FLOAT:
        # FLOAT(p): p 0..23 is a 4-byte float, 24..53 a double; FLOAT(M,D) is a double to Debezium
        if len(args) == 2 or (len(args) == 1 and args[0] > 23):
            return col(ConnectType.FLOAT64)
        return col(ConnectType.FLOAT32)
    if base in _DOUBLE:
        return col(ConnectType.FLOAT64)
    if base in _DECIMAL:
        precision = args[0] if args else None
        scale = args[1] if len(args) == 2 else None
        check_decimal_params(precision, scale)
        if len(args) == 2:
            return Column.decimal(name, args[0], args[1], source_type=st)
        if len(args) == 1:
            return Column.decimal(name, args[0], 0, source_type=st)
        return Column.decimal(name, None, None, source_type=st)  # scale unknown: never round
    if base == "date":
        return col(ConnectType.INT32, Logical.DATE)
    if base == "datetime" or (base == "timestamp" and "without" in mysql_type.modifiers):
        precision = args[0] if args else 0
        return col(ConnectType.INT64, Logical.TIMESTAMP if precision <= 3 else Logical.MICRO_TIMESTAMP)
    if base in ("timestamp", "timestamptz"):  # MySQL TIMESTAMP is an instant
        return col(ConnectType.STRING, Logical.ZONED_TIMESTAMP)
    if base == "time":
        return col(ConnectType.INT64, Logical.MICRO_TIME)
    if base == "year":
        return col(ConnectType.INT32, Logical.YEAR)
    if base in ("json", "jsonb"):
        return col(ConnectType.STRING, Logical.JSON)
    if base in ("enum", "set"):
        logical = Logical.ENUM if base == "enum" else Logical.ENUM_SET
        return col(ConnectType.STRING, logical, (("allowed", ",".join(mysql_type.labels)),))
    if base in _GEOMETRY:
        return Column(
            name, ConnectType.STRUCT, logical=Logical.GEOMETRY, fields=_GEOMETRY_FIELDS, source_type=st
        )
    if base in _BINARIES:
        return col(ConnectType.BYTES)
    if base in _STRINGS:
        return col(ConnectType.STRING)
    return None


@lru_cache(maxsize=4096)
def column_for_mysql_type(
    name: str, text: str, unsigned_mode: BigintUnsignedHandlingMode = BigintUnsignedHandlingMode.PRECISE
) -> Column | None:
    """:func:`mysql_column` of a type as spelled (``"bigint(20) unsigned"``); None if unknown.

    >>> column_for_mysql_type("f", "float").type
    <ConnectType.FLOAT32: 'float'>
    """
    parsed = parse_mysql_type(text)
    return None if parsed is None else mysql_column(name, parsed, unsigned_mode)


def wrap_unsigned_bigint(raw: Any) -> Any:
    """A BIGINT UNSIGNED value above 2^63-1 as the int64 it wraps to (Debezium's ``long`` mode),
    else ``raw`` as it is. Takes integers and integer literals (``"18446744073709551615"``).

    >>> wrap_unsigned_bigint("18446744073709551615"), wrap_unsigned_bigint(5)
    (-1, 5)
    """
    number = raw
    if type(raw) is str:
        text = raw.strip()
        if not (len(text) <= 20 and text.isdigit() and text.isascii()):
            return raw
        number = int(text)
    if type(number) is int and _SIGNED_TOP <= number < _UNSIGNED_TOP:
        return number - _UNSIGNED_TOP
    return raw
