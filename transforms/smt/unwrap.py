"""``unwrap``: replace the change envelope by the flat row, like Debezium's ``ExtractNewRecordState``.

A change becomes a :class:`~transforms.envelope.RowEvent` holding its ``after`` image, keyed
as before. Deletes follow ``delete.handling.mode``:

* ``drop`` (default): no row; with ``drop.tombstones=false`` the delete's tombstone is kept;
* ``rewrite``: the ``before`` image plus ``__deleted: "true"`` (other rows get ``"false"``),
  followed by a tombstone unless ``drop.tombstones``;
* ``none``: a record with a null value (for the sink, the same as a tombstone).

``drop.tombstones`` (default true) removes the tombstones that follow deletes; the emitter's
``tombstones`` option still has to be on for any to be written. An update that changes the key
is unwrapped as the delete of the old key followed by the insert of the new one, as Debezium
itself emits it. Truncates are dropped, or passed on unchanged with
``truncate.handling.mode=pass``. Schema-change and transaction events pass through.

``add.fields`` copies event metadata into the row (``op`` → ``__op``, ``source.ts_ms`` →
``__source_ts_ms``; see :mod:`transforms.smt.metadata_fields`), prefixed by ``add.fields.prefix``.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

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
    "ExtractNewRecordState",
    "TruncateHandlingMode",
    "UnwrapConfig",
]

DELETED_FIELD = "__deleted"
"""The column ``delete.handling.mode=rewrite`` adds (string ``"true"``/``"false"``, as Debezium)."""


class DeleteHandlingMode(StrEnum):
    """Debezium's ``delete.handling.mode``."""

    DROP = "drop"
    REWRITE = "rewrite"
    NONE = "none"


class TruncateHandlingMode(StrEnum):
    """What happens to truncate events: dropped, or passed on as they are."""

    DROP = "drop"
    PASS = "pass"


class UnwrapConfig(SmtConfig):
    """Config of :class:`ExtractNewRecordState`."""

    delete_handling_mode: DeleteHandlingMode = Field(
        DeleteHandlingMode.DROP, alias="delete.handling.mode", description="drop, rewrite or none."
    )
    drop_tombstones: bool = Field(
        True, alias="drop.tombstones", description="Drop the tombstones that follow deletes."
    )
    truncate_handling_mode: TruncateHandlingMode = Field(
        TruncateHandlingMode.DROP, alias="truncate.handling.mode", description="drop or pass."
    )
    add_fields_prefix: str = Field(
        "__", alias="add.fields.prefix", description="Prefix of added field columns."
    )
    add_fields: CommaList = Field(
        (), alias="add.fields", description="Event metadata to add, e.g. op,table,source.ts_ms."
    )

    @field_validator("add_fields")
    @classmethod
    def _known_fields(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        parse_metadata_fields(value, info.data.get("add_fields_prefix", "__"), allow_topic=False)
        return value


_DELETED_COLUMN = Column(DELETED_FIELD, ConnectType.STRING, True)


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
        self._rewrite = config.delete_handling_mode is DeleteHandlingMode.REWRITE
        self._tables: DerivedTableCache[tuple[TableSchema, tuple[Column, ...]], TableSchema] = (
            DerivedTableCache(lambda k: with_added_columns(k[0], k[1], self.name))
        )

    def apply(self, event: Event) -> list[Event]:
        if not isinstance(event, ChangeEvent):
            return [event]
        op = event.op
        if op is Operation.TRUNCATE:
            return [event] if self.config.truncate_handling_mode is TruncateHandlingMode.PASS else []
        if op is Operation.DELETE:
            return self._delete(event)
        if op is Operation.UPDATE and event.before is not None and event.after is not None:
            key = event.table.key
            old, new = key_payload(key, event.before, None), key_payload(key, None, event.after)
            if old is not None and new is not None and old != new:
                deleted = replace(event, op=Operation.DELETE, after=None)
                created = replace(event, op=Operation.CREATE, before=None)
                return [*self._delete(deleted), self._row(created, event.after, deleted=False)]
        if event.after is None:
            raise TransformError(self.name, f"a change with op {op.value!r} has no after image")
        return [self._row(event, event.after, deleted=False)]

    def _delete(self, event: ChangeEvent) -> list[Event]:
        keep_tombstone = not self.config.drop_tombstones
        mode = self.config.delete_handling_mode
        if mode is DeleteHandlingMode.REWRITE and event.before is not None:
            return [replace(self._row(event, event.before, deleted=True), tombstone=keep_tombstone)]
        if mode is DeleteHandlingMode.NONE or keep_tombstone:
            # no row: the emitter writes only the (null-valued) record under the delete's key
            return [
                RowEvent(event.table, None, event.before, True, Operation.DELETE, event.topic, event.headers)
            ]
        return []

    def _row(self, event: ChangeEvent, image: dict[str, Any], *, deleted: bool) -> RowEvent:
        row = dict(image)
        columns: list[Column] = []
        for field in self._fields:
            value = field.value(event, None)
            row[field.column] = value
            columns.append(field.column_for(value))
        if self._rewrite:
            row[DELETED_FIELD] = "true" if deleted else "false"
            columns.append(_DELETED_COLUMN)
        table = self._tables.get((event.table, tuple(columns)))
        return RowEvent(table, row, image, deleted, event.op, event.topic, event.headers)
