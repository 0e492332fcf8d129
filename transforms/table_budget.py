"""The memory budget of per-table state, in columns, shared by the whole process.

Decoders, the emitter and the transforms keep what they learn per table (its schema, row plan,
Connect schemas and their JSON) so that later messages of the table cost nothing to set up. A
database of 100,000 tables must not make them forget it after a fixed number of tables: each of
those caches is bounded by this budget, counted in columns (a table of ``c`` columns weighs
``c + 1``), and evicts its least recently used tables past it.

The service sets it from ``worker.table_cache_columns`` (``cdcnorm transform
--table-cache-columns``); a library user calls :func:`set_table_budget`. Measured by
``python -m bench.table_count``: about 7 KiB per table of 8 columns (about 800 bytes per column
of the budget), so the default of 1,000,000 columns holds about 110,000 such tables in about
0.8 GB (docs/state.md, *Bounded resources*).

>>> set_table_budget(10)
>>> table_budget()
10
>>> set_table_budget(DEFAULT_TABLE_BUDGET)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar, cast

__all__ = [
    "DEFAULT_TABLE_BUDGET",
    "MIN_TABLE_BUDGET",
    "LruCache",
    "TableLru",
    "set_table_budget",
    "table_budget",
    "table_weight",
    "text_columns",
]

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_TABLE_BUDGET = 1_000_000
MIN_TABLE_BUDGET = 1

_budget = [DEFAULT_TABLE_BUDGET]


def set_table_budget(columns: object) -> None:
    """Bound every per-table cache of this process by ``columns`` (see the module doc)."""
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < MIN_TABLE_BUDGET:
        raise ValueError(
            f"the table cache budget must be a whole number of columns >= {MIN_TABLE_BUDGET}, not {columns!r}"
        )
    _budget[0] = columns


def table_budget() -> int:
    """The budget in columns that every per-table cache respects."""
    return _budget[0]


TEXT_BYTES_PER_COLUMN = 64


def text_columns(text: bytes | str) -> int:
    """The columns a cached schema text counts for: one per 64 bytes (a column's JSON schema is
    50-120 bytes), so hostile large texts are bounded by the budget too."""
    return len(text) // TEXT_BYTES_PER_COLUMN


def table_weight(columns: int) -> int:
    """The weight of a table of ``columns`` columns in the budget."""
    return columns + 1


class LruCache(Generic[K, V]):
    """A mapping bounded by entry count and total weight, evicting the least recently used.

    Recency is kept the way CLOCK (second chance) keeps it: a hit marks its entry used, and
    eviction walks the entries from the oldest insert, giving a used one another round (unmarked,
    put back at the end) and evicting the first unused. A hit so writes one flag instead of
    moving the entry in the order (the order's links of 10,000 tables are memory a hit would
    otherwise touch), and the entries evicted are the ones not used since their last round.

    >>> cache = LruCache[str, int](max_entries=2)
    >>> cache.put("a", 1); cache.put("b", 2)
    >>> cache.get("a")
    1
    >>> cache.put("c", 3)  # b was not used since it was put, a was: b goes
    >>> cache.get("b") is None, cache.get("a"), cache.get("c")
    (True, 1, 3)
    """

    def __init__(
        self,
        max_entries: int | None = 1024,
        max_weight: int | None = None,
        weigh: Callable[[K, V], int] | None = None,
    ) -> None:
        # key -> [value, weight, used since its last round]
        self._items: OrderedDict[K, list[object]] = OrderedDict()
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
        item[2] = True
        return cast(V, item[0])

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``; the first time, ``make()`` put under it (a failure puts nothing).
        With ``make`` returning the key itself, the cache interns equal values."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def _limit(self) -> int | None:
        return self._max_weight

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(key, value) if self._weigh is not None else 1
        limit = self._limit()
        if limit is not None and weight > limit:
            return  # larger than the whole budget: not cached
        items = self._items
        old = items.pop(key, None)
        if old is not None:
            self._weight -= cast(int, old[1])
        new: list[object] = [value, weight, False]
        items[key] = new
        self._weight += weight
        max_entries = self._max_entries
        while (max_entries is not None and len(items) > max_entries) or (limit is not None and self._weight > limit):
            oldest, item = items.popitem(last=False)
            if item is new or item[2]:  # the entry being put, or one used since its last round
                item[2] = False
                items[oldest] = item  # another round
                if len(items) == 1:
                    break
            else:
                self._weight -= cast(int, item[1])

    @property
    def weight(self) -> int:
        """The total weight of the entries."""
        return self._weight


class TableLru(LruCache[K, V]):
    """Per-table state: bounded by the table budget (columns, :mod:`transforms.table_budget`),
    read at every insert, so a budget set after the cache was made applies to it.

    ``columns(key, value)`` is the number of columns an entry describes (it weighs one more).

    >>> from transforms.table_budget import set_table_budget, DEFAULT_TABLE_BUDGET
    >>> set_table_budget(6)
    >>> cache = TableLru[str, int](lambda key, value: value)
    >>> cache.put("a", 2); cache.put("b", 2); cache.put("c", 2)
    >>> cache.get("a") is None, cache.get("c"), cache.weight
    (True, 2, 6)
    >>> set_table_budget(DEFAULT_TABLE_BUDGET)
    """

    def __init__(self, columns: Callable[[K, V], int], max_entries: int | None = None) -> None:
        super().__init__(max_entries, None, lambda key, value: table_weight(columns(key, value)))

    def _limit(self) -> int | None:
        return table_budget()
