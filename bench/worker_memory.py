"""Worker memory over a long run: RSS of one worker process sampled while it normalizes ``N`` messages.

One worker process reads ``N`` canal-json messages (the :mod:`bench.service_e2e` workload,
produced beforehand to a 4-partition topic) while the bench samples its resident set size with
psutil every half second. The output is counted afterwards (read until a fetch returns nothing).

Reported: the peak RSS against the 300 MiB limit (target: under it, over 1M messages), and the
peak against the RSS after the first 10% of the messages (growth; a leak shows as a ratio that
grows with ``N``).

Run: ``python -m bench.worker_memory [--size tiny|small|full] [--messages N] [--broker tansu|kafka]``;
``full`` is 1M messages (Tansu keeps ~4 GB of topics in memory for that; Kafka writes them to
its log directory). The broker is Tansu by default (the earlier rounds' figures).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.common import BenchReport, Ratio, bench_parser
from bench.service_e2e import Broker, canal_workload, produce, run_workers
from service.local import create_topics

__all__ = ["main"]

MESSAGES = {"tiny": 20_000, "small": 60_000, "full": 1_000_000}
LIMIT_MIB = 300.0
GROWTH_TARGET = 1.5
MIB = 2**20


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("worker RSS over a long run", broker="tansu")
    parser.add_argument("--messages", type=int, default=None,
                        help="messages (default by --size: " + ", ".join(f"{k} {v:,}" for k, v in MESSAGES.items()) + ")")
    parser.add_argument("--bootstrap", default=None,
                        help="use this running broker instead of starting one (--broker says which kind it is)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    n = args.messages or MESSAGES[args.size]
    report = BenchReport("worker_memory", args.size)
    workdir = Path(tempfile.mkdtemp(prefix="cdcnorm-bench-memory-"))
    broker = Broker.start(args.broker, args.bootstrap, workdir)
    prefix = f"bm{uuid.uuid4().hex[:6]}"
    source = f"{prefix}-src"
    try:
        workload = canal_workload(n, prefix, source)
        create_topics(broker.bootstrap, [source], partitions=4)
        produce(broker.bootstrap, source, workload.messages)
        del workload.messages[:]  # the bench's own memory is not what is measured
        workload.messages.extend([(b"", b"")] * n)  # run_workers only needs the count
        print(f"produced {n:,} messages; expecting {workload.expected_records:,} records", flush=True)
        result = run_workers(broker, workload, source, 1, workdir, rss_every_s=0.5)
    finally:
        broker.stop()
    if result.records_read != workload.expected_records or result.dlq:
        raise RuntimeError(f"output incomplete: read {result.records_read}, expected {workload.expected_records}")
    samples = result.rss_samples
    warm = next((rss for _, seen, rss in samples if seen >= n // 10), samples[0][2] if samples else result.peak_rss)
    for t, seen, rss in samples[:: max(1, len(samples) // 12)]:
        print(f"  t={t:6.1f}s consumed={seen:>9,} rss={rss / MIB:6.1f} MiB", flush=True)
    report.params.update(broker=broker.description, messages=n, samples=len(samples), cpus=os.cpu_count())
    report.add(Ratio("peak worker RSS", result.peak_rss / MIB, LIMIT_MIB, "MiB", target=1.0, lower_is_better=True,
                     baseline_name="limit", note=f"{n:,} messages, {result.rate:,.0f} msg/s"))
    report.add(Ratio("RSS growth (peak / after 10%)", result.peak_rss / MIB, warm / MIB, "MiB",
                     target=GROWTH_TARGET, lower_is_better=True, baseline_name="after 10%"))
    report.info("records read", result.records_read, "records", "every output record, counted")
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
