"""The table summary `cdcnorm up` prints: on any terminal width the counts stay readable."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from cdcnorm.cli import _print_tables

TABLES = {
    "LAB.ALL_TYPES": {"rows": [{"K1": 9007199254740993, "NOTE": "x" * 200}], "count": 2, "snapshots": 3, "data_files": 1},
    "cdcnorm._databaseName.customers_with_a_very_long_table_name": {
        "rows": [], "count": 12_345_678, "snapshots": 14, "data_files": 250,
    },
}


def _render(width: int, tables: dict[str, dict[str, object]]) -> list[str]:
    out = io.StringIO()
    _print_tables(Console(file=out, width=width, color_system=None), tables, "Iceberg tables")
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 200])
def test_counts_and_headers_survive_narrow_terminals(width: int) -> None:
    lines = _render(width, TABLES)
    assert all(len(line) <= width for line in lines)
    text = "\n".join(lines)
    for header in ("table", "rows", "snapshots", "data files", "a row"):
        assert header in text
    by_table = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]] for line in lines
                if line.startswith("│")}
    assert by_table["LAB.ALL_TYPES"] == ["2", "3", "1"]
    long_name = next(name for name in by_table if name.startswith("cdcnorm._databaseName"))
    assert by_table[long_name] == ["12345678", "14", "250"]
    assert '{"K1"' in text  # the sample row is cut, not dropped


def test_no_tables() -> None:
    assert any("rows" in line for line in _render(80, {}))
