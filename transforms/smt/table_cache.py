"""A bounded cache of what a transform derives from an input table (usually a new TableSchema).

Transforms that change columns derive one output :class:`~transforms.connect.TableSchema` per
input table and reuse it, so equal inputs give the *same* output object and the emitter's
schema cache stays effective. The cache is bounded by the table budget
(:mod:`transforms.table_budget`): an entry counts the columns of the tables in its key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from transforms.connect import TableSchema
from transforms.table_budget import TableLru

__all__ = ["DerivedTableCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _key_columns(key: object, _: object) -> int:
    if isinstance(key, TableSchema):
        return len(key.columns)
    if isinstance(key, tuple):
        return sum(len(part.columns) for part in key if isinstance(part, TableSchema))
    return 0


class DerivedTableCache(Generic[K, V]):
    """Memoizes ``build(key)``, least recently used first out past the table budget.

    Errors raised by ``build`` are not cached: the next call raises again.

    >>> cache = DerivedTableCache(lambda k: k * 2)
    >>> cache.get(21)
    42
    """

    def __init__(self, build: Callable[[K], V]) -> None:
        self._build = build
        self._items: TableLru[K, V] = TableLru(_key_columns)

    def get(self, key: K) -> V:
        value = self._items.get(key)
        if value is None:
            value = self._build(key)
            self._items.put(key, value)
        return value

    def __len__(self) -> int:
        return len(self._items)
