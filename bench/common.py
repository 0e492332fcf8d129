"""The shared benchmark harness: sizes, timing, ratio tables with targets, JSON results.

Every figure a benchmark reports is a :class:`Ratio`: a measured value against a baseline
measured **in the same run** on the same machine (so a loaded 2-core box shifts both), with the
target it should meet. A bench script looks like::

    args = bench_parser("what it measures").parse_args()
    report = BenchReport("decoders", args.size, params={...})
    times = interleaved({"baseline": run_baseline, "pipeline": run_pipeline}, repeats=5)
    report.add(Ratio("canal-json msgs/s", n / times["pipeline"], n / times["baseline"], "msgs/s", target=0.35))
    return report.finish(args)

``finish`` prints a rich table and writes the JSON result (``--json``, default
``var/bench/<bench>.json``). Targets are reported, never asserted: the exit code is 0 unless the
benchmark itself failed. ``python -m bench.common summary FILE...`` prints one table over
several JSON results (``bench/run`` uses it).

A bench that needs a broker asks :func:`bench_parser` for ``--broker`` (``tansu`` or ``kafka``,
and ``both`` where the script measures on each) and starts it with :func:`start_bench_broker`,
which is :func:`service.local.start_broker`: the same brokers the tests and ``cdcnorm up`` start.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.local import LocalBroker

__all__ = [
    "BENCH_BROKERS",
    "SIZES",
    "BenchReport",
    "Info",
    "Ratio",
    "bench_parser",
    "bench_workdir",
    "broker_pids",
    "brokers_of",
    "interleaved",
    "jvm_cpu_seconds",
    "percentile",
    "process_cpu_seconds",
    "rss_bytes",
    "start_bench_broker",
    "stop_bench_broker",
    "summary",
]

SIZES = ("tiny", "small", "full")
"""``tiny``: smoke tests (seconds); ``small``: ``bench/run`` (minutes in all); ``full``: README numbers."""

RESULTS_DIR = Path(__file__).resolve().parents[1] / "var" / "bench"


BENCH_BROKERS = ("kafka", "tansu")
"""The brokers a bench can start (:data:`service.local.BROKERS`), in the order ``--broker both`` runs them."""


@contextlib.contextmanager
def bench_workdir(kept: Path | None, prefix: str = "cdcnorm-bench-") -> Iterator[Path]:
    """The bench's working folder: ``kept`` (``--workdir``: made if missing, left in place), else
    a temporary one removed at the end."""
    workdir = kept or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        yield workdir
    finally:
        if kept is None:
            shutil.rmtree(workdir, ignore_errors=True)


def bench_parser(description: str, broker: str | None = None, *, both: bool = False,
                 catalog: bool = False) -> argparse.ArgumentParser:
    """An argument parser with the options every bench script takes: ``--size`` and ``--json``.

    A script that starts a broker passes its default ``broker`` and gets ``--broker kafka|tansu``
    (with ``both``, also ``--broker both``: the script measures on each, one after the other).

    >>> bench_parser("x", "tansu").parse_args(["--broker", "kafka"]).broker
    'kafka'
    >>> bench_parser("x", "both", both=True).parse_args([]).broker
    'both'
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", choices=SIZES, default="small", help="workload size (default: small)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON result")
    if broker is not None:
        choices = [*BENCH_BROKERS, "both"] if both else list(BENCH_BROKERS)
        if broker not in choices:
            raise ValueError(f"default broker {broker!r} is not one of {choices}")
        what = "Apache Kafka (KRaft, one node) or Tansu" + (", or each in turn" if both else "")
        parser.add_argument("--broker", choices=choices, default=broker,
                            help=f"the local broker to start: {what} (default: {broker})")
    if catalog:
        parser.add_argument("--catalog", choices=BENCH_CATALOGS, default="hadoop",
                            help="the sink's Iceberg catalog: a local folder, or Apache Iceberg's REST catalog server "
                            "started for the run, as the tests and cdcnorm up --catalog rest start it (default: hadoop)")
    return parser


def brokers_of(choice: str) -> list[str]:
    """The brokers a ``--broker`` value names, in the order they run.

    >>> brokers_of("both"), brokers_of("tansu")
    (['kafka', 'tansu'], ['tansu'])
    """
    if choice == "both":
        return list(BENCH_BROKERS)
    if choice not in BENCH_BROKERS:
        raise ValueError(f"unknown broker {choice!r}; expected one of {', '.join(BENCH_BROKERS)} or both")
    return [choice]


def start_bench_broker(kind: str, log_dir: Path) -> LocalBroker:
    """Start a local broker of ``kind`` (:func:`service.local.start_broker`), logging into
    ``log_dir``; say which and how long it took. Stop it with :func:`stop_bench_broker`."""
    from service.local import start_broker

    started = time.perf_counter()
    broker = start_broker(kind, log_dir=log_dir)
    print(f"broker: {broker.description}, started in {time.perf_counter() - started:.1f}s", flush=True)
    return broker


BENCH_CATALOGS = ("hadoop", "rest")
"""The Iceberg catalogs a sink bench writes through (``--catalog``)."""


def start_bench_catalog(kind: str, workdir: Path) -> tuple[dict[str, Any], Callable[[], None]]:
    """The sink's ``catalog`` section for a catalog of ``kind`` with its state in ``workdir``,
    and how to stop it: a REST catalog is Apache Iceberg's server
    (:func:`service.local_catalog.start_rest_catalog`, the code the tests and ``cdcnorm up
    --catalog rest`` use), started here."""
    if kind == "hadoop":
        return {"warehouse": str(workdir / "warehouse")}, lambda: None
    if kind != "rest":
        raise ValueError(f"unknown catalog {kind!r}; expected one of {', '.join(BENCH_CATALOGS)}")
    from service.local_catalog import start_rest_catalog

    started = time.perf_counter()
    server = start_rest_catalog(workdir / "rest")
    print(f"catalog: {server.extra['description']}, started in {time.perf_counter() - started:.1f}s", flush=True)
    return server.section(), server.stop


def stop_bench_broker(broker: LocalBroker) -> None:
    """Stop ``broker`` and remove a Kafka node's data (what the bench produced); its
    ``server.log`` stays."""
    import shutil

    broker.stop()
    for node in getattr(broker, "nodes", ()):
        shutil.rmtree(node.directory / "data", ignore_errors=True)


def broker_pids(broker: LocalBroker) -> list[int]:
    """The process ids of a broker :func:`start_bench_broker` started (every Kafka node, or Tansu)."""
    nodes = getattr(broker, "nodes", None)
    procs = [n.process for n in nodes] if nodes is not None else [getattr(broker, "process", None)]
    return [p.pid for p in procs if p is not None and p.poll() is None]


JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""HotSpot's JIT compiler threads (``/proc`` shows thread names cut to 15 characters)."""
GC_THREADS = ("G1 ", "GC Thread", "VM Thread")
"""HotSpot's G1 collector threads, and the VM thread that runs its pauses."""


def jvm_cpu_seconds(pids: Iterable[int]) -> tuple[float, float]:
    """CPU seconds so far of the JIT compiler threads (:data:`JIT_THREADS`) and of the garbage
    collector's (:data:`GC_THREADS`) of the processes ``pids``: the part of a JVM broker's CPU
    that warms it up or collects its garbage rather than serving requests. Read from ``/proc``
    ((0, 0) elsewhere, and for a process that is not a JVM)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    jit = gc = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text()
                is_jit = name.startswith(JIT_THREADS)
                if not is_jit and not name.startswith(GC_THREADS):
                    continue
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            used = int(fields[11]) + int(fields[12])  # utime, stime
            if is_jit:
                jit += used
            else:
                gc += used
    return jit / ticks, gc / ticks


def process_cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` (and their threads) so far; 0 for one gone."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@dataclass(frozen=True)
class Ratio:
    """A measured ``value`` against a ``baseline`` of the same run, with an optional target.

    ``ratio = value / baseline``. With ``lower_is_better`` the target is a ceiling
    (``ratio <= target``), else a floor (``ratio >= target``).

    >>> Ratio("x", 50.0, 100.0, "msgs/s", target=0.35).met
    True
    >>> Ratio("rss", 130.0, 100.0, "MiB", target=1.2, lower_is_better=True).met
    False
    """

    name: str
    value: float
    baseline: float
    unit: str
    target: float | None = None
    lower_is_better: bool = False
    baseline_name: str = "baseline"
    note: str = ""

    @property
    def ratio(self) -> float:
        if self.baseline == 0:
            return math.inf if self.value else 1.0
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.ratio <= self.target if self.lower_is_better else self.ratio >= self.target

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"{'<=' if self.lower_is_better else '>='} {self.target:g}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, met=self.met, target_text=self.target_text)
        return out


@dataclass(frozen=True)
class Info:
    """An absolute figure printed next to the ratios (context, not a target)."""

    name: str
    value: float | str
    unit: str = ""
    note: str = ""


@dataclass
class BenchReport:
    """The ratios and infos of one benchmark run, printed as a table and written as JSON."""

    bench: str
    size: str
    params: dict[str, Any] = field(default_factory=dict)
    ratios: list[Ratio] = field(default_factory=list)
    infos: list[Info] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def add(self, ratio: Ratio) -> Ratio:
        self.ratios.append(ratio)
        return ratio

    def info(self, name: str, value: float | str, unit: str = "", note: str = "") -> None:
        self.infos.append(Info(name, value, unit, note))

    def to_json(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "size": self.size,
            "params": self.params,
            "seconds": round(time.time() - self.started, 1),
            "ratios": [r.to_json() for r in self.ratios],
            "infos": [asdict(i) for i in self.infos],
        }

    def print(self) -> None:
        _print_results([self.to_json()], title=f"{self.bench} ({self.size})")

    def write_json(self, path: Path | None = None) -> Path:
        path = path or RESULTS_DIR / f"{self.bench}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, default=str))
        return path

    def finish(self, args: argparse.Namespace | None = None) -> int:
        """Print the table, write the JSON; returns the process exit code (0)."""
        self.print()
        path = self.write_json(getattr(args, "json", None))
        print(f"results: {path}", flush=True)
        return 0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    return str(value)


def _print_results(results: Sequence[Mapping[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(140, Console().width))
    table = Table(title=title, show_lines=False)
    for col, justify in (
        ("bench", "left"),
        ("figure", "left"),
        ("value", "right"),
        ("baseline", "right"),
        ("unit", "left"),
        ("ratio", "right"),
        ("target", "right"),
        ("met", "center"),
        ("note", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for res in results:
        for r in res.get("ratios", []):
            met = r.get("met")
            mark = "-" if met is None else ("[green]yes[/green]" if met else "[red]NO[/red]")
            table.add_row(
                res["bench"],
                r["name"],
                _fmt(r["value"]),
                f"{_fmt(r['baseline'])} ({r.get('baseline_name', 'baseline')})",
                r["unit"],
                f"{r['ratio']:.3f}",
                r.get("target_text", "-"),
                mark,
                r.get("note", ""),
            )
        for i in res.get("infos", []):
            table.add_row(res["bench"], i["name"], _fmt(i["value"]), "", i.get("unit", ""), "", "", "", i.get("note", ""))
    console.print(table)


def summary(paths: Iterable[Path]) -> int:
    """Print one table over several JSON results; returns the number of missed targets."""
    results = []
    for path in paths:
        try:
            results.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            print(f"cannot read {path}: {exc}", file=sys.stderr)
    _print_results(results, title="cdcnorm benchmarks: ratios against same-run baselines")
    missed = [
        f"{res['bench']}: {r['name']}" for res in results for r in res.get("ratios", []) if r.get("met") is False
    ]
    total = sum(1 for res in results for r in res.get("ratios", []) if r.get("met") is not None)
    print(f"targets met: {total - len(missed)}/{total}" + (f"; missed: {'; '.join(missed)}" if missed else ""))
    return len(missed)


# ----------------------------------------------------------------------------- measuring


def interleaved(
    fns: Mapping[str, Callable[[], Any]], repeats: int = 5, warmup: int = 1, clock: str = "wall"
) -> dict[str, float]:
    """The best time (seconds) of each function, run in round robin.

    Round robin plus best-of keeps two measurements comparable on a shared, noisy machine: a
    burst of load from another process hits both, and the minimum is the least disturbed run.
    ``clock="cpu"`` measures this process's CPU time instead of wall time (for single-threaded,
    CPU-bound work: time spent waiting for a core other processes hold is not counted).
    The garbage collector runs between calls, not inside them.
    """
    now = time.process_time if clock == "cpu" else time.perf_counter
    best = {name: math.inf for name in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            gc.collect()
            started = now()
            fn()
            elapsed = now() - started
            if i >= warmup:
                best[name] = min(best[name], elapsed)
    return best


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` percentile (0..100) with linear interpolation.

    >>> percentile([1, 2, 3, 4], 50)
    2.5
    """
    if not values:
        return math.nan
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def rss_bytes(pid: int | None = None) -> int:
    """The resident set size of a process (default: this one)."""
    import psutil

    return int(psutil.Process(pid or os.getpid()).memory_info().rss)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bench harness tools")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("summary", help="one table over JSON results")
    p.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    summary(args.paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
