"""Alibaba DTS Avro: turning a field's Avro value into its column's value: character sets, time
zones, WKB geometry, the sample keys the column cache is keyed by, and the fast per-kind cell
converters of a table's row plan. Used by :class:`transforms.decoders.dts_avro.DtsAvroDecoder`."""

from __future__ import annotations

import codecs
import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders.dts_avro_types import _NS
from transforms.decoders.mysql_types import (
    wrap_unsigned_bigint,
)
from transforms.decoders.rowplan import NotFast, decimal_converter
from transforms.values import UNAVAILABLE

# ----------------------------------------------------------------------------- values

_MYSQL_CHARSETS = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "cp1252",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "ascii": "ascii",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "sjis": "shift_jis",
    "euckr": "euc_kr",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "tis620": "tis_620",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "al32utf8": "utf-8",
    "al16utf16": "utf-16-be",
    "zhs16gbk": "gbk",
    "zhs32gb18030": "gb18030",
    "zht16big5": "big5",
    "ja16sjis": "shift_jis",
    "we8iso8859p1": "latin-1",
    "we8mswin1252": "cp1252",
    "us7ascii": "ascii",
    "": "utf-8",
}


@lru_cache(maxsize=256)
def _codec(charset: str) -> str | None:
    """The Python text codec of a charset name; ``None`` for unknown names and for codecs that do
    not decode bytes to text (``base64``, ``zlib``, ``rot13`` ...)."""
    name = _MYSQL_CHARSETS.get(charset.lower(), charset)
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):  # ValueError: a name with NUL characters
        return None
    return info.name if getattr(info, "_is_text_encoding", True) else None


_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$")


_ZONE_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-/]{0,63}$")  # IANA names, e.g. America/Argentina/Buenos_Aires


def _zone(text: str) -> dt.tzinfo | None:
    text = text.strip()
    if text in ("Z", "UTC", "GMT"):
        return dt.UTC
    m = _OFFSET_RE.match(text)
    try:
        if m:
            sign = -1 if m.group(1) == "-" else 1
            return dt.timezone(sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0)))
        if not _ZONE_NAME_RE.match(text):
            return None
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # offsets of a day or more, odd names
        return None


_WKB_MAX_DEPTH = 32


def _wkb_end(raw: bytes, pos: int = 0, depth: int = 0) -> int | None:
    """Where the WKB (ISO or EWKB) geometry starting at ``pos`` ends, or ``None`` if it is not WKB."""
    if depth > _WKB_MAX_DEPTH or pos + 5 > len(raw) or raw[pos] not in (0, 1):
        return None
    order: Literal["little", "big"] = "little" if raw[pos] == 1 else "big"
    gtype = int.from_bytes(raw[pos + 1 : pos + 5], order)
    pos += 9 if gtype & 0x20000000 else 5  # EWKB: an SRID follows the type
    base = gtype & 0x0FFFFFFF
    dims = 2 + bool(gtype & 0x80000000) + bool(gtype & 0x40000000) + (0, 1, 1, 2)[min(base // 1000, 3)]
    base %= 1000
    point = 8 * dims

    def count(at: int) -> int | None:
        return int.from_bytes(raw[at : at + 4], order) if at + 4 <= len(raw) else None

    if base == 1:
        pos += point
    elif base in (2, 3):
        n = count(pos)
        if n is None:
            return None
        pos += 4
        if base == 2:
            pos += n * point
        else:
            for _ in range(n):
                points = count(pos)
                if points is None or pos > len(raw):
                    return None
                pos += 4 + points * point
    elif base in (4, 5, 6, 7):
        n = count(pos)
        if n is None or n > len(raw):
            return None
        pos += 4
        for _ in range(n):
            end = _wkb_end(raw, pos, depth + 1)
            if end is None:
                return None
            pos = end
    else:
        return None
    return pos if pos <= len(raw) else None


def _split_srid(raw: bytes) -> tuple[bytes, int | None]:
    """Pure WKB stays as it is; MySQL's internal form (4-byte little-endian SRID + WKB) is split."""
    if _wkb_end(raw) != len(raw) and len(raw) >= 9 and _wkb_end(raw, 4) == len(raw):
        return raw[4:], int.from_bytes(raw[:4], "little")
    return raw, None


# -- caches ----------------------------------------------------------------------------
#
# A record's columns follow from each field's name and type number and, for the fields whose number
# leaves the type open, from the kind of value sampled for it and a few facts about that value
# (decimal precision and scale, binary or text charset, ...): :func:`_sample_key` spells those
# facts out, so the columns (and the table schema) are cached by them instead of being rebuilt
# for every record. Rows are typed by a per-table plan: per column, a fast converter per kind of
# Avro value, which returns exactly what :meth:`DtsAvroDecoder._value` would or raises, and then
# ``_value`` runs (see :mod:`transforms.decoders.rowplan`).

_ABSENT = object()
"""A key a sample's body lacks (the column builders would fail on it: such a record is not cached)."""


def _sample_key(kind: Any, body: Any) -> tuple[Any, ...] | None:
    """What the column builders read of a sample value (kind and body), as a hashable key; None
    for a sample that is not cached (a stored type hint of an unexpected shape)."""
    if body is None:
        return (kind,) if kind is None or type(kind) is str else None
    if type(kind) is not str or type(body) is not dict:
        return None
    if kind == "Decimal":
        precision, scale = body.get("precision", _ABSENT), body.get("scale", _ABSENT)
        # typed: 10 and 10.0 (or True and 1) would give different columns
        return kind, type(precision), precision, type(scale), scale
    if kind == "Character":
        charset = body.get("charset", _ABSENT)
        return kind, charset if charset is _ABSENT else str(charset).lower() == "binary"
    if kind == "TextObject":
        obj_type = body.get("type", _ABSENT)
        return kind, obj_type if obj_type is _ABSENT else str(obj_type).upper()
    if kind == "DateTime":
        parts = (body.get(k, _ABSENT) for k in ("year", "month", "hour"))
        return kind, *(_ABSENT if v is _ABSENT else v is None for v in parts)
    return (kind,)


def _signature(
    mode: int, parts: list[tuple[Any, ...]], open_fields: list[int], samples: list[tuple[str | None, Any]]
) -> tuple[Any, ...] | None:
    """What a record's columns are built from: the source family (``mode``), per field its name
    and type number (``parts``) and, for the fields whose number leaves the type open, the sample's
    :func:`_sample_key`. None when a sample is not cacheable."""
    for i in open_fields:
        sample = _sample_key(*samples[i])
        if sample is None:
            return None
        parts[i] = (*parts[i], *sample)
    signature = (mode, tuple(parts))
    try:
        hash(signature)
    except TypeError:  # an unhashable precision or scale in a stored hint
        return None
    return signature


_CellConverter = Callable[[Any], Any]
"""The body of an Avro value → the typed value; raises (anything) to leave the cell to ``_value``."""


def _empty(body: Any) -> Any:
    return None if body == "NULL" else UNAVAILABLE


def _int_cell(ctype: ConnectType) -> _CellConverter:
    """``_integer`` then ``coerce`` of an in-range integer: the integer (BIGINT UNSIGNED wrapped)."""
    bits = {ConnectType.INT16: 16, ConnectType.INT32: 32, ConnectType.INT64: 64}[ctype]
    low, high, wrap = -(1 << (bits - 1)), 1 << (bits - 1), bits == 64

    def convert(body: Any) -> int:
        value = int(body["value"].strip())
        if wrap:
            value = wrap_unsigned_bigint(value)
        if low <= value < high:
            return value
        raise NotFast

    return convert


def _text_cell(body: Any) -> str:
    """A ``Character`` value of a text charset, decoded (a binary one goes the full way)."""
    charset = body["charset"]
    if charset.lower() == "binary":
        raise NotFast
    codec = _codec(charset)
    if codec is None:
        raise NotFast
    return body["value"].decode(codec)


def _same(kind: type) -> _CellConverter:
    """A value whose body already holds the typed value (bytes in a bytes column, ...)."""

    def convert(body: Any) -> Any:
        value = body["value"]
        if type(value) is kind:
            return value
        raise NotFast

    return convert


def _decimal_cell(body: Any) -> Decimal:
    return decimal_converter(body["value"].strip())


def _datetime_cell(fraction_per_second: int, logical: str) -> _CellConverter:
    """``_datetime`` of a complete, non-zero date (a timestamp or a date) or of a time of day."""
    if logical == Logical.MICRO_TIME:

        def to_time(body: Any) -> dt.timedelta:
            micros = (body["millis"] or 0) * 1_000_000 // fraction_per_second
            return dt.timedelta(
                hours=body["hour"] or 0,
                minutes=body["minute"] or 0,
                seconds=body["second"] or 0,
                microseconds=micros,
            )

        return to_time
    date_only = logical == Logical.DATE

    def to_datetime(body: Any, zone: dt.tzinfo | None = None) -> dt.date:
        year, month, day = body["year"], body["month"], body["day"]
        if not (year and month and day):
            raise NotFast  # missing or zero ("0000-00-00", NULL): the full path says which
        if date_only:
            return dt.date(year, month, day)
        micros = (body["millis"] or 0) * 1_000_000 // fraction_per_second
        hour, minute, second = body["hour"] or 0, body["minute"] or 0, body["second"] or 0
        return dt.datetime(year, month, day, hour, minute, second, micros, zone)

    if logical != Logical.ZONED_TIMESTAMP:
        return to_datetime

    def to_zoned(body: Any) -> dt.date:
        zone = _zone(body["timezone"])
        if zone is None:
            raise NotFast
        return to_datetime(body["value"], zone)

    return to_zoned


def _epoch_cell(body: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(body["timestamp"], dt.UTC) + dt.timedelta(microseconds=body["millis"])


_STRING_LOGICALS = frozenset({None, Logical.JSON, Logical.XML, Logical.UUID, Logical.ENUM, Logical.ENUM_SET})
"""String columns whose coercion keeps a string as it is."""


def _cell_converters(col: Column, fraction_per_second: int) -> dict[str, _CellConverter]:
    """The fast converters of a column by Avro value kind (full record name), see the caches note."""
    out: dict[str, _CellConverter] = {_NS + "EmptyObject": _empty}
    ctype, logical = col.type, col.logical
    if logical is None and ctype in (ConnectType.INT16, ConnectType.INT32, ConnectType.INT64):
        out[_NS + "Integer"] = _int_cell(ctype)
    elif ctype is ConnectType.STRING and logical in _STRING_LOGICALS:
        out[_NS + "Character"] = _text_cell
        out[_NS + "TextObject"] = _same(str)
    elif logical is None and ctype is ConnectType.BYTES:
        out[_NS + "Character"] = out[_NS + "BinaryObject"] = _same(bytes)
    elif logical is None and ctype in (ConnectType.FLOAT64, ConnectType.FLOAT32):
        out[_NS + "Float"] = _same(float)
    elif col.is_decimal:
        out[_NS + "Decimal"] = _decimal_cell
    elif logical in (Logical.MICRO_TIMESTAMP, Logical.DATE, Logical.MICRO_TIME):
        out[_NS + "DateTime"] = _datetime_cell(fraction_per_second, logical)
    elif logical == Logical.ZONED_TIMESTAMP:
        out[_NS + "TimestampWithTimeZone"] = _datetime_cell(fraction_per_second, logical)
        out[_NS + "Timestamp"] = _epoch_cell
    return out
