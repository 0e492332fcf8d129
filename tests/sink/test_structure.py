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


@pytest.mark.parametrize("name", ["changes.py", "iceberg.py", "merge.py", "deleted_keys.py", "write_plan.py", "runner.py"])
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


# ----------------------------------------------------------------------------- imports

PACKAGES = ("transforms", "service", "sink")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module of ``name`` (a module, or a name inside one) among ``modules``."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at module level or inside functions (both run),
    ``if TYPE_CHECKING:`` imports left out."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                module = _resolve(target, modules)
                if module is not None and module != name:
                    found.add(module)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_cycle_runs_through_the_sink_or_the_shared_config() -> None:
    graph = import_graph()
    assert "sink.main" in graph and "service.config" in graph and "transforms.configfile" in graph
    involved = [c for c in cycles(graph) if any(m.startswith("sink") or m == "transforms.configfile" for m in c)]
    assert not involved, f"import cycles through the sink or transforms.configfile: {involved}"
    # the sink reads its config through the shared module, never through the worker's
    for module, imports in graph.items():
        if module.split(".")[0] == "sink":
            assert not imports & {"service.config", "cdcnorm.cli", "service.app"}, (module, imports)
    assert not {m for m in graph["transforms.configfile"] if m.split(".")[0] in ("service", "sink")}
    # both sides build on it
    assert "transforms.configfile" in graph["sink.main"] and "transforms.configfile" in graph["service.config"]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_the_sink_imports_without_the_worker_stack() -> None:
    """As in the sink image without Faust, aiokafka or redis: importing the sink's modules (and
    loading its config) needs none of them, nor the worker's config module."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('faust', 'aiokafka', 'redis', 'mode'):\n"
        "    sys.modules[name] = None  # import fails, as if not installed\n"
        "import sink.main, sink.runner, sink.iceberg, sink.changes, sink.inspect, sink.faults\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('service', 'faust', 'aiokafka'))\n"
        "print(loaded)\n"
        "assert 'service.config' not in sys.modules, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
