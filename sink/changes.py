"""Canonical Debezium records to sink changes, and per-batch key-based compaction. Pure code.

A :class:`SinkChange` is one change of one table, decoded to Python values, with its ordering
position: ``source.sequence`` when the record has one, else the Kafka partition/offset (a key
always lands in the same partition, so offsets order the changes of a key).

:class:`RecordParser` reads the worker's three output converters (``service.converters``), told
apart by their bytes, key and value each:

* JSON with schemas (``{"schema", "payload"}``): the Connect schema types the columns;
* Confluent Avro (magic byte 0 and a 4-byte schema id): the writer schema comes from the schema
  registry of ``sink.schema_registry`` and is mapped back to its Connect schema
  (``transforms.avro.connect_schema``; the ``connect.*`` properties keep every Connect type);
* JSON without schemas (the payload alone): the record is read as a Debezium JSON record without a
  schema (the ``debezium-json`` decoder), so the columns are typed the way the worker types any
  schemaless input: inferred from the values, per table and kept stable (the join of the types
  seen; ``transforms.decoders.schemaless_json``), the key columns are the key payload's fields.
  Only what JSON shows survives: decimals of ``decimal.handling.mode=precise`` arrive as their
  base64 text (a string column), dates and times as numbers.

:func:`compact` keeps the last change per key in source order within a micro-batch, folds
earlier images into a later partial image, and splits the batch at truncates.
"""

from __future__ import annotations

import base64
import io
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import orjson

from sink.table_settings import TableNames
from sink.types import ColumnSpec, SinkColumn, columns_from_schema
from transforms.avro import AvroMappingError, connect_payload, connect_schema
from transforms.decoders import DECODERS
from transforms.decoders.connect_json import position_sequence
from transforms.envelope import (
    AFTER,
    BEFORE,
    OP,
    SOURCE,
    TS_MS,
    UNAVAILABLE_AFTER,
    UNAVAILABLE_BEFORE,
    EmitOptions,
    Operation,
    emit,
)
from transforms.errors import CdcnormError
from transforms.values import UNAVAILABLE, UNAVAILABLE_BYTES

__all__ = [
    "ChangeParseError",
    "RecordParser",
    "SinkChange",
    "TableBatch",
    "compact",
    "in_source_order",
    "key_text",
    "ordering",
    "parse_record",
    "source_sequence",
]


class ChangeParseError(CdcnormError, ValueError):
    """A record on a normalized topic is not a canonical change event."""


@dataclass(frozen=True, slots=True)
class SinkChange:
    """One row change for the sink."""

    table: tuple[str, str]  # (namespace, table) in the sink's catalog (sink.table_settings.TableNames)
    op: Operation
    key: tuple[Any, ...] | None
    row: dict[str, Any] | None  # after image (before image for deletes)
    seq: str
    ts_ms: int | None
    columns: tuple[ColumnSpec, ...]
    key_columns: tuple[str, ...]
    topic: str
    partition: int
    offset: int
    unavailable: frozenset[str] = field(default_factory=frozenset)
    # columns whose value was taken from an earlier change of the same batch (see ``_fold``),
    # each with the sequence of the change it came from
    filled: dict[str, str] = field(default_factory=dict, hash=False)
    # the source's (db, table) where the catalog name differs (sink.namespace, a `name` template):
    # what sink.tables' patterns match
    source: tuple[str, str] | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Changes are pickled into the read job's cache and out of it in the write job, about
        # 10 µs each with the dataclass's own per-slot state (and an Enum and an empty frozenset
        # rebuilt by call); as one flat tuple with the op's letter it is under half of that.
        return _change, (
            self.table, self.op.value, self.key, self.row, self.seq, self.ts_ms, self.columns, self.key_columns,
            self.topic, self.partition, self.offset, self.unavailable or None, self.filled or None, self.source,
        )


_OPERATIONS = {op.value: op for op in Operation}
_SOURCE_NAMES = TableNames({}, None)  # tables named as the source names them
_SEQ = operator.attrgetter("seq")
_NOTHING_UNAVAILABLE: frozenset[str] = frozenset()
_SCHEMALESS_EMIT = EmitOptions(tombstones=False)  # one object: the emitter's codecs are kept per options object


def _change(
    table: tuple[str, str], op: str, key: tuple[Any, ...] | None, row: dict[str, Any] | None, seq: str,
    ts_ms: int | None, columns: tuple[ColumnSpec, ...], key_columns: tuple[str, ...], topic: str, partition: int,
    offset: int, unavailable: frozenset[str] | None, filled: dict[str, str] | None, source: tuple[str, str] | None,
) -> SinkChange:
    """A :class:`SinkChange` from its pickled form (``SinkChange.__reduce__``)."""
    return SinkChange(
        table, _OPERATIONS[op], key, row, seq, ts_ms, columns, key_columns, topic, partition, offset,
        unavailable or _NOTHING_UNAVAILABLE, filled if filled is not None else {}, source,
    )


# a schema's decoding columns, their specs (what a change carries) and its key columns
_schema_cache: dict[bytes, tuple[tuple[SinkColumn, ...], tuple[ColumnSpec, ...], tuple[str, ...]]] = {}


def ordering(sequence: str | None, partition: int, offset: int) -> str:
    """The string a change sorts by: the source sequence, else partition and offset.

    >>> ordering(None, 1, 42)
    'k0001:00000000000000000042'
    >>> ordering("000123", 0, 5)
    's000123'
    """
    if sequence:
        return "s" + sequence
    return f"k{partition:04d}:{offset:020d}"


_FORMAT_IDS = frozenset(DECODERS)  # the registry only: no decoder module is imported


def source_sequence(source: dict[str, Any]) -> str | None:
    """The string that sorts a change in source order: ``source.sequence`` of a cdcnorm record;
    for a Debezium connector's own record (its ``connector`` is not a cdcnorm format id, as on a
    re-emitted Debezium topic or a raw one), worked out from its position fields (binlog
    file/pos/row, LSN, SCN, ...), since Debezium's own ``sequence`` does not sort as text.

    >>> source_sequence({"connector": "canal-json", "sequence": "0042"})
    '0042'
    >>> source_sequence({"connector": "postgresql", "lsn": 34078720, "sequence": '["1","2"]'})
    '00000000000034078720'
    """
    connector = source.get("connector")
    if isinstance(connector, str) and connector in _FORMAT_IDS:
        sequence = source.get("sequence")
        return sequence if isinstance(sequence, str) else None
    ts_ms = source.get(TS_MS)
    return position_sequence(source, ts_ms if isinstance(ts_ms, int) else None)


def _key_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} in a key")


def key_text(key: tuple[Any, ...] | None) -> str:
    """A key as text that is the same for the same key values wherever it is computed (the
    deleted-keys memory compares keys of every table in one string column).

    >>> key_text((1, "a", Decimal("1.50")))
    '[1,"a","1.50"]'
    """
    return orjson.dumps(list(key or ()), default=_key_default).decode()


def _row_schema(value_schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if not value_schema:
        return None
    for f in value_schema.get("fields", []):
        if f.get("field") == AFTER:
            return dict(f)
    return None


def _columns(
    row_schema: dict[str, Any], key_schema: dict[str, Any] | None
) -> tuple[tuple[SinkColumn, ...], tuple[ColumnSpec, ...], tuple[str, ...]]:
    cache_key = orjson.dumps([row_schema, key_schema], option=orjson.OPT_SORT_KEYS)
    hit = _schema_cache.get(cache_key)
    if hit is None:
        key_cols = tuple(f["field"] for f in (key_schema or {}).get("fields", []))
        columns = columns_from_schema(row_schema)
        hit = (columns, tuple(c.spec for c in columns), key_cols)
        if len(_schema_cache) > 10_000:
            _schema_cache.clear()
        _schema_cache[cache_key] = hit
    return hit


def _is_document(doc: Any) -> bool:
    """A Connect JSON document with its schema: ``{"schema": ..., "payload": ...}``."""
    return isinstance(doc, dict) and "schema" in doc and "payload" in doc


class RecordParser:
    """Parses records of normalized topics in any of the worker's output formats (see the module).

    ``registry`` is a confluent-kafka ``SchemaRegistryClient`` for Avro records (``None``: an Avro
    record is a :class:`ChangeParseError` naming ``sink.schema_registry``). The parser keeps the
    writer schemas it has read, and for schemaless JSON the inferred column types per table.
    """

    def __init__(self, registry: Any = None, names: TableNames | None = None) -> None:
        self._registry = registry
        self._names = names or _SOURCE_NAMES
        self._avro: dict[int, tuple[Any, dict[str, Any]]] = {}  # schema id -> (fastavro schema, Connect schema)
        self._schemaless: Any = None  # the debezium-json decoder that types schemaless records

    @classmethod
    def from_settings(cls, settings: Any, names: TableNames | None = None) -> RecordParser:
        """A parser with the registry of ``sink.schema_registry`` (``None``: JSON only) that names
        tables by ``names`` (``None``: as the source does)."""
        if settings is None:
            return cls(None, names)
        from cdcnorm_common.registry import registry_client

        return cls(registry_client(settings), names)

    def parse(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> SinkChange | None:
        """The change in a normalized record; ``None`` for tombstones and non-change records."""
        if value is None:
            return None
        where = f"{topic}[{partition}]@{offset}"
        doc = self._document(value, where)
        if not isinstance(doc, dict):
            raise ChangeParseError(f"{where}: expected an object")
        if _is_document(doc) and doc["schema"] is None:  # JsonConverter's form of a schemaless value
            doc = doc["payload"]
            if not isinstance(doc, dict):
                return None
        key_doc = self._document(key, where + " key") if key else None
        if not _is_document(doc):
            if OP not in doc:
                return None  # schema-change / transaction / unwrapped rows are not table changes
            doc, key_doc = self._typed(topic, partition, offset, key_doc, doc, where)
            if doc is None:
                return None
        return _parse_document(topic, partition, offset, key_doc, doc, self._names)

    def _document(self, data: bytes, where: str) -> Any:
        """A record part as a JSON document: parsed JSON, or an Avro record as ``{schema, payload}``."""
        if data[:1] == b"\x00" and len(data) >= 5:
            return self._avro_document(data, where)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ChangeParseError(f"{where}: not JSON: {exc}") from exc

    def _avro_document(self, data: bytes, where: str) -> dict[str, Any]:
        schema_id = int.from_bytes(data[1:5], "big")
        if self._registry is None:
            raise ChangeParseError(
                f"{where}: an Avro record (schema id {schema_id}): set sink.schema_registry to read Avro topics"
            )
        from fastavro import schemaless_reader

        hit = self._avro.get(schema_id)
        if hit is None:
            hit = self._avro[schema_id] = self._writer_schema(schema_id, where)
        parsed, schema = hit
        try:
            datum = schemaless_reader(io.BytesIO(data[5:]), parsed, None)
            return {"schema": schema, "payload": connect_payload(schema, datum)}
        except (AvroMappingError, ValueError, TypeError, KeyError, EOFError, IndexError) as exc:
            raise ChangeParseError(f"{where}: not an Avro record of schema {schema_id}: {exc}") from exc

    def _writer_schema(self, schema_id: int, where: str) -> tuple[Any, dict[str, Any]]:
        from fastavro import parse_schema

        from cdcnorm_common.registry import SchemaRegistryUnavailable, is_registry_outage

        try:
            registered = self._registry.get_schema(schema_id)
        except Exception as exc:
            if is_registry_outage(exc):  # not the record's fault: stop, commit nothing
                raise SchemaRegistryUnavailable(f"schema registry: {exc}") from exc
            raise ChangeParseError(f"{where}: schema id {schema_id}: {exc}") from exc
        if registered.schema_type not in (None, "AVRO"):
            raise ChangeParseError(f"{where}: schema id {schema_id} is {registered.schema_type}, not Avro")
        try:
            avro = orjson.loads(registered.schema_str)
            return parse_schema(avro), connect_schema(avro)
        except (AvroMappingError, ValueError, TypeError, KeyError) as exc:
            raise ChangeParseError(f"{where}: schema id {schema_id} has no Connect form: {exc}") from exc

    def _typed(
        self, topic: str, partition: int, offset: int, key_doc: Any, doc: dict[str, Any], where: str
    ) -> tuple[dict[str, Any] | None, Any]:
        """A schemaless change read as Debezium JSON without a schema, typed by inference."""
        from transforms.decoders import Message, create_decoder

        if self._schemaless is None:
            self._schemaless = create_decoder("debezium-json", {})
        key_bytes = None if key_doc is None else orjson.dumps(key_doc)
        message = Message(value=orjson.dumps(doc), key=key_bytes, topic=topic, partition=partition, offset=offset)
        try:
            records = emit(self._schemaless.decode_safely(message), _SCHEMALESS_EMIT)
        except CdcnormError as exc:
            raise ChangeParseError(f"{where}: a schemaless record that does not read as Debezium JSON: {exc}") from exc
        changes = [r for r in records if r.value is not None]
        if not changes:
            return None, None
        if len(changes) > 1:
            raise ChangeParseError(f"{where}: a schemaless record that is {len(changes)} changes")
        return changes[0].value, changes[0].key


_DEFAULT_PARSER = RecordParser()


def parse_record(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
) -> SinkChange | None:
    """The change in a normalized record (JSON with or without schemas; see :class:`RecordParser`
    for Avro); ``None`` for tombstones and non-change records."""
    return _DEFAULT_PARSER.parse(topic, partition, offset, key, value)


def _parse_document(
    topic: str, partition: int, offset: int, key_doc: Any, doc: dict[str, Any], names: TableNames
) -> SinkChange | None:
    """The change in a record's value document (with its Connect schema) and key document."""
    payload = doc["payload"]
    if not isinstance(payload, dict) or OP not in payload:
        return None  # schema-change / transaction / unwrapped rows are not table changes
    try:
        op = Operation(payload[OP])
    except ValueError:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: unknown op {payload[OP]!r}") from None
    source = payload.get(SOURCE) or {}
    schema = source.get("schema")
    db = source.get("db") or schema or "default"
    table = source.get("table")
    if not table:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: source.table missing")
    target = names.target(db, schema, table, topic)
    row_schema = _row_schema(doc.get("schema"))
    if row_schema is None:
        raise ChangeParseError(f"{topic}[{partition}]@{offset}: the record's schema has no `after` field")
    key_schema = key_doc.get("schema") if isinstance(key_doc, dict) else None
    columns, specs, key_cols = _columns(row_schema, key_schema)
    deleted = op is Operation.DELETE
    image = payload.get(BEFORE) if deleted else payload.get(AFTER)
    # absent columns: the placeholder where the type holds it, else null and named in the source block
    listed = source.get(UNAVAILABLE_BEFORE if deleted else UNAVAILABLE_AFTER) or ()
    row: dict[str, Any] | None = None
    unavailable: set[str] = set()
    if isinstance(image, dict):
        row = {}
        for col in columns:
            raw = image.get(col.name, UNAVAILABLE)
            if raw == UNAVAILABLE or (raw == UNAVAILABLE_BYTES and col.sql_type == "binary") or col.name in listed:
                unavailable.add(col.name)
                row[col.name] = None
            else:
                try:
                    row[col.name] = col.decode(raw)
                except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
                    raise ChangeParseError(f"{topic}[{partition}]@{offset}: column {col.name}: {exc}") from exc
    key_payload = key_doc.get("payload") if isinstance(key_doc, dict) and "payload" in key_doc else key_doc
    key_tuple: tuple[Any, ...] | None = None
    if key_cols and op is not Operation.TRUNCATE:
        if not isinstance(key_payload, dict):
            raise ChangeParseError(f"{topic}[{partition}]@{offset}: keyed table without a key payload")
        by_name = {c.name: c for c in columns}
        key_tuple = tuple(
            by_name[k].decode(key_payload.get(k)) if k in by_name else key_payload.get(k) for k in key_cols
        )
    return SinkChange(
        table=target,
        op=op,
        key=key_tuple,
        row=row,
        seq=ordering(source_sequence(source), partition, offset),
        ts_ms=source.get(TS_MS) if source.get(TS_MS) is not None else payload.get(TS_MS),
        columns=specs,
        key_columns=key_cols,
        topic=topic,
        partition=partition,
        offset=offset,
        unavailable=frozenset(unavailable),
        source=None if target[0] == db and target[1] == table else (db, table),
    )


@dataclass(slots=True)
class TableBatch:
    """The compacted changes of one table in one micro-batch.

    ``truncate`` is set when a truncate happened (``truncate_seq``: the last one's sequence);
    ``changes`` then holds only what followed it.
    ``appends`` holds every change in order for tables without a key (append-only).
    """

    table: tuple[str, str]
    truncate: bool = False
    truncate_seq: str | None = None
    changes: list[SinkChange] = field(default_factory=list)
    appends: list[SinkChange] = field(default_factory=list)

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        """The widest column list seen in this batch (the last change's schema, plus earlier columns)."""
        seen: dict[str, ColumnSpec] = {}
        for change in (*self.appends, *self.changes):
            for col in change.columns:
                seen[col.name] = col
        return tuple(seen.values())

    @property
    def key_columns(self) -> tuple[str, ...]:
        for change in reversed(self.changes):
            if change.key_columns:
                return change.key_columns
        return ()


def _fold(prev: SinkChange, nxt: SinkChange) -> SinkChange:
    """``nxt`` with its unavailable columns filled from ``prev``'s image where ``prev`` had them.

    A filled value is only as new as the change it came from, not as ``nxt``: ``filled`` records
    that change's sequence per column, so the MERGE keeps the table's value where the table holds
    a version at least that new (``prev`` may be a late, stale change of the key).
    """
    if not nxt.unavailable or prev.op == Operation.DELETE or prev.row is None or nxt.row is None:
        return nxt
    row = dict(nxt.row)
    still: set[str] = set()
    filled = dict(nxt.filled)
    for name in nxt.unavailable:
        if name in prev.row and name not in prev.unavailable:
            row[name] = prev.row[name]
            filled[name] = prev.filled.get(name, prev.seq)
        else:
            still.add(name)
    return replace(nxt, row=row, unavailable=frozenset(still), filled=filled)


def in_source_order(changes: Iterable[SinkChange]) -> list[SinkChange]:
    """``changes`` in source order (their sequences): the order :func:`compact` folds them in
    and a changelog or history table records them in."""
    return sorted(changes, key=_SEQ)


def compact(changes: Iterable[SinkChange]) -> dict[tuple[str, str], TableBatch]:
    """Group changes by table and keep the last change per key in source order.

    A change whose sequence is not newer than the one kept for its key is stale and dropped.
    """
    batches: dict[tuple[str, str], TableBatch] = {}
    latest: dict[tuple[str, str], dict[tuple[Any, ...], SinkChange]] = {}
    for change in in_source_order(changes):
        batch = batches.get(change.table)
        if batch is None:
            batch = batches[change.table] = TableBatch(change.table)
            latest[change.table] = {}
        if change.op == Operation.TRUNCATE:
            batch.truncate = True
            batch.truncate_seq = change.seq
            batch.appends.clear()
            latest[change.table].clear()
            continue
        key = change.key
        if key is None:
            batch.appends.append(change)
            continue
        per_key = latest[change.table]
        prev = per_key.get(key)
        if prev is not None:
            if change.seq <= prev.seq:
                continue
            change = _fold(prev, change)
        per_key[key] = change
    for table, per_key in latest.items():
        batches[table].changes = list(per_key.values())
    return batches
