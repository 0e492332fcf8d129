"""Fixtures of the sink tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.local import LocalBroker
from tests.brokers import start_test_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker for the test module (its topics do not outlive it); Apache Kafka, :mod:`tests.brokers`."""
    proc = start_test_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    proc.stop()

