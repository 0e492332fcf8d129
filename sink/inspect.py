"""Show what the sink wrote: tables, row counts and rows (``cdcnorm tables``, ``python -m sink.inspect``)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from sink.config import SinkConfig
from sink.iceberg import SEQ_COLUMN, TS_COLUMN
from sink.spark_session import build_spark
from sink.sql import quote
from transforms.errors import CdcnormError

__all__ = ["CatalogUnreadable", "list_tables", "read_tables", "read_tables_with"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def list_tables(spark: Any, config: SinkConfig, deleted_keys: bool = False) -> list[str]:
    """``namespace.table`` of every table in the sink's catalog; with ``deleted_keys``, the table
    remembering deleted keys (``sink.deleted_keys_table``) too."""
    cat = quote(config.catalog.name)
    out: list[str] = []
    for ns in spark.sql(f"SHOW NAMESPACES IN {cat}").collect():
        namespace = ns[0]
        if len(namespace) > 1 and namespace[0] == namespace[-1] == "`":
            namespace = namespace[1:-1].replace("``", "`")  # Spark quotes names with special characters
        try:
            listed = spark.sql(f"SHOW TABLES IN {cat}.{quote(namespace)}").collect()
        except Exception as exc:  # a namespace the catalog lists but cannot open
            print(f"cannot list namespace {namespace!r}: {str(exc).splitlines()[0][:200]}", file=sys.stderr)
            continue
        out.extend(
            f"{namespace}.{t['tableName']}"
            for t in listed
            if deleted_keys or f"{namespace}.{t['tableName']}" != config.deleted_keys_table
        )
    return sorted(out)


class CatalogUnreadable(CdcnormError):
    """The catalog could not be listed or a table read (the first line of Spark's or Iceberg's
    error: a catalog that does not answer, a warehouse that does not exist, no permission)."""


def read_tables(config: SinkConfig, limit: int | None = None, meta: bool = False) -> dict[str, Any]:
    """Every table's row count, snapshot count, data-file count, columns (name, Spark type) and
    rows (JSON-ready; ``limit``: at most so many, ``0`` none); :class:`CatalogUnreadable` when the
    catalog cannot be read."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    spark = build_spark(config)
    try:
        return read_tables_with(spark, config, limit, meta)
    except (Py4JError, PySparkException) as exc:
        raise CatalogUnreadable(_java_reason(exc)) from None


def _java_reason(exc: Exception) -> str:
    """The first line of a Spark or Java error, and of its root cause (a REST client's
    ``Connection refused`` is three causes below its ``RESTException``)."""
    java = getattr(exc, "java_exception", None)
    text = (str(java) if java is not None else str(exc)).strip()
    first = text.splitlines()[0][:300] if text else type(exc).__name__
    root = java
    for _ in range(20):  # a cause chain is short; never loop on a cycle
        cause = root.getCause() if root is not None else None
        if cause is None:
            break
        root = cause
    if root is None or root is java:
        return first
    return f"{first} (caused by {str(root.toString()).splitlines()[0][:300]})"


def read_tables_with(spark: Any, config: SinkConfig, limit: int | None, meta: bool) -> dict[str, Any]:
    """:func:`read_tables` on a Spark session that has the config's catalog."""
    cat = quote(config.catalog.name)
    out: dict[str, Any] = {}
    for name in list_tables(spark, config):
        ns, table = name.split(".", 1)
        tid = f"{cat}.{quote(ns)}.{quote(table)}"
        frame = spark.table(tid)
        if not meta:
            frame = frame.drop(SEQ_COLUMN, TS_COLUMN)
        rows = [r.asDict(recursive=True) for r in (frame.limit(limit) if limit is not None else frame).collect()]
        out[name] = {
            **_shape(spark, config, ns, table),
            "count": spark.table(tid).count(),
            "snapshots": spark.sql(f"SELECT count(*) FROM {tid}.snapshots").collect()[0][0],
            "data_files": spark.sql(f"SELECT count(*) FROM {tid}.data_files").collect()[0][0],
            "delete_files": spark.sql(f"SELECT count(*) FROM {tid}.delete_files").collect()[0][0],
            "columns": [{"name": n, "type": t} for n, t in frame.dtypes],
            "rows": _jsonable(rows),
        }
    return out


def _shape(spark: Any, config: SinkConfig, namespace: str, name: str) -> dict[str, Any]:
    """The table's mode (``cdcnorm.mode``; upsert when unset), partition spec and write order."""
    from sink.datafiles import load_table
    from sink.iceberg import MODE_PROPERTY
    from sink.table_shape import layout_of

    jt = load_table(spark, config.catalog.name, namespace, name)
    return {"mode": jt.properties().get(MODE_PROPERTY) or "upsert", **layout_of(jt).describe()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sink.inspect")
    parser.add_argument("--config", required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--meta", action="store_true", help="keep the sink's __cdc_seq and __cdc_ts_ms columns")
    args = parser.parse_args()
    from sink.main import load_sink_config

    config, _ = load_sink_config(Path(args.config))
    sys.stdout.buffer.write(orjson.dumps(read_tables(config, args.limit, args.meta)) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
