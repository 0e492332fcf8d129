"""Runs inside the PyFlink virtualenv (scripts/ensure-flink-venv), not in the project's .venv.

Reads CDC files with Flink's own formats and prints the changelog rows Flink makes of them.
Every job of a test session runs in this one process (one JVM, one MiniCluster, one
TableEnvironment), one streaming query after the other::

    .venv-flink/bin/python tests/compat/flink_job.py JOBS.json

``JOBS.json`` is a list of jobs::

    {"id": "canal-json/flink-canal-data/vendor",
     "format": "canal-json",
     "columns": [["id", "INT"], ["name", "STRING"]],
     "path": "/abs/path/one-message-per-line.jsonl",
     "options": {"canal-json.table.include": "products"}}

For each job this creates ``CREATE TABLE ... WITH ('connector'='filesystem', 'format'=...)`` over
the file and runs ``SELECT`` of every column in **streaming** mode: batch mode refuses changelog sources
("Querying a table in batch mode is currently only possible for INSERT-only table sources"), and
a streaming ``TableResult.collect()`` hands back each row with its ``RowKind``. The file source is
bounded, so the query ends when the file is read. Parallelism is 1, so rows keep file order.

Output, one JSON object per line on stdout (nothing else is printed there)::

    {"job": ID, "kind": "+I" | "-U" | "+U" | "-D", "row": [...]}
    {"job": ID, "end": N}                 after the N rows of a job
    {"job": ID, "error": "..."}           the job failed (the next job still runs)

Values are made JSON-safe: DECIMAL as its string, DATE/TIME/TIMESTAMP as Flink's own text of
them (``CAST(c AS STRING)``: PyFlink's Python conversion would cut a TIMESTAMP to milliseconds),
BYTES as base64, ROW as a list, MAP as an object.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import sys
from typing import Any

_KINDS = {"INSERT": "+I", "UPDATE_BEFORE": "-U", "UPDATE_AFTER": "+U", "DELETE": "-D"}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "_values"):  # a nested pyflink Row
        return [_plain(v) for v in value._values]
    return str(value)


def _cause(text: str) -> str:
    """The informative lines of a Java exception: its message and each ``Caused by:``
    (py4j hands over the whole stack)."""
    lines = [ln.strip() for ln in text.splitlines()]
    keep = [ln[:600] for ln in lines if ln and not ln.startswith(("at ", "..."))]
    causes = [ln for ln in keep if ln.startswith("Caused by:")]
    return "\n".join((keep[:2] + causes[-3:]) if causes else keep[:6])


def _selected(name: str, sql_type: str) -> str:
    """A column as selected: temporal types as Flink's own text of them, since PyFlink's
    conversion to Python objects keeps only milliseconds of a TIMESTAMP."""
    if sql_type.upper().startswith(("TIMESTAMP", "TIME", "DATE")):
        return f"CAST({_quote(name)} AS STRING)"
    return _quote(name)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def run(jobs: list[dict[str, Any]]) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    cluster = _start_cluster()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    if cluster is not None:
        uri = cluster.getRestAddress().get()
        config.set("execution.target", "remote")
        config.set("rest.address", uri.getHost())
        config.set("rest.port", str(uri.getPort()))
    try:
        _run_jobs(env, jobs)
    finally:
        if cluster is not None:
            cluster.close()


def _start_cluster() -> Any:
    """One MiniCluster for every job of the session, in this JVM.

    Flink's default local executor starts (and stops) a MiniCluster per query, about 2 s each;
    a session of a few dozen small queries would spend most of its time there. Jobs are sent to
    this one over its REST endpoint on a free loopback port instead. Returns None (default local
    execution) if the internal API is not there.
    """
    try:
        from pyflink.java_gateway import get_gateway

        jvm = get_gateway().jvm
        conf = jvm.org.apache.flink.configuration.Configuration()
        for key, value in (
            ("rest.bind-address", "127.0.0.1"),
            ("rest.address", "127.0.0.1"),
            ("rest.bind-port", "0"),
        ):
            conf.setString(key, value)
        mini = jvm.org.apache.flink.runtime.minicluster
        settings = (
            mini.MiniClusterConfiguration.Builder()
            .setConfiguration(conf)
            .setNumTaskManagers(1)
            .setNumSlotsPerTaskManager(2)
            .build()
        )
        cluster = mini.MiniCluster(settings)
        cluster.start()
        return cluster
    except Exception as exc:  # pragma: no cover - depends on Flink internals
        sys.stderr.write(f"flink_job: no shared MiniCluster ({exc}); one per query\n")
        return None


def _run_jobs(env: Any, jobs: list[dict[str, Any]]) -> None:
    for number, job in enumerate(jobs):
        table = f"t{number}"
        columns = ", ".join(f"{_quote(name)} {sql_type}" for name, sql_type in job["columns"])
        options = {"connector": "filesystem", "path": "file://" + job["path"], "format": job["format"]}
        options.update(job.get("options") or {})
        with_clause = ", ".join(f"{_literal(k)} = {_literal(str(v))}" for k, v in options.items())
        rows = 0
        try:
            env.execute_sql(f"CREATE TEMPORARY TABLE {table} ({columns}) WITH ({with_clause})")
            select = ", ".join(_selected(name, sql_type) for name, sql_type in job["columns"])
            with env.execute_sql(f"SELECT {select} FROM {table}").collect() as result:
                for row in result:
                    kind = _KINDS.get(row.get_row_kind().name, row.get_row_kind().name)
                    _emit({"job": job["id"], "kind": kind, "row": [_plain(v) for v in row._values]})
                    rows += 1
        except Exception as exc:  # reported per job, the session goes on
            _emit({"job": job["id"], "error": _cause(str(exc))})
            continue
        finally:
            env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {table}")
        _emit({"job": job["id"], "end": rows})


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: flink_job.py JOBS.json\n")
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        run(json.load(fh))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
