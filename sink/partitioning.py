"""Iceberg partition transforms in the write tasks: which partition a row belongs to.

The row-delta path writes a partitioned table's new rows as one Parquet data file per partition
(:func:`sink.tasks.write_tables`), each committed with its partition tuple. The values are Iceberg's
(the table spec's "Partition Transforms" and "Appendix B: 32-bit Hash Requirements"):

* ``identity``: the value;
* ``bucket[N]``: ``(murmur3_x86_32(bytes) & Integer.MAX_VALUE) % N`` of the value's bytes as the
  spec gives them (ints, longs, dates, times and timestamps as an 8-byte little-endian long;
  strings as UTF-8; decimals as their unscaled value's minimal big-endian two's complement;
  UUIDs as 16 big-endian bytes; binary as is). The hash is ``mmh3``'s;
* ``truncate[W]``: ``v - (v mod W)`` (floor) for ints, longs and decimals' unscaled values, the
  first W code points of a string, the first W bytes of a binary;
* ``year``, ``month``, ``day``, ``hour``: years, months, days or hours since 1970-01-01 (UTC for
  ``timestamptz``);
* ``void``: null.

:func:`partition_json` gives the tuple as the commit helper reads it (``sink/jvm/CdcnormCommits.java``):
a JSON array, dates and timestamps as their day and microsecond numbers, decimals as text,
binary as base64. ``tests/sink/test_partitioning.py`` checks the spec's test vectors, and checks
every transform against the partitions Spark's own Iceberg writer gives the same rows.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import mmh3
import orjson

__all__ = ["PartitionField", "check_term", "partition_json", "partitioner", "transform_value"]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_DECIMAL = re.compile(r"decimal\(\s*\d+\s*,\s*\d+\s*\)")
_TEMPORAL = frozenset({"date", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"})
_BUCKETABLE = frozenset({"int", "long", "date", "time", "timestamp", "timestamptz", "string", "uuid", "binary"})
_TRUNCATABLE = frozenset({"int", "long", "string", "binary"})


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One field of a table's current partition spec, as the write tasks need it: its transform
    as Iceberg prints it (``bucket[16]``, ``day``), its source column and that column's Iceberg type."""

    transform: str
    column: str
    source_type: str


def _kind(iceberg_type: str) -> str:
    t = iceberg_type.strip().lower()
    if _DECIMAL.fullmatch(t):
        return "decimal"
    if t.startswith("fixed"):
        return "binary"
    return t


def check_term(transform: str, column: str, iceberg_type: str | None) -> str | None:
    """Why ``transform`` cannot partition ``column`` of ``iceberg_type`` (``None``: no such
    column), or ``None`` when it can.

    >>> check_term("day", "ts", "timestamptz") is None, check_term("hour", "d", "date")
    (True, 'hour(d): hour needs a timestamp column, d is date')
    """
    shown = f"{transform}({column})"
    if iceberg_type is None:
        return f"{shown}: the table has no column {column}"
    kind = _kind(iceberg_type)
    name = transform.split("[", 1)[0]
    if name in ("identity", "void"):
        return None
    if name == "bucket" and kind not in _BUCKETABLE | {"decimal"}:
        return f"{shown}: bucket cannot hash a {iceberg_type} column"
    if name == "truncate" and kind not in _TRUNCATABLE | {"decimal"}:
        return f"{shown}: truncate needs an int, long, decimal, string or binary column, {column} is {iceberg_type}"
    if name in ("year", "month", "day") and kind not in _TEMPORAL:
        return f"{shown}: {name} needs a date or timestamp column, {column} is {iceberg_type}"
    if name == "hour" and (kind not in _TEMPORAL or kind == "date"):
        return f"{shown}: hour needs a timestamp column, {column} is {iceberg_type}"
    return None


def _micros(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return (value - _EPOCH) // _MICRO


def _time_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _unscaled(value: Decimal) -> tuple[int, int]:
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digits)) or "0")
    return (-unscaled if sign else unscaled), -exponent


def _hash_bytes(kind: str, value: Any) -> bytes:
    """The bytes Iceberg hashes for a value of ``kind``."""
    if kind in ("int", "long"):
        return int(value).to_bytes(8, "little", signed=True)
    if kind == "date":
        return ((value - _EPOCH_DATE).days).to_bytes(8, "little", signed=True)
    if kind == "time":
        return _time_micros(value).to_bytes(8, "little", signed=True)
    if kind in ("timestamp", "timestamptz"):
        return _micros(value).to_bytes(8, "little", signed=True)
    if kind == "string":
        return str(value).encode("utf-8")
    if kind == "uuid":
        return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes
    if kind == "decimal":
        unscaled, _ = _unscaled(value)
        length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
        return unscaled.to_bytes(length, "big", signed=True)
    return bytes(value)


def _months(value: dt.date | dt.datetime) -> int:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return (value.year - 1970) * 12 + value.month - 1


def _truncate(kind: str, width: int, value: Any) -> Any:
    if kind in ("int", "long"):
        return value - value % width
    if kind == "decimal":
        unscaled, scale = _unscaled(value)
        return Decimal(unscaled - unscaled % width).scaleb(-scale)
    if kind == "string":
        return value[:width]
    return bytes(value)[:width]


def transform_value(transform: str, iceberg_type: str, value: Any) -> Any:
    """The partition value of ``value`` (a column value as the sink decodes it: int, str,
    Decimal, date, datetime, time, bytes, bool, float) under ``transform``.

    >>> transform_value("bucket[16]", "long", 34), transform_value("day", "date", dt.date(2017, 11, 16))
    (3, datetime.date(2017, 11, 16))
    """
    if value is None:
        return None
    name, _, arg = transform.partition("[")
    kind = _kind(iceberg_type)
    if name == "identity":
        return value
    if name == "void":
        return None
    if name == "bucket":
        return (mmh3.hash(_hash_bytes(kind, value), 0, signed=True) & 0x7FFFFFFF) % int(arg.rstrip("]"))
    if name == "truncate":
        return _truncate(kind, int(arg.rstrip("]")), value)
    if name == "year":
        return _months(value) // 12
    if name == "month":
        return _months(value)
    if name == "day":
        if isinstance(value, dt.datetime):
            return (_micros(value) // 86_400_000_000) * dt.timedelta(days=1) + _EPOCH_DATE
        return value
    if name == "hour":
        return _micros(value) // 3_600_000_000
    raise ValueError(f"unknown partition transform {transform!r}")


def _internal(value: Any) -> Any:
    """A partition value as the commit helper reads it from JSON (see the module)."""
    if isinstance(value, dt.datetime):
        return _micros(value)
    if isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days
    if isinstance(value, dt.time):
        return _time_micros(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def partition_json(values: Sequence[Any]) -> str:
    """A partition tuple (:func:`partitioner`'s) as the commit helper reads it.

    >>> partition_json((3, dt.date(1970, 1, 2), Decimal("1.50"), None))
    '[3,1,"1.50",null]'
    """
    return orjson.dumps([_internal(v) for v in values]).decode()


def partitioner(fields: Sequence[PartitionField]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function from a row (column name -> value) to its partition tuple under ``fields``."""
    parts = [(f.column, f.transform, f.source_type) for f in fields]

    def partition(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(transform_value(t, typ, row.get(col)) for col, t, typ in parts)

    return partition
