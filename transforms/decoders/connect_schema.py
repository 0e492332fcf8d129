"""Kafka Connect JSON schemas: :class:`FieldError` (what every Connect JSON failure is),
:class:`JsonLimits` for embedded JSON, and Connect schemas turned into
:class:`~transforms.connect.Column` objects (logical names and parameters kept), or columns
inferred from schemaless images. Part of :mod:`transforms.decoders.connect_json`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders.base import check_decimal_params, type_name
from transforms.decoders.fields import parse_int
from transforms.decoders.schemaless_json import Inferred, infer_images
from transforms.errors import caused_by
from transforms.frozen import reduce_frozen
from transforms.jsonio import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, JsonLimitError, loads_limited

if TYPE_CHECKING:
    pass


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

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

    def loads(self, text: str | bytes, field: str) -> Any:
        """The JSON value of ``text``; a FieldError naming ``field`` when it is invalid or too big."""
        try:
            return loads_limited(text, max_bytes=self.max_bytes, max_depth=self.max_depth, what="JSON text")
        except JsonLimitError as exc:
            raise caused_by(FieldError(field, str(exc)), exc) from exc


DEFAULT_LIMITS = JsonLimits()
"""The decoders' default limits (``max.message.bytes``, ``max.json.depth``)."""


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
        raise caused_by(FieldError(f"{where}.parameters", str(exc)), exc) from exc


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
