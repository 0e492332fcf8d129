"""Hostile input: mutated golden messages of every format never crash, hang or blow up memory.

For each format (and ``auto``), Hypothesis draws a random seed; the seed picks golden messages
(:mod:`tests.fuzz.seeds`) and mutates them (:mod:`tests.fuzz.mutations`), and each mutant runs
through the decoder's own ``decode`` (not the base class's ``decode_safely`` net, so that a
decoder bug shows as one), the emitter and the JSON serializer. Checked per message:

* **no crash**: the only exception allowed is a :class:`~transforms.errors.DecodeError`
  (or a subclass); anything else is a bug to fix in the decoder;
* **no hang**: each message takes at most ``CDCNORM_FUZZ_MAX_SECONDS`` (default 0.5 s) of CPU
  time of the test's thread (CPU time, so that other processes on a loaded machine do not count,
  with the cyclic garbage collector paused so that it does not charge one message for others);
  a watchdog timer aborts a message after 10 s of wall time, so that a real hang fails instead of
  blocking;
* **valid output**: every record of a message that decodes is accepted by the real Kafka Connect
  ``JsonConverter`` (both ways) and Debezium's ``ExtractNewRecordState`` (the session's
  ``connect_checker`` JVM, checked a batch at a time, outside the timed part);
* **bounded memory**: no message raises the process's peak RSS by more than
  ``CDCNORM_FUZZ_MAX_PEAK_MB`` (default 64 MB), and the messages at every
  ``CDCNORM_FUZZ_TRACE_EVERY``-th position of a batch (default 4: positions 0, 4 and 8 of 10;
  tracemalloc slows decoding several times over) have their exact allocation peak measured with
  tracemalloc against the same bound; over the whole run of a format the process RSS may grow by
  at most ``CDCNORM_FUZZ_MAX_RSS_GROWTH_MB`` (default 256 MB: the caches of decoders and emitter
  are bounded, so more is a leak).

``CDCNORM_FUZZ_EXAMPLES`` sets the messages per format (default 10000, as in CI). They run as
Hypothesis examples of ``CDCNORM_FUZZ_BATCH`` messages each (default 10: Hypothesis's own cost
per example is about that of ten decodes). ``CDCNORM_FUZZ_SEED`` picks another Hypothesis seed
(default: derandomized, so CI is repeatable). A failure names the golden message, the mutation
and the batch's random seed: ``CDCNORM_FUZZ_REPLAY=<seed> pytest tests/fuzz -k <format>`` runs
that batch alone. Each format prints its numbers: messages, outcomes
by class, the slowest message, the largest traced peak and the RSS growth of the run.
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from random import Random
from types import FrameType
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.fuzz.mutations import mutate
from tests.fuzz.seeds import Seed, format_seeds, fuzz_formats
from transforms.decoders import Message
from transforms.envelope import EmitOptions, emit
from transforms.errors import DecodeError

EXAMPLES = int(os.environ.get("CDCNORM_FUZZ_EXAMPLES", "10000"))
BATCH = max(1, int(os.environ.get("CDCNORM_FUZZ_BATCH", "10")))
MAX_SECONDS = float(os.environ.get("CDCNORM_FUZZ_MAX_SECONDS", "0.5"))
MAX_PEAK_BYTES = int(float(os.environ.get("CDCNORM_FUZZ_MAX_PEAK_MB", "64")) * 2**20)
TRACE_EVERY = max(1, int(os.environ.get("CDCNORM_FUZZ_TRACE_EVERY", "4")))
MAX_RSS_GROWTH_BYTES = int(float(os.environ.get("CDCNORM_FUZZ_MAX_RSS_GROWTH_MB", "256")) * 2**20)
SEED = os.environ.get("CDCNORM_FUZZ_SEED")
REPLAY = os.environ.get("CDCNORM_FUZZ_REPLAY")
WATCHDOG_SECONDS = 10.0
RANDOM_SEEDS = st.integers(0, 2**64 - 1)


class Hang(BaseException):
    """Raised by the watchdog; a BaseException so that no ``except Exception`` swallows it."""


@dataclass
class Tally:
    """What one format's fuzz run saw."""

    messages: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    slowest: float = 0.0
    slowest_label: str = ""
    peak: int = 0
    peak_label: str = ""
    traced: int = 0
    checked: int = 0

    def add(self, label: str, outcome: str, elapsed: float, peak: int | None) -> None:
        label = label if len(label) <= 160 else label[:157] + "...]"
        self.messages += 1
        self.outcomes[outcome] += 1
        if elapsed > self.slowest:
            self.slowest, self.slowest_label = elapsed, label
        if peak is not None:
            self.traced += 1
            if peak > self.peak:
                self.peak, self.peak_label = peak, label

    def report(self, format_id: str, rss_growth: int) -> str:
        outcomes = ", ".join(f"{name}={n}" for name, n in self.outcomes.most_common())
        return (
            f"fuzz {format_id}: {self.messages} messages; {outcomes}; "
            f"slowest {self.slowest * 1000:.1f} ms CPU ({self.slowest_label}); "
            f"traced peak {self.peak / 2**20:.2f} MB of {self.traced} traced ({self.peak_label}); "
            f"RSS growth {rss_growth / 2**20:.1f} MB; "
            f"{self.checked} records accepted by Kafka Connect/Debezium"
        )


@pytest.fixture
def watchdog() -> Iterator[None]:
    def alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no result after {WATCHDOG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


Record = tuple[str, bytes | None, bytes | None]


def run_message(
    seed: Seed, message: Message, trace: bool, records: list[Record] | None = None
) -> tuple[str, float, int | None, int]:
    """Decode, emit and serialize one message; its serialized records are appended to ``records``.

    Returns the outcome (``ok`` or the DecodeError class name), the CPU seconds it took, its
    tracemalloc peak (when traced) and how much it raised the process's peak RSS. Any exception
    other than a DecodeError propagates.
    """
    out: list[Record] = []
    decoder = seed.decoder()
    options = EmitOptions(prefix="fuzz", decimal_mode=decoder.options.decimal_handling_mode)
    rss = _max_rss()
    if trace:
        tracemalloc.start()
    # the cyclic GC would charge this message for garbage other code left; collect between messages
    gc_was_enabled = gc.isenabled()
    gc.disable()
    signal.setitimer(signal.ITIMER_REAL, WATCHDOG_SECONDS)
    started = time.thread_time()
    try:
        for record in emit(decoder.decode(message), options):
            out.append((record.topic, record.key_bytes(), record.value_bytes()))
        outcome = "ok"
    except DecodeError as exc:
        outcome = type(exc).__name__
    finally:
        elapsed = time.thread_time() - started
        signal.setitimer(signal.ITIMER_REAL, 0)
        if gc_was_enabled:
            gc.enable()
        peak = tracemalloc.get_traced_memory()[1] if trace else None
        if trace:
            tracemalloc.stop()
    if records is not None:
        records.extend(out)
    return outcome, elapsed, peak, _max_rss() - rss


def run_batch(
    format_id: str, seeds: tuple[Seed, ...], random_seed: int, tally: Tally, checker: Any = None
) -> None:
    """Mutate and check ``BATCH`` messages chosen by ``random_seed`` (one Hypothesis example)."""
    rng = Random(random_seed)
    batch: list[tuple[str, list[Record]]] = []
    for position in range(BATCH):
        seed = rng.choice(seeds)
        message, what = mutate(rng, seed, rng.choice(seeds))
        label = f"{seed.label} (CDCNORM_FUZZ_REPLAY={random_seed}) [{what}]"
        records: list[Record] = []
        batch.append((label, records))
        try:
            outcome, elapsed, peak, rss_rise = run_message(seed, message, position % TRACE_EVERY == 0, records)
        except Hang as exc:
            raise AssertionError(f"{format_id} {label}: {exc}") from None
        except Exception as exc:
            raise AssertionError(
                f"{format_id} {label}: {type(exc).__name__} instead of a DecodeError: {exc}"
            ) from exc
        tally.add(label, outcome, elapsed, peak)
        assert elapsed <= MAX_SECONDS, f"{format_id} {label}: took {elapsed:.3f} s of CPU"
        assert max(peak or 0, rss_rise) <= MAX_PEAK_BYTES, (
            f"{format_id} {label}: memory peak {max(peak or 0, rss_rise) / 2**20:.1f} MB"
        )
    if checker is not None:
        for label, records in batch:
            for record, verdict in zip(records, checker.check(records), strict=True):
                assert verdict.ok, (
                    f"{format_id} {label}: record refused by Kafka Connect/Debezium at {verdict.stage}: "
                    f"{verdict.error}\n  value {(record[2] or b'null')[:800]!r}"
                )
            tally.checked += len(records)


def _settings() -> settings:
    return settings(
        max_examples=max(1, EXAMPLES // BATCH),
        deadline=None,
        database=None,
        derandomize=SEED is None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.faults
@pytest.mark.parametrize("format_id", fuzz_formats())
def test_mutated_messages_fail_only_with_decode_errors(format_id: str, watchdog: None, connect_checker: Any) -> None:
    seeds = format_seeds(format_id)
    assert seeds, f"no golden messages for {format_id}"
    tally = Tally()
    rss_before = psutil.Process().memory_info().rss

    @_settings()
    @given(RANDOM_SEEDS)
    def fuzz(random_seed: int) -> None:
        run_batch(format_id, seeds, random_seed, tally, connect_checker)

    if SEED is not None:
        fuzz = hypothesis_seed(int(SEED))(fuzz)
    try:
        if REPLAY is not None:
            run_batch(format_id, seeds, int(REPLAY), tally, connect_checker)
        else:
            fuzz()
    finally:
        rss_growth = psutil.Process().memory_info().rss - rss_before
        print(tally.report(format_id, rss_growth))
    assert rss_growth <= MAX_RSS_GROWTH_BYTES, f"{format_id}: RSS grew by {rss_growth / 2**20:.0f} MB"
