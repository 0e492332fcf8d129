"""``insert-field``: add a static field and event metadata as columns, like Kafka Connect's ``InsertField``.

* ``static.field`` / ``static.value``: a string column with a fixed value;
* ``add.fields``: metadata of the event as columns named ``add.fields.prefix`` + name, dots
  becoming underscores (``op`` → ``__op``, ``source.ts_ms`` → ``__source_ts_ms``). Names:
  ``op``, ``ts_ms``, ``topic``, ``db``, ``schema``, ``table``, ``connector``, ``snapshot``,
  ``sequence``, ``name`` (the prefix), ``source.<any of those or a format position field>``
  (``source.pos``, ``source.lsn`` ...), ``transaction.id``, ``transaction.total_order``,
  ``transaction.data_collection_order``.

The fields go into every row image of a change (``before`` and ``after``) and into unwrapped
rows; the table gets matching optional columns. Unwrapped rows no longer carry source or
transaction metadata, so those fields are ``null`` there: add them with ``unwrap``'s
``add.fields`` instead. An added field replaces a same-named non-key column.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, Event, RowEvent
from transforms.smt.base import Transform
from transforms.smt.config_types import CommaList, TopicNamingConfig
from transforms.smt.metadata_fields import MetadataField, parse_metadata_fields, with_added_columns
from transforms.smt.table_cache import DerivedTableCache

__all__ = ["InsertField", "InsertFieldConfig"]


class InsertFieldConfig(TopicNamingConfig):
    """Config of :class:`InsertField`."""

    static_field: str | None = Field(
        None, alias="static.field", min_length=1, description="Name of a static field."
    )
    static_value: str | None = Field(None, alias="static.value", description="Value of the static field.")
    add_fields_prefix: str = Field(
        "__", alias="add.fields.prefix", description="Prefix of metadata field columns."
    )
    add_fields: CommaList = Field(
        (), alias="add.fields", description="Event metadata to add, e.g. op,table,source.ts_ms."
    )

    @field_validator("add_fields")
    @classmethod
    def _known_fields(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        parse_metadata_fields(value, info.data.get("add_fields_prefix", "__"), allow_topic=True)
        return value

    @model_validator(mode="after")
    def _something_to_add(self) -> InsertFieldConfig:
        if (self.static_field is None) != (self.static_value is None):
            raise ValueError("static.field and static.value go together")
        if self.static_field is None and not self.add_fields:
            raise ValueError("set static.field/static.value or add.fields")
        return self


class InsertField(Transform):
    """Adds a static column and event-metadata columns to row images."""

    name: ClassVar[str] = "insert-field"
    config_model = InsertFieldConfig
    config: InsertFieldConfig

    def __init__(self, config: InsertFieldConfig) -> None:
        super().__init__(config)
        self._fields: tuple[MetadataField, ...] = parse_metadata_fields(
            config.add_fields, config.add_fields_prefix, allow_topic=True
        )
        self._naming = config.emit_options()
        self._static: tuple[Column, ...] = (
            (Column(config.static_field, ConnectType.STRING, True),)
            if config.static_field is not None
            else ()
        )
        self._tables: DerivedTableCache[tuple[TableSchema, tuple[Column, ...]], TableSchema] = (
            DerivedTableCache(lambda k: with_added_columns(k[0], k[1], self.name))
        )

    def _additions(self, event: ChangeEvent | RowEvent) -> tuple[TableSchema, dict[str, Any]]:
        values: dict[str, Any] = {}
        columns = list(self._static)
        if self.config.static_field is not None:
            values[self.config.static_field] = self.config.static_value
        for field in self._fields:
            value = field.value(event, self._naming)
            values[field.column] = value
            columns.append(field.column_for(value))
        return self._tables.get((event.table, tuple(columns))), values

    def apply(self, event: Event) -> list[Event]:
        if isinstance(event, ChangeEvent):
            table, values = self._additions(event)
            before = None if event.before is None else {**event.before, **values}
            after = None if event.after is None else {**event.after, **values}
            return [replace(event, table=table, before=before, after=after)]
        if isinstance(event, RowEvent):
            table, values = self._additions(event)
            row = None if event.row is None else {**event.row, **values}
            return [replace(event, table=table, row=row)]
        return [event]
