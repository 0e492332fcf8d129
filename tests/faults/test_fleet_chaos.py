"""Fleet chaos (issue 18 item 1): workers killed, stopped, added and removed while the stream flows.

The workload (:mod:`tests.faults.workload`) is ``CDCNORM_FLEET_CHANGES`` changes (default
200 000) over 6 tables in 3 source formats, 2 tables each: ``canal-json``, ``maxwell-json`` and
``qlik-json``, whose data messages need the metadata registry (one metadata message per table,
sent first; the workers keep it in the metadata log). Each format has its own source topic of 6
partitions; 3 worker processes form one consumer group. (Faust's assignor co-partitions topics
of equal partition count: partition *n* of every source topic goes to the same worker, so the
busy workers are bounded by one topic's partition count, as ``k8s``'s ``source-partitions``
annotation says. With 2 partitions per topic a third worker would idle.)

After the Qlik metadata is in, the stream is produced at a steady rate for about
:data:`PRODUCE_S` seconds while a seeded scheduler (``random.Random(SEED)``) acts every 3 to 6 s:
:data:`KILLS` times it SIGKILLs or SIGTERMs a random worker (both kinds mixed; one that holds
partitions when any does, and a SIGKILL waits up to 5 s for it to be consuming, so that it
crashes mid-processing rather than in a rebalance, when all was committed) and starts a
replacement at once; once it adds a 4th worker and once it stops one (SIGTERM) without a
replacement. So rebalances overlap with processing and commits. A SIGTERMed worker must leave by
itself within :data:`STOP_GRACE_S` (Kubernetes' default grace period): exit code 0, or 4 when its
own stop deadline (``worker.shutdown_timeout_s``, :data:`STOP_DEADLINE_S`) cut a stuck stop short;
such a stop is printed with the tasks the worker logged as still running.

When the stream has ended and the group has committed every source offset, the normalized topics
must hold every change at least once (duplicates are counted; at-least-once allows them, and
there must be some: the replay path is exercised), in per-key order, every record (duplicates
too) with its version's values: a Qlik update that leaves ``qty`` out is completed from the row
state in Redis (``complete_partial_images``), or marks it absent, never with another version's
value; and the DLQ topic nothing; then one sink (``--once``) lands the topics in Iceberg
and every table must equal the state the generated history ends in. Run with ``-s`` to see the
schedule, the rebalances the workers logged (distinct group generations in their ``partitions
assigned`` lines), the duplicates and the rows compared.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from service.exits import EXIT_STOP_DEADLINE
from service.local import create_topics, wait_for
from tests.catalogs import TestCatalog  # the catalog is not what this test is about: hadoop
from tests.faults.procs import committed_offsets, read_warehouses, run_sink, sink_config, worker_config
from tests.faults.workload import (
    CANAL,
    DB,
    MAXWELL,
    QLIK,
    SteadyProducer,
    assert_tables_equal_expected,
    check_order,
    generate,
    produce,
    read_all,
)
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(900)]

CHANGES = int(os.environ.get("CDCNORM_FLEET_CHANGES", "200000"))
KEYS_PER_TABLE = max(50, min(2000, CHANGES // 100))
SEED = 20261125
FORMATS = {"t0": CANAL, "t1": CANAL, "t2": MAXWELL, "t3": MAXWELL, "t4": QLIK, "t5": QLIK}
PARTITIONS = 6  # per source topic
WORKERS = 3
KILLS = 12  # kill or stop events, each followed by a replacement
FIRST_EVENT_S, GAP_S = 6.0, (3.0, 6.0)
PRODUCE_S = 80.0  # the stream's length in time: it outlasts the schedule (~6 + 14 x 4.5 s)
STOP_GRACE_S = 30.0
# the workers' own stop deadline (worker.shutdown_timeout_s): a stop past it exits with code 4
STOP_DEADLINE_S = 20.0
ASSIGNED = re.compile(r"partitions assigned count=(\d+) generation=(\d+)")


@dataclass
class Event:
    """One step of the schedule: ``kill`` (SIGKILL or SIGTERM a worker, start a replacement),
    ``add`` (one more worker) or ``remove`` (SIGTERM a worker, no replacement)."""

    at_s: float
    action: str
    sig: signal.Signals | None = None


def schedule(rnd: random.Random) -> list[Event]:
    """:data:`KILLS` kill events (half SIGKILL, half SIGTERM, shuffled), an ``add`` after the
    first third of them and a ``remove`` after the second third."""
    sigs = [signal.SIGKILL] * (KILLS // 2) + [signal.SIGTERM] * (KILLS - KILLS // 2)
    rnd.shuffle(sigs)
    steps: list[tuple[str, signal.Signals | None]] = [("kill", s) for s in sigs]
    steps.insert(KILLS // 3, ("add", None))
    steps.insert(2 * KILLS // 3 + 1, ("remove", signal.SIGTERM))
    out, at = [], FIRST_EVENT_S
    for action, sig in steps:
        out.append(Event(round(at, 1), action, sig))
        at += rnd.uniform(*GAP_S)
    return out


@dataclass
class Fleet:
    """The worker processes of the group: started, signalled, and how each one ended."""

    config: dict[str, Any]
    tmp: Path
    rnd: random.Random
    live: list[WorkerProcess] = field(default_factory=list)
    stopping: list[tuple[WorkerProcess, float]] = field(default_factory=list)  # SIGTERMed, since
    stopped: list[str] = field(default_factory=list)  # how each SIGTERMed worker ended
    hung: list[str] = field(default_factory=list)
    deadline_exits: list[str] = field(default_factory=list)  # stopped at the stop deadline (exit 4)
    consumed: dict[str, int] = field(default_factory=dict)  # last scrape per worker
    all: list[WorkerProcess] = field(default_factory=list)
    born: dict[str, float] = field(default_factory=dict)
    hit_holding: int = 0  # signalled workers that held partitions

    def start(self) -> str:
        name = f"worker-{len(self.all) + 1}"
        worker = WorkerProcess(self.config, self.tmp, name)
        self.born[name] = time.monotonic()
        self.live.append(worker)
        self.all.append(worker)
        return name

    def scrape(self, worker: WorkerProcess) -> int:
        with contextlib.suppress(OSError):  # not serving yet (still starting) or gone
            self.consumed[worker.process.name] = int(worker.total("cdcnorm_messages_in_total"))
        return self.consumed.get(worker.process.name, 0)

    def signal(self, sig: signal.Signals) -> str:
        """Send ``sig`` to a random live worker, one holding partitions when there is one (a
        worker still starting or joining has nothing to lose); returns what was done."""
        held = {id(w): len(w.readiness().get("assigned_partitions", [])) for w in self.live}
        holding = [w for w in self.live if held[id(w)]] or self.live
        worker = holding[self.rnd.randrange(len(holding))]
        self.live.remove(worker)
        consumed = self.scrape(worker)
        busy = ""
        if sig == signal.SIGKILL and held[id(worker)]:
            # a crash mid-processing (not during a rebalance, when everything was committed):
            # wait, up to 5 s, until the victim's consumed count moves
            waited = time.monotonic()
            while time.monotonic() - waited < 5.0 and self.scrape(worker) == consumed:
                time.sleep(0.1)
            moved = self.consumed.get(worker.process.name, 0) > consumed
            busy = (f", killed while consuming (waited {time.monotonic() - waited:.1f}s)" if moved
                    else ", not seen consuming for 5 s")
            consumed = self.consumed.get(worker.process.name, 0)
        up = time.monotonic() - self.born[worker.process.name]
        worker.process.process.send_signal(sig)
        if sig == signal.SIGKILL:
            worker.process.process.wait(10)
        else:
            self.stopping.append((worker, time.monotonic()))
        if held[id(worker)]:
            self.hit_holding += 1
        return (f"{sig.name} {worker.process.name} (up {up:.1f}s, holding {held[id(worker)]} partitions, "
                f"consumed {consumed}{busy})")

    def reap(self, final: bool = False) -> None:
        """Note the SIGTERMed workers that ended; one past the grace period is killed and noted
        as hung (at the end, ``final``, every one still running is waited for up to the grace)."""
        left: list[tuple[WorkerProcess, float]] = []
        for worker, since in self.stopping:
            timeout = max(0.0, since + STOP_GRACE_S - time.monotonic()) if final else 0.0
            try:
                code = worker.process.process.wait(timeout)
            except subprocess.TimeoutExpired:  # still running
                if time.monotonic() - since < STOP_GRACE_S:
                    left.append((worker, since))
                    continue
                worker.process.process.kill()
                worker.process.process.wait(10)
                self.hung.append(f"{worker.process.name}: still running {STOP_GRACE_S:.0f}s after SIGTERM\n"
                                 + worker.process.log_tail(30))
                continue
            took = time.monotonic() - since
            self.stopped.append(f"{worker.process.name} exit={code} after {took:.1f}s")
            if code == EXIT_STOP_DEADLINE:  # left by itself, at its deadline: reported with what was stuck
                self.deadline_exits.append(f"{worker.process.name}\n" + worker.process.log_tail(40))
            elif code != 0:
                self.hung.append(f"{worker.process.name}: exit code {code} after SIGTERM\n" + worker.process.log_tail(30))
        self.stopping = left


def _rebalances(workers: list[WorkerProcess]) -> tuple[int, int]:
    """(distinct group generations, ``partitions assigned`` lines) in the workers' logs."""
    generations: set[int] = set()
    lines = 0
    for worker in workers:
        if worker.process.log_path is not None and worker.process.log_path.exists():
            for _count, generation in ASSIGNED.findall(worker.process.log_path.read_text(errors="replace")):
                generations.add(int(generation))
                lines += 1
    return len(generations), lines


def test_fleet_chaos_loses_nothing(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    prefix = f"fl{uuid.uuid4().hex[:8]}"
    sources = {fmt: f"{prefix}-{fmt}" for fmt in (CANAL, MAXWELL, QLIK)}
    outputs = [f"{prefix}.{DB}.{t}" for t in FORMATS]
    create_topics(kafka_bootstrap, list(sources.values()), partitions=PARTITIONS)
    create_topics(kafka_bootstrap, outputs, partitions=2)
    stream = generate(CHANGES, KEYS_PER_TABLE, SEED, FORMATS)
    topics = [sources[fmt] for fmt in stream.formats]
    entries = [{"name": topic, "format": fmt, "complete_partial_images": fmt == QLIK} for fmt, topic in sources.items()]
    config = worker_config(kafka_bootstrap, redis_url, f"{prefix}:", prefix, entries)
    group = config["worker"]["app_id"]
    config["worker"]["shutdown_timeout_s"] = STOP_DEADLINE_S
    rnd = random.Random(SEED)
    events = schedule(rnd)
    print(f"\nworkload: {stream.changes} changes {stream.counts} over {len(FORMATS)} tables {FORMATS}, "
          f"{KEYS_PER_TABLE} keys each; {len(sources)} source topics x {PARTITIONS} partitions; "
          f"{len(stream.preamble[QLIK])} qlik metadata messages first")
    steps = "; ".join(f"t={e.at_s}s {e.action}{' ' + e.sig.name if e.sig and e.action == 'kill' else ''}"
                      for e in events)
    print(f"schedule (seed {SEED}): {steps}")

    fleet = Fleet(config, tmp_path, rnd)
    producer = SteadyProducer(kafka_bootstrap, topics, stream.messages, rate=stream.changes / PRODUCE_S)
    injected: list[str] = []
    ends: dict[str, dict[int, int]] = {}
    t0 = time.monotonic()
    try:
        for _ in range(WORKERS):
            fleet.start()
        wait_for(lambda: all(w.readiness().get("ready") is True for w in fleet.live)
                 and sum(len(w.readiness().get("assigned_partitions", [])) for w in fleet.live)
                 == PARTITIONS * len(sources), 120, "the fleet of three", 0.3)
        ends[sources[QLIK]] = produce(kafka_bootstrap, sources[QLIK], stream.preamble[QLIK])
        _wait_committed(kafka_bootstrap, group, ends, 120)
        print(f"fleet of {WORKERS} ready and the qlik metadata committed after {time.monotonic() - t0:.1f}s")

        producer.start()
        started = time.monotonic()
        for event in events:
            while time.monotonic() - started < event.at_s:
                fleet.reap()
                time.sleep(0.1)
            at = f"t={time.monotonic() - started:.1f}s produced={producer.sent}"
            if event.action == "add":
                what = f"added {fleet.start()}"
            elif event.action == "remove":
                assert event.sig is not None
                what = f"removed: {fleet.signal(event.sig)}, no replacement"
            else:
                assert event.sig is not None
                what = fleet.signal(event.sig)
                what += f", started {fleet.start()}"
            injected.append(f"{at}: {what}")
            print("injected:", injected[-1])
        deadline = time.monotonic() + PRODUCE_S * 3
        while not producer.done:
            assert time.monotonic() < deadline, f"the stream did not end in {PRODUCE_S * 3:.0f}s"
            fleet.reap()
            time.sleep(0.2)
        produced = producer.finish()
        for topic in sources.values():
            for p, end in producer.ends(topic).items():
                ends.setdefault(topic, {})[p] = max(ends.get(topic, {}).get(p, 0), end)
        print(f"stream produced: {produced} changes in {time.monotonic() - started:.1f}s; source ends {ends}")
        _wait_committed(kafka_bootstrap, group, ends, 300, fleet)
        drained = time.monotonic() - started
        for worker in fleet.live:
            fleet.scrape(worker)
        fleet.reap(final=True)
    finally:
        if producer._thread is not None and producer._thread.is_alive():
            producer.finish()
        for worker in fleet.all:
            worker.stop()
    print(f"fleet drained (every source offset committed) {drained:.1f}s after the stream began; "
          f"{len(fleet.live)} workers at the end")

    generations, assigned_lines = _rebalances(fleet.all)
    records = read_all(kafka_bootstrap, outputs, idle_s=3.0, timeout_s=300)
    dlq = read_all(kafka_bootstrap, [f"{prefix}.dlq"], idle_s=1.0)
    report = check_order(records, prefix, stream)
    kills = [e for e in events if e.action == "kill"]
    print(f"injected: {len(kills)} kill/stop events ({sum(e.sig == signal.SIGKILL for e in kills)} SIGKILL, "
          f"{sum(e.sig == signal.SIGTERM for e in kills)} SIGTERM) + 1 worker added + 1 removed; "
          f"{len(fleet.all)} worker processes in all; {fleet.hit_holding} of the {len(kills) + 1} signalled "
          f"held partitions")
    print(f"counted: rebalances seen={generations} (distinct generations; {assigned_lines} 'partitions assigned' "
          f"lines over {len(fleet.all)} worker logs); SIGTERMed workers: {'; '.join(fleet.stopped)}")
    print(f"counted: consumed per worker (last scrape) {fleet.consumed}, sum "
          f"{sum(fleet.consumed.values())} for {produced} produced")
    print(f"counted: produced={produced} {report.line()} dlq={len(dlq)}")
    for stuck in fleet.deadline_exits:
        print(f"stopped at the deadline (exit {EXIT_STOP_DEADLINE}): {stuck}")
    assert not fleet.hung, fleet.hung
    assert not dlq, [(d.key, d.value[:200] if d.value else None) for d in dlq[:3]]
    assert report.missing == 0, f"{report.missing} changes never reached the normalized topics"
    assert not report.out_of_order, report.out_of_order[:5]
    assert not report.split_keys, report.split_keys[:5]
    assert not report.wrong, report.wrong[:10]
    assert report.duplicates > 0, "no SIGKILL left uncommitted work: the replay path was not exercised"
    assert report.changes - report.duplicates == stream.changes
    assert report.tombstones >= stream.counts["DELETE"]
    assert len(kills) >= 10 and generations >= KILLS // 2, "the schedule did not make the group rebalance"

    sink = sink_config(tmp_path / "sink.yaml", kafka_bootstrap, rf"{prefix}\.{DB}\..*", f"{prefix}-sink",
                       TestCatalog("hadoop", tmp_path), maintenance={"enabled": False})
    result = run_sink(sink, "--once", timeout_s=400)
    print(f"sink: exit={result.returncode} batches={len(result.batches)} read={result.read} in {result.seconds:.1f}s")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.read == report.records
    (tables,) = read_warehouses(sink)
    assert_tables_equal_expected(tables, stream, "fleet warehouse")
    print(f"counted: rows compared={sum(len(rows) for rows in stream.final.values())} over {len(FORMATS)} tables; "
          f"whole test {time.monotonic() - t0:.0f}s")


def _wait_committed(bootstrap: str, group: str, ends: dict[str, dict[int, int]], timeout_s: float,
                    fleet: Fleet | None = None) -> None:
    """Until ``group`` has committed ``ends[topic][p]`` on every partition of every topic."""

    def done() -> bool:
        if fleet is not None:
            fleet.reap()
        return all(
            committed_offsets(bootstrap, group, topic, PARTITIONS)[p] >= end
            for topic, by_partition in ends.items() for p, end in by_partition.items()
        )

    wait_for(done, timeout_s, f"group {group} committing {ends}", 0.5)
