"""Throughput of 1, 2 and 4 worker processes of one consumer group on a 4-partition topic.

For each fleet size a fresh 4-partition source topic and consumer group: the workers start,
the bench waits until the group has settled (every worker owns partitions), then produces
``N`` canal-json messages (the :mod:`bench.service_e2e` workload) and measures from the first
consumed message until every message is consumed and every output record acknowledged
(summed over the workers' ``/metrics``), sampling the workers' CPU time. The output topics are
then read until a fetch returns nothing and counted.

Reported: messages/s of each fleet against the single worker of the same run, and CPU per
message (how cost grows with work), each with the share of the machine's cores that were busy
meanwhile (every process: workers, broker, Redis). A fleet can gain at most what the cores
left idle allow: ``min(k, 1 / busy share of one process)``; the report says how much of that it
reached. On a 2-core machine shared with the broker the curve should flatten at 2 processes: a
third process has no core to run on.

Run: ``python -m bench.scaling [--size tiny|small|full] [--messages N] [--processes 1,2,4]
[--broker tansu|kafka]``. The broker is Tansu by default (the earlier rounds' figures);
``--broker kafka`` starts Apache Kafka.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.common import BenchReport, Ratio, bench_parser
from bench.service_e2e import (
    Broker,
    WorkerFleet,
    WorkerResult,
    canal_workload,
    count_records,
    produce,
    worker_config,
)
from service.local import create_topics

__all__ = ["main", "run_fleet"]

MESSAGES = {"tiny": 5_000, "small": 20_000, "full": 200_000}
PARTITIONS = 4


def run_fleet(broker: Broker, n: int, processes: int, workdir: Path) -> tuple[WorkerResult, int]:
    """``processes`` workers over a fresh topic of ``n`` messages; the result and records read."""
    prefix = f"bs{uuid.uuid4().hex[:6]}"
    source = f"{prefix}-src"
    workload = canal_workload(n, prefix, source)
    create_topics(broker.bootstrap, [source], partitions=PARTITIONS)
    create_topics(broker.bootstrap, workload.output_topics, partitions=4)  # as service_e2e's run_workers
    config = worker_config(broker.bootstrap, broker.redis_url, prefix, source, 0)
    fleet = WorkerFleet(config, processes, workdir / f"p{processes}")
    try:
        fleet.wait_ready()
        assignment = fleet.wait_assigned(PARTITIONS)
        print(f"{processes} worker(s) assigned: {assignment}", flush=True)
        start = fleet.mark()
        produce(broker.bootstrap, source, workload.messages)
        print(f"produced {n:,} messages in {time.perf_counter() - start.time:.1f}s", flush=True)
        result = fleet.measure(n, timeout_s=max(120.0, n / 300), start=start)
        # the workers count a message when it is consumed; wait until its output is on the broker
        # (acks in flight) before stopping them, so the completeness check below is meaningful.
        # Distinct records: a rebalance replays, and the replayed copies are not the missing ones.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = count_records(broker.bootstrap, workload.output_topics, distinct=True, expect=workload.expected_records)
            if sum(got.values()) >= workload.expected_records:
                break
        counted = fleet.totals()
    finally:
        fleet.stop()
    topics = [*workload.output_topics, f"{prefix}.dlq"]
    read = sum(count_records(broker.bootstrap, topics).values())
    # several workers share the group: a rebalance replays what was processed but not yet
    # committed (at-least-once), so completeness is judged on distinct records
    unique = sum(count_records(broker.bootstrap, topics, distinct=True, expect=workload.expected_records).values())
    if unique != workload.expected_records or result.dlq:
        raise RuntimeError(
            f"{processes} workers: read {unique} distinct records ({read} in all), expected "
            f"{workload.expected_records}, dlq {result.dlq}; the workers counted "
            f"{counted.get('cdcnorm_messages_in_total', 0):,.0f} messages in, "
            f"{counted.get('cdcnorm_records_out_total', 0):,.0f} records acknowledged; their logs: "
            + ", ".join(str(log) for log in fleet.logs)
        )
    result.records_read = read
    result.duplicates = read - unique
    return result, read


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("worker throughput of 1, 2 and 4 processes on a 4-partition topic", broker="tansu")
    parser.add_argument("--messages", type=int, default=None,
                        help="messages per fleet (default by --size: "
                        + ", ".join(f"{k} {v:,}" for k, v in MESSAGES.items()) + ")")
    parser.add_argument("--processes", default="1,2,4", help="fleet sizes (default 1,2,4)")
    parser.add_argument("--bootstrap", default=None,
                        help="use this running broker instead of starting one (--broker says which kind it is)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    n = args.messages or MESSAGES[args.size]
    sizes = [int(p) for p in args.processes.split(",")]
    report = BenchReport("scaling", args.size)
    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-bench-scaling-"))
    broker = Broker.start(args.broker, args.bootstrap, workdir)
    results: dict[int, WorkerResult] = {}
    try:
        for k in sizes:
            res, read = run_fleet(broker, n, k, workdir)
            results[k] = res
            print(f"{k} worker(s): {res.rate:,.0f} msg/s, {res.cpu_per_message_us:.1f} us CPU/msg, "
                  f"machine CPU {res.machine_busy:.0%} busy, {read:,} records read ({res.duplicates:,} replayed by rebalances)", flush=True)
    finally:
        broker.stop()
    report.params.update(broker=broker.description, messages=n, partitions=PARTITIONS, processes=sizes, cpus=os.cpu_count(),
                         load_avg=os.getloadavg()[0])
    one = results.get(1) or results[min(results)]
    base_name = f"{one.processes} process"
    # The speed-up the machine had room for: k times, unless one process already kept part of
    # the cores busy (itself, the broker, Redis): then at most 1 / (that share).
    room = 1.0 / one.machine_busy if one.machine_busy > 0 else math.inf
    for k, res in sorted(results.items()):
        if res is one:
            continue
        available = min(k / one.processes, room)
        report.add(Ratio(f"msgs/s, {k} processes", res.rate, one.rate, "msgs/s", baseline_name=base_name,
                         note=f"the idle CPU left room for {available:.2f}x; reached "
                         f"{res.rate / one.rate / available:.0%} of that"))
    for k, res in sorted(results.items()):
        report.add(Ratio(f"CPU per message, {k} processes", res.cpu_per_message_us, one.cpu_per_message_us,
                         "us/msg", baseline_name=base_name,
                         note=f"{res.rate:,.0f} msg/s; machine CPU {res.machine_busy:.0%} busy "
                         f"({os.cpu_count()} cores); {res.duplicates:,} records replayed by rebalances"))
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
