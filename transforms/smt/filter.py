"""``filter``: drop events, like Kafka Connect's ``Filter`` (plus conditions of its own).

Without conditions it drops every event the step applies to; choose which with a predicate,
as in Kafka Connect. The optional conditions (all must hold) narrow it further:

* ``db.regex`` / ``table.regex``: full match on the database (else schema) and table name of
  a change, row or schema change;
* ``ops``: the op codes of a change or row.

``filter.type=exclude`` (default) drops the events that match; ``include`` keeps only them
(Confluent's ``Filter`` spelling). An event a condition cannot judge (a transaction boundary
against ``table.regex``, a schema change against ``ops``) passes through either way.

Also named ``org.apache.kafka.connect.transforms.Filter``: without conditions, it drops every
event its predicate matches, as Connect's does.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from transforms.envelope import ChangeEvent, Event, RowEvent, SchemaChangeEvent
from transforms.smt.base import SmtConfig, Transform
from transforms.smt.config_types import OpList, Regex, compile_regex

__all__ = ["Filter", "FilterConfig", "FilterType"]


class FilterType(StrEnum):
    """Whether matching events are dropped (``exclude``) or the only ones kept (``include``)."""

    EXCLUDE = "exclude"
    INCLUDE = "include"


class FilterConfig(SmtConfig):
    """Config of :class:`Filter`."""

    db_regex: Regex | None = Field(
        None, alias="db.regex", description="Full-match regex on the database name (else schema name)."
    )
    table_regex: Regex | None = Field(
        None, alias="table.regex", description="Full-match regex on the table name."
    )
    ops: OpList = Field((), description="Op codes to match (c, u, d, r, t); empty matches any.")
    filter_type: FilterType = Field(
        FilterType.EXCLUDE,
        alias="filter.type",
        description="exclude drops matching events; include keeps only them.",
    )


class Filter(Transform):
    """Drops the events that match its conditions (or, with ``include``, those that do not)."""

    name: ClassVar[str] = "filter"
    config_model = FilterConfig
    config: FilterConfig

    def __init__(self, config: FilterConfig) -> None:
        super().__init__(config)
        self._db: re.Pattern[str] | None = (
            compile_regex(config.db_regex) if config.db_regex is not None else None
        )
        self._table: re.Pattern[str] | None = (
            compile_regex(config.table_regex) if config.table_regex is not None else None
        )
        self._ops = frozenset(config.ops)

    def _matches(self, event: Event) -> bool | None:
        """Whether the conditions hold; ``None`` when they cannot judge this event."""
        table: str | None
        if isinstance(event, ChangeEvent | RowEvent):
            if self._ops and event.op not in self._ops:
                return False
            db, table = event.table.namespace, event.table.table
        elif isinstance(event, SchemaChangeEvent):
            if self._ops:
                return None
            db, table = event.db or event.schema or "default", event.table
        else:
            return None if self._db or self._table or self._ops else True
        if self._db is not None and self._db.fullmatch(db) is None:
            return False
        if self._table is not None:
            if table is None:
                return None
            return self._table.fullmatch(table) is not None
        return True

    def apply(self, event: Event) -> list[Event]:
        matched = self._matches(event)
        if matched is None:
            return [event]
        drop = matched if self.config.filter_type is FilterType.EXCLUDE else not matched
        return [] if drop else [event]
