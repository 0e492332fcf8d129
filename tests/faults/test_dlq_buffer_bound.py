"""The DLQ producer's bounded buffer (issue 18 item 5).

Dead letters go out through the worker's output producer, in the same batches as the normalized
records; ``worker.max_inflight_bytes`` bounds what is sent but not acknowledged (keys, values and
headers: in Python and in librdkafka, whose ``queue.buffering.max.kbytes`` is sized from it). At the
bound the worker waits for acknowledgements: it drops nothing, holds no more, and commits no source
offset before its dead letters are acknowledged.

Scenario, on a broker of this test only: 400 undecodable messages of 256 KiB (100 MiB) wait in a
2-partition source topic; a worker with ``max_inflight_bytes`` 1 MiB dead-letters them, each with
its full original bytes. While it does, the broker is frozen (SIGSTOP) for 4 s, so nothing is
acknowledged. A sampler scrapes the worker's ``cdcnorm_inflight_bytes`` and reads its RSS every
50 ms. Checked: the bytes in flight never exceed the bound plus one dead letter; the worker stops
consuming while the broker is frozen; after SIGCONT every message is in the DLQ, byte for byte,
in source order within each DLQ partition, and the group commits the end of both partitions.

Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from service.local import LocalBroker, create_topics, wait_for
from tests.faults.procs import committed_offsets, metric_total, probe, wait_committed, worker_config
from tests.faults.workload import produce
from tests.service.harness import WorkerProcess, read_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

MESSAGES = 400
SIZE = 256 * 1024
BOUND = 1024 * 1024
FREEZE_S = 4.0  # below the 6 s session timeout: the worker stays in its group


class Sampler(threading.Thread):
    """Scrapes the worker's /metrics and reads its RSS every 50 ms."""

    def __init__(self, worker: WorkerProcess) -> None:
        super().__init__(daemon=True)
        self.worker = worker
        self.stop = threading.Event()
        self.peak_bytes = 0.0
        self.peak_rss = 0
        self.consumed = 0.0
        self.samples = 0

    def run(self) -> None:
        import psutil

        proc = psutil.Process(self.worker.process.process.pid)
        while not self.stop.wait(0.05):
            status, body = probe(self.worker, "/metrics", 2.0)
            if status == 200:
                self.peak_bytes = max(self.peak_bytes, metric_total(body, "cdcnorm_inflight_bytes"))
                self.consumed = metric_total(body, "cdcnorm_messages_in_total")
                self.samples += 1
            self.peak_rss = max(self.peak_rss, proc.memory_info().rss)


def test_dead_letters_wait_at_the_producer_bound_and_none_is_lost(
    own_broker: LocalBroker, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = own_broker.address
    prefix = f"fq{uuid.uuid4().hex[:8]}"
    source, dlq_topic = f"{prefix}-src", f"{prefix}.dlq"
    create_topics(bootstrap, [source, dlq_topic], partitions=2)
    bad = [(b"bad-%03d" % i, b"\x00" + os.urandom(SIZE - 1)) for i in range(MESSAGES)]  # no format decodes it
    ends = produce(bootstrap, source, bad)
    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}],
                           max_inflight_bytes=BOUND)
    group = config["worker"]["app_id"]
    worker = WorkerProcess(config, tmp_path)
    sampler = Sampler(worker)
    try:
        worker.wait_ready(90)
        baseline_rss = _rss(worker)
        sampler.start()
        wait_for(lambda: sampler.consumed >= 60, 60, "the worker dead-lettering", 0.05)
        own_broker.freeze()
        frozen = time.monotonic()
        time.sleep(0.5)  # what was on its way when the broker froze
        at_freeze = sampler.consumed
        time.sleep(FREEZE_S - 0.5)
        during_freeze = sampler.consumed - at_freeze
        own_broker.resume()
        print(f"\ninjected: {MESSAGES} undecodable messages of {SIZE} bytes ({MESSAGES * SIZE >> 20} MiB) over 2 "
              f"partitions, worker.max_inflight_bytes={BOUND}; SIGSTOP the broker for {time.monotonic() - frozen:.1f}s "
              f"after {at_freeze:.0f} were consumed")
        resumed = time.monotonic()
        wait_committed(bootstrap, group, source, ends, 120, worker)
        caught_up = time.monotonic() - resumed
        waits = worker.total("cdcnorm_backpressure_waits_total")
        dlq_metric = worker.total("cdcnorm_dlq_total")
    finally:
        sampler.stop.set()
        worker.stop()
    sampler.join(5)

    letters = read_topics(bootstrap, [dlq_topic], idle_s=2.0, timeout_s=60)
    committed = committed_offsets(bootstrap, group, source, 2)
    by_source: dict[int, list[int]] = {}  # source partition -> offsets dead-lettered
    in_order = True  # within a DLQ partition, the dead letters of a source partition in source order
    last: dict[tuple[int, int], int] = {}
    for letter in letters:  # in (partition, offset) order
        source_partition = int(letter.headers["__connect.errors.partition"])
        offset = int(letter.headers["__connect.errors.offset"])
        by_source.setdefault(source_partition, []).append(offset)
        in_order &= last.get((letter.partition, source_partition), -1) < offset
        last[(letter.partition, source_partition)] = offset
    sent = {hashlib.sha256(v).digest() for _, v in bad}
    got = [hashlib.sha256(letter.value or b"").digest() for letter in letters]
    print(f"counted: {sampler.samples} samples; peak cdcnorm_inflight_bytes={sampler.peak_bytes:.0f} (bound {BOUND}); "
          f"consumed while frozen={during_freeze:.0f}; backpressure waits={waits:.0f}; worker RSS "
          f"{baseline_rss >> 20} MiB when ready, peak {sampler.peak_rss >> 20} MiB")
    print(f"counted: dead letters={len(letters)} (metric {dlq_metric:.0f}) distinct payloads={len(set(got))} "
          f"all byte-identical={set(got) == sent} in source order per DLQ partition={in_order}; committed={committed} ends={ends}; caught up {caught_up:.1f}s "
          "after SIGCONT")
    assert sampler.peak_bytes <= BOUND + SIZE + 16 * 1024  # the bound plus one dead letter with its headers
    assert during_freeze * SIZE <= BOUND + SIZE, "the worker went on consuming with nothing acknowledged"
    assert waits > 0
    assert len(letters) == MESSAGES and set(got) == sent
    assert {p: sorted(offsets) for p, offsets in by_source.items()} == {p: list(range(end)) for p, end in ends.items()}
    assert in_order
    assert [committed[p] for p in sorted(ends)] == [ends[p] for p in sorted(ends)]


def _rss(worker: WorkerProcess) -> int:
    import psutil

    return int(psutil.Process(worker.process.process.pid).memory_info().rss)
