"""A 50 MB source message (issue 18 item 5): refused with a dead letter that says why, nothing held back.

A Canal JSON change stream goes to a 2-partition source topic; in its middle, one 50 MiB Canal
message (a row with a 50 MiB string column) is produced to the partition of its key. Tansu accepts
it (the test producer's ``message.max.bytes`` is 60 MB) and hands it to the worker whole, although
the worker's consumer asks for 1 MiB per partition: a fetch returns the first record batch of a
partition even when it is larger (Fetch v3+, KIP-74, as Kafka does).

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
import uuid
from pathlib import Path

import orjson
import pytest

from service.local import create_topics
from tests.faults.procs import committed_offsets, dead_letter_line, wait_committed, worker_config
from tests.faults.workload import DB, TABLES, check_order, generate, produce, read_all
from tests.service.harness import WorkerProcess, read_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

BIG = 50 * 1024 * 1024
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
    prefix = f"fo{uuid.uuid4().hex[:8]}"
    source, dlq_topic = f"{prefix}-src", f"{prefix}.dlq"
    outputs = [f"{prefix}.{DB}.{t}" for t in TABLES]
    stream = generate(CHANGES, 200, seed=53)
    create_topics(bootstrap, [source], partitions=2)
    create_topics(bootstrap, [*outputs, dlq_topic], partitions=2)
    big = big_canal_message()
    half = CHANGES // 2

    ends = produce(bootstrap, source, stream.messages[:half])
    started = time.monotonic()
    big_end = produce(bootstrap, source, [(b"big", big)], **{"message.max.bytes": 60_000_000})
    produced_big_s = time.monotonic() - started
    (big_partition, big_next), = big_end.items()
    for p, end in produce(bootstrap, source, stream.messages[half:]).items():
        ends[p] = max(ends.get(p, 0), end)
    after_big = ends[big_partition] - big_next
    print(f"\ninjected: {CHANGES} changes over 2 partitions, and after the first {half} one Canal message of "
          f"{len(big)} bytes at {source}[{big_partition}]@{big_next - 1} (produced in {produced_big_s:.1f}s), "
          f"followed by {after_big} changes in its partition; worker.max_message_bytes=1048576 (default)")

    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready(90)
        ready = time.monotonic()
        wait_committed(bootstrap, config["worker"]["app_id"], source, ends, 120, worker)
        all_committed_s = time.monotonic() - ready
        consumed = worker.total("cdcnorm_messages_in_total")
        dlq_metric = worker.total("cdcnorm_dlq_total", error_class="OversizedMessageError")
        rss = _rss_mb(worker)
    finally:
        worker.stop()

    committed = committed_offsets(bootstrap, config["worker"]["app_id"], source, 2)
    report = check_order(read_all(bootstrap, outputs), prefix, stream)
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
        source, str(big_partition), str(big_next - 1))
    assert h["__connect.errors.exception.class.name"] == "service.dlq.OversizedMessageError"
    assert "exceeds worker.max_message_bytes=1048576" in h["__connect.errors.exception.message"]


def _rss_mb(worker: WorkerProcess) -> float:
    """The worker process's resident memory (MB)."""
    import psutil

    return float(psutil.Process(worker.process.process.pid).memory_info().rss) / 1e6
