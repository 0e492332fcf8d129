"""Row plans: a table's per-column value converters, chosen once per table instead of per cell.

Typing a row cell by cell through :func:`~transforms.decoders.base.coerce_checked` dispatches on
the column's type for every value, and a decoder's own converter adds its special cases on top.
For the common cells (a string in a string column, an integer literal in an integer column, a
decimal literal in a decimal column) all of that dispatch ends in one builtin call. A
:class:`RowPlan` picks, per column, a *fast converter* that makes that call directly.

The contract of a fast converter is strict: **when it returns, it returns exactly what the full
conversion would** (same value, same type); for anything else it raises, and the plan then runs
the decoder's full converter on that cell, which returns the value or raises the DecodeError
naming the field. So a plan changes speed, never results or errors. ``tests/formats/
test_rowplan.py`` checks the contract against ``coerce_checked`` on generated values.

>>> from transforms.connect import Column, ConnectType
>>> to_int = fast_converter(Column("n", ConnectType.INT16))
>>> to_int("12")
12
>>> to_int("70000")  # out of range: the full conversion reports it
Traceback (most recent call last):
...
transforms.decoders.rowplan.NotFast
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

from transforms.connect import MEMO_ENTRIES, Column, ConnectType, DecimalHandlingMode, Logical, TableSchema
from transforms.decoders.base import MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT
from transforms.decoders.cache import TableLru
from transforms.values import (
    EPOCH_UNITS,
    UNAVAILABLE,
    Encoder,
    _b64,
    date_from_epoch,
    encoder_for,
    encoder_passes,
    epoch_units,
    minimal_bytes,
    parse_datetime,
    timestamp_from_epoch,
)

__all__ = [
    "DirectFor",
    "FastConverter",
    "NotFast",
    "RowPlan",
    "RowPlans",
    "decimal_converter",
    "fast_converter",
    "int_converter",
    "same_key_cells",
    "text_decimal_direct",
    "text_direct",
]

FastConverter = Callable[[Any], Any]
"""``raw value -> typed value``, or raises (any exception) to hand the cell to the full converter."""

SlowConverter = Callable[[Column, Any, str, "bytes | str | None"], Any]

DirectFor = Callable[[Column, DecimalHandlingMode], "FastConverter | None"]
"""A decoder's *direct* converters: ``raw value -> Connect JSON value`` for a column under a
decimal handling mode, equal to the emitter's encoder applied to what the fast or full converter
types (see :meth:`RowPlan.connect_json`); raises (any exception) where it does not take a value.
``None``: the column has none (the cell is typed, then encoded)."""

# name, column, fast converter, direct converter, the emitter's encoder, the type it passes
_DirectStep = tuple[str, Column, "FastConverter | None", "FastConverter | None", "Encoder | None", type]

# what check_value allows per integer type; int64 also takes BIGINT UNSIGNED values up to 2^64-1
_INT_RANGES = {
    ConnectType.INT8: (-(1 << 7), 1 << 7),
    ConnectType.INT16: (-(1 << 15), 1 << 15),
    ConnectType.INT32: (-(1 << 31), 1 << 31),
    ConnectType.INT64: (-(1 << 63), 1 << 63),
}


class NotFast(Exception):
    """Raised by a fast converter for a value it does not take (the full converter will)."""


def int_converter(low: int, high: int) -> FastConverter:
    """Integers and integer literals of up to 20 characters in ``low <= n < high``."""

    def convert(raw: Any) -> int:
        kind = type(raw)
        if kind is int:
            value: int = raw
        elif kind is str and len(raw) <= 20:
            value = int(raw)  # like values._to_int: surrounding spaces and '_' separators are fine
        else:
            raise NotFast
        if low <= value < high:
            return value
        raise NotFast

    return convert


def _string(raw: Any) -> str:
    if type(raw) is str:
        return raw
    raise NotFast


def _float(raw: Any) -> float:
    kind = type(raw)
    if kind is float:
        return raw
    if kind is str or kind is int:
        return float(raw)  # float() ignores surrounding whitespace, as values._to_float's strip()
    raise NotFast


def _boolean(raw: Any) -> bool:
    if type(raw) is bool:
        return raw
    raise NotFast


def decimal_converter(raw: Any) -> Decimal:
    """A decimal literal (or integer) within the value bounds of ``check_value``."""
    kind = type(raw)
    if kind is str:
        if len(raw) > MAX_DECIMAL_DIGITS:  # shorter text has at most that many digits
            raise NotFast
        value = Decimal(raw)  # Decimal() ignores surrounding whitespace, as values._to_decimal's strip()
    elif kind is int:
        value = Decimal(raw)
        if len(value.as_tuple().digits) > MAX_DECIMAL_DIGITS:
            raise NotFast
    else:
        raise NotFast
    if value.is_finite() and -MAX_DECIMAL_EXPONENT <= value.adjusted() <= MAX_DECIMAL_EXPONENT:
        return value
    raise NotFast


_ASCII_DIGITS = frozenset("0123456789")
_POW10 = tuple(10**n for n in range(64))


_ABSENT = object()


def same_key_cells(key: tuple[str, ...], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """Whether an update's images have their key cells identical as they came (type and value).

    An update whose key changes is emitted as a delete and a create, and the emitter decides
    that by comparing the key's values: typed values where they are typed, Connect JSON where
    the images come encoded (``ChangeEvent.encoded``). The two can disagree (``1.0`` and
    ``1.00`` are equal decimals but not equal strings in ``decimal.handling.mode=string``), so a
    decoder hands over encoded images only for an update whose key cells are identical, which
    gives equal typed values and equal encodings alike; any other update is typed.
    """
    if before is None or after is None:
        return True
    for name in key:
        old = before.get(name, _ABSENT)
        new = after.get(name, _ABSENT)
        if type(old) is not type(new) or old != new:
            return False
    return True


def text_decimal_direct(scale: int) -> FastConverter:
    """A decimal written as plain text (``-12.5``: ASCII digits, at most ``scale`` after the
    point, at most 40 characters) straight to its Connect Decimal base64 at ``scale``: what
    :func:`decimal_converter` and the emitter's encoder make of it, without the ``Decimal``."""

    def convert(raw: Any) -> str:
        if type(raw) is str and 0 < len(raw) <= 40:
            negative = raw[0] == "-"
            body = raw[1:] if negative else raw
            point = body.find(".")
            if point < 0:
                whole, fraction = body, ""
            else:
                whole, fraction = body[:point], body[point + 1 :]
            if (
                whole
                and len(fraction) <= scale
                and _ASCII_DIGITS.issuperset(whole)
                and _ASCII_DIGITS.issuperset(fraction)
                and (fraction or point < 0)
            ):
                shift = scale - len(fraction)
                unscaled = int(whole + fraction) * (_POW10[shift] if shift < 64 else 10**shift)
                return _b64(minimal_bytes(-unscaled if negative else unscaled))
        raise NotFast

    return convert


_EPOCH_ORDINAL = 719_163  # date(1970, 1, 1).toordinal()


def _naive_iso(raw: Any) -> dt.datetime:
    """``YYYY-MM-DD`` or ``YYYY-MM-DD[T ]HH:MM:SS[.f{1,6}]`` (no zone, nothing around it) as
    ``datetime.fromisoformat`` reads it: the text :func:`parse_datetime` hands to that same call."""
    if type(raw) is str:
        n = len(raw)
        shaped = (n == 10 or (19 <= n <= 26 and n != 20)) and raw.isascii() and raw[4] == "-" and raw[7] == "-"
        if shaped and (
            n == 10
            or (raw[10] in "T " and raw[13] == ":" and raw[16] == ":" and (n == 19 or (raw[19] == "." and raw[20:].isdigit())))
        ):
            value = dt.datetime.fromisoformat(raw)
            if value.tzinfo is None:
                return value
    raise NotFast


def _text_timestamp_direct(per_second: int) -> FastConverter:
    """A naive timestamp's text straight to its epoch units (what the emitter encodes it as)."""

    def convert(raw: Any) -> int:
        return epoch_units(_naive_iso(raw), per_second)

    return convert


def _text_date_direct(raw: Any) -> int:
    """A date's text (``YYYY-MM-DD``) straight to its epoch days."""
    if type(raw) is str and len(raw) == 10:
        return _naive_iso(raw).toordinal() - _EPOCH_ORDINAL
    raise NotFast


def text_direct(col: Column, mode: DecimalHandlingMode) -> FastConverter | None:
    """The direct converters of decoders whose cells come as text and are typed by
    :func:`fast_converter` (see :data:`DirectFor`): a plain decimal at a fixed scale, a naive
    timestamp, a date."""
    logical = col.logical
    if logical == Logical.DECIMAL:
        if mode is not DecimalHandlingMode.PRECISE:
            return None
        try:
            scale = col.scale or 0
        except ValueError:
            return None
        return text_decimal_direct(scale) if 0 <= scale <= MAX_DECIMAL_EXPONENT else None
    per_second = EPOCH_UNITS.get(logical) if logical is not None else None
    if per_second is not None:
        return _text_timestamp_direct(per_second)
    if logical in (Logical.DATE, Logical.CONNECT_DATE):
        return _text_date_direct
    return None


def _timestamp_converter(per_second: int) -> FastConverter:
    """Timestamps as text or as epoch units (``per_second`` of them a second)."""

    def convert(raw: Any) -> Any:
        kind = type(raw)
        if kind is str:
            return parse_datetime(raw)  # what values._to_timestamp does with a string (no zone added)
        if kind is int:
            return timestamp_from_epoch(raw, per_second)  # and with an integer (Debezium's epoch units)
        raise NotFast

    return convert


def _date(raw: Any) -> Any:
    kind = type(raw)
    if kind is str:
        return parse_datetime(raw).date()
    if kind is int:
        return date_from_epoch(raw)  # days since the epoch (Debezium's io.debezium.time.Date)
    raise NotFast


def fast_converter(col: Column) -> FastConverter | None:
    """The fast converter equal to ``coerce_checked(col, ·)`` where it returns; None if there is none.

    Covers the plain Connect types and decimals, dates and naive timestamps given as text or as
    epoch units.
    """
    logical = col.logical
    if logical is None:
        ctype = col.type
        bounds = _INT_RANGES.get(ctype)
        if bounds is not None:
            return int_converter(*bounds)
        if ctype is ConnectType.STRING:
            return _string
        if ctype is ConnectType.FLOAT64 or ctype is ConnectType.FLOAT32:
            return _float
        if ctype is ConnectType.BOOLEAN:
            return _boolean
        return None
    if col.is_decimal:
        return decimal_converter
    per_second = EPOCH_UNITS.get(logical)
    if per_second is not None:  # the timestamps of Connect and Debezium (a zoned one is text)
        return _timestamp_converter(per_second)
    if logical in (Logical.DATE, Logical.CONNECT_DATE):
        return _date
    return None


def _typed_cell(
    name: str,
    col: Column,
    fast: FastConverter | None,
    raw: Any,
    where: str,
    payload: bytes | str | None,
    slow: SlowConverter,
    index: int | None,
) -> Any:
    """A present, non-null cell typed: by its fast converter where it takes the value, else by the
    full one (its path, ``<where>[<index>].<column>``, is only built then)."""
    if fast is not None:
        try:
            return fast(raw)
        except Exception:
            pass
    return slow(col, raw, f"{where}.{name}" if index is None else f"{where}[{index}].{name}", payload)


class RowPlan:
    """The converters of one table's columns; :meth:`typed` types a row image with them.

    ``slow`` is the decoder's full per-cell converter (``(column, raw, field path, payload)``).
    It must map ``None`` to ``None``: a plan passes SQL NULLs through without calling it.
    """

    __slots__ = ("_direct", "_direct_for", "_steps")

    def __init__(
        self,
        columns: tuple[Column, ...],
        fast_for: Callable[[Column], FastConverter | None],
        direct_for: DirectFor | None = None,
    ) -> None:
        self._steps = tuple((col.name, col, fast_for(col)) for col in columns)
        self._direct_for = direct_for
        self._direct: dict[DecimalHandlingMode, tuple[_DirectStep, ...]] = {}

    def _direct_steps(self, mode: DecimalHandlingMode) -> tuple[_DirectStep, ...]:
        steps = self._direct.get(mode)
        if steps is None:
            direct_for = self._direct_for
            built: list[_DirectStep] = []
            for name, col, fast in self._steps:
                enc = encoder_for(col, mode)
                direct = direct_for(col, mode) if direct_for is not None and enc is not None else None
                built.append((name, col, fast, direct, enc, encoder_passes(enc) if enc is not None else type(None)))
            steps = self._direct[mode] = tuple(built)
        return steps

    def connect_json(
        self,
        row: Mapping[str, Any],
        where: str,
        payload: bytes | str | None,
        slow: SlowConverter,
        mode: DecimalHandlingMode,
        index: int | None = None,
    ) -> dict[str, Any] | None:
        """The row as :meth:`typed` types it, with its cells in Connect JSON form as the emitter
        encodes them under ``mode`` (``encode_row``); ``None`` when a typed cell's encoding
        fails (the caller takes the typed row: the emitter reports that failure as it does).

        A cell a direct converter takes skips the typed value: Connect JSON that is already
        what the emitter would write (a Debezium decimal's base64, epoch milliseconds) is
        checked and kept. Any other cell is typed as :meth:`typed` types it (the same value,
        the same errors, in the same order) and then encoded.
        """
        out: dict[str, Any] = {}
        for name, col, fast, direct, enc, passes in self._direct_steps(mode):
            if name not in row:
                out[name] = UNAVAILABLE
                continue
            raw = row[name]
            if raw is None:
                out[name] = None
                continue
            if direct is not None:
                try:
                    out[name] = direct(raw)
                    continue
                except Exception:
                    pass
            value = _typed_cell(name, col, fast, raw, where, payload, slow, index)
            if enc is not None and value is not None and type(value) is not passes:
                try:
                    value = enc(value)
                except Exception:  # the emitter raises it from the typed row, as always
                    return None
            out[name] = value
        return out

    def images(
        self,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        where: tuple[str, str],
        payload: bytes | str | None,
        slow: SlowConverter,
        mode: DecimalHandlingMode | None,
        index: int | None = None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, DecimalHandlingMode | None]:
        """A change's before and after images: both in Connect JSON form under ``mode``
        (:meth:`connect_json`) and ``mode`` returned (for ``ChangeEvent.encoded``), or, where
        ``mode`` is ``None`` or an image's encoding fails, both typed (:meth:`typed`) and ``None``.
        ``where`` is the field path of each image."""
        if mode is not None:
            before_json = None if before is None else self.connect_json(before, where[0], payload, slow, mode, index)
            if before is None or before_json is not None:
                after_json = None if after is None else self.connect_json(after, where[1], payload, slow, mode, index)
                if after is None or after_json is not None:
                    return before_json, after_json, mode
        return (
            None if before is None else self.typed(before, where[0], payload, slow, index),
            None if after is None else self.typed(after, where[1], payload, slow, index),
            None,
        )

    def typed(
        self,
        row: Mapping[str, Any],
        where: str,
        payload: bytes | str | None,
        slow: SlowConverter,
        index: int | None = None,
    ) -> dict[str, Any]:
        """The row typed column by column; a column the row lacks is ``UNAVAILABLE``.

        ``where`` is the field path of the row (``data``, or ``data[0]``, or ``data`` with
        ``index`` 0); a cell's path, ``<where>[<index>].<column>``, is only built when the full
        converter runs.
        """
        out: dict[str, Any] = {}
        for name, col, fast in self._steps:
            if name not in row:
                out[name] = UNAVAILABLE
                continue
            raw = row[name]
            if raw is None:
                out[name] = None
                continue
            out[name] = _typed_cell(name, col, fast, raw, where, payload, slow, index)
        return out


class RowPlans:
    """One decoder's row plans, by table structure: a table object keeps the plan it was given
    (:attr:`TableSchema.memo`, so a decoder that reuses its table objects finds it by one small
    lookup), and tables with the same columns share one plan, cached within the table budget
    (:mod:`transforms.table_budget`); ``max_tables`` adds a count bound (tests)."""

    def __init__(
        self,
        fast_for: Callable[[Column], FastConverter | None] = fast_converter,
        max_tables: int | None = None,
        direct_for: DirectFor | None = None,
    ) -> None:
        self._fast_for = fast_for
        self._direct_for = direct_for
        self._by_columns: TableLru[tuple[Column, ...], RowPlan] = TableLru(
            lambda columns, _: len(columns), max_tables
        )

    def plan(self, table: TableSchema) -> RowPlan:
        memo = table.memo
        plan = memo.get(self)
        if plan is not None:
            return cast(RowPlan, plan)
        plan = self._by_columns.get(table.columns)
        if plan is None:
            plan = RowPlan(table.columns, self._fast_for, self._direct_for)
            self._by_columns.put(table.columns, plan)
        if len(memo) < MEMO_ENTRIES:
            memo[self] = plan
        return plan
