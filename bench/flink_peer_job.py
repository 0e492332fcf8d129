"""Runs inside the PyFlink virtualenv (scripts/ensure-flink-venv), not in the project's .venv.

The peer side of :mod:`bench.flink_peer`: Flink SQL turns one CDC file into Debezium JSON, as
``cdcnorm transform`` does, and reports what that cost::

    .venv-flink/bin/python bench/flink_peer_job.py JOB.json

``JOB.json``: ``{"format": "canal-json", "options": {...}, "columns": [["id", "BIGINT"], ...],
"input": "/abs/in.jsonl", "output": "/abs/out-dir"}``. The job is
``INSERT INTO sink SELECT * FROM source``: a filesystem source with the vendor format, a
filesystem sink with ``debezium-json``, parallelism 1, streaming mode (the CDC formats are
changelog sources, which batch mode refuses). On stdout, one JSON line:
``{"rows": N, "wall_s": ..., "cpu_s": ...}``: the rows in the output files, the seconds from
submitting the job to its end, and the CPU seconds of this process and the JVM it started
(``/proc``), start-up included; the caller takes the difference of two sizes. ``pids``: the
JVM and any other process this one started, which outlive it for a few seconds of shutdown (the
caller waits for them, so they do not run beside the next measurement).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _tree(root: int) -> tuple[float, list[int]]:
    """User + system CPU seconds of ``root`` and every descendant alive, from ``/proc``, and the
    descendants' pids."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    todo = [root]
    seen: list[int] = []
    while todo:
        pid = todo.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        seen.append(pid)
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return total / ticks, [pid for pid in seen if pid != root]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _with(options: dict[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


def main(job_file: str) -> int:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    job: dict[str, Any] = json.loads(Path(job_file).read_text())
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    columns = ", ".join(f"{_quote(name)} {sql_type}" for name, sql_type in job["columns"])
    source = {"connector": "filesystem", "path": job["input"], "format": job["format"], **job.get("options", {})}
    sink = {"connector": "filesystem", "path": job["output"], "format": "debezium-json"}
    env.execute_sql(f"CREATE TEMPORARY TABLE source ({columns}) WITH ({_with(source)})")
    env.execute_sql(f"CREATE TEMPORARY TABLE sink ({columns}) WITH ({_with(sink)})")
    started = time.perf_counter()
    env.execute_sql("INSERT INTO sink SELECT * FROM source").wait()
    wall = time.perf_counter() - started
    cpu, pids = _tree(os.getpid())
    rows = 0
    for path in Path(job["output"]).rglob("*"):
        if path.is_file() and not path.name.endswith(".crc"):
            with path.open("rb") as f:
                rows += sum(1 for _ in f)
    print(json.dumps({"rows": rows, "wall_s": wall, "cpu_s": cpu, "pids": pids}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
