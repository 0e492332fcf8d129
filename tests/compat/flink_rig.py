"""Flink as a second, independent consumer of our output (runs in the project's .venv).

For a golden vendor file, Flink 2.3's own formats read

* the vendor file with the vendor's format (``canal-json``, ``maxwell-json``, ``ogg-json``,
  ``debezium-json``), and
* our re-emitted Debezium JSON of the same messages with ``debezium-json``
  (``debezium-json.schema-include=true``: our values carry ``{"schema", "payload"}``),

and the two changelogs (row kinds and full rows, before-images included) are compared.

PyFlink lives in its own virtualenv (``scripts/ensure-flink-venv``); :func:`run_flink_jobs`
starts ``tests/compat/flink_job.py`` there once for a whole list of jobs, so a session pays for
one JVM.

Columns. The Flink DDL of both sides comes from the Connect schema of our records, one
:class:`Column` per field. Flink's ``debezium-json`` ignores the Connect schema, so it cannot read
Debezium's logical encodings as SQL types: a ``DATE`` column wants ``"2020-01-01"``, not the
``io.debezium.time.Date`` day count; ``DECIMAL`` wants a number or numeric text, not
``org.apache.kafka.connect.data.Decimal``'s base64 unscaled bytes. For those columns our side is
read as the raw Connect value (``INT``/``BIGINT``/``STRING``) and converted to the SQL value here,
exactly as the Connect schema says (what any schema-aware Debezium consumer does), while the
vendor side is read by Flink as the SQL type itself. Both sides are then compared as canonical
Python values (:meth:`Column.canon`). Per vendor format: a Debezium JSON vendor file with a schema
carries the same encodings as ours and is read raw too (:meth:`Column.as_debezium_vendor`); canal's
binary and boolean text, which Flink's BYTES and BOOLEAN misread, are read as text and TINYINT
(:meth:`Column.as_canal_vendor`).

Rows. Vendor messages Flink's format refuses (:func:`flink_refuses`) or our decoder refuses (the
goldens pin those) are left out of both sides and counted. A string/bytes cell we mark absent with
Debezium's placeholder where Flink says NULL is let through and counted (``_equal_but_absent``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from tests.goldens import Case, iter_messages
from transforms.decoders import Message, create_decoder
from transforms.envelope import NEW_KEY_HEADER, EmitOptions, OutRecord
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

__all__ = [
    "Column",
    "Comparison",
    "FlinkRow",
    "JobResult",
    "LineRecords",
    "TablePlan",
    "columns_of",
    "compare",
    "ensure_flink_python",
    "flink_refuses",
    "jobs_for",
    "line_records",
    "plan_tables",
    "run_flink_jobs",
]

ROOT = Path(__file__).resolve().parents[2]
ENSURE = ROOT / "scripts" / "ensure-flink-venv"
JOB_SCRIPT = Path(__file__).with_name("flink_job.py")

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
CHANGE_OPS = ("c", "r", "u", "d")


# ----------------------------------------------------------------------------- our side


@dataclass(frozen=True)
class LineRecords:
    """The records our pipeline makes of one input message (line ``line`` of the vendor file)."""

    line: int
    raw: bytes
    records: list[OutRecord]
    error: str | None = None  # our decoder's DecodeError, if it refused the message


def line_records(case: Case) -> list[LineRecords]:
    """Our pipeline over a golden case, per input message (same setup as records.golden_records,
    which drops the line numbers this comparison needs)."""
    opts = {k: v for k, v in case.options.items() if not k.startswith("__")}
    prefix = case.options.get("__topic_prefix", "cdcnorm")
    decoder = create_decoder(case.format_id, opts)
    pipeline = Pipeline(
        decoder, EmitOptions(prefix=prefix, decimal_mode=decoder.options.decimal_handling_mode)
    )
    out: list[LineRecords] = []
    for number, key, payload in iter_messages(case, decoder.binary):
        try:
            records = pipeline.process(Message(value=payload, key=key, topic=case.name, offset=number - 1))
        except DecodeError as exc:
            out.append(LineRecords(number, payload, [], f"{type(exc).__name__} at {exc.field}: {exc}"))
            continue
        out.append(LineRecords(number, payload, records))
    return out


def _payload(record: OutRecord) -> dict[str, Any] | None:
    value = record.value
    if not isinstance(value, dict):
        return None
    payload = value.get("payload", value)
    return payload if isinstance(payload, dict) and payload.get("op") in CHANGE_OPS else None


def _row_schema(record: OutRecord) -> dict[str, Any] | None:
    value = record.value
    if not isinstance(value, dict) or not isinstance(value.get("schema"), dict):
        return None
    for f in value["schema"].get("fields", []):
        if f.get("field") in ("after", "before") and f.get("type") == "struct":
            return dict(f)
    return None


# ----------------------------------------------------------------------------- columns


def _decimal_from_connect(value: Any, scale: int) -> decimal.Decimal | None:
    """org.apache.kafka.connect.data.Decimal: base64 of the big-endian two's complement unscaled
    value. Built from the digit tuple, so no context precision (28 digits) rounds it."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return decimal.Decimal(str(value))
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return decimal.Decimal((1 if unscaled < 0 else 0, digits, -scale))


def _decimal_text(value: Any) -> decimal.Decimal | None:
    return None if value is None else decimal.Decimal(str(value))


def _iso_datetime(value: Any) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(str(value))


def _from_epoch(unit_per_second: int) -> Callable[[Any], dt.datetime | None]:
    def convert(value: Any) -> dt.datetime | None:
        if value is None:
            return None
        micros = int(value) * 1_000_000 // unit_per_second
        return _EPOCH + dt.timedelta(microseconds=micros)

    return convert


def _zoned(value: Any) -> dt.datetime | None:
    """io.debezium.time.ZonedTimestamp (ISO-8601 with offset) as naive UTC, the way the vendor's
    zone-less local time is read (our decoders take vendor local times as UTC by default)."""
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
    return parsed


def _day(value: Any) -> dt.date | None:
    return None if value is None else _EPOCH_DAY + dt.timedelta(days=int(value))


def _iso_date(value: Any) -> dt.date | None:
    return None if value is None else dt.date.fromisoformat(str(value))


def _time_of_day(unit_per_second: int) -> Callable[[Any], dt.time | None]:
    def convert(value: Any) -> dt.time | None:
        if value is None:
            return None
        micros = int(value) * 1_000_000 // unit_per_second
        # Flink's JSON TIME keeps milliseconds: compare at that precision
        micros -= micros % 1000
        return (_EPOCH + dt.timedelta(microseconds=micros)).time()

    return convert


def _iso_time(value: Any) -> dt.time | None:
    return None if value is None else dt.time.fromisoformat(str(value))


def _json_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _latin1_base64(value: Any) -> Any:
    return None if value is None else base64.b64encode(str(value).encode("latin-1")).decode()


def _nonzero(value: Any) -> Any:
    return None if value is None else value != 0


def _same(value: Any) -> Any:
    return value


_PLAIN_TYPES = {
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float": "FLOAT",
    "float32": "FLOAT",
    "double": "DOUBLE",
    "float64": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
    "bytes": "BYTES",
}


@dataclass(frozen=True)
class Column:
    """One column of a compared table: its Flink type on each side and how each side's value
    becomes a comparable one."""

    name: str
    connect: str  # "int32", "int32/io.debezium.time.Date", ... (as the goldens list fields)
    vendor_type: str  # Flink SQL type for the vendor format
    ours_type: str  # Flink SQL type for our debezium-json
    ours_canon: Callable[[Any], Any] = _same
    vendor_canon: Callable[[Any], Any] = _same

    def canon(self, value: Any, side: str) -> Any:
        try:
            return (self.ours_canon if side == "ours" else self.vendor_canon)(value)
        except (ValueError, TypeError, decimal.InvalidOperation) as exc:
            # reported as a difference, never equal to a well-formed value
            return f"<not a {self.connect} value: {value!r} ({exc})>"

    def as_debezium_vendor(self) -> Column:
        """The vendor side is Debezium JSON too: read it as raw Connect values, like ours."""
        return replace(self, vendor_type=self.ours_type, vendor_canon=self.ours_canon)

    def as_canal_vendor(self) -> Column:
        """Canal writes every value as text. Two of them Flink's SQL types misread:

        * binary columns are ISO-8859-1 text (one char per byte), which Flink's BYTES (base64)
          cannot decode: read as text, compared as its ISO-8859-1 bytes;
        * BOOLEAN/TINYINT(1) columns are "0"/"1", which Flink's BOOLEAN reads with Java's
          ``Boolean.parseBoolean`` (so "1" is false): read as TINYINT, compared as non-zero.
        """
        if self.connect == "bytes":
            return replace(self, vendor_type="STRING", vendor_canon=_latin1_base64)
        if self.connect == "boolean":
            return replace(self, vendor_type="TINYINT", vendor_canon=_nonzero)
        return self


def column_of(f: dict[str, Any]) -> Column:
    """The Flink view of one Connect field (see the module doc for the logical types)."""
    name = f["field"]
    ctype = f.get("type", "string")
    logical = f.get("name")
    connect = ctype + (f"/{logical}" if logical else "")
    params = f.get("parameters") or {}
    if logical == "org.apache.kafka.connect.data.Decimal":
        scale = int(params.get("scale", 0))
        precision = params.get("connect.decimal.precision")
        # Flink's DECIMAL holds at most 38 digits; wider ones are read as text on the vendor side
        vendor = f"DECIMAL({precision}, {scale})" if precision and int(precision) <= 38 else "STRING"
        return Column(
            name, connect, vendor, "STRING", lambda v, s=scale: _decimal_from_connect(v, s), _decimal_text
        )
    if logical == "io.debezium.time.Date":
        return Column(name, connect, "DATE", "INT", _day, _iso_date)
    if logical == "io.debezium.time.Timestamp":
        return Column(name, connect, "TIMESTAMP(3)", "BIGINT", _from_epoch(1000), _iso_datetime)
    if logical == "io.debezium.time.MicroTimestamp":
        return Column(name, connect, "TIMESTAMP(6)", "BIGINT", _from_epoch(1_000_000), _iso_datetime)
    if logical == "io.debezium.time.NanoTimestamp":
        return Column(name, connect, "TIMESTAMP(9)", "BIGINT", _from_epoch(1_000_000_000), _iso_datetime)
    if logical == "io.debezium.time.ZonedTimestamp":
        return Column(name, connect, "TIMESTAMP(6)", "STRING", _zoned, _iso_datetime)
    if logical == "io.debezium.time.Time":
        return Column(name, connect, "TIME(3)", "INT", _time_of_day(1000), _iso_time)
    if logical == "io.debezium.time.MicroTime":
        return Column(name, connect, "TIME(3)", "BIGINT", _time_of_day(1_000_000), _iso_time)
    if logical == "io.debezium.time.NanoTime":
        return Column(name, connect, "TIME(3)", "BIGINT", _time_of_day(1_000_000_000), _iso_time)
    if logical == "io.debezium.data.Json":
        return Column(name, connect, "STRING", "STRING", _json_text, _json_text)
    if ctype in _PLAIN_TYPES:
        sql = _PLAIN_TYPES[ctype]
        return Column(name, connect, sql, sql)
    if ctype == "array":
        items = column_of({**(f.get("items") or {}), "field": "item"})
        if items.vendor_type == items.ours_type and items.ours_canon is _same:
            sql = f"ARRAY<{items.ours_type}>"
            return Column(name, connect, sql, sql)
    # structs, maps, arrays of logical types: both sides as JSON text (Flink's STRING of a JSON
    # object or array is its text), compared parsed
    return Column(name, connect, "STRING", "STRING", _json_text, _json_text)


def _type_text(f: dict[str, Any]) -> str:
    params = f.get("parameters")
    return f.get("type", "?") + (f"/{f['name']}" if f.get("name") else "") + (f"{params}" if params else "")


def columns_of(records: Iterable[OutRecord]) -> tuple[list[Column], list[str]]:
    """The columns of a table from the before/after struct of its records' schemas (a later
    record with more fields, after a schema change, extends the list), and the columns whose
    Connect type changes from one record to another (schemaless inference widens a type; one
    Flink table may not read both encodings, and the comparison names them when rows differ)."""
    seen: dict[str, Column] = {}
    first: dict[str, str] = {}
    changes: list[str] = []
    for record in records:
        schema = _row_schema(record)
        if schema is None:
            continue
        for f in schema.get("fields", []):
            name = f["field"]
            if name not in seen:
                seen[name] = column_of(f)
                first[name] = _type_text(f)
            elif _type_text(f) != first[name] and not any(c.startswith(f"{name}:") for c in changes):
                changes.append(f"{name}: Connect type {first[name]} becomes {_type_text(f)} within the table")
    return list(seen.values()), changes


def _vendor_values(lines: Iterable[LineRecords], name: str) -> Iterable[Any]:
    """The values a Debezium-JSON vendor file gives a column (before and after images)."""
    for lr in lines:
        message = orjson.loads(lr.raw)
        payload = message.get("payload", message) if isinstance(message, dict) else {}
        for part in ("before", "after"):
            row = payload.get(part) if isinstance(payload, dict) else None
            if isinstance(row, dict) and row.get(name) is not None:
                yield row[name]


# ----------------------------------------------------------------------------- table plans

# What Flink 2.3's formats do not take, as each one's deserializer says (the messages quoted are
# Flink's own). A vendor message one of these refuses fails the whole Flink query (short of
# 'ignore-parse-errors', which would hide every other failure too), so it is left out of both
# sides, and the comparison reports how many messages were left out and why.
_CANAL_TYPES = {"INSERT", "UPDATE", "DELETE"}  # "CREATE" is skipped by Flink, everything else refused


def flink_refuses(format_id: str, message: Any) -> str | None:
    """Why Flink's own ``format_id`` format cannot read a vendor message, or None if it can."""
    if not isinstance(message, dict):
        return "not a JSON object"
    if format_id == "canal-json":
        kind = message.get("type")
        if kind == "CREATE":
            return None  # Flink skips it; ours is a schema-change record (no op), also skipped
        if kind not in _CANAL_TYPES:
            return f'canal-json: Unknown "type" value "{kind}" (Flink reads INSERT/UPDATE/DELETE only)'
        if message.get("data") is None:
            return f"canal-json: a {kind} without data[] (the legacy DELETE layout) fails with a NullPointerException"
        if kind == "UPDATE" and not isinstance(message.get("old"), list):
            return "canal-json: an UPDATE without old[] fails with a NullPointerException"
        return None
    if format_id == "maxwell-json":
        kind = message.get("type")
        if kind not in ("insert", "update", "delete"):
            return f'maxwell-json: Unknown "type" value "{kind}" (Flink reads insert/update/delete only)'
        if kind == "update" and not isinstance(message.get("old"), dict):
            return "maxwell-json: an update without old fails with a NullPointerException"
        return None
    if format_id == "ogg-json":
        kind = message.get("op_type")
        if kind not in ("I", "U", "D"):
            return f'ogg-json: Unknown "op_type" value "{kind}" (Flink reads I/U/D only)'
        if kind in ("U", "D") and not isinstance(message.get("before"), dict):
            return (
                f'ogg-json: the "before" field of an {kind} message is null (Flink needs full before-images)'
            )
        return None
    if format_id == "debezium-json":
        payload = (
            message["payload"]
            if "schema" in message and isinstance(message.get("payload"), dict)
            else message
        )
        op = payload.get("op")
        if op not in CHANGE_OPS:
            return f"debezium-json: no change op ({op!r}): Flink reads c/r/u/d envelopes only"
        for part in ("before", "after"):
            if payload.get(part) is not None and not isinstance(payload[part], dict):
                return f"debezium-json: {part} is not a row object (MongoDB's string documents)"
        if op in ("u", "d") and payload.get("before") is None:
            return (
                f'debezium-json: the "before" field of an op={op} message is null (Flink needs full '
                "before-images: REPLICA IDENTITY FULL)"
            )
        return None
    raise ValueError(f"no Flink format for {format_id}")


@dataclass
class TablePlan:
    """One table of a vendor file: the vendor messages, our records of them, the columns."""

    case: Case
    db: str | None
    table: str | None
    topic: str
    columns: list[Column]
    vendor_lines: list[LineRecords]
    ours: list[OutRecord]
    vendor_options: dict[str, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)  # line -> why it is left out
    schema_changes: list[str] = field(default_factory=list)  # see columns_of

    @property
    def name(self) -> str:
        return f"{self.case}" + (f"[{self.table}]" if self.table else "")

    def our_kinds(self) -> list[tuple[str, bool]]:
        """The changelog row kinds Flink should make of our records, with whether the row comes
        from a primary-key change (Debezium: delete of the old key + create of the new one)."""
        out: list[tuple[str, bool]] = []
        for record in self.ours:
            payload = _payload(record)
            assert payload is not None
            pk_change = any(name in (NEW_KEY_HEADER, "__debezium.oldkey") for name, _ in record.headers)
            op = payload["op"]
            if op in ("c", "r"):
                out.append(("+I", pk_change))
            elif op == "u":
                out += [("-U", False), ("+U", False)]
            else:
                out.append(("-D", pk_change))
        return out


def plan_tables(case: Case, skip_lines: dict[int, str] | None = None) -> list[TablePlan]:
    """One plan per table our records of ``case`` go to.

    Vendor messages Flink refuses (:func:`flink_refuses`) and ``skip_lines`` (line → reason, the
    caller's) are left out of both sides. A vendor file of several tables is only split for
    ``canal-json``, whose Flink format can select one (``canal-json.database/table.include``).
    """
    skipped = dict(skip_lines or {})
    lines = []
    for lr in line_records(case):
        if lr.line in skipped:
            continue
        reason = flink_refuses(case.format_id, orjson.loads(lr.raw))
        if reason is None and lr.error:
            # the goldens pin this refusal (an error line in the expected file); Flink, which
            # ignores the Connect schema, may still read the message
            reason = f"refused by our decoder ({lr.error[:200]})"
        if reason is None:
            lines.append(lr)
        else:
            skipped[lr.line] = reason
    by_topic: dict[str, list[OutRecord]] = {}
    where: dict[str, tuple[str | None, str | None]] = {}
    for lr in lines:
        for record in lr.records:
            payload = _payload(record)
            if payload is None:
                continue
            by_topic.setdefault(record.topic, []).append(record)
            source = payload.get("source") or {}
            where.setdefault(record.topic, (source.get("db"), source.get("table")))
    if len(by_topic) > 1 and case.format_id != "canal-json":
        raise ValueError(f"{case}: {len(by_topic)} tables; Flink's {case.format_id} cannot select one")
    plans = []
    for topic, records in by_topic.items():
        db, table = where[topic]
        options: dict[str, str] = {}
        columns, schema_changes = columns_of(records)
        if case.format_id == "debezium-json":
            first = orjson.loads(lines[0].raw)
            if isinstance(first, dict) and "schema" in first and "payload" in first:
                options["debezium-json.schema-include"] = "true"
                # the vendor's values carry Debezium's logical encodings, as ours do (without a
                # schema they are plain JSON, read as the SQL type). A Decimal the vendor wrote
                # as a JSON number despite its schema (Paimon's vectors do) stays read as one.
                columns = [
                    c
                    if c.connect.endswith("/org.apache.kafka.connect.data.Decimal")
                    and any(isinstance(v, int | float) for v in _vendor_values(lines, c.name))
                    else c.as_debezium_vendor()
                    for c in columns
                ]
        if case.format_id == "canal-json":
            columns = [c.as_canal_vendor() for c in columns]
        split = len(by_topic) > 1
        if split:
            if db:
                options["canal-json.database.include"] = "^" + re.escape(db) + "$"
            options["canal-json.table.include"] = "^" + re.escape(table or "") + "$"
        plans.append(
            TablePlan(
                case,
                db if split else None,
                table if split else None,
                topic,
                columns,
                lines,
                records,
                options,
                skipped,
                schema_changes,
            )
        )
    return plans


def _one_line(raw: bytes) -> bytes:
    """A vendor message as one line (Flink's JSON formats read one message per line)."""
    if b"\n" not in raw and b"\r" not in raw:
        return raw.strip()
    return orjson.dumps(orjson.loads(raw))


def write_inputs(plan: TablePlan, folder: Path) -> tuple[Path, Path]:
    """The vendor file (its messages, one per line, license header and layout removed) and our
    file (the value of each change record, one per line) of a plan."""
    folder.mkdir(parents=True, exist_ok=True)
    vendor = folder / "vendor.jsonl"
    vendor.write_bytes(b"".join(_one_line(lr.raw) + b"\n" for lr in plan.vendor_lines))
    ours = folder / "ours.jsonl"
    ours.write_bytes(b"".join((r.value_bytes() or b"") + b"\n" for r in plan.ours))
    return vendor, ours


def jobs_for(plan: TablePlan, folder: Path) -> list[dict[str, Any]]:
    """The two Flink jobs of a plan: ``<name>/vendor`` and ``<name>/ours``."""
    vendor, ours = write_inputs(plan, folder)
    return [
        {
            "id": f"{plan.name}/vendor",
            "format": plan.case.format_id,
            "columns": [[c.name, c.vendor_type] for c in plan.columns],
            "path": str(vendor),
            "options": plan.vendor_options,
        },
        {
            "id": f"{plan.name}/ours",
            "format": "debezium-json",
            "columns": [[c.name, c.ours_type] for c in plan.columns],
            "path": str(ours),
            "options": {"debezium-json.schema-include": "true"},
        },
    ]


# ----------------------------------------------------------------------------- running Flink


@dataclass
class JobResult:
    rows: list[tuple[str, list[Any]]] = field(default_factory=list)
    error: str | None = None
    ended: bool = False


def ensure_flink_python() -> Path:
    """The PyFlink interpreter, installing its venv on first use (scripts/ensure-flink-venv)."""
    proc = subprocess.run([str(ENSURE)], capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/ensure-flink-venv failed:\n{proc.stderr.strip()}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("scripts/ensure-flink-venv printed no interpreter path")
    python = Path(lines[-1])
    return python if python.is_absolute() else ROOT / python


def run_flink_jobs(
    jobs: Sequence[dict[str, Any]], folder: Path, timeout: float = 600
) -> dict[str, JobResult]:
    """Run every job in one Flink process; results by job id. The process's stderr goes to
    ``folder/flink.log``, Flink's own log to ``folder/flink-*-python-*.log``."""
    python = ensure_flink_python()
    folder.mkdir(parents=True, exist_ok=True)
    jobs_file = folder / "jobs.json"
    jobs_file.write_text(json.dumps(list(jobs), indent=1))
    # Flink's log4j file goes to the job folder, not into the venv's site-packages
    env = {**os.environ, "PYTHONPATH": "", "FLINK_LOG_DIR": str(folder)}
    started = time.monotonic()
    with (folder / "flink.log").open("wb") as log:
        proc = subprocess.run(
            [str(python), str(JOB_SCRIPT), str(jobs_file)],
            stdout=subprocess.PIPE,
            stderr=log,
            timeout=timeout,
            check=False,
            env=env,
            cwd=folder,
        )
    results: dict[str, JobResult] = {job["id"]: JobResult() for job in jobs}
    for line in proc.stdout.decode().splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        result = results.setdefault(msg["job"], JobResult())
        if "error" in msg:
            result.error = msg["error"]
        elif "end" in msg:
            result.ended = True
        else:
            result.rows.append((msg["kind"], msg["row"]))
    if proc.returncode != 0:
        tail = (folder / "flink.log").read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(
            f"flink_job.py exited {proc.returncode} after {time.monotonic() - started:.0f}s:\n"
            + "\n".join(tail)
        )
    return results


# ----------------------------------------------------------------------------- comparing


@dataclass
class FlinkRow:
    kind: str
    values: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.kind} {list(self.values)}"


@dataclass
class Comparison:
    """Both sides of a plan, canonical, and where they differ."""

    vendor: list[FlinkRow]
    ours: list[FlinkRow]
    differences: list[str]
    absent_cells: int = 0  # see _equal_but_absent

    @property
    def compared(self) -> int:
        return max(len(self.vendor), len(self.ours))

    @property
    def equal(self) -> int:
        return self.compared - len([d for d in self.differences if d.startswith("row ")])


UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES = base64.b64encode(UNAVAILABLE.encode()).decode()


def _equal_but_absent(vendor: tuple[Any, ...], ours: tuple[Any, ...], absent_cells: list[int]) -> bool:
    """Rows equal but for columns the vendor message left out (an OGG compressed update, a
    column missing from a canal row): we mark those absent with Debezium's placeholder in a
    string or bytes column (README "NULL is not absent"), Flink's formats cannot tell absent
    from NULL and say NULL. Only that pair is let through, and counted."""
    count = 0
    for a, b in zip(vendor, ours, strict=True):
        if a == b:
            continue
        if a is None and b in (UNAVAILABLE, _UNAVAILABLE_BYTES):
            count += 1
            continue
        return False
    absent_cells.append(count)
    return True


def _canon_rows(rows: list[tuple[str, list[Any]]], columns: list[Column], side: str) -> list[FlinkRow]:
    return [
        FlinkRow(kind, tuple(c.canon(v, side) for c, v in zip(columns, values, strict=True)))
        for kind, values in rows
    ]


def compare(
    plan: TablePlan,
    vendor: JobResult,
    ours: JobResult,
    ignore_columns: dict[str, str] | None = None,
) -> Comparison:
    """Row kinds and values, row for row. ``ignore_columns`` (name → reason) are left out of the
    values; a row of ours that comes from a primary-key change may be ``-D``/``+I`` where the
    vendor format says ``-U``/``+U`` (Debezium splits such an update, see the README)."""
    ignore = ignore_columns or {}
    keep = [i for i, c in enumerate(plan.columns) if c.name not in ignore]
    differences: list[str] = []
    for side, result in (("vendor", vendor), ("ours", ours)):
        if result.error:
            differences.append(f"Flink failed on the {side} side: {result.error}")
        elif not result.ended:
            differences.append(f"Flink did not finish the {side} side")
    v_rows = [
        FlinkRow(r.kind, tuple(r.values[i] for i in keep))
        for r in _canon_rows(vendor.rows, plan.columns, "vendor")
    ]
    o_rows = [
        FlinkRow(r.kind, tuple(r.values[i] for i in keep))
        for r in _canon_rows(ours.rows, plan.columns, "ours")
    ]
    expected_kinds = plan.our_kinds()
    if len(expected_kinds) != len(o_rows) and not ours.error:
        differences.append(
            f"our {len(plan.ours)} records gave {len(o_rows)} Flink rows, expected {len(expected_kinds)}"
        )
    names = [plan.columns[i].name for i in keep]
    absent_cells: list[int] = []
    for i in range(max(len(v_rows), len(o_rows))):
        v = v_rows[i] if i < len(v_rows) else None
        o = o_rows[i] if i < len(o_rows) else None
        if v is None or o is None:
            differences.append(f"row {i}: vendor {v} / ours {o} (one side has no row)")
            continue
        pk_change = i < len(expected_kinds) and expected_kinds[i][1]
        kind_ok = v.kind == o.kind or (pk_change and (v.kind, o.kind) in (("-U", "-D"), ("+U", "+I")))
        if kind_ok and v.values == o.values:
            continue
        if kind_ok and _equal_but_absent(v.values, o.values, absent_cells):
            continue
        cols = [n for n, a, b in zip(names, v.values, o.values, strict=True) if a != b]
        differences.append(
            f"row {i}: kind vendor {v.kind} ours {o.kind}; differing columns {cols}:\n"
            + "".join(
                f"      {n}: vendor {a!r} / ours {b!r}\n"
                for n, a, b in zip(names, v.values, o.values, strict=True)
                if a != b
            )
        )
    if differences:
        # the likely cause when one side cannot be read with the table's one set of types
        differences += plan.schema_changes
    return Comparison(v_rows, o_rows, differences, sum(absent_cells))
