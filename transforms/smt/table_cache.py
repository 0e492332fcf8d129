"""A bounded cache of what a transform derives from an input table (usually a new TableSchema).

Transforms that change columns derive one output :class:`~transforms.connect.TableSchema` per
input table and reuse it, so equal inputs give the *same* output object and the emitter's
schema cache stays effective.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["DerivedTableCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class DerivedTableCache(Generic[K, V]):
    """Memoizes ``build(key)``; cleared when it grows past ``max_size`` entries.

    Errors raised by ``build`` are not cached: the next call raises again.

    >>> cache = DerivedTableCache(lambda k: k * 2)
    >>> cache.get(21)
    42
    """

    def __init__(self, build: Callable[[K], V], max_size: int = 4096) -> None:
        self._build = build
        self._max_size = max_size
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V:
        try:
            return self._items[key]
        except KeyError:
            pass
        value = self._build(key)
        if len(self._items) >= self._max_size:
            self._items.clear()
        self._items[key] = value
        return value

    def __len__(self) -> int:
        return len(self._items)
