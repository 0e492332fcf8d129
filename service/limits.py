"""The record size limits the broker enforces: each topic's ``max.message.bytes``, read from it.

Kafka refuses a record batch larger than its topic's ``max.message.bytes`` (the broker's
``message.max.bytes`` unless the topic overrides it) with ``RecordTooLargeException``. The limit
is on the batch, not on the record. The Java producer splits a refused batch and sends its records
again; librdkafka does not: every record of the batch is refused (``MSG_SIZE_TOO_LARGE`` in its
delivery report). With librdkafka's ``batch.size`` (1000000 bytes) above a topic's limit, records
that fit the topic one by one are refused together, and under load all of them. So the worker's
producer sizes its batches to the smallest limit of the topics it writes to
(:class:`service.rdkafka.RdKafkaOutput`), and the worker sizes its dead letters to their DLQ
topic's limit (:class:`service.batches.BatchProcessor`); both ask :class:`TopicLimits`.

The limits are read with DescribeConfigs (the ``DESCRIBE_CONFIGS`` operation on the topics, and on
the cluster for a topic that does not exist yet, whose limit will be the brokers'
``message.max.bytes``). A broker that does not answer (an ACL, a broker that keeps no topic
configs such as Tansu) leaves the limit unknown: the worker then goes by its own settings
(``worker.max_record_bytes``) and asks again a minute later. The broker stays the authority: a
limit raised while the worker runs takes effect at once, a limit lowered shows as a refusal,
after which the worker reads it again (:meth:`TopicLimits.forget`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BATCH_HEADER_BYTES", "TopicLimits", "session_timeout_refusal"]

log = logging.getLogger(__name__)

BATCH_HEADER_BYTES = 61
"""The header of a v2 record batch (base offset, length, leader epoch, magic, CRC, attributes,
offset delta, timestamps, producer id and epoch, base sequence, record count). The broker compares
the whole batch with ``max.message.bytes``: a record alone in a batch fits when its size (at most
:func:`service.output.record_wire_bytes`) plus this is not larger."""

TOPIC_LIMIT = "max.message.bytes"
BROKER_LIMIT = "message.max.bytes"
MIN_SESSION = "group.min.session.timeout.ms"
MAX_SESSION = "group.max.session.timeout.ms"


class TopicLimits:
    """Each topic's ``max.message.bytes`` as the broker describes it, asked once and cached.

    ``client`` holds the librdkafka connection settings (``BrokerConfig.librdkafka()``). A lookup
    that fails is not repeated for ``retry_s``; meanwhile the topic's limit is unknown (None).
    """

    def __init__(self, client: Mapping[str, Any], *, timeout_s: float = 10.0, retry_s: float = 60.0) -> None:
        self._client = dict(client)
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._admin: Any = None
        self._known: dict[str, int] = {}
        self._failed: dict[str, float] = {}  # topic -> when its lookup failed (monotonic)
        self._warned: set[str] = set()

    def get(self, topic: str) -> int | None:
        """``topic``'s ``max.message.bytes`` when known."""
        return self._known.get(topic)

    def forget(self, topic: str) -> None:
        """Ask the broker again at the next :meth:`learn` (``topic`` refused a record: its limit
        may have been lowered)."""
        self._known.pop(topic, None)
        self._failed.pop(topic, None)

    async def learn(self, topics: Iterable[str]) -> dict[str, int | None]:
        """The ``max.message.bytes`` of each of ``topics``: from the cache, or asked of the broker
        in one DescribeConfigs request (None when it cannot tell)."""
        wanted = list(dict.fromkeys(topics))
        now = time.monotonic()
        ask = [t for t in wanted if t not in self._known and now - self._failed.get(t, -self.retry_s) >= self.retry_s]
        if ask:
            try:
                await self._describe(ask)
            except Exception as exc:  # the admin client itself failed: unknown for now
                self._unknown(ask, f"{type(exc).__name__}: {exc}")
        return {t: self._known.get(t) for t in wanted}

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"log_level": 3, **self._client})
        return self._admin

    async def _describe(self, topics: list[str]) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType

        admin = self._admin_client()
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        futures = admin.describe_configs(resources, request_timeout=self.timeout_s)
        missing: list[str] = []
        for resource, future in futures.items():
            topic = resource.name
            try:
                entries = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s + 1)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    missing.append(topic)  # auto-created at the first record, with the brokers' default
                else:
                    self._unknown([topic], f"{error.name()}: {error.str()}")
                continue
            except TimeoutError:
                self._unknown([topic], f"no answer within {self.timeout_s:.0f}s")
                continue
            value = _positive_int(entries.get(TOPIC_LIMIT))
            if value is None:  # e.g. Tansu: it keeps no topic configs (nor enforces this one)
                self._unknown([topic], f"the broker reports no {TOPIC_LIMIT}", logging.INFO)
            else:
                self._set(topic, value)
        if missing:
            default = await self._brokers_default()
            for topic in missing:
                if default is None:
                    self._unknown([topic], f"the topic does not exist and the brokers report no {BROKER_LIMIT}")
                else:
                    self._set(topic, default)

    async def _brokers_default(self) -> int | None:
        """The smallest ``message.max.bytes`` of the brokers: the limit of a topic they create."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        admin = self._admin_client()
        metadata = await asyncio.to_thread(admin.list_topics, timeout=self.timeout_s)
        resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in metadata.brokers]
        if not resources:
            return None
        values: list[int] = []
        for future in admin.describe_configs(resources, request_timeout=self.timeout_s).values():
            try:
                entries = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s + 1)
            except Exception:  # that broker's answer is missing: the others decide
                continue
            value = _positive_int(entries.get(BROKER_LIMIT))
            if value is not None:
                values.append(value)
        return min(values, default=None)

    def _set(self, topic: str, value: int) -> None:
        self._known[topic] = value
        self._failed.pop(topic, None)
        log.debug("topic %s %s=%d (from the broker)", topic, TOPIC_LIMIT, value)

    def _unknown(self, topics: list[str], why: str, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        for topic in topics:
            self._failed[topic] = now
            if topic not in self._warned:
                self._warned.add(topic)
                log.log(
                    level, "cannot read %s of topic %s from the broker (%s): records and batches for it are sized by "
                    "the worker's own limits; asking again every %.0fs",
                    TOPIC_LIMIT, topic, why, self.retry_s, extra={"topic": topic},
                )


def session_timeout_refusal(client: Mapping[str, Any], session_timeout_s: float, key: str,
                            *, timeout_s: float = 10.0) -> str | None:
    """Why the brokers would refuse a consumer group member's session timeout, or None.

    Kafka's group coordinator refuses a JoinGroup whose session timeout lies outside the brokers'
    ``group.min.session.timeout.ms`` (6000 by default) .. ``group.max.session.timeout.ms``
    (1800000) with ``INVALID_SESSION_TIMEOUT``; aiokafka logs that once and the member never joins,
    so the worker would run and consume nothing. Asked of the brokers with DescribeConfigs before
    the worker starts; a broker that does not answer or keeps no such settings (Tansu) gives None,
    as does a timeout within the range. ``key`` names the setting in the message.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"log_level": 3, **client})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
        resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in sorted(metadata.brokers)][:1]
        if not resources:
            return None
        entries = admin.describe_configs(resources, request_timeout=timeout_s)[resources[0]].result(timeout=timeout_s)
    except (KafkaException, TimeoutError, ValueError) as exc:
        log.debug("cannot read the brokers' session timeout bounds: %s", exc)
        return None
    lowest, highest = _positive_int(entries.get(MIN_SESSION)), _positive_int(entries.get(MAX_SESSION))
    ms = round(session_timeout_s * 1000)
    if lowest is not None and ms < lowest:
        return (f"{key}: {session_timeout_s:g} ({ms} ms) is below the brokers' {MIN_SESSION} ({lowest} ms): "
                "the group coordinator refuses the worker's join (INVALID_SESSION_TIMEOUT); "
                f"set it to at least {lowest / 1000:g}")
    if highest is not None and ms > highest:
        return (f"{key}: {session_timeout_s:g} ({ms} ms) is above the brokers' {MAX_SESSION} ({highest} ms): "
                "the group coordinator refuses the worker's join (INVALID_SESSION_TIMEOUT); "
                f"set it to at most {highest / 1000:g}")
    return None


def _positive_int(entry: Any) -> int | None:
    """A config entry's value as a positive integer (bytes, milliseconds); None when unset or not one."""
    if entry is None or entry.value is None:
        return None
    try:
        value = int(entry.value)
    except ValueError:
        return None
    return value if value > 0 else None
