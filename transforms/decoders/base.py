"""The decoder interface: bytes (plus context) in, zero or more canonical events out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from transforms.connect import Column
from transforms.envelope import Event
from transforms.errors import DecodeError
from transforms.jsonio import loads_object
from transforms.metadata import InMemoryMetadataStore, MetadataStore
from transforms.options import FormatOptions
from transforms.values import CoercionError, coerce

__all__ = ["Decoder", "Message"]


@dataclass(frozen=True, slots=True)
class Message:
    """One consumed message: raw bytes plus where it came from."""

    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int | None = None
    offset: int | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class Decoder(ABC):
    """Decodes the messages of one format into canonical events.

    A decoder is configured once (options, metadata store) and then decodes messages; it keeps
    no per-message state of its own beyond what it puts in the metadata store, so any replica
    sharing the store decodes the same message the same way. Every failure is a
    :class:`DecodeError` that names the format and the field.
    """

    format_id: ClassVar[str]
    description: ClassVar[str] = ""
    options_model: ClassVar[type[FormatOptions]] = FormatOptions
    binary: ClassVar[bool] = False

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        self.options = options if options is not None else self.options_model()
        self.metadata: MetadataStore = metadata if metadata is not None else InMemoryMetadataStore()

    @abstractmethod
    def decode(self, message: Message) -> list[Event]:
        """The events in ``message``, in order; ``[]`` for messages that carry no change."""

    # -- helpers for subclasses ------------------------------------------------------

    def error(self, field: str | None, reason: str, payload: bytes | str | None = None) -> DecodeError:
        return DecodeError(self.format_id, field, reason, payload)

    def load_json(self, message: Message) -> dict[str, Any]:
        """The message value parsed as a JSON object, within the configured limits."""
        if message.value is None:
            raise self.error(None, "message has no value")
        return loads_object(
            message.value,
            self.format_id,
            max_bytes=self.options.max_message_bytes,
            max_depth=self.options.max_json_depth,
        )

    def coerce(self, col: Column, raw: Any, field: str, payload: bytes | str | None = None) -> Any:
        """``values.coerce`` with failures turned into a DecodeError naming the field."""
        try:
            return coerce(col, raw)
        except CoercionError as exc:
            raise self.error(field, str(exc), payload) from exc
