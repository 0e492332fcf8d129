"""Connect schemas to Spark SQL / Iceberg types, and Connect JSON values to Python values.

Pure code (no Spark import): the sink maps each field of the canonical ``after`` struct to a
column type and decodes values the way Debezium's JSON encoding defines them.

=================================  =========================  ==========================
Connect type / logical name        Spark SQL type             Iceberg type
=================================  =========================  ==========================
int8, int16, int32                 int                        int
int64                              bigint                     long
float / double                     float / double             float / double
boolean / string / bytes           boolean / string / binary  boolean / string / binary
Decimal(p, s), p ≤ 38              decimal(p, s)              decimal(p, s)
Decimal(p, s), p > 38              string (exact text)        string
VariableScaleDecimal               string (exact text)        string
Date                               date                       date
Timestamp/Micro/NanoTimestamp      timestamp_ntz              timestamp
ZonedTimestamp                     timestamp                  timestamptz
Time/MicroTime/NanoTime            bigint (µs of day)         long
Json, Xml, Uuid, Enum, EnumSet     string                     string
struct / array                     struct / array             struct / list
=================================  =========================  ==========================

Iceberg decimals stop at 38 digits, so a decimal that may need more (a declared precision above
38, or a VariableScaleDecimal: PostgreSQL ``numeric`` without a scale, Oracle ``NUMBER``) is
stored as its exact plain text (``"123456789012345678901234567890.000000000000000000001"``) rather
than rounded or refused.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from transforms.connect import Logical
from transforms.errors import CdcnormError
from transforms.values import (
    EPOCH,
    EPOCH_DATE,
    UNAVAILABLE,
    decimal_from_unscaled,
    exact_context,
    parse_datetime,
)

__all__ = ["ColumnSpec", "IncompatibleSchemaError", "SinkColumn", "columns_from_schema", "spark_type", "widening"]


class IncompatibleSchemaError(CdcnormError):
    """A change's schema cannot be applied to the stored table (not a safe widening)."""

MAX_PRECISION = 38

Decoder = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One table column as a change carries it: name, Spark SQL type and nullability. Plain
    data (no decoder), so a change pickles: it travels from the Spark tasks that read and parse
    records to the ones that write files, and to the driver."""

    name: str
    sql_type: str
    optional: bool = True


@dataclass(frozen=True, slots=True)
class SinkColumn:
    """One table column: name, Spark SQL type and a decoder of its Connect JSON values."""

    name: str
    sql_type: str
    optional: bool
    decode: Decoder

    @property
    def spec(self) -> ColumnSpec:
        return ColumnSpec(self.name, self.sql_type, self.optional)


def _b64(value: Any) -> bytes:
    return base64.b64decode(value) if isinstance(value, str) else bytes(value)


def _at_scale(value: Decimal, scale: int) -> Decimal:
    """``value`` with ``scale`` digits after the point (rounded half-even), exact at any number of
    digits: ``quantize`` in the default 28-digit context fails on a DECIMAL(40,3) value."""
    return value.quantize(Decimal((0, (1,), -scale)), context=exact_context(value, scale))


def _decimal(scale: int, precision: int) -> Decoder:

    def decode(value: Any) -> Any:
        if isinstance(value, str):
            try:
                d = decimal_from_unscaled(base64.b64decode(value, validate=True), scale)
            except ValueError:
                d = Decimal(value)
        else:
            d = Decimal(str(value))
        return _at_scale(d, scale)

    return decode


def _variable_decimal(value: Any) -> Any:
    """A VariableScaleDecimal ``{"scale", "value"}`` as its exact plain text."""
    if isinstance(value, dict):
        d = decimal_from_unscaled(_b64(value["value"]), int(value["scale"]))
    else:
        d = Decimal(str(value))
    return format(d, "f")


def _wide_decimal(scale: int) -> Decoder:
    """A Decimal of more than 38 digits as its exact plain text at its scale."""
    exact = _decimal(scale, 0)

    def decode(value: Any) -> Any:
        return format(exact(value), "f")

    return decode


def _epoch(per_second: int) -> Decoder:
    def decode(value: Any) -> Any:
        if isinstance(value, str):
            return parse_datetime(value).replace(tzinfo=None)
        seconds, rest = divmod(int(value), per_second)
        return EPOCH + dt.timedelta(seconds=seconds, microseconds=rest * 1_000_000 // per_second)

    return decode


def _zoned(value: Any) -> Any:
    parsed = parse_datetime(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _date(value: Any) -> Any:
    if isinstance(value, str):
        return parse_datetime(value).date()
    return EPOCH_DATE + dt.timedelta(days=int(value))


def _time(per_second: int) -> Decoder:
    return lambda value: int(value) * 1_000_000 // per_second


def _identity(value: Any) -> Any:
    return value


def _to_str(value: Any) -> Any:
    return value if isinstance(value, str) else str(value)


def _guarded(fn: Decoder) -> Decoder:
    if fn is _identity:
        return fn

    def decode(value: Any) -> Any:
        if value is None or value == UNAVAILABLE:
            return value
        return fn(value)

    return decode


_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "bigint",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}

_STRINGISH = {Logical.JSON, Logical.XML, Logical.UUID, Logical.ENUM, Logical.ENUM_SET, Logical.ZONED_TIME, Logical.BITS}


def spark_type(schema: dict[str, Any]) -> tuple[str, Decoder]:
    """The Spark SQL type of a Connect field schema, and the decoder of its values."""
    name = schema.get("name")
    ctype = schema.get("type")
    params = schema.get("parameters") or {}
    if name == Logical.DECIMAL:
        scale = int(params.get("scale", 0))
        declared = int(params.get("connect.decimal.precision", MAX_PRECISION))
        if declared > MAX_PRECISION or scale > MAX_PRECISION:
            return "string", _guarded(_wide_decimal(scale))
        precision = max(declared, scale, 1)
        return f"decimal({precision},{scale})", _guarded(_decimal(scale, precision))
    if name == Logical.VARIABLE_SCALE_DECIMAL:
        return "string", _guarded(_variable_decimal)
    if name in (Logical.DATE, Logical.CONNECT_DATE):
        return "date", _guarded(_date)
    if name in (Logical.TIMESTAMP, Logical.CONNECT_TIMESTAMP):
        return "timestamp_ntz", _guarded(_epoch(1_000))
    if name == Logical.MICRO_TIMESTAMP:
        return "timestamp_ntz", _guarded(_epoch(1_000_000))
    if name == Logical.NANO_TIMESTAMP:
        return "timestamp_ntz", _guarded(_epoch(1_000_000_000))
    if name == Logical.ZONED_TIMESTAMP:
        return "timestamp", _guarded(_zoned)
    if name in (Logical.TIME, Logical.CONNECT_TIME):
        return "bigint", _guarded(_time(1_000))
    if name == Logical.MICRO_TIME:
        return "bigint", _guarded(_time(1_000_000))
    if name == Logical.NANO_TIME:
        return "bigint", _guarded(_time(1_000_000_000))
    if name in _STRINGISH and ctype == "string":
        return "string", _guarded(_to_str)
    if ctype == "bytes":
        return "binary", _guarded(_b64)
    if ctype == "struct":
        members = [(f["field"], *spark_type(f)) for f in schema.get("fields", [])]
        sql = "struct<" + ",".join(f"`{n}`:{t}" for n, t, _ in members) + ">"

        def struct(value: Any) -> Any:
            if not isinstance(value, dict):
                return None
            return {n: dec(value.get(n)) for n, _, dec in members}

        return sql, _guarded(struct)
    if ctype == "array":
        item_sql, item_dec = spark_type(schema.get("items") or {"type": "string"})
        return f"array<{item_sql}>", _guarded(lambda v: [item_dec(x) for x in v] if isinstance(v, list) else None)
    if ctype == "map":
        val_sql, val_dec = spark_type(schema.get("values") or {"type": "string"})
        return f"map<string,{val_sql}>", _guarded(
            lambda v: {str(k): val_dec(x) for k, x in v.items()} if isinstance(v, dict) else None
        )
    return _PRIMITIVES.get(str(ctype), "string"), _identity if ctype in _PRIMITIVES and ctype != "string" else (
        _guarded(_to_str)
    )


def columns_from_schema(row_schema: dict[str, Any]) -> tuple[SinkColumn, ...]:
    """The sink columns of a Connect struct schema (the envelope's ``after`` field)."""
    cols = []
    for field in row_schema.get("fields", []):
        sql, decode = spark_type(field)
        cols.append(SinkColumn(field["field"], sql, bool(field.get("optional", True)), decode))
    return tuple(cols)


_WIDER = {
    ("int", "bigint"),
    ("float", "double"),
}


def widening(old: str, new: str) -> str | None:
    """The type to evolve a column to when ``new`` arrives for a stored ``old``.

    Returns ``old`` when nothing changes, the wider type for a safe widening, and ``None`` for an
    incompatible change.

    >>> widening("int", "bigint")
    'bigint'
    >>> widening("bigint", "int")
    'bigint'
    >>> widening("decimal(10,2)", "decimal(12,2)")
    'decimal(12,2)'
    >>> widening("string", "int") is None
    True
    """
    old_n, new_n = old.replace(" ", "").lower(), new.replace(" ", "").lower()
    if old_n == new_n:
        return old
    if (old_n, new_n) in _WIDER:
        return new_n
    if (new_n, old_n) in _WIDER:
        return old
    if old_n.startswith("decimal(") and new_n.startswith("decimal("):
        p_old, s_old = (int(x) for x in old_n[8:-1].split(","))
        p_new, s_new = (int(x) for x in new_n[8:-1].split(","))
        if s_old == s_new:
            return f"decimal({max(p_old, p_new)},{s_old})"
        return None
    if {old_n, new_n} == {"timestamp", "timestamp_ntz"}:
        return None
    return None
