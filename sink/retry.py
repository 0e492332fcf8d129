"""Retrying a micro-batch whose writes failed: which failures are retried, their short reason,
and the back-off between attempts.

A failed attempt leaves the Kafka offsets of its records uncommitted; the next attempt reads them
again and skips what an Iceberg commit already holds (the offsets recorded in each table's
snapshot summary), so a batch that some tables committed before another refused is resumed
where it stopped: nothing lost, nothing applied twice (:meth:`sink.runner.MicroBatchSink.run`).

>>> backoff = Backoff(1.0, 8.0, jitter=0.0)
>>> [backoff.delay(n) for n in range(1, 6)]
[1.0, 2.0, 4.0, 8.0, 8.0]
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from transforms.errors import CdcnormError

__all__ = ["Backoff", "TableWriteError", "describe_failure", "failure_reason", "is_retried"]

# (reason, texts that identify it), first match wins: the file system's refusal before the commit
# exception that may wrap it (a Hadoop-catalog commit wraps its I/O failures in CommitFailedException)
_REASONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("permission-denied", ("Permission denied", "Operation not permitted", "AccessDenied", "Read-only file system")),
    ("no-space", ("No space left on device",)),
    ("commit-conflict", ("CommitFailedException", "ValidationException", "Found conflicting", "ConcurrentCommitError")),
    ("commit-state-unknown", ("CommitStateUnknownException",)),
    ("io", ("IOException", "RuntimeIOException", "FileNotFoundException", "UncheckedIOException")),
)
_JAVA_CHAIN_LIMIT = 16
_DESCRIPTION_CHARS = 300
_EXCEPTION_LINE = re.compile(r"^\s*(?:Caused by: )?([\w$.]+(?:Exception|Error)(?:: .*)?)$", re.MULTILINE)


class TableWriteError(CdcnormError):
    """Writing a table's batch failed in Spark, Iceberg or the file system (the cause is chained):
    nothing of the batch is committed to that table; the sink tries the batch again
    (:func:`is_retried`). Raised by :mod:`sink.iceberg` and :mod:`sink.deleted_keys`."""

    def __init__(self, table: str, cause: BaseException) -> None:
        super().__init__(f"writing table {table} failed: {type(cause).__name__}")
        self.table = table


def is_retried(exc: BaseException) -> bool:
    """Whether a failure of a micro-batch's writes gets another attempt: a failure of a table's
    write (:class:`TableWriteError`), of Spark or Iceberg (py4j, pyspark), of the
    file system, or of the Kafka offset commit. Programming errors (``TypeError``, ...) are not
    retried: they stop the sink."""
    retried: list[type[BaseException]] = [TableWriteError, OSError]
    try:
        from confluent_kafka import KafkaException

        retried.append(KafkaException)
    except ImportError:  # pragma: no cover - the sink extra is installed wherever this runs
        pass
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        retried += [Py4JError, PySparkException]
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, tuple(retried))


def _texts(exc: BaseException) -> list[str]:
    """The exception, its Python causes, and the Java exceptions behind a py4j/pyspark one
    (class name and message, outermost first)."""
    out: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append(f"{type(current).__name__}: {current}")
        origin = getattr(current, "java_exception", None) or getattr(current, "_origin", None)
        for _ in range(_JAVA_CHAIN_LIMIT):
            if origin is None:
                break
            try:
                out.append(f"{origin.getClass().getName()}: {origin.getMessage()}")
                origin = origin.getCause()
            except Exception:  # the JVM is gone: the Python text is all there is
                break
        current = current.__cause__ or current.__context__
    return out


def failure_reason(exc: BaseException) -> str:
    """A short, bounded label for why a write failed (the ``reason`` of
    ``cdcnorm_sink_write_failures_total``).

    >>> failure_reason(OSError("[Errno 1] Operation not permitted: '/wh/t/metadata/x.avro'"))
    'permission-denied'
    >>> failure_reason(RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: Version 4 already exists"))
    'commit-conflict'
    >>> failure_reason(ValueError("boom"))
    'error'
    """
    from confluent_kafka import KafkaException

    text = "\n".join(_texts(exc))
    for reason, needles in _REASONS:
        if any(n in text for n in needles):
            return reason
    if isinstance(exc, KafkaException):
        return "kafka"
    return "error"


def describe_failure(exc: BaseException) -> str:
    """One line saying what failed: the innermost Java exception behind a Spark failure (its
    class and message, where the file system's refusal shows), else the Python exception.

    >>> describe_failure(OSError("[Errno 28] No space left on device"))
    'OSError: [Errno 28] No space left on device'
    """
    texts = _texts(exc)
    java = [t for t in texts if re.match(r"^(java|org|scala|com)\.", t)]
    if not java:
        # a py4j error whose Java side could not be asked: its text holds the stack trace
        found = _EXCEPTION_LINE.findall("\n".join(texts))
        java = [found[-1]] if found else []
    line = java[-1] if java else texts[0]
    line = " ".join(line.split())
    return line if len(line) <= _DESCRIPTION_CHARS else line[: _DESCRIPTION_CHARS - 1] + "…"


@dataclass(frozen=True)
class Backoff:
    """Capped exponential back-off: ``initial`` seconds, doubling up to ``maximum``; each delay is
    shortened by up to ``jitter`` (a fraction) at random, so sinks failing together spread out."""

    initial: float
    maximum: float
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        """The wait after the ``attempt``-th consecutive failure (1-based)."""
        base = min(self.maximum, self.initial * 2 ** min(max(attempt - 1, 0), 62))
        return base * (1.0 - self.jitter * random.random())
