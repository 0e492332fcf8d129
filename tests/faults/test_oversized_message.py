"""A 50 MB source message (issue 18 item 5): refused with a dead letter that says why, nothing held back.

A Canal JSON change stream goes to a 2-partition source topic; in its middle, one 50 MiB Canal
message (a row with a 50 MiB string column) is produced to the partition of its key. The source
topic is created with ``max.message.bytes=60000000``, as an operator lets such messages in (Kafka's
default, the broker's ``message.max.bytes`` of 1048588, refuses it: ``RecordTooLargeException``),
and the test producer's ``message.max.bytes`` is 60 MB. The broker hands it to the worker whole,
although the worker's consumer asks for 1 MiB per partition: a fetch returns the first record
batch of a partition even when it is larger (Fetch v3+, KIP-74). Nothing else needs raising on one
node; in a cluster the followers fetch it the same way (``replica.fetch.max.bytes`` is not a
bound either, KIP-74).

The worker runs with the default ``worker.max_message_bytes`` (1 MiB). Checked:

* the DLQ holds exactly one record, for that message: its first ``oversized_prefix_bytes`` (1024)
  of the value, the original key, ``__cdcnorm.oversized.*`` (size, limit, value size and sha256)
  and the source topic, partition and offset in Connect's context headers;
* every other change (before and after it, in its partition and in the other) reaches the
  normalized topics in per-key order, and the group commits the end of both partitions.

Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import orjson
import pytest

from tests.faults.procs import (
    committed_offsets,
    dead_letter_line,
    produce_mid_stream,
    run_until_committed,
    topic_config,
    worker_config,
)
from tests.faults.workload import DB, check_order, generate, read_all
from tests.service.harness import read_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

BIG = 50 * 1024 * 1024
SOURCE_LIMIT = 60_000_000  # the source topic's max.message.bytes: lets the 50 MiB message in
CHANGES = 3000


def big_canal_message() -> bytes:
    value = orjson.dumps({
        "data": [{"id": "1", "ver": "1", "name": "x" * BIG, "qty": "1"}],
        "old": None, "database": DB, "table": "big", "pkNames": ["id"], "isDdl": False, "type": "INSERT",
        "es": 1_700_000_000_000, "ts": 1_700_000_000_000,
        "mysqlType": {"id": "int(11)", "ver": "bigint(20)", "name": "longtext", "qty": "int(11)"},
        "sqlType": {"id": 4, "ver": -5, "name": 12, "qty": 4},
    })
    assert len(value) > BIG
    return value


def test_a_50mb_message_is_dead_lettered_and_nothing_is_held_back(
    kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_bootstrap
    stream = generate(CHANGES, 200, seed=53)
    big = big_canal_message()
    started = time.monotonic()
    run = produce_mid_stream(bootstrap, "fo", stream, [(b"big", big)], produce_conf={"message.max.bytes": 60_000_000},
                             source_config={"max.message.bytes": str(SOURCE_LIMIT)})
    produced_s = time.monotonic() - started
    prefix, source, dlq_topic, ends = run.prefix, run.source, run.dlq_topic, run.ends
    big_partition, big_offset = run.at[b"big"]
    print(f"\ninjected: {CHANGES} changes over 2 partitions, and after the first {CHANGES // 2} one Canal message of "
          f"{len(big)} bytes at {source}[{big_partition}]@{big_offset} (all produced in {produced_s:.1f}s), "
          f"followed by {run.after(b'big')} changes in its partition; source topic max.message.bytes="
          f"{topic_config(bootstrap, source, 'max.message.bytes')}; worker.max_message_bytes=1048576 (default)")

    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    seen = run_until_committed(config, tmp_path, run, "OversizedMessageError")
    consumed, dlq_metric, all_committed_s, rss = seen.consumed, seen.dead_letters, seen.seconds, seen.rss_mb

    committed = committed_offsets(bootstrap, config["worker"]["app_id"], source, 2)
    report = check_order(read_all(bootstrap, run.outputs), prefix, stream)
    letters = read_topics(bootstrap, [dlq_topic], idle_s=2.0)
    print(f"counted: consumed={consumed:.0f} (of {CHANGES + 1}) committed={committed} (ends {ends}) "
          f"{all_committed_s:.1f}s after ready; worker RSS {rss:.0f} MB; {report.line()}")
    assert report.missing == 0 and not report.out_of_order and report.changes - report.duplicates == CHANGES
    assert [committed[p] for p in sorted(ends)] == [ends[p] for p in sorted(ends)]
    assert len(letters) == 1 and dlq_metric == 1, [r.headers for r in letters]
    (letter,) = letters
    h = {k: v.decode() for k, v in letter.headers.items()}
    print(f"counted: dead letters={len(letters)}: {dead_letter_line(letter)}")
    assert letter.key == b"big" and letter.value == big[:1024]
    assert h["__cdcnorm.oversized.bytes"] == str(len(big) + 3)
    assert h["__cdcnorm.oversized.limit"] == "1048576"
    assert h["__cdcnorm.oversized.value.bytes"] == str(len(big))
    assert h["__cdcnorm.oversized.value.sha256"] == hashlib.sha256(big).hexdigest()
    assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == (
        source, str(big_partition), str(big_offset))
    assert h["__connect.errors.exception.class.name"] == "service.dlq.OversizedMessageError"
    assert "exceeds worker.max_message_bytes=1048576" in h["__connect.errors.exception.message"]
