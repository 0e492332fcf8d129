"""The rooms of the house stand on their own: the worker (``service``) and the sink (``sink``)
never import each other, at any depth (a function-level import counts), and the pure library
(``transforms``) imports no client of Kafka, Faust, Redis or Spark, nor any other part. What both
need is in ``transforms`` (pure) or ``cdcnorm_common``; the command line that spans both is
``cdcnorm``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = {"faust", "mode", "aiokafka", "confluent_kafka", "kafka", "redis", "pyspark", "py4j", "pyarrow"}


def imports_of(package: str) -> dict[str, set[str]]:
    """``path -> top-level modules`` imported anywhere in each module of ``package``."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = found
    return out


@pytest.mark.parametrize(("package", "forbidden"), [
    ("service", {"sink", "cdcnorm"}),
    ("sink", {"service", "cdcnorm"}),
    ("transforms", {"service", "sink", "cdcnorm", "cdcnorm_common"} | CLIENTS),
    ("cdcnorm_common", {"service", "sink", "cdcnorm"}),
])
def test_a_room_imports_nothing_it_must_not(package: str, forbidden: set[str]) -> None:
    wrong = {path: sorted(found & forbidden) for path, found in imports_of(package).items() if found & forbidden}
    assert not wrong, wrong


def test_the_scan_sees_function_level_imports() -> None:
    """The check would catch what only function-level imports hid before: the CLI imports the
    sink inside its commands."""
    assert "sink" in imports_of("cdcnorm")["cdcnorm/cli.py"]
    assert "faust" in imports_of("service")["service/app.py"]
