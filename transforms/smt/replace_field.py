"""``replace-field``: drop and rename columns, like Kafka Connect's ``ReplaceField``.

Applies to the row images of changes (``before`` and ``after``) and to unwrapped rows, and
rewrites the table's columns and key to match. A column is kept when it is not in ``exclude``
and ``include`` is empty or lists it; kept columns are then renamed by ``renames``
(``"old:new,old2:new2"``, a list of ``old:new``, or a mapping).

A renamed key column is renamed in the key too. Dropping a key column, or renaming onto a name
the table already has, fails with a :class:`~transforms.errors.TransformError` for that table.
Values move untouched, so ``__debezium_unavailable_value`` stays absent.

Also named ``org.apache.kafka.connect.transforms.ReplaceField$Value``, with the same keys;
Connect's deprecated ``blacklist`` / ``whitelist`` are read as ``exclude`` / ``include`` with a
warning. Stricter than Connect: renaming a column that is dropped is a config error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from transforms.connect import TableSchema
from transforms.envelope import ChangeEvent, Event, RowEvent
from transforms.errors import TransformError
from transforms.smt.base import SmtConfig, Transform
from transforms.smt.config_types import CommaList
from transforms.smt.table_cache import DerivedTableCache

__all__ = ["ReplaceField", "ReplaceFieldConfig"]


def _parse_renames(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple((str(k), str(v)) for k, v in value.items())
    if value is None:
        return ()
    items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        return value
    pairs = []
    for item in items:
        if isinstance(item, str):
            parts = item.split(":")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise ValueError(f"expected 'old:new', found {item!r}")
            pairs.append((parts[0].strip(), parts[1].strip()))
        else:
            pairs.append(item)
    return tuple(pairs)


Renames = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_parse_renames)]


class ReplaceFieldConfig(SmtConfig):
    """Config of :class:`ReplaceField`."""

    deprecated_keys: ClassVar[Mapping[str, str]] = {"blacklist": "exclude", "whitelist": "include"}

    exclude: CommaList = Field((), description="Columns to drop.")
    include: CommaList = Field((), description="Columns to keep; empty keeps all (minus exclude).")
    renames: Renames = Field((), description="Renames as 'old:new' pairs, comma-separated.")
    replace_null_with_default: bool = Field(
        True,
        alias="replace.null.with.default",
        description="Kafka Connect's option, accepted as is: cdcnorm column schemas carry no defaults.",
    )

    @field_validator("renames")
    @classmethod
    def _consistent(
        cls, renames: tuple[tuple[str, str], ...], info: ValidationInfo
    ) -> tuple[tuple[str, str], ...]:
        sources = [old for old, _ in renames]
        targets = [new for _, new in renames]
        for names, what in ((sources, "renamed"), (targets, "the target of a rename")):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{', '.join(dupes)} is {what} more than once")
        dropped = sorted(set(sources) & set(info.data.get("exclude", ())))
        if dropped:
            raise ValueError(f"{', '.join(dropped)} is also excluded")
        include = info.data.get("include", ())
        if include:
            missing = sorted(set(sources) - set(include))
            if missing:
                raise ValueError(f"{', '.join(missing)} is not in include, so it is dropped")
        return renames

    @model_validator(mode="after")
    def _not_empty(self) -> ReplaceFieldConfig:
        if not (self.exclude or self.include or self.renames):
            raise ValueError("set at least one of exclude, include, renames")
        return self


class ReplaceField(Transform):
    """Drops and renames columns of row images, keeping the table schema and key in step."""

    name: ClassVar[str] = "replace-field"
    config_model = ReplaceFieldConfig
    config: ReplaceFieldConfig

    def __init__(self, config: ReplaceFieldConfig) -> None:
        super().__init__(config)
        self._exclude = frozenset(config.exclude)
        self._include = frozenset(config.include)
        self._renames = dict(config.renames)
        self._tables: DerivedTableCache[TableSchema, TableSchema] = DerivedTableCache(self._derive)

    def _kept(self, name: str) -> bool:
        return name not in self._exclude and (not self._include or name in self._include)

    def _derive(self, table: TableSchema) -> TableSchema:
        for name in table.key:
            if not self._kept(name):
                raise TransformError(self.name, f"would drop key column {name!r} of {table.qualified_name}")
        columns = tuple(
            c.renamed(self._renames.get(c.name, c.name)) for c in table.columns if self._kept(c.name)
        )
        seen: set[str] = set()
        for col in columns:
            if col.name in seen:
                raise TransformError(
                    self.name, f"renaming makes two columns named {col.name!r} in {table.qualified_name}"
                )
            seen.add(col.name)
        key = tuple(self._renames.get(k, k) for k in table.key)
        derived = TableSchema(table.db, table.schema, table.table, columns, key, table.topic_namespace)
        return table if derived == table else derived

    def _row(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        renames = self._renames
        return {renames.get(k, k): v for k, v in row.items() if self._kept(k)}

    def apply(self, event: Event) -> list[Event]:
        if isinstance(event, ChangeEvent):
            table = self._tables.get(event.table)
            before, after = self._row(event.before), self._row(event.after)
            if table is event.table and before == event.before and after == event.after:
                return [event]
            return [replace(event, table=table, before=before, after=after)]
        if isinstance(event, RowEvent):
            table = self._tables.get(event.table)
            return [
                replace(event, table=table, row=self._row(event.row), key_source=self._row(event.key_source))
            ]
        return [event]
