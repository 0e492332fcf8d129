"""``unwrap``: replace the change envelope by the flat row, like Debezium's ``ExtractNewRecordState``.

A change becomes a :class:`~transforms.envelope.RowEvent` holding its ``after`` image, keyed
as before. What happens to a delete and to the tombstone the emitter writes after it follows
``delete.tombstone.handling.mode`` (Debezium 3's ``DefaultDeleteHandlingStrategy``):

==========================  ===========================================  ==============
mode                        the delete                                   its tombstone
==========================  ===========================================  ==============
``drop`` (unwrap default)   dropped                                      dropped
``tombstone`` (Debezium's)  a record with a null value                   dropped
``rewrite``                 the ``before`` row plus ``__deleted: "true"``  dropped
``rewrite-with-tombstone``  the ``before`` row plus ``__deleted: "true"``  kept
``delete-to-tombstone``     a tombstone                                  dropped
==========================  ===========================================  ==============

In the two rewrite modes every other row gets ``__deleted: "false"``. A delete without a
``before`` image is dropped, as Debezium drops it. Debezium writes ``tombstone``'s null-valued
record with the row's schema (``{"schema": ..., "payload": null}`` through ``JsonConverter``);
cdcnorm writes it as a tombstone. The emitter's ``tombstones`` option still has to be on for any
tombstone to be written.

Debezium 2's ``delete.handling.mode`` (``drop``, ``rewrite``, ``none``) and ``drop.tombstones``
(default true) are still read, with a warning, as those versions did: ``none`` is
``tombstone``, and ``drop.tombstones=false`` keeps the tombstone.

An update that changes the key is unwrapped as the delete of the old key followed by the insert
of the new one, as Debezium itself emits it. Truncates are dropped, or passed on unchanged with
``truncate.handling.mode=pass``. Schema-change and transaction events pass through.

* ``add.fields`` copies event metadata into the row (``op`` → ``__op``, ``source.ts_ms`` →
  ``__source_ts_ms``, ``table:tbl`` → ``__tbl``; see :mod:`transforms.smt.metadata_fields`),
  prefixed by ``add.fields.prefix``, after ``__deleted``;
* ``add.headers`` adds the same metadata as headers (``__op: c``, ``__source_ts_ms:
  1700000000000``), written as Kafka Connect's ``SimpleHeaderConverter`` writes them (text);
  a field without a value adds no header;
* ``route.by.field`` sends each row to the topic named by that string column (of ``before`` for
  deletes); a null or blank value leaves the topic alone;
* ``drop.fields.header.name`` names a header listing columns to drop (a JSON array, as Connect
  writes a list header, or comma-separated names); as Debezium's default
  ``drop.fields.keep.schema.compatible=true``, only optional columns are dropped, and key
  columns never are.

Also named ``io.debezium.transforms.ExtractNewRecordState``, whose default mode is Debezium's:
``tombstone``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import Enum, StrEnum
from typing import Annotated, Any, ClassVar

import orjson
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, Event, Operation, RowEvent, key_payload
from transforms.errors import TransformError
from transforms.smt.base import SmtConfig, Transform
from transforms.smt.config_types import CommaList
from transforms.smt.metadata_fields import MetadataField, parse_metadata_fields, with_added_columns
from transforms.smt.table_cache import DerivedTableCache

__all__ = [
    "DELETED_FIELD",
    "DeleteHandlingMode",
    "DeleteTombstoneHandling",
    "ExtractNewRecordState",
    "TruncateHandlingMode",
    "UnwrapConfig",
]

DELETED_FIELD = "__deleted"
"""The column the rewrite modes add (string ``"true"``/``"false"``, as Debezium)."""


class DeleteTombstoneHandling(StrEnum):
    """Debezium's ``delete.tombstone.handling.mode``."""

    DROP = "drop"
    TOMBSTONE = "tombstone"
    REWRITE = "rewrite"
    REWRITE_WITH_TOMBSTONE = "rewrite-with-tombstone"
    DELETE_TO_TOMBSTONE = "delete-to-tombstone"


class DeleteHandlingMode(StrEnum):
    """Debezium 2's deprecated ``delete.handling.mode``."""

    DROP = "drop"
    REWRITE = "rewrite"
    NONE = "none"


class TruncateHandlingMode(StrEnum):
    """What happens to truncate events: dropped, or passed on as they are."""

    DROP = "drop"
    PASS = "pass"


class _Delete(Enum):
    """What a delete becomes."""

    DROP = "drop"
    NULL_VALUE = "null value"
    TOMBSTONE = "tombstone"
    REWRITE = "rewrite"


_MODES: dict[DeleteTombstoneHandling, tuple[_Delete, bool]] = {
    DeleteTombstoneHandling.DROP: (_Delete.DROP, False),
    DeleteTombstoneHandling.TOMBSTONE: (_Delete.NULL_VALUE, False),
    DeleteTombstoneHandling.REWRITE: (_Delete.REWRITE, False),
    DeleteTombstoneHandling.REWRITE_WITH_TOMBSTONE: (_Delete.REWRITE, True),
    DeleteTombstoneHandling.DELETE_TO_TOMBSTONE: (_Delete.TOMBSTONE, False),
}
"""Each mode: what the delete becomes, and whether the tombstone after it stays."""

_LEGACY: dict[DeleteHandlingMode, _Delete] = {
    DeleteHandlingMode.DROP: _Delete.DROP,
    DeleteHandlingMode.NONE: _Delete.NULL_VALUE,
    DeleteHandlingMode.REWRITE: _Delete.REWRITE,
}

_NEW_MODE = "delete.tombstone.handling.mode"


def _enum_text(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


class UnwrapConfig(SmtConfig):
    """Config of :class:`ExtractNewRecordState`."""

    deprecated_keys: ClassVar[Mapping[str, str]] = {
        "delete.handling.mode": _NEW_MODE,
        "drop.tombstones": _NEW_MODE,
    }

    delete_tombstone_handling_mode: Annotated[DeleteTombstoneHandling, BeforeValidator(_enum_text)] = Field(
        DeleteTombstoneHandling.DROP,
        alias=_NEW_MODE,
        description="drop, tombstone, rewrite, rewrite-with-tombstone or delete-to-tombstone.",
    )
    delete_handling_mode: DeleteHandlingMode | None = Field(
        None,
        alias="delete.handling.mode",
        description=f"Deprecated (Debezium 2): use {_NEW_MODE}. drop, rewrite or none.",
    )
    drop_tombstones: bool | None = Field(
        None,
        alias="drop.tombstones",
        description=f"Deprecated (Debezium 2): use {_NEW_MODE}. Drop the tombstones after deletes.",
    )
    truncate_handling_mode: TruncateHandlingMode = Field(
        TruncateHandlingMode.DROP, alias="truncate.handling.mode", description="drop or pass."
    )
    route_by_field: str | None = Field(
        None, alias="route.by.field", description="A string column whose value is the row's topic."
    )
    add_fields_prefix: str = Field(
        "__", alias="add.fields.prefix", description="Prefix of added field columns."
    )
    add_fields: CommaList = Field(
        (), alias="add.fields", description="Event metadata to add, e.g. op,table,source.ts_ms."
    )
    add_headers_prefix: str = Field("__", alias="add.headers.prefix", description="Prefix of added headers.")
    add_headers: CommaList = Field(
        (), alias="add.headers", description="Event metadata to add as headers, e.g. op,source.ts_ms."
    )
    drop_fields_header_name: str | None = Field(
        None,
        alias="drop.fields.header.name",
        description="A header listing columns to drop from the row (optional, non-key ones).",
    )
    replace_null_with_default: bool = Field(
        True,
        alias="replace.null.with.default",
        description="Debezium's option, accepted as is: cdcnorm column schemas carry no defaults.",
    )

    @field_validator("route_by_field", "drop_fields_header_name")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("add_fields")
    @classmethod
    def _known_fields(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        parse_metadata_fields(value, info.data.get("add_fields_prefix", "__"), allow_topic=False)
        return value

    @field_validator("add_headers")
    @classmethod
    def _known_headers(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        parse_metadata_fields(value, info.data.get("add_headers_prefix", "__"), allow_topic=False)
        return value

    @model_validator(mode="after")
    def _one_spelling(self) -> UnwrapConfig:
        legacy = self.delete_handling_mode is not None or self.drop_tombstones is not None
        if legacy and "delete_tombstone_handling_mode" in self.model_fields_set:
            raise ValueError(
                f"delete.handling.mode and drop.tombstones are the deprecated form of {_NEW_MODE}"
            )
        return self


def _delete_policy(config: UnwrapConfig) -> tuple[_Delete, bool]:
    """What a delete becomes, and whether the tombstone after it stays (Debezium 2's options as
    its ``LegacyDeleteHandlingStrategy`` read them: defaults ``drop`` and ``drop.tombstones=true``)."""
    if config.delete_handling_mode is None and config.drop_tombstones is None:
        return _MODES[config.delete_tombstone_handling_mode]
    record = _LEGACY[config.delete_handling_mode or DeleteHandlingMode.DROP]
    return record, config.drop_tombstones is False


_DELETED_COLUMN = Column(DELETED_FIELD, ConnectType.STRING, True)

_TableKey = tuple[TableSchema, tuple[Column, ...], frozenset[str]]


def _derive(key: _TableKey, transform: str) -> TableSchema:
    table, added, dropped = key
    if dropped:
        kept = tuple(c for c in table.columns if c.name not in dropped)
        table = table.with_columns(kept)
    return with_added_columns(table, added, transform)


def _key_source(event: ChangeEvent, image: dict[str, Any]) -> dict[str, Any]:
    """``image`` with the key values the change is keyed by (a key column absent from an update's
    ``after`` is keyed from ``before``), so the row keeps the record's key as Debezium's does."""
    keys = key_payload(event.table.key, event.before, event.after)
    if keys is None or all(k in image and image[k] is v for k, v in keys.items()):
        return image
    return {**image, **keys}


def header_text(value: Any) -> bytes | None:
    """A header value as Kafka Connect's ``SimpleHeaderConverter`` writes it; ``None`` for null.

    >>> header_text("c"), header_text(1700000000000), header_text(True), header_text(None)
    (b'c', b'1700000000000', b'true', None)
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def _listed_names(raw: bytes) -> frozenset[str]:
    """The column names of a drop-fields header: a JSON array of strings, or comma-separated."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, list):
        return frozenset(str(name) for name in parsed if name is not None)
    return frozenset(n.strip() for n in raw.decode("utf-8", "replace").split(",") if n.strip())


class ExtractNewRecordState(Transform):
    """Flattens changes into rows of their new state (Debezium event flattening)."""

    name: ClassVar[str] = "unwrap"
    config_model = UnwrapConfig
    config: UnwrapConfig

    def __init__(self, config: UnwrapConfig) -> None:
        super().__init__(config)
        self._fields: tuple[MetadataField, ...] = parse_metadata_fields(
            config.add_fields, config.add_fields_prefix, allow_topic=False
        )
        self._headers: tuple[MetadataField, ...] = parse_metadata_fields(
            config.add_headers, config.add_headers_prefix, allow_topic=False
        )
        self._delete, self._keep_tombstone = _delete_policy(config)
        self._rewrite = self._delete is _Delete.REWRITE
        self._tables: DerivedTableCache[_TableKey, TableSchema] = DerivedTableCache(
            lambda k: _derive(k, self.name)
        )

    def apply(self, event: Event) -> list[Event]:
        if not isinstance(event, ChangeEvent):
            return [event]
        op = event.op
        if op is Operation.TRUNCATE:
            return [event] if self.config.truncate_handling_mode is TruncateHandlingMode.PASS else []
        if op is Operation.DELETE:
            return self._deleted(event)
        if op is Operation.UPDATE and event.before is not None and event.after is not None:
            key = event.table.key
            old, new = key_payload(key, event.before, None), key_payload(key, None, event.after)
            if old is not None and new is not None and old != new:
                deleted = replace(event, op=Operation.DELETE, after=None)
                created = replace(event, op=Operation.CREATE, before=None)
                return [*self._deleted(deleted), self._row(created, event.after, deleted=False)]
        if event.after is None:
            raise TransformError(self.name, f"a change with op {op.value!r} has no after image")
        return [self._row(event, event.after, deleted=False)]

    def _deleted(self, event: ChangeEvent) -> list[Event]:
        """A delete as ``delete.tombstone.handling.mode`` says, then the tombstone if it stays."""
        trailing: list[Event] = [self._tombstone(event)] if self._keep_tombstone else []
        mode = self._delete
        if event.before is None or mode is _Delete.DROP:
            return trailing  # Debezium drops a delete without a before image, like a truncate
        if mode is _Delete.REWRITE:
            return [self._row(event, event.before, deleted=True), *trailing]
        # a null value under the delete's key, which the emitter writes as a tombstone
        topic = self._routed(event, event.before)
        null = RowEvent(
            event.table, None, event.before, True, Operation.DELETE, topic, self._with_headers(event)
        )
        return [null, *trailing]

    def _tombstone(self, event: ChangeEvent) -> RowEvent:
        """The tombstone after a delete: its key, on the delete's topic, with just the ``op`` header."""
        headers = tuple((f.column, b"d") for f in self._headers if f.spec == "op")
        return RowEvent(event.table, None, event.before, True, Operation.DELETE, event.topic, headers)

    def _with_headers(self, event: ChangeEvent) -> tuple[tuple[str, bytes], ...]:
        if not self._headers:
            return event.headers
        added = []
        for field in self._headers:
            text = header_text(field.value(event, None))
            if text is not None:
                added.append((field.column, text))
        return (*event.headers, *added)

    def _routed(self, event: ChangeEvent, row: Mapping[str, Any]) -> str | None:
        """The topic named by ``route.by.field`` in ``row``, else the event's."""
        name = self.config.route_by_field
        if name is None:
            return event.topic
        if name not in row:
            raise TransformError(
                self.name, f"route.by.field {name!r} is not a column of {event.table.qualified_name}"
            )
        value = row[name]
        if value is not None and not isinstance(value, str):
            raise TransformError(
                self.name, f"route.by.field {name!r} of {event.table.qualified_name} is not a string column"
            )
        if value is None or not value.strip():
            return event.topic
        return value

    def _dropped(self, table: TableSchema, headers: tuple[tuple[str, bytes], ...]) -> frozenset[str]:
        wanted = self.config.drop_fields_header_name
        raw = next((v for k, v in headers if k == wanted), None) if wanted else None
        if not raw:
            return frozenset()
        names = _listed_names(raw)
        return frozenset(
            c.name for c in table.columns if c.name in names and c.optional and c.name not in table.key
        )

    def _row(self, event: ChangeEvent, image: dict[str, Any], *, deleted: bool) -> RowEvent:
        row = dict(image)
        columns: list[Column] = []
        if self._rewrite:
            row[DELETED_FIELD] = "true" if deleted else "false"
            columns.append(_DELETED_COLUMN)
        topic = self._routed(event, image if deleted else row)
        headers = self._with_headers(event)
        dropped = self._dropped(event.table, headers)
        for name in dropped:
            row.pop(name, None)
        for field in self._fields:
            value = field.value(event, None)
            row[field.column] = value
            columns.append(field.column_for(value, event))
        table = self._tables.get((event.table, tuple(columns), dropped))
        return RowEvent(
            table, row, _key_source(event, image), deleted, event.op, topic, headers, tombstone=False
        )
