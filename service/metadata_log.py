"""The durable metadata log: a compacted Kafka topic that is the source of truth of decoder metadata.

Decoders keep what they learn from earlier messages in a :class:`~transforms.metadata.MetadataStore`:
the Qlik Replicate schema registry (table structures from metadata messages, needed to decode
data messages), Arcion column lists from header lines, SharePlex/Maxwell/DTS column facts.
Redis alone forgets them on ``FLUSHALL`` or a restart without persistence, and then every data
message of such a table would be a dead letter. So, the way Kafka Connect keeps its connector
configs and offsets (``KafkaBasedLog`` over ``config.storage.topic``), every write goes first to
a topic with ``cleanup.policy=compact``, and every worker replica keeps the whole topic in
memory:

* **record key**: the JSON array ``[namespace, key]`` (UTF-8); **value**: the document as JSON,
  or a tombstone (``null`` value) when the document is deleted. Compaction keeps the last
  record per key, so the topic stays as small as the metadata itself.
* **start-up**: :meth:`MetadataLog.start` opens the topic (creating it with one partition,
  ``cleanup.policy=compact`` and, on a replicated cluster, ``metadata_log.replication_factor``
  and ``min_insync_replicas`` when it does not exist) and reads it from the beginning in a
  background thread. It is *loaded* once it has read past a **sync marker** it wrote itself
  to every partition (see below), never by high watermarks, which the local broker reports too
  low. Until then :attr:`MetadataLog.loaded` is false.
* **tailing**: the same thread keeps consuming, so every replica's copy follows the other
  replicas' writes within one fetch (``fetch.wait.max.ms`` 100).
* **writes** (:meth:`MetadataLog.write`) are produced with ``acks=all`` (idempotent producer)
  and wait for the acknowledgement; only then the caller updates Redis. A write that is not
  acknowledged within ``timeout_s`` raises :class:`~transforms.errors.StateStoreError`, which
  the worker retries with back-off (the message is neither committed nor dead-lettered).
* **read to the end on demand** (:meth:`MetadataLog.sync`): produce a marker record (key
  ``["__sync__", <replica>]``, null value) to each partition, take its offset from the delivery
  report, and wait until the tailing thread has consumed past it. Everything acknowledged
  before the call sits below the marker, so after ``sync()`` the copy holds every write any
  replica had finished before it. This is exact on any Kafka-protocol broker (no watermarks, no
  idle window) and costs one produce round trip plus one fetch.

Each copied entry remembers its (partition, offset), and an entry is only replaced by a record
at a higher offset, so this process's own writes (applied at once) are never undone by the tail
reading an older record later. A key always lands in the same partition while the partition
count stays the same: do not add partitions to the topic.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from transforms.errors import StateStoreError

__all__ = ["SYNC_NAMESPACE", "Entry", "MetadataLog", "decode_key", "encode_key", "replica_id"]

log = logging.getLogger("cdcnorm.metadata_log")
client_log = logging.getLogger("cdcnorm.metadata_log.client")

SYNC_NAMESPACE = "__sync__"
"""Namespace of the marker records of :meth:`MetadataLog.sync` (tombstones; never copied)."""

_POLL_S = 0.1
_BATCH = 500
_RETRY_MAX_S = 10.0


def encode_key(namespace: str, key: str) -> bytes:
    """The record key of a document: ``["namespace", "key"]`` as compact JSON.

    >>> encode_key("qlik.schema", "6A1F")
    b'["qlik.schema","6A1F"]'
    """
    return orjson.dumps([namespace, key])


def decode_key(raw: bytes | None) -> tuple[str, str] | None:
    """The (namespace, key) of a record key; None for a key this log did not write."""
    if raw is None:
        return None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(parsed, list) and len(parsed) == 2 and all(isinstance(p, str) for p in parsed):
        return parsed[0], parsed[1]
    return None


def replica_id(app_id: str) -> str:
    """This process among the replicas: ``<app_id>-<hostname>-<pid>`` (as the DLQ's task id)."""
    import os

    return f"{app_id}-{socket.gethostname() or 'localhost'}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Entry:
    """The last record of a key in the copy: its document (``raw`` JSON, ``value`` parsed), or
    a deletion (``raw is None``), and where it sits in the topic."""

    partition: int
    offset: int
    raw: bytes | None
    value: Any

    @property
    def deleted(self) -> bool:
        return self.raw is None


class MetadataLog:
    """A compacted topic and this process's copy of it (see the module documentation).

    ``client`` holds the librdkafka connection settings (``BrokerConfig.librdkafka()``). Call
    :meth:`start` once; :meth:`close` at shutdown. :meth:`write` and :meth:`sync` block the
    calling thread for at most ``timeout_s``; :meth:`get` never blocks on Kafka.
    """

    def __init__(
        self,
        client: Mapping[str, Any],
        topic: str,
        *,
        replica: str,
        timeout_s: float = 5.0,
        replication_factor: int = -1,
        min_insync_replicas: int | None = None,
        create: bool = True,
    ) -> None:
        self.topic = topic
        self.replica = replica
        self.timeout_s = timeout_s
        self._client = {k: v for k, v in client.items() if k != "client.id"}
        self._client_id = str(client.get("client.id") or "cdcnorm")
        self._replication_factor = replication_factor
        self._min_insync = min_insync_replicas
        self._create = create
        self._entries: dict[tuple[str, str], Entry] = {}
        self._next: dict[int, int] = {}  # partition -> next offset the tail will read
        self._partitions: list[int] = []
        self._cond = threading.Condition()
        self._produce_lock = threading.Lock()
        self._producer: Any = None
        self._consumer: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._loaded = threading.Event()
        self.error: str | None = None  # the last failure of the tail, while it lasts
        self.records_read = 0
        self.load_seconds: float | None = None
        self._ticks: list[tuple[float, Callable[[], None]]] = []
        self._last_tick: dict[int, float] = {}

    # ------------------------------------------------------------------ status

    @property
    def loaded(self) -> bool:
        """The copy holds everything written before start-up (it is then kept current)."""
        return self._loaded.is_set()

    def wait_loaded(self, timeout_s: float) -> bool:
        return self._loaded.wait(timeout_s)

    def status(self) -> str | None:
        """None once loaded; otherwise why not yet (for ``/readyz``)."""
        if self.loaded:
            return None
        return f"reading metadata log {self.topic}" + (f": {self.error}" if self.error else "")

    def every(self, interval_s: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` from the tail thread every ``interval_s`` once loaded (and right after
        loading); its exceptions are logged, never raised."""
        self._ticks.append((interval_s, fn))

    # ------------------------------------------------------------------ the copy

    def get(self, namespace: str, key: str) -> Entry | None:
        """The copy's last record of the key (a deletion is an entry too), or None."""
        return self._entries.get((namespace, key))

    def items(self) -> Iterator[tuple[str, str, bytes]]:
        """(namespace, key, JSON document) of every live document of the copy."""
        for (namespace, key), entry in list(self._entries.items()):
            if entry.raw is not None:
                yield namespace, key, entry.raw

    def __len__(self) -> int:
        return sum(1 for e in list(self._entries.values()) if e.raw is not None)

    def _apply(self, namespace: str, key: str, entry: Entry) -> None:
        slot = (namespace, key)
        with self._cond:
            current = self._entries.get(slot)
            if current is not None and current.partition == entry.partition and current.offset >= entry.offset:
                return
            self._entries[slot] = entry

    # ------------------------------------------------------------------ writing

    def write(self, namespace: str, key: str, raw: bytes | None, value: Any = None) -> Entry:
        """Append the document ``raw`` (JSON bytes; None deletes) and wait for the acknowledgement.

        The copy has the new entry when this returns. StateStoreError when the broker does not
        acknowledge it within ``timeout_s`` (the record may still be written: writes are
        idempotent, so the caller just writes again).
        """
        if namespace == SYNC_NAMESPACE:
            raise ValueError(f"namespace {SYNC_NAMESPACE!r} is reserved")
        ((partition, offset),) = self._produce([(encode_key(namespace, key), raw, None)], "write")
        entry = Entry(partition, offset, raw, value if raw is not None else None)
        self._apply(namespace, key, entry)
        return entry

    def sync(self, timeout_s: float | None = None) -> None:
        """Return once the copy holds every record acknowledged before this call.

        Writes a marker to every partition and waits until the tail has read past them.
        StateStoreError when that takes longer than ``timeout_s`` (default ``self.timeout_s``).
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        if not self._partitions:
            raise StateStoreError(f"metadata log {self.topic} is not open yet")
        targets = self._markers()
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._passed(targets):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    raise StateStoreError(
                        f"metadata log {self.topic} not read to its end within {timeout:.1f}s"
                        + (f": {self.error}" if self.error else "")
                    )
                self._cond.wait(remaining)

    def _passed(self, targets: Mapping[int, int]) -> bool:
        return all(self._next.get(p, 0) > offset for p, offset in targets.items())

    def _markers(self) -> dict[int, int]:
        key = encode_key(SYNC_NAMESPACE, self.replica)
        done = self._produce([(key, None, p) for p in self._partitions], "sync")
        return dict(done)

    def _produce(self, records: list[tuple[bytes, bytes | None, int | None]], what: str) -> list[tuple[int, int]]:
        """Produce ``records`` (key, value, partition or None) and wait for every acknowledgement."""
        from confluent_kafka import KafkaException

        results: list[Any] = [None] * len(records)

        def report(i: int) -> Callable[[Any, Any], None]:
            def delivered(err: Any, msg: Any) -> None:
                results[i] = err if err is not None else (msg.partition(), msg.offset())

            return delivered

        with self._produce_lock:
            producer = self._ensure_producer()
            try:
                for i, (key, value, partition) in enumerate(records):
                    extra = {} if partition is None else {"partition": partition}
                    producer.produce(self.topic, value, key, on_delivery=report(i), **extra)
            except (KafkaException, BufferError) as exc:
                raise StateStoreError(f"metadata log {what} to {self.topic} refused: {exc}") from exc
            deadline = time.monotonic() + self.timeout_s
            while any(r is None for r in results):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StateStoreError(
                        f"metadata log {what} to {self.topic} not acknowledged within {self.timeout_s:.1f}s"
                    )
                producer.poll(min(remaining, 0.05))
        failed = [r for r in results if not isinstance(r, tuple)]
        if failed:
            raise StateStoreError(f"metadata log {what} to {self.topic} failed: {failed[0]}")
        return list(results)

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(
                {
                    **self._client,
                    "client.id": f"{self._client_id}-metadata-log",
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    "message.timeout.ms": max(1000, int(self.timeout_s * 1000)),
                    "logger": client_log,
                }
            )
        return self._producer

    # ------------------------------------------------------------------ the tail thread

    def start(self) -> None:
        """Open the topic and read it in a background thread (daemon); returns at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"metadata-log-{self.topic}", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the tail and close the clients."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._produce_lock:
            if self._producer is not None:
                self._producer.flush(min(timeout_s, 2.0))
                self._producer = None

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                if self._consumer is None:
                    self._open()
                if not self.loaded:
                    self._load()
                self._tail()
                return
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("metadata log topic=%s: %s; retrying in %.1fs", self.topic, self.error, delay)
                self._close_consumer()
                self._stop.wait(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
        self._close_consumer()

    def _open(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        if self._create:
            self._ensure_topic()
        consumer = Consumer(
            {
                **self._client,
                "client.id": f"{self._client_id}-metadata-log",
                # never joins or commits: assign() only; a group of its own, not the worker's
                "group.id": f"{self._client_id}-metadata-log-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "logger": client_log,
            }
        )
        try:
            found = consumer.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                raise StateStoreError(f"topic {self.topic} not found" + (f": {found.error}" if found else ""))
            partitions = sorted(found.partitions)
            consumer.assign(
                [TopicPartition(self.topic, p, self._next.get(p, OFFSET_BEGINNING)) for p in partitions]
            )
        except BaseException:
            consumer.close()
            raise
        self._partitions = partitions
        self._consumer = consumer

    def _ensure_topic(self) -> None:
        """Create the topic (1 partition, compacted, ``min.insync.replicas`` when given) unless it
        exists; warn when an existing one is not compacted, or needs fewer in-sync replicas than
        asked (where the broker can tell)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

        settings: dict[str, Any] = {**self._client, "client.id": f"{self._client_id}-metadata-log", "logger": client_log}
        admin = AdminClient(settings)
        existing = admin.list_topics(timeout=self.timeout_s).topics
        if self.topic not in existing:
            configs = {"cleanup.policy": "compact"}
            if self._min_insync is not None:
                configs["min.insync.replicas"] = str(self._min_insync)
            for attempt in (configs, {}):
                new = NewTopic(self.topic, num_partitions=1, replication_factor=self._replication_factor, config=attempt)
                try:
                    admin.create_topics([new], operation_timeout=self.timeout_s)[self.topic].result(self.timeout_s)
                    log.info("created metadata log topic=%s partitions=1 config=%s", self.topic, attempt)
                    return
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    name = getattr(error, "name", lambda: "")()
                    if name == "TOPIC_ALREADY_EXISTS":
                        return
                    if attempt and name in ("INVALID_CONFIG", "POLICY_VIOLATION", "UNSUPPORTED_VERSION"):
                        log.warning("metadata log topic=%s: the broker refused the config %s (%s); "
                                    "creating it without", self.topic, attempt, exc)
                        continue
                    raise
            return
        try:
            resource = ConfigResource("topic", self.topic)
            described = admin.describe_configs([resource])[resource].result(self.timeout_s)
            policy = described.get("cleanup.policy")
            if policy is not None and "compact" not in str(policy.value):
                log.warning("metadata log topic=%s has cleanup.policy=%s: set it to compact, or old metadata "
                            "is deleted with the segments", self.topic, policy.value)
            insync = described.get("min.insync.replicas")
            if self._min_insync is not None and insync is not None and str(insync.value).isdigit() \
                    and int(insync.value) < self._min_insync:
                log.warning("metadata log topic=%s has min.insync.replicas=%s, below metadata_log.min_insync_replicas=%d "
                            "(set only when the worker creates it): alter the topic", self.topic, insync.value,
                            self._min_insync)
        except Exception as exc:  # a broker without DescribeConfigs, or no permission: not fatal
            log.debug("metadata log topic=%s: cannot describe its config: %s", self.topic, exc)

    def _load(self) -> None:
        started = time.monotonic()
        targets = self._markers()
        deadline = started + max(self.timeout_s, 30.0)
        while not self._passed(targets):
            if self._stop.is_set():
                return
            if time.monotonic() > deadline:
                raise StateStoreError(f"not read to the markers {targets} within {deadline - started:.0f}s")
            self._poll()
        self.load_seconds = time.monotonic() - started
        self.error = None
        self._loaded.set()
        log.info("metadata log loaded topic=%s documents=%d records=%d seconds=%.2f",
                 self.topic, len(self), self.records_read, self.load_seconds)
        self._run_ticks(force=True)

    def _tail(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._run_ticks()

    def _poll(self) -> None:
        messages = self._consumer.consume(_BATCH, _POLL_S)
        if not messages:
            return
        advanced = False
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.fatal() or (not err.retriable() and err.name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION")):
                    raise StateStoreError(f"consuming {self.topic}: {err}")
                log.debug("metadata log topic=%s consumer error: %s", self.topic, err)
                continue
            partition, offset = msg.partition(), msg.offset()
            slot = decode_key(msg.key())
            if slot is not None and slot[0] != SYNC_NAMESPACE:
                raw = msg.value()
                value: Any = None
                if raw is not None:
                    try:
                        value = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        log.warning("metadata log topic=%s partition=%d offset=%d: value is not JSON; skipped",
                                    self.topic, partition, offset)
                        slot = None
                if slot is not None:
                    self._apply(slot[0], slot[1], Entry(partition, offset, raw, value))
            elif slot is None:
                log.warning("metadata log topic=%s partition=%d offset=%d: not a [namespace, key] record; skipped",
                            self.topic, partition, offset)
            self._next[partition] = offset + 1
            self.records_read += 1
            advanced = True
        if advanced:
            with self._cond:
                self._cond.notify_all()

    def _run_ticks(self, force: bool = False) -> None:
        now = time.monotonic()
        for i, (interval, fn) in enumerate(self._ticks):
            if not force and now - self._last_tick.get(i, 0.0) < interval:
                continue
            self._last_tick[i] = now
            try:
                fn()
            except Exception as exc:
                log.warning("metadata log topic=%s: periodic task failed: %s", self.topic, exc)

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception as exc:  # pragma: no cover - closing a broken client
                log.debug("closing the metadata log consumer: %s", exc)
