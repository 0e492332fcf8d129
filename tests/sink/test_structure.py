"""The sink's code structure: canonical records read through the envelope module's names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINK = ROOT / "sink"

# field names and op codes of the canonical envelope (transforms.envelope.OP, BEFORE, ... and
# Operation): the sink spells them through that module, never as literals
ENVELOPE_LITERALS = frozenset({"op", "before", "after", "source", "ts_ms", "transaction", "c", "u", "d", "r", "t"})


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


@pytest.mark.parametrize("name", ["changes.py", "iceberg.py", "runner.py"])
def test_canonical_records_are_read_through_the_envelope_module(name: str) -> None:
    tree = ast.parse((SINK / name).read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    keyword_values = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "mode"}
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in ENVELOPE_LITERALS
        and id(node) not in docs
        and id(node) not in keyword_values
    ]
    assert not found, f"sink/{name} spells envelope names as literals (use transforms.envelope): {found}"


def test_parsed_changes_carry_an_operation() -> None:
    from sink.changes import parse_record
    from tests.sink.history import ORDERS
    from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit

    row = {"id": 1, "customer": "c", "amount": None, "created": None, "day": None}
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, row, SourceInfo("t", 1, sequence="1")),
        ChangeEvent(Operation.DELETE, ORDERS, row, None, SourceInfo("t", 2, sequence="2")),
    ]
    changes = [parse_record(r.topic, 0, i, r.key_bytes(), r.value_bytes()) for i, r in enumerate(emit(events, EmitOptions()))]
    ops = [c.op for c in changes if c is not None]
    assert ops == [Operation.CREATE, Operation.DELETE]
    assert all(type(op) is Operation for op in ops)
