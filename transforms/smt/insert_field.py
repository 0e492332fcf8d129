"""``insert-field``: add a static field and event metadata as columns, like Kafka Connect's ``InsertField``.

* ``static.field`` / ``static.value``: a string column with a fixed value;
* ``topic.field``: a string column holding the event's destination topic (after any ``route``);
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

Also named ``org.apache.kafka.connect.transforms.InsertField$Value``. As in Connect, a
``static.field`` or ``topic.field`` name ending in ``!`` makes a required column, ``?`` (or
nothing) an optional one. Connect's ``partition.field``, ``offset.field`` and
``timestamp.field`` are refused: the partition, offset and timestamp of a record are set when
it is produced, after the chain (``add.fields=ts_ms`` or ``source.ts_ms`` adds the change's
times).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, Event, RowEvent, destination_topic
from transforms.smt.base import Transform
from transforms.smt.config_types import CommaList, TopicNamingConfig
from transforms.smt.metadata_fields import MetadataField, parse_metadata_fields, with_added_columns
from transforms.smt.table_cache import DerivedTableCache

__all__ = ["InsertField", "InsertFieldConfig", "column_spec"]

_LATER = (
    "is set when the record is produced, after the transform chain, so it cannot be inserted; "
    "add.fields=ts_ms or source.ts_ms adds the change's own times"
)


def column_spec(spec: str) -> tuple[str, bool]:
    """A Kafka Connect field spec: the name, and whether it is optional (``name!`` is required).

    >>> column_spec("region!"), column_spec("region?"), column_spec("region")
    (('region', False), ('region', True), ('region', True))
    """
    if spec.endswith("!"):
        return spec[:-1], False
    if spec.endswith("?"):
        return spec[:-1], True
    return spec, True


def _named(spec: str | None) -> str | None:
    if spec is not None and not column_spec(spec)[0]:
        raise ValueError("a field name is needed before '!' or '?'")
    return spec


def _refused(what: str) -> Callable[[str | None], str | None]:
    def check(spec: str | None) -> str | None:
        if spec is not None:
            raise ValueError(f"the Kafka {what} {_LATER}")
        return spec

    return check


class InsertFieldConfig(TopicNamingConfig):
    """Config of :class:`InsertField`."""

    static_field: str | None = Field(
        None, alias="static.field", min_length=1, description="Name of a static field (suffix ! = required)."
    )
    static_value: str | None = Field(None, alias="static.value", description="Value of the static field.")
    topic_field: str | None = Field(
        None,
        alias="topic.field",
        min_length=1,
        description="Name of a field holding the destination topic (suffix ! = required).",
    )
    partition_field: Annotated[str | None, AfterValidator(_refused("partition"))] = Field(
        None, alias="partition.field", description="Kafka Connect's; refused: the partition is chosen later."
    )
    offset_field: Annotated[str | None, AfterValidator(_refused("offset"))] = Field(
        None, alias="offset.field", description="Kafka Connect's (sink records only); refused."
    )
    timestamp_field: Annotated[str | None, AfterValidator(_refused("timestamp"))] = Field(
        None, alias="timestamp.field", description="Kafka Connect's; refused: the timestamp is set later."
    )
    add_fields_prefix: str = Field(
        "__", alias="add.fields.prefix", description="Prefix of metadata field columns."
    )
    add_fields: CommaList = Field(
        (), alias="add.fields", description="Event metadata to add, e.g. op,table,source.ts_ms."
    )
    replace_null_with_default: bool = Field(
        True,
        alias="replace.null.with.default",
        description="Kafka Connect's option, accepted as is: cdcnorm column schemas carry no defaults.",
    )

    @field_validator("static_field", "topic_field")
    @classmethod
    def _field_name(cls, value: str | None) -> str | None:
        return _named(value)

    @field_validator("add_fields")
    @classmethod
    def _known_fields(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        parse_metadata_fields(value, info.data.get("add_fields_prefix", "__"), allow_topic=True)
        return value

    @model_validator(mode="after")
    def _something_to_add(self) -> InsertFieldConfig:
        if (self.static_field is None) != (self.static_value is None):
            raise ValueError("static.field and static.value go together")
        if self.static_field is None and self.topic_field is None and not self.add_fields:
            raise ValueError("set static.field/static.value, topic.field or add.fields")
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
        self._static: tuple[Column, ...] = ()
        if config.static_field is not None:
            self._static += (Column(*_string_column(config.static_field)),)
        self._topic: Column | None = (
            Column(*_string_column(config.topic_field)) if config.topic_field is not None else None
        )
        self._tables: DerivedTableCache[tuple[TableSchema, tuple[Column, ...]], TableSchema] = (
            DerivedTableCache(lambda k: with_added_columns(k[0], k[1], self.name))
        )

    def _additions(self, event: ChangeEvent | RowEvent) -> tuple[TableSchema, dict[str, Any]]:
        values: dict[str, Any] = {}
        columns: list[Column] = []
        if self._topic is not None:  # Kafka Connect's order: topic, then static
            values[self._topic.name] = destination_topic(event, self._naming)
            columns.append(self._topic)
        if self._static:
            values[self._static[0].name] = self.config.static_value
            columns.append(self._static[0])
        for field in self._fields:
            value = field.value(event, self._naming)
            values[field.column] = value
            columns.append(field.column_for(value, event))
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


def _string_column(spec: str) -> tuple[str, ConnectType, bool]:
    name, optional = column_spec(spec)
    return name, ConnectType.STRING, optional
