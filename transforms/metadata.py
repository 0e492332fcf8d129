"""Stores that decoders and the completion step use for state learned from earlier messages.

* :class:`MetadataStore`: JSON documents by namespace and key (the Qlik schema registry,
  Arcion column lists from header lines, AWS DMS table definitions). In-memory here;
  Redis-backed in ``service``. Each topic entry sees its own part of a shared store
  (:class:`ScopedMetadataStore`).
* :class:`RowStateStore`: the last full after-image per table and key, used to complete
  partial images (columns absent from an update).

Implementations raise :class:`~transforms.errors.StateStoreError` when the backend is
unreachable; callers retry rather than dead-letter.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import orjson

__all__ = [
    "LEGACY_NAMESPACES",
    "InMemoryMetadataStore",
    "InMemoryRowStateStore",
    "MetadataStore",
    "RowStateStore",
    "ScopedMetadataStore",
]

LEGACY_NAMESPACES = frozenset({"qlik.schema"})
"""Namespaces :class:`ScopedMetadataStore` also reads unscoped (documents stored before the scoping)."""


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


class ScopedMetadataStore:
    """One topic entry's view of a :class:`MetadataStore` that several entries share (the worker's
    Redis and metadata log; the one in-memory store of ``cdcnorm transform --config``): every key
    is stored as ``["<scope>", "<key>"]`` (JSON), so what one entry's decoder learns (an Arcion
    header, a DMS table definition, a Qlik schema) never changes how another entry decodes.

    ``legacy``: namespaces whose documents, when the scope has none, are read unscoped too, as
    stores written before the scoping hold them (the Qlik schema registry, whose documents are
    registrations that never change: a data message must not be dead-lettered after an upgrade).
    """

    def __init__(self, store: MetadataStore, scope: str, legacy: frozenset[str] = LEGACY_NAMESPACES) -> None:
        self.store = store
        self.scope = scope
        self.legacy = legacy

    def key(self, key: str) -> str:
        """The key of ``key`` under this scope.

        >>> ScopedMetadataStore(InMemoryMetadataStore(), "cdc.dms").key("t")
        '["cdc.dms","t"]'
        """
        return orjson.dumps([self.scope, key]).decode()

    def get(self, namespace: str, key: str) -> Any | None:
        value = self.store.get(namespace, self.key(key))
        if value is None and namespace in self.legacy:
            return self.store.get(namespace, key)
        return value

    def put(self, namespace: str, key: str, value: Any) -> None:
        self.store.put(namespace, self.key(key), value)


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
