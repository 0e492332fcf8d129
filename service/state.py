"""Redis-backed implementations of the decoder metadata store and the row-state store.

Both use the synchronous redis client (calls are short; the Kafka consumer runs in its own
thread) with an in-process cache, and turn every Redis failure into
:class:`~transforms.errors.StateStoreError` so the worker retries instead of dead-lettering.

Key layout (``P`` is ``redis.key_prefix``):

* ``P meta:<namespace>:<key>`` → JSON document (no expiry);
* ``P row:<table>:<key>`` → tagged JSON row image, ``EX ttl``;
* ``P rowidx:<table>`` → sorted set of keys by last write time (bounds the table's size).

Row images hold Python-typed values (Decimal, date, datetime, time, timedelta, bytes); they
are stored as JSON with small ``{"$t": tag, "v": ...}`` wrappers so they come back typed.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import redis

from transforms.errors import StateStoreError

if TYPE_CHECKING:
    from service.config import RedisConfig

__all__ = [
    "RedisMetadataStore",
    "RedisRowStateStore",
    "check_redis",
    "connect_redis",
    "decode_row",
    "encode_row",
    "redis_client",
]

T = TypeVar("T")


def redis_client(url: str, password: str | None = None, socket_timeout_s: float = 2.0, **connection: Any) -> redis.Redis:
    """A synchronous client that fails fast when Redis is down.

    ``connection`` passes more ``redis.Redis`` arguments (``username``, ``ssl_*``); prefer
    :func:`connect_redis`, which takes them all from the config.
    """
    return redis.Redis.from_url(
        url,
        password=password,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        retry_on_timeout=False,
        health_check_interval=30,
        **connection,
    )


def connect_redis(config: RedisConfig) -> redis.Redis:
    """The client for ``config``: AUTH (password, ACL user) and TLS (``rediss://``, CA, client
    certificate) from the config, timeouts that fail fast. Connects lazily, on the first call.
    """
    kwargs = config.client_kwargs()
    password = kwargs.pop("password", None)
    timeout = kwargs.pop("socket_timeout")
    kwargs.pop("socket_connect_timeout", None)
    return redis_client(config.url, password, timeout, **kwargs)


def check_redis(client: redis.Redis, config: RedisConfig) -> None:
    """PING Redis once; StateStoreError that says what to check when it refuses us.

    For a start-up check: a wrong password or CA otherwise only shows as a worker that never
    gets ready. The message names the settings, never their values.
    """
    where = f"Redis at {config.display_url}"
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        user = config.username or "default"
        raise StateStoreError(
            f"{where} rejected the credentials of user {user!r} ({exc}): check redis.username and redis.password"
        ) from None
    except redis.exceptions.NoPermissionError as exc:
        raise StateStoreError(f"{where}: the ACL user may not run PING ({exc})") from None
    except redis.ConnectionError as exc:
        text = str(exc)
        if config.uses_tls and ("ssl" in text.lower() or "certificate" in text.lower()):
            raise StateStoreError(
                f"TLS with {where} failed ({text}): check redis.ssl_cafile, ssl_certfile/ssl_keyfile and ssl_check_hostname"
            ) from None
        raise StateStoreError(f"{where} does not answer: {type(exc).__name__}: {text}") from None
    except redis.RedisError as exc:
        raise StateStoreError(f"{where} failed: {type(exc).__name__}: {exc}") from None


class _RedisCalls:
    """Wraps Redis calls: errors become StateStoreError and are reported to ``on_error``."""

    def __init__(self, client: redis.Redis, on_error: Callable[[str], None] | None) -> None:
        self.client = client
        self._on_error = on_error

    def call(self, operation: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except redis.RedisError as exc:
            if self._on_error is not None:
                self._on_error(operation)
            raise StateStoreError(f"redis {operation} failed: {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- typed JSON


def _tag(value: Any) -> Any:
    if isinstance(value, Decimal):
        return {"$t": "dec", "v": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$t": "b64", "v": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dt.datetime):
        return {"$t": "dt", "v": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$t": "date", "v": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$t": "time", "v": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$t": "td", "v": value // dt.timedelta(microseconds=1)}
    if isinstance(value, tuple | set | frozenset):
        return [_tag(v) for v in value]
    raise TypeError(f"cannot store a {type(value).__name__} in the row state")


_UNTAG: dict[str, Callable[[Any], Any]] = {
    "dec": Decimal,
    "b64": base64.b64decode,
    "dt": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "td": lambda us: dt.timedelta(microseconds=us),
}


def _untag(value: Any) -> Any:
    if isinstance(value, dict):
        tag = value.get("$t")
        if tag is not None and len(value) == 2 and "v" in value:
            return _UNTAG[tag](value["v"])
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value


def encode_row(row: dict[str, Any]) -> bytes:
    """A row image as tagged JSON bytes (types survive :func:`decode_row`).

    >>> decode_row(encode_row({"a": Decimal("1.50"), "d": dt.date(2024, 1, 2)}))
    {'a': Decimal('1.50'), 'd': datetime.date(2024, 1, 2)}
    """
    return orjson.dumps(row, default=_tag, option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS)


def decode_row(raw: bytes) -> dict[str, Any]:
    """The row image stored by :func:`encode_row`."""
    value = _untag(orjson.loads(raw))
    if not isinstance(value, dict):
        raise StateStoreError(f"row state entry is a {type(value).__name__}, expected an object")
    return value


# ----------------------------------------------------------------------------- stores


class RedisMetadataStore:
    """:class:`~transforms.metadata.MetadataStore` on Redis with a short-lived local cache.

    Puts write through; gets are served from the cache for ``cache_ttl_s`` seconds, so a
    document written by another worker replica is seen at the latest after that time (or
    immediately, when this process has never read that key). Misses are not cached.
    """

    def __init__(
        self,
        client: redis.Redis,
        key_prefix: str = "cdcnorm:",
        cache_ttl_s: float = 30.0,
        on_error: Callable[[str], None] | None = None,
        max_cached: int = 10_000,
    ) -> None:
        self._redis = _RedisCalls(client, on_error)
        self._prefix = key_prefix
        self._ttl = cache_ttl_s
        self._max = max_cached
        self._cache: OrderedDict[tuple[str, str], tuple[float, Any]] = OrderedDict()

    def _key(self, namespace: str, key: str) -> str:
        return f"{self._prefix}meta:{namespace}:{key}"

    def get(self, namespace: str, key: str) -> Any | None:
        slot = (namespace, key)
        hit = self._cache.get(slot)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        raw: Any = self._redis.call("get", lambda: self._redis.client.get(self._key(namespace, key)))
        if raw is None:
            self._cache.pop(slot, None)
            return None
        value = orjson.loads(raw)
        self._remember(slot, value, now)
        return value

    def put(self, namespace: str, key: str, value: Any) -> None:
        data = orjson.dumps(value)
        self._redis.call("set", lambda: self._redis.client.set(self._key(namespace, key), data))
        self._remember((namespace, key), value, time.monotonic())

    def _remember(self, slot: tuple[str, str], value: Any, now: float) -> None:
        if self._ttl <= 0:
            return
        self._cache[slot] = (now, value)
        self._cache.move_to_end(slot)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        self._cache.clear()


class RedisRowStateStore:
    """:class:`~transforms.metadata.RowStateStore` on Redis: last full image per table and key.

    Each image expires after ``ttl_seconds``; a table keeps at most ``max_rows_per_table``
    images (the least recently written go first). A local LRU cache serves reads for the keys
    this process wrote or read; call :meth:`clear_cache` after a rebalance.
    """

    def __init__(
        self,
        client: redis.Redis,
        key_prefix: str = "cdcnorm:",
        ttl_seconds: int = 7 * 24 * 3600,
        max_rows_per_table: int = 1_000_000,
        on_error: Callable[[str], None] | None = None,
        max_cached: int = 50_000,
    ) -> None:
        self._redis = _RedisCalls(client, on_error)
        self._prefix = key_prefix
        self._ttl = ttl_seconds
        self._max_rows = max_rows_per_table
        self._max_cached = max_cached
        self._cache: OrderedDict[tuple[str, str], tuple[float, dict[str, Any] | None]] = OrderedDict()

    def _row_key(self, table: str, key: str) -> str:
        return f"{self._prefix}row:{table}:{key}"

    def _index_key(self, table: str) -> str:
        return f"{self._prefix}rowidx:{table}"

    def get_rows(self, table: str, keys: list[str]) -> list[dict[str, Any] | None]:
        now = time.monotonic()
        out: list[dict[str, Any] | None] = [None] * len(keys)
        missing: list[int] = []
        for i, key in enumerate(keys):
            hit = self._cache.get((table, key))
            if hit is not None and now - hit[0] < self._ttl:
                out[i] = hit[1]
            else:
                missing.append(i)
        if missing:
            names = [self._row_key(table, keys[i]) for i in missing]
            raws: Any = self._redis.call("mget", lambda: self._redis.client.mget(names))
            for i, raw in zip(missing, raws, strict=True):
                row = decode_row(raw) if raw is not None else None
                out[i] = row
                if row is not None:
                    self._remember((table, keys[i]), row, now)
        return out

    def put_rows(self, table: str, rows: dict[str, dict[str, Any] | None]) -> None:
        if not rows:
            return
        index = self._index_key(table)
        now_wall = time.time()

        def write() -> None:
            pipe = self._redis.client.pipeline(transaction=False)
            stored: dict[str, float] = {}
            for key, row in rows.items():
                name = self._row_key(table, key)
                if row is None:
                    pipe.delete(name)
                    pipe.zrem(index, key)
                else:
                    pipe.set(name, encode_row(row), ex=self._ttl)
                    stored[key] = now_wall
            if stored:
                pipe.zadd(index, stored)
            pipe.zremrangebyscore(index, "-inf", now_wall - self._ttl)
            pipe.zcard(index)
            size = pipe.execute()[-1]
            excess = int(size) - self._max_rows
            if excess > 0:
                found: Any = self._redis.client.zrange(index, 0, excess - 1)
                victims = [v.decode() if isinstance(v, bytes) else str(v) for v in found]
                if victims:
                    trim = self._redis.client.pipeline(transaction=False)
                    trim.delete(*[self._row_key(table, v) for v in victims])
                    trim.zrem(index, *victims)
                    trim.execute()
                    for v in victims:
                        self._cache.pop((table, v), None)

        self._redis.call("put_rows", write)
        now = time.monotonic()
        for key, row in rows.items():
            if row is None:
                self._cache.pop((table, key), None)
            else:
                self._remember((table, key), row, now)

    def _remember(self, slot: tuple[str, str], row: dict[str, Any] | None, now: float) -> None:
        self._cache[slot] = (now, row)
        self._cache.move_to_end(slot)
        while len(self._cache) > self._max_cached:
            self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        self._cache.clear()
