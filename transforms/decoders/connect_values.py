"""Kafka Connect JSON values typed by their column (:func:`decode_value`, :func:`decode_row`) and
the row layouts that decode a table's rows fast (:class:`RowLayout`). Part of
:mod:`transforms.decoders.connect_json`."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypeVar

from transforms.connect import Column, ConnectType, DecimalHandlingMode, Logical
from transforms.decoders.base import MAX_DECIMAL_EXPONENT, check_decimal_params, check_value, coerce_checked
from transforms.decoders.connect_schema import FieldError
from transforms.decoders.fields import INT64_MAX, INT64_MIN
from transforms.decoders.rowplan import FastConverter, NotFast, RowPlan, fast_converter
from transforms.errors import caused_by
from transforms.values import EPOCH_UNITS, UNAVAILABLE, CoercionError, _b64, b64decode, decimal_from_unscaled

T = TypeVar("T")

if TYPE_CHECKING:
    pass


# ---------------------------------------------------------------------------- values


_MAX_UNSCALED_BYTES = 512
"""Connect Decimal bytes beyond this are more digits than any decimal may have."""

_WITHIN_BOUNDS_BYTES = 400
"""Connect Decimal bytes of at most this length hold at most 964 digits (2^3200 < 10^964), so at a
scale of 0..MAX_DECIMAL_EXPONENT the value is within check_value's bounds (at most 1000 digits,
adjusted exponent within ±1000) and needs no check."""


def _unscaled(data: bytes, scale: int) -> Decimal:
    if len(data) > _MAX_UNSCALED_BYTES:
        raise CoercionError(f"Connect Decimal of {len(data)} bytes is beyond {_MAX_UNSCALED_BYTES}")
    try:
        check_decimal_params(None, scale)
    except ValueError as exc:
        raise caused_by(CoercionError(str(exc)), exc) from exc
    return decimal_from_unscaled(data, scale)


def _decimal(col: Column, raw: Any) -> Decimal:
    if isinstance(raw, Decimal):
        if raw.is_finite():
            return raw
        raise CoercionError(f"expected a finite decimal, found {raw!r}")
    if isinstance(raw, str):
        try:
            return _unscaled(b64decode(raw), col.scale or 0)
        except CoercionError:
            pass
        try:
            value = Decimal(raw.strip())
        except InvalidOperation:
            value = Decimal("nan")
        if value.is_finite():
            return value
        raise CoercionError(f"expected a base64 Connect Decimal, found {raw[:40]!r}")
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise CoercionError(f"expected a finite decimal, found {raw!r}")
        if _FIRST_PASS.get():  # the digits beyond a float's may be gone: read the message exactly
            raise InexactNumber
        # read exactly (a longer number would be a Decimal), or a caller's own float: its repr
        return Decimal(repr(raw))
    if isinstance(raw, int) and not isinstance(raw, bool):
        return Decimal(raw)
    raise CoercionError(f"expected a Connect Decimal, found {raw!r}")


class InexactNumber(Exception):
    """A Decimal column's value came as a JSON number, which the fast parser read as a float:
    :func:`read_connect_message` reads the message again with its numbers' every digit."""


def _exact_number(text: str) -> float | Decimal:
    """A JSON number with more significant digits than a float holds, as a Decimal."""
    mantissa = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").lstrip("0")
    return Decimal(text) if len(mantissa) > 15 else float(text)


# set while read_connect_message reads a message parsed with floats, so it can read it again exactly
_FIRST_PASS: contextvars.ContextVar[bool] = contextvars.ContextVar("cdcnorm_first_pass", default=False)


def _loads_exact(value: bytes) -> Any:
    """The message parsed again (it already parsed within the limits) with long numbers exact."""
    return json.loads(value, parse_float=_exact_number)


def _variable_decimal(raw: Any) -> Decimal:
    if isinstance(raw, dict):
        scale, value = raw.get("scale"), raw.get("value")
        if isinstance(scale, int) and not isinstance(scale, bool) and isinstance(value, str):
            return _unscaled(b64decode(value), scale)
        raise CoercionError(f"expected a VariableScaleDecimal {{scale, value}}, found {raw!r}")
    return _decimal(Column("", ConnectType.BYTES, logical=Logical.DECIMAL), raw)


def decode_value(col: Column, raw: Any) -> Any:
    """A Connect JSON value as the Python value typed by ``col`` (raises CoercionError).

    >>> decode_value(Column.decimal("p", 8, 4), "EtaH")
    Decimal('123.4567')
    >>> decode_value(Column("b", ConnectType.BYTES), "EA==")
    b'\\x10'
    """
    if raw is None:
        return None
    if col.logical == Logical.DECIMAL:
        return check_value(col, _decimal(col, raw))
    if col.logical == Logical.VARIABLE_SCALE_DECIMAL:
        return check_value(col, _variable_decimal(raw))
    if col.type is ConnectType.STRUCT and col.fields:
        if not isinstance(raw, dict):
            raise CoercionError(f"expected an object, found {raw!r}")
        by_name = {f.name: f for f in col.fields}
        for member in col.fields:
            if not member.optional and raw.get(member.name) is None:
                raise CoercionError(f"member {member.name!r} is required, found null")
        # JsonConverter reads a struct by its schema's fields: a member it does not declare is dropped
        return {k: decode_value(by_name[k], v) for k, v in raw.items() if k in by_name}
    if col.type is ConnectType.ARRAY and col.items is not None:
        if not isinstance(raw, list):
            raise CoercionError(f"expected an array, found {raw!r}")
        items = col.items
        if not items.optional and None in raw:
            raise CoercionError("an array of required items holds a null")
        return [decode_value(items, v) for v in raw]
    if col.type is ConnectType.BYTES and isinstance(raw, str):
        return b64decode(raw)
    if col.logical == Logical.ZONED_TIMESTAMP and type(raw) is str:
        coerce_checked(col, raw)  # a valid timestamp, kept as the connector wrote it (a Connect string)
        return raw
    return coerce_checked(col, raw)


def decode_row(columns: tuple[Column, ...], row: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A row image typed by ``columns``; a declared column absent from ``row`` is UNAVAILABLE.

    A field of ``row`` that ``columns`` does not declare is ignored, as ``JsonConverter`` ignores
    it (it reads a struct by its schema's fields).
    """
    out: dict[str, Any] = {}
    for col in columns:
        if col.name not in row:
            out[col.name] = UNAVAILABLE
            continue
        out[col.name] = _decode_cell(col, row[col.name], f"{where}.{col.name}")
    return out


def _decode_cell(col: Column, raw: Any, field: str, _payload: bytes | str | None = None) -> Any:
    """:func:`decode_value`, a failure being a FieldError naming ``field`` (a row plan's full converter)."""
    try:
        return decode_value(col, raw)
    except CoercionError as exc:
        raise caused_by(FieldError(field, f"{exc} (column type {_type_label(col)})"), exc) from exc


def _type_label(col: Column) -> str:
    return f"{col.type.value}/{col.logical}" if col.logical else col.type.value


# ---------------------------------------------------------------------------- row layouts

_OWN_PATHS = frozenset({ConnectType.STRUCT, ConnectType.ARRAY, ConnectType.BYTES})
"""Types that :func:`decode_value` does not hand to ``coerce_checked`` (structs, arrays, base64)."""


def _decimal_decoder(col: Column) -> FastConverter | None:
    """:func:`decode_value` of a Connect Decimal column for base64 text (what JsonConverter writes)."""
    try:
        scale = col.scale or 0
    except ValueError:
        return None  # decode_value reports it

    within = 0 <= scale <= MAX_DECIMAL_EXPONENT

    def convert(raw: Any) -> Decimal:
        # _decimal tries base64 first and keeps its result when it decodes; anything else (plain
        # decimal text, numbers, a failure) is left to decode_value
        if type(raw) is str:
            data = b64decode(raw)
            if within and len(data) <= _WITHIN_BOUNDS_BYTES:
                return decimal_from_unscaled(data, scale)  # what the checks below would let through
            return check_value(col, _unscaled(data, scale))
        raise NotFast

    return convert


def _redundant_sign_byte(data: bytes) -> bool:
    """Whether two's complement ``data`` (at least 2 bytes) starts with a byte its sign makes
    redundant (``BigInteger.toByteArray`` and the emitter write the fewest bytes)."""
    first = data[0]
    return (first == 0 and data[1] < 0x80) or (first == 0xFF and data[1] >= 0x80)


def _decimal_direct(col: Column) -> FastConverter | None:
    """A Connect Decimal's base64 kept as it is where the emitter would write the same text: the
    fewest bytes of its unscaled value, in canonical base64, within the fast decoder's bounds."""
    try:
        scale = col.scale or 0
    except ValueError:
        return None
    if not 0 <= scale <= MAX_DECIMAL_EXPONENT:
        return None

    def convert(raw: Any) -> str:
        if type(raw) is str:
            data = b64decode(raw)
            size = len(data)
            if 0 < size <= _WITHIN_BOUNDS_BYTES and (size == 1 or not _redundant_sign_byte(data)) and _b64(data) == raw:
                return raw
        raise NotFast

    return convert


def _bytes_direct(raw: Any) -> str:
    """Base64 bytes kept as they are where they are canonical (what the emitter writes of them)."""
    if type(raw) is str and _b64(b64decode(raw)) == raw:
        return raw
    raise NotFast


# the epoch seconds of 0001-01-01T00:00:00 and of 10000-01-01T00:00:00: a naive datetime's range
_FIRST_SECOND = -62_135_596_800
_END_SECOND = 253_402_300_800
# the epoch days of 0001-01-01 and 9999-12-31: a date's range
_FIRST_DAY = -719_162
_LAST_DAY = 2_932_896


def _epoch_direct(per_second: int) -> FastConverter:
    """Epoch units kept as they are where the typed datetime holds them exactly (microseconds)."""
    low, high = _FIRST_SECOND * per_second, _END_SECOND * per_second
    step = per_second // 1_000_000 if per_second > 1_000_000 else 1  # nanoseconds: whole microseconds only

    def convert(raw: Any) -> int:
        if type(raw) is int and low <= raw < high and raw % step == 0:
            return raw
        raise NotFast

    return convert


def _date_direct(raw: Any) -> int:
    """Epoch days kept as they are within a date's range."""
    if type(raw) is int and _FIRST_DAY <= raw <= _LAST_DAY:
        return raw
    raise NotFast


def _direct_encoder(col: Column, mode: DecimalHandlingMode) -> FastConverter | None:
    """The direct converter of a Connect JSON column (see :data:`~transforms.decoders.rowplan.DirectFor`):
    where the value as it came is what the emitter would write of its typed value."""
    logical = col.logical
    if logical == Logical.DECIMAL:
        return _decimal_direct(col) if mode is DecimalHandlingMode.PRECISE else None
    if col.type is ConnectType.STRUCT or col.type is ConnectType.ARRAY:
        return None
    per_second = EPOCH_UNITS.get(logical) if logical is not None else None
    if per_second is not None:
        return _epoch_direct(per_second)
    if logical in (Logical.DATE, Logical.CONNECT_DATE):
        return _date_direct
    if col.type is ConnectType.BYTES and logical is None:
        return _bytes_direct
    return None


def _not_fast(_raw: Any) -> Any:
    """The fast converter of a column that has none: every value goes to the full conversion."""
    raise NotFast


def _fast_decoder(col: Column) -> FastConverter | None:
    """A fast converter equal to ``decode_value(col, ·)`` where it returns (see rowplan)."""
    if col.logical == Logical.DECIMAL:
        return _decimal_decoder(col)
    if col.is_decimal or col.type in _OWN_PATHS:
        return None
    return fast_converter(col)  # what decode_value does here is coerce_checked, which it equals


class RowLayout:
    """Row columns and what is derived from them once: their names and a row plan.

    A :class:`ConnectEnvelopeReader` caches layouts with what they are derived from (a Connect
    schema, the shape of schemaless images), and the tables of a layout by the layout's identity,
    so a message of a known table neither rebuilds nor hashes its columns.
    """

    __slots__ = ("_derived", "_plan", "columns", "names")

    def __init__(self, columns: tuple[Column, ...]) -> None:
        self.columns = columns
        self.names = frozenset(c.name for c in columns)
        self._plan = RowPlan(columns, _fast_decoder, _direct_encoder)
        self._derived: dict[Callable[[RowLayout], Any], Any] = {}

    def retyped(self, columns: tuple[Column, ...]) -> RowLayout:
        """This layout if ``columns`` are its columns, else a layout of ``columns``."""
        return self if columns == self.columns else RowLayout(columns)

    def derived(self, build: Callable[[RowLayout], T]) -> T:
        """``build(self)``, computed once per layout: what a decoder derives from the columns.

        Results are kept by ``build``, which must therefore be a module-level function (not a
        closure made per call).
        """
        try:
            value: T = self._derived[build]
        except KeyError:
            value = self._derived[build] = build(self)
        return value

    def decode(self, row: Mapping[str, Any], where: str) -> dict[str, Any]:
        """``decode_row(self.columns, row, where)``: a field the columns do not declare is ignored."""
        return self._plan.typed(row, where, None, _decode_cell)

    def images(
        self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, mode: DecimalHandlingMode | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, DecimalHandlingMode | None]:
        """:meth:`RowPlan.images` of an envelope's ``before`` and ``after``: both encoded under
        ``mode`` (returned), or both typed (``None``)."""
        return self._plan.images(before, after, ("before", "after"), None, _decode_cell, mode)

    def connect_json(self, row: Mapping[str, Any], where: str, mode: DecimalHandlingMode) -> dict[str, Any] | None:
        """:meth:`decode`, with the cells as the emitter encodes them under ``mode``, or ``None``
        (see :meth:`RowPlan.connect_json`): Connect JSON that is already what the emitter writes
        is checked and kept."""
        return self._plan.connect_json(row, where, None, _decode_cell, mode)


_SIMPLE_KINDS = frozenset({str, int, float, bool, type(None), dict})
"""Value types that alone decide the column :func:`infer_columns` infers (an int: if within int64)."""

_BEYOND_INT64 = "int beyond int64"
"""The kind of an integer beyond int64 (which infers a decimal, not int64)."""


def _value_kind(value: Any) -> Any:
    """What :func:`~transforms.values.infer_column` infers from: the type, for an int whether it
    is beyond int64, for an array whether it holds only strings, for a datetime whether it has a zone."""
    kind = type(value)
    if kind is int:
        return int if INT64_MIN <= value <= INT64_MAX else _BEYOND_INT64
    if isinstance(value, list):
        return kind, bool(value) and all(isinstance(v, str) for v in value)
    if isinstance(value, dt.datetime):
        return kind, value.tzinfo is not None
    return kind


def _image_shape(image: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """An image's field names and value kinds: all that :func:`infer_columns` reads of it."""
    if not image:
        return ()
    values = image.values()
    kinds = tuple(map(type, values))
    if not _SIMPLE_KINDS.issuperset(kinds) or (int in kinds and not _ints_within_int64(values)):
        kinds = tuple(map(_value_kind, values))
    return tuple(image), kinds


def _ints_within_int64(values: Iterable[Any]) -> bool:
    ints = [v for v in values if type(v) is int]
    return min(ints) >= INT64_MIN and max(ints) <= INT64_MAX
