"""Fixtures of the fault tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local import LocalProcess, start_tansu


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalProcess]:
    """A Tansu broker of this test only, so it can be frozen (SIGSTOP) without freezing others."""
    broker = start_tansu(log_dir=tmp_path / "tansu")
    try:
        yield broker
    finally:
        broker.process.send_signal(signal.SIGCONT)
        broker.stop()
