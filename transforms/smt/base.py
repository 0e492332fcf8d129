"""Single-message transforms (SMTs) and predicates, in the style of Kafka Connect.

A transform is one small class with a declared config (a pydantic model), a pure
``apply(event) -> list[event]`` that never mutates its input, and ``close()``. *When* it
applies is kept apart: a :class:`ChainStep` pairs a transform with an optional
:class:`Predicate` and ``negate``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from transforms.envelope import Event

__all__ = ["ChainStep", "Predicate", "SmtConfig", "Transform", "TransformChain"]


class SmtConfig(BaseModel):
    """Base of transform and predicate configs: unknown keys are errors.

    ``key_spellings`` maps another accepted spelling of a key (Kafka Connect's or Debezium's
    name for it) to the key; ``deprecated_keys`` maps a deprecated key to the key that replaces
    it. The registry accepts either spelling but never both together, and logs a warning naming
    the replacement for a deprecated one. A spelling that is not a declared key of its own is
    read as the key it stands for.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    key_spellings: ClassVar[Mapping[str, str]] = {}
    deprecated_keys: ClassVar[Mapping[str, str]] = {}


class Transform(ABC):
    """A single-message transform over canonical events."""

    name: ClassVar[str]
    config_model: ClassVar[type[SmtConfig]] = SmtConfig

    def __init__(self, config: SmtConfig) -> None:
        self.config = config

    @abstractmethod
    def apply(self, event: Event) -> list[Event]:
        """The events that replace ``event``: ``[]`` drops it, ``[event]`` keeps it unchanged."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; most transforms hold none."""


class Predicate(ABC):
    """Decides whether a chain step applies to an event."""

    name: ClassVar[str]
    config_model: ClassVar[type[SmtConfig]] = SmtConfig

    def __init__(self, config: SmtConfig) -> None:
        self.config = config

    @abstractmethod
    def test(self, event: Event) -> bool:
        """True when the step should apply to ``event``."""


@dataclass(frozen=True, slots=True)
class ChainStep:
    """A transform, applied only where its predicate (optionally negated) holds."""

    transform: Transform
    predicate: Predicate | None = None
    negate: bool = False

    def applies(self, event: Event) -> bool:
        if self.predicate is None:
            return True
        return self.predicate.test(event) != self.negate


class TransformChain:
    """Transforms run in order; each output event of a step feeds the next step."""

    def __init__(self, steps: list[ChainStep] | None = None) -> None:
        self.steps = list(steps or [])

    def __len__(self) -> int:
        return len(self.steps)

    def apply(self, events: list[Event]) -> list[Event]:
        for step in self.steps:
            if not events:
                break
            out: list[Event] = []
            for event in events:
                if step.applies(event):
                    out.extend(step.transform.apply(event))
                else:
                    out.append(event)
            events = out
        return events

    def close(self) -> None:
        for step in self.steps:
            step.transform.close()
