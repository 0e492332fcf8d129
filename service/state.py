"""Redis-backed implementations of the decoder metadata store and the row-state store.

Both use the synchronous redis client (calls are short; the Kafka consumer runs in its own
thread) with an in-process cache, and turn every Redis failure into
:class:`~transforms.errors.StateStoreError` so the worker retries instead of dead-lettering.

Decoder metadata has its source of truth in the metadata log (a compacted Kafka topic,
:mod:`service.metadata_log`); :class:`LoggedMetadataStore` puts Redis in front of it as the
shared cache, rebuilt from the log when Redis forgets. Row images are a cache only: a lost image
leaves the absent columns of the next partial change unavailable (Debezium's placeholder, or
null named in ``source.unavailable_after``), never filled with a wrong value.

Key layout (``P`` is ``redis.key_prefix``):

* ``P meta:<namespace>:<key>`` → JSON document (no expiry);
* ``P meta-log:<topic>`` → marker: Redis holds the log's documents (missing after a flush);
* ``P row:<table>:<key>`` → tagged JSON row image, ``EX ttl``;
* ``P rowidx:<table>`` → sorted set of keys by last write time (bounds the table's size).

Row images hold Python-typed values (Decimal, date, datetime, time, timedelta, bytes); they
are stored as JSON with small ``{"$t": tag, "v": ...}`` wrappers so they come back typed.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import redis

from transforms.errors import StateStoreError

if TYPE_CHECKING:
    from service.config import RedisConfig
    from service.metadata_log import MetadataLog

logger = logging.getLogger("cdcnorm.state")

__all__ = [
    "CACHE_ONLY_NAMESPACES",
    "LoggedMetadataStore",
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

    def put_if_absent(self, namespace: str, key: str, raw: bytes) -> bool:
        """Store the JSON document ``raw`` unless Redis has the key (``SET NX``); True if stored.

        For writing the log's documents back: a concurrent :meth:`put` of a newer document is
        never overwritten.
        """
        stored: Any = self._redis.call("set", lambda: self._redis.client.set(self._key(namespace, key), raw, nx=True))
        return bool(stored)

    def restore(self, documents: Iterable[tuple[str, str, bytes]], marker: str) -> int | None:
        """Write ``documents`` (namespace, key, JSON) back unless the ``marker`` key exists.

        The marker (``P meta-log:<topic>``, no expiry) is set with them, so it is missing
        exactly when Redis lost its data (``FLUSHALL``, a restart without persistence, a new
        instance). Every document goes in with ``SET NX``: what another replica wrote since
        is kept. Returns how many were written, or None when the marker was there.
        """
        name = f"{self._prefix}{marker}"
        if self._redis.call("exists", lambda: self._redis.client.exists(name)):
            return None
        written = 0
        batch: list[tuple[str, bytes]] = []

        def flush() -> int:
            pipe = self._redis.client.pipeline(transaction=False)
            for key, raw in batch:
                pipe.set(key, raw, nx=True)
            return sum(1 for ok in pipe.execute() if ok)

        for namespace, key, raw in documents:
            batch.append((self._key(namespace, key), raw))
            if len(batch) >= 1000:
                written += self._redis.call("restore", flush)
                batch.clear()
        if batch:
            written += self._redis.call("restore", flush)
        self._redis.call("set", lambda: self._redis.client.set(name, b"1"))
        return written


CACHE_ONLY_NAMESPACES = frozenset({"shareplex-json.update-before"})
"""Metadata namespaces kept in Redis only: a SharePlex ``UPDATE BEFORE`` row waits there for its
``UPDATE AFTER`` (one write and one delete per update pair, gone a moment later). Losing one
gives that update ``before: null``, never a dead letter, so it is not worth a log record."""


class LoggedMetadataStore:
    """:class:`~transforms.metadata.MetadataStore` whose source of truth is the metadata log
    (:class:`service.metadata_log.MetadataLog`), with Redis as the shared cache.

    For every namespace except :data:`CACHE_ONLY_NAMESPACES` (those go to ``redis`` alone):

    * **get**: the log's in-memory copy answers (no Redis, no Kafka call). A key the copy lacks
      is looked up in Redis, then the log is read to its end (:meth:`MetadataLog.sync`) and the
      copy asked again; a document found that way is written back to Redis (``SET NX``). A
      document found only in Redis (written before the log existed) is adopted into the log.
      A key absent from both is re-checked against the log at most every ``resync_after_s``.
    * **put**: the log first (acknowledged), then Redis; a document equal to the copy's is not
      written to the log again. Deleting (``None``) writes a tombstone.
    * **Redis rebuild**: every ``check_interval_s`` the log's thread checks Redis's marker key
      ``P meta-log:<topic>``; when Redis lost it (``FLUSHALL``, a restart without persistence)
      every document of the copy is written back (:meth:`RedisMetadataStore.restore`).

    Until the log is loaded at start-up, get and put raise StateStoreError (the worker retries
    the message; ``/readyz`` says why it is not ready).
    """

    def __init__(
        self,
        log: MetadataLog,
        redis_store: RedisMetadataStore,
        *,
        cache_only: frozenset[str] = CACHE_ONLY_NAMESPACES,
        check_interval_s: float = 2.0,
        resync_after_s: float = 10.0,
        max_absent: int = 10_000,
    ) -> None:
        self.log = log
        self.cache = redis_store
        self._redis = redis_store._redis  # the client /readyz pings
        self._cache_only = cache_only
        self._check_interval = check_interval_s
        self._resync_after = resync_after_s
        self._max_absent = max_absent
        self._absent: OrderedDict[tuple[str, str], float] = OrderedDict()  # key -> when the log last lacked it
        self.marker = f"meta-log:{log.topic}"
        self.restored = 0  # documents written back to Redis by rebuilds
        self.rebuilds = 0
        self._rebuild_failing = False

    def start(self) -> None:
        """Start reading the log (in the background); Redis is rebuilt whenever it lost the marker."""
        self.log.every(self._check_interval, self._rebuild)
        self.log.start()

    def close(self) -> None:
        self.log.close()

    def status(self) -> str | None:
        """None when loaded, else what readiness waits for."""
        return self.log.status()

    def _loading(self) -> StateStoreError:
        return StateStoreError(self.log.status() or f"metadata log {self.log.topic} is not loaded")

    def get(self, namespace: str, key: str) -> Any | None:
        if namespace in self._cache_only:
            return self.cache.get(namespace, key)
        log = self.log
        entry = log.get(namespace, key)
        if entry is not None:
            return entry.value
        if not log.loaded:
            raise self._loading()
        cached = self.cache.get(namespace, key)
        slot = (namespace, key)
        now = time.monotonic()
        if cached is None:
            checked = self._absent.get(slot)
            if checked is not None and now - checked < self._resync_after:
                return None
        log.sync()
        entry = log.get(namespace, key)
        if entry is not None:
            self._absent.pop(slot, None)
            if cached is None and entry.raw is not None:
                self._write_back(namespace, key, entry.raw)
            return entry.value
        if cached is not None:  # in Redis only: written before the log existed
            self.log.write(namespace, key, orjson.dumps(cached), cached)
            logger.info("metadata adopted from Redis into the log namespace=%s key=%s", namespace, key)
            return cached
        self._absent[slot] = now
        self._absent.move_to_end(slot)
        while len(self._absent) > self._max_absent:
            self._absent.popitem(last=False)
        return None

    def put(self, namespace: str, key: str, value: Any) -> None:
        if namespace in self._cache_only:
            self.cache.put(namespace, key, value)
            return
        log = self.log
        if not log.loaded:
            raise self._loading()
        raw = None if value is None else orjson.dumps(value)
        entry = log.get(namespace, key)
        if (entry is None and raw is not None) or (entry is not None and entry.raw != raw):
            log.write(namespace, key, raw, None if raw is None else orjson.loads(raw))
            self._absent.pop((namespace, key), None)
        self.cache.put(namespace, key, value)

    def _write_back(self, namespace: str, key: str, raw: bytes) -> None:
        try:
            self.cache.put_if_absent(namespace, key, raw)
        except StateStoreError as exc:  # a cache write: the log has the document
            logger.debug("metadata write-back to Redis failed namespace=%s key=%s: %s", namespace, key, exc)

    def _rebuild(self) -> None:
        """From the log's thread: write the copy back to Redis if Redis lost the marker."""
        try:
            written = self.cache.restore(self.log.items(), self.marker)
        except StateStoreError as exc:  # Redis down: the worker's own calls report it; say it once
            if not self._rebuild_failing:
                logger.warning("redis metadata cache check failed (retried every %.0fs): %s", self._check_interval, exc)
            self._rebuild_failing = True
            return
        self._rebuild_failing = False
        if written is None:
            return
        self.rebuilds += 1
        self.restored += written
        logger.info(
            "redis metadata cache rebuilt from the log topic=%s documents=%d written=%d",
            self.log.topic, len(self.log), written,
        )

    def clear_cache(self) -> None:
        self.cache.clear_cache()


_PUT_ROWS = """
if redis.replicate_commands then redis.replicate_commands() end
local index, ttl, max_rows = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local prefix, trim_limit = ARGV[3], tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
for i = 2, #KEYS do
  local member, image = ARGV[2 * i + 1], ARGV[2 * i + 2]
  if image == '' then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', index, member)
  else
    redis.call('SET', KEYS[i], image, 'EX', ttl)
    redis.call('ZADD', index, now, member)
  end
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. (now - ttl))
local excess = redis.call('ZCARD', index) - max_rows
if excess <= 0 then return {} end
if excess > trim_limit then excess = trim_limit end
local victims = redis.call('ZRANGE', index, 0, excess - 1)
for _, member in ipairs(victims) do redis.call('DEL', prefix .. member) end
redis.call('ZREMRANGEBYRANK', index, 0, excess - 1)
return victims
"""
"""One put of :class:`RedisRowStateStore`, atomic on the server: write (or delete) the images,
stamp them in the table's index with the server's clock, drop index entries older than the TTL,
then evict the oldest-written images beyond the bound (at most ``trim_limit`` per call)."""

_TRIM_MIN = 1000
"""Least number of images one put may evict beyond the ones it added (a bound lowered by a config
change is reached over several puts instead of in one long script)."""


class RedisRowStateStore:
    """:class:`~transforms.metadata.RowStateStore` on Redis: last full image per table and key.

    Each image expires after ``ttl_seconds``; a table keeps at most ``max_rows_per_table``
    images: those written least recently (by the Redis server's clock, so replicas agree) are
    evicted first. A put is one Lua script (``EVALSHA``): the images, their index entries and
    the eviction change together, so no replica ever sees the table above its bound, and an
    image is never left without its index entry (which would escape the bound). When the bound
    was lowered by a config change, each put evicts at most ``len(rows) + 1000`` images, so the
    table shrinks to the new bound over a few puts.

    A local LRU cache (``max_cached`` images) serves reads for the keys this process wrote or
    read; the images a put evicts leave it too. Call :meth:`clear_cache` after a rebalance.
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
        self._put_script = client.register_script(_PUT_ROWS)
        self.evicted = 0  # images this process evicted to keep a table within its bound

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
        keys = [self._index_key(table)]
        args: list[Any] = [self._ttl, self._max_rows, self._row_key(table, ""), len(rows) + _TRIM_MIN]
        for key, row in rows.items():
            keys.append(self._row_key(table, key))
            args += (key, b"" if row is None else encode_row(row))
        found: Any = self._redis.call("put_rows", lambda: self._put_script(keys=keys, args=args))
        now = time.monotonic()
        for key, row in rows.items():
            if row is None:
                self._cache.pop((table, key), None)
            else:
                self._remember((table, key), row, now)
        if found:
            self.evicted += len(found)
            for victim in found:
                self._cache.pop((table, victim.decode() if isinstance(victim, bytes) else str(victim)), None)

    def _remember(self, slot: tuple[str, str], row: dict[str, Any] | None, now: float) -> None:
        self._cache[slot] = (now, row)
        self._cache.move_to_end(slot)
        while len(self._cache) > self._max_cached:
            self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        self._cache.clear()
