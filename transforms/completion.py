"""Partial-image completion: fill absent columns from the last known full row image.

Some formats leave columns out of a change (Shareplex updates, Canal ``old``, Qlik
``columnMask``, Arcion ``exists=0``); decoders mark them :data:`~transforms.values.UNAVAILABLE`.
For the tables where it is enabled, :func:`complete_partial_images` fills them from a
:class:`~transforms.metadata.RowStateStore` holding the last after-image per primary key, and
keeps that store current.

Rules, per change of an enabled table that has a key:

* the row is identified by its old key (from ``before``, else ``after``), serialized as the
  compact JSON of its key payload (:func:`row_key`); a change without a known key is left as is;
* ``before`` is filled from the stored image; ``after`` from the change's own ``before`` where
  that has the value (an absent column is an unchanged one), else from the stored image;
  a column the stored image lacks stays unavailable; SQL NULLs are values and are kept;
* the store then holds the new after-image (its known columns) under the new key; a delete
  removes the entry, and an update that changes the key removes the old one;
* a change that carries ``source.sequence`` stores it with the image (under
  :data:`SEQUENCE_FIELD`). A change with absent columns whose sequence is *older* than the stored
  image's is a replay (at-least-once redelivery after a crash) of a change the store has already
  moved past: the stored image belongs to a later version of the row, so it fills nothing (its
  absent columns stay unavailable, the same degradation as a forgotten row) and the store is left
  as it is. A change with the stored image's own sequence (its own replay, or a change sharing
  its predecessor's sequence) fills ``after`` only: the stored image may be its own after-image,
  which is not its before-image. A replayed change with nothing absent (the store is not read
  for it) writes its image, as the original did; the replay goes on in source order, so the
  store is back at the last version when it ends. This trusts the order the sink's merge
  trusts (a key's sequences sort as text in source order). Changes without a (non-empty)
  sequence are completed as before;
* truncates, schema changes, transaction events and rows pass through untouched.

Store access is batched: at most one ``get_rows`` and one ``put_rows`` per table per call,
and ``get_rows`` only for keys whose changes have absent columns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson

from transforms.connect import TableSchema
from transforms.envelope import ChangeEvent, Event, Operation, key_payload
from transforms.metadata import RowStateStore
from transforms.values import UNAVAILABLE

__all__ = ["SEQUENCE_FIELD", "TableSelector", "complete_partial_images", "row_key", "table_enabled"]

TableSelector = Collection[str] | Callable[[TableSchema], bool] | None
"""Which tables are completed: ``None`` (all), names, or a function of the table.

Names are ``db.table`` (db being the database, else schema, name), the fully qualified
``db.schema.table``, the bare ``table``, or ``*``.
"""

Image = dict[str, Any]

SEQUENCE_FIELD = "__cdcnorm_sequence"
"""Where a stored image keeps the ``source.sequence`` of the change that wrote it."""


def table_enabled(tables: TableSelector, table: TableSchema) -> bool:
    """Whether ``tables`` selects ``table``.

    >>> table_enabled({"shop.orders"}, TableSchema("shop", None, "orders"))
    True
    """
    if tables is None:
        return True
    if callable(tables):
        return bool(tables(table))
    return (
        "*" in tables
        or f"{table.namespace}.{table.table}" in tables
        or table.qualified_name in tables
        or table.table in tables
    )


def _key_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def row_key(payload: dict[str, Any]) -> str:
    """The store key of a row: its key payload as compact JSON, in key column order.

    >>> row_key({"id": 7, "region": "eu"})
    '{"id":7,"region":"eu"}'
    """
    return orjson.dumps(payload, default=_key_default).decode()


def _absent(value: Any) -> bool:
    return isinstance(value, str) and value == UNAVAILABLE


def _has_absent(image: Image | None) -> bool:
    return image is not None and any(_absent(v) for v in image.values())


def _fill(image: Image | None, *sources: Image | None) -> Image | None:
    """``image`` with absent values taken from the first source that has them (new dict if any)."""
    if image is None or not _has_absent(image):
        return image
    out = dict(image)
    for name, value in image.items():
        if not _absent(value):
            continue
        for source in sources:
            if source is not None and name in source and not _absent(source[name]):
                out[name] = source[name]
                break
    return out


def _known(image: Image) -> Image:
    return {k: v for k, v in image.items() if not _absent(v)}


class _Planned:
    """A change of an enabled table with a key: where it is stored, under which keys."""

    __slots__ = ("event", "new_key", "old_key", "store_table")

    def __init__(self, event: ChangeEvent, store_table: str, old_key: str, new_key: str | None) -> None:
        self.event = event
        self.store_table = store_table
        self.old_key = old_key
        self.new_key = new_key


def _plan(event: Event, tables: TableSelector) -> _Planned | None:
    if not isinstance(event, ChangeEvent) or event.op is Operation.TRUNCATE:
        return None
    table = event.table
    if not table.key or not table_enabled(tables, table):
        return None
    cols = table.key
    old = key_payload(cols, event.before, None) if event.before is not None else None
    new = key_payload(cols, event.before, event.after) if event.after is not None else None
    ident = old or new
    if ident is None:
        return None
    return _Planned(event, table.qualified_name, row_key(ident), row_key(new) if new is not None else None)


def complete_partial_images(
    events: Sequence[Event], store: RowStateStore, tables: TableSelector = None
) -> list[Event]:
    """Fill absent columns of enabled tables' changes from ``store``, and update ``store``.

    Returns a new list; events that need no change are the same objects. Inputs are never
    mutated.
    """
    plans = [_plan(event, tables) for event in events]
    wanted: dict[str, dict[str, None]] = {}
    for plan in plans:
        if plan is not None and (_has_absent(plan.event.before) or _has_absent(plan.event.after)):
            wanted.setdefault(plan.store_table, {})[plan.old_key] = None
    state: dict[tuple[str, str], Image | None] = {}
    for store_table, keys in wanted.items():
        key_list = list(keys)
        for key, row in zip(key_list, store.get_rows(store_table, key_list), strict=True):
            state[(store_table, key)] = row
    writes: dict[str, dict[str, Image | None]] = {}
    out: list[Event] = []
    for event, plan in zip(events, plans, strict=True):
        if plan is None:
            out.append(event)
            continue
        change = plan.event
        stored = state.get((plan.store_table, plan.old_key))
        sequence = change.source.sequence or None  # as the sink's ordering: an empty one is none
        stored_sequence = stored.get(SEQUENCE_FIELD) if stored is not None else None
        if sequence is not None and isinstance(stored_sequence, str) and stored_sequence > sequence:
            # a replay of a change the store has moved past: the image is of a later version
            before = change.before
            after = _fill(change.after, before)
            out.append(event if after is change.after else replace(change, after=after))
            continue
        same = sequence is not None and stored_sequence == sequence  # maybe its own after-image
        before = change.before if same else _fill(change.before, stored)
        after = _fill(change.after, before, stored)
        pending = writes.setdefault(plan.store_table, {})
        if change.op is Operation.DELETE or after is None:
            state[(plan.store_table, plan.old_key)] = pending[plan.old_key] = None
        else:
            new_key = plan.new_key or plan.old_key
            if new_key != plan.old_key:
                state[(plan.store_table, plan.old_key)] = pending[plan.old_key] = None
            image = _known(after)
            if sequence is not None:
                image[SEQUENCE_FIELD] = sequence
            pending.pop(new_key, None)  # keep write order = event order
            state[(plan.store_table, new_key)] = pending[new_key] = image
        if before is change.before and after is change.after:
            out.append(event)
        else:
            out.append(replace(change, before=before, after=after))
    for store_table, rows in writes.items():
        if rows:
            store.put_rows(store_table, rows)
    return out
