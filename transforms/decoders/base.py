"""The decoder interface: bytes (plus context) in, zero or more canonical events out.

Every decoder fails with a :class:`~transforms.errors.DecodeError` (naming the format, the field
and a payload preview) and nothing else, whatever the input. Decoders implement :meth:`Decoder.
decode`; callers that must never see another exception (pipelines, the worker) call
:meth:`Decoder.decode_safely`, which also enforces the size limits and turns an unexpected
exception (a decoder bug hit by hostile input) into a DecodeError.

A message may hold several rows (Canal's ``data[]``, the lines of an Arcion CSV file). A bad
value loses only its own row: :meth:`Decoder.decode_rows` (and :meth:`Decoder.decode_rows_safely`)
return the events of the rows that decode and one DecodeError per row that does not, its
:attr:`~transforms.errors.DecodeError.row` set (a :class:`Decoded`). :meth:`Decoder.decode` stays
all or nothing: it raises the first row's error. A message whose envelope fails (not parseable,
no table, an unknown operation ...) raises either way: none of its rows decodes.

Limits on hostile input (options every format has): ``max.message.bytes`` bounds the message
value and key and every JSON text embedded in a message; ``max.json.depth`` bounds the nesting of
the message and of embedded JSON. Typed values are bounded too (:func:`coerce_checked`): integers
must fit their Connect type, decimals have at most :data:`MAX_DECIMAL_DIGITS` digits and an
exponent within :data:`MAX_DECIMAL_EXPONENT`, so a hostile value cannot make the emitter build a
huge number.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, TypeVar, final, overload

import orjson
from mypy_extensions import mypyc_attr

from transforms.connect import Column, ConnectType, DecimalHandlingMode
from transforms.envelope import Event
from transforms.errors import CdcnormError, DecodeError, caused_by
from transforms.frozen import reduce_frozen
from transforms.jsonio import JsonLimitError, loads_limited, loads_object
from transforms.metadata import InMemoryMetadataStore, MetadataStore
from transforms.options import FormatOptions
from transforms.values import UNAVAILABLE, CoercionError, coerce

__all__ = [
    "MAX_DECIMAL_DIGITS",
    "MAX_DECIMAL_EXPONENT",
    "Decoded",
    "Decoder",
    "Message",
    "ValueConverter",
    "check_decimal_params",
    "check_value",
    "clip",
    "coerce_checked",
    "type_name",
]

OptionsT = TypeVar("OptionsT", bound=FormatOptions)

MAX_DECIMAL_DIGITS = 1000
"""Significant digits a decimal value may have (PostgreSQL NUMERIC allows 1000 declared)."""
MAX_DECIMAL_EXPONENT = 1000
"""Bound on a decimal's adjusted exponent and on a declared decimal scale (either sign)."""

ValueConverter = Callable[[Column, Any, str, "bytes | str | None"], Any]
"""Types one raw value: ``(column, raw value, field path, payload) -> value``; raises DecodeError."""

_MAX_FIELD_CHARS = 200
_MAX_REASON_CHARS = 1000
_INT_BITS = {ConnectType.INT8: 8, ConnectType.INT16: 16, ConnectType.INT32: 32, ConnectType.INT64: 64}


@dataclass(slots=True)
class Message:
    """One consumed message: raw bytes plus where it came from.

    Treated as immutable, but not frozen: the worker builds one per consumed record, and a frozen
    dataclass costs ~4x as much to build (see ``transforms.envelope``).
    """

    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int | None = None
    offset: int | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def __init__(  # written out: compiled, where the dataclass's would be interpreted (transforms.envelope_model)
        self,
        value: bytes | None,
        key: bytes | None = None,
        topic: str = "",
        partition: int | None = None,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        self.value = value
        self.key = key
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.headers = headers

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@dataclass(slots=True)
class Decoded:
    """What one message decodes to: the events of its rows that decode, in order, and one
    :class:`DecodeError` per row that does not (its ``row`` says which), in row order."""

    events: list[Event]
    row_errors: list[DecodeError] = field(default_factory=list)

    def __init__(self, events: list[Event], row_errors: list[DecodeError] | None = None) -> None:
        self.events = events  # written out: compiled (see Message)
        self.row_errors = [] if row_errors is None else row_errors

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

    def strict(self) -> list[Event]:
        """The events when every row decoded; else the first row's error is raised (all or nothing)."""
        if self.row_errors:
            raise self.row_errors[0]
        return self.events


@overload
def clip(text: str, limit: int) -> str: ...


@overload
def clip(text: None, limit: int) -> None: ...


def clip(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, saying how long it was.

    >>> clip("abcdef", 3)
    'abc... (6 chars)'
    """
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} chars)"


def type_name(value: Any) -> str:
    """The JSON-ish name of a value's type for error messages (``null`` for None).

    >>> type_name(None), type_name([])
    ('null', 'list')
    """
    return "null" if value is None else type(value).__name__


def check_value(col: Column, value: Any) -> Any:
    """``value`` if it fits ``col``'s type; raises CoercionError for an integer out of the type's
    signed range or an oversized decimal (which the emitter would turn into a huge number).

    An int64 field holds -2^63..2^63-1 as Connect reads it (a Java ``long``): a BIGINT UNSIGNED
    above that needs a Decimal column (``bigint.unsigned.handling.mode=precise``) or Debezium's
    two's-complement wrap (``long``), which the decoder applies before this check."""
    bits = _INT_BITS.get(col.type)
    if bits is not None and isinstance(value, int) and not isinstance(value, bool):
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            text = str(value) if value.bit_length() <= 200 else f"of {value.bit_length()} bits"
            raise CoercionError(f"integer {text} does not fit {col.type.value}")
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise CoercionError(f"expected a finite decimal, found {value}")
        digits = len(value.as_tuple().digits)
        if digits > MAX_DECIMAL_DIGITS or abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
            raise CoercionError(
                f"decimal of {digits} digits, exponent {value.adjusted()}, is beyond "
                f"{MAX_DECIMAL_DIGITS} digits and exponent ±{MAX_DECIMAL_EXPONENT}"
            )
    return value


def check_decimal_params(precision: int | None, scale: int | None) -> None:
    """Raise ValueError unless a declared decimal precision/scale is within the value bounds."""
    if scale is not None and abs(scale) > MAX_DECIMAL_EXPONENT:
        raise ValueError(f"decimal scale {scale} is beyond ±{MAX_DECIMAL_EXPONENT}")
    if precision is not None and not 0 <= precision <= MAX_DECIMAL_DIGITS:
        raise ValueError(f"decimal precision {precision} is beyond 0..{MAX_DECIMAL_DIGITS}")


def _check_int_magnitude(col: Column, raw: str | Decimal) -> None:
    """Reject ``"1e999999999"`` (or such a Decimal) for an integer column before it is turned into
    an int: building that int takes forever (``values.coerce`` would)."""
    if isinstance(raw, str):
        text = raw.strip()
        if len(text) <= 20 and text.lstrip("+-").isdigit():
            return  # a plain integer literal: fast to convert, range-checked afterwards
        try:
            raw = Decimal(text)
        except ArithmeticError:
            return  # not a number: coerce says so
    if raw.is_finite() and raw.adjusted() > 20:
        raise CoercionError(f"integer of {raw.adjusted() + 1} digits does not fit {col.type.value}")


def coerce_checked(col: Column, raw: Any) -> Any:
    """``values.coerce`` and :func:`check_value`; every failure is a CoercionError.

    >>> coerce_checked(Column("n", ConnectType.INT16), "70000")
    Traceback (most recent call last):
    ...
    transforms.values.CoercionError: integer 70000 does not fit int16
    """
    if col.type in _INT_BITS and isinstance(raw, str | Decimal):
        _check_int_magnitude(col, raw)
    try:
        value = coerce(col, raw)
    except CoercionError:
        raise
    except (ArithmeticError, ValueError, orjson.JSONEncodeError) as exc:  # inf, out-of-range dates, ...
        error = CoercionError(f"value out of range for {col.type.value}: {raw!r:.60} ({exc})")
        raise caused_by(error, exc) from exc
    return check_value(col, value)


@mypyc_attr(allow_interpreted_subclasses=True)  # the decoders that stay interpreted
class Decoder(ABC):
    """Decodes the messages of one format into canonical events.

    A decoder is configured once (options, metadata store) and then decodes messages; it keeps
    no per-message state of its own beyond what it puts in the metadata store, so any replica
    sharing the store decodes the same message the same way. Every failure is a
    :class:`DecodeError` that names the format and the field.
    """

    format_id: ClassVar[str]
    description: ClassVar[str] = ""
    options_model: ClassVar[type[FormatOptions]] = FormatOptions
    binary: ClassVar[bool] = False

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        self.options = options if options is not None else self.options_model()
        self.metadata: MetadataStore = metadata if metadata is not None else InMemoryMetadataStore()
        # set by a Pipeline for the duration of one decode whose events go straight to the
        # emitter under this decimal mode: a decoder that can may then return images already in
        # Connect JSON form (ChangeEvent.encoded); others ignore it
        self.emit_direct: DecimalHandlingMode | None = None

    @abstractmethod
    def decode(self, message: Message) -> list[Event]:
        """The events in ``message``, in order; ``[]`` for messages that carry no change.

        All or nothing: a bad row fails the message (a multi-row decoder implements
        :meth:`decode_rows` and returns ``self.decode_rows(message).strict()`` here)."""

    def decode_rows(self, message: Message) -> Decoded:
        """The events of the rows of ``message`` that decode, and an error per row that does not.

        Decoders whose messages hold several rows override it; a decoder of one row per message
        keeps this default (:meth:`decode`, any failure raised)."""
        return Decoded(self.decode(message))

    @final
    def decode_rows_safely(self, message: Message) -> Decoded:
        """:meth:`decode_rows`, but every failure is a :class:`DecodeError` (what pipelines call).

        The message value and key are checked against ``max.message.bytes`` first. An exception
        that is not a :class:`~transforms.errors.CdcnormError` is a decoder bug hit by this
        input; it becomes a DecodeError so the message can be dead-lettered. Other cdcnorm
        errors (e.g. :class:`~transforms.errors.StateStoreError`, retried by the worker) pass.
        """
        try:
            self.check_size(message.value)
            self.check_size(message.key, "key")
            return self.decode_rows(message)
        except CdcnormError:
            raise
        except Exception as exc:
            error = self.error(None, f"unexpected {type(exc).__name__}: {exc}", message.value)
            raise caused_by(error, exc) from exc

    @final
    def decode_safely(self, message: Message) -> list[Event]:
        """:meth:`decode_rows_safely`, all or nothing: a row's error is raised (see :meth:`decode`)."""
        return self.decode_rows_safely(message).strict()

    # -- helpers for subclasses ------------------------------------------------------

    def error(self, field: str | None, reason: str, payload: bytes | str | None = None) -> DecodeError:
        """A DecodeError of this format; the field path and reason are clipped (they may quote
        hostile input, and they travel in DLQ headers and logs)."""
        return DecodeError(self.format_id, clip(field, _MAX_FIELD_CHARS), clip(reason, _MAX_REASON_CHARS), payload)

    def options_as(self, model: type[OptionsT]) -> OptionsT:
        """The options as ``model`` (a decoder given the base options gets its defaults)."""
        if isinstance(self.options, model):
            return self.options
        return model.model_validate(self.options.model_dump(by_alias=True))

    def check_size(self, data: bytes | None, what: str = "message") -> None:
        """Raise a DecodeError when ``data`` is larger than ``max.message.bytes``."""
        limit = self.options.max_message_bytes
        if data is not None and len(data) > limit:
            raise self.error(None, f"{what} of {len(data)} bytes exceeds the limit of {limit}", data)

    def load_json(self, message: Message) -> dict[str, Any]:
        """The message value parsed as a JSON object, within the configured limits."""
        if message.value is None:
            raise self.error(None, "message has no value")
        return loads_object(
            message.value,
            self.format_id,
            max_bytes=self.options.max_message_bytes,
            max_depth=self.options.max_json_depth,
        )

    def load_embedded_json(self, text: str | bytes, field: str, payload: bytes | str | None) -> Any:
        """A JSON text held in a field of the message, parsed within the configured limits."""
        try:
            return loads_limited(
                text,
                max_bytes=self.options.max_message_bytes,
                max_depth=self.options.max_json_depth,
                what=f"JSON text in {field}",
            )
        except JsonLimitError as exc:
            raise caused_by(self.error(field, str(exc), payload), exc) from exc

    def coerce(self, col: Column, raw: Any, field: str, payload: bytes | str | None = None) -> Any:
        """:func:`coerce_checked` with failures turned into a DecodeError naming the field."""
        try:
            return coerce_checked(col, raw)
        except CoercionError as exc:
            raise caused_by(self.error(field, str(exc), payload), exc) from exc

    def typed_row(
        self,
        columns: tuple[Column, ...],
        row: Mapping[str, Any],
        where: str,
        payload: bytes | str | None,
        convert: ValueConverter | None = None,
    ) -> dict[str, Any]:
        """A row image typed column by column (``convert``, default :meth:`coerce`, gets the field
        path ``<where>.<column>``); a column the row lacks is ``UNAVAILABLE``, never null."""
        typed = convert or self.coerce
        return {
            col.name: typed(col, row[col.name], f"{where}.{col.name}", payload) if col.name in row else UNAVAILABLE
            for col in columns
        }
