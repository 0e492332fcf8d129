"""Dead-letter records: the original message plus Kafka Connect's error context headers.

A message that cannot be decoded or transformed is written unchanged (key, value, headers) to
the DLQ topic. With ``dlq_context_headers`` (Connect's
``errors.deadletterqueue.context.headers.enable``, on by default here) it carries the headers
Kafka Connect's ``DeadLetterQueueReporter`` adds, in its order and value formats, then
``__cdcnorm.format``:

========================================  =====================================================
``__connect.errors.topic``                source topic
``__connect.errors.partition``            source partition (``-1`` when unknown)
``__connect.errors.offset``               source offset (``-1`` when unknown)
``__connect.errors.connector.name``       ``worker.app_id`` (the consumer group)
``__connect.errors.task.id``              this worker replica: ``<app_id>-<hostname>-<pid>``
                                          (the pod name in Kubernetes), :func:`task_id`
``__connect.errors.stage``                ``VALUE_CONVERTER`` (decoding the message, or writing
                                          the canonical record), ``TRANSFORMATION`` (a chain
                                          step, its predicate included) or ``TASK_PUT``
                                          (anything else, e.g. partial-image completion)
``__connect.errors.class.name``           the class of that stage: the decoder (as configured:
                                          ``auto``'s detector), the transform of the failing
                                          step, ``transforms.envelope.emit`` or the worker's
                                          ``service.app.Normalizer``
``__connect.errors.exception.class.name`` ``module.QualifiedName`` of the exception
``__connect.errors.exception.message``    ``str(exception)``, its first 8000 characters
                                          (empty when it has none; Java writes a null header
                                          then)
``__connect.errors.exception.stacktrace`` the Python traceback (its last 8000 characters)
``__cdcnorm.format``                      the entry's format id
========================================  =====================================================

A bad row of a multi-row message (Canal's ``data[]``, the lines of an Arcion CSV file) is
dead-lettered alone, while the message's other rows are emitted: its dead letter is the whole
original message, with ``__cdcnorm.row.index`` (the row's 0-based index in the message) after
the other headers, always (``dlq_context_headers: false`` included: it tells the dead letters of
one message apart). One message can so have several dead letters, one per bad row.

A message larger than ``worker.max_message_bytes`` is not normalized, and its dead letter cannot
carry it: :func:`oversized_dead_letter` writes a bounded prefix, the sizes and sha256 of the key
and value (``__cdcnorm.oversized.*``) and always the context headers (stage ``KAFKA_CONSUME``),
whose topic, partition and offset say where the original stays. A dead letter too large for its
DLQ topic takes that form too, and when the DLQ topic refuses even that, the smallest form
(:func:`smaller_dead_letters`).

>>> rec = dead_letter(Message(b"v", key=b"k", topic="t", partition=1, offset=7),
...                   ValueError("boom"), LetterContext("dlq", "canal-json", "worker", task="worker-host-1"))
>>> dict(rec.headers)["__connect.errors.offset"], dict(rec.headers)["__connect.errors.task.id"]
(b'7', b'worker-host-1')
"""

from __future__ import annotations

import hashlib
import os
import socket
import traceback
from dataclasses import dataclass, replace
from functools import cache
from types import FrameType, TracebackType

from transforms.compiled import is_extension
from transforms.decoders import Message
from transforms.errors import CdcnormError, DecodeError, TransformError

__all__ = [
    "CONTEXT_HEADERS",
    "ERROR_CLASS",
    "ERROR_CONNECTOR",
    "ERROR_EXECUTING_CLASS",
    "ERROR_MESSAGE",
    "ERROR_OFFSET",
    "ERROR_PARTITION",
    "ERROR_STACKTRACE",
    "ERROR_STAGE",
    "ERROR_TASK_ID",
    "ERROR_TOPIC",
    "FORMAT_HEADER",
    "OVERSIZED_BYTES",
    "OVERSIZED_HEADERS",
    "ROW_INDEX",
    "DeadLetter",
    "LetterContext",
    "OversizedMessageError",
    "RecordTooLargeError",
    "dead_letter",
    "failure_stage",
    "message_bytes",
    "oversized_dead_letter",
    "smaller_dead_letters",
    "task_id",
    "too_large_dead_letter",
]

ERROR_TOPIC = "__connect.errors.topic"
ERROR_PARTITION = "__connect.errors.partition"
ERROR_OFFSET = "__connect.errors.offset"
ERROR_CONNECTOR = "__connect.errors.connector.name"
ERROR_TASK_ID = "__connect.errors.task.id"
ERROR_STAGE = "__connect.errors.stage"
ERROR_EXECUTING_CLASS = "__connect.errors.class.name"
ERROR_CLASS = "__connect.errors.exception.class.name"
ERROR_MESSAGE = "__connect.errors.exception.message"
ERROR_STACKTRACE = "__connect.errors.exception.stacktrace"
FORMAT_HEADER = "__cdcnorm.format"
ROW_INDEX = "__cdcnorm.row.index"
"""The 0-based index of the failed row in its message (the dead letter of one bad row)."""
# in the order DeadLetterQueueReporter.populateContextHeaders adds them
CONTEXT_HEADERS = (
    ERROR_TOPIC,
    ERROR_PARTITION,
    ERROR_OFFSET,
    ERROR_CONNECTOR,
    ERROR_TASK_ID,
    ERROR_STAGE,
    ERROR_EXECUTING_CLASS,
    ERROR_CLASS,
    ERROR_MESSAGE,
    ERROR_STACKTRACE,
)

# what an oversized message's dead letter says about the original (oversized_dead_letter)
OVERSIZED_BYTES = "__cdcnorm.oversized.bytes"
OVERSIZED_LIMIT = "__cdcnorm.oversized.limit"
OVERSIZED_PREFIX = "__cdcnorm.oversized.prefix.bytes"
OVERSIZED_KEY_BYTES = "__cdcnorm.oversized.key.bytes"
OVERSIZED_KEY_SHA256 = "__cdcnorm.oversized.key.sha256"
OVERSIZED_VALUE_BYTES = "__cdcnorm.oversized.value.bytes"
OVERSIZED_VALUE_SHA256 = "__cdcnorm.oversized.value.sha256"
OVERSIZED_HEADERS_DROPPED = "__cdcnorm.oversized.headers.dropped"
OVERSIZED_HEADERS = (
    OVERSIZED_BYTES,
    OVERSIZED_LIMIT,
    OVERSIZED_PREFIX,
    OVERSIZED_KEY_BYTES,
    OVERSIZED_KEY_SHA256,
    OVERSIZED_VALUE_BYTES,
    OVERSIZED_VALUE_SHA256,
    OVERSIZED_HEADERS_DROPPED,
)

# org.apache.kafka.connect.runtime.errors.Stage names
KAFKA_CONSUME = "KAFKA_CONSUME"
KAFKA_PRODUCE = "KAFKA_PRODUCE"
VALUE_CONVERTER = "VALUE_CONVERTER"
TRANSFORMATION = "TRANSFORMATION"
TASK_PUT = "TASK_PUT"
# the canonical-record writer: the output side of cdcnorm's converter
EMIT = "transforms.envelope.emit"
_EMIT_MODULE = "transforms.envelope"

_MAX_TRACE = 8000
_MAX_MESSAGE = 8000  # characters of str(exception) kept (a decoder may quote a whole value)
_BRIEF_MESSAGE = 500  # ... in the smallest form of a dead letter


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record for the DLQ topic."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class LetterContext:
    """What every dead letter of a topic entry is written with, in one object instead of the same
    parameters through every function here: the DLQ topic, the entry's format, the connector
    (``worker.app_id``) and its task id (:func:`task_id` of it when ``None``), whether Connect's
    context headers are added (the entry's ``dlq_context_headers``), and how many bytes of the
    key and value a letter keeps of a message it cannot carry whole (``worker.oversized_prefix_bytes``)."""

    dlq_topic: str
    format_id: str
    connector: str
    prefix_bytes: int = 1024
    context_headers: bool = True
    task: str | None = None


def _with_context(ctx: LetterContext) -> LetterContext:
    """``ctx`` with Connect's context headers on: a letter that cannot carry its message whole
    (too large, oversized) always says where the message stays, whatever the entry asks."""
    return ctx if ctx.context_headers else replace(ctx, context_headers=True)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@cache
def task_id(app_id: str) -> str:
    """This worker replica's identity for ``__connect.errors.task.id``: ``<app_id>-<hostname>-<pid>``.

    Connect writes its task number there; a cdcnorm worker has no task numbers, so the header
    names the replica: in Kubernetes the hostname is the pod name, and the pid tells apart
    workers sharing a host.
    """
    host = socket.gethostname() or "localhost"
    return f"{app_id}-{host}-{os.getpid()}"


def _frames(exc: BaseException) -> list[object]:
    """The ``self`` of each frame between where ``exc`` was caught and where it (or, for an
    exception raised while handling another, its cause) was raised, outermost first.

    A frame of compiled code (:mod:`transforms.compiled`) has no locals, so no ``self``: a frame
    of a compiled decoder's module stands for that decoder (its class, as :func:`failure_stage`
    needs no more of it), the module's other frames are the frames themselves."""
    selves: list[object] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb: TracebackType | None = current.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            owner = frame.f_locals.get("self")
            selves.append(owner if owner is not None else _compiled_decoder(frame) or frame)
            tb = tb.tb_next
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return selves


def _compiled_decoder(frame: FrameType) -> type | None:
    """The decoder class of a frame of compiled code in a module that registers one decoder."""
    if not is_extension(frame.f_globals.get("__file__")):
        return None
    from transforms.decoders import DECODERS

    module = frame.f_globals.get("__name__")
    names = {target.partition(":")[2] for target in DECODERS.values() if target.partition(":")[0] == module}
    cls = frame.f_globals.get(names.pop()) if len(names) == 1 else None
    return cls if isinstance(cls, type) else None


def failure_stage(exc: BaseException) -> tuple[str, str]:
    """Connect's stage name and executing class of the failure ``exc``, from where it was raised.

    The outermost decoder or transform on the way to the failure wins (the decoder a topic entry
    configures, e.g. ``auto``'s detector rather than the format it delegated to, as Connect names
    its configured converter). An exception that was never raised has no frames: its type
    decides (DecodeError: VALUE_CONVERTER, TransformError: TRANSFORMATION, else TASK_PUT).

    >>> failure_stage(TransformError("mask", "bad"))
    ('TRANSFORMATION', 'transforms.smt.base.Transform')
    """
    from transforms.decoders.base import Decoder
    from transforms.smt.base import ChainStep, Transform

    task = ""
    for owner in _frames(exc):
        if isinstance(owner, Decoder):
            return VALUE_CONVERTER, _class_name(type(owner))
        if isinstance(owner, type) and issubclass(owner, Decoder):  # a compiled decoder's frame
            return VALUE_CONVERTER, _class_name(owner)
        if isinstance(owner, ChainStep):
            return TRANSFORMATION, _class_name(type(owner.transform))
        if isinstance(owner, Transform):
            return TRANSFORMATION, _class_name(type(owner))
        if getattr(owner, "f_globals", {}).get("__name__") == _EMIT_MODULE:
            return VALUE_CONVERTER, EMIT
        if not task and not hasattr(owner, "f_globals"):
            task = _class_name(type(owner))
    if isinstance(exc, OversizedMessageError):
        return KAFKA_CONSUME, task or "service.app.Normalizer"
    if isinstance(exc, RecordTooLargeError):
        return KAFKA_PRODUCE, task or "service.batches.BatchProcessor"
    if isinstance(exc, DecodeError):
        return VALUE_CONVERTER, task or _class_name(Decoder)
    if isinstance(exc, TransformError):
        return TRANSFORMATION, task or _class_name(Transform)
    return TASK_PUT, task or "service.app.Normalizer"


def dead_letter(message: Message, exc: BaseException, ctx: LetterContext, *, brief: bool = False) -> DeadLetter:
    """The DLQ record for ``message`` that failed with ``exc``.

    Without ``ctx.context_headers`` the dead letter is the original record exactly (no ``__connect.errors.*``
    nor ``__cdcnorm.format`` header), as Connect writes it by default. ``brief`` leaves the stack
    trace empty and cuts the exception message to its first 500 characters. A failure of one row
    (a DecodeError whose ``row`` is set) adds :data:`ROW_INDEX` last, with or without context.

    >>> from transforms.errors import DecodeError
    >>> bad = DecodeError("canal-json", "data[7].id", "expected an integer, found 'A101'", row=7)
    >>> ctx = LetterContext("dlq", "canal-json", "w", context_headers=False)
    >>> dead_letter(Message(b"v", topic="t"), bad, ctx).headers
    (('__cdcnorm.row.index', b'7'),)
    """
    row = getattr(exc, "row", None)
    rows: tuple[tuple[str, bytes], ...] = ((ROW_INDEX, str(row).encode()),) if type(row) is int else ()
    if not ctx.context_headers:
        return DeadLetter(ctx.dlq_topic, message.key, message.value, (*message.headers, *rows))
    cls = type(exc)
    stage, executing = failure_stage(exc)
    trace = "" if brief else "".join(traceback.format_exception(exc))[-_MAX_TRACE:]
    context: tuple[tuple[str, bytes], ...] = (
        (ERROR_TOPIC, message.topic.encode()),
        (ERROR_PARTITION, str(message.partition if message.partition is not None else -1).encode()),
        (ERROR_OFFSET, str(message.offset if message.offset is not None else -1).encode()),
        (ERROR_CONNECTOR, ctx.connector.encode()),
        (ERROR_TASK_ID, (ctx.task if ctx.task is not None else task_id(ctx.connector)).encode()),
        (ERROR_STAGE, stage.encode()),
        (ERROR_EXECUTING_CLASS, executing.encode()),
        (ERROR_CLASS, _class_name(cls).encode()),
        (ERROR_MESSAGE, str(exc)[:_BRIEF_MESSAGE if brief else _MAX_MESSAGE].encode("utf-8", "replace")),
        (ERROR_STACKTRACE, trace.encode("utf-8", "replace")),
        (FORMAT_HEADER, ctx.format_id.encode()),
        *rows,
    )
    return DeadLetter(ctx.dlq_topic, message.key, message.value, (*message.headers, *context))


class OversizedMessageError(CdcnormError):
    """A source message is larger than ``worker.max_message_bytes``: it is not normalized.

    >>> str(OversizedMessageError(52428810, 1048576))
    'message of 52428810 bytes (key + value + headers) exceeds worker.max_message_bytes=1048576'
    """

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"message of {size} bytes (key + value + headers) exceeds worker.max_message_bytes={limit}")


class RecordTooLargeError(CdcnormError):
    """A normalized record of a source message is too large for the output: the message is
    dead-lettered instead of its records.

    ``limit`` is the worker's (``worker.max_record_bytes``, checked before producing); without it
    the refusal came from librdkafka or the broker (``error``). ``cap`` is the largest dead letter
    that can be expected to pass: the limit, or less than the refused record.

    >>> str(RecordTooLargeError("p.db.t", 200_000, 131_072))
    'output record of 200000 bytes for topic p.db.t exceeds worker.max_record_bytes=131072 (checked before producing)'
    >>> str(RecordTooLargeError("p.db.t", 200_000, None, "MSG_SIZE_TOO_LARGE: Broker: Message size too large", 131_072))
    'output record of 200000 bytes for topic p.db.t refused: MSG_SIZE_TOO_LARGE: Broker: Message size too large'
    """

    def __init__(self, topic: str, size: int, limit: int | None, error: str | None = None, cap: int | None = None) -> None:
        self.topic = topic
        self.size = size
        self.limit = limit
        self.error = error
        self.cap = cap if cap is not None else (limit if limit is not None else size - 1)
        if error is None:
            reason = f"exceeds worker.max_record_bytes={limit} (checked before producing)"
        else:
            reason = f"refused: {error}"
        super().__init__(f"output record of {size} bytes for topic {topic} {reason}")


RECORD_TOPIC = "__cdcnorm.too_large.topic"
RECORD_BYTES = "__cdcnorm.too_large.bytes"
RECORD_LIMIT = "__cdcnorm.too_large.limit"


def letter_bytes(letter: DeadLetter) -> int:
    """The dead letter's size as a record (:func:`service.output.record_wire_bytes`)."""
    from service.output import record_wire_bytes

    return record_wire_bytes(letter.key, letter.value, letter.headers)


def too_large_dead_letter(message: Message, exc: RecordTooLargeError, ctx: LetterContext) -> DeadLetter:
    """The DLQ record for ``message`` whose normalized record was too large (``exc``).

    It is the message unchanged with Connect's context headers always (``dlq_context_headers:
    false`` included: the reason and the source coordinates are the point; stage
    ``KAFKA_PRODUCE``), then ``__cdcnorm.too_large.topic``, ``.bytes`` and ``.limit`` (when the
    worker's check refused it). When that is larger than ``exc.cap`` (the DLQ topic would refuse
    it too), it takes :func:`oversized_dead_letter`'s form instead: a prefix, sizes and sha256.

    >>> m = Message(b"v" * 100, key=b"k", topic="t", partition=0, offset=5)
    >>> ctx = LetterContext("dlq", "f", "w", prefix_bytes=16, task="w-1")
    >>> h = dict(too_large_dead_letter(m, RecordTooLargeError("o", 70_000, 65_536), ctx).headers)
    >>> h["__connect.errors.stage"], h["__cdcnorm.too_large.bytes"], h["__cdcnorm.too_large.limit"]
    (b'KAFKA_PRODUCE', b'70000', b'65536')
    """
    about = too_large_headers(exc)
    letter = dead_letter(message, exc, _with_context(ctx))
    letter = DeadLetter(letter.topic, letter.key, letter.value, (*letter.headers, *about))
    if letter_bytes(letter) > exc.cap:
        cut = oversized_dead_letter(message, exc, ctx)
        letter = DeadLetter(cut.topic, cut.key, cut.value, (*cut.headers, *about))
    return letter


def too_large_headers(exc: RecordTooLargeError) -> tuple[tuple[str, bytes], ...]:
    """``__cdcnorm.too_large.topic``, ``.bytes`` and (for the worker's check) ``.limit`` of ``exc``."""
    about = [(RECORD_TOPIC, exc.topic.encode()), (RECORD_BYTES, str(exc.size).encode())]
    if exc.limit is not None:
        about.append((RECORD_LIMIT, str(exc.limit).encode()))
    return tuple(about)


def smaller_dead_letters(
    message: Message, exc: BaseException, refused: DeadLetter, limit: int, ctx: LetterContext
) -> list[DeadLetter]:
    """What to send, one after the other, when the DLQ topic refused ``refused`` (``message``'s
    dead letter for ``exc``) for its size: the :func:`oversized_dead_letter` form (a prefix of
    ``ctx.prefix_bytes``, the sizes and sha256, the context headers) unless ``refused`` was already
    that small, then the smallest form: no prefix, no original headers, no stack trace, the
    exception message cut to 500 characters, the sizes and sha256 and the source coordinates
    (always). Each is smaller than the one before. ``limit`` goes to ``__cdcnorm.oversized.limit``
    (the DLQ topic's limit when known, else less than the refused size). A
    :class:`RecordTooLargeError`'s ``__cdcnorm.too_large.*`` headers are kept.

    >>> m = Message(b"x" * 5000, key=b"k", topic="t", partition=0, offset=3)
    >>> exc = RecordTooLargeError("out", 12_000, None, "MSG_SIZE_TOO_LARGE: Broker: Message size too large")
    >>> ctx = LetterContext("dlq", "f", "w", prefix_bytes=16, task="w-1")
    >>> full = too_large_dead_letter(m, exc, ctx)
    >>> [(len(d.value or b""), letter_bytes(d) < letter_bytes(full)) for d in smaller_dead_letters(
    ...     m, exc, full, letter_bytes(full) - 1, ctx)]
    [(16, True), (0, True)]
    """
    about = too_large_headers(exc) if isinstance(exc, RecordTooLargeError) else ()
    out: list[DeadLetter] = []
    size = letter_bytes(refused)
    for prefix, brief in ((ctx.prefix_bytes, False), (0, True)):
        cut = oversized_dead_letter(message, exc, replace(ctx, dlq_topic=refused.topic, prefix_bytes=prefix),
                                    limit=limit, brief=brief)
        letter = DeadLetter(cut.topic, cut.key, cut.value, (*cut.headers, *about))
        smaller = letter_bytes(letter)
        if smaller < size:
            out.append(letter)
            size = smaller
    return out


def _headers_bytes(headers: tuple[tuple[str, bytes], ...]) -> int:
    return sum(len(k) + len(v or b"") for k, v in headers)


def message_bytes(message: Message) -> int:
    """The size of ``message`` that ``worker.max_message_bytes`` bounds: key + value + headers.

    >>> message_bytes(Message(b"12345", key=b"k", headers=(("h", b"v"),)))
    8
    """
    size = len(message.value) if message.value is not None else 0
    if message.key is not None:
        size += len(message.key)
    if message.headers:
        size += _headers_bytes(message.headers)
    return size


def oversized_dead_letter(
    message: Message, exc: BaseException, ctx: LetterContext, *, limit: int | None = None, brief: bool = False
) -> DeadLetter:
    """The DLQ record for a message larger than ``worker.max_message_bytes``.

    It cannot carry the message, so it carries: the first ``ctx.prefix_bytes`` of the key and of the
    value; the original headers when they fit in ``ctx.prefix_bytes`` together (else none, and
    ``__cdcnorm.oversized.headers.dropped`` says how many); Connect's context headers always
    (``dlq_context_headers: false`` included: the source topic, partition and offset are where
    the original stays); then ``__cdcnorm.oversized.*``: the total size, the limit, the prefix
    length, and the size and sha256 of the key and of the value. ``cdcnorm dlq replay`` does not
    replay it (the original must be read from the source topic). For a :class:`RecordTooLargeError`
    whose source message does not fit a dead letter either, the size is the message's and the limit
    the error's ``cap``; for any other failure whose dead letter is too large for its DLQ topic, the
    size is the message's and the limit ``limit`` (the largest dead letter the topic takes).
    ``brief``: see :func:`dead_letter`.

    >>> letter = oversized_dead_letter(Message(b"x" * 3000, key=b"k", topic="t", partition=0, offset=9),
    ...                                OversizedMessageError(3001, 2048), LetterContext("dlq", "canal-json", "w", 4))
    >>> letter.value, dict(letter.headers)["__cdcnorm.oversized.value.bytes"]
    (b'xxxx', b'3000')
    """
    prefix_bytes = ctx.prefix_bytes
    value, key, headers = message.value, message.key, tuple(message.headers)
    kept_headers = headers if _headers_bytes(headers) <= prefix_bytes else ()
    cut = Message(
        None if value is None else value[:prefix_bytes],
        None if key is None else key[:prefix_bytes],
        message.topic, message.partition, message.offset, message.timestamp_ms, kept_headers,
    )
    letter = dead_letter(cut, exc, _with_context(ctx), brief=brief)
    if isinstance(exc, OversizedMessageError):
        size, limit = exc.size, exc.limit if limit is None else limit
    else:
        size = message_bytes(message)
        if limit is None:
            limit = exc.cap if isinstance(exc, RecordTooLargeError) else size - 1
    about: list[tuple[str, bytes]] = [
        (OVERSIZED_BYTES, str(size).encode()),
        (OVERSIZED_LIMIT, str(limit).encode()),
        (OVERSIZED_PREFIX, str(prefix_bytes).encode()),
    ]
    if key is not None:
        about += [
            (OVERSIZED_KEY_BYTES, str(len(key)).encode()),
            (OVERSIZED_KEY_SHA256, hashlib.sha256(key).hexdigest().encode()),
        ]
    if value is not None:
        about += [
            (OVERSIZED_VALUE_BYTES, str(len(value)).encode()),
            (OVERSIZED_VALUE_SHA256, hashlib.sha256(value).hexdigest().encode()),
        ]
    if len(kept_headers) != len(headers):
        about.append((OVERSIZED_HEADERS_DROPPED, str(len(headers)).encode()))
    return DeadLetter(letter.topic, letter.key, letter.value, (*letter.headers, *about))
