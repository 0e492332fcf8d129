"""The sink on an S3 warehouse: Iceberg's REST catalog with its warehouse on an S3-compatible
server (:mod:`service.local_s3`, the Versity S3 Gateway built from the Go module proxy), Iceberg's
``S3FileIO`` in the catalog server and in the sink's Spark session (Iceberg's AWS bundle from
Maven Central), and the write tasks' pyarrow on the same endpoint and credentials, taken from
``sink.catalog.properties``. The acceptance history must reach the independently computed state,
read back through the catalog, with every file of the tables in the S3 server's folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.local import LocalBroker
from service.local_catalog import POM, start_rest_catalog
from service.local_s3 import start_s3_server
from service.maven import fetch_artifacts
from tests.catalogs import TestCatalog
from tests.sink.history import scripted_history
from tests.sink.test_sink_integration import _assert_state_of, _produce_as, _run

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]


def test_sink_writes_the_acceptance_history_to_an_s3_warehouse(broker: LocalBroker, tmp_path: Path,
                                                              request: pytest.FixtureRequest) -> None:
    s3 = start_s3_server(tmp_path / "s3", progress=print)
    request.addfinalizer(s3.stop)
    rest = start_rest_catalog(tmp_path / "rest", warehouse="s3://lake/warehouse", properties=s3.catalog_properties())
    request.addfinalizer(rest.stop)
    bundle = next(fetch_artifacts(POM).glob("iceberg-aws-bundle-*.jar"))
    section = rest.section()
    section["properties"] = {**section["properties"], **s3.catalog_properties()}
    history = scripted_history(n_keys=30, n_changes=600, seed=23)
    config = _produce_as(broker.address, history, "on_s3", tmp_path, "sink-s3", max_records=250,
                         catalog=TestCatalog("rest", tmp_path, rest), catalog_section=section,
                         spark_conf={"spark.jars": str(bundle)})
    try:
        proc = _run(config, "sink", "--once", timeout=300)
    except subprocess.TimeoutExpired as exc:  # what the sink said before it was stopped
        raise AssertionError(f"the sink did not finish in 300 s:\n{_text(exc.stdout)[-3000:]}\n"
                             f"{_text(exc.stderr)[-5000:]}") from None
    print(proc.stdout[-1500:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    _assert_state_of(config, "on_s3", history)
    warehouse = s3.root / "lake" / "warehouse"
    data = sorted(warehouse.rglob("*.parquet"))
    metadata = sorted(warehouse.rglob("*.metadata.json"))
    local = sorted((tmp_path / "rest" / "warehouse").rglob("*")) if (tmp_path / "rest" / "warehouse").exists() else []
    print(f"counted: S3 endpoint {s3.endpoint}; in bucket lake: {len(data)} Parquet files, {len(metadata)} "
          f"metadata files; in the catalog's local folder: {len(local)} files")
    assert data and metadata and not [p for p in local if p.is_file()]


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
