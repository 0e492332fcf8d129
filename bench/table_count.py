"""Normalize throughput and memory as the number of tables grows (1 / 1k / 10k / 100k tables).

The loop of ``cdcnorm transform`` and of the worker's normalization, without Kafka: each Canal
message of :mod:`bench.typed_canal` through ``Pipeline.process``, then the key and value bytes of
its records. The messages are spread round-robin over ``T`` tables, three per table and at least
60,000 in all, so every table is met once in the first third and the marginal rate over the rest
measures a warm process: what the per-table caches keep, bounded by the table budget
(``worker.table_cache_columns``, :mod:`transforms.table_budget`), rather than rebuilding each
table's schema per message.

Each table count runs in a fresh process (so its peak RSS is its own); the report gives
messages per CPU second over the last two thirds against one table, the targets of issue 29
(10,000 tables: 0.8, 100,000: 0.5), and each run's peak RSS and the memory per table above the
one-table run. The counts run in turn, ``--repeats`` rounds (the best rate of each counts).
Run: ``python -m bench.table_count [--size tiny|small|full] [--budget COLUMNS] [--repeats N]``
(tiny: 1 / 1k / 10k tables; small and full add 100k).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

from bench.common import BenchReport, Ratio, bench_parser

__all__ = ["main", "measure"]

COUNTS = {"tiny": (1, 1_000, 10_000), "small": (1, 1_000, 10_000, 100_000), "full": (1, 1_000, 10_000, 100_000)}
TARGETS = {10_000: 0.8, 100_000: 0.5}
MIN_MESSAGES = 60_000


def measure(tables: int, budget: int | None) -> dict[str, float]:
    """Run the loop in this process: messages/CPU-s of the warm part, and the peak RSS."""
    from bench.typed_canal import canal_message
    from transforms.decoders import Message, create_decoder
    from transforms.envelope import EmitOptions
    from transforms.pipeline import Pipeline
    from transforms.table_budget import set_table_budget

    if budget is not None:
        set_table_budget(budget)
    n = max(MIN_MESSAGES, 3 * tables)
    pipeline = Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm"))
    warm = n // 3
    started = warm_started = time.process_time()
    for i in range(n):  # made as they go (1-2 us each), so the peak RSS is the pipeline's
        if i == warm:
            warm_started = time.process_time()
        for record in pipeline.process(Message(value=canal_message(i, tables), topic="src")):
            record.key_bytes()
            record.value_bytes()
    ended = time.process_time()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"messages": n, "rate": (n - warm) / (ended - warm_started), "first_third_s": warm_started - started,
            "rss": rss}


def _child(tables: int, budget: int | None) -> dict[str, float]:
    args = [sys.executable, "-m", "bench.table_count", "--child", str(tables)]
    if budget is not None:
        args += ["--budget", str(budget)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"table_count: the run of {tables} tables failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("normalize throughput and memory by number of tables")
    parser.add_argument("--budget", type=int, default=None, help="table budget in columns (default: the library's)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per table count, interleaved; the best rate counts (default: 1 tiny, 3 otherwise)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child, args.budget)))
        return 0
    from transforms.table_budget import DEFAULT_TABLE_BUDGET

    budget = args.budget if args.budget is not None else DEFAULT_TABLE_BUDGET
    report = BenchReport("table_count", args.size, params={"tables": COUNTS[args.size], "budget_columns": budget})
    repeats = args.repeats or (1 if args.size == "tiny" else 3)
    results: dict[int, dict[str, float]] = {}
    for round_ in range(repeats):  # interleaved: a busy moment of the machine hits every count alike
        for tables in COUNTS[args.size]:
            r = _child(tables, args.budget)
            print(f"round {round_ + 1}: {tables:>7,} tables: {r['rate']:,.0f} msg/CPU-s warm, "
                  f"peak RSS {r['rss'] / 2**20:,.0f} MiB", flush=True)
            best = results.get(tables)
            if best is None or r["rate"] > best["rate"]:
                results[tables] = r
    one = results[1]
    for tables, r in results.items():
        if tables == 1:
            continue
        per_table = (r["rss"] - one["rss"]) / tables
        report.add(Ratio(f"{tables:,} tables msgs/CPU-s", r["rate"], one["rate"], "msg/CPU-s",
                         target=TARGETS.get(tables), baseline_name="1 table",
                         note=f"peak RSS {r['rss'] / 2**20:,.0f} MiB, {per_table / 1024:,.1f} KiB per table"))
        report.info(f"{tables:,} tables peak RSS", round(r["rss"] / 2**20), "MiB",
                    note=f"1 table: {one['rss'] / 2**20:,.0f} MiB")
    return report.finish(args)


if __name__ == "__main__":
    sys.exit(main())
