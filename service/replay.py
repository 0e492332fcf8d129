"""``cdcnorm dlq replay``: run dead letters through the current config again.

A dead letter holds the original message (key, value, headers) and Kafka Connect's error headers;
``__connect.errors.topic`` names the source topic it came from, and so the ``topics[]`` entry of
the config that handles it. Each one is normalized again exactly as the worker would now
(:meth:`service.app.Normalizer.process`: that entry's decoder, key columns, completion, chain,
emitter, with the worker's Redis state), under its original topic, partition and offset.

* **It succeeds**: its records are produced to their output topics, as the worker produces them
  (keyed, murmur2-partitioned, idempotent producer with ``acks=all``).
* **A row of it still fails** (a dead letter of one bad row of a multi-row message, whose other
  rows were emitted when it was dead-lettered): nothing of it is produced, and it goes back to a
  DLQ as the dead letter of its own row (or of the first row that fails, once its own decodes).
  A replay re-emits the whole message once every row of it decodes: the rows the worker wrote
  before are written again, with the same keys, and the sink's upsert by key absorbs them (as
  it absorbs a message replayed twice, once per dead letter of its bad rows).
* **It still fails**, or cannot be replayed (no ``__connect.errors.topic`` header, or no entry
  of the config handles its topic): it goes back to a DLQ, never lost. A failure goes to its
  entry's ``dlq_topic`` as a fresh dead letter (the new error, the original source coordinates);
  one that cannot be replayed goes back unchanged to the DLQ it was read from. Both carry
  ``__cdcnorm.replay.run`` (this run's id) and ``__cdcnorm.replay.attempts``.

The consumer group (``cdcnorm-dlq-replay`` by default) commits a dead letter's offset only after
everything it turned into was acknowledged by the broker, so a crash or a refused produce
replays it again (at least once; the sink's merge makes duplicates harmless). A run reads every
partition of the DLQ topics from the group's committed offsets until no record came for
``idle_timeout_s``, or until it meets a record this run wrote itself (it stops reading that
partition there: what follows is newer than the run), never by high watermarks.

With ``dry_run`` nothing is produced or committed, and Redis is only read: what decoding would
write there (schemas, row images) stays in memory.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from service.config import PipelineConfig, TopicEntry
from service.dlq import (
    ERROR_CLASS,
    ERROR_MESSAGE,
    ERROR_OFFSET,
    ERROR_PARTITION,
    ERROR_TOPIC,
    OVERSIZED_BYTES,
    ROW_INDEX,
)
from service.tail import CLIENT_LOGGER
from transforms.decoders import Message
from transforms.errors import CdcnormError, StateStoreError
from transforms.metadata import MetadataStore, RowStateStore

__all__ = [
    "DEFAULT_GROUP",
    "REPLAY_ATTEMPTS_HEADER",
    "REPLAY_RUN_HEADER",
    "ReadOnlyMetadata",
    "ReadOnlyRowState",
    "ReplayError",
    "ReplayResult",
    "ReplaySummary",
    "default_dlq_topics",
    "replay_dead_letters",
    "replay_normalizer",
]

DEFAULT_GROUP = "cdcnorm-dlq-replay"
REPLAY_RUN_HEADER = "__cdcnorm.replay.run"
"""The id of the replay run that wrote a record back to a DLQ."""
REPLAY_ATTEMPTS_HEADER = "__cdcnorm.replay.attempts"
"""How many replay runs a dead letter went through."""
_CONTEXT_PREFIXES = ("__connect.errors.", "__cdcnorm.")
_BATCH = 500

log = logging.getLogger("cdcnorm.replay")


class ReplayError(CdcnormError):
    """The run cannot go on (broker, Redis, a refused produce); what was not acknowledged is not committed."""


class ReadOnlyMetadata:
    """A :class:`MetadataStore` that reads through to ``base`` and keeps writes in memory (dry runs)."""

    def __init__(self, base: MetadataStore) -> None:
        self.base = base
        self._written: dict[tuple[str, str], Any] = {}

    def get(self, namespace: str, key: str) -> Any | None:
        slot = (namespace, key)
        return self._written[slot] if slot in self._written else self.base.get(namespace, key)

    def put(self, namespace: str, key: str, value: Any) -> None:
        self._written[(namespace, key)] = value


class ReadOnlyRowState:
    """A :class:`RowStateStore` that reads through to ``base`` and keeps writes in memory (dry runs)."""

    def __init__(self, base: RowStateStore) -> None:
        self.base = base
        self._written: dict[tuple[str, str], dict[str, Any] | None] = {}

    def get_rows(self, table: str, keys: list[str]) -> list[dict[str, Any] | None]:
        stored = self.base.get_rows(table, [k for k in keys if (table, k) not in self._written])
        found = iter(stored)
        return [self._written[(table, k)] if (table, k) in self._written else next(found) for k in keys]

    def put_rows(self, table: str, rows: dict[str, dict[str, Any] | None]) -> None:
        for key, row in rows.items():
            self._written[(table, key)] = row


@dataclass
class ReplayResult:
    """What became of one dead letter: ``replayed`` (or ``would-replay``), ``failed`` or ``unreplayable``."""

    dlq: tuple[str, int, int]
    source: tuple[str, int | None, int | None] | None
    outcome: str
    entry: str | None = None
    topics: dict[str, int] = field(default_factory=dict)
    error_class: str | None = None
    error: str | None = None
    requeued_to: str | None = None

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "dlq": {"topic": self.dlq[0], "partition": self.dlq[1], "offset": self.dlq[2]},
            "source": None if self.source is None else dict(zip(("topic", "partition", "offset"), self.source,
                                                                 strict=True)),
            "entry": self.entry,
            "outcome": self.outcome,
        }
        if self.outcome in ("replayed", "would-replay"):
            doc["topics"] = self.topics
        else:
            doc["error_class"] = self.error_class
            doc["error"] = self.error
            if self.requeued_to is not None:
                doc["requeued_to"] = self.requeued_to
        return orjson.dumps(doc)


@dataclass
class ReplaySummary:
    """Counts of a replay run."""

    dry_run: bool
    read: int = 0
    replayed: int = 0
    failed: int = 0
    unreplayable: int = 0
    records: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def clean(self) -> bool:
        """Every dead letter read was (or would be) replayed."""
        return self.failed == 0 and self.unreplayable == 0

    def add(self, result: ReplayResult) -> None:
        self.read += 1
        if result.outcome in ("replayed", "would-replay"):
            self.replayed += 1
            self.records.update(result.topics)
        elif result.outcome == "failed":
            self.failed += 1
            self.errors[result.error_class or "?"] += 1
        else:
            self.unreplayable += 1

    def describe(self, dlq_topics: Sequence[str]) -> str:
        """One line for people."""
        succeed = "would succeed" if self.dry_run else "replayed"
        fail = "would still fail" if self.dry_run else "failed again and went back to a DLQ"
        records = sum(self.records.values())
        parts = [
            f"{self.replayed} {succeed} ({records} records to {len(self.records)} topics)",
            f"{self.failed} {fail}" + (f" ({_counts(self.errors)})" if self.errors else ""),
        ]
        if self.unreplayable:
            parts.append(f"{self.unreplayable} cannot be replayed" + (" and went back to their DLQ"
                                                                        if not self.dry_run else ""))
        tail = "; dry run: nothing produced, no offset committed" if self.dry_run else ""
        return f"{self.read} dead letters read from {', '.join(dlq_topics)}: {', '.join(parts)}{tail}"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name}: {n}" for name, n in counter.most_common())


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    raw = headers.get(name)
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _msg_headers(msg: Any) -> list[tuple[str, bytes | None]]:
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]


def _int(text: str | None) -> int | None:
    try:
        return None if text is None or int(text) < 0 else int(text)
    except ValueError:
        return None


def _replay_headers(headers: Iterable[tuple[str, bytes | None]], run_id: str, attempts: int) -> list[tuple[str, bytes]]:
    kept = [(k, v if v is not None else b"") for k, v in headers if k not in (REPLAY_RUN_HEADER, REPLAY_ATTEMPTS_HEADER)]
    return [*kept, (REPLAY_RUN_HEADER, run_id.encode()), (REPLAY_ATTEMPTS_HEADER, str(attempts).encode())]


def replay_normalizer(config: PipelineConfig, *, dry_run: bool) -> Any:
    """The worker's :class:`~service.app.Normalizer` over the worker's Redis stores (read-only in a dry run)."""
    from service.app import Normalizer
    from service.state import RedisMetadataStore, RedisRowStateStore, connect_redis

    rc = config.redis
    client = connect_redis(rc)
    metadata: MetadataStore = RedisMetadataStore(client, rc.key_prefix, rc.metadata_cache_ttl_s)
    if dry_run:
        metadata = ReadOnlyMetadata(metadata)
        # a dry run dead-letters nothing: its result lines say what would fail, no "dead-letter" warning
        config = config.model_copy(update={"topics": [e.model_copy(update={"log_errors": False}) for e in config.topics]})

    def row_state(entry: TopicEntry) -> RowStateStore:
        store: RowStateStore = RedisRowStateStore(
            client, rc.key_prefix, entry.row_state.ttl_seconds, entry.row_state.max_rows_per_table
        )
        return ReadOnlyRowState(store) if dry_run else store

    return Normalizer(config, metadata, row_state)


class _Replayer:
    """Turns one dead letter into a result and the records to produce."""

    def __init__(self, config: PipelineConfig, normalizer: Any, run_id: str, dry_run: bool) -> None:
        self.config = config
        self.normalizer = normalizer
        self.run_id = run_id
        self.dry_run = dry_run

    def handle(self, msg: Any) -> tuple[ReplayResult, list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]]]:
        from service.dlq import dead_letter
        from service.worker_types import FatalMessageError

        raw_headers = _msg_headers(msg)
        headers = dict(raw_headers)
        attempts = (_int(_header(headers, REPLAY_ATTEMPTS_HEADER)) or 0) + 1
        where = (msg.topic(), msg.partition(), msg.offset())
        origin = _header(headers, ERROR_TOPIC)
        partition, offset = _int(_header(headers, ERROR_PARTITION)), _int(_header(headers, ERROR_OFFSET))
        runtime = None if origin is None else self.normalizer.runtime_for(origin)
        oversized = _header(headers, OVERSIZED_BYTES)
        if origin is None or runtime is None or oversized is not None:
            if origin is None:
                reason = f"no {ERROR_TOPIC} header: not a dead letter of cdcnorm or Kafka Connect"
            elif oversized is not None:
                reason = (f"an oversized message ({oversized} bytes): the dead letter holds its first bytes only; "
                          f"the original is at {origin}[{partition}]@{offset}")
            else:
                reason = f"no topics[] entry of the config handles source topic {origin!r}"
            result = ReplayResult(where, None if origin is None else (origin, partition, offset), "unreplayable",
                                  error_class="Unreplayable", error=reason)
            if self.dry_run:
                return result, []
            result.requeued_to = msg.topic()
            return result, [(msg.topic(), msg.key(), msg.value(), _replay_headers(raw_headers, self.run_id, attempts))]
        _, ts = msg.timestamp()
        message = Message(
            msg.value(), msg.key(), origin, partition, offset, ts if ts > 0 else None,
            tuple((k, v if v is not None else b"") for k, v in raw_headers if not k.startswith(_CONTEXT_PREFIXES)),
        )
        source = (origin, partition, offset)
        try:
            outcome = self.normalizer.process(message, runtime)
        except StateStoreError as exc:
            raise ReplayError(f"the state store (Redis) is unavailable: {exc}") from exc
        except FatalMessageError as exc:  # errors: fail on the entry: a replay dead-letters it all the same
            cause = exc.__cause__ or exc
            letter = dead_letter(message, cause, runtime.letters)
            dlq = (letter.topic, letter.key, letter.value, letter.headers)
        else:
            dlq = outcome.dlq
            if dlq is None and outcome.row_letters:  # not whole yet: its own row's letter goes back
                own = _header(headers, ROW_INDEX)
                dlq = next((row for row in outcome.row_letters if _header(dict(row[3]), ROW_INDEX) == own),
                           outcome.row_letters[0])
        if dlq is None:
            topics = Counter(self.normalizer.output_topic(r.topic) for r in outcome.records)
            result = ReplayResult(where, source, "would-replay" if self.dry_run else "replayed",
                                  runtime.entry.label, dict(topics))
            if self.dry_run:
                return result, []
            output_topic = self.normalizer.output_topic
            return result, [(output_topic(r.topic), r.key_bytes(), r.value_bytes(), list(r.headers))
                            for r in outcome.records]
        topic, key, value, letter_headers = dlq
        context = dict(letter_headers)
        error_class = _header(context, ERROR_CLASS) or "?"
        result = ReplayResult(where, source, "failed", runtime.entry.label,
                              error_class=error_class.rpartition(".")[2], error=_header(context, ERROR_MESSAGE))
        if self.dry_run:
            return result, []
        result.requeued_to = topic
        return result, [(topic, key, value, _replay_headers(letter_headers, self.run_id, attempts))]


def replay_dead_letters(
    config: PipelineConfig,
    dlq_topics: Sequence[str],
    *,
    dry_run: bool = False,
    group: str = DEFAULT_GROUP,
    idle_timeout_s: float = 5.0,
    max_records: int | None = None,
    connect_timeout_s: float = 10.0,
    normalizer: Any = None,
    on_result: Callable[[ReplayResult], None] | None = None,
) -> ReplaySummary:
    """Replay the dead letters of ``dlq_topics`` (see the module doc); ``on_result`` sees each one.

    ``normalizer`` replaces the Redis-backed :func:`replay_normalizer` (tests). Raises
    :class:`ReplayError` when the broker does not answer, Redis fails or a produce is refused;
    everything acknowledged before stays committed.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

    from service.rdkafka import producer_config
    from service.worker_types import output_message_bytes

    run_id = uuid.uuid4().hex
    summary = ReplaySummary(dry_run)
    settings = config.broker.librdkafka()
    client_log = logging.getLogger(CLIENT_LOGGER)
    consumer = Consumer({**settings, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": False, "logger": client_log})
    producer = None if dry_run else Producer({**producer_config(settings, output_message_bytes(config.worker)), "logger": client_log})
    failed = True
    try:
        try:
            topics = consumer.list_topics(timeout=connect_timeout_s).topics
        except KafkaException as exc:
            raise ReplayError(f"cannot reach the Kafka broker at {config.broker.bootstrap}: {exc.args[0].str()}") from None
        assignment = [TopicPartition(t, p) for t in dlq_topics if t in topics for p in sorted(topics[t].partitions)]
        if not assignment:
            failed = False
            return summary
        committed = committed_when_ready(consumer, assignment, group, connect_timeout_s)
        consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                         for tp in committed])
        replayer = _Replayer(config, normalizer if normalizer is not None else replay_normalizer(config, dry_run=dry_run),
                             run_id, dry_run)
        open_partitions = {(tp.topic, tp.partition) for tp in assignment}
        last_seen = time.monotonic()
        while open_partitions and (max_records is None or summary.read < max_records):
            batch: list[tuple[Any, ReplayResult, list[Any]]] = []
            try:
                while len(batch) < _BATCH and (max_records is None or summary.read + len(batch) < max_records):
                    msg = consumer.poll(0.5)
                    if msg is None:
                        break
                    error = msg.error()
                    if error is not None:
                        if error.fatal():
                            raise ReplayError(f"the Kafka client failed: {error.str()}")
                        continue
                    last_seen = time.monotonic()
                    tp = (msg.topic(), msg.partition())
                    if tp not in open_partitions:
                        continue
                    if _header(dict(_msg_headers(msg)), REPLAY_RUN_HEADER) == run_id:
                        # this run wrote it: everything from here on is newer than the run
                        consumer.pause([TopicPartition(*tp)])
                        open_partitions.discard(tp)
                        continue
                    result, out = replayer.handle(msg)
                    batch.append((msg, result, out))
            finally:  # what was handled before a failure is still produced and committed
                if batch and producer is not None:
                    _produce_and_commit(producer, consumer, [(msg, out) for msg, _, out in batch])
                for _, result, _ in batch:
                    summary.add(result)
                    if on_result is not None:
                        on_result(result)
            if not batch and time.monotonic() - last_seen > idle_timeout_s:
                break
        failed = False
        return summary
    finally:
        client_log.disabled, was = failed, client_log.disabled
        try:
            consumer.close()
            if producer is not None:
                producer.flush(10)
        finally:
            client_log.disabled = was


def _produce_and_commit(producer: Any, consumer: Any, batch: Sequence[tuple[Any, Sequence[Any]]]) -> None:
    """Produce the batch's output, wait for every acknowledgement, then commit the batch's offsets."""
    from confluent_kafka import KafkaException, TopicPartition

    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}: {err.str()}")

    for _, records in batch:
        for topic, key, value, headers in records:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    producer.poll(0.1)
                except KafkaException as exc:  # refused before sending (e.g. a record too large)
                    raise ReplayError(f"produce refused, the batch is not committed (it is replayed next time): "
                                      f"{topic}: {exc.args[0].str()}") from None
    remaining = producer.flush(60)
    if errors or remaining:
        reason = errors[0] if errors else f"{remaining} records not acknowledged within 60 s"
        raise ReplayError(f"produce failed, the batch is not committed (it is replayed next time): {reason}")
    offsets: dict[tuple[str, int], int] = {}
    for msg, _ in batch:
        offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    log.info("replay committed %d dead letters", len(batch), extra={"offsets": {f"{t}[{p}]": o for (t, p), o in
                                                                                  offsets.items()}})


def default_dlq_topics(config: PipelineConfig) -> list[str]:
    """Every entry's DLQ topic, each once, in config order."""
    return list(dict.fromkeys(e.output_dlq_topic(config.topic_prefix) for e in config.topics))


_COORDINATOR_NOT_READY = frozenset({"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"})


def committed_when_ready(consumer: Any, assignment: list[Any], group: str, timeout_s: float) -> list[Any]:
    """The group's committed offsets of ``assignment``. While the group's coordinator is not ready
    (a broker just started loads its offsets topic first; a coordinator moved), asked again until
    ``timeout_s``: librdkafka hands those errors back to ``committed()`` without retrying."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            offsets: list[Any] = consumer.committed(assignment, timeout=max(1.0, deadline - time.monotonic()))
            return offsets
        except KafkaException as exc:
            error = exc.args[0]
            if error.name() in _COORDINATOR_NOT_READY and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            raise ReplayError(f"cannot read the offsets of group {group!r}: {error.str()}") from None
