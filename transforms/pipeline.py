"""Decode → transform chain → emit: the per-message work shared by the CLI and the service."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from transforms.decoders import Decoder, Message
from transforms.envelope import ChangeEvent, EmitOptions, Event, OutRecord, emit
from transforms.smt.base import TransformChain

__all__ = ["Pipeline"]


class Pipeline:
    """Runs one message through a decoder, optional key overrides, a chain, and the emitter.

    ``key_overrides`` maps ``db.table`` (or ``table``) to the key columns to use for that table,
    like Debezium's ``message.key.columns``. A subclass adds steps between the key overrides and
    the chain by overriding :meth:`before_chain` (the worker's ``ServicePipeline`` does).
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

    def events(self, message: Message) -> list[Event]:
        """Decoded events after key overrides and the chain (before serialization)."""
        events = self.decoder.decode_safely(message)
        if self.key_overrides:
            events = [self._override_key(e) for e in events]
        events = self.before_chain(events)
        if self.chain.steps:
            events = self.chain.apply(events)
        return events

    def before_chain(self, events: list[Event]) -> list[Event]:
        """Hook between the key overrides and the chain: the events the chain gets (here unchanged)."""
        return events

    def process(self, message: Message) -> list[OutRecord]:
        return emit(self.events(message), self.emit_options)

    def _override_key(self, event: Event) -> Event:
        if not isinstance(event, ChangeEvent):
            return event
        table = event.table
        key = self.key_overrides.get(f"{table.namespace}.{table.table}") or self.key_overrides.get(table.table)
        if key is None or key == table.key:
            return event
        return replace(event, table=table.with_key(key))
