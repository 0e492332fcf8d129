"""Data-driven format tests: input messages and expected canonical output as files.

Layout, per format id::

    tests/data/<format>/<case>.txt             one message per line (base64 for binary formats)
    tests/data/<format>/<case>.options.json    optional: format options for this case
    tests/data/<format>/<case>.expected.jsonl  one line per output record or error

Each expected line is a compact projection of a canonical record (see :func:`project`):
the input ``line``, ``topic``, ``key`` payload, and the value payload without
``source.version``, plus ``fields``: the after-row Connect fields as ``name:type[/logical]``.
Lines that fail are expected as ``{"line": N, "error_class": ..., "field": ...}``. As the worker
and ``cdcnorm transform`` do (``Pipeline.process_rows``), the rows of a multi-row message that
decode are expected as records, followed by ``{"line": N, "row": R, "error_class": ..., "field":
...}`` for each row R that does not.

Vector files are copied unmodified, so the loader (not the decoder) handles their quirks,
driven by reserved keys in ``<case>.options.json`` (removed before the decoder sees them):

* a leading ``/* ... */`` license comment is always skipped;
* ``"__key_lines": true``: lines alternate Kafka key, then value (Paimon debezium files);
* ``"__layout": "document"``: the whole file is one (pretty-printed) message;
* ``"__layout": "events-of:a,b"``: the file is one JSON object whose arrays ``a``, ``b`` hold
  the messages (a member that is an object is one message);
* ``"__topic_prefix": "p"``: the topic prefix to emit with.

Regenerate expected files with ``CDCNORM_REGEN=1 pytest tests/formats`` and review the diff.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions, OutRecord
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
"""The folder beside the checkout that holds vendor test vectors; a checkout may not have it."""
REGEN = os.environ.get("CDCNORM_REGEN") == "1"


def shared_path(*parts: str) -> Path:
    """A file of :data:`SHARED`; the calling test is skipped, with the reason, when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        import pytest

        pytest.skip(f"{path} is absent (the shared folder beside the repository holds the vendor vectors)")
    return path


@dataclass(frozen=True)
class Case:
    format_id: str
    name: str
    input_path: Path

    @property
    def expected_path(self) -> Path:
        return self.input_path.with_name(self.name + ".expected.jsonl")

    @property
    def options(self) -> dict[str, Any]:
        path = self.input_path.with_name(self.name + ".options.json")
        return orjson.loads(path.read_bytes()) if path.exists() else {}

    def __str__(self) -> str:
        return f"{self.format_id}/{self.name}"


def cases(format_id: str | None = None) -> list[Case]:
    out = []
    for fmt_dir in sorted(p for p in DATA.iterdir() if p.is_dir()):
        if format_id and fmt_dir.name != format_id:
            continue
        for path in sorted(fmt_dir.glob("*.txt")):
            out.append(Case(fmt_dir.name, path.name[: -len(".txt")], path))
    return out


def _fields(schema: dict[str, Any] | None) -> list[str] | None:
    if not schema:
        return None
    for f in schema.get("fields", []):
        if f.get("field") == "after":
            return [
                f"{c['field']}:{c['type']}" + (f"/{c['name']}" if c.get("name") else "") + ("" if c.get("optional") else "!")
                for c in f.get("fields", [])
            ]
    return None


def project(record: OutRecord) -> dict[str, Any]:
    """A compact, reviewable view of one canonical record."""
    out: dict[str, Any] = {"topic": record.topic}
    key = record.key
    out["key"] = key.get("payload") if isinstance(key, dict) and "payload" in key else key
    value = record.value
    if value is None:
        out["value"] = None
        return out
    payload = dict(value.get("payload", value))
    source = payload.get("source")
    if isinstance(source, dict):
        payload["source"] = {k: v for k, v in source.items() if k != "version"}
    out["value"] = payload
    fields = _fields(value.get("schema"))
    if fields is not None:
        out["fields"] = fields
    return out


def _strip_license(text: bytes) -> bytes:
    stripped = text.lstrip()
    if stripped.startswith(b"/*"):
        end = stripped.find(b"*/")
        if end >= 0:
            # keep line numbers stable: replace the comment with as many newlines
            return b"\n" * stripped[: end + 2].count(b"\n") + stripped[end + 2 :]
    return text


def iter_messages(case: Case, binary: bool) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(line number, key, value) of each message of a case, per its layout options."""
    opts = case.options
    text = _strip_license(case.input_path.read_bytes())
    layout = opts.get("__layout", "lines")
    if layout == "document":
        yield 1, None, text
        return
    if layout.startswith("events-of:"):
        doc = orjson.loads(text)
        number = 0
        for name in layout.split(":", 1)[1].split(","):
            items = doc[name]
            for item in [items] if isinstance(items, dict) else items:
                number += 1
                yield number, None, orjson.dumps(item)
        return
    pending_key: bytes | None = None
    key_lines = bool(opts.get("__key_lines"))
    expect_key = key_lines
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if expect_key:
            pending_key, expect_key = raw, False
            continue
        yield number, pending_key, base64.b64decode(raw.strip()) if binary else raw
        expect_key = key_lines


def run_case(case: Case) -> list[dict[str, Any]]:
    opts = {k: v for k, v in case.options.items() if not k.startswith("__")}
    prefix = case.options.get("__topic_prefix", "cdcnorm")
    decoder = create_decoder(case.format_id, opts)
    pipeline = Pipeline(decoder, EmitOptions(prefix=prefix, decimal_mode=decoder.options.decimal_handling_mode))
    results: list[dict[str, Any]] = []
    for number, key, payload in iter_messages(case, decoder.binary):
        try:
            processed = pipeline.process_rows(Message(value=payload, key=key, topic=case.name, offset=number - 1))
        except DecodeError as exc:
            results.append({"line": number, "error_class": type(exc).__name__, "field": exc.field})
            continue
        results.extend({"line": number, **project(r)} for r in processed.records)
        results.extend(
            {"line": number, "row": exc.row, "error_class": type(exc).__name__, "field": exc.field}
            for exc in processed.row_errors
        )
    return results


def check_case(case: Case) -> None:
    actual = run_case(case)
    if REGEN or not case.expected_path.exists():
        case.expected_path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in actual))
        if not REGEN:
            raise AssertionError(f"{case}: no expected file; wrote {case.expected_path.name}, review it")
        return
    expected = [orjson.loads(line) for line in case.expected_path.read_bytes().splitlines() if line.strip()]
    assert len(actual) == len(expected), f"{case}: {len(actual)} records, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        got_n = orjson.loads(orjson.dumps(got))
        assert got_n == want, f"{case}: record {i} (input line {want.get('line')}) differs:\n got  {got_n}\n want {want}"
