"""Where a Connect JSON change comes from (:class:`TableName`, :class:`TopicTables`), its Kafka
key (:class:`EnvelopeKey`, :func:`parse_json_key`), and the common start of reading a message
(:func:`read_connect_message`, :func:`by_content`). Part of :mod:`transforms.decoders.connect_json`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from transforms.connect import Column
from transforms.decoders.base import check_value, type_name
from transforms.decoders.cache import LruCache, TableLru
from transforms.decoders.connect_schema import (
    DEFAULT_LIMITS,
    FieldError,
    JsonLimits,
    columns_from_struct,
)
from transforms.decoders.connect_source import (
    from_extended_json,
)
from transforms.decoders.connect_values import (
    _FIRST_PASS,
    InexactNumber,
    _fast_decoder,
    _loads_exact,
    _not_fast,
    decode_value,
)
from transforms.decoders.rowplan import FastConverter
from transforms.envelope import (
    Event,
)
from transforms.errors import caused_by
from transforms.frozen import reduce_frozen
from transforms.jsonio import JsonLimitError, loads_limited
from transforms.table_budget import text_columns
from transforms.values import CoercionError, infer_column

if TYPE_CHECKING:
    from transforms.decoders.base import Decoder, Message

V = TypeVar("V")
_WRAPPER_KEYS = frozenset({"schema", "payload"})



@dataclass(frozen=True, slots=True)
class TableName:
    """Where a change comes from when the envelope's source block does not say."""

    db: str | None
    schema: str | None
    table: str | None

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


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

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)

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
    limits: JsonLimits = DEFAULT_LIMITS,
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
        raise caused_by(FieldError("key", f"invalid JSON key: {exc}"), exc) from exc
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
        except CoercionError as bad:
            raise caused_by(FieldError("key.id", str(bad)), bad) from bad
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
            except CoercionError as bad:
                raise caused_by(FieldError(f"key.{name}", str(bad)), bad) from bad
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


_SCHEMA_OPENING = b'{"schema":'
_PAYLOAD_MEMBER = b',"payload":'


class SharedSchema:
    """A Connect schema that messages repeat byte for byte, parsed once (:class:`SchemaPrefixes`),
    and what a reader decided from it, made on first use (``envelope``: see
    ``ConnectEnvelopeReader``). ``schema`` is None for a prefix that is not a whole schema."""

    __slots__ = ("envelope", "schema")

    def __init__(self, schema: dict[str, Any] | None) -> None:
        self.schema = schema
        self.envelope: Any = None


def _prefix_columns(prefix: bytes, _: object) -> int:
    return text_columns(prefix)


class SchemaPrefixes:
    """The openings ``{"schema":<schema>,"payload":`` of ``JsonConverter`` messages seen before,
    each with its schema parsed once (per-table state: bounded by the table budget).

    ``JsonConverter`` (``schemas.enable``) writes every message of a table with the same schema
    text ahead of its payload, and the schema is most of the message (2.5 KB of a 2.8 KB Debezium
    record of eight columns). :meth:`split` reads a message that opens with a known prefix, byte
    for byte, and holds nothing after its payload but the closing brace, by parsing the payload
    alone; its schema is the object parsed before, the same object every time, so what a reader
    derives from it is kept with it (:class:`SharedSchema`, :attr:`current`) instead of being
    looked up by the schema's text. Any other message is parsed whole, as before, and
    :meth:`learn` remembers its prefix. Both ways give the same document.

    A prefix is a whole schema when the text between ``{"schema":`` and the first
    ``,"payload":`` parses as JSON (one value, so it ends there); where that member name first
    occurs inside the schema (a parameter or a default named so), the prefix is remembered as
    not one, and such messages are parsed whole.
    """

    def __init__(self) -> None:
        self._known: TableLru[bytes, SharedSchema] = TableLru(_prefix_columns)
        self._last: tuple[bytes, SharedSchema] | None = None
        self.current: SharedSchema | None = None
        """The shared schema of the message :meth:`split` read last (None: it was parsed whole)."""

    def split(self, value: bytes, max_bytes: int, max_depth: int) -> dict[str, Any] | None:
        """``{"schema": <the shared schema>, "payload": <parsed>}`` of a message with a known
        prefix, within the limits; None when it must be parsed whole (any error then comes
        from parsing it whole, as for any message)."""
        self.current = None
        if len(value) > max_bytes or not value.startswith(_SCHEMA_OPENING) or not value.endswith(b"}"):
            return None
        last = self._last  # the prefix of the last message split: compared, not sliced and hashed
        if last is not None and value.startswith(last[0]) and value.startswith(_PAYLOAD_MEMBER, len(last[0])):
            at, shared = len(last[0]), last[1]
        else:
            at = value.find(_PAYLOAD_MEMBER, len(_SCHEMA_OPENING))
            if at < 0:
                return None
            prefix = value[:at]
            known = self._known.get(prefix)
            if known is None or known.schema is None:
                return None
            shared, self._last = known, (prefix, known)
        try:  # the document's depth is one more than its payload's (its schema was within it)
            payload = loads_limited(value[at + len(_PAYLOAD_MEMBER) : -1], max_bytes=max_bytes, max_depth=max_depth - 1)
        except JsonLimitError:
            return None
        self.current = shared
        return {"schema": shared.schema, "payload": payload}

    def learn(self, value: bytes, doc: Any) -> None:
        """Remember the prefix of a message parsed whole (``doc``), if it is a schema and payload."""
        if type(doc) is not dict or len(doc) != 2 or type(doc.get("schema")) is not dict or "payload" not in doc:
            return
        if not value.startswith(_SCHEMA_OPENING):
            return
        at = value.find(_PAYLOAD_MEMBER, len(_SCHEMA_OPENING))
        if at < 0:
            return
        prefix = value[:at]
        if self._known.get(prefix) is not None:  # known, as not a whole schema: not parsed again
            return
        try:
            schema = orjson.loads(prefix[len(_SCHEMA_OPENING) :])
        except orjson.JSONDecodeError:  # the member name occurs inside the schema
            schema = None
        self._known.put(prefix, SharedSchema(schema if type(schema) is dict else None))


def read_connect_message(
    decoder: Decoder,
    message: Message,
    read: Callable[[Any, dict[str, Any]], list[Event]],
    prefixes: SchemaPrefixes | None = None,
) -> list[Event]:
    """The start that the Connect JSON decoders share.

    A tombstone (no value, ``null``, or a ``{"schema": ..., "payload": null}`` value) gives
    ``[]``. Otherwise the value is parsed within the decoder's limits, unwrapped from its
    ``{"schema", "payload"}`` wrapper when it has one, and passed as ``read(schema, payload)``;
    a :class:`FieldError` becomes the decoder's DecodeError with the payload preview. With
    ``prefixes`` (the reader's), a message whose schema text was seen before parses its payload
    only (:class:`SchemaPrefixes`).
    """
    value = message.value
    # (a value that starts with an object cannot strip to nothing or null: no copy of it then)
    if value is None or (value[:1] != b"{" and value.strip() in (b"", b"null")):
        return []
    doc: Any = None
    if prefixes is not None:
        options = decoder.options
        doc = prefixes.split(value, options.max_message_bytes, options.max_json_depth)
    if doc is None:
        doc = decoder.load_json(message)
        if prefixes is not None:
            prefixes.learn(value, doc)
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
        raise caused_by(decoder.error(field, reason, value), exc) from exc


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
