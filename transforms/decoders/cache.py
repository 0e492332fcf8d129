"""Bounded caches of what decoders learn from messages (parsed schemas, table structures).

Decoders cache by content that hostile input controls (a Connect schema, an Avro schema text, a
table's columns), so every cache is bounded twice: by entries and by a total weight (bytes of
the key, columns of a table). The least recently used entries go first.

>>> cache = LruCache[str, int](max_entries=2)
>>> cache.put("a", 1); cache.put("b", 2); cache.put("c", 3)
>>> cache.get("a") is None, cache.get("c")
(True, 3)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from transforms.connect import TableSchema

__all__ = ["LruCache", "TableCache"]

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A mapping bounded by entry count and total weight, evicting the least recently used."""

    def __init__(
        self, max_entries: int = 1024, max_weight: int | None = None, weigh: Callable[[K, V], int] | None = None
    ) -> None:
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._max_entries = max_entries
        self._max_weight = max_weight
        self._weigh = weigh
        self._weight = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(key, value) if self._weigh is not None else 1
        if self._max_weight is not None and weight > self._max_weight:
            return  # larger than the whole budget: not cached
        old = self._items.pop(key, None)
        if old is not None:
            self._weight -= old[1]
        self._items[key] = (value, weight)
        self._weight += weight
        while len(self._items) > self._max_entries or (
            self._max_weight is not None and self._weight > self._max_weight
        ):
            _, (_, dropped) = self._items.popitem(last=False)
            self._weight -= dropped


class TableCache:
    """Interns table structures: equal :class:`TableSchema` values share one instance, so the
    emitter's per-table caches hit. Bounded by tables and by their total columns."""

    def __init__(self, max_tables: int = 4096, max_columns: int = 200_000) -> None:
        self._tables: LruCache[TableSchema, TableSchema] = LruCache(
            max_tables, max_columns, lambda table, _: len(table.columns) + 1
        )

    def intern(self, table: TableSchema) -> TableSchema:
        """The cached instance equal to ``table`` (``table`` itself the first time)."""
        cached = self._tables.get(table)
        if cached is not None:
            return cached
        self._tables.put(table, table)
        return table
