"""Domain errors of cdcnorm. Every error raised on purpose derives from :class:`CdcnormError`.

Messages say what was expected and what was found; decode errors carry the format id,
the offending field and a short preview of the payload so that a DLQ entry is actionable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = [
    "CdcnormError",
    "ConfigError",
    "DecodeError",
    "DetectionError",
    "MissingExtraError",
    "RequiredColumnError",
    "StateStoreError",
    "TransformError",
    "UnknownSchemaError",
    "caused_by",
    "payload_preview",
]

E = TypeVar("E", bound=BaseException)

_PREVIEW_BYTES = 120


def caused_by(error: E, cause: BaseException) -> E:
    """``error`` with ``cause`` as its ``__cause__``, as ``raise error from cause`` sets it.

    The modules that mypyc compiles (:mod:`transforms.compiled`) write
    ``raise caused_by(error, exc) from exc``: compiled code ignores a raise statement's ``from``
    (mypyc 2.4), which would leave ``exc`` as the error's ``__context__`` only, and its traceback
    saying "During handling of the above exception" instead of "The above exception was the
    direct cause". Setting ``__cause__`` also sets ``__suppress_context__``, as ``from`` does.
    """
    error.__cause__ = cause
    return error


def payload_preview(payload: bytes | str | None, limit: int = _PREVIEW_BYTES) -> str:
    """A short, printable preview of a payload for error messages.

    >>> payload_preview(b'{"a": 1}')
    '{"a": 1}'
    >>> payload_preview(b"x" * 200, limit=5)
    'xxxxx... (200 bytes)'
    """
    if payload is None:
        return "<null>"
    raw = payload.encode("utf-8", "replace") if isinstance(payload, str) else payload
    text = raw[:limit].decode("utf-8", "backslashreplace")
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    if len(raw) > limit:
        text += f"... ({len(raw)} bytes)"
    return text


class CdcnormError(Exception):
    """Base class of every error cdcnorm raises on purpose."""


class ConfigError(CdcnormError):
    """A configuration value is invalid: names the key, the value and the reason."""

    def __init__(self, key: str, value: Any, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"invalid config {key}={value!r}: {reason}")


class DecodeError(CdcnormError):
    """A message could not be decoded by a format decoder.

    >>> str(DecodeError("canal-json", "type", "unknown operation 'MERGE'", b'{"type":"MERGE"}'))
    'canal-json: field \\'type\\': unknown operation \\'MERGE\\' (payload: {"type":"MERGE"})'
    """

    row: int | None
    """Which row of a multi-row message failed (0-based, e.g. Canal's ``data[]`` index); ``None``
    when the message as a whole failed. The message's other rows decode (see
    :meth:`transforms.decoders.base.Decoder.decode_rows`)."""

    def __init__(
        self,
        format_id: str,
        field: str | None,
        reason: str,
        payload: bytes | str | None = None,
        *,
        row: int | None = None,
    ) -> None:
        self.format_id = format_id
        self.field = field
        self.reason = reason
        self.row = row
        self.preview = payload_preview(payload) if payload is not None else None
        where = f"field '{field}': " if field else ""
        tail = f" (payload: {self.preview})" if self.preview is not None else ""
        super().__init__(f"{format_id}: {where}{reason}{tail}")


class RequiredColumnError(DecodeError):
    """A change has no value for a column its schema declares required (NOT NULL)."""

    # its public name, as imported (transforms.envelope re-exports it) and as dead letters name it
    # (``__connect.errors.exception.class.name``), wherever the envelope's code is laid out; held
    # here, not in the compiled envelope_codec, as mypyc ignores a class body's ``__module__``
    __module__ = "transforms.envelope"

    def __init__(self, table: str, column: str, absent: bool, kind: str = "column") -> None:
        what = "is absent from the change" if absent else "is null"
        super().__init__("emit", column, f"{kind} {column!r} of {table} {what}, but its Connect schema is not optional")


class UnknownSchemaError(DecodeError):
    """A data message refers to a schema/metadata entry that has not been seen yet."""


class DetectionError(DecodeError):
    """`auto` could not tell which format a message is in (unknown or ambiguous)."""


class TransformError(CdcnormError):
    """A single-message transform failed on a record."""

    def __init__(self, transform: str, reason: str) -> None:
        self.transform = transform
        self.reason = reason
        super().__init__(f"transform {transform}: {reason}")


class StateStoreError(CdcnormError):
    """The shared state store (e.g. Redis) is unavailable. Retry; never dead-letter for it."""


class MissingExtraError(CdcnormError, ImportError):
    """A part of cdcnorm runs without its optional dependencies: names the pip install that brings them.

    >>> str(MissingExtraError("cdcnorm sink", ["sink"], ["pyspark"]))
    "cdcnorm sink needs pyspark, which is not installed: pip install 'cdcnorm[sink]'"
    """

    def __init__(self, feature: str, extras: Sequence[str], modules: Sequence[str]) -> None:
        self.feature = feature
        self.extras = list(extras)
        self.modules = list(modules)
        self.install = f"pip install 'cdcnorm[{','.join(self.extras)}]'"
        verb = "is" if len(self.modules) == 1 else "are"
        super().__init__(f"{feature} needs {', '.join(self.modules)}, which {verb} not installed: {self.install}")
