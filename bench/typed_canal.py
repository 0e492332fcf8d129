"""The workload of the per-core and table-count benches: Canal JSON inserts of 8 typed columns.

Each message is one ``INSERT`` row of ``shop.t<k>`` (``k = i % tables``) with ``mysqlType`` and
``sqlType`` declared, the shape issue 29 measured: ``id bigint``, ``name varchar(64)``,
``price decimal(10,2)``, ``qty int``, ``created datetime(3)``, ``day date``, ``flag tinyint(1)``,
``note text``.

>>> import orjson
>>> doc = orjson.loads(canal_message(7, tables=3))
>>> doc["table"], doc["data"][0]["id"], doc["type"]
('t1', '7', 'INSERT')
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

__all__ = ["FLINK_CANAL_COLUMNS", "FLINK_DEBEZIUM_COLUMNS", "MYSQL_TYPES", "canal_message", "canal_messages", "write_lines"]

MYSQL_TYPES = {
    "id": "bigint",
    "name": "varchar(64)",
    "price": "decimal(10,2)",
    "qty": "int",
    "created": "datetime(3)",
    "day": "date",
    "flag": "tinyint(1)",
    "note": "text",
}
_SQL_TYPES = {"id": -5, "name": 12, "price": 3, "qty": 4, "created": 93, "day": 91, "flag": -6, "note": 2005}

# the same columns as Flink SQL types: read from Canal JSON by Flink's canal-json format ...
FLINK_CANAL_COLUMNS = [
    ("id", "BIGINT"),
    ("name", "STRING"),
    ("price", "DECIMAL(10, 2)"),
    ("qty", "INT"),
    ("created", "TIMESTAMP(3)"),
    ("day", "DATE"),
    ("flag", "TINYINT"),
    ("note", "STRING"),
]
# ... and from our Debezium JSON by its debezium-json format, which ignores the Connect schema:
# the Connect encodings as they are in the JSON (decimal: base64 text, datetime: epoch ms,
# date: epoch days, tinyint(1): a boolean, as Debezium maps it)
FLINK_DEBEZIUM_COLUMNS = [
    ("id", "BIGINT"),
    ("name", "STRING"),
    ("price", "STRING"),
    ("qty", "INT"),
    ("created", "BIGINT"),
    ("day", "INT"),
    ("flag", "BOOLEAN"),
    ("note", "STRING"),
]


def canal_message(i: int, tables: int = 1) -> bytes:
    """Message ``i`` of the workload spread over ``tables`` tables."""
    row = {
        "id": str(i),
        "name": f"n{i}",
        "price": f"{i % 1000}.{i % 100:02d}",
        "qty": str(i % 100),
        "created": "2024-01-02 03:04:05.123",
        "day": "2024-01-02",
        "flag": str(i % 2),
        "note": "hello",
    }
    return orjson.dumps(
        {
            "data": [row],
            "database": "shop",
            "table": f"t{i % tables}",
            "pkNames": ["id"],
            "isDdl": False,
            "type": "INSERT",
            "es": 1_700_000_000_000 + i,
            "ts": 1_700_000_000_001 + i,
            "id": i,
            "old": None,
            "mysqlType": MYSQL_TYPES,
            "sqlType": _SQL_TYPES,
            "sql": "",
        }
    )


def canal_messages(n: int, tables: int = 1) -> Iterator[bytes]:
    """The first ``n`` messages of the workload."""
    return (canal_message(i, tables) for i in range(n))


def write_lines(path: Path, lines: Iterator[bytes]) -> int:
    """Write one message per line; returns how many."""
    count = 0
    with path.open("wb") as out:
        for line in lines:
            out.write(line)
            out.write(b"\n")
            count += 1
    return count
