"""A local Iceberg REST catalog, started by the project for the tests, the benches and ``cdcnorm up``.

The server is Apache Iceberg's own REST catalog server, the one Iceberg's REST client is tested
against (``org.apache.iceberg.rest.RESTCatalogServer``, version 1.9.2 as the sink's Spark runtime),
fetched through the Maven cache of :mod:`service.maven` (``service/maven/iceberg-rest.pom.xml``).
Why this one, of the three REST catalogs Maven Central serves:

* it is the reference implementation of the REST protocol: Iceberg's ``RESTCatalogAdapter``
  over a real catalog (a ``JdbcCatalog``), with the catalog's optimistic concurrency (a commit
  whose base is stale fails with ``CommitFailedException``, HTTP 409), which is what Polaris,
  Nessie, Lakekeeper and Glue's REST endpoint give their clients too;
* it runs from 37 plain jars (82 MB) on the JDK the machine has, in ~2 s, with no setup: Nessie's
  and Polaris's servers are Quarkus applications that need their own storage and realm or
  bootstrap configuration, and Polaris refuses ``file:`` warehouses unless told otherwise.

State lives in ``directory``: ``catalog.db`` (the JdbcCatalog's SQLite file: namespaces, tables
and their current metadata locations) and ``warehouse/`` (the tables' files, written by the
server (metadata) and by Spark (data), both through the local file system), so a restarted
server finds its tables again. The server logs to ``directory/rest-catalog.log``.

The server listens on every interface (the fixture has no bind-address setting) on ``port``,
without authentication: it is for this machine's tests and demos, never a deployment.

>>> RestCatalog.section_for("http://127.0.0.1:8181", "lake")["properties"]
{'uri': 'http://127.0.0.1:8181'}
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.local import free_port, log_tail, stop_process
from service.maven import LocalServiceError, fetch_artifacts, java_command

__all__ = ["POM", "SERVER_CLASS", "RestCatalog", "start_rest_catalog"]

POM = "iceberg-rest"
SERVER_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
_HEAP = "-Xmx512m"


@dataclass
class RestCatalog:
    """A running local REST catalog server (see the module doc)."""

    uri: str
    directory: Path
    process: subprocess.Popen[bytes]
    owns_directory: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    name: str = "iceberg-rest"

    @property
    def warehouse(self) -> Path:
        """The folder of the tables' files."""
        return self.directory / "warehouse"

    @property
    def log_path(self) -> Path:
        return self.directory / "rest-catalog.log"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    @staticmethod
    def section_for(uri: str, name: str = "lake") -> dict[str, Any]:
        """The sink's ``catalog`` config section for a REST catalog at ``uri``."""
        return {"name": name, "type": "rest", "warehouse": "", "properties": {"uri": uri}}

    def section(self, name: str = "lake") -> dict[str, Any]:
        """The sink's ``catalog`` config section for this catalog."""
        return self.section_for(self.uri, name)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (Jetty stops), SIGKILL after ``timeout_s``; a temporary directory is removed."""
        stop_process(self.process, timeout_s)
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def catalog_env(key: str) -> str:
    """The environment variable the server reads catalog property ``key`` from (RCKUtils:
    ``CATALOG_`` + the key upper-cased, ``-`` as ``__`` and ``.`` as ``_``).

    >>> catalog_env("io-impl"), catalog_env("s3.path-style-access")
    ('CATALOG_IO__IMPL', 'CATALOG_S3_PATH__STYLE__ACCESS')
    """
    return "CATALOG_" + key.replace("-", "__").replace(".", "_").upper()


def _answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_rest_catalog(
    directory: Path | None = None,
    port: int | None = None,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 90.0,
    warehouse: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> RestCatalog:
    """Start the REST catalog server on ``port`` (a free one by default) with its state in
    ``directory`` (a temporary folder, removed on :meth:`RestCatalog.stop`, by default) and wait
    until it answers ``GET /v1/config``. ``progress`` is told about a first fetch of the jars.
    ``warehouse`` (a URI, e.g. ``s3://lake/warehouse``) replaces the local ``directory/warehouse``;
    ``properties`` are more catalog properties (e.g. ``io-impl`` and ``s3.*`` for S3FileIO,
    :meth:`service.local_s3.S3Server.catalog_properties`).

    Raises :class:`~service.maven.LocalServiceError` (no JDK, no Maven on a first fetch, a server
    that exits or does not answer, with its log's last lines)."""
    libs = fetch_artifacts(POM, progress)
    owns = directory is None
    directory = Path(tempfile.mkdtemp(prefix="cdcnorm-rest-")) if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "warehouse").mkdir(exist_ok=True)
    port = port or free_port()
    env = {
        **os.environ,
        # RCKUtils: CATALOG_<KEY> is catalog property <key> ('_' -> '.', '__' -> '-')
        "CATALOG_WAREHOUSE": warehouse or (directory / "warehouse").resolve().as_uri(),
        "CATALOG_URI": f"jdbc:sqlite:file:{(directory / 'catalog.db').resolve()}",
        "CATALOG_JDBC_USER": "cdcnorm",
        "CATALOG_JDBC_PASSWORD": "cdcnorm",
        "CATALOG_REST_PORT": str(port),
        **{catalog_env(k): v for k, v in (properties or {}).items()},
    }
    cmd = [java_command(), _HEAP, "-cp", f"{libs}/*", SERVER_CLASS]
    log_path = directory / "rest-catalog.log"
    with log_path.open("ab") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    catalog = RestCatalog(f"http://127.0.0.1:{port}", directory, process, owns)
    deadline = time.monotonic() + timeout_s
    while not _answers(catalog.uri):
        if process.poll() is not None or time.monotonic() > deadline:
            why = f"exited with status {process.returncode}" if process.poll() is not None else (
                f"did not answer GET {catalog.uri}/v1/config within {timeout_s:.0f} s")
            tail = catalog.log_tail(20)
            catalog.owns_directory = False  # keep the log for the message's reader
            catalog.stop()
            raise LocalServiceError(f"the Iceberg REST catalog {why} (log {log_path}):\n{tail}")
        time.sleep(0.2)
    catalog.extra["description"] = f"Iceberg REST catalog 1.9.2 on {catalog.uri} (state in {directory})"
    return catalog
