"""Kafka Connect schemas and values as Avro, the way Confluent's ``AvroConverter`` writes them.

Debezium's Avro output is Kafka Connect's ``io.confluent.connect.avro.AvroConverter`` applied to
the connector's Connect records: its ``AvroData.fromConnectSchema`` turns each Connect schema into
an Avro schema and ``AvroData.fromConnectData`` each value into an Avro datum. This module does
the same for the Connect JSON schemas cdcnorm emits (``{"schema", "payload"}``, see
:mod:`transforms.envelope`), as Confluent 7.0's ``AvroData`` does with ``AvroConverter``'s
defaults (``connect.meta.data=true``, ``enhanced.avro.schema.support=false``,
``scrub.invalid.names=false``), or with ``scrub.invalid.names=true`` (``scrub=True``).
``tests/compat/test_avro_compat.py`` checks the schemas equal the real ``AvroData``'s, and the
bytes read back through the real ``AvroConverter``.

The mapping (:func:`avro_schema`):

* a struct is a record named by its Connect name split at the last dot
  (``cdcnorm.shop.orders.Value`` → namespace ``cdcnorm.shop.orders``, name ``Value``); an unnamed
  one is ``io.confluent.connect.avro.ConnectDefault`` (``ConnectDefault2``, ... for the next
  ones); a record met again is written as a reference to its name, and two different records of
  one name are an error (as in Avro: ``Can't redefine``);
* ``int8``/``int16`` are ``int`` with ``connect.type``; ``int32`` ``int``; ``int64`` ``long``;
  ``float``/``double``/``boolean``/``string``/``bytes`` as such; an array is an array; a map with
  required string keys is a map, any other map an array of ``MapEntry`` ``{key, value}`` records;
* every named, versioned, documented or parameterized schema carries ``connect.name``,
  ``connect.version``, ``connect.doc`` and ``connect.parameters`` (Debezium's
  ``io.debezium.time.*``, ``io.debezium.data.*`` stay primitives with those properties);
* ``org.apache.kafka.connect.data.Decimal`` is ``bytes`` with ``logicalType: decimal``,
  ``precision`` (``connect.decimal.precision``, else 64) and ``scale``; Connect's ``Date``,
  ``Time`` and ``Timestamp`` are ``int``/``date``, ``int``/``time-millis`` and
  ``long``/``timestamp-millis``;
* an optional schema is the union ``["null", T]`` (``[T, "null"]`` when it has a default) and an
  optional record field defaults to ``null``;
* names as they are by default: a namespace keeps what Avro's parsers let pass in one
  (``io.cdcnorm.connector.aws-dms-json``), while a field or record name that is not an Avro name
  (``[A-Za-z_][A-Za-z0-9_]*``) is an error, as ``AvroData`` fails on it. With ``scrub``, every
  name part and field name is scrubbed as ``AvroData.doScrubName`` does (``aws-dms-json`` →
  ``aws_dms_json``, ``first name`` → ``first_name``, ``9lives`` → ``x9lives``); a record's
  ``connect.name`` keeps its Connect name, so a reader gets that back, but a scrubbed field keeps
  its Avro name (as with Confluent's own converter); two fields that scrub to one name are an
  error.

:func:`avro_datum` turns a Connect JSON payload into the datum fastavro writes (bytes and
decimals from their base64 text, maps with other keys into entries); :func:`connect_payload` is
its inverse over what fastavro reads back (decimals, dates and times included).
:func:`connect_schema` maps an Avro schema back to a Connect JSON schema (``AvroData``'s
``toConnectSchema``), for readers of Avro records such as the sink.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import orjson

from transforms.values import _b64, decimal_from_unscaled, float32_json, unscaled_bytes

__all__ = [
    "AvroMappingError",
    "avro_datum",
    "avro_schema",
    "connect_payload",
    "connect_schema",
    "scrub_name",
]

NAMESPACE = "io.confluent.connect.avro"
DEFAULT_NAME = "ConnectDefault"
MAP_ENTRY = "MapEntry"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
_DECIMAL_PRECISION = "connect.decimal.precision"
_DEFAULT_PRECISION = 64
_FIELD_DOC = NAMESPACE + ".field.doc."
_RECORD_DOC = NAMESPACE + ".record.doc"
_FIELD_DEFAULT_FLAG = NAMESPACE + ".field.default"
_UNION = NAMESPACE + ".Union"

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL = {DATE: "date", TIME: "time-millis", TIMESTAMP: "timestamp-millis"}
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_URL_SAFE = _NAME_CHARS | frozenset(".-*")


class AvroMappingError(ValueError):
    """A Connect schema or value that has no Avro form (as ``AvroData`` would refuse it)."""


# ----------------------------------------------------------------------------- names


def scrub_name(name: str) -> str:
    """One part of a name made a valid Avro name, as Confluent's ``AvroData.doScrubName``:
    valid names are kept; others are URL-encoded (UTF-8), prefixed with ``x`` when they then start
    with a digit, and every character outside ``[A-Za-z0-9_]`` becomes ``_``.

    >>> scrub_name("aws-dms-json"), scrub_name("Value"), scrub_name("1st"), scrub_name("a b")
    ('aws_dms_json', 'Value', 'x1st', 'a_b')
    """
    if not name or (all(c in _NAME_CHARS for c in name) and not name[0].isdigit()):
        return name
    encoded = "".join(_url_encode(c) for c in name)
    if encoded[0] in "0123456789":
        encoded = "x" + encoded
    return "".join(c if c in _NAME_CHARS else "_" for c in encoded)


def _url_encode(char: str) -> str:
    """``java.net.URLEncoder.encode`` of one character (UTF-8)."""
    if char in _URL_SAFE:
        return char
    if char == " ":
        return "+"
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


def _split(full: str, scrub: bool) -> tuple[str | None, str]:
    """``AvroData.splitName``: namespace and name, each part scrubbed when ``scrub``."""
    parts = [scrub_name(p) for p in full.split(".")] if scrub else full.split(".")
    if len(parts) <= 1:
        return None, parts[0]
    return ".".join(parts[:-1]), parts[-1]


@lru_cache(maxsize=65536)
def _scrubbed(name: str) -> str:
    return scrub_name(name)


def _field_name(name: str, scrub: bool) -> str:
    """A Connect field's name in Avro."""
    return _scrubbed(name) if scrub else name


def _valid_name(name: str) -> bool:
    return bool(name) and all(c in _NAME_CHARS for c in name) and not name[0].isdigit()


def _full(namespace: str | None, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


# ----------------------------------------------------------------------------- Connect → Avro schema


def _identity(schema: Mapping[str, Any]) -> bytes:
    """What ``ConnectSchema.equals`` compares: the schema without its own field name."""
    return orjson.dumps({k: v for k, v in schema.items() if k != "field"}, option=orjson.OPT_SORT_KEYS)


class _FromConnect:
    """One ``AvroData.fromConnectSchema`` call: named records met so far, unnamed ones counted."""

    def __init__(self, scrub: bool) -> None:
        self.scrub = scrub
        self.records: dict[str, Any] = {}  # full name -> its definition (written once)
        self.memo: dict[bytes, Any] = {}  # identity of a required schema -> its Avro schema
        self.unnamed = 0

    def default_name(self) -> tuple[str | None, str]:
        self.unnamed += 1
        return NAMESPACE, DEFAULT_NAME + (str(self.unnamed) if self.unnamed > 1 else "")

    def convert(self, schema: Mapping[str, Any], ignore_optional: bool = False) -> Any:
        optional = bool(schema.get("optional", False))
        key = None
        if not optional and schema.get("name") != _UNION:
            key = _identity(schema)
            hit = self.memo.get(key)
            if hit is not None:
                return self._again(hit)
        result = self._convert(schema, optional, ignore_optional)
        if key is not None:
            self.memo[key] = result
        return result

    def _again(self, avro: Any) -> Any:
        """A schema converted before, written again: a record (at any depth) by its name."""
        if isinstance(avro, dict):
            if avro.get("type") == "record":
                return _full(avro.get("namespace"), avro["name"])
            out = dict(avro)
            if "items" in out:
                out["items"] = self._again(out["items"])
            if "values" in out:
                out["values"] = self._again(out["values"])
            return out
        if isinstance(avro, list):
            return [self._again(a) for a in avro]
        return avro

    def _convert(self, schema: Mapping[str, Any], optional: bool, ignore_optional: bool) -> Any:
        ctype = schema.get("type")
        name = schema.get("name")
        params: Mapping[str, str] = schema.get("parameters") or {}
        base: dict[str, Any]
        if ctype in _PRIMITIVES:
            base = {"type": _PRIMITIVES[ctype]}
            if ctype == "bytes" and name == DECIMAL:
                scale = base["scale"] = int(params.get("scale", "0"))
                precision = base["precision"] = int(params.get(_DECIMAL_PRECISION, _DEFAULT_PRECISION))
                if not 0 <= scale <= precision:
                    # AvroData writes such a decimal with a logicalType Avro itself ignores, and
                    # fastavro refuses the schema: no Avro form that both sides read the same way
                    raise AvroMappingError(
                        f"decimal scale {scale} outside 0..precision {precision} has no Avro decimal form"
                    )
        elif ctype == "array":
            items = schema.get("items")
            if not isinstance(items, Mapping):
                raise AvroMappingError("an array schema without items")
            base = {"type": "array", "items": self._with_cycle(items)}
        elif ctype == "map":
            keys, values = schema.get("keys"), schema.get("values")
            if not isinstance(keys, Mapping) or not isinstance(values, Mapping):
                raise AvroMappingError("a map schema without keys or values")
            if keys.get("type") == "string" and not keys.get("optional", False):
                base = {"type": "map", "values": self._with_cycle(values)}
            else:
                entry_ns, entry_name = (NAMESPACE, MAP_ENTRY) if name is None else _split(name, self.scrub)
                entry: dict[str, Any] = {"type": "record", "name": entry_name}
                if entry_ns is not None:
                    entry["namespace"] = entry_ns
                if name is not None:
                    entry["connect.internal.type"] = MAP_ENTRY
                entry["fields"] = [self._field("key", keys, None), self._field("value", values, None)]
                base = {"type": "array", "items": self._define(entry)}
        elif ctype == "struct":
            if name == _UNION:
                branches: list[Any] = ["null"] if optional else []
                for f in schema.get("fields") or ():
                    branches.append(self._with_cycle({**f, "optional": False}, ignore_optional=True))
                return branches
            if optional:
                return ["null", self._with_cycle({**schema, "optional": False})]
            namespace, short = self.default_name() if name is None else _split(name, self.scrub)
            record: dict[str, Any] = {"type": "record", "name": short}
            if namespace is not None:
                record["namespace"] = namespace
            if params.get(_RECORD_DOC) is not None:
                record["doc"] = params[_RECORD_DOC]
            record["fields"] = [
                self._field(f["field"], f, params.get(_FIELD_DOC + f["field"])) for f in schema.get("fields") or ()
            ]
            names = [f["name"] for f in record["fields"]]
            if len(set(names)) != len(names):
                twins = sorted({n for n in names if names.count(n) > 1})
                raise AvroMappingError(f"fields of {name or 'a struct'} share the Avro names {twins}")
            base = record
        else:
            raise AvroMappingError(f"unknown Connect schema type {ctype!r}")

        _connect_props(base, schema, ctype, name, params, self.scrub)
        if base.get("type") == "record":
            base = self._define(base)
        if not ignore_optional and optional:
            return [base, "null"] if schema.get("default") is not None else ["null", base]
        return base

    def _with_cycle(self, schema: Mapping[str, Any], ignore_optional: bool = False) -> Any:
        return self.convert(schema, ignore_optional)

    def _field(self, name: str, schema: Mapping[str, Any], doc: str | None) -> dict[str, Any]:
        avro_name = _field_name(name, self.scrub)
        if not _valid_name(avro_name):
            raise AvroMappingError(
                f"field {name!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*): AvroConverter cannot write it "
                "either; rename the column (replace-field renames) or set scrub.invalid.names"
            )
        out: dict[str, Any] = {"name": avro_name, "type": self.convert(schema)}
        if doc is not None:
            out["doc"] = doc
        if schema.get("default") is not None:
            out["default"] = _default(schema, schema["default"], self.scrub)
        elif schema.get("optional", False):
            out["default"] = None
        return out

    def _define(self, record: dict[str, Any]) -> Any:
        """A record's definition the first time its name is met, its name after that."""
        full = _full(record.get("namespace"), record["name"])
        if not _valid_name(record["name"]) or (self.scrub and not all(_valid_name(p) for p in full.split("."))):
            raise AvroMappingError(f"{full!r} is not a valid Avro name (scrub.invalid.names scrubs it)")
        seen = self.records.get(full)
        if seen is None:
            self.records[full] = record
            return record
        if seen is record:
            return full
        if _expanded(seen, self.records) != _expanded(record, self.records):
            raise AvroMappingError(f"two different schemas are named {full} (Avro: Can't redefine)")
        return full


def _expanded(avro: Any, records: Mapping[str, Any], depth: int = 0) -> Any:
    """An Avro schema with its name references replaced by their definitions (for comparing)."""
    if depth > 64:
        return avro
    if isinstance(avro, str):
        target = records.get(avro)
        return avro if target is None else _expanded(target, records, depth + 1)
    if isinstance(avro, list):
        return [_expanded(a, records, depth + 1) for a in avro]
    if isinstance(avro, dict):
        out = {k: v for k, v in avro.items() if k not in ("fields", "items", "values", "doc")}
        if "fields" in avro:
            out["fields"] = [
                {**{k: v for k, v in f.items() if k != "doc"}, "type": _expanded(f["type"], records, depth + 1)}
                for f in avro["fields"]
            ]
        for key in ("items", "values"):
            if key in avro:
                out[key] = _expanded(avro[key], records, depth + 1)
        return out
    return avro


def _connect_props(
    base: dict[str, Any], schema: Mapping[str, Any], ctype: Any, name: Any, params: Mapping[str, str], scrub: bool
) -> None:
    """The ``connect.*`` properties and logical types ``AvroData`` puts on a non-union schema."""
    if schema.get("doc") is not None:
        base["connect.doc"] = schema["doc"]
    if schema.get("version") is not None:
        base["connect.version"] = schema["version"]
    kept = {k: v for k, v in params.items() if k != _FIELD_DEFAULT_FLAG}
    if kept:
        base["connect.parameters"] = dict(kept)
    if schema.get("default") is not None and _FIELD_DEFAULT_FLAG not in params:
        base["connect.default"] = _default(schema, schema["default"], scrub)
    if name is not None:
        base["connect.name"] = name
    if ctype in ("int8", "int16"):
        base["connect.type"] = ctype
    if name == DECIMAL:
        base["logicalType"] = "decimal"
    elif name in _LOGICAL:
        base["logicalType"] = _LOGICAL[name]
    for key, value in params.items():
        if key.startswith("avro"):
            base[key] = value


def _default(schema: Mapping[str, Any], value: Any, scrub: bool) -> Any:
    """A Connect JSON default as the Avro default (``AvroData.defaultValueFromConnect``)."""
    if value is None:
        return None
    ctype = schema.get("type")
    if ctype == "bytes":
        return base64.b64decode(value).decode("latin-1")
    if ctype == "array":
        return [_default(schema["items"], v, scrub) for v in value]
    if ctype == "map":
        keys = schema["keys"]
        if keys.get("type") == "string" and not keys.get("optional", False):
            return {k: _default(schema["values"], v, scrub) for k, v in value.items()}
        return [[_default(keys, k, scrub), _default(schema["values"], v, scrub)] for k, v in _map_entries(value)]
    if ctype == "struct":
        return {
            _field_name(f["field"], scrub): _default(f, value.get(f["field"]), scrub) for f in schema.get("fields") or ()
        }
    return value


def avro_schema(connect: Mapping[str, Any], scrub: bool = False) -> Any:
    """The Avro schema of a Connect JSON schema, as ``AvroData.fromConnectSchema`` makes it
    (JSON-ready: a dict, a list for a union, a string for a plain primitive); ``scrub``: with
    ``scrub.invalid.names=true``.

    >>> avro_schema({"type": "int64", "optional": False})
    {'type': 'long'}
    >>> avro_schema({"type": "struct", "name": "p.db.t.Key", "optional": False,
    ...              "fields": [{"type": "int32", "optional": False, "field": "id"}]})
    {'type': 'record', 'name': 'Key', 'namespace': 'p.db.t', 'fields': [{'name': 'id', 'type': {'type': 'int'}}], 'connect.name': 'p.db.t.Key'}
    """
    return _FromConnect(scrub).convert(connect)


# ----------------------------------------------------------------------------- values


def _map_entries(value: Any) -> list[tuple[Any, Any]]:
    """A Connect JSON map value as (key, value) pairs: an object, or JsonConverter's ``[[k, v]]``."""
    if isinstance(value, Mapping):
        return list(value.items())
    return [(entry[0], entry[1]) for entry in value]


def _is_string_map(schema: Mapping[str, Any]) -> bool:
    keys = schema.get("keys") or {}
    return keys.get("type") == "string" and not keys.get("optional", False)


def avro_datum(schema: Mapping[str, Any], value: Any, scrub: bool = False) -> Any:
    """A Connect JSON payload value as the datum fastavro writes under :func:`avro_schema`.

    Bytes and decimals are base64 text in Connect JSON and raw bytes in Avro (a decimal's
    unscaled two's-complement bytes, written as they are); a map with other than required
    string keys becomes ``{key, value}`` entries. Other values pass unchanged.
    """
    if value is None:
        return None
    ctype = schema.get("type")
    if ctype == "struct":
        if not isinstance(value, Mapping):
            raise AvroMappingError(f"struct {schema.get('name') or ''} holds {type(value).__name__}")
        return {
            _field_name(f["field"], scrub): avro_datum(f, value.get(f["field"]), scrub) for f in schema.get("fields") or ()
        }
    if ctype == "bytes":
        if isinstance(value, bytes | bytearray):
            return bytes(value)
        try:
            return base64.b64decode(value, validate=True)
        except (ValueError, TypeError) as exc:
            raise AvroMappingError(f"bytes value is not base64: {str(value)[:40]!r}") from exc
    if ctype == "array":
        items = schema["items"]
        return [avro_datum(items, v, scrub) for v in value]
    if ctype == "map":
        keys, values = schema["keys"], schema["values"]
        entries = _map_entries(value)
        if _is_string_map(schema):
            return {k: avro_datum(values, v, scrub) for k, v in entries}
        return [{"key": avro_datum(keys, k, scrub), "value": avro_datum(values, v, scrub)} for k, v in entries]
    return value


_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _unscaled_bytes(value: decimal.Decimal, scale: int) -> bytes:
    """The Connect Decimal bytes of a decimal at its schema's ``scale``
    (:func:`~transforms.values.unscaled_bytes`, ``BigInteger.toByteArray`` as Connect's
    ``Decimal.fromLogical`` writes it). A value that does not fit the scale exactly is refused, as
    ``Decimal.fromLogical`` refuses a mismatching scale: fastavro reads a decimal at its schema's
    scale, so one that does not fit came from somewhere else and would be changed by rounding.

    >>> _unscaled_bytes(decimal.Decimal("-1.280"), 2).hex()
    '80'
    >>> _unscaled_bytes(decimal.Decimal("1.285"), 2)
    Traceback (most recent call last):
    ...
    transforms.avro.AvroMappingError: decimal 1.285 has more digits than its schema's scale 2
    """
    if not value.is_finite():
        raise AvroMappingError(f"decimal {value} is not finite")
    raw = unscaled_bytes(value, scale)
    if decimal_from_unscaled(raw, scale) != value:
        raise AvroMappingError(f"decimal {value} has more digits than its schema's scale {scale}")
    return raw


def connect_payload(schema: Mapping[str, Any], value: Any, scrub: bool = False) -> Any:
    """What fastavro reads under :func:`avro_schema` as the Connect JSON payload value: the
    inverse of :func:`avro_datum` over fastavro's logical types (``Decimal``, ``date``, ``time``
    and ``datetime``) and 32-bit floats (written back as ``JsonConverter`` writes them)."""
    if value is None:
        return None
    ctype = schema.get("type")
    name = schema.get("name")
    if ctype == "struct":
        return {
            f["field"]: connect_payload(f, value.get(_field_name(f["field"], scrub)), scrub)
            for f in schema.get("fields") or ()
        }
    if ctype == "bytes":
        if isinstance(value, decimal.Decimal):
            scale = int((schema.get("parameters") or {}).get("scale", "0"))
            return _b64(_unscaled_bytes(value, scale))
        return _b64(bytes(value))
    if ctype == "float":
        return float32_json(value)
    if ctype == "array":
        return [connect_payload(schema["items"], v, scrub) for v in value]
    if ctype == "map":
        keys, values = schema["keys"], schema["values"]
        if isinstance(value, Mapping):
            return {k: connect_payload(values, v, scrub) for k, v in value.items()}
        return [[connect_payload(keys, e["key"], scrub), connect_payload(values, e["value"], scrub)] for e in value]
    if name == DATE and isinstance(value, dt.date):
        return (value - _EPOCH_DAY).days
    if name == TIME and isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    if name == TIMESTAMP and isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        delta = moment - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return value


# ----------------------------------------------------------------------------- Avro → Connect schema

_AVRO_PRIMITIVES = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "enum": "string",
    "fixed": "bytes",
}
_FROM_LOGICAL = {"date": DATE, "time-millis": TIME, "timestamp-millis": TIMESTAMP}


class _ToConnect:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def convert(self, avro: Any, namespace: str | None = None) -> dict[str, Any]:
        if isinstance(avro, str):
            if avro in _AVRO_PRIMITIVES or avro == "null":
                return self.convert({"type": avro}, namespace)
            target = self.named.get(avro) or (self.named.get(f"{namespace}.{avro}") if namespace else None)
            if target is None:
                raise AvroMappingError(f"unknown Avro type {avro!r}")
            return dict(target)
        if isinstance(avro, list):
            branches = [b for b in avro if b != "null" and b != {"type": "null"}]
            if len(branches) == 1 and len(avro) == 2:
                return {**self.convert(branches[0], namespace), "optional": True}
            raise AvroMappingError("a union other than [null, T] has no plain Connect form")
        if not isinstance(avro, Mapping):
            raise AvroMappingError(f"not an Avro schema: {avro!r}")
        atype = avro.get("type")
        if isinstance(atype, list | dict) or (isinstance(atype, str) and atype in self.named):
            return self.convert(atype, namespace)
        out: dict[str, Any]
        if atype == "record":
            ns = avro.get("namespace", namespace)
            full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
            inner_ns = full.rpartition(".")[0] or None
            out = {"type": "struct", "fields": [], "optional": False}
            self.named[full] = out  # before the fields: a record may refer to itself
            for f in avro.get("fields") or ():
                out["fields"].append({**self.convert(f["type"], inner_ns), "field": f["name"]})
            if avro.get("connect.internal.type") == MAP_ENTRY or full == f"{NAMESPACE}.{MAP_ENTRY}":
                out["__map_entry"] = True
            if not full.startswith(f"{NAMESPACE}.{DEFAULT_NAME}"):
                out["name"] = full
        elif atype == "array":
            items = self.convert(avro["items"], namespace)
            if items.pop("__map_entry", False):
                fields = {f["field"]: f for f in items["fields"]}
                out = {"type": "map", "keys": _strip(fields["key"]), "values": _strip(fields["value"]), "optional": False}
            else:
                out = {"type": "array", "items": items, "optional": False}
        elif atype == "map":
            out = {
                "type": "map",
                "keys": {"type": "string", "optional": False},
                "values": self.convert(avro["values"], namespace),
                "optional": False,
            }
        elif atype in _AVRO_PRIMITIVES:
            connect_type = avro.get("connect.type")
            out = {"type": connect_type if connect_type in ("int8", "int16") else _AVRO_PRIMITIVES[atype], "optional": False}
            logical = avro.get("logicalType")
            if logical == "decimal" and "connect.name" not in avro:
                out["name"] = DECIMAL
                out["version"] = 1
                out["parameters"] = {"scale": str(avro.get("scale", 0)), _DECIMAL_PRECISION: str(avro.get("precision"))}
            elif logical in _FROM_LOGICAL and "connect.name" not in avro:
                out["name"] = _FROM_LOGICAL[logical]
                out["version"] = 1
            if atype in ("enum", "fixed"):
                self.named[avro["name"] if "." in avro["name"] else _full(avro.get("namespace", namespace), avro["name"])] = out
        elif atype == "null":
            raise AvroMappingError("a null schema has no Connect form")
        else:
            raise AvroMappingError(f"unknown Avro type {atype!r}")
        if "connect.name" in avro:
            out["name"] = avro["connect.name"]
        if "connect.version" in avro:
            out["version"] = avro["connect.version"]
        if "connect.doc" in avro:
            out["doc"] = avro["connect.doc"]
        if isinstance(avro.get("connect.parameters"), Mapping):
            out["parameters"] = dict(avro["connect.parameters"])
        return out


def _strip(field: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in field.items() if k != "field"}


def connect_schema(avro: Any) -> dict[str, Any]:
    """The Connect JSON schema of an Avro schema (``AvroData.toConnectSchema``, with the
    ``connect.*`` properties that :func:`avro_schema` writes): for readers of Avro records.

    >>> connect_schema(["null", {"type": "long", "connect.name": "io.debezium.time.Timestamp", "connect.version": 1}])
    {'type': 'int64', 'optional': True, 'name': 'io.debezium.time.Timestamp', 'version': 1}
    """
    return _ToConnect().convert(avro)

