"""Event metadata as row fields: what ``unwrap``'s ``add.fields`` and ``insert-field`` add.

A field is named the way Debezium's ``add.fields`` names it: ``op``, ``ts_ms`` (the envelope's),
``table``, ``source.ts_ms``, ``transaction.id``, or any position field of the format (``pos``,
``lsn``, ``scn`` ... from :attr:`SourceInfo.fields`). A change that kept a Debezium connector's
own ``source`` block (:attr:`SourceInfo.native`) has its source fields read from that block and
typed by its schema, as Debezium reads them. The column gets the prefix (``__``) and
dots become underscores: ``source.ts_ms`` → ``__source_ts_ms``; as in Debezium,
``source.ts_ms:event_ts`` names the column ``__event_ts`` instead.

>>> [f.column for f in parse_metadata_fields(["op", "source.ts_ms", "table:tbl"], "__", allow_topic=False)]
['__op', '__source_ts_ms', '__tbl']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders.connect_json import FieldError, column_from_schema, struct_field_schemas
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    RowEvent,
    destination_topic,
    source_field_type,
    source_field_value,
)
from transforms.errors import TransformError

__all__ = ["MetadataField", "parse_metadata_fields", "with_added_columns"]

_NAME_RE = re.compile(r"^(?:(source|transaction)\.)?([A-Za-z_][A-Za-z0-9_]*)$")

_TABLE_PARTS = frozenset({"db", "schema", "table"})
_SOURCE_BASE = frozenset({"connector", "snapshot", "sequence", "name", "ts_ms"}) | _TABLE_PARTS
_TRANSACTION = frozenset({"id", "total_order", "data_collection_order"})

_FIXED_TYPES: dict[str, ConnectType] = {
    "op": ConnectType.STRING,
    "ts_ms": ConnectType.INT64,
    "topic": ConnectType.STRING,
    **{f"source.{n}": ConnectType.STRING for n in _SOURCE_BASE},
    **{n: ConnectType.STRING for n in _SOURCE_BASE - {"ts_ms"}},
    "source.ts_ms": ConnectType.INT64,
    "transaction.id": ConnectType.STRING,
    "transaction.total_order": ConnectType.INT64,
    "transaction.data_collection_order": ConnectType.INT64,
}


@dataclass(frozen=True, slots=True)
class MetadataField:
    """One metadata field: the configured ``spec`` and the ``column`` it is written to."""

    spec: str
    column: str

    @property
    def _source_name(self) -> str | None:
        """The source-block field this spec reads, or ``None`` for op/ts_ms/topic/transaction."""
        if self.spec.startswith("source."):
            return self.spec[len("source.") :]
        if self.spec in ("op", "ts_ms", "topic") or self.spec.startswith("transaction."):
            return None
        return self.spec

    def value(self, event: ChangeEvent | RowEvent, naming: EmitOptions | None) -> Any:
        """The field's value for ``event`` (``None`` where the event does not carry it)."""
        spec = self.spec
        if spec == "op":
            return event.op.value
        if spec == "topic":
            return destination_topic(event, naming or EmitOptions())
        table = event.table
        source_name = self._source_name
        if source_name is not None and isinstance(event, ChangeEvent) and event.source.native is not None:
            return event.source.native.source.get(source_name)
        if source_name in _TABLE_PARTS:
            return getattr(table, source_name)
        if source_name == "name":
            return (naming or EmitOptions()).prefix
        if not isinstance(event, ChangeEvent):
            return None  # a flat row no longer carries source or transaction metadata
        source = event.source
        if spec == "ts_ms":
            return event.ts_ms if event.ts_ms is not None else source.ts_ms
        if spec.startswith("transaction."):
            tx = event.transaction
            return None if tx is None else getattr(tx, spec[len("transaction.") :])
        if source_name == "ts_ms":
            return source.ts_ms
        if source_name == "connector":
            return source.connector
        if source_name == "snapshot":
            return source.snapshot.value
        if source_name == "sequence":
            return source.sequence
        return source_field_value(source.fields.get(source_name or ""))

    def column_for(self, value: Any, event: ChangeEvent | RowEvent | None = None) -> Column:
        """The (optional) column of this field; a format's own fields are typed by value, a
        connector's own source fields by their schema."""
        native = _native_column(event, self._source_name, self.column) if event is not None else None
        if native is not None:
            return native
        ctype = _FIXED_TYPES.get(self.spec) or source_field_type(value)
        return Column(self.column, ctype, True)


_native_columns: dict[tuple[int, str, str], tuple[dict[str, Any], Column | None]] = {}
"""(id(source schema), field, column) → (that schema, the column); see :func:`_native_column`."""


def _native_column(event: ChangeEvent | RowEvent, field: str | None, column: str) -> Column | None:
    """The column of source field ``field`` as a connector's own source schema types it."""
    if field is None or not isinstance(event, ChangeEvent) or event.source.native is None:
        return None
    schema = event.source.native.layout.source_schema
    if schema is None:
        return None
    key = (id(schema), field, column)
    hit = _native_columns.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    try:
        found = struct_field_schemas(schema).get(field)
        col = column_from_schema(found, column).as_optional(True) if found is not None else None
    except FieldError:
        col = None
    if len(_native_columns) > 4096:
        _native_columns.clear()
    _native_columns[key] = (schema, col)
    return col


def parse_metadata_fields(
    specs: Iterable[str], prefix: str, *, allow_topic: bool
) -> tuple[MetadataField, ...]:
    """Validate field specs; ``ValueError`` names the first bad one."""
    out: list[MetadataField] = []
    seen: set[str] = set()
    for item in specs:
        spec, sep, new_name = item.partition(":")
        if sep and (":" in new_name or not new_name):
            raise ValueError(f"{item!r} is not a field name optionally followed by ':' and a new name")
        m = _NAME_RE.match(spec)
        if m is None:
            raise ValueError(f"{spec!r} is not a field name like 'op', 'table' or 'source.ts_ms'")
        group, name = m.groups()
        if group == "transaction" and name not in _TRANSACTION:
            raise ValueError(f"{spec!r}: transaction fields are {', '.join(sorted(_TRANSACTION))}")
        if spec == "topic" and not allow_topic:
            raise ValueError("'topic' is not available here")
        column = prefix + (new_name if sep else spec.replace(".", "_"))
        if column in seen:
            raise ValueError(f"{item!r} names {column!r} twice")
        seen.add(column)
        out.append(MetadataField(spec, column))
    return tuple(out)


def with_added_columns(table: TableSchema, added: Iterable[Column], transform: str) -> TableSchema:
    """``table`` with ``added`` appended; an added column replaces a same-named non-key column."""
    added = tuple(added)
    if not added:
        return table
    names = {c.name for c in added}
    for name in names:
        if name in table.key:
            raise TransformError(
                transform, f"added field {name!r} would replace key column of {table.qualified_name}"
            )
    kept = tuple(c for c in table.columns if c.name not in names)
    return TableSchema(table.db, table.schema, table.table, kept + added, table.key, table.topic_namespace)
