"""Spark SQL text the Iceberg table modules share (:mod:`sink.iceberg`, :mod:`sink.merge`,
:mod:`sink.deleted_keys`): quoted identifiers and string literals, a timestamp some seconds ago,
and what their ``CREATE TABLE`` statements have in common."""

from __future__ import annotations

import datetime as dt

__all__ = ["DISTRIBUTION_PROPERTIES", "location_clause", "older_than", "quote", "sql_string"]

# set to "none" on the sink's tables (unpartitioned): no shuffle of the rows before writing them
DISTRIBUTION_PROPERTIES = (
    "write.distribution-mode",
    "write.merge.distribution-mode",
    "write.update.distribution-mode",
    "write.delete.distribution-mode",
)


def sql_string(value: str) -> str:
    r"""A Spark SQL string literal.

    >>> print(sql_string("it's a\\b"))
    'it\'s a\\b'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote(name: str) -> str:
    """A backtick-quoted SQL identifier.

    >>> quote("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def location_clause(table_location: str, namespace: str, name: str) -> str:
    """`` LOCATION '<sink.catalog.table_location>/<namespace>/<name>'``, or nothing when the
    catalog places its tables itself (no ``table_location``).

    >>> location_clause("s3://b/lake/", "db", "t"), location_clause("", "db", "t")
    (" LOCATION 's3://b/lake/db/t'", '')
    """
    base = table_location.rstrip("/")
    return f" LOCATION {sql_string(f'{base}/{namespace}/{name}')}" if base else ""


def older_than(seconds: int) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
