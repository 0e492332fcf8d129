"""Fixtures of the sink tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local import LocalBroker
from tests.brokers import start_test_broker
from tests.catalogs import TestCatalog, start_test_catalog


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker for the test module (its topics do not outlive it); Apache Kafka, :mod:`tests.brokers`."""
    proc = start_test_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    proc.stop()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[TestCatalog]:
    """The test's own Iceberg catalog: a REST catalog server (or a hadoop folder), :mod:`tests.catalogs`."""
    started = start_test_catalog(tmp_path / "catalog")
    yield started
    started.stop()
