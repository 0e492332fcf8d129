"""The crash-point fault injection lives in its own module (not the entry point) and is inert
unless ``CDCNORM_CRASH_POINT`` names the point."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sink.faults as faults

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    killed: list[str] = []
    monkeypatch.setattr(faults, "_kill_self", lambda: killed.append("killed"))
    monkeypatch.delenv("CDCNORM_CRASH_POINT", raising=False)
    monkeypatch.delenv("CDCNORM_CRASH_AFTER", raising=False)
    return killed


def test_inert_without_the_environment(kills: list[str]) -> None:
    for point in faults.CRASH_POINTS:
        faults.crash_point(point)
    assert kills == []


def test_only_the_named_point_after_n_passes(kills: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_CRASH_POINT", "after-iceberg-commit")
    monkeypatch.setenv("CDCNORM_CRASH_AFTER", "3")
    faults.crash_point("after-kafka-commit")
    faults.crash_point("after-iceberg-commit")
    faults.crash_point("after-iceberg-commit")
    assert kills == []
    faults.crash_point("after-iceberg-commit")
    assert kills == ["killed"]


def test_runner_and_iceberg_take_crash_points_from_the_faults_module() -> None:
    """The entry point no longer holds them; every point the code passes is a known one."""
    main = (ROOT / "sink" / "main.py").read_text(encoding="utf-8")
    assert "crash_point" not in main and "CDCNORM_CRASH" not in main
    used: set[str] = set()
    for name in ("runner.py", "iceberg.py"):
        tree = ast.parse((ROOT / "sink" / name).read_text(encoding="utf-8"))
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "sink.faults"]
        assert imports, f"sink/{name} does not import sink.faults"
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "crash_point":
                arg = node.args[0]
                assert isinstance(arg, ast.Constant)
                used.add(arg.value)
    assert used == faults.CRASH_POINTS
