"""Smoke tests of the benchmarks: each bench script runs at its tiny size and reports its ratios.

Targets are not asserted (a loaded CI machine says nothing about them); what is asserted is that
every script still runs end to end and writes a result with positive measurements. The pure
ones run in-process; those needing a broker or Spark run as processes and are integration tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import decoders, flink_peer
from bench.common import BenchReport, Ratio, interleaved, percentile, summary

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def _assert_measured(result: dict[str, Any], bench: str) -> None:
    assert result["bench"] == bench
    assert result["ratios"], "no ratio reported"
    for r in result["ratios"]:
        assert r["value"] > 0 and r["baseline"] > 0, r
        assert r["ratio"] == pytest.approx(r["value"] / r["baseline"])
        print(f"{bench}: {r['name']} = {r['value']:.4g} vs {r['baseline']:.4g} {r['unit']}: ratio {r['ratio']:.3f} "
              f"(target {r['target_text']}, met {r['met']})")


def test_ratio_targets_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = BenchReport("demo", "tiny")
    report.add(Ratio("fast", 40.0, 100.0, "msgs/s", target=0.35))
    report.add(Ratio("rss", 130.0, 100.0, "MiB", target=1.25, lower_is_better=True))
    report.add(Ratio("context", 1.0, 2.0, "s"))
    report.info("note", 3.0, "s")
    assert [r.met for r in report.ratios] == [True, False, None]
    path = report.write_json(tmp_path / "demo.json")
    missed = summary([path])
    out = capsys.readouterr().out
    assert missed == 1
    assert "targets met: 1/2" in out and "demo: rss" in out


def test_interleaved_and_percentile() -> None:
    calls: list[str] = []
    times = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2, warmup=1)
    assert calls == ["a", "b"] * 3
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)


def test_decoders_bench_every_format(tmp_path: Path) -> None:
    out = tmp_path / "decoders.json"
    assert decoders.main(["--size", "tiny", "--json", str(out)]) == 0
    result = _load(out)
    _assert_measured(result, "decoders")
    assert {r["name"].split()[0] for r in result["ratios"]} == set(decoders.FORMATS)
    json_targets = [r for r in result["ratios"] if r["target"] is not None]
    assert len(json_targets) == len(decoders.FORMATS) - 3  # not arcion-csv, dts-avro, qlik-avro
    by_name = {r["name"]: r for r in result["ratios"]}
    for r in json_targets:
        fmt = r["name"].split()[0]
        io_floor, build_floor = by_name[f"{fmt} I/O floor msgs/s"], by_name[f"{fmt} build floor msgs/s"]
        # the floors do a strict subset of the pipeline's work on the same messages
        assert build_floor["value"] > r["value"] and io_floor["value"] > r["value"], fmt
        assert "logic beyond the build floor" in r["note"]


def test_floor_copies_every_container_once() -> None:
    doc = {"a": {"b": [1, {"c": 2}]}, "d": 3}
    plan = decoders._copy_plan(doc)
    copy = decoders._copy(doc, plan)
    assert copy == doc
    assert copy is not doc and copy["a"] is not doc["a"] and copy["a"]["b"] is not doc["a"]["b"]
    assert copy["a"]["b"][1] is not doc["a"]["b"][1]


def test_decoder_workload_repeats_golden_messages() -> None:
    work = decoders.load_workload("canal-json", 64 * 1024)
    assert work.n_bytes >= 64 * 1024
    assert len(work.items) % work.distinct == 0
    assert work.run_pipeline() > len(work.items) // 2  # most messages emit records


def test_table_count_bench(tmp_path: Path) -> None:
    """The table-count curve: every count measured, the targets of issue 29 on 10k (and 100k) tables,
    and the memory of each run."""
    result = _run_bench("table_count", tmp_path, timeout=300)
    _assert_measured(result, "table_count")
    by_name = {r["name"]: r for r in result["ratios"]}
    assert set(by_name) == {"1,000 tables msgs/CPU-s", "10,000 tables msgs/CPU-s"}
    assert by_name["10,000 tables msgs/CPU-s"]["target"] == 0.8
    assert all("KiB per table" in r["note"] for r in result["ratios"])
    infos = {i["name"]: i["value"] for i in result["infos"]}
    assert infos["10,000 tables peak RSS"] > infos["1,000 tables peak RSS"] > 0


@pytest.mark.integration
def test_flink_peer_bench(tmp_path: Path) -> None:
    """Flink SQL and cdcnorm transform on the same files: both write every record, and the
    per-CPU-second ratio carries the issue's target of 1.0."""
    result = _run_bench("flink_peer", tmp_path, timeout=900)
    _assert_measured(result, "flink_peer")
    by_name = {r["name"]: r for r in result["ratios"]}
    assert set(by_name) == {f"{f} msgs per {unit}" for f in ("canal-json", "debezium-json")
                            for unit in ("CPU second", "wall second")}
    assert by_name["canal-json msgs per CPU second"]["target"] == 1.0
    assert by_name["canal-json msgs per CPU second"]["baseline_name"] == "Flink SQL"


def test_flink_peer_waits_for_the_peers_processes_to_end() -> None:
    """The Flink job's JVM outlives the job's Python process for seconds of shutdown: the bench
    waits for it, so it does not run beside cdcnorm's next measurement."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    started = time.monotonic()
    flink_peer.wait_gone([child.pid])
    waited = time.monotonic() - started
    child.wait()
    assert 0.4 < waited < 10
    started = time.monotonic()
    flink_peer.wait_gone([child.pid, 2**22 + 12345])  # gone (reaped), never was: no wait
    assert time.monotonic() - started < 0.5


def _run_bench(name: str, tmp_path: Path, *args: str, timeout: float) -> dict[str, Any]:
    if not (ROOT / "bench" / f"{name}.py").exists():
        pytest.skip(f"bench/{name}.py does not exist")
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--size", "tiny", "--json", str(out), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return _load(out)


@pytest.mark.integration
@pytest.mark.spark
def test_sink_merge_bench(tmp_path: Path) -> None:
    result = _run_bench("sink_merge", tmp_path, "--workdir", str(tmp_path / "work"), timeout=420)
    _assert_measured(result, "sink_merge")
    names = {r["name"] for r in result["ratios"]}
    assert {"merge changes/s", "row-delta upsert changes/s", "sink driver RSS", "freshness p50", "freshness p95"} <= names
    infos = {i["name"]: i["value"] for i in result["infos"]}
    assert infos["rows in row-delta table"] == infos["rows in merged table"]  # the same history, both paths


@pytest.mark.integration
@pytest.mark.spark
def test_sink_shapes_bench(tmp_path: Path) -> None:
    result = _run_bench("sink_shapes", tmp_path, timeout=420)
    _assert_measured(result, "sink_shapes")
    names = {r["name"] for r in result["ratios"]}
    assert names == {"partitioned upsert changes/s", "changelog append changes/s", "history changes/s",
                     "history, current versions read per batch"}
    rows = {i["name"]: i["value"] for i in result["infos"]}
    # the same history: as many current rows partitioned as not, every change in the changelog,
    # the same versions whether the current versions are kept or read
    assert rows["rows in orders_bucketed"] == rows["rows in orders_flat"] > 0
    assert rows["rows in orders_log"] == rows["rows in orders_plain"] > rows["rows in orders_flat"]
    assert rows["rows in orders_history"] == rows["rows in orders_history_read"] > rows["rows in orders_flat"]


@pytest.mark.integration
@pytest.mark.spark
def test_sink_tables_bench(tmp_path: Path) -> None:
    result = _run_bench("sink_tables", tmp_path, "--no-sequential", timeout=420)
    _assert_measured(result, "sink_tables")
    assert any(r["name"].startswith("changes/s over") for r in result["ratios"])


@pytest.mark.integration
@pytest.mark.spark
def test_sink_freshness_bench(tmp_path: Path) -> None:
    # on the REST catalog: the benches start it with the code the tests and cdcnorm up use
    result = _run_bench("sink_freshness", tmp_path, "--catalog", "rest", timeout=420)
    _assert_measured(result, "sink_freshness")
    assert result["params"]["catalog"] == "rest"
    assert any(r["name"].startswith("freshness p95") and r["target"] == 2.0 for r in result["ratios"])
    infos = {i["name"]: i["value"] for i in result["infos"]}
    assert infos["changes committed"] == result["params"]["changes"] > 0  # every change reached a commit
    assert infos["micro-batches"] >= 1


@pytest.mark.integration
@pytest.mark.spark
def test_sink_parse_bench(tmp_path: Path) -> None:
    result = _run_bench("sink_parse", tmp_path, timeout=300)
    _assert_measured(result, "sink_parse")
    (ratio,) = result["ratios"]
    assert ratio["name"] == "from_json parse records/s" and ratio["target"] is None
    infos = {i["name"]: i["value"] for i in result["infos"]}
    assert infos["records"] == result["params"]["records"] > 0
    assert infos["Python RecordParser"] > 0 and infos["JVM from_json"] > 0
    assert str(infos["agreement check"]).endswith("changes equal")  # the script fails when the parses differ


BROKER_BENCHES = {"service_e2e": "both", "scaling": "tansu", "worker_memory": "tansu", "sink_tables": "tansu",
                  "sink_merge": "tansu", "sink_freshness": "tansu"}
"""The benches that start a broker, and the one each starts by default."""


def test_every_bench_that_starts_a_broker_takes_broker() -> None:
    for path in sorted((ROOT / "bench").glob("*.py")):
        source = path.read_text()
        assert "start_tansu" not in source, f"{path.name} starts Tansu itself: use bench.common.start_bench_broker"
        if "start_bench_broker(" in source or "Broker.start(" in source:
            assert path.stem in BROKER_BENCHES or path.stem == "common", path.name
    for name, default in BROKER_BENCHES.items():
        proc = subprocess.run([sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        help_text = " ".join(proc.stdout.split())
        choices = "{kafka,tansu,both}" if default == "both" else "{kafka,tansu}"
        assert f"--broker {choices}" in help_text and f"(default: {default})" in help_text, (name, help_text)


@pytest.mark.integration
def test_service_e2e_bench_on_kafka_and_tansu(tmp_path: Path) -> None:
    """The default ``--broker both``: a tiny run on Apache Kafka, then on Tansu, each with its ratio."""
    result = _run_bench("service_e2e", tmp_path, timeout=600)
    _assert_measured(result, "service_e2e")
    by_name = {r["name"]: r for r in result["ratios"]}
    assert by_name["Kafka: worker msgs/s (1 process)"]["target"] == 0.7
    assert by_name["Tansu: worker msgs/s (1 process)"]["target"] == 0.5
    brokers = result["params"]["brokers"]
    assert list(brokers) == ["kafka", "tansu"]
    assert brokers["kafka"]["description"].startswith("Apache Kafka")
    assert brokers["tansu"]["description"].startswith("Tansu")
    for run in brokers.values():
        assert run["rounds"] and all(r["ratio"] > 0 and r["broker_cpu_us_worker"] > 0 for r in run["rounds"])
    settings = result["params"]["baseline_settings"]
    assert settings["kafka"]["enable_idempotence"] and settings["kafka"]["acks"] == "all"


@pytest.mark.integration
@pytest.mark.parametrize("name", ["scaling", "worker_memory"])
def test_service_benches(name: str, tmp_path: Path) -> None:
    result = _run_bench(name, tmp_path, timeout=420)
    _assert_measured(result, name)
    assert result["params"]["broker"].startswith("Tansu")  # their default broker
