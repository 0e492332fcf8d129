"""The sink on a Spark standalone cluster: a master and two workers on loopback, each its own JVM
(:mod:`service.local_spark`), the driver in the sink's process, ``spark.master`` set to the
cluster.

The executors do not share the driver's virtualenv: the workers run with an environment that
names neither it nor the repository, and their Python is the one in a packed environment that
reaches them the way the README tells users: ``scripts/pack-executor-env`` builds it (the sink's
pinned requirements without Spark, cdcnorm as a wheel), ``spark.archives`` ships it, each
executor unpacks it into its work folder, ``PYSPARK_PYTHON=./env/bin/python`` runs it. The Iceberg
runtime jar reaches them from the driver (``spark.jars``). The folder the environment was built in
is gone before the sink starts.

The sink runs the acceptance history through the REST catalog and must reach the independently
computed state; Spark's event log says which executors ran tasks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from service.local import LocalBroker
from service.local_spark import start_spark_cluster
from tests.catalogs import TestCatalog
from tests.sink.history import scripted_history
from tests.sink.test_sink_integration import ROOT, _assert_state_of, _produce_as, _run

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

WORKERS = 2


def _pack(output: Path) -> Path:
    proc = subprocess.run([str(ROOT / "scripts" / "pack-executor-env"), "--output", str(output)],
                          cwd=ROOT, env={**os.environ, "VENV": str(Path(sys.executable).parent.parent)},
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout[-1000:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return output


def _executors_with_tasks(events: Path) -> dict[str, int]:
    """Executor id -> tasks it ran, from Spark's event logs in ``events``."""
    ran: dict[str, int] = {}
    for log in events.iterdir():
        for line in log.read_bytes().splitlines():
            event: dict[str, Any] = orjson.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                executor = event["Task Info"]["Executor ID"]
                ran[executor] = ran.get(executor, 0) + 1
    return ran


def test_sink_runs_the_acceptance_history_on_a_standalone_cluster(broker: LocalBroker, tmp_path: Path,
                                                                  catalog: TestCatalog) -> None:
    archive = _pack(tmp_path / "executor-env.tar.gz")
    # the workers' environment: no virtualenv, no repository on any path
    clean = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TZ", "JAVA_HOME")}
    clean["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    cluster = start_spark_cluster(tmp_path / "cluster", workers=WORKERS, cores=1, memory="1g", env=clean)
    try:
        status = cluster.status()
        print(f"cluster: {cluster.master_url}, {status['aliveworkers']} workers, {status['cores']} cores")
        history = scripted_history(n_keys=30, n_changes=600, seed=17)
        events = tmp_path / "events"
        events.mkdir()
        section = {**catalog.section(), "table_location": (tmp_path / "tables").as_uri()}
        config = _produce_as(
            broker.address, history, "on_cluster", tmp_path, "sink-cluster", max_records=250, catalog=catalog,
            catalog_section=section,
            spark_master=cluster.master_url,
            spark_conf={
                "spark.archives": f"{archive}#env",
                "spark.executor.memory": "768m",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events.as_uri(),
                "spark.driver.host": "127.0.0.1",
            },
        )
        proc = _run(config, "sink", "--once", env={"PYSPARK_PYTHON": "./env/bin/python", "SPARK_LOCAL_IP": "127.0.0.1"},
                    timeout=600)
        print(proc.stdout[-1500:])
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        assert "batch: read=" in proc.stdout
        ran = _executors_with_tasks(events)
        apps = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
    finally:
        cluster.stop()
    unpacked = sorted((tmp_path / "cluster").glob("worker-*/app-*/*/env/bin/python"))
    print(f"counted: master {cluster.master_url}; {len(ran)} executors ran tasks: {ran}; "
          f"applications {[a.get('name') for a in apps]}; executors' Python: {[str(p) for p in unpacked]}")
    assert len(ran) == WORKERS and "driver" not in ran, ran
    assert len(unpacked) == WORKERS, unpacked
    # sink.catalog.table_location: the tables (and the deleted keys) were created where it says
    placed = sorted(p.relative_to(tmp_path / "tables").as_posix() for p in (tmp_path / "tables").glob("*/*/metadata"))
    print(f"counted: tables created under sink.catalog.table_location: {placed}")
    assert {"on_cluster/orders/metadata", "on_cluster/users/metadata", "cdcnorm/deleted_keys/metadata"} <= set(placed)
    # read back on a local master: the tables equal the independently computed state
    local = yaml.safe_load(config.read_text())
    local["sink"]["spark_master"] = "local[2]"
    local["sink"].pop("spark_conf", None)
    reading = tmp_path / "read.yaml"
    reading.write_text(yaml.safe_dump(local))
    _assert_state_of(reading, "on_cluster", history)
