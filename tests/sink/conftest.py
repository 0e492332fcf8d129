"""Fixtures of the sink tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.local import LocalProcess, start_tansu


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcess]:
    """A Tansu broker for the test module (its topics do not outlive it)."""
    proc = start_tansu(log_dir=tmp_path_factory.mktemp("tansu"))
    yield proc
    proc.stop()
