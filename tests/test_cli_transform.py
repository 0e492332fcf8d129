"""`cdcnorm transform` follows the contract in CANONICAL.md, run as a user runs it."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import orjson
import yaml

from transforms.envelope import EmitOptions
from transforms.smt.registry import build_chain

ROOT = Path(__file__).resolve().parents[1]
CDCNORM = [sys.executable, "-m", "service.cli"]


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CDCNORM, *args], input=stdin, capture_output=True, cwd=ROOT, timeout=60)


def test_transform_prints_json_lines_and_tombstones() -> None:
    proc = _run("transform", "--format", "canal-json", str(ROOT / "tests/data/canal-json/seed-delete.txt"))
    assert proc.returncode == 0, proc.stderr
    lines = [orjson.loads(x) for x in proc.stdout.splitlines()]
    assert [sorted(x) for x in lines] == [["key", "topic", "value"]] * 2
    delete, tombstone = lines
    assert delete["value"]["payload"]["op"] == "d"
    assert delete["key"]["payload"] == {"id": 500000287}
    assert tombstone == {"topic": delete["topic"], "key": delete["key"], "value": None}


def test_bad_lines_go_to_stderr_and_processing_goes_on() -> None:
    good = (ROOT / "tests/data/canal-json/seed-delete.txt").read_bytes().strip()
    stdin = b"{truncated\n" + good + b"\n" + b'{"type":"MERGE","data":[]}\n'
    proc = _run("transform", "--format", "canal-json", "-", stdin=stdin)
    assert proc.returncode == 2
    errors = [orjson.loads(x) for x in proc.stderr.splitlines() if x.startswith(b'{"line"')]
    assert [e["line"] for e in errors] == [1, 3]
    assert all(e["error_class"] == "DecodeError" and "canal-json" in e["error"] for e in errors)
    assert len(proc.stdout.splitlines()) == 2  # the good line's delete + tombstone


def test_binary_formats_take_base64_lines() -> None:
    proc = _run("transform", "--format", "dts-avro", "-", stdin=base64.b64encode(b"\x00garbage") + b"\nnot base64!\n")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) >= 2


def test_unknown_option_is_a_config_error() -> None:
    proc = _run("transform", "--format", "canal-json", "--option", "no.such=1", "-", stdin=b"")
    assert proc.returncode == 1
    assert b"no.such" in proc.stderr


def test_formats_lists_every_format_with_options() -> None:
    proc = _run("formats", "--json")
    assert proc.returncode == 0
    listed = {f["format"]: f for f in orjson.loads(proc.stdout)}
    assert {"canal-json", "dts-avro", "qlik-avro", "arcion-csv", "auto"} <= set(listed)
    assert any(o["name"] == "decimal.handling.mode" for o in listed["canal-json"]["options"])


def test_readme_chain_example_builds() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(transforms:.*?)```", text, re.S)
    assert block, "README has a transforms example"
    specs = yaml.safe_load(block.group(1))["transforms"]
    chain = build_chain(specs, emit_options=EmitOptions())
    assert len(chain) == len(specs)
