"""Typed column values: coercion of raw source values, and their Connect JSON encoding.

Decoders turn raw vendor values (strings, numbers, base64, epoch numbers) into Python values
typed by the column: ``int``, ``float``, ``bool``, ``str``, ``bytes``, :class:`~decimal.Decimal`,
:class:`~datetime.date`, naive or aware :class:`~datetime.datetime`, :class:`~datetime.timedelta`
for times of day, ``dict``/``list`` for structs and arrays. The emitter then encodes them the way
Debezium does, under ``decimal.handling.mode``.

:data:`UNAVAILABLE` marks a column that is absent from a change (not NULL).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
import struct
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import orjson

from transforms.connect import Column, ConnectType, DecimalHandlingMode, Logical
from transforms.errors import caused_by

__all__ = [
    "EPOCH",
    "EPOCH_DATE",
    "EPOCH_UNITS",
    "UNAVAILABLE",
    "UNAVAILABLE_BYTES",
    "CoercionError",
    "coerce",
    "date_from_epoch",
    "decimal_from_unscaled",
    "encoder_for",
    "encoder_passes",
    "epoch_units",
    "exact_context",
    "float32_json",
    "infer_column",
    "minimal_bytes",
    "parse_datetime",
    "parse_time",
    "timestamp_from_epoch",
    "unscaled_bytes",
]

UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's placeholder for a column whose value is not present in this change."""

UNAVAILABLE_BYTES = base64.b64encode(UNAVAILABLE.encode()).decode("ascii")
"""The placeholder in a bytes column, as Connect JSON writes it: its UTF-8 bytes, base64-encoded."""

EPOCH = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_DATE = dt.date(1970, 1, 1)

_INT_TYPES = frozenset({ConnectType.INT8, ConnectType.INT16, ConnectType.INT32, ConnectType.INT64})


class CoercionError(ValueError):
    """A raw value does not fit its column's type. Decoders wrap it into a DecodeError."""


# ---------------------------------------------------------------------------- parsing

_DT_RE = re.compile(
    r"^(-?\d{4,})-(\d{1,2})-(\d{1,2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"\s*(Z|z|UTC|[+-]\d{2}:?\d{2}|[+-]\d{2})?$"
)
_TIME_RE = re.compile(r"^(-)?(\d+):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?$")


def _tz(text: str | None) -> dt.tzinfo | None:
    if not text:
        return None
    if text in ("Z", "z", "UTC"):
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4] or 0)
    return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))


_FRACTION_DIGITS = frozenset("0123456789")


def _iso_datetime(text: str) -> dt.datetime | None:
    """The common shapes (``YYYY-MM-DD``, ``YYYY-MM-DD[T ]HH:MM:SS[.f{1,6}][Z|±HH:MM]``, ASCII)
    parsed by ``datetime.fromisoformat``; ``None`` for anything else (the regex path decides).
    On these shapes both give the same value, and where fromisoformat fails the regex path
    raises the error."""
    n = len(text)
    if n != 10 and n < 19:
        return None
    if text[4] != "-" or text[7] != "-" or not text.isascii():
        return None
    if n > 10:
        if text[10] not in "T " or text[13] != ":" or text[16] != ":":
            return None
        rest = text[19:]
        if rest.endswith("Z"):
            rest = rest[:-1]
        elif len(rest) >= 6 and rest[-6] in "+-" and rest[-3] == ":":
            rest = rest[:-6]
        if rest and not (rest[0] == "." and 2 <= len(rest) <= 7 and _FRACTION_DIGITS.issuperset(rest[1:])):
            return None
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_datetime(text: str) -> dt.datetime:
    """Parse a SQL/ISO datetime; the result is aware only if the text has a zone.

    Fractions beyond microseconds are truncated. Zero dates (``0000-00-00``) are errors.

    >>> parse_datetime("2020-01-02 03:04:05.123")
    datetime.datetime(2020, 1, 2, 3, 4, 5, 123000)
    >>> parse_datetime("2020-01-02T03:04:05Z").tzinfo
    datetime.timezone.utc
    """
    text = text.strip()
    fast = _iso_datetime(text)
    if fast is not None:
        return fast
    m = _DT_RE.match(text)
    if not m:
        raise CoercionError(f"expected a date/time like 'YYYY-MM-DD HH:MM:SS', found {text!r}")
    year, month, day, hh, mm, ss, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        return dt.datetime(
            int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0), micro, _tz(zone)
        )
    except ValueError as exc:
        raise caused_by(CoercionError(f"invalid date/time {text!r}: {exc}"), exc) from exc


def parse_time(text: str) -> dt.timedelta:
    """Parse a SQL TIME (may be negative or beyond 24h) into a timedelta.

    >>> parse_time("838:59:59")
    datetime.timedelta(days=34, seconds=82799)
    """
    m = _TIME_RE.match(text.strip())
    if not m:
        raise CoercionError(f"expected a time like 'HH:MM:SS', found {text!r}")
    neg, hh, mm, ss, frac = m.groups()
    delta = dt.timedelta(
        hours=int(hh), minutes=int(mm), seconds=int(ss or 0), microseconds=int((frac or "0")[:6].ljust(6, "0"))
    )
    return -delta if neg else delta


def decimal_from_unscaled(raw: bytes, scale: int) -> Decimal:
    """Decode a big-endian two's complement unscaled integer (Connect Decimal bytes).

    Exact at any number of digits (the decimal is built from the integer's digits, not computed
    in a context of limited precision).

    >>> decimal_from_unscaled(bytes.fromhex("12d687"), 2)
    Decimal('12345.67')
    """
    # the constructor reads text exactly, whatever the context's precision
    return Decimal(f"{int.from_bytes(raw, 'big', signed=True)}E{-scale}")


def exact_context(value: Decimal, scale: int) -> Context:
    """A decimal context in which ``value`` at ``scale`` digits after the point is exact.

    Python's default context has 28 significant digits; MySQL's DECIMAL has up to 65 and
    PostgreSQL's NUMERIC up to 1000, so arithmetic on such values needs a local context sized
    from the value (never a change of the global one).
    """
    integral = max(value.adjusted(), 0) + 1 if value.is_finite() else 1
    return Context(prec=integral + max(scale, 0) + 2, rounding=ROUND_HALF_EVEN, Emax=999_999, Emin=-999_999)


def unscaled_bytes(value: Decimal, scale: int) -> bytes:
    """The Connect Decimal bytes of a value at a fixed scale (rounded half-even), exact at any
    number of digits.

    >>> decimal_from_unscaled(unscaled_bytes(Decimal("123456789876543212345678987654321.110"), 3), 3)
    Decimal('123456789876543212345678987654321.110')
    >>> unscaled_bytes(Decimal("-1.28"), 2).hex(), unscaled_bytes(Decimal("1.28"), 2).hex()
    ('80', '0080')
    """
    if value.is_finite():
        # exact: the value's ratio (the denominator a power of ten) at the scale, rounded half-even
        # once (a context sized to the scale would round the digits beyond it first: ...370.504361
        # became ...370.50, then 370 instead of 371)
        numerator, denominator = value.as_integer_ratio()
        if scale >= 0:
            numerator *= 10**scale
        else:
            denominator *= 10**-scale
        unscaled, remainder = divmod(numerator, denominator)  # floor, remainder >= 0
        if remainder:
            twice = 2 * remainder
            if twice > denominator or (twice == denominator and unscaled & 1):
                unscaled += 1
    else:  # no number: as Decimal says (int() of a NaN or an infinity raises)
        unscaled = int(value)
    return minimal_bytes(unscaled)


def minimal_bytes(unscaled: int) -> bytes:
    """The fewest big-endian two's complement bytes of an integer, as Java's
    ``BigInteger.toByteArray``: -128 is 0x80, not 0xff80 (Connect's JsonConverter writes a
    decimal back that way, so a longer form does not round-trip).

    >>> minimal_bytes(-128).hex(), minimal_bytes(128).hex(), minimal_bytes(0).hex()
    ('80', '0080', '00')
    """
    magnitude = unscaled if unscaled >= 0 else ~unscaled
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


# ---------------------------------------------------------------------------- coercion


def _to_int(raw: Any) -> int:
    if isinstance(raw, bool):
        return int(raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if raw.is_integer():
            return int(raw)
        raise CoercionError(f"expected an integer, found {raw!r}")
    if isinstance(raw, Decimal):
        if raw == raw.to_integral_value():
            return int(raw)
        raise CoercionError(f"expected an integer, found {raw!r}")
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return int(text)
        except ValueError:
            try:
                return _to_int(Decimal(text))
            except InvalidOperation:
                pass
    raise CoercionError(f"expected an integer, found {raw!r}")


def _to_float(raw: Any) -> float:
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, int | float | Decimal):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            pass
    raise CoercionError(f"expected a number, found {raw!r}")


_TRUE = frozenset({"true", "t", "1", "y", "yes"})
_FALSE = frozenset({"false", "f", "0", "n", "no"})


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise CoercionError(f"expected a boolean, found {raw!r}")


def _to_str(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict | list):
        return orjson.dumps(raw).decode()
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return str(raw)


def _to_bytes(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        try:
            return raw.encode("latin-1")
        except UnicodeEncodeError:
            return raw.encode("utf-8")
    raise CoercionError(f"expected bytes, found {raw!r}")


def _to_decimal(raw: Any) -> Decimal:
    if isinstance(raw, Decimal):
        return raw
    if isinstance(raw, bool):
        raise CoercionError(f"expected a decimal, found {raw!r}")
    if isinstance(raw, int):
        return Decimal(raw)
    if isinstance(raw, float):
        return Decimal(repr(raw))
    if isinstance(raw, str):
        try:
            value = Decimal(raw.strip())
        except InvalidOperation:
            pass
        else:
            if value.is_finite():
                return value
    raise CoercionError(f"expected a decimal, found {raw!r}")


def _to_date(raw: Any) -> dt.date:
    if isinstance(raw, dt.datetime):
        return raw.date()
    if isinstance(raw, dt.date):
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        return date_from_epoch(raw)
    if isinstance(raw, str):
        return parse_datetime(raw).date()
    raise CoercionError(f"expected a date, found {raw!r}")


def date_from_epoch(days: int) -> dt.date:
    """The date ``days`` after 1970-01-01 (a Connect ``Date``, Debezium's ``io.debezium.time.Date``)."""
    return EPOCH_DATE + dt.timedelta(days=days)


def timestamp_from_epoch(units: int, per_second: int) -> dt.datetime:
    """The naive datetime ``units`` (``per_second`` of them a second) after the epoch."""
    seconds, rest = divmod(units, per_second)
    return EPOCH + dt.timedelta(seconds=seconds, microseconds=rest * 1_000_000 // per_second)


EPOCH_UNITS = {
    Logical.TIMESTAMP: 1_000,
    Logical.CONNECT_TIMESTAMP: 1_000,
    Logical.MICRO_TIMESTAMP: 1_000_000,
    Logical.NANO_TIMESTAMP: 1_000_000_000,
}


def _to_timestamp(raw: Any, logical: str) -> dt.datetime:
    if isinstance(raw, dt.datetime):
        return raw
    if isinstance(raw, dt.date):
        return dt.datetime(raw.year, raw.month, raw.day)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return timestamp_from_epoch(raw, EPOCH_UNITS.get(logical, 1_000))
    if isinstance(raw, str):
        value = parse_datetime(raw)
        if logical == Logical.ZONED_TIMESTAMP and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value
    raise CoercionError(f"expected a timestamp, found {raw!r}")


_TIME_UNITS = {
    Logical.TIME: 1_000,
    Logical.CONNECT_TIME: 1_000,
    Logical.MICRO_TIME: 1_000_000,
    Logical.NANO_TIME: 1_000_000_000,
}


def _to_time(raw: Any, logical: str) -> dt.timedelta:
    if isinstance(raw, dt.timedelta):
        return raw
    if isinstance(raw, dt.time):
        return dt.timedelta(hours=raw.hour, minutes=raw.minute, seconds=raw.second, microseconds=raw.microsecond)
    if isinstance(raw, int) and not isinstance(raw, bool):
        per_second = _TIME_UNITS.get(logical, 1_000_000)
        return dt.timedelta(microseconds=raw * 1_000_000 // per_second)
    if isinstance(raw, str):
        return parse_time(raw)
    raise CoercionError(f"expected a time, found {raw!r}")


def coerce(col: Column, raw: Any) -> Any:
    """Turn a raw source value into the Python value typed by ``col``.

    ``None`` stays ``None`` (SQL NULL) and :data:`UNAVAILABLE` stays absent.
    Raises :class:`CoercionError` when the value cannot be that type.

    >>> coerce(Column("id", ConnectType.INT64), "1")
    1
    >>> coerce(Column.decimal("p", 5, 2), "1.5")
    Decimal('1.5')
    """
    if raw is None:
        return raw
    kind = type(raw)
    if kind is str:
        if raw == UNAVAILABLE:
            return raw
    elif isinstance(raw, str) and raw == UNAVAILABLE:
        return raw
    logical = col.logical
    if logical is None:
        # fast paths: the value already has the column's type (the same results as below)
        ctype = col.type
        if kind is str:
            if ctype is ConnectType.STRING:
                return raw
        elif kind is int:
            if ctype in _INT_TYPES:
                return raw
        elif kind is float and (ctype is ConnectType.FLOAT64 or ctype is ConnectType.FLOAT32):
            return raw
    if logical:
        if col.is_decimal:
            return _to_decimal(raw)
        if logical in (Logical.DATE, Logical.CONNECT_DATE):
            return _to_date(raw)
        if logical in EPOCH_UNITS or logical == Logical.ZONED_TIMESTAMP:
            return _to_timestamp(raw, logical)
        if logical in _TIME_UNITS:
            return _to_time(raw, logical)
        if logical == Logical.YEAR:
            return _to_int(raw)
        if logical in (Logical.JSON, Logical.XML, Logical.UUID, Logical.ENUM, Logical.ENUM_SET, Logical.ZONED_TIME):
            return _to_str(raw)
    ctype = col.type
    if ctype in _INT_TYPES:
        return _to_int(raw)
    if ctype is ConnectType.STRING:
        return _to_str(raw)
    if ctype in (ConnectType.FLOAT64, ConnectType.FLOAT32):
        return _to_float(raw)
    if ctype is ConnectType.BOOLEAN:
        return _to_bool(raw)
    if ctype is ConnectType.BYTES:
        return _to_bytes(raw)
    if ctype is ConnectType.STRUCT:
        if not isinstance(raw, dict):
            raise CoercionError(f"expected an object, found {raw!r}")
        by_name = {f.name: f for f in col.fields}
        return {k: coerce(by_name[k], v) if k in by_name else v for k, v in raw.items()}
    if ctype is ConnectType.ARRAY:
        if not isinstance(raw, list):
            raise CoercionError(f"expected an array, found {raw!r}")
        return [coerce(col.items, v) for v in raw] if col.items else raw
    return raw


def infer_column(name: str, value: Any) -> Column:
    """A column for a value of unknown type (schemaless input); ``null`` infers a string.

    An integer beyond int64 (a ``BIGINT UNSIGNED`` above 2^63-1) infers an exact integer
    decimal (Connect ``Decimal`` of scale 0, as Debezium's precise mode), never ``int64``.

    >>> infer_column("n", 5).type
    <ConnectType.INT64: 'int64'>
    >>> infer_column("n", 2**64 - 1).params
    (('scale', '0'),)
    """
    if isinstance(value, bool):
        return Column(name, ConnectType.BOOLEAN)
    if isinstance(value, int):
        if -(1 << 63) <= value < 1 << 63:
            return Column(name, ConnectType.INT64)
        return Column.decimal(name, None, 0)
    if isinstance(value, float):
        return Column(name, ConnectType.FLOAT64)
    if isinstance(value, Decimal):
        return Column.decimal(name, None, None)
    if isinstance(value, bytes):
        return Column(name, ConnectType.BYTES)
    if isinstance(value, dt.datetime):
        return Column(name, ConnectType.STRING, logical=Logical.ZONED_TIMESTAMP) if value.tzinfo else Column(
            name, ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP
        )
    if isinstance(value, dt.date):
        return Column(name, ConnectType.INT32, logical=Logical.DATE)
    if isinstance(value, dict):
        return Column(name, ConnectType.STRING, logical=Logical.JSON)
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            return Column(name, ConnectType.ARRAY, items=Column("", ConnectType.STRING))
        return Column(name, ConnectType.STRING, logical=Logical.JSON)
    return Column(name, ConnectType.STRING)


# ---------------------------------------------------------------------------- encoding

Encoder = Callable[[Any], Any]


# base64.b64encode and b64decode are Python functions around binascii: called per value from a
# compiled module, their frames cost more than the work (these are what they do, compiled)
def _b64(value: bytes) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def b64decode(text: str) -> bytes:
    """Strict base64 decoding, as ``base64.b64decode(text, validate=True)`` (raises CoercionError).

    >>> b64decode("AQI=")
    b'\\x01\\x02'
    >>> b64decode("AQI")
    Traceback (most recent call last):
    ...
    transforms.values.CoercionError: expected base64, found 'AQI'
    """
    try:
        return binascii.a2b_base64(text.encode("ascii") if isinstance(text, str) else text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # non-ASCII text: UnicodeEncodeError
        raise caused_by(CoercionError(f"expected base64, found {text[:40]!r}"), exc) from exc


def _plain(value: Decimal) -> str:
    return format(value, "f")


def _zoned(value: dt.datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def epoch_units(value: dt.datetime, per_second: int) -> int:
    """A datetime as ``per_second`` units since the epoch (naive: UTC wall time), as Connect JSON holds it."""
    base = EPOCH_UTC if value.tzinfo else EPOCH
    delta = value - base
    return (delta.days * 86_400 + delta.seconds) * per_second + delta.microseconds * per_second // 1_000_000


def _time_units(value: dt.timedelta, per_second: int) -> int:
    return (value.days * 86_400 + value.seconds) * per_second + value.microseconds * per_second // 1_000_000


_F32 = struct.Struct("<f")


def float32_json(value: Any) -> float:
    """A ``float`` (32-bit) column's value as Connect writes it: rounded to 32 bits, then the
    shortest decimal that reads back as the same 32-bit float (what Java's ``Float.toString``
    writes), so ``1.1`` stays ``1.1`` and not ``1.100000023841858``.

    >>> float32_json(1.1), float32_json(9223372036854775808.0)
    (1.1, 9.223372e+18)
    """
    try:
        single = _F32.unpack(_F32.pack(float(value)))[0]
    except (OverflowError, TypeError, ValueError) as exc:
        raise caused_by(CoercionError(f"{value!r} does not fit a 32-bit float"), exc) from exc
    if single != single or single in (math.inf, -math.inf):
        return single
    for digits in range(6, 10):
        shortest = float(f"{single:.{digits}g}")
        if _F32.unpack(_F32.pack(shortest))[0] == single:
            return shortest
    return single


def _guard(fn: Encoder, passes: type | None = None) -> Encoder:
    """``fn`` with ``None`` and the UNAVAILABLE marker passed through.

    ``passes`` names a type whose values ``fn`` returns unchanged; emitters read it as
    ``encoder_passes(encoder)`` to skip the call for such cells.
    """

    def encode(value: Any) -> Any:
        if value is None or (isinstance(value, str) and value == UNAVAILABLE):
            return value
        return fn(value)

    if passes is not None:
        encode.passes = passes  # type: ignore[attr-defined]
    return encode


def encoder_passes(encoder: Encoder) -> type:
    """The type whose values ``encoder`` (from :func:`encoder_for`) returns unchanged, or ``NoneType``."""
    passes: type = getattr(encoder, "passes", type(None))
    return passes


@lru_cache(maxsize=4096)
def encoder_for(col: Column, mode: DecimalHandlingMode) -> Encoder | None:
    """The Connect JSON encoder of a column, or ``None`` when values pass through as they are."""
    logical = col.logical
    if col.is_decimal:
        if mode is DecimalHandlingMode.DOUBLE:
            return _guard(float)
        if mode is DecimalHandlingMode.STRING:
            return _guard(lambda v: _plain(_to_decimal(v)))
        if logical == Logical.VARIABLE_SCALE_DECIMAL:

            def variable(v: Any) -> Any:
                d = _to_decimal(v)
                scale = max(0, -int(d.as_tuple().exponent))
                return {"scale": scale, "value": _b64(unscaled_bytes(d, scale))}

            return _guard(variable)
        scale = col.scale or 0
        return _guard(lambda v: _b64(unscaled_bytes(_to_decimal(v), scale)))
    if logical in (Logical.DATE, Logical.CONNECT_DATE):
        return _guard(lambda v: (_to_date(v) - EPOCH_DATE).days)
    if logical in EPOCH_UNITS:
        per_second = EPOCH_UNITS[logical]
        return _guard(lambda v: epoch_units(_to_timestamp(v, logical), per_second))
    if logical == Logical.ZONED_TIMESTAMP:
        return _guard(lambda v: _zoned(v) if isinstance(v, dt.datetime) else v, str)
    if logical in _TIME_UNITS:
        per_second = _TIME_UNITS[logical]
        return _guard(lambda v: _time_units(_to_time(v, logical), per_second))
    ctype = col.type
    if ctype is ConnectType.BYTES:
        return _guard(lambda v: _b64(v) if isinstance(v, bytes) else v, str)
    if ctype is ConnectType.STRUCT and col.fields:
        members = [(f.name, encoder_for(f, mode)) for f in col.fields]

        def struct(v: Any) -> Any:
            if not isinstance(v, dict):
                return v
            out = dict(v)
            for name, enc in members:
                if enc is not None and name in out:
                    out[name] = enc(out[name])
            return out

        return _guard(struct)
    if ctype is ConnectType.ARRAY and col.items is not None:
        item_enc = encoder_for(col.items, mode)
        if item_enc is not None:
            enc = item_enc
            return _guard(lambda v: [enc(x) for x in v] if isinstance(v, list) else v)
    if ctype is ConnectType.STRING:
        return _guard(lambda v: v if isinstance(v, str) else _to_str(v), str)
    if ctype is ConnectType.FLOAT32:
        return _guard(float32_json)
    return None
