"""The fast path through real Iceberg tables: Parquet files written by sink.arrow and committed
with the Java API (sink.datafiles) read back exactly as the rows the Spark paths write for the
same changes, with the same column metrics; a RowDelta of data and equality-delete files upserts
and deletes by key.

One local Spark session for the module; every test has its own tables.
"""

from __future__ import annotations

import datetime as dt
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import sink.iceberg as ice
import sink.merge as merge
from sink.arrow import (
    WrittenFile,
    arrow_schema,
    field_ids,
    new_data_path,
    select,
    to_arrow_table,
    write_parquet,
)
from sink.changes import SinkChange
from sink.config import SinkConfig
from sink.datafiles import FileEntries, data_file, equality_delete_file, load_table, schema_json
from sink.spark_session import build_spark
from sink.sql import quote
from tests.sink.test_iceberg_frame import COLUMNS, ROWS
from transforms.envelope import Operation

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CATALOG = "lake"  # the sink's catalog, on a plain warehouse path (table locations without a scheme)
URI_CATALOG = "lakeuri"  # the same on a file: URI warehouse (locations spelled file:///...)
NS = "arrow"
SEQ, TS = ice.SEQ_COLUMN, ice.TS_COLUMN

# values the Spark rows path stores as the fast path does, beyond test_iceberg_frame's ROWS:
# NaN and infinities, a float beyond float32, an int beyond 64 bits in a double, float32
# inside nested types, a map of lists of structs of maps, decimals stored as INT32/INT64/fixed
EXTRA_COLUMNS = {
    "k": "bigint",
    "d": "double",
    "f": "float",
    "nest": "struct<`a`:float,`b`:array<double>,`c`:map<string,struct<`t`:timestamp,`n`:timestamp_ntz,`day`:date>>>",
    "deep": "map<string,array<struct<`a`:float,`b`:map<int,timestamp>>>>",
    "decs": "array<struct<`s`:decimal(9,0),`m`:decimal(18,6),`l`:decimal(38,0)>>",
    "tz": "timestamp",
    "bin": "binary",
    "s": "string",
}
UTC8 = dt.timezone(dt.timedelta(hours=8))
NAN, INF = float("nan"), float("inf")
EXTRA_ROWS: list[dict[str, Any]] = [
    {
        "k": 1, "d": NAN, "f": INF, "nest": {"a": 0.1, "b": [NAN, -NAN, -0.0, 5e-324, None], "c": {
            "x": {"t": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC8), "n": dt.datetime(1, 1, 1),
                  "day": dt.date(9999, 12, 31)},
            "": None,
        }},
        "deep": {"k": [{"a": 1e-45, "b": {1: dt.datetime(1970, 1, 1, tzinfo=dt.UTC), 2: None}}, None], "e": []},
        "decs": [{"s": Decimal("-999999999"), "m": Decimal("999999999999.999999"), "l": Decimal("9" * 38)}, None],
        "tz": dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=45))), "bin": b"",
        "s": "\U0010ffff" * 20,  # bounds are cut to 16 characters: an upper bound cannot be rounded up
    },
    {
        "k": 2, "d": -INF, "f": 1e300, "nest": {"a": -1e-46, "b": [], "c": {}}, "deep": {},
        "decs": [{"s": Decimal("0"), "m": Decimal("-0.000001"), "l": Decimal("-" + "9" * 38)}],
        "tz": dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC), "bin": b"\xff" * 17 + b"\x00" * 40, "s": "é" * 17 + "\x00",
    },
    {"k": 3, "d": 2**70, "f": 16777217, "nest": {"a": 3.4e38, "b": None, "c": None}, "bin": b"\x01" * 40, "s": ""},
    {"k": 4, "d": 7, "f": -NAN, "nest": None, "deep": None, "decs": [], "tz": dt.datetime(1, 1, 2, 8, tzinfo=UTC8)},
]


@dataclass
class Lake:
    spark: Any
    tables: ice.IcebergTables
    jvm: Any
    gateway: Any


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    warehouse: Path = tmp_path_factory.mktemp("warehouse")
    config = SinkConfig.from_section({"topics": ["t"], "catalog": {"warehouse": str(warehouse)}})
    spark = build_spark(config)
    assert config.catalog.name == CATALOG
    prefix = f"spark.sql.catalog.{URI_CATALOG}"
    spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"{prefix}.type", "hadoop")
    spark.conf.set(f"{prefix}.warehouse", f"file://{tmp_path_factory.mktemp('uri-warehouse')}")
    for catalog in (CATALOG, URI_CATALOG):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{NS}")
    try:
        yield Lake(spark, ice.IcebergTables(spark, config), spark.sparkContext._jvm, spark.sparkContext._gateway)
    finally:
        spark.stop()


def _create(lake: Lake, name: str, columns: dict[str, str], key: tuple[str, ...] = (), catalog: str = CATALOG) -> str:
    """An Iceberg v2 table as the sink creates one: the data columns (the key NOT NULL), then the
    sequence and timestamp columns."""
    defs = [f"{quote(n)} {t}{' NOT NULL' if n in key else ''}" for n, t in columns.items()]
    tid = f"{catalog}.{NS}.{name}"
    lake.spark.sql(
        f"CREATE TABLE {tid} ({', '.join(defs)}, {SEQ} string, {TS} bigint) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    return tid


def _changes(rows: list[dict[str, Any]]) -> list[SinkChange]:
    return [
        SinkChange(("db", "t"), Operation.UPDATE, (i,), row, f"s{i:04d}", 1_700_000_000_000 + i, (), (), "topic", 0, i)
        for i, row in enumerate(rows)
    ]


def _spark_append(lake: Lake, tid: str, columns: dict[str, str], rows: list[dict[str, Any]], json: bool,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Append the rows as the sink's Spark path does (``MergeWriter.frame``, then ``writeTo().append()``):
    from JSON text in the JVM (``json``) or from Python rows (its fallback)."""
    changes = _changes(rows)
    state = ice._TableState(dict(columns), ())
    if json:  # the rows are ones the JSON path carries
        assert merge._json_documents(state.columns, changes, False) is not None
    with monkeypatch.context() as m:
        if not json:
            m.setattr(merge, "_json_documents", lambda *_, **__: None)
        frame = lake.tables.merger.frame(state, changes, False)
    # one file, as the fast path writes (the Python-rows frame has a partition per core)
    frame.select(*[quote(c) for c in [*columns, SEQ, TS]]).coalesce(1).writeTo(tid).append()


def _arrow_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**ch.row, SEQ: ch.seq, TS: ch.ts_ms} for ch in _changes(rows) if ch.row is not None]


def _java_table(lake: Lake, tid: str) -> Any:
    catalog, ns, name = tid.split(".")
    return load_table(lake.spark, catalog, ns, name)


def _arrow_append(lake: Lake, tid: str, rows: list[dict[str, Any]]) -> WrittenFile:
    """Append the rows as the fast path does: a Parquet file in the table's data folder, its
    DataFile committed with the Java API."""
    table = _java_table(lake, tid)
    schema = arrow_schema(schema_json(lake.jvm, table))
    written = write_parquet(to_arrow_table(schema, rows), new_data_path(table.location(), "data"))
    table.newAppend().appendFile(data_file(lake.jvm, table, written)).commit()
    return written


def _exact(value: Any) -> Any:
    """A collected value where floats compare by their bits (-0.0 is not 0.0, NaN is NaN)."""
    if isinstance(value, float):
        return ("float", struct.pack(">d", value).hex())
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def _read(lake: Lake, tid: str, columns: list[str] | None = None) -> list[Any]:
    cols = ", ".join(quote(c) for c in columns) if columns else "*"
    rows = lake.spark.sql(f"SELECT {cols} FROM {tid} ORDER BY {SEQ}").collect()
    return [_exact(r.asDict(recursive=True)) for r in rows]


def _metrics(lake: Lake, tid: str, bounds_only: tuple[str, ...] = ()) -> list[Any]:
    """Per data file, each column's value and null counts and bounds as Iceberg reads them. The
    column sizes differ by writer, and NaN counts are left out (see test_nan_counts); so are the
    counts of ``bounds_only`` columns."""
    out = []
    for row in lake.spark.sql(f"SELECT record_count, readable_metrics FROM {tid}.data_files").collect():
        metrics = row["readable_metrics"].asDict(recursive=True)
        for name, m in metrics.items():
            m.pop("column_size")
            m.pop("nan_value_count")
            if name in bounds_only:
                m.pop("value_count")
                m.pop("null_value_count")
        out.append((row["record_count"], _exact(metrics)))
    return out


def _primitive_columns(columns: dict[str, str]) -> list[str]:
    return [n for n, t in columns.items() if not t.startswith(("struct", "array", "map"))] + [SEQ, TS]


def test_arrow_file_reads_back_as_the_spark_paths_write(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column type of the sink and test_iceberg_frame's nasty values: the JSON path, the
    Python-rows path and the fast path store the same table, with the same metrics."""
    tids = {name: _create(lake, f"frame_{name}", COLUMNS) for name in ("json", "rows", "arrow")}
    _spark_append(lake, tids["json"], COLUMNS, ROWS, True, monkeypatch)
    _spark_append(lake, tids["rows"], COLUMNS, ROWS, False, monkeypatch)
    written = _arrow_append(lake, tids["arrow"], _arrow_rows(ROWS))
    assert written.record_count == len(ROWS)

    from_json, from_rows, from_arrow = (_read(lake, tid) for tid in tids.values())
    assert len(from_arrow) == len(ROWS)
    for i, (a, j, r) in enumerate(zip(from_arrow, from_json, from_rows, strict=True)):
        assert a == j == r, f"row {i}"
    # primitive columns only: Iceberg's vectorized Parquet reader (nested ones take the row reader)
    primitive = _primitive_columns(COLUMNS)
    assert _read(lake, tids["arrow"], primitive) == _read(lake, tids["json"], primitive)
    assert _metrics(lake, tids["arrow"]) == _metrics(lake, tids["json"])
    print(f"compared {len(ROWS)} rows x {len(COLUMNS) + 2} columns, and their metrics: equal")


def test_nan_infinities_and_nested_floats(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values the JSON path does not carry (NaN, infinities, 1e300 in a float, an int beyond 64
    bits, float32 in nested types): the fast path stores what the Python-rows path stores."""
    tids = {name: _create(lake, f"extra_{name}", EXTRA_COLUMNS) for name in ("rows", "arrow")}
    _spark_append(lake, tids["rows"], EXTRA_COLUMNS, EXTRA_ROWS, False, monkeypatch)
    _arrow_append(lake, tids["arrow"], _arrow_rows(EXTRA_ROWS))
    from_rows, from_arrow = _read(lake, tids["rows"]), _read(lake, tids["arrow"])
    for i, (a, r) in enumerate(zip(from_arrow, from_rows, strict=True)):
        assert a == r, f"row {i}"
    primitive = _primitive_columns(EXTRA_COLUMNS)
    assert _read(lake, tids["arrow"], primitive) == _read(lake, tids["rows"], primitive)
    # a float field in a struct: Iceberg's own writer counts its values and nulls itself (3 and
    # 0: the rows whose struct is not NULL), Parquet's statistics count every row (4 and 1, the
    # field of the NULL struct among them)
    counted = ("nest.a",)
    assert _metrics(lake, tids["arrow"], counted) == _metrics(lake, tids["rows"], counted)


def test_large_file_of_many_pages(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """200,000 rows in one file: many data pages, a string column whose dictionary overflows
    (its later pages plain-encoded), decimals as INT64, read by the vectorized reader: the same
    rows as the JSON path writes (EXCEPT ALL both ways), and an equality delete of 1,000 keys."""
    columns = {"id": "bigint", "s": "string", "d": "double", "dec": "decimal(18,2)", "tz": "timestamp", "b": "boolean"}
    json_tid, arrow_tid = (_create(lake, f"large_{n}", columns, key=("id",)) for n in ("json", "arrow"))
    base = dt.datetime(2024, 1, 1, tzinfo=UTC8)
    rows = [
        {"id": i, "s": f"{i:08d}-{'x' * (i % 40)}", "d": i / 3 if i % 10 else None, "dec": Decimal(i * 7) / 100,
         "tz": base + dt.timedelta(microseconds=i * 999_983), "b": i % 3 == 0}
        for i in range(200_000)
    ]
    _spark_append(lake, json_tid, columns, rows, True, monkeypatch)
    table = _java_table(lake, arrow_tid)
    schema = arrow_schema(schema_json(lake.jvm, table))
    with_seq = _arrow_rows(rows)
    start = time.perf_counter()
    arrow_table = to_arrow_table(schema, with_seq)
    converted = time.perf_counter()
    written = write_parquet(arrow_table, new_data_path(table.location(), "data"))
    wrote = time.perf_counter()
    files = FileEntries(lake.jvm, table, gateway=lake.gateway)
    table.newRowDelta().addRows(files.data_file(written)).commit()
    print(f"200,000 rows x 8 columns: to_arrow_table {(converted - start) * 1000:.0f} ms, write_parquet "
          f"{(wrote - converted) * 1000:.0f} ms ({written.size / 1e6:.1f} MB), commit {(time.perf_counter() - wrote) * 1000:.0f} ms")

    meta = pq.read_metadata(written.path)
    assert meta.num_rows == 200_000 and meta.row_group(0).column(1).num_values == 200_000
    assert "PLAIN" in meta.row_group(0).column(1).encodings  # the dictionary overflowed
    for a, b in ((json_tid, arrow_tid), (arrow_tid, json_tid)):
        assert lake.spark.sql(f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}").count() == 0

    deleted = [{"id": i} for i in range(0, 200_000, 200)]
    keys = write_parquet(to_arrow_table(select(schema, ["id"]), deleted), new_data_path(table.location(), "eq-deletes"))
    table.newRowDelta().addDeletes(files.equality_delete_file(keys, field_ids(schema, ["id"]))).commit()
    count, missing = lake.spark.sql(f"SELECT count(*), count_if(id % 200 = 0) FROM {arrow_tid}").first()[:]
    assert (count, missing) == (199_000, 0)


def test_int_in_a_nested_float_is_the_number(lake: Lake) -> None:
    """An int in a float or double field inside a struct, list or map stores that number, as
    Spark SQL stores the same literal (the Python-rows path would store NULL there: its
    conversion takes no int for a float field below the top level)."""
    columns = {"st": "struct<`a`:float,`b`:array<double>>", "m": "map<string,double>"}
    sql, fast = (_create(lake, f"nested_int_{n}", columns) for n in ("sql", "arrow"))
    lake.spark.sql(
        f"INSERT INTO {sql} VALUES (named_struct('a', CAST(16777217 AS FLOAT), 'b', array(CAST(2 AS DOUBLE))), "
        f"map('k', CAST(-3 AS DOUBLE)), 's0000', 1)"
    )
    _arrow_append(lake, fast, [{"st": {"a": 16777217, "b": [2]}, "m": {"k": -3}, SEQ: "s0000", TS: 1}])
    assert _read(lake, fast) == _read(lake, sql)
    assert _read(lake, fast)[0]["st"] == _exact({"a": 16777216.0, "b": [2.0]})


def test_nan_counts(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg's own writer counts NaNs of float columns; the footer has no such count, so a
    fast-path file's NaN counts are unknown (NULL: readers then assume NaNs may be there). Its
    bounds leave NaN out, as Iceberg's do."""
    columns = {"d": "double", "f": "float", "only_nan": "double"}
    spark_tid, arrow_tid = (_create(lake, f"nan_{n}", columns) for n in ("spark", "arrow"))
    rows = [{"d": NAN, "f": 1.5, "only_nan": NAN}, {"d": 2.5, "f": NAN, "only_nan": NAN}, {"d": -1.0, "f": None}]
    _spark_append(lake, spark_tid, columns, rows, False, monkeypatch)
    _arrow_append(lake, arrow_tid, _arrow_rows(rows))
    query = "SELECT readable_metrics.d AS d, readable_metrics.f AS f, readable_metrics.only_nan AS only_nan FROM {}.data_files"
    (spark_m,) = lake.spark.sql(query.format(spark_tid)).collect()
    (arrow_m,) = lake.spark.sql(query.format(arrow_tid)).collect()
    assert (spark_m["d"]["nan_value_count"], spark_m["f"]["nan_value_count"]) == (1, 1)
    assert (arrow_m["d"]["nan_value_count"], arrow_m["f"]["nan_value_count"]) == (None, None)
    for column in ("d", "f", "only_nan"):
        assert arrow_m[column]["lower_bound"] == spark_m[column]["lower_bound"], column
        assert arrow_m[column]["upper_bound"] == spark_m[column]["upper_bound"], column
    assert arrow_m["only_nan"]["lower_bound"] is None
    assert lake.spark.sql(f"SELECT count(*) FROM {arrow_tid} WHERE isnan(d) OR d > 2").first()[0] == 2


def test_naive_datetime_in_a_zoned_column_is_utc(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A naive datetime in a ``timestamp`` (with zone) column is read in the session time zone
    (UTC) by the JSON path, and stored as UTC by the fast path. (The Python-rows path reads it
    in the Python process's local zone instead.)"""
    columns = {"tz": "timestamp"}
    json_tid, arrow_tid = (_create(lake, f"naive_{n}", columns) for n in ("json", "arrow"))
    rows = [{"tz": dt.datetime(2024, 1, 1, 12, 30, 0, 5)}, {"tz": dt.datetime(1900, 1, 1)}]
    _spark_append(lake, json_tid, columns, rows, True, monkeypatch)
    _arrow_append(lake, arrow_tid, _arrow_rows(rows))
    query = "SELECT unix_micros(tz) FROM {} ORDER BY " + SEQ
    micros = [r[0] for r in lake.spark.sql(query.format(arrow_tid)).collect()]
    assert micros == [r[0] for r in lake.spark.sql(query.format(json_tid)).collect()]
    assert micros[0] == int(dt.datetime(2024, 1, 1, 12, 30, tzinfo=dt.UTC).timestamp()) * 1_000_000 + 5


def _row_delta(lake: Lake, table: Any, files: FileEntries, rows: list[dict[str, Any]], keys: list[dict[str, Any]],
               key: list[str], batch: str) -> tuple[Any, Any]:
    """Commit a batch as the fast path does: its rows as a data file, the keys they replace or
    delete as an equality-delete file, in one RowDelta."""
    schema = arrow_schema(schema_json(lake.jvm, table))
    delta = table.newRowDelta()
    data = deletes = None
    if rows:
        written = write_parquet(to_arrow_table(schema, rows), new_data_path(table.location(), "data"))
        data = files.data_file(written)
        delta = delta.addRows(data)
    if keys:
        key_schema = select(schema, key)
        written = write_parquet(to_arrow_table(key_schema, keys), new_data_path(table.location(), "eq-deletes"))
        deletes = files.equality_delete_file(written, field_ids(schema, key))
        delta = delta.addDeletes(deletes)
    delta.set("cdcnorm.test-batch", batch).commit()
    return data, deletes


def _kv(lake: Lake, tid: str) -> dict[int, tuple[str, str]]:
    return {r["id"]: (r["v"], r[SEQ]) for r in lake.spark.sql(f"SELECT id, v, {SEQ} FROM {tid}").collect()}


def test_row_delta_upserts_and_deletes_by_key(lake: Lake) -> None:
    tid = _create(lake, "kv", {"id": "bigint", "v": "string", "n": "double"}, key=("id",), catalog=URI_CATALOG)
    table = _java_table(lake, tid)
    assert table.location().startswith("file:")  # the files' paths keep the scheme
    files = FileEntries(lake.jvm, table, gateway=lake.gateway)

    rows = [{"id": i, "v": f"v{i}", "n": i / 2, SEQ: "s1", TS: 1} for i in range(1, 6)]
    data, _ = _row_delta(lake, table, files, rows, [], ["id"], "1")
    assert data.path().startswith("file:") and data.recordCount() == 5
    assert _kv(lake, tid) == {i: (f"v{i}", "s1") for i in range(1, 6)}

    # key 2 deleted, key 3 updated: the delete file holds both keys, the data file key 3's new
    # row (a RowDelta's equality deletes apply to older snapshots' rows only, not its own)
    _row_delta(lake, table, files, [{"id": 3, "v": "new", "n": None, SEQ: "s2", TS: 2}], [{"id": 2}, {"id": 3}], ["id"], "2")
    assert _kv(lake, tid) == {1: ("v1", "s1"), 3: ("new", "s2"), 4: ("v4", "s1"), 5: ("v5", "s1")}

    _row_delta(lake, table, files, [], [{"id": 4}], ["id"], "3")  # a delete only
    assert _kv(lake, tid) == {1: ("v1", "s1"), 3: ("new", "s2"), 5: ("v5", "s1")}

    summaries = lake.spark.sql(f"SELECT operation, summary FROM {tid}.snapshots ORDER BY committed_at").collect()
    assert [s["summary"]["cdcnorm.test-batch"] for s in summaries] == ["1", "2", "3"]
    assert [s["operation"] for s in summaries] == ["overwrite", "overwrite", "delete"]

    entries = lake.spark.sql(
        f"SELECT content, record_count, equality_ids, readable_metrics.id AS id, file_path FROM {tid}.files"
    ).collect()
    by_kind = sorted((e["content"], e["record_count"], e["equality_ids"], e["id"]["lower_bound"], e["id"]["upper_bound"],
                      e["id"]["null_value_count"]) for e in entries)
    # content 0: data, 2: equality deletes on field 1 (id); bounds of the key in every file
    assert by_kind == [(0, 1, None, 3, 3, 0), (0, 5, None, 1, 5, 0), (2, 1, [1], 4, 4, 0), (2, 2, [1], 2, 3, 0)]
    assert all(e["file_path"].startswith("file:") for e in entries)


def test_row_delta_with_a_composite_key(lake: Lake) -> None:
    tid = _create(lake, "kv2", {"tenant": "string", "id": "int", "v": "string"}, key=("tenant", "id"))
    table = _java_table(lake, tid)
    files = FileEntries(lake.jvm, table, gateway=lake.gateway)
    rows = [{"tenant": t, "id": i, "v": f"{t}{i}", SEQ: "s1", TS: 1} for t in ("a", "b") for i in (1, 2)]
    _row_delta(lake, table, files, rows, [], ["tenant", "id"], "1")
    _row_delta(lake, table, files, [{"tenant": "b", "id": 2, "v": "new", SEQ: "s2", TS: 2}],
               [{"tenant": "a", "id": 1}, {"tenant": "b", "id": 2}], ["tenant", "id"], "2")
    got = {(r["tenant"], r["id"]): r["v"] for r in lake.spark.table(tid).collect()}
    assert got == {("a", 2): "a2", ("b", 1): "b1", ("b", 2): "new"}
    (ids,) = lake.spark.sql(f"SELECT equality_ids FROM {tid}.delete_files").first()
    assert ids == [1, 2]


def test_module_functions_and_java_side_cost(lake: Lake) -> None:
    """data_file / equality_delete_file without a held FileEntries, and what an entry costs on
    the driver (footer parse, metrics, builder: printed, not asserted)."""
    tid = _create(lake, "cost", {"id": "bigint", "v": "string", "at": "timestamp"}, key=("id",))
    table = _java_table(lake, tid)
    schema = arrow_schema(schema_json(lake.jvm, table))
    rows = [{"id": i, "v": f"value {i}", "at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), SEQ: "s1", TS: 1} for i in range(1000)]
    written = write_parquet(to_arrow_table(schema, rows), new_data_path(table.location(), "data"))
    keys = write_parquet(to_arrow_table(select(schema, ["id"]), [{"id": 7}]), new_data_path(table.location(), "eq-deletes"))
    df = data_file(lake.jvm, table, written)
    ef = equality_delete_file(lake.jvm, lake.gateway, table, keys, field_ids(schema, ["id"]))
    assert (df.recordCount(), df.fileSizeInBytes(), str(df.format())) == (1000, written.size, "PARQUET")
    assert (ef.recordCount(), list(ef.equalityFieldIds()), str(ef.content())) == (1, [1], "EQUALITY_DELETES")
    table.newRowDelta().addRows(df).commit()
    table.newRowDelta().addDeletes(ef).commit()
    assert lake.spark.sql(f"SELECT count(*), min(id), max(id) FROM {tid}").first()[:] == (999, 0, 999)

    files = FileEntries(lake.jvm, table, gateway=lake.gateway)
    ids = field_ids(schema, ["id"])
    for _ in range(100):  # JIT warm-up
        files.data_file(written)
        files.equality_delete_file(keys, ids)
    n = 300
    costs = {}
    for name, build in (("metrics (footer parse + footerMetrics)", lambda: files.metrics(written)),
                        ("data_file", lambda: files.data_file(written)),
                        ("equality_delete_file", lambda: files.equality_delete_file(keys, ids)),
                        ("data_file without a held FileEntries", lambda: data_file(lake.jvm, table, written))):
        start = time.perf_counter()
        for _ in range(n):
            build()
        costs[name] = (time.perf_counter() - start) / n * 1000
    print("per-file Java-side cost: " + ", ".join(f"{k} {v:.2f} ms" for k, v in costs.items()))

