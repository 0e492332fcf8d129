"""Reading Kafka Connect JSON (``JsonConverter``) documents: schemas, values and Debezium envelopes.

Shared by the decoders whose input is Connect JSON or close to it (``debezium-json``,
``arcion-kafka``, ``cdl-json``), by composition: each decoder owns a
:class:`ConnectEnvelopeReader` and calls it; nothing here knows a format id.

* :func:`column_from_schema` / :func:`columns_from_struct` turn a Connect JSON schema into
  :class:`~transforms.connect.Column` objects, keeping logical names and parameters.
* :func:`decode_value` turns a Connect-encoded value into a Python value typed by its column:
  Decimal bytes (base64 at the schema's scale), VariableScaleDecimal structs, base64 bytes,
  ``io.debezium.time.*`` epoch numbers, ZonedTimestamp strings.
* :func:`position_sequence` builds a sortable ``source.sequence`` from a Debezium source block.
* :class:`ConnectEnvelopeReader` turns one Debezium envelope (``before``/``after``/``source``/
  ``op``/``ts_ms``/``transaction``) into a :class:`~transforms.envelope.ChangeEvent`.
* :func:`read_connect_message` is the common start of the decoders: it parses the message,
  unwraps the ``{"schema", "payload"}`` wrapper and turns a :class:`FieldError` into the
  decoder's :class:`~transforms.errors.DecodeError`.

Embedded JSON (MongoDB images, the Kafka key, the key's MongoDB ``id``) is parsed within the
decoder's ``max.message.bytes``/``max.json.depth`` (:class:`JsonLimits`), and Connect schema
parameters and values are bounded like every typed value (:func:`~transforms.decoders.base.
coerce_checked`).

Every failure is a :class:`FieldError` naming the offending field; decoders turn it into a
:class:`~transforms.errors.DecodeError` carrying the payload preview.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from transforms.connect import Column, ConnectType, DecimalHandlingMode, Logical, TableSchema, column_schema
from transforms.decoders.base import check_decimal_params, check_value, coerce_checked, type_name
from transforms.decoders.cache import LruCache, TableCache
from transforms.decoders.fields import INT64_MAX, INT64_MIN, parse_int
from transforms.decoders.rowplan import FastConverter, NotFast, RowPlan, fast_converter
from transforms.decoders.schemaless_json import ColumnMemory, Inferred, infer_images
from transforms.envelope import (
    ChangeEvent,
    Event,
    NativeLayout,
    NativeSource,
    Operation,
    SnapshotMarker,
    SourceInfo,
    TransactionRef,
    source_field_type,
    source_field_value,
)
from transforms.jsonio import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, JsonLimitError, loads_limited
from transforms.metadata import MetadataStore
from transforms.values import UNAVAILABLE, CoercionError, decimal_from_unscaled, infer_column

if TYPE_CHECKING:
    from transforms.decoders.base import Decoder, Message

__all__ = [
    "ConnectEnvelopeReader",
    "EnvelopeKey",
    "FieldError",
    "JsonLimits",
    "RowLayout",
    "TableName",
    "TopicTables",
    "by_content",
    "column_from_schema",
    "columns_from_struct",
    "decode_row",
    "decode_value",
    "from_extended_json",
    "infer_columns",
    "parse_json_key",
    "position_sequence",
    "read_connect_message",
    "snapshot_marker",
    "struct_field_schemas",
]


class FieldError(ValueError):
    """A Connect JSON document does not have the expected shape at ``field``."""

    def __init__(self, field: str | None, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Size and nesting limits for JSON embedded in a message (the decoder's options)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH

    def loads(self, text: str | bytes, field: str) -> Any:
        """The JSON value of ``text``; a FieldError naming ``field`` when it is invalid or too big."""
        try:
            return loads_limited(text, max_bytes=self.max_bytes, max_depth=self.max_depth, what="JSON text")
        except JsonLimitError as exc:
            raise FieldError(field, str(exc)) from exc


# ---------------------------------------------------------------------------- schemas

_TYPES: dict[str, ConnectType] = {
    "int8": ConnectType.INT8,
    "int16": ConnectType.INT16,
    "int32": ConnectType.INT32,
    "int64": ConnectType.INT64,
    "float": ConnectType.FLOAT32,
    "float32": ConnectType.FLOAT32,
    "double": ConnectType.FLOAT64,
    "float64": ConnectType.FLOAT64,
    "boolean": ConnectType.BOOLEAN,
    "string": ConnectType.STRING,
    "bytes": ConnectType.BYTES,
    "array": ConnectType.ARRAY,
    "map": ConnectType.MAP,
    "struct": ConnectType.STRUCT,
}


def column_from_schema(schema: Any, name: str, where: str = "schema") -> Column:
    """The column described by one Connect JSON field schema.

    Logical names and parameters are kept. A ``map`` becomes an ``io.debezium.data.Json`` string
    (our Column model has no map key/value schemas).

    >>> column_from_schema({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
    ...     "parameters": {"scale": "2"}, "optional": True}, "p").scale
    2
    """
    if not isinstance(schema, dict):
        raise FieldError(where, f"expected a Connect schema object, found {type_name(schema)}")
    kind = schema.get("type")
    ctype = _TYPES.get(kind) if isinstance(kind, str) else None
    if ctype is None:
        raise FieldError(where, f"unknown Connect type {kind!r:.60}")
    optional = schema.get("optional", False)
    if type(optional) is not bool:
        raise FieldError(where, f"expected optional to be true or false, found {type_name(optional)}")
    logical = schema.get("name")
    if logical is not None and not isinstance(logical, str):
        raise FieldError(where, f"expected a string schema name, found {type_name(logical)}")
    raw_params = schema.get("parameters") or {}
    if not isinstance(raw_params, dict):
        raise FieldError(where, f"expected an object of parameters, found {type_name(raw_params)}")
    params = tuple(sorted((str(k), str(v)) for k, v in raw_params.items()))
    _check_decimal_params(raw_params, where)
    meta = tuple((k, orjson.dumps(schema[k]).decode()) for k in _KEPT_SCHEMA_KEYS if isinstance(schema.get(k), str))
    if ctype is ConnectType.MAP:
        return Column(name, ConnectType.STRING, optional, Logical.JSON)
    if ctype is ConnectType.STRUCT:
        fields = columns_from_struct(schema, where)
        return Column(name, ctype, optional, logical, params, fields=fields, meta=meta)
    if ctype is ConnectType.ARRAY:
        items = schema.get("items")
        item = column_from_schema(items, "", f"{where}.items") if items is not None else None
        return Column(name, ctype, optional, logical, params, items=item, meta=meta)
    if logical == Logical.DECIMAL and "scale" not in raw_params:
        raise FieldError(where, "a Decimal schema needs a 'scale' parameter")
    return Column(name, ctype, optional, logical, params, meta=meta)


_KEPT_SCHEMA_KEYS = ("doc",)
"""Connect schema keys a column keeps as they came (see ``Column.meta``). Not ``default``: a
consumer's JsonConverter (``replace.null.with.default``, on by default) would read a null cell of
such a column as the default, which is not what the change said."""


def _check_decimal_params(raw_params: Mapping[str, Any], where: str) -> None:
    """``scale``/``connect.decimal.precision`` parameters must be integers within the bounds."""
    values = {}
    for name in ("scale", "connect.decimal.precision"):
        raw = raw_params.get(name)
        if raw is None:
            continue
        number = parse_int(str(raw))
        if number is None:
            raise FieldError(f"{where}.parameters.{name}", f"expected an integer, found {raw!r:.40}")
        values[name] = number
    try:
        check_decimal_params(values.get("connect.decimal.precision"), values.get("scale"))
    except ValueError as exc:
        raise FieldError(f"{where}.parameters", str(exc)) from exc


def struct_field_schemas(schema: Any, where: str = "schema") -> dict[str, dict[str, Any]]:
    """The field schemas of a Connect struct schema, by field name.

    A field without a name, or a name declared twice, is an error, as ``JsonConverter`` refuses
    them (Connect's ``SchemaBuilder.field``)."""
    if not isinstance(schema, dict):
        raise FieldError(where, f"expected a Connect schema object, found {type_name(schema)}")
    fields = schema.get("fields", [])
    if not isinstance(fields, list):
        raise FieldError(f"{where}.fields", f"expected an array, found {type_name(fields)}")
    out: dict[str, dict[str, Any]] = {}
    for i, f in enumerate(fields):
        if not isinstance(f, dict) or not isinstance(f.get("field"), str):
            raise FieldError(f"{where}.fields[{i}]", "expected an object with a string 'field'")
        name = f["field"]
        if not name:
            raise FieldError(f"{where}.fields", "a field without a name")
        if name in out:
            raise FieldError(f"{where}.fields", "a field name is declared twice")
        out[name] = f
    return out


def columns_from_struct(schema: Any, where: str = "schema") -> tuple[Column, ...]:
    """The columns of a Connect struct schema, in declaration order."""
    return tuple(
        column_from_schema(f, name, f"{where}.{name}")
        for name, f in struct_field_schemas(schema, where).items()
    )


def infer_columns(*images: Mapping[str, Any] | None) -> tuple[Column, ...]:
    """Columns for schemaless rows: the union of the images' fields, each typed by the join of its
    non-null values' types (:func:`~transforms.decoders.schemaless_json.infer_images`).

    Numbers become int64/double (double if any image has a fraction; an integer beyond int64 a
    Decimal of scale 0), strings string, objects ``io.debezium.data.Json``, booleans boolean, and
    values of types no one type holds string. The UNAVAILABLE marker is a string here: Debezium
    writes it in string and bytes columns only. :meth:`ConnectEnvelopeReader.inferred_layout`
    keeps the types of a table stable across messages.

    >>> [c.type.value for c in infer_columns({"a": 1, "b": None}, {"a": 1.5, "b": "x"})]
    ['double', 'string']
    """
    return _infer(images).columns


def _infer(images: tuple[Mapping[str, Any] | None, ...]) -> Inferred:
    return infer_images(images, marker_absent=False)


# ---------------------------------------------------------------------------- values


_MAX_UNSCALED_BYTES = 512
"""Connect Decimal bytes beyond this are more digits than any decimal may have."""


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CoercionError(f"expected base64, found {text[:40]!r}") from exc


def _unscaled(data: bytes, scale: int) -> Decimal:
    if len(data) > _MAX_UNSCALED_BYTES:
        raise CoercionError(f"Connect Decimal of {len(data)} bytes is beyond {_MAX_UNSCALED_BYTES}")
    try:
        check_decimal_params(None, scale)
    except ValueError as exc:
        raise CoercionError(str(exc)) from exc
    return decimal_from_unscaled(data, scale)


def _decimal(col: Column, raw: Any) -> Decimal:
    if isinstance(raw, Decimal):
        if raw.is_finite():
            return raw
        raise CoercionError(f"expected a finite decimal, found {raw!r}")
    if isinstance(raw, str):
        try:
            return _unscaled(_b64(raw), col.scale or 0)
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
            return _unscaled(_b64(value), scale)
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
        return _b64(raw)
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
        raise FieldError(field, f"{exc} (column type {_type_label(col)})") from exc


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

    def convert(raw: Any) -> Decimal:
        # _decimal tries base64 first and keeps its result when it decodes; anything else (plain
        # decimal text, numbers, a failure) is left to decode_value
        if type(raw) is str:
            return check_value(col, _unscaled(_b64(raw), scale))
        raise NotFast

    return convert


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
        self._plan = RowPlan(columns, _fast_decoder)
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
            raise CoercionError(f"$date {value} is out of range") from exc
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
                return _b64(text)
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


# ---------------------------------------------------------------------------- envelopes


@dataclass(frozen=True, slots=True)
class TableName:
    """Where a change comes from when the envelope's source block does not say."""

    db: str | None
    schema: str | None
    table: str | None


class TopicTables:
    """A decoder's fallback table per topic (:class:`TableName`), worked out once per topic.

    Bounded: after ``max_topics`` topics it starts over.
    """

    def __init__(self, table_of: Callable[[str], TableName], max_topics: int = 1024) -> None:
        self._table_of = table_of
        self._max_topics = max_topics
        self._tables: dict[str, TableName] = {}

    def __call__(self, topic: str) -> TableName:
        table = self._tables.get(topic)
        if table is None:
            if len(self._tables) >= self._max_topics:
                self._tables.clear()
            table = self._tables[topic] = self._table_of(topic)
        return table


@dataclass(frozen=True, slots=True)
class EnvelopeKey:
    """The key of a change: column names, their Connect columns, and the values when known."""

    columns: tuple[Column, ...]
    values: Mapping[str, Any] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple([c.name for c in self.columns])


KeyColumns = Mapping[str, tuple[Column, Column, FastConverter]]
"""The columns a key schema declares, by name: each as declared, as a (non-optional) key column,
and a fast converter of its values (see :func:`_fast_decoder`)."""


def key_columns(schema: Any) -> KeyColumns:
    """The columns declared by the Connect schema of a Kafka key (none unless it is a struct)."""
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        return {}
    return {
        c.name: (c, c.as_optional(False), _fast_decoder(c) or _not_fast)
        for c in columns_from_struct(schema, "key.schema")
    }


def parse_json_key(
    raw: bytes | None,
    mongodb_hint: bool = False,
    limits: JsonLimits = JsonLimits(),
    declared_columns: Callable[[Any], KeyColumns] = key_columns,
) -> EnvelopeKey | None:
    """The Kafka key of a Debezium-style record: ``{"schema", "payload"}`` or a bare object.

    ``None`` for no key, a ``null`` key, or a key that is not an object of columns.
    A MongoDB key ``{"id": "<extended JSON>"}`` names the ``_id`` column. ``declared_columns``
    reads the key's schema (:func:`key_columns`, or a cached equivalent); with a struct schema, a
    payload member that the schema does not declare is ignored, as ``JsonConverter`` ignores it.
    """
    if raw is None or not raw.strip():
        return None
    try:
        doc = loads_limited(raw, max_bytes=limits.max_bytes, max_depth=limits.max_depth, what="key")
    except JsonLimitError as exc:
        raise FieldError("key", f"invalid JSON key: {exc}") from exc
    schema: Any = None
    if isinstance(doc, dict) and "payload" in doc and set(doc) <= {"schema", "payload"}:
        schema, doc = doc.get("schema"), doc.get("payload")
    if not isinstance(doc, dict) or not doc:
        return None
    declared = declared_columns(schema)
    if declared and not declared.keys() >= doc.keys():
        doc = {name: value for name, value in doc.items() if name in declared}
        if not doc:
            return None
    if mongodb_hint and set(doc) == {"id"} and isinstance(doc["id"], str):
        try:
            value = from_extended_json(limits.loads(doc["id"], "key.id"))
        except FieldError:
            value = doc["id"]
        col = infer_column("_id", value)
        try:
            check_value(col, value)
        except CoercionError as exc:
            raise FieldError("key.id", str(exc)) from exc
        return EnvelopeKey((col.as_optional(False),), {"_id": value})
    values: dict[str, Any] = {}
    columns = []
    fast: FastConverter
    for name, raw_value in doc.items():
        known = declared.get(name)
        if known is None:
            col = infer_column(name, raw_value)
            key_col, fast = col.as_optional(False), _not_fast
        else:
            col, key_col, fast = known
        try:
            values[name] = fast(raw_value)
        except Exception:  # the full conversion decides
            try:
                values[name] = decode_value(col, raw_value)
            except CoercionError as exc:
                raise FieldError(f"key.{name}", str(exc)) from exc
        columns.append(key_col)
    return EnvelopeKey(tuple(columns), values)


def by_content(cache: LruCache[bytes, V], schema: Any, build: Callable[[Any], V], salt: bytes = b"") -> V:
    """``build(schema)``, cached by the schema's JSON text (exact: ``1``, ``1.0`` and ``true``
    differ) plus ``salt``. Failures are not cached: the next message raises them again.

    ``build`` must not return None (a cache miss); wrap such results (a 1-tuple).
    """
    try:
        key = orjson.dumps(schema) + salt
    except orjson.JSONEncodeError:
        return build(schema)
    value = cache.get(key)
    if value is None:
        value = build(schema)
        cache.put(key, value)
    return value


def read_connect_message(
    decoder: Decoder, message: Message, read: Callable[[Any, dict[str, Any]], list[Event]]
) -> list[Event]:
    """The start that the Connect JSON decoders share.

    A tombstone (no value, ``null``, or a ``{"schema": ..., "payload": null}`` value) gives
    ``[]``. Otherwise the value is parsed within the decoder's limits, unwrapped from its
    ``{"schema", "payload"}`` wrapper when it has one, and passed as ``read(schema, payload)``;
    a :class:`FieldError` becomes the decoder's DecodeError with the payload preview.
    """
    value = message.value
    # (a value that starts with an object cannot strip to nothing or null: no copy of it then)
    if value is None or (value[:1] != b"{" and value.strip() in (b"", b"null")):
        return []
    doc = decoder.load_json(message)
    try:
        token = _FIRST_PASS.set(True)
        try:
            return _read_document(doc, read)
        except InexactNumber:
            pass
        finally:
            _FIRST_PASS.reset(token)
        return _read_document(_loads_exact(value), read)
    except (FieldError, InexactNumber) as exc:
        field, reason = (exc.field, exc.reason) if isinstance(exc, FieldError) else (None, "inexact decimal number")
        raise decoder.error(field, reason, value) from exc


def _read_document(doc: Any, read: Callable[[Any, dict[str, Any]], list[Event]]) -> list[Event]:
    schema: Any = None
    payload: Any = doc
    if "payload" in doc and doc.keys() <= _WRAPPER_KEYS:
        schema, payload = doc.get("schema"), doc["payload"]
        if payload is None:
            return []
        if not isinstance(payload, dict):
            raise FieldError("payload", f"expected an object, found {type_name(payload)}")
        if schema is not None and not isinstance(schema, dict):
            raise FieldError("schema", f"expected an object or null, found {type_name(schema)}")
    return read(schema, payload)


_WRAPPER_KEYS = frozenset({"schema", "payload"})
_OPS = {op.value: op for op in Operation}
_SCHEMA_CACHE_BYTES = 64 * 1024 * 1024
_KEY_SCHEMA_CACHE_BYTES = 8 * 1024 * 1024
V = TypeVar("V")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _EnvelopeSchema:
    """What an envelope's Connect schema decides, derived once per distinct schema."""

    layout: RowLayout | None
    """The row columns declared by the ``after`` (else ``before``) struct; None: inferred per message."""
    source: Mapping[str, tuple[Column, FastConverter]]
    """The declared source fields that are coerced (not structs): column and fast converter."""
    native: NativeLayout | None = None
    """The connector's own envelope layout (readers of Debezium input only)."""
    base_name: str | None = None
    """The envelope schema's name without ``.Envelope`` (``<prefix>.<namespace>.<table>``)."""


_SCHEMALESS = _EnvelopeSchema(None, {})

# the envelope fields cdcnorm models; a Debezium envelope's others (ts_us, ts_ns) pass through
_MODELED_FIELDS = frozenset({"before", "after", "source", "op", "ts_ms", "transaction"})
_JSON_TYPE_NAMES = {"float32": "float", "float64": "double"}
# a source block written by a Debezium connector has these (a Debezium-like producer's may not:
# Flink CDC's has only db and table); only such a block is kept as it came
_NATIVE_SOURCE_FIELDS = frozenset({"version", "connector", "name", "ts_ms"})
# connectors whose topics are named <prefix>.<schema>.<table> (the others: <prefix>.<db>.<table>)
_SCHEMA_NAMED = frozenset({"postgresql", "oracle", "db2", "informix", "yugabytedb"})


def connect_json_schema(schema: Any) -> Any:
    """A Connect JSON schema with Java's ``float32``/``float64`` type names written as
    ``JsonConverter`` writes them (``float``/``double``); anything else unchanged."""
    if isinstance(schema, dict):
        out = {k: connect_json_schema(v) for k, v in schema.items()}
        kind = out.get("type")
        if isinstance(kind, str) and kind in _JSON_TYPE_NAMES:
            out["type"] = _JSON_TYPE_NAMES[kind]
        return out
    if isinstance(schema, list):
        return [connect_json_schema(v) for v in schema]
    return schema


_JSON_INT_RANGES = {
    ConnectType.INT8: 1 << 7,
    ConnectType.INT16: 1 << 15,
    ConnectType.INT32: 1 << 31,
    ConnectType.INT64: 1 << 63,
}


def check_json_value(col: Column, value: Any, where: str) -> Any:
    """``value`` as ``JsonConverter`` reads it as ``col`` and writes it back (a Debezium source
    block or envelope field kept as it came); raises FieldError unless it is JSON of ``col``'s type.

    ``JsonConverter`` reads a struct by its schema's fields, so a member that the schema does not
    declare is dropped (at any depth), and the value is returned without it; otherwise ``value``
    itself is returned.

    >>> check_json_value(Column("pos", ConnectType.INT64), "154", "source.pos")
    Traceback (most recent call last):
    ...
    transforms.decoders.connect_json.FieldError: source.pos: expected int64, found str
    >>> check_json_value(Column("s", ConnectType.STRUCT, fields=(Column("a", ConnectType.INT32),)), {"a": 1, "b": 2}, "s")
    {'a': 1}
    """
    if value is None:
        if not col.optional:
            raise FieldError(where, "null in a required field")
        return value
    kind = col.type
    top = _JSON_INT_RANGES.get(kind)
    if top is not None:
        ok = type(value) is int and -top <= value < top
    elif kind in (ConnectType.FLOAT32, ConnectType.FLOAT64):
        ok = type(value) in (int, float)
    elif kind is ConnectType.BOOLEAN:
        ok = type(value) is bool
    elif kind in (ConnectType.STRING, ConnectType.BYTES):
        ok = type(value) is str
        if ok and kind is ConnectType.BYTES:
            _b64(value)
    elif kind is ConnectType.ARRAY:
        ok = type(value) is list
        if ok and col.items is not None:
            items = [check_json_value(col.items, item, f"{where}[{i}]") for i, item in enumerate(value)]
            if any(new is not old for new, old in zip(items, value, strict=True)):
                value = items
    elif kind is ConnectType.STRUCT:
        ok = type(value) is dict
        if ok:
            value = check_json_struct(col.fields, value, where)
    else:  # a map
        ok = type(value) is dict
    if not ok:
        raise FieldError(where, f"expected {kind.value}, found {type_name(value)}")
    return value


def canonical_field_schema(schema: Any, where: str) -> dict[str, Any]:
    """A Connect field schema as ``JsonConverter`` writes it back: parsed (a bad one raises
    FieldError) and written out again, keeping its ``field``, ``version``, ``doc`` and a valid
    ``default``; the schema itself when it was already written that way."""
    col = column_from_schema(schema, str(schema.get("field") or ""), where)
    out = column_schema(col, DecimalHandlingMode.PRECISE, with_field="field" in schema)
    if col.type is ConnectType.STRUCT:
        out["fields"] = [
            canonical_field_schema(f, f"{where}.{f.get('field')}") for f in struct_field_schemas(schema, where).values()
        ]
    elif col.type is ConnectType.ARRAY and isinstance(schema.get("items"), dict):
        out["items"] = canonical_field_schema(schema["items"], f"{where}.items")
    version = schema.get("version")
    out.pop("version", None)
    if type(version) is int:
        out["version"] = version
    if "default" in schema:
        default = check_json_value(col, schema["default"], f"{where}.default")
        if default is not None:  # a null default is no default to JsonConverter: it writes none back
            out["default"] = default
    return schema if out == schema else out


def check_json_struct(fields: tuple[Column, ...], value: dict[str, Any], where: str) -> dict[str, Any]:
    """:func:`check_json_value` for each field of a struct: ``value`` as ``JsonConverter`` reads
    it back. A member the schema does not declare is dropped, as ``JsonConverter`` drops it (it
    looks each declared field up in the JSON object and ignores the rest); ``value`` itself when
    nothing changed."""
    out: dict[str, Any] = {}
    changed = False
    for col in fields:
        name = col.name
        member = value.get(name)
        checked = check_json_value(col, member, f"{where}.{name}")
        if name in value:
            out[name] = checked
            changed = changed or checked is not member
    if changed or len(out) != len(value):
        return {name: out[name] for name in value if name in out}  # the members it came with, in its order
    return value


def topic_namespace(connector: Any, db: str | None, schema: str | None) -> str | None:
    """The namespace Debezium's connector puts in its topic names, where it is not ``db``:
    the schema for PostgreSQL, Oracle and Db2, ``db.schema`` for SQL Server."""
    if not isinstance(connector, str):
        return None
    if connector in _SCHEMA_NAMED and schema:
        return schema
    if connector == "sqlserver" and db and schema:
        return f"{db}.{schema}"
    return None


class ConnectEnvelopeReader:
    """Turns one Debezium-style envelope payload (plus optional Connect schema) into a ChangeEvent.

    Row columns come from the envelope schema's ``before``/``after`` structs when there is one,
    else they are inferred from the values. ``{}`` images are read as ``null`` (Arcion writes
    ``before: {}`` for inserts). The original ``source`` block is kept in ``SourceInfo.fields``
    (its own ``version``/``connector``/``name`` as ``source_version``/``source_connector``/
    ``source_name``); source fields declared in the schema are coerced to their declared types.
    Equal table schemas are reused (a bounded LRU). ``column_map`` rewrites declared columns
    (a format's own logical names into Debezium's). ``limits`` bound the JSON documents that
    MongoDB images carry as strings.

    What a message's Connect schemas decide (row columns, source field types, key columns) is
    cached by the schemas' JSON text, and schemaless row columns by the images' field names and
    value types, so the messages of a known table only look their structure up (bounded LRUs).
    """

    def __init__(
        self,
        connector: str,
        cache_size: int = 1024,
        column_map: Callable[[Column], Column] | None = None,
        limits: JsonLimits = JsonLimits(),
        native: bool = False,
        store: MetadataStore | None = None,
    ) -> None:
        self.connector = connector
        self.native = native
        self.limits = limits
        # Debezium records without schemas: (payload field names, extra names) -> their layout
        self._schemaless_layouts: LruCache[tuple[Any, ...], NativeLayout] = LruCache(cache_size)
        self._column_map = column_map
        self._tables = TableCache(cache_size)
        self._schemas: LruCache[bytes, tuple[Column, ...]] = LruCache(
            cache_size, _SCHEMA_CACHE_BYTES, lambda key, _: len(key)
        )
        self._envelopes: LruCache[bytes, _EnvelopeSchema] = LruCache(
            cache_size, _SCHEMA_CACHE_BYTES, lambda key, _: len(key)
        )
        self._layouts: LruCache[bytes, RowLayout] = LruCache(
            cache_size, _SCHEMA_CACHE_BYTES, lambda key, _: len(key)
        )
        # keyed by a layout's id: each entry holds its layout, so that id is not reused meanwhile.
        # (id, db, schema, table, key names) -> the table: names are strings or None, so equal keys
        # mean equal tables; (id, extra columns) -> the layout of the columns followed by them
        self._layout_tables: LruCache[tuple[Any, ...], tuple[RowLayout, TableSchema]] = LruCache(4 * cache_size)
        self._extended: LruCache[tuple[int, tuple[Column, ...]], tuple[RowLayout, RowLayout]] = LruCache(
            cache_size
        )
        self._key_schemas: LruCache[bytes, KeyColumns] = LruCache(
            cache_size, _KEY_SCHEMA_CACHE_BYTES, lambda key, _: len(key)
        )
        # the shape of schemaless images (see _image_shape) -> their layout and inferred columns
        self._shapes: LruCache[tuple[Any, ...], tuple[RowLayout, Inferred]] = LruCache(
            cache_size, 200_000, lambda _, hit: len(hit[0].columns) + 1
        )
        # the inferred column types of each table, kept stable across messages (see schemaless_json)
        # (in ``store``, the decoder's metadata store, too: a restart reads them back)
        self.memory = ColumnMemory(4 * cache_size, 200_000, store)

    # -- caches ------------------------------------------------------------------------

    def table(self, table: TableSchema) -> TableSchema:
        """The cached TableSchema equal to ``table`` (so the emitter's caches hit)."""
        return self._tables.intern(table)

    def struct_columns(self, schema: Any, where: str) -> tuple[Column, ...]:
        """``columns_from_struct`` with a cache keyed by the schema's JSON text."""

        def build(schema: Any) -> tuple[Column, ...]:
            cols = columns_from_struct(schema, where)
            if self._column_map is not None:
                cols = tuple(self._column_map(c) for c in cols)
            return cols

        return by_content(self._schemas, schema, build, where.encode())

    def struct_layout(self, schema: Any, where: str) -> RowLayout:
        """The layout of ``struct_columns(schema, where)``, cached likewise."""

        def build(schema: Any) -> RowLayout:
            return RowLayout(self.struct_columns(schema, where))

        return by_content(self._layouts, schema, build, where.encode())

    def inferred_layout(
        self,
        after: Mapping[str, Any] | None,
        before: Mapping[str, Any] | None = None,
        table: Hashable | None = None,
    ) -> RowLayout:
        """The layout of ``infer_columns(after, before)``, cached by the images' shapes.

        With ``table`` (e.g. ``(db, schema, table)``) the columns are typed as that table's memory
        types them, the memory widened by them first (see :mod:`~transforms.decoders.schemaless_json`),
        so that a column's type does not change with the values of one message.
        """
        shape = (_image_shape(after), _image_shape(before))
        hit = self._shapes.get(shape)
        if hit is None:
            inferred = _infer((after, before))
            hit = (RowLayout(inferred.columns), inferred)
            self._shapes.put(shape, hit)
        layout, inferred = hit
        if table is None:
            return layout
        return self.memory.table(table).resolved(layout, inferred, layout.retyped)

    def memory_columns(self, table: Hashable, columns: tuple[Column, ...]) -> tuple[Column, ...]:
        """``columns`` (inferred elsewhere, e.g. from a schemaless key) as the table's memory types
        those it knows; the memory is not changed."""
        types = self.memory.table(table).types
        return tuple(types.get(c.name, c) for c in columns)

    def layout_table(
        self,
        layout: RowLayout,
        db: str | None,
        schema: str | None,
        name: str,
        key: tuple[str, ...],
        namespace: str | None = None,
    ) -> TableSchema:
        """The (interned) TableSchema of the layout's columns with these names and key columns."""
        ident = (id(layout), db, schema, name, key, namespace)
        hit = self._layout_tables.get(ident)
        if hit is not None and hit[0] is layout:
            return hit[1]
        table = self._tables.intern(TableSchema(db, schema, name, layout.columns, key, namespace))
        self._layout_tables.put(ident, (layout, table))
        return table

    def extended_layout(self, layout: RowLayout, extra: tuple[Column, ...]) -> RowLayout:
        """The layout of the layout's columns followed by ``extra`` (key columns rows lack)."""
        ident = (id(layout), extra)
        hit = self._extended.get(ident)
        if hit is not None and hit[0] is layout:
            return hit[1]
        extended = RowLayout(layout.columns + extra)
        self._extended.put(ident, (layout, extended))
        return extended

    def key(self, raw: bytes | None, mongodb_hint: bool = False) -> EnvelopeKey | None:
        """:func:`parse_json_key` within this reader's limits, the key schema's columns cached."""
        return parse_json_key(raw, mongodb_hint, self.limits, self._key_columns)

    def _key_columns(self, schema: Any) -> KeyColumns:
        if not isinstance(schema, dict) or schema.get("type") != "struct":
            return {}
        return by_content(self._key_schemas, schema, key_columns)

    def _envelope_schema(self, schema: Any) -> _EnvelopeSchema:
        """What an envelope schema decides (raises what :meth:`row_columns` raises for it)."""
        if not isinstance(schema, dict):
            return _SCHEMALESS
        return by_content(self._envelopes, schema, self._read_envelope_schema)

    def _read_envelope_schema(self, schema: Any) -> _EnvelopeSchema:
        fields = struct_field_schemas(schema)
        layout = None
        for name in ("after", "before"):
            sub = fields.get(name)
            if isinstance(sub, dict) and sub.get("type") == "struct":
                layout = self.struct_layout(sub, f"schema.{name}")
                break
        native = None
        base_name = None
        if self.native and _MODELED_FIELDS.intersection(fields):  # an envelope schema, not some other struct
            if len(fields) != len(schema.get("fields", ())):
                raise FieldError("schema.fields", "a field name is declared twice")
            if not all(fields):
                raise FieldError("schema.fields", "a field without a name")
            source_schema = fields.get("source")
            if isinstance(source_schema, dict):
                declared = source_schema.get("fields")
                if len(struct_field_schemas(source_schema, "schema.source")) != len(declared or ()):
                    raise FieldError("schema.source.fields", "a field name is declared twice")
            version = schema.get("version")
            transaction_schema = fields.get("transaction")
            native = NativeLayout(
                version if isinstance(version, int) and not isinstance(version, bool) else None,
                canonical_field_schema(connect_json_schema(source_schema), "schema.source")
                if isinstance(source_schema, dict)
                else None,
                tuple(
                    canonical_field_schema(connect_json_schema(f), f"schema.{n}")
                    for n, f in fields.items()
                    if n not in _MODELED_FIELDS
                ),
                tuple(fields),
                canonical_field_schema(transaction_schema, "schema.transaction")
                if isinstance(transaction_schema, dict)
                else None,
            )
            name = schema.get("name")
            if isinstance(name, str) and name.endswith(".Envelope"):
                base_name = name[: -len(".Envelope")]
        return _EnvelopeSchema(layout, self._source_fields(fields.get("source")), native, base_name)

    def _native_source(
        self, payload: Mapping[str, Any], source: dict[str, Any], declared: _EnvelopeSchema
    ) -> NativeSource | None:
        """The Debezium record's own source block and extra envelope fields (kept as they came);
        ``None`` when its schema does not declare the fields of a connector's source block (the
        record then gets cdcnorm's own, as a Debezium-like producer's does)."""
        layout = declared.native
        if layout is None:  # no schema: the payload's own fields and order, typed by their values
            if not all(payload):
                raise FieldError("payload", "a field without a name")
            kinds = tuple((n, source_field_type(v)) for n, v in payload.items() if n not in _MODELED_FIELDS)
            ident = (tuple(payload), kinds)
            layout = self._schemaless_layouts.get(ident)
            if layout is None:
                extra_fields = tuple({"type": t.value, "optional": True, "field": n} for n, t in kinds)
                layout = NativeLayout(None, None, extra_fields, tuple(payload))
                self._schemaless_layouts.put(ident, layout)
            extras = {n: source_field_value(payload[n]) for n, _ in kinds}
        else:
            extras = {f["field"]: payload.get(f["field"]) for f in layout.extra_fields}
        if layout.source_schema is None:  # typed from its values when emitted: JSON text for the rest
            if not all(source):
                raise FieldError("source", "a source field without a name")
            source = {name: source_field_value(value) for name, value in source.items()}
        else:  # written back as it came, so it must be what its schema says
            members = self.struct_columns(layout.source_schema, "schema.source")
            source = check_json_struct(members, source, "source")  # without undeclared fields
            if not _is_native_source(source):  # as JsonConverter reads it, not a connector's block
                return None
            if len(source) != len(members):  # a missing optional field: JsonConverter writes it as null
                source = {c.name: source.get(c.name) for c in members}
            for col, field in zip(self._extra_columns(layout), layout.extra_fields, strict=True):
                extras[field["field"]] = check_json_value(col, extras[field["field"]], field["field"])
            # JsonConverter writes a field's default for null: a null there is not what it reads back
            for fields, values, where in (
                (layout.source_schema.get("fields", ()), source, "source."),
                (layout.extra_fields, extras, ""),
            ):
                for field in fields:
                    if "default" in field and values.get(field["field"], 0) is None:
                        raise FieldError(where + field["field"], "null in a field with a default")
            if layout.transaction_schema is not None:
                column = self.struct_columns(
                    {"type": "struct", "fields": [layout.transaction_schema]}, "schema"
                )[0]
                # checked only: the block is written from its modeled fields (undeclared ones drop)
                check_json_value(column, payload.get("transaction"), "transaction")
        return NativeSource(layout, source, extras)

    def _extra_columns(self, layout: NativeLayout) -> tuple[Column, ...]:
        """The columns of a native layout's extra envelope fields (``ts_us``, ``ts_ns`` ...)."""
        return self.struct_columns({"type": "struct", "fields": list(layout.extra_fields)}, "schema")

    def _topic_namespace(
        self, declared: _EnvelopeSchema, source: Mapping[str, Any], db: str | None, schema: str | None, table: str
    ) -> str | None:
        """Debezium's own namespace of topic names: read off the envelope schema's name
        (``<prefix>.<namespace>.<table>.Envelope``), else the connector's naming rule."""
        prefix = source.get("name")
        base = declared.base_name
        if base is not None and isinstance(prefix, str) and base.startswith(prefix + ".") and base.endswith("." + table):
            namespace = base[len(prefix) + 1 : -len(table) - 1]
            if namespace:
                return None if namespace == db else namespace
        return topic_namespace(source.get("connector"), db, schema)

    def _source_fields(self, source_schema: Any) -> dict[str, tuple[Column, FastConverter]]:
        """The source fields that :meth:`source_info` coerces: declared, and not structs."""
        if not isinstance(source_schema, dict):
            return {}
        try:
            declared = self.struct_columns(source_schema, "schema.source")
        except FieldError:
            return {}
        return {c.name: (c, fast_converter(c) or _not_fast) for c in declared if c.type is not ConnectType.STRUCT}

    # -- pieces --------------------------------------------------------------------------

    @staticmethod
    def operation(raw: Any, field: str = "op") -> Operation | None:
        """The op code; ``None`` for Debezium's ``m`` (logical decoding message)."""
        if raw == "m":
            return None
        op = _OPS.get(raw) if isinstance(raw, str) else None
        if op is None:
            raise FieldError(field, f"expected one of c, u, d, r, t, m, found {raw!r}")
        return op

    def image(self, raw: Any, field: str) -> dict[str, Any] | None:
        """A row image; a MongoDB JSON document string is parsed; ``{}`` reads as ``null``."""
        if raw is None:
            return None
        if isinstance(raw, str):
            try:
                doc = self.limits.loads(raw, field)
            except FieldError as exc:
                raise FieldError(field, f"expected an object or a JSON document string: {exc.reason}") from exc
            if not isinstance(doc, dict):
                raise FieldError(field, f"expected a JSON object document, found {type_name(doc)}")
            return {k: from_extended_json(v) for k, v in doc.items()}
        if not isinstance(raw, dict):
            raise FieldError(field, f"expected an object or null, found {type_name(raw)}")
        return raw or None

    def source_info(
        self,
        source: Mapping[str, Any],
        source_schema: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> SourceInfo:
        """SourceInfo from a Debezium source block (names excluded; see :meth:`table_name`)."""
        return self._source_info(source, self._source_fields(source_schema), extra)

    def _source_info(
        self,
        source: Mapping[str, Any],
        declared: Mapping[str, tuple[Column, FastConverter]],
        extra: Mapping[str, Any] | None,
    ) -> SourceInfo:
        fields: dict[str, Any] = {}
        out_name = _SOURCE_NAMES.get
        for name, value in source.items():
            out = out_name(name, name)
            if out is None:
                continue
            if value is not None:
                typed = declared.get(name)
                if typed is not None:
                    col, fast = typed
                    try:
                        value = fast(value)
                    except Exception:  # the full conversion decides; a value it rejects is kept as is
                        with contextlib.suppress(CoercionError):
                            value = coerce_checked(col, value)
            fields[out] = value
        if extra:
            fields.update(extra)
        ts_raw = source.get("ts_ms")
        ts_ms = _int(ts_raw)
        if ts_raw is not None and ts_ms is None:
            raise FieldError("source.ts_ms", f"expected epoch milliseconds, found {ts_raw!r}")
        original_sequence = source.get("sequence")
        sequence = _position(fields, ts_ms, original_sequence)
        if original_sequence is not None and original_sequence != sequence:
            fields["source_sequence"] = original_sequence
        return SourceInfo(
            connector=self.connector,
            ts_ms=ts_ms,
            snapshot=snapshot_marker(source.get("snapshot")),
            sequence=sequence,
            fields=fields,
        )

    @staticmethod
    def table_name(source: Mapping[str, Any], fallback: TableName) -> TableName:
        """db/schema/table from the source block (``collection`` for MongoDB), else the fallback."""
        return TableName(*_table_name(source, fallback))

    @staticmethod
    def transaction(raw: Any) -> TransactionRef | None:
        """The ``transaction`` block, or ``None``."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or raw.get("id") is None:
            raise FieldError("transaction", f"expected an object with an id, found {raw!r}")
        total, order = raw.get("total_order"), raw.get("data_collection_order")
        return TransactionRef(str(raw["id"]), _int(total), _int(order))

    def row_columns(
        self,
        schema: Any,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> tuple[tuple[Column, ...], bool]:
        """The row columns from an envelope schema's ``after``/``before`` struct, else inferred.

        The flag says whether the columns were declared (True) or inferred (False).
        """
        layout = self._envelope_schema(schema).layout
        if layout is not None:
            return layout.columns, True
        return self.inferred_layout(after, before).columns, False

    def row_layout(
        self,
        schema: Any,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> RowLayout:
        """The layout of :meth:`row_columns`."""
        return self._envelope_schema(schema).layout or self.inferred_layout(after, before)

    # -- the envelope --------------------------------------------------------------------

    def read(
        self,
        payload: Mapping[str, Any],
        schema: Any,
        *,
        key: EnvelopeKey | None,
        fallback: TableName,
        extra_source: Mapping[str, Any] | None = None,
        absent_columns: frozenset[str] = frozenset(),
    ) -> ChangeEvent | None:
        """The change in one envelope payload; ``None`` for a Debezium ``m`` message.

        ``key`` names the key columns (and their values, used to fill a delete whose ``before``
        is missing). ``absent_columns`` are columns that must read UNAVAILABLE when missing
        from an image even if the schema does not declare them (CDL ``LOB_COLUMNS``).
        """
        op = self.operation(payload.get("op"))
        if op is None:
            return None
        before = self.image(payload.get("before"), "before")
        after = self.image(payload.get("after"), "after")
        source = payload.get("source")
        if source is None:
            source = {}
        if not isinstance(source, dict):
            raise FieldError("source", f"expected an object, found {type_name(source)}")
        declared = self._envelope_schema(schema)
        db, db_schema, table_name = _table_name(source, fallback)
        ident: tuple[str | None, ...] | None = None
        if declared.layout is not None:
            layout = declared.layout
        else:  # inferred, as the table's memory types it
            ident = (db, db_schema, table_name)
            layout = self.inferred_layout(after, before, ident)
        extra: tuple[Column, ...] = ()
        key_names: tuple[str, ...] = ()
        if key is not None:
            key_names = key.names
            if not layout.names.issuperset(key_names):
                missing = tuple(c for c in key.columns if c.name not in layout.names)
                if ident is None:
                    raise FieldError("key", f"key columns {[c.name for c in missing]} are not row columns")
                extra = self.memory_columns(ident, missing)
        if absent_columns:
            have = layout.names.union(c.name for c in extra)
            extra += tuple(Column(n, ConnectType.STRING) for n in sorted(absent_columns - have))
        if extra:
            layout = self.extended_layout(layout, extra)
        before_row = layout.decode(before, "before") if before is not None else None
        after_row = layout.decode(after, "after") if after is not None else None
        if op is Operation.DELETE:
            after_row = None
            if before_row is None and key is not None and key.values is not None:
                before_row = _row_of_key(key, key.values, layout)
        elif op in (Operation.CREATE, Operation.READ):
            before_row = None
            if after_row is None:
                raise FieldError("after", f"op {op.value!r} needs an 'after' image")
        elif op is Operation.UPDATE and after_row is None:
            raise FieldError("after", "op 'u' needs an 'after' image")
        info = self._source_info(source, declared.source, extra_source)
        namespace = None
        if self.native and _is_native_source(source):
            info.native = self._native_source(payload, source, declared)
            if info.native is not None:
                namespace = self._topic_namespace(declared, source, db, db_schema, table_name or "")
        ts_raw = payload.get("ts_ms")
        ts_ms = _int(ts_raw)
        if ts_raw is not None and ts_ms is None:
            raise FieldError("ts_ms", f"expected epoch milliseconds, found {ts_raw!r}")
        table = self.layout_table(layout, db, db_schema, table_name or "", key_names, namespace)
        return ChangeEvent(
            op=op,
            table=table,
            before=before_row,
            after=after_row,
            source=info,
            transaction=self.transaction(payload.get("transaction")),
            ts_ms=ts_ms,
        )


def _is_native_source(source: Mapping[str, Any]) -> bool:
    """Whether a source block is a Debezium connector's own (see :data:`_NATIVE_SOURCE_FIELDS`)."""
    return _NATIVE_SOURCE_FIELDS.issubset(source) and ("table" in source or "collection" in source)


def _row_of_key(key: EnvelopeKey, values: Mapping[str, Any], layout: RowLayout) -> dict[str, Any]:
    """The before image of a delete that has none: the key's values (the other columns
    UNAVAILABLE), each converted to its row column where the key types it otherwise."""
    key_types = {c.name: c.as_optional() for c in key.columns}
    row: dict[str, Any] = {}
    for col in layout.columns:
        name = col.name
        value = values.get(name, UNAVAILABLE)
        if name in values and key_types.get(name, col) != col.as_optional():
            value = _decode_cell(col, value, f"key.{name}")
        row[name] = value
    return row


def _table_name(source: Mapping[str, Any], fallback: TableName) -> tuple[str | None, str | None, str | None]:
    """:meth:`ConnectEnvelopeReader.table_name` as a tuple."""
    table, db, schema = source.get("table"), source.get("db"), source.get("schema")
    if type(table) is str and table and (db is None or type(db) is str) and (schema is None or type(schema) is str):
        return db, schema, table  # the common case, which the checks below let through unchanged
    table = _source_text(source, "table") or _source_text(source, "collection")
    if table is None:
        if fallback.table is None:
            raise FieldError("source.table", "no table name in the source block and none configured")
        return fallback.db, fallback.schema, fallback.table
    return _source_text(source, "db"), _source_text(source, "schema"), table


def _source_text(source: Mapping[str, Any], name: str) -> str | None:
    """A name field of a source block: a string or null."""
    value = source.get(name)
    if value is None or isinstance(value, str):
        return value
    raise FieldError(f"source.{name}", f"expected a string, found {type_name(value)}")
