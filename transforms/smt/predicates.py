"""Predicates: *when* a chain step applies, kept apart from what it does (as in Kafka Connect).

==================  ==============================================================  ==========
name                true for                                                        config
==================  ==============================================================  ==========
``topic-matches``   any event whose destination topic fully matches ``regex``       ``regex``
``table-matches``   a change, row or schema change whose ``db.table`` fully matches ``regex``
``op-is``           a change or row whose op is one of ``ops``                      ``ops``
``is-schema-change`` a schema-change event                                           -
``is-transaction``  a transaction boundary event                                    -
``has-header-key``  a change or row carrying a header named ``name``                ``name``
``is-tombstone``    a row with a null value (what ``unwrap`` leaves of a delete)    -
==================  ==============================================================  ==========

``db`` in ``db.table`` is the database name, else the schema name (as in topic names).

Kafka Connect's class names work too (see :data:`~transforms.smt.registry.PREDICATE_ALIASES`):
``...predicates.TopicNameMatches`` (``pattern``, which ``topic-matches`` also accepts),
``...predicates.RecordIsTombstone`` and ``...predicates.HasHeaderKey`` (``name``).

The tombstone the emitter writes after each delete is made when the event is serialized, after
the chain, so no predicate sees it: ``is-tombstone`` matches the null-valued rows of deletes
that ``unwrap`` passes on (``delete.tombstone.handling.mode=tombstone`` or
``delete-to-tombstone``). A topic's ``tombstones: false`` turns the emitter's off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator

from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    RowEvent,
    SchemaChangeEvent,
    TransactionEvent,
    destination_topic,
)
from transforms.smt.base import Predicate, SmtConfig
from transforms.smt.config_types import OpList, Regex, TopicNamingConfig, compile_regex

__all__ = [
    "HasHeaderKey",
    "HasHeaderKeyConfig",
    "IsSchemaChange",
    "IsTombstone",
    "IsTransaction",
    "OpIs",
    "OpIsConfig",
    "TableMatches",
    "TableMatchesConfig",
    "TopicMatches",
    "TopicMatchesConfig",
]


class TopicMatchesConfig(TopicNamingConfig):
    """Config of :class:`TopicMatches`; ``pattern`` is Kafka Connect's spelling of ``regex``."""

    key_spellings: ClassVar[Mapping[str, str]] = {"pattern": "regex"}

    regex: Regex = Field(..., min_length=1, description="Full-match regex on the destination topic.")


class TopicMatches(Predicate):
    """True when the event's destination topic matches (Kafka Connect ``TopicNameMatches``)."""

    name: ClassVar[str] = "topic-matches"
    config_model = TopicMatchesConfig
    config: TopicMatchesConfig

    def __init__(self, config: TopicMatchesConfig) -> None:
        super().__init__(config)
        self._regex = compile_regex(config.regex)
        self._naming = config.emit_options()

    def test(self, event: Event) -> bool:
        return self._regex.fullmatch(destination_topic(event, self._naming)) is not None


class TableMatchesConfig(SmtConfig):
    """Config of :class:`TableMatches`."""

    regex: Regex = Field(..., description="Full-match regex on 'db.table'.")


class TableMatches(Predicate):
    """True for changes, rows and schema changes of the tables whose ``db.table`` matches."""

    name: ClassVar[str] = "table-matches"
    config_model = TableMatchesConfig
    config: TableMatchesConfig

    def __init__(self, config: TableMatchesConfig) -> None:
        super().__init__(config)
        self._regex = compile_regex(config.regex)

    def test(self, event: Event) -> bool:
        if isinstance(event, ChangeEvent | RowEvent):
            name = f"{event.table.namespace}.{event.table.table}"
        elif isinstance(event, SchemaChangeEvent) and event.table is not None:
            name = f"{event.db or event.schema or 'default'}.{event.table}"
        else:
            return False
        return self._regex.fullmatch(name) is not None


class OpIsConfig(SmtConfig):
    """Config of :class:`OpIs`."""

    ops: OpList = Field(..., description="Op codes (c, u, d, r, t).")

    @field_validator("ops")
    @classmethod
    def _non_empty(cls, value: tuple[Operation, ...]) -> tuple[Operation, ...]:
        if not value:
            raise ValueError("list at least one op code")
        return value


class OpIs(Predicate):
    """True for changes and rows whose op is one of the configured ones."""

    name: ClassVar[str] = "op-is"
    config_model = OpIsConfig
    config: OpIsConfig

    def __init__(self, config: OpIsConfig) -> None:
        super().__init__(config)
        self._ops = frozenset(config.ops)

    def test(self, event: Event) -> bool:
        return isinstance(event, ChangeEvent | RowEvent) and event.op in self._ops


class IsSchemaChange(Predicate):
    """True for schema-change (DDL) events."""

    name: ClassVar[str] = "is-schema-change"

    def test(self, event: Event) -> bool:
        return isinstance(event, SchemaChangeEvent)


class IsTransaction(Predicate):
    """True for transaction boundary events."""

    name: ClassVar[str] = "is-transaction"

    def test(self, event: Event) -> bool:
        return isinstance(event, TransactionEvent)


class HasHeaderKeyConfig(SmtConfig):
    """Config of :class:`HasHeaderKey`."""

    name: str = Field(..., min_length=1, description="Header name.")


class HasHeaderKey(Predicate):
    """True for changes and rows carrying a header of that name (Kafka Connect ``HasHeaderKey``)."""

    name: ClassVar[str] = "has-header-key"
    config_model = HasHeaderKeyConfig
    config: HasHeaderKeyConfig

    def test(self, event: Event) -> bool:
        if not isinstance(event, ChangeEvent | RowEvent):
            return False
        wanted = self.config.name
        return any(key == wanted for key, _ in event.headers)


class IsTombstone(Predicate):
    """True for rows with a null value (Kafka Connect ``RecordIsTombstone``)."""

    name: ClassVar[str] = "is-tombstone"

    def test(self, event: Event) -> bool:
        return isinstance(event, RowEvent) and event.row is None
