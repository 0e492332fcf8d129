"""The MERGE path's Spark work: the source frame of a table's compacted changes (JSON text read
in the JVM, else Python rows), the ``MERGE INTO`` that compares each change with the stored row's
sequence, the append of a table without a key, a truncate's ``DELETE``, and the anti-join that
leaves out the changes a remembered delete supersedes (the deleted-keys memory).

:class:`MergeWriter` runs the statements; the commit around them (the offsets in the snapshot
summary, the deleted keys remembered first) is :meth:`sink.iceberg.IcebergTables.write_batch`'s.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from sink.changes import SinkChange, TableBatch, key_text
from sink.sql import quote, sql_string
from sink.tasks import (
    CHANGELOG_COLUMNS,
    COMMITTED_AT_COLUMN,
    KEY_COLUMN,
    OFFSET_COLUMN,
    OP_COLUMN,
    PARTITION_COLUMN,
    SEQ_COLUMN,
    TABLE_COLUMN,
    TOPIC_COLUMN,
    TS_COLUMN,
)
from transforms.envelope import Operation

_POSITION = (TOPIC_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.iceberg import _TableState

__all__ = ["MergeWriter", "after_truncate", "truncate_sql"]

log = logging.getLogger("cdcnorm.sink")

UNAVAILABLE_COLUMN = "__cdc_unavailable"
# column -> sequence of the earlier change of the batch a partial change's value was taken from
FILLED_COLUMN = "__cdc_filled"
# the newest remembered delete of a key (the anti-join against the deleted keys)
DELETED_SEQ = "__cdc_deleted_seq"
# the op of a delete as a SQL literal (the MERGE source's __cdc_op column holds Operation values)
_DELETE = f"'{Operation.DELETE.value}'"


class MergeWriter:
    """The Spark SQL of a MERGE table's batch: its source frame, the MERGE, the append.
    ``deleted_keys_id``: the id of the table remembering the deleted keys."""

    def __init__(self, spark: SparkSession, deleted_keys_id: Callable[[], str]) -> None:
        self.spark = spark
        self._deleted_keys_id = deleted_keys_id

    def frame(self, state: _TableState, changes: list[SinkChange], with_unavailable: bool, with_key: bool = False,
              with_position: bool = False) -> Any:
        """The MERGE source: the changes' rows with their op, sequence and timestamp; the
        columns each lacks (``with_unavailable``); the key as the deleted-keys memory writes it
        (``with_key``); the topic, partition and offset each was read at (``with_position``)."""
        names = list(state.columns)
        cols_sql = [f"{quote(n)} {state.columns[n]}" for n in names]
        cols_sql += [f"{quote(OP_COLUMN)} string", f"{quote(SEQ_COLUMN)} string", f"{quote(TS_COLUMN)} bigint"]
        if with_unavailable:
            cols_sql.append(f"{quote(UNAVAILABLE_COLUMN)} array<string>")
            cols_sql.append(f"{quote(FILLED_COLUMN)} map<string,string>")
        if with_key:
            cols_sql.append(f"{quote(KEY_COLUMN)} string")
        if with_position:
            cols_sql += [f"{quote(c)} {CHANGELOG_COLUMNS[c]}" for c in _POSITION]
        schema = ", ".join(cols_sql)
        docs = _json_documents(state.columns, changes, with_unavailable, with_key, with_position)
        if docs is not None:
            # Built in the JVM from JSON text: no Python worker processes, and a source the MERGE
            # can read more than once cheaply. FAILFAST: a value Spark cannot parse is an error,
            # never a silently null column.
            from pyspark.sql import DataFrame

            jspark = self.spark._jsparkSession
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None
            dataset = jspark.createDataset(docs, jvm.org.apache.spark.sql.Encoders.STRING())
            return DataFrame(jspark.read().schema(schema).option("mode", "FAILFAST").json(dataset), self.spark)
        rows = []
        # an integral JSON number in a float/double column: a float, as the JSON path reads it
        # (Spark's Python-row conversion turns an int into NULL for these types)
        floating = [i for i, n in enumerate(names) if state.columns[n] in ("float", "double")]
        for ch in changes:
            image = ch.row or {}
            values: list[Any] = [image.get(n) for n in names]
            for i in floating:
                if type(values[i]) is int:
                    with contextlib.suppress(OverflowError):
                        values[i] = float(values[i])
            values += [str(ch.op), ch.seq, ch.ts_ms]
            if with_unavailable:
                values.append(sorted(ch.unavailable) if ch.unavailable else [])
                values.append(dict(ch.filled))
            if with_key:
                values.append(key_text(ch.key))
            if with_position:
                values += [ch.topic, ch.partition, ch.offset]
            rows.append(values)
        return self.spark.createDataFrame(rows, schema=schema, verifySchema=False)

    def merge(
        self,
        tid: str,
        state: _TableState,
        changes: list[SinkChange],
        counts: dict[str, int],
        deleted_keys: str | None = None,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        """MERGE the batch's changes; with ``deleted_keys`` (the table's name in the deleted-keys
        memory), a change that is not a delete and is not newer than a remembered delete of its
        key is left out of the source. ``before_write`` is called once the source is built,
        right before the MERGE runs (it waits for the batch's deleted keys to be committed)."""
        key = state.key or changes[-1].key_columns
        # the columns some change of the batch did not carry (partial images): an update keeps
        # their stored value where its change lacks them, or where the value was filled from an
        # earlier change of the batch that is not newer than the stored row. Usually none: then
        # every column is a plain assignment, the source frame has no unavailable array, and Spark
        # prunes the target scan (and the join's shuffle) to the key, the sequence and the row position.
        partial = frozenset().union(*(ch.unavailable for ch in changes), *(ch.filled for ch in changes))
        frame = self.frame(state, changes, with_unavailable=bool(partial), with_key=deleted_keys is not None)
        view = f"cdcnorm_src_{abs(hash(tid)) % 10**8}"
        frame.createOrReplaceTempView(view)
        views = [view]
        if deleted_keys is not None and any(c.op != Operation.DELETE for c in changes):
            raw, view = view, f"{view}_live"
            self.spark.sql(_not_deleted_sql(raw, self._deleted_keys_id(), deleted_keys)).createOrReplaceTempView(view)
            views.append(view)
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        newer = f"(t.{quote(SEQ_COLUMN)} IS NULL OR s.{quote(SEQ_COLUMN)} > t.{quote(SEQ_COLUMN)})"
        not_older = f"(t.{quote(SEQ_COLUMN)} IS NULL OR s.{quote(SEQ_COLUMN)} >= t.{quote(SEQ_COLUMN)})"
        sets = []
        for name in state.columns:
            q = quote(name)
            if name in partial:
                lit = "'" + name.replace("'", "''") + "'"
                sets.append(
                    f"t.{q} = CASE WHEN array_contains(s.{quote(UNAVAILABLE_COLUMN)}, {lit}) THEN t.{q} "
                    f"WHEN try_element_at(s.{quote(FILLED_COLUMN)}, {lit}) <= t.{quote(SEQ_COLUMN)} THEN t.{q} "
                    f"ELSE s.{q} END"
                )
            else:
                sets.append(f"t.{q} = s.{q}")
        sets.append(f"t.{quote(SEQ_COLUMN)} = s.{quote(SEQ_COLUMN)}")
        sets.append(f"t.{quote(TS_COLUMN)} = s.{quote(TS_COLUMN)}")
        insert_cols = [*state.columns, SEQ_COLUMN, TS_COLUMN]
        if before_write is not None:
            before_write()
        self.spark.sql(
            f"MERGE INTO {tid} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.{quote(OP_COLUMN)} = {_DELETE} AND {not_older} THEN DELETE "
            f"WHEN MATCHED AND s.{quote(OP_COLUMN)} <> {_DELETE} AND {newer} THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED AND s.{quote(OP_COLUMN)} <> {_DELETE} THEN INSERT ({', '.join(quote(c) for c in insert_cols)}) "
            f"VALUES ({', '.join('s.' + quote(c) for c in insert_cols)})"
        )
        for name in views:
            self.spark.catalog.dropTempView(name)
        counts["deletes"] = sum(1 for c in changes if c.op == Operation.DELETE)
        counts["upserts"] = len(changes) - counts["deletes"]

    def append_changelog(self, tid: str, state: _TableState, changes: list[SinkChange]) -> None:
        """Append every change as a changelog row (:func:`sink.tasks.changelog_row`'s columns),
        committed at this write's time."""
        from pyspark.sql import functions as F

        frame = self.frame(state, changes, with_unavailable=False, with_position=True)
        frame = frame.withColumn(COMMITTED_AT_COLUMN, F.current_timestamp())
        frame.select(*[quote(c) for c in (*state.columns, *CHANGELOG_COLUMNS)]).writeTo(tid).append()

    def append(self, tid: str, state: _TableState, changes: list[SinkChange]) -> None:
        frame = self.frame(state, changes, with_unavailable=False)
        cols = [*state.columns, SEQ_COLUMN, TS_COLUMN, OP_COLUMN]
        frame.select(*[quote(c) for c in cols]).writeTo(tid).append()


_JSON_CHUNK_BYTES = 8 * 1024 * 1024
_FLOAT32 = struct.Struct("<f")


class _NotJson(Exception):
    """A batch value that JSON text cannot carry exactly (the batch takes the Python-rows path)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _NotJson(f"decimal {value}")
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")  # Spark's JSON reader decodes base64 binary
    raise _NotJson(f"{type(value).__name__} value")


def _float32(value: Any) -> Any:
    """A float column's value rounded to float32 here, as the Python-rows path does in the JVM
    (NaN and the infinities: the rows path; JSON has none and orjson would write null)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"float {value}")
        try:
            rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
        except (OverflowError, struct.error) as exc:
            raise _NotJson(f"float32 {value}") from exc
        return rounded
    return value


def _json_documents(
    columns: dict[str, str], changes: list[SinkChange], with_unavailable: bool, with_key: bool = False,
    with_position: bool = False,
) -> list[str] | None:
    """The rows of a source frame as JSON array texts of at most ~8 MB each, or ``None`` when a
    value cannot be carried exactly (then the frame is built from Python rows).

    Values are what :mod:`sink.types` decoders return: dates and datetimes (ISO text, with the
    offset for zoned ones), ``Decimal`` (text, parsed at the column's scale), ``bytes`` (base64),
    numbers, strings, ``dict``/``list`` for structs, maps and arrays.
    """
    names = list(columns)
    if any("float" in t and t != "float" for t in columns.values()):
        return None  # float32 nested in a struct/array/map: keep the exact rows path
    floats = [n for n in names if columns[n] == "float"]
    doubles = [n for n in names if columns[n] == "double"]
    dumps, default = orjson.dumps, _json_default
    docs: list[str] = []
    chunk: list[bytes] = []
    size = 0
    try:
        for ch in changes:
            image = ch.row or {}
            doc = {n: image.get(n) for n in names}
            for n in floats:
                doc[n] = _float32(doc[n])
            for n in doubles:
                value = doc[n]
                if isinstance(value, float) and not math.isfinite(value):
                    raise _NotJson(f"{value} in column {n}")  # JSON has no NaN: orjson would write null
            doc[OP_COLUMN] = str(ch.op)
            doc[SEQ_COLUMN] = ch.seq
            doc[TS_COLUMN] = ch.ts_ms
            if with_unavailable:
                doc[UNAVAILABLE_COLUMN] = sorted(ch.unavailable) if ch.unavailable else []
                doc[FILLED_COLUMN] = ch.filled
            if with_key:
                doc[KEY_COLUMN] = key_text(ch.key)
            if with_position:
                doc[TOPIC_COLUMN], doc[PARTITION_COLUMN], doc[OFFSET_COLUMN] = ch.topic, ch.partition, ch.offset
            text = dumps(doc, default=default)
            chunk.append(text)
            size += len(text) + 1
            if size >= _JSON_CHUNK_BYTES:
                docs.append((b"[" + b",".join(chunk) + b"]").decode())
                chunk, size = [], 0
    except (_NotJson, orjson.JSONEncodeError) as exc:
        log.debug("source frame from Python rows: %s", exc)
        return None
    if chunk:
        docs.append((b"[" + b",".join(chunk) + b"]").decode())
    return docs


def _orders_globally(seq: str) -> bool:
    """Whether a sequence orders against every change of its table: a source sequence does,
    a partition/offset position (``k...``, from :func:`sink.changes.ordering`) only within its
    partition."""
    return seq.startswith("s")


def after_truncate(batch: TableBatch, truncate_seq: str) -> TableBatch:
    """``batch`` without the changes older than a truncate that an earlier batch (or this one)
    applied: a change of another partition may arrive a batch after the truncate, and would
    otherwise bring back a row the truncate removed. Deletes stay (harmless). Only changes
    whose sequence, like the truncate's, is a source sequence are compared."""
    if not _orders_globally(truncate_seq):
        return batch

    def kept(c: SinkChange) -> bool:
        return c.op == Operation.DELETE or not _orders_globally(c.seq) or c.seq > truncate_seq

    changes = [c for c in batch.changes if kept(c)]
    appends = [c for c in batch.appends if kept(c)]
    if len(changes) == len(batch.changes) and len(appends) == len(batch.appends):
        return batch
    log.info(
        "table %s: %d changes older than its last truncate left out",
        ".".join(batch.table),
        len(batch.changes) - len(changes) + len(batch.appends) - len(appends),
    )
    return replace(batch, changes=changes, appends=appends)


def truncate_sql(tid: str, truncate_seq: str | None) -> str:
    """The delete of a truncate: every row older than it. A row a later change wrote, read in an
    earlier micro-batch from another partition, stays. Only source sequences order across
    partitions: a truncate without one removes every row, as do rows without one.

    >>> truncate_sql("t", "s0009")
    "DELETE FROM t WHERE NOT (`__cdc_seq` LIKE 's%' AND `__cdc_seq` > 's0009')"
    >>> truncate_sql("t", "k0001:00000000000000000004")
    'DELETE FROM t'
    """
    if truncate_seq is None or not _orders_globally(truncate_seq):
        return f"DELETE FROM {tid}"
    seq = quote(SEQ_COLUMN)
    return f"DELETE FROM {tid} WHERE NOT ({seq} LIKE 's%' AND {seq} > {sql_string(truncate_seq)})"


def _not_deleted_sql(source: str, deleted_keys: str, table: str) -> str:
    """The rows of ``source`` without the changes that a remembered delete supersedes: a change
    that is not a delete, of a key of ``table`` deleted at a sequence at least its own. The
    memory is first cut down to the table and the batch's keys (a semi join that broadcasts
    them), so its scan is not shuffled however many keys it remembers."""
    op, seq, key = quote(OP_COLUMN), quote(SEQ_COLUMN), quote(KEY_COLUMN)
    return (
        f"WITH b AS (SELECT DISTINCT {key} FROM {source} WHERE {op} <> {_DELETE}), "
        f"d AS (SELECT /*+ BROADCAST(b) */ m.{key}, max(m.{seq}) AS {quote(DELETED_SEQ)} "
        f"FROM {deleted_keys} m LEFT SEMI JOIN b ON m.{key} = b.{key} "
        f"WHERE m.{quote(TABLE_COLUMN)} = {sql_string(table)} GROUP BY m.{key}) "
        f"SELECT s.* FROM {source} s LEFT ANTI JOIN d ON s.{key} = d.{key} "
        f"AND s.{op} <> {_DELETE} AND d.{quote(DELETED_SEQ)} >= s.{seq}"
    )
