"""Per-core speed against the peer: Flink SQL and ``cdcnorm transform`` on the same file.

Both turn one file of CDC messages into Debezium JSON:

* **canal-json**: Canal JSON inserts of 8 typed columns (:mod:`bench.typed_canal`);
* **debezium-json** (with schema): the Debezium JSON records cdcnorm makes of those messages.

Flink 2.3 SQL (PyFlink, in the virtualenv of ``scripts/ensure-flink-venv``, the one the Flink
agreement tests use) runs ``INSERT INTO sink SELECT * FROM source``: filesystem source in the
vendor format, filesystem sink in ``debezium-json``, parallelism 1 (:mod:`bench.flink_peer_job`).
cdcnorm runs ``cdcnorm transform -f FORMAT FILE`` writing its JSON lines to a file.

Each side runs on two sizes of the file; the **marginal** rates between them, ``(n2 - n1) /
(cpu2 - cpu1)``, leave JVM and interpreter start-up out. Reported per format: messages per CPU
second (every thread of the process and its children, so Flink's JIT and GC count) and per wall
second, cdcnorm against Flink: target 1.0 per CPU second (issue 29). Per wall second is context:
Flink's JVM spreads over the machine's cores, cdcnorm's loop is one thread.

Run: ``python -m bench.flink_peer [--size tiny|small|full] [--formats canal-json,debezium-json]
[--repeats R]`` (sizes: 20k/100k, 100k/500k, 400k/2M messages). With ``--repeats`` the runs are
repeated in interleaved rounds and each size's best CPU and wall times count: the JVM's start-up
and JIT vary from run to run, so one round of the small size can be far off. Needs Java and the Flink virtualenv (made on
first use, about 850 MB).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import BenchReport, Ratio, bench_parser, bench_workdir
from bench.typed_canal import FLINK_CANAL_COLUMNS, FLINK_DEBEZIUM_COLUMNS, canal_messages, write_lines

__all__ = ["Run", "main"]

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"tiny": (20_000, 100_000), "small": (100_000, 500_000), "full": (400_000, 2_000_000)}
FORMATS = ("canal-json", "debezium-json")
TARGET = 1.0


@dataclass(frozen=True)
class Run:
    """One side's run on one file: messages in, records out, CPU and wall seconds."""

    messages: int
    records: int
    cpu_s: float
    wall_s: float


def marginal(small: Run, large: Run) -> tuple[float, float]:
    """Messages per CPU second and per wall second between two runs.

    >>> marginal(Run(10, 10, 1.0, 2.0), Run(110, 110, 2.0, 2.5))
    (100.0, 200.0)
    """
    n = large.messages - small.messages
    return n / max(large.cpu_s - small.cpu_s, 1e-9), n / max(large.wall_s - small.wall_s, 1e-9)


def best(runs: Sequence[Run]) -> Run:
    """The best of repeated runs of one size: the least CPU time and the least wall time.

    >>> best([Run(10, 10, 2.0, 1.0), Run(10, 10, 1.5, 3.0)])
    Run(messages=10, records=10, cpu_s=1.5, wall_s=1.0)
    """
    return Run(runs[0].messages, runs[0].records, min(r.cpu_s for r in runs), min(r.wall_s for r in runs))


def round_marginals(small: Sequence[Run], large: Sequence[Run]) -> list[float]:
    """Each round's own marginal messages per CPU second (its small and large run).

    >>> [round(x) for x in round_marginals([Run(10, 10, 1.0, 1.0), Run(10, 10, 1.9, 1.0)], [Run(110, 110, 2.0, 2.0)] * 2)]
    [100, 1000]
    """
    return [marginal(s, large_run)[0] for s, large_run in zip(small, large, strict=True)]


def flink_python() -> str:
    """The Flink virtualenv's python (made by scripts/ensure-flink-venv on first use)."""
    done = subprocess.run([str(ROOT / "scripts" / "ensure-flink-venv")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"flink_peer: the Flink virtualenv is not available:\n{done.stderr.strip()}")
    return str(ROOT / done.stdout.strip().splitlines()[-1])


def run_cdcnorm(format_id: str, path: Path, out: Path, messages: int) -> Run:
    """``cdcnorm transform -f FORMAT path > out``, timed by the kernel's accounting of the child.

    Each side's output is removed once counted (cdcnorm's is ~3 KB a record, 6 GB for 2M), so
    the outputs of earlier runs do not fill the page cache."""
    cli = Path(sys.executable).with_name("cdcnorm")
    command = [str(cli), "transform", "-f", format_id, "--no-headers", str(path)]
    started = time.perf_counter()
    with out.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"flink_peer: cdcnorm transform exited {proc.returncode}: {err[-2000:]}")
    with out.open("rb") as f:
        records = sum(1 for _ in f)
    out.unlink()  # see _drop
    return Run(messages, records, usage.ru_utime + usage.ru_stime, wall)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody reaps does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def wait_gone(pids: Sequence[int], timeout_s: float = 60.0) -> None:
    """Wait (at most ``timeout_s``) until the processes end: the Flink job's JVM goes on for about
    2 s after the job's Python process exits, at 1.3-1.5 cores; run beside the next measurement,
    it made cdcnorm's runs ~20% slower per CPU second (two vCPUs, shared caches)."""
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def run_flink(python: str, format_id: str, path: Path, out: Path, messages: int) -> Run:
    """The Flink SQL job on ``path`` (:mod:`bench.flink_peer_job`)."""
    columns = FLINK_CANAL_COLUMNS if format_id == "canal-json" else FLINK_DEBEZIUM_COLUMNS
    options = {"debezium-json.schema-include": "true"} if format_id == "debezium-json" else {}
    job = {"format": format_id, "options": options, "columns": columns, "input": str(path), "output": str(out)}
    job_file = out.with_suffix(".job.json")
    job_file.write_text(json.dumps(job))
    started = time.perf_counter()
    done = subprocess.run(
        [python, str(ROOT / "bench" / "flink_peer_job.py"), str(job_file)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"flink_peer: the Flink job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)  # counted by the job; see run_cdcnorm
    wait_gone([int(pid) for pid in result.get("pids", [])])
    return Run(messages, int(result["rows"]), float(result["cpu_s"]), wall)


def debezium_lines(canal: Path, out: Path) -> int:
    """cdcnorm's Debezium JSON values (with schema) of the Canal file, one per line."""
    from transforms.decoders import Message, create_decoder
    from transforms.envelope import EmitOptions
    from transforms.pipeline import Pipeline

    pipeline = Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm"))

    def values() -> object:
        with canal.open("rb") as f:
            for line in f:
                for record in pipeline.process(Message(value=line.rstrip(b"\n"), topic="src")):
                    value = record.value_bytes()
                    if value is not None:
                        yield value

    return write_lines(out, values())  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("cdcnorm transform against Flink SQL, per CPU second and per wall second")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: canal-json, debezium-json")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of every run, interleaved; each size's best CPU and best wall time count")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"--formats: {', '.join(unknown)} not among {', '.join(FORMATS)}")
    small, large = SIZES[args.size]
    if args.repeats < 1:
        parser.error(f"--repeats: {args.repeats}: expected at least 1")
    report = BenchReport("flink_peer", args.size,
                         params={"messages": [small, large], "formats": formats, "repeats": args.repeats})
    python = flink_python()
    with bench_workdir(args.workdir, "cdcnorm-flink-peer-") as work:
        files: dict[tuple[str, int], Path] = {}
        for n in (small, large):
            canal = work / f"canal-{n}.jsonl"
            write_lines(canal, canal_messages(n))
            files[("canal-json", n)] = canal
            if "debezium-json" in formats:
                files[("debezium-json", n)] = work / f"debezium-{n}.jsonl"
                debezium_lines(canal, files[("debezium-json", n)])
        for format_id in formats:
            runs: dict[tuple[str, int], list[Run]] = {}
            for round_ in range(args.repeats):  # rounds interleaved: both sides see the same machine
                for n in (small, large):
                    path = files[(format_id, n)]
                    done = {
                        "cdcnorm": run_cdcnorm(format_id, path, work / f"ours-{format_id}-{n}.jsonl", n),
                        # a directory per round: Flink's filesystem sink adds files to one it finds
                        "flink": run_flink(python, format_id, path, work / f"flink-{format_id}-{n}-{round_}", n),
                    }
                    for side, run in done.items():
                        if run.records != n:
                            raise SystemExit(f"flink_peer: {side} wrote {run.records} records of {n} messages")
                        runs.setdefault((side, n), []).append(run)
            ours_cpu, ours_wall = marginal(best(runs[("cdcnorm", small)]), best(runs[("cdcnorm", large)]))
            flink_cpu, flink_wall = marginal(best(runs[("flink", small)]), best(runs[("flink", large)]))
            print(f"{format_id}: cdcnorm {ours_cpu:,.0f} msg/CPU-s, {ours_wall:,.0f} msg/s; "
                  f"Flink {flink_cpu:,.0f} msg/CPU-s, {flink_wall:,.0f} msg/s", flush=True)
            for side in ("cdcnorm", "flink"):  # each round's own figure: a start-up far off shows here
                rounds = round_marginals(runs[(side, small)], runs[(side, large)])
                if len(rounds) > 1:
                    text = ", ".join(f"{cpu:,.0f}" for cpu in rounds)
                    print(f"  {side} msg/CPU-s by round: {text}", flush=True)
                    report.info(f"{format_id} {side} msg/CPU-s by round", text, "msg/CPU-s",
                                "a figure far from the others: a start-up that varied; see --size full")
            note = "marginal between the two sizes" + (f", best of {args.repeats}" if args.repeats > 1 else "")
            report.add(Ratio(f"{format_id} msgs per CPU second", ours_cpu, flink_cpu, "msg/CPU-s", target=TARGET,
                             baseline_name="Flink SQL", note=note))
            report.add(Ratio(f"{format_id} msgs per wall second", ours_wall, flink_wall, "msg/s",
                             baseline_name="Flink SQL", note="Flink's JVM uses every core; cdcnorm one"))
    return report.finish(args)


if __name__ == "__main__":
    sys.exit(main())
