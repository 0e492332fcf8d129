"""``mask``: hide column values, like Kafka Connect's ``MaskField``.

Masks the listed columns in both row images of a change and in unwrapped rows. Column types do
not change; each value is replaced by a value of its own type:

* strings: ``replacement`` (default ``****``), or with ``mode=hash`` the SHA-256 hex digest of
  ``hash.salt`` + the value (stable, so equal values stay equal);
* bytes: empty, or with ``mode=hash`` the 32-byte SHA-256 digest;
* numbers: ``0`` (``Decimal(0)``, ``0.0``); booleans: ``false``;
* dates, timestamps and times: the epoch / zero; structs and arrays: empty.

SQL NULL stays ``null`` and ``__debezium_unavailable_value`` stays absent: masking never turns
a missing value into a present one. Columns a table does not have are ignored.

A key column may only be masked with ``mode=hash`` and only when it is a string or bytes
column: anything else would give every row the same key.

With ``numeric.replacement=true`` numeric columns take ``replacement`` converted to their type
(an integer column an integer in its range), as Kafka Connect's ``MaskField`` does; an empty
replacement still gives ``0``, and one that is not such a number is an error for each record of
a table that has such a masked column.

Also named ``org.apache.kafka.connect.transforms.MaskField$Value``, with Connect's defaults:
``replacement`` empty (strings become ``""``) and ``numeric.replacement=true``. Where Connect
fails on a value (bytes always; a decimal with a scale, whose ``0`` it writes with scale 0;
booleans, dates and times with a replacement), cdcnorm masks it as listed above. Connect masks
``__debezium_unavailable_value`` like any string; cdcnorm leaves it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, field_validator

from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, Event, RowEvent
from transforms.errors import TransformError
from transforms.smt.base import SmtConfig, Transform
from transforms.smt.config_types import CommaList
from transforms.smt.table_cache import DerivedTableCache
from transforms.values import EPOCH, EPOCH_DATE, EPOCH_UTC, UNAVAILABLE

__all__ = ["MaskConfig", "MaskField", "MaskMode"]


class MaskMode(StrEnum):
    """How string (and bytes) values are masked."""

    REPLACE = "replace"
    HASH = "hash"


class MaskConfig(SmtConfig):
    """Config of :class:`MaskField`."""

    fields: CommaList = Field(..., description="Columns to mask.")
    replacement: str = Field("****", description="The value that replaces strings (mode=replace).")
    mode: MaskMode = Field(MaskMode.REPLACE, description="replace, or hash: SHA-256 hex of salt + value.")
    hash_salt: str = Field("", alias="hash.salt", description="Salt prepended to values before hashing.")
    numeric_replacement: bool = Field(
        False,
        alias="numeric.replacement",
        description="Numeric columns take the replacement converted to their type (Kafka Connect's) "
        "instead of 0.",
    )
    replace_null_with_default: bool = Field(
        True,
        alias="replace.null.with.default",
        description="Kafka Connect's option, accepted as is: cdcnorm column schemas carry no defaults.",
    )

    @field_validator("fields")
    @classmethod
    def _non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("list at least one column")
        return value


class MaskField(Transform):
    """Replaces the values of the configured columns with type-preserving masks."""

    name: ClassVar[str] = "mask"
    config_model = MaskConfig
    config: MaskConfig

    def __init__(self, config: MaskConfig) -> None:
        super().__init__(config)
        self._fields = frozenset(config.fields)
        self._salt = config.hash_salt.encode()
        self._hash = config.mode is MaskMode.HASH
        self._number: Decimal | None = Decimal(0)
        if config.numeric_replacement and config.replacement:
            self._number = _as_number(config.replacement)
        self._tables: DerivedTableCache[TableSchema, frozenset[str]] = DerivedTableCache(self._targets)

    def _targets(self, table: TableSchema) -> frozenset[str]:
        """The columns of ``table`` to mask (unknown tables mask every listed name present)."""
        for key in table.key:
            if key not in self._fields:
                continue
            col = table.column(key)
            hashable = col is not None and col.type in (ConnectType.STRING, ConnectType.BYTES)
            if not (self._hash and hashable):
                raise TransformError(
                    self.name,
                    f"masking key column {key!r} of {table.qualified_name} would give every row the same key; "
                    "only string or bytes key columns can be masked, with mode=hash",
                )
        for name in self._fields:
            col = table.column(name)
            if col is not None:
                self._check_number(col, table)
        return self._fields

    def _check_number(self, col: Column, table: TableSchema) -> None:
        """Fail unless the numeric replacement suits numeric column ``col``."""
        integer = col.logical is None and col.type in _INT_BOUNDS
        floating = col.logical is None and col.type in (ConnectType.FLOAT32, ConnectType.FLOAT64)
        number = self._number
        if not (integer or floating or col.is_decimal) or (number is not None and not integer):
            return
        if number is not None:
            low, high = _INT_BOUNDS[col.type]
            if number == number.to_integral_value() and low <= number <= high:
                return
        what = f"an {col.type.value} number" if integer else "a number"
        raise TransformError(
            self.name,
            f"replacement {self.config.replacement!r} is not {what}, so it cannot mask column "
            f"{col.name!r} of {table.qualified_name} (numeric.replacement=true)",
        )

    def mask(self, value: Any) -> Any:
        """The masked form of one value (``None`` and the unavailable placeholder pass through)."""
        if value is None or (isinstance(value, str) and value == UNAVAILABLE):
            return value
        masker = _MASKERS.get(type(value))
        if masker is None:
            for kind, fn in _MASKERS.items():
                if isinstance(value, kind):
                    masker = fn
                    break
            else:
                raise TransformError(self.name, f"cannot mask a value of type {type(value).__name__}")
        return masker(self, value)

    def _mask_str(self, value: str) -> str:
        if self._hash:
            return hashlib.sha256(self._salt + value.encode()).hexdigest()
        return self.config.replacement

    def _mask_int(self, value: int) -> int:
        return int(self._number or 0)

    def _mask_float(self, value: float) -> float:
        return float(self._number or 0)

    def _mask_decimal(self, value: Decimal) -> Decimal:
        return self._number if self._number is not None else Decimal(0)

    def _mask_bytes(self, value: bytes) -> bytes:
        return hashlib.sha256(self._salt + value).digest() if self._hash else b""

    def _row(self, row: dict[str, Any] | None, targets: frozenset[str]) -> dict[str, Any] | None:
        if row is None or targets.isdisjoint(row):
            return row
        return {k: self.mask(v) if k in targets else v for k, v in row.items()}

    def apply(self, event: Event) -> list[Event]:
        if isinstance(event, ChangeEvent):
            targets = self._tables.get(event.table)
            before, after = self._row(event.before, targets), self._row(event.after, targets)
            if before is event.before and after is event.after:
                return [event]
            return [replace(event, before=before, after=after)]
        if isinstance(event, RowEvent):
            targets = self._tables.get(event.table)
            row = self._row(event.row, targets)
            if row is event.row:
                return [event]
            key_source = self._row(event.key_source, targets)
            return [replace(event, row=row, key_source=key_source)]
        return [event]


def _zero_datetime(_: MaskField, value: dt.datetime) -> dt.datetime:
    return EPOCH_UTC.astimezone(value.tzinfo) if value.tzinfo else EPOCH


_MASKERS: dict[type, Callable[[MaskField, Any], Any]] = {
    str: MaskField._mask_str,
    bytes: MaskField._mask_bytes,
    bool: lambda _, v: False,
    int: MaskField._mask_int,
    float: MaskField._mask_float,
    Decimal: MaskField._mask_decimal,
    dt.datetime: _zero_datetime,
    dt.date: lambda _, v: EPOCH_DATE,
    dt.timedelta: lambda _, v: dt.timedelta(0),
    dt.time: lambda _, v: dt.time(0),
    dict: lambda _, v: {},
    list: lambda _, v: [],
    bytearray: lambda self, v: self._mask_bytes(bytes(v)),
}
"""Masks by exact type, then by ``isinstance`` in this order (bool before int, datetime before date)."""

_INT_BOUNDS: dict[ConnectType, tuple[int, int]] = {
    ConnectType.INT8: (-(2**7), 2**7 - 1),
    ConnectType.INT16: (-(2**15), 2**15 - 1),
    ConnectType.INT32: (-(2**31), 2**31 - 1),
    ConnectType.INT64: (-(2**63), 2**63 - 1),
}


def _as_number(text: str) -> Decimal | None:
    """``text`` as a finite number, or ``None`` when it is not one."""
    try:
        number = Decimal(text.strip())
    except ArithmeticError:
        return None
    return number if number.is_finite() else None
