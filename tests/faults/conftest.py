"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local import LocalBroker
from tests.brokers import start_test_broker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test only (Apache Kafka; :mod:`tests.brokers`), so it can be frozen
    (SIGSTOP) without freezing others."""
    broker = start_test_broker(tmp_path / "broker")
    try:
        yield broker
    finally:
        broker.resume()
        broker.stop()
