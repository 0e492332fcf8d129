"""Dead-letter records: the original message plus Kafka Connect's error context headers.

A message that cannot be decoded or transformed is written unchanged (key, value, headers) to
the DLQ topic with the headers Kafka Connect's ``DeadLetterQueueReporter`` adds when
``errors.deadletterqueue.context.headers.enable=true``, plus ``__cdcnorm.format``.

>>> rec = dead_letter(Message(b"v", key=b"k", topic="t", partition=1, offset=7),
...                   ValueError("boom"), "dlq", "canal-json", "worker")
>>> dict(rec.headers)["__connect.errors.offset"]
b'7'
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from transforms.decoders import Message
from transforms.errors import DecodeError, TransformError

__all__ = [
    "ERROR_CLASS",
    "ERROR_MESSAGE",
    "ERROR_OFFSET",
    "ERROR_PARTITION",
    "ERROR_STACKTRACE",
    "ERROR_TOPIC",
    "FORMAT_HEADER",
    "DeadLetter",
    "dead_letter",
]

ERROR_TOPIC = "__connect.errors.topic"
ERROR_PARTITION = "__connect.errors.partition"
ERROR_OFFSET = "__connect.errors.offset"
ERROR_CLASS = "__connect.errors.exception.class.name"
ERROR_MESSAGE = "__connect.errors.exception.message"
ERROR_STACKTRACE = "__connect.errors.exception.stacktrace"
ERROR_STAGE = "__connect.errors.stage"
ERROR_CONNECTOR = "__connect.errors.connector.name"
FORMAT_HEADER = "__cdcnorm.format"

_MAX_TRACE = 8000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record for the DLQ topic."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def _stage(exc: BaseException) -> str:
    if isinstance(exc, DecodeError):
        return "VALUE_CONVERTER"
    if isinstance(exc, TransformError):
        return "TRANSFORMATION"
    return "TASK_PUT"


def dead_letter(message: Message, exc: BaseException, dlq_topic: str, format_id: str, connector: str) -> DeadLetter:
    """The DLQ record for ``message`` that failed with ``exc``."""
    cls = type(exc)
    trace = "".join(traceback.format_exception(exc))[-_MAX_TRACE:]
    context: tuple[tuple[str, bytes], ...] = (
        (ERROR_TOPIC, message.topic.encode()),
        (ERROR_PARTITION, str(message.partition if message.partition is not None else -1).encode()),
        (ERROR_OFFSET, str(message.offset if message.offset is not None else -1).encode()),
        (ERROR_CONNECTOR, connector.encode()),
        (ERROR_STAGE, _stage(exc).encode()),
        (ERROR_CLASS, f"{cls.__module__}.{cls.__qualname__}".encode()),
        (ERROR_MESSAGE, str(exc).encode("utf-8", "replace")),
        (ERROR_STACKTRACE, trace.encode("utf-8", "replace")),
        (FORMAT_HEADER, format_id.encode()),
    )
    return DeadLetter(dlq_topic, message.key, message.value, (*message.headers, *context))
