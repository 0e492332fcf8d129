"""The MERGE source frame: built from JSON text in the JVM, it holds exactly the rows the
Python-rows path (the fallback) builds, for every column type the sink maps.

One local Spark session in this process; each case compares ``collect()`` of both paths.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import sink.iceberg as ice
import sink.merge as merge
from sink.changes import SinkChange
from sink.config import SinkConfig
from sink.spark_session import build_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark]

COLUMNS = {
    "f": "float",
    "d": "double",
    "i": "int",
    "b": "bigint",
    "bo": "boolean",
    "s": "string",
    "bin": "binary",
    "dec": "decimal(38,10)",
    "dec2": "decimal(5,2)",
    "day": "date",
    "ntz": "timestamp_ntz",
    "tz": "timestamp",
    "st": "struct<`x`:int,`y`:binary,`z`:decimal(10,2)>",
    "arr": "array<string>",
    "m": "map<string,bigint>",
}
ROWS: list[dict[str, Any]] = [
    {
        "f": 0.1, "d": 1.5, "i": 2**31 - 1, "b": 2**63 - 1, "bo": True, "s": 'héllo "q" \n\x00 ✓ 𝄞', "bin": b"",
        "dec": Decimal("1234567890123456789012345678.0123456789"), "dec2": Decimal("-999.99"),
        "day": dt.date(1, 1, 1), "ntz": dt.datetime(1, 1, 1, 0, 0, 0, 1),
        "tz": dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone(dt.timedelta(hours=8))),
        "st": {"x": 1, "y": b"\x00\xff", "z": Decimal("1.50")}, "arr": ["a", None, ""], "m": {"k": 1, "": None},
    },
    {
        "f": 1e-45, "d": -0.0, "i": -(2**31), "b": -(2**63), "bo": False, "s": "", "bin": b"\x00\xff\x10",
        "dec": Decimal("0E-10"), "dec2": Decimal("0.00"), "day": dt.date(9999, 12, 31),
        "ntz": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "tz": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        "st": None, "arr": [], "m": {},
    },
    {"f": 3.4e38, "d": 1e308, "st": {"x": None, "y": None, "z": None}},  # other columns absent: NULL
    {
        "f": 16777217.0, "d": 0.30000000000000004, "i": 0, "b": 0, "bo": True, "s": "x", "bin": b"a",
        "dec": Decimal("-1.5"), "dec2": Decimal("1.10"), "day": dt.date(1582, 10, 4), "ntz": dt.datetime(1582, 10, 4, 12),
        "tz": dt.datetime(1900, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
        "st": {"x": 5}, "arr": ["z"], "m": {"a": -1},
    },
    {"f": 2, "d": 3, "i": 1, "s": "integral numbers in float columns"},
]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ice.IcebergTables]:
    warehouse: Path = tmp_path_factory.mktemp("warehouse")
    config = SinkConfig.from_section({"topics": ["t"], "catalog": {"warehouse": str(warehouse)}})
    spark = build_spark(config)
    try:
        yield ice.IcebergTables(spark, config)
    finally:
        spark.stop()


def _changes(rows: list[dict[str, Any]]) -> list[SinkChange]:
    return [
        SinkChange(("db", "t"), "d" if i == 2 else "u", (i,), row, f"s{i:04d}", 1_700_000_000_000 + i, (), ("i",),
                   "topic", 0, i, frozenset({"s", "arr"}) if i % 2 else frozenset(),
                   {} if i % 2 else {"dec2": "s0000"})
        for i, row in enumerate(rows)
    ]


def _both(tables: ice.IcebergTables, columns: dict[str, str], changes: list[SinkChange], monkeypatch: pytest.MonkeyPatch,
          with_unavailable: bool = True) -> tuple[list[Any], list[Any]]:
    state = ice._TableState(dict(columns), ("i",))
    assert merge._json_documents(state.columns, changes, with_unavailable) is not None
    from_json = tables.merger.frame(state, changes, with_unavailable).collect()
    with monkeypatch.context() as m:
        m.setattr(merge, "_json_documents", lambda *_: None)
        from_rows = tables.merger.frame(state, changes, with_unavailable).collect()
    return from_json, from_rows


def test_json_frame_equals_python_rows(tables: ice.IcebergTables, monkeypatch: pytest.MonkeyPatch) -> None:
    from_json, from_rows = _both(tables, COLUMNS, _changes(ROWS), monkeypatch)
    print(f"compared {len(from_json)} rows x {len(COLUMNS) + 4} columns")
    assert len(from_json) == len(ROWS)
    assert [r.asDict(recursive=True) for r in from_json] == [r.asDict(recursive=True) for r in from_rows]
    last = from_json[-1]
    assert (last["f"], last["d"]) == (2.0, 3.0)  # not NULL
    assert from_json[1]["__cdc_unavailable"] == ["arr", "s"] and from_json[0]["__cdc_unavailable"] == []
    assert from_json[0]["__cdc_filled"] == {"dec2": "s0000"} and from_json[1]["__cdc_filled"] == {}


def test_frame_splits_into_chunks(tables: ice.IcebergTables, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(merge, "_JSON_CHUNK_BYTES", 200)
    changes = _changes([{"i": n, "s": f"row {n}", "dec2": Decimal(n) / 100} for n in range(50)])
    docs = merge._json_documents({"i": "int", "s": "string", "dec2": "decimal(5,2)"}, changes, False)
    assert docs is not None and len(docs) > 5
    from_json, from_rows = _both(tables, {"i": "int", "s": "string", "dec2": "decimal(5,2)"}, changes, monkeypatch, False)
    assert from_json == from_rows and len(from_json) == 50


def test_values_json_cannot_carry_use_python_rows() -> None:
    changes = _changes([{"i": 1, "b": 2**70}])
    assert merge._json_documents({"i": "int", "b": "bigint"}, changes, True) is None  # beyond 64 bits
    nested_float = {"i": "int", "st": "struct<`x`:float>"}
    assert merge._json_documents(nested_float, _changes([{"i": 1, "st": {"x": 0.1}}]), True) is None
    assert merge._json_documents({"i": "int", "f": "float"}, _changes([{"i": 1, "f": 1e300}]), True) is None
    # JSON has no NaN or infinity (orjson writes null): the rows path keeps them
    for value in (float("nan"), float("inf"), float("-inf")):
        assert merge._json_documents({"i": "int", "d": "double"}, _changes([{"i": 1, "d": value}]), True) is None
        assert merge._json_documents({"i": "int", "f": "float"}, _changes([{"i": 1, "f": value}]), True) is None


def test_nan_and_infinities_are_stored_not_nulled(tables: ice.IcebergTables, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"i": 1, "d": float("nan"), "f": float("inf")}, {"i": 2, "d": float("-inf"), "f": float("nan")}]
    state = ice._TableState({"i": "int", "d": "double", "f": "float"}, ("i",))
    got = [r.asDict() for r in tables.merger.frame(state, _changes(rows), False).collect()]
    assert [str(r["d"]) for r in got] == ["nan", "-inf"] and [str(r["f"]) for r in got] == ["inf", "nan"]
