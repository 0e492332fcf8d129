"""Bounded caches of what decoders learn from messages (parsed schemas, table structures).

Decoders cache by content that hostile input controls (a Connect schema, an Avro schema text, a
table's columns), so every cache is bounded by a total weight and evicts the least recently used
entries first. Per-table state (:class:`TableLru`, :class:`TableCache`) is bounded by the
process's table budget in columns (:mod:`transforms.table_budget`), not by a count of tables that
a real database exceeds; small value caches keep an entry count.

>>> cache = LruCache[str, int](max_entries=2)
>>> cache.put("a", 1); cache.put("b", 2); cache.put("c", 3)
>>> cache.get("a") is None, cache.get("c")
(True, 3)
"""

from __future__ import annotations

from transforms.connect import TableSchema
from transforms.table_budget import LruCache, TableLru

__all__ = ["LruCache", "TableCache", "TableLru"]


class TableCache:
    """Interns table structures: equal :class:`TableSchema` values share one instance, so the
    emitter's per-table caches hit. Bounded by the table budget (columns)."""

    def __init__(self) -> None:
        self._tables: TableLru[TableSchema, TableSchema] = TableLru(lambda table, _: len(table.columns))

    def intern(self, table: TableSchema) -> TableSchema:
        """The cached instance equal to ``table`` (``table`` itself the first time)."""
        return self._tables.get_or_make(table, lambda: table)
