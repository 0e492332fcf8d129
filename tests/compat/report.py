"""Per-format report: how many golden records the real Connect/Debezium runtime accepts.

    .venv/bin/python -m tests.compat.report [FORMAT ...] [--show]

Runs every golden case of ``tests/data`` (or of the named formats) through its decoder and the
``ConnectCompat`` JVM, and prints records checked and rejected per format, then the rejections
grouped by stage and message (``--show`` prints each rejected record too).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from tests.compat.records import golden_records
from tests.compat.runtime import ConnectChecker
from tests.goldens import cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("formats", nargs="*", help="format ids (default: all)")
    parser.add_argument("--show", action="store_true", help="print each rejected record")
    args = parser.parse_args()
    checker = ConnectChecker(Path(".pytest_cache") / "connect-compat")
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    reasons: collections.Counter[tuple[str, str | None, str]] = collections.Counter()
    try:
        for case in cases():
            if args.formats and case.format_id not in args.formats:
                continue
            records = golden_records(case)
            verdicts = checker.check((r.topic, r.key_bytes(), r.value_bytes()) for r in records)
            for record, verdict in zip(records, verdicts, strict=True):
                counts[case.format_id][0] += 1
                if verdict.ok:
                    continue
                counts[case.format_id][1] += 1
                reasons[(case.format_id, verdict.stage, (verdict.error or "")[:160])] += 1
                if args.show:
                    print(f"{case} {verdict.stage}: {verdict.error}\n  {record.to_json_line().decode()[:2000]}")
    finally:
        checker.close()
    total = [0, 0]
    print(f"{'format':16} {'checked':>8} {'rejected':>9}")
    for fmt, (n, bad) in sorted(counts.items()):
        print(f"{fmt:16} {n:8} {bad:9}")
        total[0] += n
        total[1] += bad
    print(f"{'total':16} {total[0]:8} {total[1]:9}")
    for (fmt, stage, error), n in reasons.most_common():
        print(f"{n:5} {fmt} {stage}: {error}")


if __name__ == "__main__":
    main()
