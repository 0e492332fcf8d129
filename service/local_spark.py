"""A local Spark standalone cluster: a master and workers on loopback, each its own JVM, started
with the ``spark-class`` script of the pyspark wheel (``<site-packages>/pyspark/bin``), the way
Spark's own ``sbin/start-master.sh`` and ``start-worker.sh`` start them. For the test that runs
the sink on a cluster (``tests/sink/test_sink_cluster.py``), not a deployment.

Each worker gets ``cores`` task slots and ``memory`` for its executors, a work folder of its own
(``<directory>/worker-<n>``: the executors' files, jars fetched from the driver, their logs), and
the environment ``env``: the caller decides what the executors' Python is
(``spark.pyspark.python``) and that they do not share the driver's virtualenv. Each process logs
to ``<directory>/<name>.log``. :meth:`SparkCluster.status` is the master's own account
(``GET /json/`` on its web UI): the workers alive, their cores, the applications.

>>> SparkCluster.master_url_of("127.0.0.1", 7077)
'spark://127.0.0.1:7077'
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.local import free_port, log_tail
from service.maven import LocalServiceError, java_command

__all__ = ["SparkCluster", "spark_home", "start_spark_cluster"]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The Spark of the pyspark wheel (its ``bin/spark-class`` and ``jars/``), found without
    importing pyspark. Raises :class:`LocalServiceError` when pyspark is not installed."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise LocalServiceError("pyspark is not installed: pip install 'cdcnorm[sink]'")
    return Path(spec.origin).parent


@dataclass
class SparkCluster:
    """A running local standalone cluster (see the module doc)."""

    master_url: str
    web_url: str
    directory: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    name: str = "spark-standalone"

    @staticmethod
    def master_url_of(host: str, port: int) -> str:
        return f"spark://{host}:{port}"

    def status(self) -> dict[str, Any]:
        """The master's ``/json/`` answer: ``aliveworkers``, ``cores``, ``workers``, ``activeapps``,
        ``completedapps`` ...; ``{}`` while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
                found: dict[str, Any] = json.load(response)
                return found
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def log_tail(self, process: str, lines: int = 40) -> str:
        return log_tail(self.directory / f"{process}.log", lines)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM every process (workers first; a worker ends its executors), SIGKILL after
        ``timeout_s``."""
        for proc in reversed(list(self.processes.values())):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def start_spark_cluster(
    directory: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> SparkCluster:
    """Start a master and ``workers`` workers (``cores`` slots and ``memory`` each) on
    127.0.0.1 and wait until the master counts them alive. ``env`` is the processes'
    environment (default: this one's), with ``SPARK_HOME`` and ``JAVA_HOME`` set here.

    Raises :class:`LocalServiceError` (no JDK, a process that exits or a master that does not
    count its workers in time, with the logs' last lines)."""
    home = spark_home()
    java = Path(java_command()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    base = {
        **(os.environ if env is None else env),
        "SPARK_HOME": str(home),
        "JAVA_HOME": str(java.parent.parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
    }
    host, port, web = "127.0.0.1", free_port(), free_port()
    cluster = SparkCluster(SparkCluster.master_url_of(host, port), f"http://{host}:{web}", directory)

    def launch(name: str, *args: str) -> None:
        with (directory / f"{name}.log").open("ab") as out:
            cluster.processes[name] = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=base, cwd=directory, start_new_session=True,
            )

    launch("master", MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(web))
    for n in range(workers):
        work = directory / f"worker-{n}"
        work.mkdir(exist_ok=True)
        launch(f"worker-{n}", WORKER_CLASS, "--host", host, "--cores", str(cores), "--memory", memory,
               "--work-dir", str(work), "--webui-port", str(free_port()), cluster.master_url)
    deadline = time.monotonic() + timeout_s
    while cluster.status().get("aliveworkers", 0) < workers:
        dead = [name for name, proc in cluster.processes.items() if proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"the master did not count {workers} workers in {timeout_s:.0f} s"
            tails = "\n".join(f"--- {name}.log\n{cluster.log_tail(name, 15)}" for name in (dead or list(cluster.processes)))
            cluster.stop()
            raise LocalServiceError(f"the local Spark cluster did not start: {why} (logs in {directory}):\n{tails}")
        time.sleep(0.5)
    return cluster
