"""Stores that decoders and the completion step use for state learned from earlier messages.

* :class:`MetadataStore`: JSON documents by namespace and key (the Qlik schema registry,
  Arcion column lists from header lines). In-memory here; Redis-backed in ``service``.
* :class:`RowStateStore`: the last full after-image per table and key, used to complete
  partial images (columns absent from an update).

Implementations raise :class:`~transforms.errors.StateStoreError` when the backend is
unreachable; callers retry rather than dead-letter.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

__all__ = ["InMemoryMetadataStore", "InMemoryRowStateStore", "MetadataStore", "RowStateStore"]


@runtime_checkable
class MetadataStore(Protocol):
    """A key/value store of JSON-compatible documents, grouped by namespace."""

    def get(self, namespace: str, key: str) -> Any | None:
        """The document stored under ``namespace``/``key``, or ``None``."""

    def put(self, namespace: str, key: str, value: Any) -> None:
        """Store a document (JSON-compatible) under ``namespace``/``key``."""


class InMemoryMetadataStore:
    """A process-local :class:`MetadataStore` (the offline CLI and tests)."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], Any] = {}

    def get(self, namespace: str, key: str) -> Any | None:
        return self._data.get((namespace, key))

    def put(self, namespace: str, key: str, value: Any) -> None:
        self._data[(namespace, key)] = value


@runtime_checkable
class RowStateStore(Protocol):
    """The last full row image per table and primary key."""

    def get_rows(self, table: str, keys: list[str]) -> list[dict[str, Any] | None]:
        """The stored images for the given serialized keys, ``None`` where unknown."""

    def put_rows(self, table: str, rows: dict[str, dict[str, Any] | None]) -> None:
        """Store (or, for ``None``, forget) the images of the given serialized keys."""


class InMemoryRowStateStore:
    """A bounded, process-local :class:`RowStateStore`: at most ``max_rows`` images per table,
    the least recently written evicted first (as ``row_state.max_rows_per_table`` in Redis).

    >>> store = InMemoryRowStateStore(max_rows=1)
    >>> store.put_rows("a", {"1": {"id": 1}}); store.put_rows("b", {"1": {"id": 1}})
    >>> store.put_rows("a", {"2": {"id": 2}})
    >>> store.get_rows("a", ["1", "2"]), store.get_rows("b", ["1"])
    ([None, {'id': 2}], [{'id': 1}])
    """

    def __init__(self, max_rows: int = 100_000) -> None:
        self._tables: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self._max_rows = max_rows

    def get_rows(self, table: str, keys: list[str]) -> list[dict[str, Any] | None]:
        rows = self._tables.get(table)
        if rows is None:
            return [None] * len(keys)
        return [rows.get(k) for k in keys]

    def put_rows(self, table: str, rows: dict[str, dict[str, Any] | None]) -> None:
        images = self._tables.get(table)
        if images is None:
            images = self._tables[table] = OrderedDict()
        for key, row in rows.items():
            if row is None:
                images.pop(key, None)
                continue
            images[key] = row
            images.move_to_end(key)
        while len(images) > self._max_rows:
            images.popitem(last=False)
