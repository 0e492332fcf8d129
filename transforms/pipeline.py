"""Decode → transform chain → emit: the per-message work shared by the CLI and the service."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mypy_extensions import mypyc_attr

from transforms.decoders import Decoded, Decoder, Message
from transforms.envelope import ChangeEvent, EmitOptions, Event, OutRecord, emit
from transforms.errors import DecodeError
from transforms.frozen import reduce_frozen
from transforms.smt.base import TransformChain

__all__ = ["Pipeline", "Processed"]


@dataclass(slots=True)
class Processed:
    """What one message turned into: the records of its rows that decoded, and one DecodeError
    per row that did not (its ``row`` says which; see :meth:`Pipeline.process_rows`)."""

    records: list[OutRecord]
    row_errors: list[DecodeError]

    def __init__(self, records: list[OutRecord], row_errors: list[DecodeError]) -> None:
        self.records = records  # written out: compiled (see transforms.envelope_model)
        self.row_errors = row_errors

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_frozen(self)  # copy and pickle work compiled too (transforms.frozen)


@mypyc_attr(allow_interpreted_subclasses=True)  # the worker's ServicePipeline
class Pipeline:
    """Runs one message through a decoder, optional key overrides, a chain, and the emitter.

    ``key_overrides`` maps ``db.table`` (or ``table``) to the key columns to use for that table,
    like Debezium's ``message.key.columns``. A subclass adds steps between the key overrides and
    the chain by overriding :meth:`before_chain` (the worker's ``ServicePipeline`` does).

    :meth:`process` is all or nothing; :meth:`process_rows` (what the worker and ``cdcnorm
    transform`` run) emits the rows of a multi-row message that decode and reports each row that
    does not, so a bad value loses only its own row.
    """

    def __init__(
        self,
        decoder: Decoder,
        emit_options: EmitOptions,
        chain: TransformChain | None = None,
        key_overrides: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.decoder = decoder
        self.emit_options = emit_options
        self.chain = chain or TransformChain()
        self.key_overrides = dict(key_overrides or {})
        # whether _decoded may let the decoder encode images for the emitter itself
        # (ChangeEvent.encoded): only where nothing between them reads or changes a value (no key
        # overrides, no chain, and a before_chain hook that only drops events); a subclass whose
        # hook reads values sets it False
        self.direct_emit = True

    def events(self, message: Message) -> list[Event]:
        """Decoded events after key overrides and the chain (before serialization); a bad row
        fails the message."""
        return self._transformed(self.decoder.decode_safely(message))

    def process(self, message: Message) -> list[OutRecord]:
        """The message's records; a bad row fails the message (its DecodeError is raised)."""
        return emit(self._transformed(self._decoded(message).strict()), self.emit_options)

    def process_rows(self, message: Message) -> Processed:
        """The records of the message's rows that decode, and an error per row that does not.

        The rows that decode go through the key overrides, the chain and the emitter as in
        :meth:`process`. A failure of the message as a whole (its envelope, a transform, the
        emitter) is raised, as by :meth:`process`.
        """
        decoded = self._decoded(message)
        return Processed(emit(self._transformed(decoded.events), self.emit_options), decoded.row_errors)

    def _decoded(self, message: Message) -> Decoded:
        """The decoder's events for the emitter: with nothing between them that reads a value,
        the decoder may hand over images already in Connect JSON form (ChangeEvent.encoded)."""
        decoder = self.decoder
        if not (self.direct_emit and not self.chain.steps and not self.key_overrides):
            return decoder.decode_rows_safely(message)
        decoder.emit_direct = self.emit_options.decimal_mode
        try:
            return decoder.decode_rows_safely(message)
        finally:
            decoder.emit_direct = None

    def before_chain(self, events: list[Event]) -> list[Event]:
        """Hook between the key overrides and the chain: the events the chain gets (here unchanged)."""
        return events

    def _transformed(self, events: list[Event]) -> list[Event]:
        if self.key_overrides:
            events = [self._override_key(e) for e in events]
        events = self.before_chain(events)
        if self.chain.steps:
            events = self.chain.apply(events)
        return events

    def _override_key(self, event: Event) -> Event:
        if not isinstance(event, ChangeEvent):
            return event
        table = event.table
        key = self.key_overrides.get(f"{table.namespace}.{table.table}") or self.key_overrides.get(table.table)
        if key is None or key == table.key:
            return event
        return replace(event, table=table.with_key(key))
