"""Alibaba Cloud DTS Avro (the ``com.alibaba.dts.formats.avro.Record`` of DTS subscriptions).

Each Kafka message is one schemaless Avro ``Record`` (schema in ``schemas/dts_record.avsc``;
records written before mid-2020 lack the trailing ``bornTimestamp`` field, see
``schemas/dts_record_2019.avsc``). Option ``schema.version`` picks the schema: ``current``,
``2019`` or ``auto`` (default: try ``current``, then ``2019``; a schema fits only when it
consumes the whole message).

Mapping:

* ``INSERT`` → ``c`` (``afterImages``), ``UPDATE`` → ``u`` (``beforeImages`` + ``afterImages``),
  ``DELETE`` → ``d`` (``beforeImages``).
* ``DDL`` (and ``COMMAND``, which DTS uses for MongoDB commands) → a schema change whose DDL is
  the text image in ``afterImages``.
* ``BEGIN``/``COMMIT`` → transaction ``BEGIN``/``END`` events with ``id = sourceTxid`` when the
  record names a transaction (``sourceTxid`` not empty and not ``"0"``, which DTS writes for
  MySQL); ``ROLLBACK``, ``ABORT``, ``HEARTBEAT``, ``CHECKPOINT``, ``FILL``, ``FINISH``,
  ``CONTROL``, ``RDB``, ``NOOP``, ``INIT`` carry no change.
* ``objectName`` is ``db.table`` or ``db.schema.table`` (``\\u002E`` escapes a dot in a name).
* The key is the ``PRIMARY`` entry of the ``pk_uk_info`` tag (``{"PRIMARY":["id"],"uk1":[...]}``);
  without it the record has no key.
* Images hold one value per ``fields[]`` entry. ``EmptyObject.NONE`` means the column is not in
  this change (``UNAVAILABLE``); ``EmptyObject.NULL`` and an Avro ``null`` are SQL NULL.

Column types come from ``fields[].dataTypeNumber``: MySQL binlog type codes for MySQL-family
sources (``MySQL``, ``DRDS``), refined by the value images, which carry what the number leaves
open (charset ``binary`` vs text, decimal precision/scale, WKB vs WKT); type OIDs for
PostgreSQL (the common ones are mapped). Other numbers and other sources are typed from the
image kind. What the images said about a column is kept as a type hint in the metadata store
(namespace ``dts-avro.type-hints``, key ``objectName``), so a column whose values are all
NULL/absent in a record keeps its type; without any hint it is typed from its number alone
(MySQL) or as a string.

* MySQL type numbers are typed by the mapping every MySQL-typed format shares
  (:mod:`transforms.decoders.mysql_types`). The record does not say whether an integer is
  signed, so integers are typed as their UNSIGNED types, which hold both (tinyint → int16,
  smallint/mediumint → int32, int → int64, bigint → int64; BIGINT UNSIGNED above 2^63-1 wraps,
  as Debezium's ``bigint.unsigned.handling.mode=long``: ``precise`` would need to know which
  BIGINT columns are unsigned); BIT → int64 (its length is not in the record).
* ``DateTime``/``Timestamp`` fractions are microseconds for MySQL and PostgreSQL and
  nanoseconds for other sources (as the DTS SDK reads them); DATETIME → MicroTimestamp,
  TIMESTAMP (epoch ``Timestamp`` image) → ZonedTimestamp in UTC, DATE → Date, TIME →
  MicroTime, YEAR → Year; zero dates (``0000-00-00``) are NULL, as in Debezium.
* ``Character`` values are decoded with their charset; charset ``binary`` and ``BinaryObject``
  are bytes. ``BinaryGeometry`` → Debezium ``Geometry`` (MySQL's SRID prefix split off);
  ``TextGeometry`` (WKT) → string.

``source`` carries ``source_position``, ``safe_source_position``, ``source_txid``,
``source_type``, ``source_version``, ``record_id``, ``record_version``, ``tags`` (JSON) and,
in the current schema, ``born_timestamp``. ``source.ts_ms`` is ``sourceTimestamp`` (seconds in
DTS output; values that already look like milliseconds are kept). The event ``ts_ms`` is the
last ``processTimestamps`` entry, else the ``readerThroughoutTime`` tag. ``source.sequence`` is
set for binlog positions ``<offset>@<file index>``: ``"<file 10 digits>.<offset 20 digits>.
<record id 20 digits>"``, which sorts in binlog order (the record id breaks ties between the
rows of one binlog event).
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from functools import lru_cache
from importlib.resources import files
from typing import Any

import orjson
from fastavro import schemaless_reader
from fastavro.schema import parse_schema
from pydantic import Field

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import (
    Decoder,
    Message,
)
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.dts_avro_types import (
    _HINTS_NAMESPACE,
    _MICROS_FRACTION,
    _MYSQL_FAMILY,
    _NS,
    _POSTGRES_TYPES,
    _UNAMBIGUOUS_MYSQL,
    Image,
    _column_from_image,
    _hint_body,
    _kind,
    _mysql_column,
)
from transforms.decoders.dts_avro_values import (
    _cell_converters,
    _CellConverter,
    _codec,
    _signature,
    _split_srid,
    _zone,
)
from transforms.decoders.fields import duplicate, parse_int
from transforms.decoders.mysql_types import (
    wrap_unsigned_bigint,
)
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SourceInfo,
    TransactionEvent,
    TransactionRef,
    TransactionStatus,
)
from transforms.errors import DecodeError
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.table_budget import text_columns
from transforms.values import UNAVAILABLE

__all__ = ["DtsAvroDecoder", "DtsAvroOptions", "DtsSchemaVersion", "RecordSchema", "record_schema"]


class DtsSchemaVersion(StrEnum):
    """Which DTS ``Record`` schema the messages are written with."""

    CURRENT = "current"
    V2019 = "2019"
    AUTO = "auto"


class DtsAvroOptions(FormatOptions):
    """Options of the ``dts-avro`` format."""

    schema_version: DtsSchemaVersion = Field(
        DtsSchemaVersion.AUTO,
        alias="schema.version",
        description="Record schema: current (with bornTimestamp), 2019 (without), or auto (try current, then 2019).",
    )


# ----------------------------------------------------------------------------- schema

_SCHEMA_FILES = {DtsSchemaVersion.CURRENT: "dts_record.avsc", DtsSchemaVersion.V2019: "dts_record_2019.avsc"}


@dataclass(frozen=True)
class RecordSchema:
    """A parsed DTS ``Record`` schema, plus each field's own schema (to locate decode failures)."""

    version: DtsSchemaVersion
    record: dict[str, Any]
    fields: tuple[tuple[str, Any], ...]


@lru_cache(maxsize=2)
def record_schema(version: DtsSchemaVersion) -> RecordSchema:
    """The parsed ``Record`` schema of a version (``current`` or ``2019``), parsed once."""
    text = files("transforms.decoders").joinpath("schemas", _SCHEMA_FILES[version]).read_bytes()
    types: list[dict[str, Any]] = orjson.loads(text)
    named: dict[str, Any] = {}
    for item in types[:-1]:
        parse_schema(item, named_schemas=named)
    field_named = dict(named)
    record = parse_schema(types[-1], named_schemas=named)
    assert isinstance(record, dict)
    # one single-field record per field, so that a failure can be pinned to its field
    fields = tuple(
        (
            f["name"],
            parse_schema(
                {"type": "record", "name": f"{_NS}probe.{f['name']}", "fields": [f]},
                named_schemas=dict(field_named),
            ),
        )
        for f in types[-1]["fields"]
    )
    return RecordSchema(version, record, fields)


_RowPlan = tuple[tuple[str, Column, dict[str, _CellConverter]], ...]


@dataclass(frozen=True, slots=True)
class _Context:
    """What value conversion needs to know about the record."""

    fraction_per_second: int


# ----------------------------------------------------------------------------- decoder


class DtsAvroDecoder(Decoder):
    """Decodes Alibaba DTS Avro ``Record`` messages (binary) into canonical change events."""

    format_id = "dts-avro"
    description = "Alibaba Cloud DTS Avro Record (subscription / Kafka sync), current and 2019 schemas."
    options_model = DtsAvroOptions
    binary = True

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        if not isinstance(self.options, DtsAvroOptions):
            self.options = DtsAvroOptions.model_validate(self.options.model_dump(by_alias=True))
        self._version: DtsSchemaVersion = self.options.schema_version
        # every cache below is bounded by the table budget (transforms.table_budget)
        self._tables = TableCache()
        # table -> the type hints of its columns (a mirror of the metadata store's)
        self._hints: TableLru[str, dict[str, Any]] = TableLru(lambda _, hints: len(hints))
        # column signature (see _columns) -> columns; (signature, names, key) -> table schema
        self._column_sets: TableLru[tuple[Any, ...], tuple[Column, ...]] = TableLru(
            lambda sig, _: len(sig[1])
        )
        self._table_schemas: TableLru[tuple[Any, ...], TableSchema] = TableLru(
            lambda slot, _: len(slot[0][1]) + len(slot[4])
        )
        # pk_uk_info tag text -> (its PRIMARY columns or None,)
        self._primary_keys: TableLru[str, tuple[tuple[str, ...] | None]] = TableLru(
            lambda text, _: text_columns(text)
        )
        # (id(table), fraction per second) -> (table, its row plan); the entry keeps the table alive
        self._row_plans: TableLru[tuple[int, int], tuple[TableSchema, _RowPlan]] = TableLru(
            lambda _, hit: len(hit[1])
        )

    # -- decode -----------------------------------------------------------------------

    def decode(self, message: Message) -> list[Event]:
        data = message.value
        if data is None:
            return []
        self.check_size(data)
        record = self.read_record(data)
        return self._events(record, data)

    def read_record(self, data: bytes) -> dict[str, Any]:
        """The Avro ``Record`` in ``data``, under the configured schema version."""
        version = self._version
        if version is not DtsSchemaVersion.AUTO:
            return self._read(data, record_schema(version))
        current = record_schema(DtsSchemaVersion.CURRENT)
        record = self._read_fitting(data, current)
        if record is not None:
            return record
        try:
            return self._read(data, record_schema(DtsSchemaVersion.V2019))
        except DecodeError:
            try:
                self._read(data, current)  # fails as _read_fitting did, now saying where and why
            except DecodeError as current_error:
                raise self.error(
                    current_error.field,
                    f"{current_error.reason} (the 2019 schema does not fit either)",
                    data,
                ) from current_error
            raise  # pragma: no cover - _read fails wherever _read_fitting does

    @staticmethod
    def _read_fitting(data: bytes, schema: RecordSchema) -> dict[str, Any] | None:
        """The Record when ``schema`` reads exactly ``data``; None where :meth:`_read` would fail
        (without locating the failure, which a message of the other schema version does not need)."""
        fo = io.BytesIO(data)
        try:
            record = schemaless_reader(fo, schema.record, return_record_name=True)
        except Exception:
            return None
        return record if isinstance(record, dict) and fo.tell() == len(data) else None

    def _read(self, data: bytes, schema: RecordSchema) -> dict[str, Any]:
        fo = io.BytesIO(data)
        try:
            record = schemaless_reader(fo, schema.record, return_record_name=True)
        except Exception as exc:  # fastavro raises many kinds of errors on malformed input
            field, reason = self._locate_failure(data, schema)
            raise self.error(field, f"invalid Avro ({schema.version} schema): {reason}", data) from exc
        if not isinstance(record, dict):
            raise self.error(None, f"expected an Avro Record, found {type(record).__name__}", data)
        rest = len(data) - fo.tell()
        if rest:
            raise self.error(
                schema.fields[-1][0],
                f"{rest} trailing bytes after the Record ({schema.version} schema reads {fo.tell()} of {len(data)})",
                data,
            )
        return record

    @staticmethod
    def _locate_failure(data: bytes, schema: RecordSchema) -> tuple[str, str]:
        """The Record field whose bytes do not decode, and why (cold path, on failure only)."""
        fo = io.BytesIO(data)
        for name, field_schema in schema.fields:
            start = fo.tell()
            try:
                schemaless_reader(fo, field_schema, return_record_name=True)
            except EOFError:
                return (
                    name,
                    f"truncated: the message ends inside field '{name}' (byte {start} of {len(data)})",
                )
            except IndexError:
                declared = field_schema["fields"][0]["type"]
                if isinstance(declared, dict) and declared.get("type") == "enum":
                    what = f"unknown {name}: enum index out of range"
                elif isinstance(declared, list):
                    what = "union branch index out of range"
                else:
                    what = "malformed value"
                return name, f"{what} at byte {start}"
            except Exception as exc:
                return name, f"cannot read field '{name}' at byte {start}: {type(exc).__name__}: {exc}"
        return schema.fields[-1][0], "the Record does not decode"

    # -- events -----------------------------------------------------------------------

    def _events(self, record: dict[str, Any], data: bytes) -> list[Event]:
        operation: str = record["operation"]
        source = self._source_info(record)
        txid = record["sourceTxid"]
        has_tx = bool(txid) and txid != "0"
        if operation in ("INSERT", "UPDATE", "DELETE"):
            return [self._change(record, operation, source, TransactionRef(txid) if has_tx else None, data)]
        if operation in ("DDL", "COMMAND"):
            return self._schema_change(record, source, data)
        if operation in ("BEGIN", "COMMIT"):
            if not has_tx:
                return []
            status = TransactionStatus.BEGIN if operation == "BEGIN" else TransactionStatus.END
            return [TransactionEvent(status, txid, source, ts_ms=self._process_ms(record))]
        return []

    def _names(
        self, record: dict[str, Any], data: bytes, required: bool
    ) -> tuple[str | None, str | None, str | None]:
        name = record["objectName"]
        if not name:
            if required:
                raise self.error(
                    "objectName", f"expected 'db.table' for {record['operation']}, found {name!r}", data
                )
            return None, None, None
        parts = [p.replace("\\u002E", ".") for p in name.split(".")]
        if len(parts) == 1:
            if required:
                raise self.error(
                    "objectName", f"expected 'db.table' or 'db.schema.table', found {name!r}", data
                )
            return parts[0], None, None
        if len(parts) == 2:
            return parts[0], None, parts[1]
        if len(parts) == 3:
            return parts[0], parts[1], parts[2]
        raise self.error("objectName", f"expected at most 3 name parts, found {name!r}", data)

    def _schema_change(self, record: dict[str, Any], source: SourceInfo, data: bytes) -> list[Event]:
        ddl = record["afterImages"]
        if ddl is None and isinstance(record["beforeImages"], str):
            ddl = record["beforeImages"]
        if not isinstance(ddl, str):
            if record["operation"] == "COMMAND":
                return []
            raise self.error(
                "afterImages", f"expected the DDL text of a DDL record, found {type(ddl).__name__}", data
            )
        db, schema, table = self._names(record, data, required=False)
        words = ddl.lstrip().split(None, 2)
        verb = words[0].upper() if words else ""
        change_type = (
            verb if verb in ("CREATE", "DROP") and len(words) > 1 and words[1].upper() == "TABLE" else "ALTER"
        )
        return [
            SchemaChangeEvent(db, schema, table, ddl, source, change_type, ts_ms=self._process_ms(record))
        ]

    def _change(
        self,
        record: dict[str, Any],
        operation: str,
        source: SourceInfo,
        transaction: TransactionRef | None,
        data: bytes,
    ) -> ChangeEvent:
        db, schema, table_name = self._names(record, data, required=True)
        assert table_name is not None
        fields = record["fields"]
        if not isinstance(fields, list):
            raise self.error(
                "fields", f"expected the column list of a {operation} record, found {fields!r:.60}", data
            )
        twice = duplicate(f["name"] for f in fields)
        if twice is not None:
            raise self.error("fields", f"column {twice!r} is listed twice", data)
        width = len(fields)
        before_raw = (
            None
            if operation == "INSERT"
            else self._image(record, "beforeImages", width, operation == "DELETE", data)
        )
        after_raw = None if operation == "DELETE" else self._image(record, "afterImages", width, True, data)
        try:
            columns, signature = self._columns(record, fields, before_raw, after_raw)
        except ValueError as exc:
            raise self.error("fields", str(exc), data) from exc
        key = self._key(record, columns, data)
        table = self._table(db, schema, table_name, columns, key, signature)
        fraction = 1_000_000 if self._micros(record) else 1_000_000_000
        ctx = _Context(fraction)
        plan = self._row_plan(table, fraction)
        before = self._row(plan, before_raw, "beforeImages", ctx, data)
        after = self._row(plan, after_raw, "afterImages", ctx, data)
        op = {"INSERT": Operation.CREATE, "UPDATE": Operation.UPDATE}.get(operation, Operation.DELETE)
        return ChangeEvent(op, table, before, after, source, transaction, ts_ms=self._process_ms(record))

    def _image(
        self, record: dict[str, Any], name: str, width: int, required: bool, data: bytes
    ) -> list[Image] | None:
        image = record[name]
        if image is None:
            if required:
                raise self.error(
                    name, f"expected the row values of a {record['operation']} record, found null", data
                )
            return None
        if not isinstance(image, list):
            raise self.error(
                name, f"expected an array of values, found a string of {len(image)} characters", data
            )
        if len(image) != width:
            raise self.error(name, f"expected {width} values (one per field), found {len(image)}", data)
        return image

    @staticmethod
    def _micros(record: dict[str, Any]) -> bool:
        source_type = record["source"]["sourceType"]
        return source_type in _MICROS_FRACTION and "<->" not in record["sourcePosition"]

    def _columns(
        self,
        record: dict[str, Any],
        fields: list[dict[str, Any]],
        before: list[Image] | None,
        after: list[Image] | None,
    ) -> tuple[tuple[Column, ...], tuple[Any, ...] | None]:
        """The record's columns, and the signature they are cached by (None: not cached)."""
        source_type = record["source"]["sourceType"]
        mysql = source_type in _MYSQL_FAMILY
        postgres = source_type == "PostgreSQL"
        # type numbers that give the column on their own (no sample needed)
        by_number: frozenset[int] | dict[int, Any] = (
            _UNAMBIGUOUS_MYSQL if mysql else _POSTGRES_TYPES if postgres else frozenset()
        )
        samples: list[tuple[str | None, Any]] = []
        observed: dict[str, list[Any]] = {}
        missing: list[int] = []
        # the signature the columns are cached by: per field its name and type number, plus (below)
        # the sample's _sample_key where the number leaves the type open
        parts: list[tuple[Any, ...]] = []
        open_fields: list[int] = []
        for i, field in enumerate(fields):
            number = field["dataTypeNumber"]
            parts.append((field["name"], number))
            if number in by_number:
                samples.append((None, None))
                continue
            open_fields.append(i)
            sample: Image = None
            for image in (after, before):
                value = image[i] if image is not None else None
                if value is not None and _kind(value) != "EmptyObject":
                    sample = value
                    break
            kind = _kind(sample)
            body = sample[1] if sample is not None else None
            samples.append((kind, body))
            if kind is None:
                missing.append(i)
            else:
                observed[field["name"]] = [number, kind, _hint_body(kind, body)]
        if observed or missing:
            hints = self._type_hints(record["objectName"], observed)
            for i in missing:
                hint = hints.get(fields[i]["name"])
                if hint is not None and hint[0] == fields[i]["dataTypeNumber"]:
                    samples[i] = (hint[1], hint[2])
        signature = _signature(1 if mysql else 2 if postgres else 0, parts, open_fields, samples)
        if signature is not None:
            cached = self._column_sets.get(signature)
            if cached is not None:
                return cached, signature
        columns = []
        for field, (kind, body) in zip(fields, samples, strict=True):
            name = field["name"]
            number = field["dataTypeNumber"]
            if mysql:
                columns.append(_mysql_column(name, number, kind, body))
            elif postgres and number in _POSTGRES_TYPES:
                pg_type, ctype, logical = _POSTGRES_TYPES[number]
                columns.append(Column(name, ctype, logical=logical, source_type=pg_type))
            else:
                columns.append(_column_from_image(name, kind, body))
        if signature is not None:
            self._column_sets.put(signature, tuple(columns))
        return tuple(columns), signature

    def _type_hints(self, table: str, observed: dict[str, list[Any]]) -> dict[str, Any]:
        """What earlier values of a table's columns said about their types, merged with ``observed``.

        Kept in the metadata store (so replicas agree) and mirrored in memory, so a column whose
        values are all NULL or absent in a record keeps the type its earlier values gave it.
        """
        known = self._hints.get(table)
        if known is None:
            stored = self.metadata.get(_HINTS_NAMESPACE, table)
            known = stored if isinstance(stored, dict) else {}
        merged = {**known, **observed}
        if merged != known:
            self.metadata.put(_HINTS_NAMESPACE, table, merged)
        self._hints.put(table, merged)
        return merged

    def _key(self, record: dict[str, Any], columns: Sequence[Column], data: bytes) -> tuple[str, ...]:
        text = record["tags"].get("pk_uk_info")
        if not text:
            return ()
        cached = self._primary_keys.get(text)
        primary = self._primary_key(text, data) if cached is None else cached[0]
        if primary is None:
            return ()
        names = {c.name for c in columns}
        missing = [c for c in primary if c not in names]
        if missing:
            raise self.error("tags.pk_uk_info", f"primary key columns {missing} are not in fields", data)
        return primary

    def _primary_key(self, text: str, data: bytes) -> tuple[str, ...] | None:
        """The ``PRIMARY`` columns of a ``pk_uk_info`` tag (None: no primary key), cached by the text."""
        try:
            info = self.load_embedded_json(text, "tags.pk_uk_info", data)
        except DecodeError as exc:
            raise self.error(
                "tags.pk_uk_info",
                f"expected a JSON object of index → columns, found {text!r:.80} ({exc.reason})",
                data,
            ) from exc
        if not isinstance(info, dict):
            raise self.error(
                "tags.pk_uk_info", f"expected a JSON object of index → columns, found {text!r}", data
            )
        primary = info.get("PRIMARY")
        if primary is not None and (not isinstance(primary, list) or not all(isinstance(c, str) for c in primary)):
            raise self.error(
                "tags.pk_uk_info", f"expected PRIMARY to list column names, found {primary!r}", data
            )
        key = None if primary is None else tuple(primary)
        self._primary_keys.put(text, (key,))
        return key

    def _table(
        self,
        db: str | None,
        schema: str | None,
        table: str,
        columns: tuple[Column, ...],
        key: tuple[str, ...],
        signature: tuple[Any, ...] | None = None,
    ) -> TableSchema:
        """The interned table schema; cached by the columns' signature when they have one."""
        if signature is None:
            return self._tables.intern(TableSchema(db, schema, table, columns, key))
        slot = (signature, db, schema, table, key)
        cached = self._table_schemas.get(slot)
        if cached is None:
            cached = self._tables.intern(TableSchema(db, schema, table, columns, key))
            self._table_schemas.put(slot, cached)
        return cached

    def _row_plan(self, table: TableSchema, fraction_per_second: int) -> _RowPlan:
        hit = self._row_plans.get((id(table), fraction_per_second))
        if hit is not None and hit[0] is table:
            return hit[1]
        plan = tuple((col.name, col, _cell_converters(col, fraction_per_second)) for col in table.columns)
        self._row_plans.put((id(table), fraction_per_second), (table, plan))
        return plan

    def _row(
        self, plan: _RowPlan, image: list[Image] | None, name: str, ctx: _Context, data: bytes
    ) -> dict[str, Any] | None:
        if image is None:
            return None
        out: dict[str, Any] = {}
        for (column, col, fast), value in zip(plan, image, strict=True):
            if value is None:
                out[column] = None
                continue
            convert = fast.get(value[0])
            if convert is not None:
                try:
                    out[column] = convert(value[1])
                    continue
                except Exception:  # any failure: _value decides (and names the field)
                    pass
            out[column] = self._value(col, value, f"{name}.{column}", ctx, data)
        return out

    # -- values -----------------------------------------------------------------------

    def _value(self, col: Column, value: Image, field: str, ctx: _Context, data: bytes) -> Any:
        if value is None:
            return None
        kind = _kind(value)
        body = value[1]
        if kind == "EmptyObject":
            return None if body == "NULL" else UNAVAILABLE
        if kind == "Integer":
            raw: Any = self._integer(col, body["value"], field, data)
        elif kind == "Character":
            raw = self._character(col, body, field, data)
        elif kind == "Decimal":
            try:
                raw = Decimal(body["value"].strip())
            except InvalidOperation as exc:
                raise self.error(field, f"expected a decimal, found {body['value']!r}", data) from exc
        elif kind == "Float":
            raw = body["value"]
        elif kind == "Timestamp":
            seconds = body["timestamp"]
            try:
                raw = dt.datetime.fromtimestamp(seconds, dt.UTC) + dt.timedelta(microseconds=body["millis"])
            except (OverflowError, ValueError, OSError) as exc:
                raise self.error(field, f"epoch seconds {seconds} out of range", data) from exc
        elif kind == "DateTime":
            raw = self._datetime(col, body, None, field, ctx, data)
        elif kind == "TimestampWithTimeZone":
            zone = _zone(body["timezone"])
            if zone is None:
                raise self.error(
                    field, f"expected a time zone offset or region, found {body['timezone']!r}", data
                )
            raw = self._datetime(col, body["value"], zone, field, ctx, data)
        elif kind == "BinaryGeometry":
            wkb, srid = _split_srid(body["value"])
            raw = {"wkb": wkb, "srid": srid} if col.logical == Logical.GEOMETRY else body["value"]
        else:  # TextGeometry, BinaryObject, TextObject
            raw = body["value"]
        return self.coerce(col, raw, field, data)

    def _integer(self, col: Column, text: str, field: str, data: bytes) -> int:
        try:
            value = int(text.strip())
        except ValueError as exc:
            raise self.error(field, f"expected an integer, found {text!r}", data) from exc
        if col.type is ConnectType.INT64 and 2**63 <= value < 2**64:
            return int(wrap_unsigned_bigint(value))  # BIGINT UNSIGNED, as Debezium's long mode
        bits = {ConnectType.INT16: 16, ConnectType.INT32: 32, ConnectType.INT64: 64}.get(col.type)
        if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise self.error(field, f"integer {value} does not fit {col.type.value}", data)
        return value

    def _character(self, col: Column, body: dict[str, Any], field: str, data: bytes) -> Any:
        raw: bytes = body["value"]
        charset: str = body["charset"]
        if col.type is ConnectType.BYTES or charset.lower() == "binary":
            return raw
        codec = _codec(charset)
        if codec is None:
            raise self.error(field, f"unknown charset {charset!r}", data)
        try:
            return raw.decode(codec)
        except UnicodeDecodeError as exc:
            raise self.error(
                field, f"value is not valid {charset}: {exc.reason} at byte {exc.start}", data
            ) from exc
        except UnicodeError as exc:  # codecs such as idna fail with a plain UnicodeError
            raise self.error(field, f"value is not valid {charset}: {exc}", data) from exc

    def _datetime(
        self,
        col: Column,
        body: dict[str, Any],
        zone: dt.tzinfo | None,
        field: str,
        ctx: _Context,
        data: bytes,
    ) -> Any:
        year, month, day = body["year"], body["month"], body["day"]
        hour, minute, second, fraction = body["hour"], body["minute"], body["second"], body["millis"]
        micros = (fraction or 0) * 1_000_000 // ctx.fraction_per_second
        logical = col.logical
        if logical == Logical.YEAR:
            return year
        if logical in (Logical.MICRO_TIME, Logical.TIME, Logical.NANO_TIME) or (
            year is None and hour is not None
        ):
            return dt.timedelta(
                hours=hour or 0, minutes=minute or 0, seconds=second or 0, microseconds=micros
            )
        if year is None or month is None or day is None:
            raise self.error(field, f"expected a date in {body!r}", data)
        if year == 0 or month == 0 or day == 0:
            return None  # MySQL zero date ("0000-00-00"), NULL as in Debezium
        try:
            if logical == Logical.DATE:
                return dt.date(year, month, day)
            return dt.datetime(year, month, day, hour or 0, minute or 0, second or 0, micros, zone)
        except ValueError as exc:
            raise self.error(field, f"invalid date/time {body!r}: {exc}", data) from exc

    # -- source -----------------------------------------------------------------------

    def _source_info(self, record: dict[str, Any]) -> SourceInfo:
        position: str = record["sourcePosition"]
        fields: dict[str, Any] = {
            "source_position": position,
            "safe_source_position": record["safeSourcePosition"],
            "source_txid": record["sourceTxid"],
            "source_type": record["source"]["sourceType"],
            "source_version": record["source"]["version"],
            "record_id": record["id"],
            "record_version": record["version"],
            "tags": orjson.dumps(record["tags"], option=orjson.OPT_SORT_KEYS).decode(),
        }
        born = record.get("bornTimestamp")
        if born:
            fields["born_timestamp"] = born
        return SourceInfo(
            connector=self.format_id,
            ts_ms=_epoch_ms(record["sourceTimestamp"]),
            sequence=_sequence(position, record["id"]),
            fields=fields,
        )

    @staticmethod
    def _process_ms(record: dict[str, Any]) -> int | None:
        stamps = record["processTimestamps"]
        if stamps:
            return _epoch_ms(stamps[-1])
        reader = record["tags"].get("readerThroughoutTime", "")
        number = parse_int(reader) if reader.isdigit() else None
        return _epoch_ms(number) if number is not None else None


_POSITION_RE = re.compile(r"^([0-9]{1,19})@([0-9]{1,10})$")


def _sequence(position: str, record_id: int) -> str | None:
    """``<offset>@<file index>`` → ``<file>.<offset>.<record id>``, zero padded to sort as text."""
    m = _POSITION_RE.match(position)
    if not m:
        return None
    sequence = f"{int(m.group(2)):010d}.{int(m.group(1)):020d}"
    return f"{sequence}.{record_id:020d}" if record_id >= 0 else sequence


def _epoch_ms(value: int) -> int | None:
    """DTS timestamps are epoch seconds; values past year 5138 in seconds are taken as ms."""
    if value <= 0:
        return None
    return value if value >= 100_000_000_000 else value * 1000
