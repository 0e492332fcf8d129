"""Which Iceberg catalog the sink's integration tests write through.

``CDCNORM_TEST_CATALOG`` chooses: ``rest`` (the default, and what CI runs: Apache Iceberg's REST
catalog server, one per test, :mod:`service.local_catalog`) or ``hadoop`` (a catalog in a local
folder, as the sink's default config). Tests about Spark or Parquet alone, and the hadoop smoke
test, use a hadoop catalog whatever this says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.local_catalog import RestCatalog, start_rest_catalog

__all__ = ["CATALOGS", "TEST_CATALOG", "TestCatalog", "start_test_catalog"]

CATALOGS = ("rest", "hadoop")
TEST_CATALOG = os.environ.get("CDCNORM_TEST_CATALOG", "rest")
if TEST_CATALOG not in CATALOGS:
    raise ValueError(f"CDCNORM_TEST_CATALOG={TEST_CATALOG!r}: expected one of {', '.join(CATALOGS)}")


@dataclass
class TestCatalog:
    """One test's catalog: its sink config section, and the server behind it (REST)."""

    __test__ = False  # not a test class

    kind: str
    directory: Path
    server: RestCatalog | None = None

    def section(self, name: str = "lake") -> dict[str, Any]:
        """The sink's ``catalog`` section."""
        if self.server is not None:
            return self.server.section(name)
        return {"name": name, "warehouse": str(self.directory / "warehouse")}

    @property
    def warehouse(self) -> Path:
        """The folder of the tables' files."""
        return self.server.warehouse if self.server is not None else self.directory / "warehouse"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def start_test_catalog(directory: Path, kind: str = TEST_CATALOG) -> TestCatalog:
    """A catalog of ``kind`` (by default :data:`TEST_CATALOG`) with its state in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "rest":
        return TestCatalog(kind, directory, start_rest_catalog(directory / "rest"))
    return TestCatalog(kind, directory)
