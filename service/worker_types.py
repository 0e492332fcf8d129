"""What the worker's parts share: the output's size limits, an entry's runtime (:class:`EntryRuntime`,
its :class:`ServicePipeline`), what a message became (:class:`Outcome`, its dead letters), the
worker's health (:class:`WorkerState`) and the errors that stop it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.config import (
    TopicEntry,
    WorkerConfig,
)
from service.converters import RecordConverter
from service.dlq import LetterContext
from service.health import Progress
from transforms.decoders import Decoder
from transforms.envelope import EmitOptions, Event, OutRecord, TransactionEvent
from transforms.errors import CdcnormError
from transforms.metadata import RowStateStore
from transforms.pipeline import Pipeline
from transforms.smt.base import TransformChain

__all__ = [
    "BATCH_BYTES",
    "DLQ_HEADROOM_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_POLL_RECORDS",
    "BatchRefusedError",
    "Completion",
    "EntryRuntime",
    "FatalMessageError",
    "Letter",
    "Outcome",
    "ServicePipeline",
    "WorkerState",
    "output_message_bytes",
    "output_record_bytes",
]


Completion = Callable[[list[Event]], list[Event]]


MAX_POLL_RECORDS = 2000
"""Records per fetched batch (over all assigned partitions; at most half of
``worker.max_inflight``): the unit of normalize → send → acknowledge. A batch starts while fewer
than ``max_inflight`` source messages wait for acknowledgements, so one batch is processed while
the one before it is on its way to the broker."""


BATCH_BYTES = 512 * 1024
"""Upper size of one produced record batch (one per output topic-partition and source batch)."""


MAX_MESSAGE_BYTES = 4 * BATCH_BYTES
"""Largest produce request (aiokafka) and record (librdkafka's ``message.max.bytes``), unless
:func:`output_message_bytes` needs more."""


DLQ_HEADROOM_BYTES = 256 * 1024
"""What a dead letter may add to its message: the context headers (a stack trace and an exception
message of at most 8000 characters each)."""


def output_message_bytes(worker: WorkerConfig) -> int:
    """The output producer's record size limit: :data:`MAX_MESSAGE_BYTES`, or more when the dead
    letter of a message of ``worker.max_message_bytes`` (or ``worker.max_record_bytes``) needs it.

    >>> output_message_bytes(WorkerConfig(max_message_bytes=8 * 1024 * 1024))
    8650752
    """
    return max(MAX_MESSAGE_BYTES, worker.max_message_bytes + DLQ_HEADROOM_BYTES, worker.max_record_bytes or 0)


def output_record_bytes(worker: WorkerConfig) -> int:
    """The largest output record the worker produces (:func:`service.output.record_wire_bytes`):
    ``worker.max_record_bytes``, by default the producer's limit (:func:`output_message_bytes`).

    >>> output_record_bytes(WorkerConfig()), output_record_bytes(WorkerConfig(max_record_bytes=100_000))
    (2097152, 100000)
    """
    return worker.max_record_bytes or output_message_bytes(worker)


class FatalMessageError(CdcnormError):
    """A message failed under ``errors: fail``; the worker stops without committing it."""


class BatchRefusedError(CdcnormError, RuntimeError):
    """The broker refused normalized records that fit their topic's ``max.message.bytes``, with the
    record batch they were sent in (the limit was lowered while the worker ran): the worker stops
    without committing them, and produces them again after its restart, its batches sized to the
    limit (:meth:`BatchProcessor._dead_letter_refused`)."""

    def __init__(self, topic: str, limit: int, refused: int) -> None:
        self.topic = topic
        self.limit = limit
        super().__init__(
            f"{refused} record(s) for topic {topic} that fit its max.message.bytes={limit} were refused with the "
            f"record batch they were sent in (the limit is below the batches the worker had sized to the topic: "
            f"lowered while it ran); stopping without committing them: restarted, the worker sizes its batches "
            f"to the limit and produces them again"
        )


class ServicePipeline(Pipeline):
    """The shared :class:`Pipeline` plus the service-only steps, in its :meth:`before_chain` hook.

    Order: decode → key overrides → partial-image completion (optional) → drop transaction
    boundaries unless enabled → chain → emit.
    """

    def __init__(
        self,
        decoder: Decoder,
        emit_options: EmitOptions,
        chain: TransformChain | None = None,
        key_overrides: Mapping[str, tuple[str, ...]] | None = None,
        completion: Completion | None = None,
        transactions: bool = False,
    ) -> None:
        super().__init__(decoder, emit_options, chain, key_overrides)
        self.completion = completion
        self.transactions = transactions
        self.direct_emit = completion is None  # completion merges stored typed values into images

    def before_chain(self, events: list[Event]) -> list[Event]:
        if self.completion is not None and events:
            events = self.completion(events)
        if not self.transactions:
            events = [e for e in events if not isinstance(e, TransactionEvent)]
        return events


def _completion(store: RowStateStore) -> Completion:
    from transforms.completion import complete_partial_images

    def complete(events: list[Event]) -> list[Event]:
        result: list[Event] = complete_partial_images(events, store, None)
        return result

    return complete


@dataclass
class EntryRuntime:
    """A configured topic entry: its decoder pipeline and where its failures go."""

    index: int
    entry: TopicEntry
    pipeline: ServicePipeline
    letters: LetterContext  # what its dead letters are written with: the DLQ topic first
    converter: RecordConverter | None = None  # the entry's output converters; None: JSON with schemas

    @property
    def dlq_topic(self) -> str:
        return self.letters.dlq_topic

    @property
    def format_id(self) -> str:
        return self.entry.format


Letter = tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
"""A dead letter as the output appends it: (topic, key, value, headers)."""


@dataclass(slots=True)
class Outcome:
    """What one source message turned into: records, or a dead letter (also a record).

    A multi-row message whose rows partly fail to decode has the records of the rows that
    decoded and ``row_letters``: one dead letter per bad row (the whole message, with the row's
    index); ``dlq`` is the dead letter of a message that failed as a whole."""

    records: list[OutRecord]
    dlq: Letter | None = None
    error_class: str | None = None
    row_letters: tuple[Letter, ...] = ()

    @property
    def letters(self) -> tuple[Letter, ...]:
        """Every dead letter of the message: the whole message's, or its rows'."""
        return self.row_letters if self.dlq is None else (self.dlq, *self.row_letters)


@dataclass
class WorkerState:
    """Health flags shared by the agents and the HTTP endpoints (:mod:`service.health`).

    ``joined`` is true while the consumer is a member of its group with an assignment (maybe
    empty): set when partitions are assigned, false from their revocation (a rebalance begins)
    and once the worker stops. ``assigned`` is the partitions it owns."""

    started: bool = False
    joined: bool = False
    redis_ok: bool = True
    fatal: BaseException | None = None
    last_redis_error: str | None = None
    assigned: set[Any] = field(default_factory=set)
    metadata_status: Callable[[], str | None] | None = None  # the metadata log: None once loaded
    progress: Progress = field(default_factory=Progress)  # the stall clock of the liveness probe

    @property
    def live(self) -> bool:
        """No fatal error, and not stalled (:meth:`Progress.stalled`)."""
        return self.fatal is None and self.progress.stalled() is None

    @property
    def metadata_error(self) -> str | None:
        """Why the metadata log is not loaded yet (None when it is, or when there is none)."""
        return None if self.metadata_status is None else self.metadata_status()

    @property
    def ready(self) -> bool:
        return (
            self.started and self.joined and self.redis_ok and self.fatal is None and self.metadata_error is None
        )
