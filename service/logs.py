"""Log output of every ``cdcnorm`` command: plain text lines or JSON objects, one per line, on stderr.

``cdcnorm --log-format json`` (or ``CDCNORM_LOG_FORMAT=json``) writes each log record as one JSON
object (python-json-logger's orjson formatter, :func:`json_log_formatter`)::

    {"level": "WARNING", "logger": "cdcnorm.worker", "message": "dead-letter ...", "time": "...",
     "topic": "src", "partition": 0, "offset": 41, "format": "canal-json",
     "error_class": "DecodeError", "dlq_topic": "cdcnorm.dlq"}

Fields a call passes as ``extra=`` (topic, partition, offset, error_class, ...) become keys of
the object; an exception becomes ``exception``. Secrets stay scrubbed: the
:class:`~service.config.SecretRedactor` installed for the config scrubs each record's message,
and the JSON formatter scrubs the extra fields and the exception text too, which the redactor
cannot reach (extras are set after a record is built, and the formatter renders exceptions
itself).

>>> import logging, orjson
>>> record = logging.LogRecord("cdcnorm.worker", logging.WARNING, __file__, 1, "dead-letter", None, None)
>>> record.topic = "src"
>>> orjson.loads(json_log_formatter().format(record))["topic"]
'src'
"""

from __future__ import annotations

import logging
import os
import sys
from enum import StrEnum
from typing import Any

__all__ = [
    "LOG_FORMAT_ENV",
    "TEXT_FORMAT",
    "LogFormat",
    "configure_logging",
    "current_log_format",
    "json_log_formatter",
]

LOG_FORMAT_ENV = "CDCNORM_LOG_FORMAT"
"""Environment variable holding the log format (``text`` or ``json``) when ``--log-format`` is not given."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""The text format (also the worker's before JSON logs existed)."""


class LogFormat(StrEnum):
    """How log records are written."""

    TEXT = "text"
    JSON = "json"


_state: dict[str, LogFormat] = {}


def _redact(value: Any) -> Any:
    from service.config import SecretRedactor

    redactor = SecretRedactor._installed
    if redactor is None or not redactor.secrets:
        return value
    return _scrub(value, redactor)


def _scrub(value: Any, redactor: Any) -> Any:
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, dict):
        return {k: _scrub(v, redactor) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, redactor) for v in value]
    return value


def json_log_formatter() -> logging.Formatter:
    """A formatter writing one JSON object per record: ``level``, ``logger``, ``message``,
    ``time`` (UTC, RFC 3339), the record's ``extra`` fields and ``exception``, with secret values
    scrubbed from every string. It is python-json-logger's orjson formatter; ``ImportError``
    (saying what to install) when that package is missing.
    """
    try:
        from pythonjsonlogger.orjson import OrjsonFormatter
    except ImportError as exc:
        raise ImportError("JSON logs need the python-json-logger package: pip install python-json-logger") from exc

    class JsonLogFormatter(OrjsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            scrubbed: dict[str, Any] = _redact(log_data)
            return scrubbed

    return JsonLogFormatter(
        ["levelname", "name", "message"],
        rename_fields={"levelname": "level", "name": "logger", "exc_info": "exception"},
        timestamp="time",
        json_default=str,
    )


def current_log_format() -> LogFormat:
    """The format set by :func:`configure_logging`, else ``$CDCNORM_LOG_FORMAT``, else text.

    An unknown value of the variable raises ``ValueError``.
    """
    chosen = _state.get("format")
    if chosen is not None:
        return chosen
    raw = os.environ.get(LOG_FORMAT_ENV, "").strip().lower()
    try:
        return LogFormat(raw or LogFormat.TEXT)
    except ValueError:
        raise ValueError(f"{LOG_FORMAT_ENV}={raw}: expected text or json") from None


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (as :data:`logging.lastResort`)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr


def configure_logging(level: int | str | None = None, log_format: LogFormat | str | None = None) -> None:
    """Give the root logger one handler on stderr in ``log_format`` (kept for later calls without
    one; default :func:`current_log_format`), and set the root level if ``level`` is given.

    Calling it again (a command after the CLI's global options, the worker after its config is
    read) replaces the handler it installed before, so lines are never doubled; handlers others
    installed stay.
    """
    fmt = LogFormat(log_format) if log_format is not None else current_log_format()
    _state["format"] = fmt
    handler = _StderrHandler()
    handler.setFormatter(json_log_formatter() if fmt is LogFormat.JSON else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        if isinstance(old, _StderrHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    if level is not None:
        root.setLevel(level.upper() if isinstance(level, str) else level)
