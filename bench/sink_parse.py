"""Parsing the sink's records into typed change rows inside Spark tasks: Python against the JVM.

The sink's read tasks (:func:`sink.tasks.read_partition`) parse each canonical record in the
Python workers: one :class:`sink.changes.RecordParser` per task, ``parse(...)`` per record
(orjson, then the Connect schema's decoders per column). The alternative is Spark's own JSON
reader in the JVM: ``from_json`` against a Spark schema built from the record's Connect schema,
with the Connect encodings (base64 decimals, epoch dates and timestamps) turned into the types
the Iceberg table stores by SQL expressions. This measures both, in the same Spark session, on
the same records (a Debezium envelope with schema and payload, table ``bench.orders`` of
:func:`bench.sink_merge.change_records`: 60% creates, 30% updates, 10% deletes, each delete
followed by its tombstone), both paths run by tasks on the executors:

1. **Python** (the baseline, what the sink does today): an RDD of ``(key, value)`` bytes, cached
   in the executors first (untimed), then ``rdd.mapPartitions(parse_partition).count()``. The
   records go from the block manager to the Python workers, as the sink's records come from
   Kafka into them: the read floor (``rdd.count()`` of the same RDD, no parsing) is reported
   next to it.
2. **JVM**: a DataFrame of the same records' key and value as strings, cached first (untimed),
   then ``from_json(value, <envelope>)`` and ``from_json(key, <key>)``, selecting what the
   Python parser produces per change: op, ``source.sequence``, ``ts_ms``, the key columns and
   the row image (``after``; ``before`` for deletes) typed as the table stores them, every
   column written to Spark's ``noop`` sink (a ``count()`` would let Spark prune the parse).
   The Spark schema is built from the first record's Connect schema (orjson on the driver,
   :func:`jvm_plan`; its time is reported as information: a real JVM path would build it once
   per schema, as the Python parser caches its columns per schema).

Both paths run interleaved, after an untimed warm-up round (Python workers started, JVM code
generated and JIT-compiled); each reports the best of its timed runs. Before timing, the two
paths' results are compared on the first records (op, sequence, ts_ms, key, every row value
with its Python type: ``Decimal`` at the column's scale, naive ``datetime``, ``date``) and the
run fails if they differ; the change counts over all records must agree too.

Ratio: JVM records/s over Python records/s (every record counts, tombstones too), no target
(information: which way the sink's parse should go).

Run: ``python -m bench.sink_parse [--size tiny|small|full] [--repeats N]``. Tiny: 2,000 records;
small: 200,000; full: 1,000,000; 4 partitions on ``local[2]``.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from bench.common import BenchReport, Ratio, bench_parser, interleaved
from sink.changes import RecordParser, SinkChange
from sink.types import spark_type
from transforms.connect import Logical

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = ["SIZES", "JvmPlan", "jvm_plan", "main", "parse_frame", "parse_partition"]

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "cdcnorm.bench.orders"
CHECKED = 1_000  # records whose two parses are compared value by value
MAX_SQL_DECIMAL = 18  # digits the SQL decimal conversion is exact for (8 bytes: a signed long)

# the output columns besides the row's own
OP, SEQ, TS_MS, KEY_PREFIX = "__op", "__seq", "__ts_ms", "__key_"


@dataclass(frozen=True)
class Size:
    records: int
    partitions: int
    driver_memory: str  # the local JVM holds both cached copies of the records


SIZES = {
    "tiny": Size(2_000, 4, "1g"),
    "small": Size(200_000, 4, "4g"),
    "full": Size(1_000_000, 8, "12g"),
}


# ----------------------------------------------------------------------------- executor functions
# (module functions: pickled by reference, as in sink.tasks)


def generate_partition(
    per_partition: int, n_keys: int, index: int, _: Iterable[Any]
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The records of one partition: its own seed, its sequences after the previous partitions'."""
    from bench.sink_merge import change_records

    records = change_records(per_partition, n_keys, seed=index + 1, first_seq=1 + index * per_partition)
    yield from islice(records, per_partition)


def as_text(record: tuple[bytes | None, bytes | None]) -> tuple[str | None, str | None]:
    key, value = record
    return (None if key is None else key.decode()), (None if value is None else value.decode())


def parse_partition(records: Iterable[tuple[bytes | None, bytes | None]]) -> Iterator[SinkChange]:
    """The timed Python path: one parser per task, as :func:`sink.tasks.read_partition`."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    parser = RecordParser()
    for offset, (key, value) in enumerate(records):
        change = parser.parse(TOPIC, partition, offset, key, value)
        if change is not None:
            yield change


def parse_indexed(records: Iterable[tuple[int, tuple[bytes | None, bytes | None]]]) -> Iterator[tuple[int, SinkChange]]:
    """The Python path on numbered records (the agreement check): ``(number, change)``."""
    parser = RecordParser()
    for index, (key, value) in records:
        change = parser.parse(TOPIC, 0, index, key, value)
        if change is not None:
            yield index, change


# ----------------------------------------------------------------------------- the JVM path


def wire_type(schema: dict[str, Any]) -> DataType:
    """The Spark type ``from_json`` reads a Connect field's JSON value as: its physical type
    (logical types are converted after the read, :func:`typed`). ``bytes`` is ``BinaryType``:
    Spark's JSON reader decodes a base64 string into it."""
    from pyspark.sql import types as T

    ctype = schema.get("type")
    if ctype == "struct":
        return T.StructType([T.StructField(f["field"], wire_type(f), True) for f in schema.get("fields", [])])
    if ctype == "array":
        return T.ArrayType(wire_type(schema.get("items") or {"type": "string"}), True)
    if ctype == "map":
        return T.MapType(T.StringType(), wire_type(schema.get("values") or {"type": "string"}), True)
    primitives: dict[str, DataType] = {
        "int8": T.IntegerType(),
        "int16": T.IntegerType(),
        "int32": T.IntegerType(),
        "int64": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "string": T.StringType(),
        "bytes": T.BinaryType(),
    }
    if ctype not in primitives:
        raise NotImplementedError(f"Connect type {ctype!r}")
    return primitives[str(ctype)]


def _decimal_from_bytes(raw: Column, precision: int, scale: int) -> Column:
    """DECIMAL(precision, scale) of the big-endian two's-complement unscaled value ``raw``
    (Kafka Connect's JSON form of a Decimal, base64-decoded by ``from_json``), in SQL: the bytes
    as hex, sign-extended to 16 hex digits by their first byte (>= 0x80: negative), read as a
    signed 64-bit integer (``conv(..., 16, -10)``), then scaled. Exact for at most 8 bytes, i.e.
    a precision of 18 or less (:func:`typed` refuses wider decimals: those need a UDF or a JVM
    helper, ``BigInteger(bytes)``)."""
    from pyspark.sql import functions as F

    digits = F.hex(raw)
    negative = F.substring(digits, 1, 1) >= F.lit("8")
    signed = F.when(negative, F.lpad(digits, 16, "F")).otherwise(F.lpad(digits, 16, "0"))
    unscaled = F.conv(signed, 16, -10).cast(f"decimal({precision},0)")
    if scale == 0:
        return unscaled
    step = F.lit(format(Decimal(1).scaleb(-scale), "f")).cast(f"decimal({scale + 1},{scale})")  # 10^-scale
    return (unscaled * step).cast(f"decimal({precision},{scale})")


def typed(field: dict[str, Any], raw: Column) -> Column:
    """The value ``raw`` of a Connect field (as :func:`wire_type` read it) as the type the table
    stores it as, the Spark SQL type of :func:`sink.types.spark_type` (the sink's own mapping)."""
    from pyspark.sql import functions as F

    sql_type, _ = spark_type(field)
    name = field.get("name")
    if name == Logical.DECIMAL:
        if not sql_type.startswith("decimal("):
            raise NotImplementedError(f"a decimal wider than 38 digits ({field.get('field')}): kept as text")
        precision, scale = (int(x) for x in sql_type[len("decimal(") : -1].split(","))
        if precision > MAX_SQL_DECIMAL:
            raise NotImplementedError(f"DECIMAL({precision},{scale}): the SQL conversion is exact to 18 digits")
        return _decimal_from_bytes(raw, precision, scale)
    if name in (Logical.DATE, Logical.CONNECT_DATE):
        return F.date_from_unix_date(raw)
    # timestamp_* give a TIMESTAMP (with the session time zone, UTC here): the table stores
    # Debezium's zone-less timestamps as timestamp_ntz, the same wall-clock time in UTC
    if name == Logical.MICRO_TIMESTAMP:
        return F.timestamp_micros(raw).cast(sql_type)
    if name in (Logical.TIMESTAMP, Logical.CONNECT_TIMESTAMP):
        return F.timestamp_millis(raw).cast(sql_type)
    if name == Logical.NANO_TIMESTAMP:
        return F.timestamp_micros((raw - F.pmod(raw, F.lit(1000))) / 1000).cast(sql_type)
    if name == Logical.ZONED_TIMESTAMP:
        return raw.cast(sql_type)
    if name in (Logical.TIME, Logical.CONNECT_TIME):
        return raw.cast("bigint") * 1000
    if name == Logical.NANO_TIME:
        return F.floor(raw / 1000).cast("bigint")
    if sql_type.startswith(("struct<", "array<", "map<")) or name == Logical.VARIABLE_SCALE_DECIMAL:
        raise NotImplementedError(f"{field.get('field')}: {name or field.get('type')} (this bench maps flat rows)")
    return raw.cast(sql_type)


@dataclass(frozen=True)
class JvmPlan:
    """What the JVM path needs for one Connect schema: the ``from_json`` schemas of value and key
    (``{"payload": ...}``: the ``schema`` half of a record is left unread) and the select list
    over the parsed ``v`` and ``k``."""

    value_schema: StructType
    key_schema: StructType | None
    select: tuple[Column, ...]
    row_columns: tuple[str, ...]
    key_columns: tuple[str, ...]


def jvm_plan(key: bytes | None, value: bytes) -> JvmPlan:
    """The JVM path's schemas and select list, from one record's Connect schemas."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    envelope = orjson.loads(value)["schema"]
    fields = {f["field"]: f for f in envelope["fields"]}
    row_fields = fields["after"]["fields"]
    value_schema = T.StructType([T.StructField("payload", wire_type(envelope), True)])
    key_fields: list[dict[str, Any]] = []
    key_schema = None
    if key is not None:
        key_doc = orjson.loads(key)
        if isinstance(key_doc, dict) and key_doc.get("schema"):
            key_fields = key_doc["schema"].get("fields", [])
            key_schema = T.StructType([T.StructField("payload", wire_type(key_doc["schema"]), True)])
    payload = F.col("v.payload")
    source = payload.getField("source")
    op = payload.getField("op")
    has_source_ts = any(f["field"] == "ts_ms" for f in fields["source"].get("fields", []))
    # the parser's ts_ms: the source's, else the envelope's
    ts_ms = F.coalesce(source.getField("ts_ms"), payload.getField("ts_ms")) if has_source_ts else payload.getField("ts_ms")
    image = F.when(op == "d", payload.getField("before")).otherwise(payload.getField("after"))
    select = [op.alias(OP), source.getField("sequence").alias(SEQ), ts_ms.alias(TS_MS)]
    by_name = {f["field"]: f for f in row_fields}
    for f in key_fields:  # typed as the row's column of that name (as the parser does)
        name = f["field"]
        select.append(typed(by_name.get(name, f), F.col("k.payload").getField(name)).alias(KEY_PREFIX + name))
    for f in row_fields:
        select.append(typed(f, image.getField(f["field"])).alias(f["field"]))
    return JvmPlan(
        value_schema,
        key_schema,
        tuple(select),
        tuple(f["field"] for f in row_fields),
        tuple(f["field"] for f in key_fields),
    )


def parse_frame(frame: DataFrame, plan: JvmPlan, keep: Sequence[str] = ()) -> DataFrame:
    """The typed change rows of a frame of ``key``/``value`` strings (tombstones dropped), with
    the ``keep`` columns carried through. Two projections: the parsed documents, then the
    columns, so each document is parsed once (Spark keeps two projections apart when the
    lower one's expression is used many times and is not cheap)."""
    from pyspark.sql import functions as F

    parsed = [F.col(c) for c in keep] + [F.from_json(F.col("value"), plan.value_schema).alias("v")]
    if plan.key_schema is not None:
        parsed.append(F.from_json(F.col("key"), plan.key_schema).alias("k"))
    return frame.where(F.col("value").isNotNull()).select(*parsed).select(*keep, *plan.select)


# ----------------------------------------------------------------------------- the agreement check


def _same(a: Any, b: Any) -> bool:
    """Equal with the same Python type (``Decimal`` also at the same scale)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    return bool(a == b)


def check_agreement(spark: SparkSession, plan: JvmPlan, sample: list[tuple[bytes | None, bytes | None]]) -> int:
    """Both paths over ``sample`` (on the executors), compared value by value; raises on any
    difference. Returns the number of changes compared."""
    sc = spark.sparkContext
    python = dict(sc.parallelize(list(enumerate(sample)), 2).mapPartitions(parse_indexed).collect())
    frame = spark.createDataFrame(
        [(i, *as_text(r)) for i, r in enumerate(sample)], "idx bigint, key string, value string"
    )
    jvm = {row["idx"]: row for row in parse_frame(frame, plan, keep=("idx",)).collect()}
    problems: list[str] = []
    if python.keys() != jvm.keys():
        only_py, only_jvm = sorted(python.keys() - jvm.keys()), sorted(jvm.keys() - python.keys())
        problems.append(f"changes at different records: Python only {only_py[:10]}, JVM only {only_jvm[:10]}")
    for idx in sorted(python.keys() & jvm.keys()):
        ch, row = python[idx], jvm[idx]
        got = {
            "op": (ch.op.value, row[OP]),
            "seq": (ch.seq, "s" + row[SEQ] if row[SEQ] is not None else None),
            "ts_ms": (ch.ts_ms, row[TS_MS]),
            "key": (ch.key, tuple(row[KEY_PREFIX + k] for k in plan.key_columns) if plan.key_columns else None),
        }
        for name in plan.row_columns:
            got[name] = ((ch.row or {}).get(name), row[name])
        for what, (py_value, jvm_value) in got.items():
            same = (
                len(py_value) == len(jvm_value) and all(_same(a, b) for a, b in zip(py_value, jvm_value, strict=True))
                if isinstance(py_value, tuple) and isinstance(jvm_value, tuple)
                else _same(py_value, jvm_value)
            )
            if not same:
                problems.append(f"record {idx} {what}: Python {py_value!r}, JVM {jvm_value!r}")
    if problems:
        shown = "\n  ".join(problems[:20])
        raise AssertionError(f"the Python and JVM parses differ ({len(problems)} differences):\n  {shown}")
    return len(python)


# ----------------------------------------------------------------------------- the run


def _spark(size: Size) -> SparkSession:
    from pyspark.sql import SparkSession

    # the Python workers: this interpreter (the project's packages, as sink.spark_session.build_spark
    # does) and this checkout (``bench`` is not an installed package)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cdcnorm-bench-sink-parse")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", size.driver_memory)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _storage(spark: SparkSession) -> dict[int, Any]:
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    return {info.id(): info for info in jsc.sc().getRDDStorageInfo()}


def _cached(
    spark: SparkSession, what: RDD[Any] | DataFrame, name: str, report: BenchReport, measured: bool = True
) -> int:
    """Cache ``what``, materialize it, fail unless every partition stayed in memory. ``measured``:
    report Spark's size estimate of the cache (sampled: fine for a DataFrame's column batches, far
    too low for an RDD of a few large pickled batches, so its row count is reported instead)."""
    before = set(_storage(spark))
    what.cache()
    started = time.perf_counter()
    n = what.count()
    seconds = time.perf_counter() - started
    new = [info for rdd_id, info in _storage(spark).items() if rdd_id not in before]
    if not new:
        raise RuntimeError(f"{name}: nothing cached")
    for info in new:
        if info.numCachedPartitions() != info.numPartitions() or info.diskSize() > 0:
            raise RuntimeError(
                f"{name}: {info.numCachedPartitions()}/{info.numPartitions()} partitions cached in memory "
                "(raise the Size's driver_memory)"
            )
    note = f"{n} rows, every partition in memory; caching took {seconds:.1f}s"
    if measured:
        report.info(f"{name} cached", sum(info.memSize() for info in new) / 2**20, "MiB", note)
    else:
        report.info(f"{name} cached", n, "rows", note)
    return n


def run(report: BenchReport, size: Size, repeats: int) -> None:
    from pyspark.sql import functions as F

    spark = _spark(size)
    try:
        sc = spark.sparkContext
        per_partition = -(-size.records // size.partitions)
        generate = functools.partial(generate_partition, per_partition, max(per_partition // 10, 1))
        raw = sc.parallelize(range(size.partitions), size.partitions).mapPartitionsWithIndex(generate)
        n_records = _cached(spark, raw, "records RDD (pickled bytes)", report, measured=False)
        frame = spark.createDataFrame(raw.map(as_text), "key string, value string")
        _cached(spark, frame, "records DataFrame (strings)", report)
        sample = raw.take(CHECKED)
        sizes = [len(k or b"") + len(v or b"") for k, v in sample]
        report.info("record size", sum(sizes) / len(sizes), "bytes", f"key + value, mean of the first {len(sample)}")

        # the Spark schema from the Connect schema: the first call, then the best of 20
        first_key, first_value = next((k, v) for k, v in sample if v is not None)
        started = time.perf_counter()
        plan = jvm_plan(first_key, first_value)
        first_build = time.perf_counter() - started
        builds = []
        for _ in range(20):
            started = time.perf_counter()
            jvm_plan(first_key, first_value)
            builds.append(time.perf_counter() - started)

        compared = check_agreement(spark, plan, sample)
        print(f"agreement: {compared} changes of the first {len(sample)} records parse the same in both paths", flush=True)

        counts: dict[str, int] = {}

        def python_parse() -> None:
            counts["python"] = raw.mapPartitions(parse_partition).count()

        def python_floor() -> None:
            raw.count()

        def jvm_parse() -> None:
            parse_frame(frame, plan).write.format("noop").mode("overwrite").save()

        times = interleaved(
            {"python": python_parse, "jvm": jvm_parse, "floor": python_floor}, repeats=repeats, warmup=1
        )
        jvm_changes = frame.where(F.col("value").isNotNull()).count()
        if counts["python"] != jvm_changes:
            raise AssertionError(f"Python parsed {counts['python']} changes, the JVM path {jvm_changes}")
    finally:
        spark.stop()

    python_rate = n_records / times["python"]
    jvm_rate = n_records / times["jvm"]
    report.add(
        Ratio(
            "from_json parse records/s",
            jvm_rate,
            python_rate,
            "records/s",
            baseline_name="Python RecordParser on the executors",
            note=f"best of {repeats} interleaved runs each (after 1 warm-up); {n_records} records "
            f"({counts['python']} changes, the rest tombstones) in {size.partitions} partitions on local[2]",
        )
    )
    report.info("Python RecordParser", python_rate, "records/s", f"{times['python']:.2f}s per run, best")
    report.info("JVM from_json", jvm_rate, "records/s", f"{times['jvm']:.2f}s per run, best")
    report.info(
        "Python read floor", n_records / times["floor"], "records/s",
        f"{times['floor']:.2f}s: rdd.count() of the cached records, no parse (in the Python time above)",
    )
    report.info("records", n_records)
    report.info("partitions", size.partitions)
    report.info(
        "Spark schema from Connect schema", min(builds) * 1000, "ms",
        f"best of {len(builds)} (first {first_build * 1000:.1f} ms): orjson, types, select list",
    )
    report.info("agreement check", f"{compared} changes equal", "", f"first {len(sample)} records")


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("parsing the sink's records in Spark tasks: Python RecordParser against JVM from_json")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs of each path (default: 3 tiny, 5 else)")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    repeats = args.repeats or (3 if args.size == "tiny" else 5)
    report = BenchReport(
        "sink_parse",
        args.size,
        params={"records": size.records, "partitions": size.partitions, "repeats": repeats, "master": "local[2]"},
    )
    run(report, size, repeats)
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
