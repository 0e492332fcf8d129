"""A Debezium source block: MongoDB's extended JSON (:func:`from_extended_json`), the sortable
``source.sequence`` (:func:`position_sequence`) and snapshot markers. Part of
:mod:`transforms.decoders.connect_json`."""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from transforms.decoders.connect_schema import FieldError
from transforms.decoders.fields import INT64_MAX, INT64_MIN, parse_int
from transforms.envelope import (
    SnapshotMarker,
)
from transforms.errors import caused_by
from transforms.values import CoercionError, b64decode

if TYPE_CHECKING:
    pass


# ---------------------------------------------------------------------------- MongoDB


def _ext_date(value: Any) -> dt.datetime | str:
    if isinstance(value, dict) and "$numberLong" in value:
        value = value["$numberLong"]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=value)
        except OverflowError as exc:
            raise caused_by(CoercionError(f"$date {value} is out of range"), exc) from exc
    if isinstance(value, str):
        return value
    raise CoercionError(f"expected a $date, found {value!r:.60}")


_NOT_SCALAR: Any = object()


def _extended_scalar(value: dict[str, Any]) -> Any:
    """The typed value of an Extended JSON wrapper (``{"$oid": ...}`` ...), else ``_NOT_SCALAR``."""
    if len(value) not in (1, 2):
        return _NOT_SCALAR
    keys = set(value)
    try:
        if keys == {"$oid"} and isinstance(value["$oid"], str):
            return value["$oid"]
        if keys <= {"$numberLong", "$numberInt"}:
            whole = int(next(iter(value.values())))
            return whole if INT64_MIN <= whole <= INT64_MAX else _NOT_SCALAR
        if keys == {"$numberDouble"}:
            number = float(value["$numberDouble"])
            return number if math.isfinite(number) else str(value["$numberDouble"])
        if keys == {"$numberDecimal"}:
            dec = Decimal(str(value["$numberDecimal"]))
            return dec if dec.is_finite() else str(value["$numberDecimal"])
        if keys == {"$date"}:
            return _ext_date(value["$date"])
        if "$binary" in keys:
            data = value["$binary"]
            text = data.get("base64") if isinstance(data, dict) else data
            if isinstance(text, str):
                return b64decode(text)
    except (ValueError, TypeError, ArithmeticError):  # CoercionError is a ValueError
        return _NOT_SCALAR
    return _NOT_SCALAR


def _relaxed(value: Any) -> Any:
    """Extended JSON with its wrappers as plain JSON values (dates ISO text, bytes base64)."""
    if isinstance(value, dict):
        scalar = _extended_scalar(value)
        if scalar is _NOT_SCALAR:
            return {k: _relaxed(v) for k, v in value.items()}
        if isinstance(scalar, dt.datetime):
            return scalar.isoformat().replace("+00:00", "Z")
        if isinstance(scalar, bytes):
            return base64.b64encode(scalar).decode("ascii")
        if isinstance(scalar, Decimal):
            return str(scalar)
        return scalar
    if isinstance(value, list):
        return [_relaxed(v) for v in value]
    return value


def from_extended_json(value: Any) -> Any:
    """A MongoDB Extended JSON value as a plain typed value, where one fits.

    ``$oid`` → str, ``$numberLong``/``$numberInt`` → int, ``$numberDouble`` → float (non-finite
    stays a string), ``$numberDecimal`` → Decimal, ``$date`` → UTC datetime, ``$binary`` → bytes.
    Other documents and arrays are returned with their members converted (relaxed JSON).

    >>> from_extended_json({"$numberLong": "17"})
    17
    >>> from_extended_json({"city": {"$numberInt": "7"}})
    {'city': 7}
    """
    if isinstance(value, dict):
        scalar = _extended_scalar(value)
        return _relaxed(value) if scalar is _NOT_SCALAR else scalar
    if isinstance(value, list):
        return _relaxed(value)
    return value


# ---------------------------------------------------------------------------- source block

_FILE_SUFFIX = re.compile(r"^(.*?)([0-9]{1,18})$")


def _int(value: Any) -> int | None:
    """An int64, or a string of ASCII digits holding one (position fields); ``None`` otherwise."""
    if type(value) is int:  # the common case, as parse_int takes it
        return value if INT64_MIN <= value <= INT64_MAX else None
    if value is None or (isinstance(value, str) and not value.isdigit()):
        return None
    return parse_int(value)


_FILE_NAMES: dict[str, str] = {}
"""Binlog file name -> its sortable form (see :func:`_sortable_file`); cleared when full."""
_MAX_FILE_NAMES = 1024


def _sortable_file(file: str) -> str:
    """A binlog file name with its numeric suffix zero-padded, so that names sort in order."""
    name = _FILE_NAMES.get(file)
    if name is None:
        m = _FILE_SUFFIX.match(file)
        name = f"{m.group(1)}{int(m.group(2)):010d}" if m else file
        if len(_FILE_NAMES) >= _MAX_FILE_NAMES:
            _FILE_NAMES.clear()
        _FILE_NAMES[file] = name
    return name


def position_sequence(fields: Mapping[str, Any], ts_ms: int | None = None) -> str | None:
    """A string that sorts in source order, from a Debezium-style source block's position fields.

    MySQL binlog ``file``/``pos``/``row``; Postgres ``lsn``; Oracle ``scn``; SQL Server
    ``change_lsn``/``event_serial_no``; MongoDB ``ord`` within the second of ``ts_ms``;
    else the source's own ``sequence`` string. ``None`` when there is no position.

    >>> position_sequence({"file": "mysql-bin.000003", "pos": 154, "row": 0})
    'mysql-bin.0000000003:00000000000000000154:00000'
    >>> position_sequence({"lsn": 34078720})
    '00000000000034078720'
    """
    return _position(fields, ts_ms, fields.get("sequence"))


def _position(fields: Mapping[str, Any], ts_ms: int | None, sequence: Any) -> str | None:
    """:func:`position_sequence` of ``fields`` with ``sequence`` as their ``sequence`` field."""
    file, pos = fields.get("file"), _int(fields.get("pos"))
    if isinstance(file, str) and file and pos is not None:
        row = _int(fields.get("row")) or 0
        return f"{_sortable_file(file)}:{pos:020d}:{row:05d}"
    lsn = _int(fields.get("lsn"))
    if lsn is not None:
        return f"{lsn:020d}"
    scn = _int(fields.get("scn"))
    if scn is not None:
        return f"{scn:020d}"
    change_lsn = fields.get("change_lsn")
    if isinstance(change_lsn, str) and change_lsn:
        serial = _int(fields.get("event_serial_no")) or 0
        return f"{change_lsn}:{serial:010d}"
    order = _int(fields.get("ord"))
    if order is not None and ts_ms is not None:
        return f"{ts_ms // 1000:012d}:{order:010d}"
    if isinstance(sequence, str) and sequence:
        return sequence
    return None


_SNAPSHOT = {
    "true": SnapshotMarker.TRUE,
    "first": SnapshotMarker.TRUE,
    "first_in_data_collection": SnapshotMarker.TRUE,
    "last_in_data_collection": SnapshotMarker.TRUE,
    "incremental": SnapshotMarker.TRUE,
    "last": SnapshotMarker.LAST,
    "false": SnapshotMarker.FALSE,
}


def snapshot_marker(value: Any) -> SnapshotMarker:
    """``source.snapshot`` as a marker; Debezium 0.x booleans and later phase names are accepted."""
    if value is None or value is False:
        return SnapshotMarker.FALSE
    if value is True:
        return SnapshotMarker.TRUE
    if isinstance(value, str):
        marker = _SNAPSHOT.get(value)
        if marker is None:
            marker = _SNAPSHOT.get(value.lower())
        if marker is not None:
            return marker
    raise FieldError("source.snapshot", f"expected true, last or false, found {value!r}")


_RENAMED = {"version": "source_version", "connector": "source_connector", "name": "source_name"}
_NAME_FIELDS = frozenset({"db", "schema", "table", "collection", "ts_ms", "snapshot", "sequence"})
_SOURCE_NAMES: dict[str, str | None] = {**dict.fromkeys(_NAME_FIELDS), **_RENAMED}
"""A source field's name in ``SourceInfo.fields``, None for those it leaves out (others keep theirs)."""
