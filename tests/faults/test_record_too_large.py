"""An output record too large for the output is a poison pill no more: its source message is
dead-lettered, the partition goes on.

Normalized records are larger than their source (before and after images, the Connect schema):
a Canal UPDATE of a row with a 60 kB column is a 60 kB message but a 120 kB record.

* ``test_records_above_max_record_bytes_are_dead_lettered_and_the_stream_goes_on``: the worker
  process (``worker.max_record_bytes: 100000``, the check before producing) gets two wide UPDATEs
  in the middle of a 2000-change Canal stream: one whose message fits a dead letter (60 kB) and one
  whose message does not (120 kB). The normalized topics are created with
  ``max.message.bytes=100061``, as the README advises (``max_record_bytes`` is the topics' limit
  less a record batch's 61-byte header): the worker refuses, before producing, what the broker
  would refuse. Checked: two dead letters with the reason (output topic, size, limit) and the
  source coordinates, the first carrying the message, the second its prefix, sizes and sha256;
  every other change delivered in per-key order; the group commits the ends of both partitions;
  the worker never exits.
* ``test_a_size_refusal_by_the_producer_dead_letters_the_source_message``: the refusal after the
  worker's check by librdkafka's own check: the output producer's ``message.max.bytes`` (100000)
  below the worker's record limit (the default, 2 MiB) and the topic's (Kafka's default, 1048588).
  librdkafka reports it from ``produce()`` (MSG_SIZE_TOO_LARGE), not in a delivery report; both go
  through the same :class:`service.output.Refusal` path (the broker's refusal, in the delivery
  report, is ``tests/faults/test_topic_size_limits.py`` and ``tests/service/test_rdkafka.py``).
  Checked: the wide message is dead-lettered with librdkafka's error, the offsets become
  committable only with the dead letter acknowledged, everything else is delivered in order,
  nothing is fatal.

Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

from service.app import Normalizer
from service.batches import BatchProcessor
from service.config import parse_config
from service.limits import BATCH_HEADER_BYTES
from service.local import create_topics
from service.rdkafka import RdKafkaOutput, producer_config
from service.worker_types import WorkerState
from tests.faults.procs import (
    committed_offsets,
    dead_letter_line,
    produce_mid_stream,
    run_until_committed,
    worker_config,
)
from tests.faults.workload import BASE_TS, DB, TABLES, canal_message, check_order, generate, read_all
from tests.service.harness import read_topics
from tests.service.test_agent import records
from transforms.metadata import InMemoryMetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

LIMIT = 100_000
CHANGES = 2000


def wide_update(width: int) -> bytes:
    """A Canal UPDATE of table ``big`` whose row has a ``width``-character ``name``; only ``qty``
    changed, so the normalized record holds the wide row twice (before and after)."""
    row = {"id": 1, "ver": 2, "name": "w" * width, "qty": 2}
    return canal_message("big", "UPDATE", row, {"ver": 1, "qty": 1}, BASE_TS)


def _headers(letter: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in letter.headers.items()}


def test_records_above_max_record_bytes_are_dead_lettered_and_the_stream_goes_on(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_bootstrap
    stream = generate(CHANGES, 200, seed=61)
    fits, too_wide = wide_update(60_000), wide_update(120_000)
    run = produce_mid_stream(bootstrap, "rt", stream, [(b"wide", fits), (b"wider", too_wide)], extra_outputs=("big",),
                             output_config={"max.message.bytes": str(LIMIT + BATCH_HEADER_BYTES)})
    prefix, source, dlq_topic, ends, at = run.prefix, run.source, run.dlq_topic, run.ends, run.at
    print(f"\ninjected: {CHANGES} changes over 2 partitions; after the first {CHANGES // 2}, two Canal UPDATEs of a "
          f"wide row: {len(fits)} bytes at {source}[{at[b'wide'][0]}]@{at[b'wide'][1]} and {len(too_wide)} bytes at "
          f"{source}[{at[b'wider'][0]}]@{at[b'wider'][1]}, followed by {run.after(b'wide')} and "
          f"{run.after(b'wider')} changes in their partitions; worker.max_record_bytes={LIMIT}, normalized topics "
          f"max.message.bytes={LIMIT + BATCH_HEADER_BYTES}")

    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}],
                           max_record_bytes=LIMIT)
    seen = run_until_committed(config, tmp_path, run, "RecordTooLargeError")
    consumed, dlq_metric, all_committed_s, running = seen.consumed, seen.dead_letters, seen.seconds, seen.running

    committed = committed_offsets(bootstrap, config["worker"]["app_id"], source, 2)
    report = check_order(read_all(bootstrap, run.outputs), prefix, stream)
    letters = {r.key or b"": r for r in read_topics(bootstrap, [dlq_topic], idle_s=2.0)}
    big_records = read_topics(bootstrap, [f"{prefix}.{DB}.big"], idle_s=1.0)
    print(f"counted: consumed={consumed:.0f} (of {CHANGES + 2}) committed={committed} (ends {ends}) "
          f"{all_committed_s:.1f}s after ready; worker running={running}; records of table big={len(big_records)}; "
          f"{report.line()}")
    for letter in letters.values():
        print(f"counted: dead letter {dead_letter_line(letter)}")
    assert running and consumed == CHANGES + 2
    assert report.missing == 0 and not report.out_of_order and report.changes - report.duplicates == CHANGES
    assert [committed[p] for p in sorted(ends)] == [ends[p] for p in sorted(ends)]
    assert set(letters) == {b"wide", b"wider"} and dlq_metric == 2 and big_records == []
    for key, letter in letters.items():
        h = _headers(letter)
        assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == (
            source, str(at[key][0]), str(at[key][1]))
        assert h["__connect.errors.stage"] == "KAFKA_PRODUCE"
        assert h["__connect.errors.exception.class.name"] == "service.dlq.RecordTooLargeError"
        assert h["__cdcnorm.too_large.topic"] == f"{prefix}.{DB}.big" and h["__cdcnorm.too_large.limit"] == str(LIMIT)
        assert int(h["__cdcnorm.too_large.bytes"]) > 2 * len(fits if key == b"wide" else too_wide) - 1000
        assert f"exceeds worker.max_record_bytes={LIMIT}" in h["__connect.errors.exception.message"]
    assert letters[b"wide"].value == fits  # the message fits a dead letter: as it was
    wider = letters[b"wider"]
    h = _headers(wider)  # the message alone is above the limit: its prefix, sizes and sha256
    assert wider.value == too_wide[:1024] and h["__cdcnorm.oversized.value.bytes"] == str(len(too_wide))
    assert h["__cdcnorm.oversized.value.sha256"] == hashlib.sha256(too_wide).hexdigest()
    assert h["__cdcnorm.oversized.limit"] == str(LIMIT)


def test_a_size_refusal_by_the_producer_dead_letters_the_source_message(kafka_bootstrap: str) -> None:
    bootstrap = kafka_bootstrap
    prefix = f"rr{uuid.uuid4().hex[:8]}"
    source, dlq_topic = f"{prefix}-src", f"{prefix}.dlq"
    outputs = [f"{prefix}.{DB}.{t}" for t in TABLES]
    stream = generate(300, 40, seed=67)
    create_topics(bootstrap, [*outputs, f"{prefix}.{DB}.big", dlq_topic], partitions=2)
    cfg = parse_config({"topic_prefix": prefix, "web": {"enabled": False},
                        "topics": [{"name": source, "format": "canal-json"}]})
    wide = wide_update(60_000)
    values: list[tuple[bytes | None, bytes]] = [*stream.messages[:150], (b"wide", wide), *stream.messages[150:]]
    tp = TP(source, 0)
    fatal: list[BaseException] = []
    producer_limit = 100_000
    print(f"\ninjected: {len(values)} source messages of one partition, at offset 150 a {len(wide)}-byte UPDATE "
          f"of a wide row; output producer message.max.bytes={producer_limit}, worker record limit 2 MiB (default)")

    async def run() -> tuple[dict[Any, int], int, dict[Any, int], float]:
        output = RdKafkaOutput(producer_config({"bootstrap.servers": bootstrap}, producer_limit))
        processor = BatchProcessor(Normalizer(cfg, InMemoryMetadataStore()), WorkerState(), output,
                                   max_inflight=2000, on_fatal=fatal.append)

        async def first_committable() -> tuple[dict[Any, int], int]:
            """The first offsets that become committable, and the dead letters readable at that moment
            (read while the event loop is blocked: nothing moves meanwhile)."""
            while not processor.committable():
                await asyncio.sleep(0.002)
            return processor.committable(), len(read_topics(bootstrap, [dlq_topic], idle_s=1.0))

        watcher = asyncio.ensure_future(first_committable())
        started = time.monotonic()
        await processor.process({tp: records(source, 0, values[:200])})
        await processor.process({tp: records(source, 0, values[200:], first=200)})
        await processor.drain()
        seconds = time.monotonic() - started
        first, letters_then = await asyncio.wait_for(watcher, 30)
        done = processor.committable()
        await processor.stop()
        return first, letters_then, done, seconds

    first, letters_then, done, seconds = asyncio.run(run())
    report = check_order(read_all(bootstrap, outputs), prefix, stream)
    letters = read_topics(bootstrap, [dlq_topic], idle_s=2.0)
    print(f"counted: first committable offsets {first} with {letters_then} dead letter(s) readable then; "
          f"after draining {done} in {seconds:.1f}s; fatal={fatal}; {report.line()}; dead letters={len(letters)}")
    for letter in letters:
        print(f"counted: dead letter {dead_letter_line(letter)}")
    assert fatal == [] and done == {tp: len(values)}
    assert first[tp] > 150 and letters_then == 1  # the wide message's offset only with its dead letter acknowledged
    assert report.missing == 0 and not report.out_of_order and report.changes - report.duplicates == len(stream.messages)
    (letter,) = letters
    h = _headers(letter)
    assert (letter.key, letter.value) == (b"wide", wide)
    assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == (
        source, "0", "150")
    assert h["__connect.errors.exception.class.name"] == "service.dlq.RecordTooLargeError"
    assert h["__cdcnorm.too_large.topic"] == f"{prefix}.{DB}.big" and "__cdcnorm.too_large.limit" not in h
    assert "refused: MSG_SIZE_TOO_LARGE" in h["__connect.errors.exception.message"]
