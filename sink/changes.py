"""Canonical Debezium records to sink changes, and per-batch key-based compaction. Pure code.

A :class:`SinkChange` is one change of one table, decoded to Python values, with its ordering
position: ``source.sequence`` when the record has one, else the Kafka partition/offset (a key
always lands in the same partition, so offsets order the changes of a key).

:func:`compact` keeps the last change per key in source order within a micro-batch, folds
earlier images into a later partial image, and splits the batch at truncates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from sink.types import SinkColumn, columns_from_schema
from transforms.decoders import DECODERS
from transforms.decoders.connect_json import position_sequence
from transforms.envelope import AFTER, BEFORE, UNAVAILABLE_AFTER, UNAVAILABLE_BEFORE
from transforms.values import UNAVAILABLE, UNAVAILABLE_BYTES

__all__ = ["ChangeParseError", "SinkChange", "TableBatch", "compact", "ordering", "parse_record", "source_sequence"]


class ChangeParseError(ValueError):
    """A record on a normalized topic is not a canonical change event."""


@dataclass(frozen=True, slots=True)
class SinkChange:
    """One row change for the sink."""

    table: tuple[str, str]  # (namespace, table)
    op: str  # c u d r t
    key: tuple[Any, ...] | None
    row: dict[str, Any] | None  # after image (before image for deletes)
    seq: str
    ts_ms: int | None
    columns: tuple[SinkColumn, ...]
    key_columns: tuple[str, ...]
    topic: str
    partition: int
    offset: int
    unavailable: frozenset[str] = field(default_factory=frozenset)


_schema_cache: dict[bytes, tuple[tuple[SinkColumn, ...], tuple[str, ...]]] = {}


def ordering(sequence: str | None, partition: int, offset: int) -> str:
    """The string a change sorts by: the source sequence, else partition and offset.

    >>> ordering(None, 1, 42)
    'k0001:00000000000000000042'
    >>> ordering("000123", 0, 5)
    's000123'
    """
    if sequence:
        return "s" + sequence
    return f"k{partition:04d}:{offset:020d}"


_FORMAT_IDS = frozenset(DECODERS)  # the registry only: no decoder module is imported


def source_sequence(source: dict[str, Any]) -> str | None:
    """The string that sorts a change in source order: ``source.sequence`` of a cdcnorm record;
    for a Debezium connector's own record (its ``connector`` is not a cdcnorm format id, as on a
    re-emitted Debezium topic or a raw one), worked out from its position fields (binlog
    file/pos/row, LSN, SCN, ...), since Debezium's own ``sequence`` does not sort as text.

    >>> source_sequence({"connector": "canal-json", "sequence": "0042"})
    '0042'
    >>> source_sequence({"connector": "postgresql", "lsn": 34078720, "sequence": '["1","2"]'})
    '00000000000034078720'
    """
    connector = source.get("connector")
    if isinstance(connector, str) and connector in _FORMAT_IDS:
        sequence = source.get("sequence")
        return sequence if isinstance(sequence, str) else None
    ts_ms = source.get("ts_ms")
    return position_sequence(source, ts_ms if isinstance(ts_ms, int) else None)


def _row_schema(value_schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if not value_schema:
        return None
    for f in value_schema.get("fields", []):
        if f.get("field") == "after":
            return dict(f)
    return None


def _columns(row_schema: dict[str, Any], key_schema: dict[str, Any] | None) -> tuple[tuple[SinkColumn, ...], tuple[str, ...]]:
    cache_key = orjson.dumps([row_schema, key_schema], option=orjson.OPT_SORT_KEYS)
    hit = _schema_cache.get(cache_key)
    if hit is None:
        key_cols = tuple(f["field"] for f in (key_schema or {}).get("fields", []))
        hit = (columns_from_schema(row_schema), key_cols)
        if len(_schema_cache) > 10_000:
            _schema_cache.clear()
        _schema_cache[cache_key] = hit
    return hit


def parse_record(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
) -> SinkChange | None:
    """The change in a normalized record; ``None`` for tombstones and non-change records."""
    if value is None:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: expected an object")
    payload = doc.get("payload", doc) if "schema" in doc else doc
    if not isinstance(payload, dict) or "op" not in payload:
        return None  # schema-change / transaction / unwrapped rows are not table changes
    op = payload.get("op")
    if op not in ("c", "u", "d", "r", "t"):
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: unknown op {op!r}")
    source = payload.get("source") or {}
    namespace = source.get("db") or source.get("schema") or "default"
    table = source.get("table")
    if not table:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: source.table missing")
    row_schema = _row_schema(doc.get("schema"))
    if row_schema is None:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: record has no Connect schema (schemas.enable=false?)")
    key_doc = orjson.loads(key) if key else None
    key_schema = key_doc.get("schema") if isinstance(key_doc, dict) else None
    columns, key_cols = _columns(row_schema, key_schema)
    image = payload.get(BEFORE) if op == "d" else payload.get(AFTER)
    # absent columns: the placeholder where the type holds it, else null and named in the source block
    listed = source.get(UNAVAILABLE_BEFORE if op == "d" else UNAVAILABLE_AFTER) or ()
    row: dict[str, Any] | None = None
    unavailable: set[str] = set()
    if isinstance(image, dict):
        row = {}
        for col in columns:
            raw = image.get(col.name, UNAVAILABLE)
            if raw == UNAVAILABLE or (raw == UNAVAILABLE_BYTES and col.sql_type == "binary") or col.name in listed:
                unavailable.add(col.name)
                row[col.name] = None
            else:
                try:
                    row[col.name] = col.decode(raw)
                except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
                    raise ChangeParseError(f"{topic}[{partition}]@{offset}: column {col.name}: {exc}") from exc
    key_payload = key_doc.get("payload") if isinstance(key_doc, dict) and "payload" in key_doc else key_doc
    key_tuple: tuple[Any, ...] | None = None
    if key_cols and op != "t":
        if not isinstance(key_payload, dict):
            raise ChangeParseError(f"{topic}[{partition}]@{offset}: keyed table without a key payload")
        by_name = {c.name: c for c in columns}
        key_tuple = tuple(
            by_name[k].decode(key_payload.get(k)) if k in by_name else key_payload.get(k) for k in key_cols
        )
    return SinkChange(
        table=(namespace, table),
        op=op,
        key=key_tuple,
        row=row,
        seq=ordering(source_sequence(source), partition, offset),
        ts_ms=source.get("ts_ms") if source.get("ts_ms") is not None else payload.get("ts_ms"),
        columns=columns,
        key_columns=key_cols,
        topic=topic,
        partition=partition,
        offset=offset,
        unavailable=frozenset(unavailable),
    )


@dataclass(slots=True)
class TableBatch:
    """The compacted changes of one table in one micro-batch.

    ``truncate`` is set when a truncate happened; ``changes`` then holds only what followed it.
    ``appends`` holds every change in order for tables without a key (append-only).
    """

    table: tuple[str, str]
    truncate: bool = False
    changes: list[SinkChange] = field(default_factory=list)
    appends: list[SinkChange] = field(default_factory=list)

    @property
    def columns(self) -> tuple[SinkColumn, ...]:
        """The widest column list seen in this batch (the last change's schema, plus earlier columns)."""
        seen: dict[str, SinkColumn] = {}
        for change in (*self.appends, *self.changes):
            for col in change.columns:
                seen[col.name] = col
        return tuple(seen.values())

    @property
    def key_columns(self) -> tuple[str, ...]:
        for change in reversed(self.changes):
            if change.key_columns:
                return change.key_columns
        return ()


def _fold(prev: SinkChange, nxt: SinkChange) -> SinkChange:
    """``nxt`` with its unavailable columns filled from ``prev``'s image where ``prev`` had them."""
    if not nxt.unavailable or prev.op == "d" or prev.row is None or nxt.row is None:
        return nxt
    row = dict(nxt.row)
    still: set[str] = set()
    for name in nxt.unavailable:
        if name in prev.row and name not in prev.unavailable:
            row[name] = prev.row[name]
        else:
            still.add(name)
    return replace(nxt, row=row, unavailable=frozenset(still))


def compact(changes: Iterable[SinkChange]) -> dict[tuple[str, str], TableBatch]:
    """Group changes by table and keep the last change per key in source order.

    A change whose sequence is not newer than the one kept for its key is stale and dropped.
    """
    batches: dict[tuple[str, str], TableBatch] = {}
    latest: dict[tuple[str, str], dict[tuple[Any, ...], SinkChange]] = {}
    for change in sorted(changes, key=lambda c: c.seq):
        batch = batches.get(change.table)
        if batch is None:
            batch = batches[change.table] = TableBatch(change.table)
            latest[change.table] = {}
        if change.op == "t":
            batch.truncate = True
            batch.appends.clear()
            latest[change.table].clear()
            continue
        key = change.key
        if key is None:
            batch.appends.append(change)
            continue
        per_key = latest[change.table]
        prev = per_key.get(key)
        if prev is not None:
            if change.seq <= prev.seq:
                continue
            change = _fold(prev, change)
        per_key[key] = change
    for table, per_key in latest.items():
        batches[table].changes = list(per_key.values())
    return batches
