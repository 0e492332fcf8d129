"""Pipeline's before_chain hook and the worker's ServicePipeline built on it."""

from __future__ import annotations

from pathlib import Path

from service.worker_types import ServicePipeline
from transforms.decoders import Decoder, Message, create_decoder
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    Event,
    SourceInfo,
    TransactionEvent,
    TransactionStatus,
)
from transforms.pipeline import Pipeline
from transforms.smt.registry import build_chain

DELETE = (Path(__file__).parent / "data" / "canal-json" / "seed-delete.txt").read_bytes().splitlines()[0]
BEGIN = TransactionEvent(TransactionStatus.BEGIN, "tx-1", SourceInfo("mysql"))


class WithBoundary(Decoder):
    """A decoder that adds a transaction boundary before the events of the wrapped one."""

    format_id = "with-boundary"

    def __init__(self, decoder: Decoder) -> None:
        super().__init__()
        self.decoder = decoder

    def decode(self, message: Message) -> list[Event]:
        return [BEGIN, *self.decoder.decode_safely(message)]


def test_before_chain_sees_the_overridden_keys_and_feeds_the_chain() -> None:
    seen: list[list[Event]] = []

    class Recording(Pipeline):
        def before_chain(self, events: list[Event]) -> list[Event]:
            seen.append(events)
            return [*events, *events]  # what the hook returns is what the chain gets

    chain = build_chain([{"type": "filter", "ops": ["d"], "filter.type": "include"}])
    pipeline = Recording(create_decoder("canal-json"), EmitOptions(), chain, key_overrides={"tablename": ("shipping_type",)})
    events = pipeline.events(Message(DELETE, topic="t"))
    (hooked,) = seen
    assert [e.table.key for e in hooked if isinstance(e, ChangeEvent)] == [("shipping_type",)]
    assert len(events) == 2 * len(hooked)
    assert Pipeline(create_decoder("canal-json"), EmitOptions()).before_chain(hooked) is hooked


def test_service_pipeline_completes_and_drops_boundaries_before_the_chain() -> None:
    completed: list[list[Event]] = []

    def completion(events: list[Event]) -> list[Event]:
        completed.append(events)
        return events

    decoder = WithBoundary(create_decoder("canal-json"))
    plain = ServicePipeline(decoder, EmitOptions(), completion=completion)
    events = plain.events(Message(DELETE, topic="t"))
    assert completed and completed[0][0] is BEGIN, "completion runs on every decoded event"
    assert events and not any(isinstance(e, TransactionEvent) for e in events)
    with_transactions = ServicePipeline(decoder, EmitOptions(), transactions=True)
    assert with_transactions.events(Message(DELETE, topic="t"))[0] is BEGIN
    assert len(with_transactions.events(Message(DELETE, topic="t"))) == len(events) + 1


def test_images_come_encoded_only_where_nothing_reads_them_before_the_emitter() -> None:
    """ChangeEvent.encoded (decoder-made Connect JSON): not with completion, which merges stored
    typed values into images; with the plain worker pipeline, as with Pipeline."""
    decoder = create_decoder("debezium-json")
    assert Pipeline(decoder, EmitOptions()).direct_emit
    assert ServicePipeline(decoder, EmitOptions(), transactions=True).direct_emit
    assert not ServicePipeline(decoder, EmitOptions(), completion=lambda events: events).direct_emit
