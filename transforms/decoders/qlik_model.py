"""The Qlik (Attunity) Replicate table model: metadata messages, column types and bit masks.

A Replicate *metadata message* describes one version of a table: its ``schemaId``, its
``lineage`` (server, task, schema, table, ``tableVersion``, timestamp), its columns
(``tableStructure.tableColumns``: ordinal, type, length, precision, scale,
``primaryKeyPosition``, nullable) and the Avro ``dataSchema`` of its data messages. Data
messages refer to it by ``messageSchemaId``. This module parses that description (from a JSON
message, an Avro-decoded message or the metadata store, which holds the same shape) and maps it
to Connect columns. It has no Kafka, Avro or store code.

Masks (``changeMask``, ``columnMask``)
-------------------------------------
A mask is a binary value: hex digits in JSON messages (Replicate writes binary values as hex
there) and ``bytes`` in Avro messages, the same bytes in the same order. Read as one unsigned
big-endian number, bit ``k - 1`` (counting from the least significant bit) belongs to the column
with ordinal ``k``. So the *last* byte (last two hex digits) holds ordinals 1..8, ordinal 1
in its lowest bit; the byte before it holds ordinals 9..16, and so on. This is Replicate's
documented example (``0B`` = ``1011`` = ordinals 1, 2 and 4) and matches captured Replicate
messages (a 16-column table has ``columnMask`` ``00FFFF``; changing its 8th and 16th columns
gives ``changeMask`` ``008080``). Ordinals past the mask's width are clear. A mask is at most
:data:`MAX_MASK_BYTES` long (8192 columns; no database allows more).

>>> m = ColumnMask.parse("0B")
>>> [k for k in range(1, 9) if m.has(k)]
[1, 2, 4]
>>> ColumnMask.parse(bytes([0x00, 0x80, 0x80])).ordinals()
(8, 16)
"""

from __future__ import annotations

import binascii
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import check_decimal_params
from transforms.decoders.fields import parse_int
from transforms.errors import DecodeError

__all__ = [
    "MAX_MASK_BYTES",
    "REPLICATE_TYPES",
    "ColumnMask",
    "Fail",
    "QlikColumn",
    "QlikTableMetadata",
    "connect_column",
    "hex_bytes",
    "parse_metadata",
]

MAX_MASK_BYTES = 1024

Fail = Callable[[str, str], DecodeError]
"""Builds the error to raise for a field and a reason (the decoder adds format id and payload)."""


@dataclass(frozen=True, slots=True)
class ColumnMask:
    """A Replicate column bit mask: ``bits`` as a number, ``text`` as upper-case hex digits."""

    bits: int
    text: str

    @staticmethod
    def parse(raw: str | bytes) -> ColumnMask:
        """A mask from its JSON hex digits or its Avro bytes; ValueError if it is not one.

        >>> ColumnMask.parse("1f").text
        '1F'
        """
        size = len(raw) if isinstance(raw, bytes) else (len(raw.strip()) + 1) // 2
        if size > MAX_MASK_BYTES:
            raise ValueError(f"expected a column mask of at most {MAX_MASK_BYTES} bytes, found {size}")
        if isinstance(raw, bytes):
            return ColumnMask(int.from_bytes(raw, "big"), raw.hex().upper())
        text = raw.strip()
        if len(text) % 2:
            text = "0" + text
        try:
            data = bytes.fromhex(text)
        except ValueError as exc:
            raise ValueError(f"expected hex digits, found {raw!r:.60}") from exc
        return ColumnMask(int.from_bytes(data, "big"), data.hex().upper())

    def has(self, ordinal: int) -> bool:
        """Whether the bit of the column with this (1-based) ordinal is set."""
        return ordinal >= 1 and bool((self.bits >> (ordinal - 1)) & 1)

    def ordinals(self) -> tuple[int, ...]:
        """The ordinals whose bits are set, ascending."""
        out = []
        bits, ordinal = self.bits, 1
        while bits:
            if bits & 1:
                out.append(ordinal)
            bits >>= 1
            ordinal += 1
        return tuple(out)


@dataclass(frozen=True, slots=True)
class QlikColumn:
    """One column of a Replicate table, as its metadata message describes it."""

    name: str
    ordinal: int
    type: str
    length: int = 0
    precision: int = 0
    scale: int = 0
    primary_key_position: int = 0
    nullable: bool = True

    @property
    def source_type(self) -> str:
        """The Replicate type with its size, e.g. ``NUMERIC(10,2)``, ``STRING(50)``, ``DATETIME(6)``."""
        kind = self.type
        if kind in _DECIMAL_TYPES and self.precision > 0:
            return f"{kind}({self.precision},{self.scale})"
        if kind in _SIZED_TYPES and self.length > 0:
            return f"{kind}({self.length})"
        if kind in _DATETIME_TYPES:
            return f"{kind}({self.scale})"
        return kind

    def to_document(self) -> dict[str, Any]:
        return {
            "ordinal": self.ordinal,
            "type": self.type,
            "length": self.length,
            "precision": self.precision,
            "scale": self.scale,
            "primaryKeyPosition": self.primary_key_position,
            "nullable": self.nullable,
        }


@dataclass(frozen=True, slots=True)
class QlikTableMetadata:
    """One version of a table: lineage, columns in ordinal order, and the Avro data schema.

    :meth:`to_document` gives the JSON-compatible document kept in the metadata store; it has
    the shape of a metadata message, so :func:`parse_metadata` reads it back.
    """

    schema_id: str
    server: str
    task: str
    schema: str
    table: str
    table_version: int
    timestamp: str | None
    columns: tuple[QlikColumn, ...]
    data_schema: str | None = None

    @property
    def key(self) -> tuple[str, ...]:
        """The primary-key (or unique index) columns, ordered by ``primaryKeyPosition``."""
        keyed = sorted(
            (c for c in self.columns if c.primary_key_position > 0), key=lambda c: c.primary_key_position
        )
        return tuple(c.name for c in keyed)

    def table_schema(self, db: str | None = None) -> TableSchema:
        """The Connect table structure; ``db`` names the database when configured."""
        return TableSchema(
            db, self.schema or None, self.table, tuple(connect_column(c) for c in self.columns), self.key
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "schemaId": self.schema_id,
            "lineage": {
                "server": self.server,
                "task": self.task,
                "schema": self.schema,
                "table": self.table,
                "tableVersion": self.table_version,
                "timestamp": self.timestamp,
            },
            "tableStructure": {"tableColumns": {c.name: c.to_document() for c in self.columns}},
            "dataSchema": self.data_schema,
        }


# ----------------------------------------------------------------------------- types

_DECIMAL_TYPES = frozenset({"NUMERIC", "DECIMAL"})
_SIZED_TYPES = frozenset({"STRING", "WSTRING", "BYTES"})
_DATETIME_TYPES = frozenset({"DATETIME", "TIMESTAMP"})

REPLICATE_TYPES: dict[str, tuple[ConnectType, str | None]] = {
    "INT1": (ConnectType.INT8, None),
    "INT2": (ConnectType.INT16, None),
    "INT4": (ConnectType.INT32, None),
    "INT8": (ConnectType.INT64, None),
    # unsigned types widen to the next signed type; UINT8 stays int64 like Debezium's
    # bigint.unsigned.handling.mode=long (Replicate does not support values above 2^63-1)
    "UINT1": (ConnectType.INT16, None),
    "UINT2": (ConnectType.INT32, None),
    "UINT4": (ConnectType.INT64, None),
    "UINT8": (ConnectType.INT64, None),
    "REAL4": (ConnectType.FLOAT32, None),
    "REAL8": (ConnectType.FLOAT64, None),
    "BOOLEAN": (ConnectType.BOOLEAN, None),
    "STRING": (ConnectType.STRING, None),
    "WSTRING": (ConnectType.STRING, None),
    "CLOB": (ConnectType.STRING, None),
    "NCLOB": (ConnectType.STRING, None),
    "BYTES": (ConnectType.BYTES, None),
    "BLOB": (ConnectType.BYTES, None),
    "DATE": (ConnectType.INT32, Logical.DATE),
    "TIME": (ConnectType.INT64, Logical.MICRO_TIME),
}
"""Replicate's data types (also AWS DMS's, which runs Replicate's engine) without a size → Connect
type and logical name. Decimal and date-time types depend on precision/scale and are mapped apart."""


def connect_column(col: QlikColumn) -> Column:
    """The Connect column of a Replicate column (unknown types become strings).

    Only key columns are required: a NOT NULL column outside the key may still be left out of a
    change by its ``columnMask``, and an absent number or date is emitted as ``null`` (named in
    ``source.unavailable_after``), which a required Connect field cannot hold.

    >>> connect_column(QlikColumn("p", 1, "NUMERIC", precision=10, scale=2)).params
    (('connect.decimal.precision', '10'), ('scale', '2'))
    >>> connect_column(QlikColumn("t", 2, "DATETIME", scale=6)).logical
    'io.debezium.time.MicroTimestamp'
    """
    kind = col.type
    optional = col.nullable or col.primary_key_position <= 0
    if kind in _DECIMAL_TYPES:
        if col.precision > 0:
            return Column.decimal(col.name, col.precision, col.scale, optional, col.source_type)
        return Column.decimal(col.name, None, None, optional, col.source_type)
    if kind in _DATETIME_TYPES:
        logical = Logical.TIMESTAMP if col.scale <= 3 else Logical.MICRO_TIMESTAMP
        return Column(col.name, ConnectType.INT64, optional, logical, source_type=col.source_type)
    ctype, logical_name = REPLICATE_TYPES.get(kind, (ConnectType.STRING, None))
    return Column(col.name, ctype, optional, logical_name, source_type=col.source_type)


# ----------------------------------------------------------------------------- parsing


def _int(obj: Mapping[str, Any], name: str, field: str, fail: Fail, default: int | None = None) -> int:
    value = obj.get(name)
    if value is None and default is not None:
        return default
    number = parse_int(value)
    if number is None:
        raise fail(f"{field}.{name}", f"expected an integer, found {value!r:.60}")
    return number


def _str(obj: Mapping[str, Any], name: str, field: str, fail: Fail, required: bool = False) -> str:
    value = obj.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise fail(f"{field}.{name}", f"expected a non-empty string, found {value!r}")
    return value


def _object(obj: Mapping[str, Any], name: str, field: str, fail: Fail) -> Mapping[str, Any]:
    value = obj.get(name)
    if not isinstance(value, Mapping):
        raise fail(f"{field}.{name}", f"expected an object, found {type(value).__name__}")
    return value


def _column(name: str, spec: Any, field: str, fail: Fail) -> QlikColumn:
    where = f"{field}.{name}"
    if not name:
        raise fail(where, "expected a column name, found an empty one")
    if not isinstance(spec, Mapping):
        raise fail(where, f"expected a column object, found {type(spec).__name__}")
    ordinal = _int(spec, "ordinal", where, fail)
    if not 1 <= ordinal <= 8 * MAX_MASK_BYTES:
        raise fail(f"{where}.ordinal", f"expected an ordinal from 1 to {8 * MAX_MASK_BYTES}, found {ordinal}")
    precision = _int(spec, "precision", where, fail, 0)
    scale = _int(spec, "scale", where, fail, 0)
    try:
        check_decimal_params(precision, scale)
    except ValueError as exc:
        raise fail(where, str(exc)) from exc
    nullable = spec.get("nullable", True)
    if not isinstance(nullable, bool):
        raise fail(f"{where}.nullable", f"expected a boolean, found {nullable!r}")
    return QlikColumn(
        name=name,
        ordinal=ordinal,
        type=_str(spec, "type", where, fail, required=True).strip().upper(),
        length=_int(spec, "length", where, fail, 0),
        precision=precision,
        scale=scale,
        primary_key_position=_int(spec, "primaryKeyPosition", where, fail, 0),
        nullable=nullable,
    )


def parse_metadata(obj: Any, field: str, fail: Fail) -> QlikTableMetadata:
    """Validate a metadata message body (or a stored document) into table metadata.

    ``field`` is the path of ``obj`` used in error messages (``message``).
    """
    if not isinstance(obj, Mapping):
        raise fail(field, f"expected an object, found {type(obj).__name__}")
    schema_id = _str(obj, "schemaId", field, fail, required=True)
    lineage_field = f"{field}.lineage"
    lineage = _object(obj, "lineage", field, fail)
    timestamp = lineage.get("timestamp")
    if timestamp is not None and not isinstance(timestamp, str):
        raise fail(f"{lineage_field}.timestamp", f"expected a string, found {timestamp!r}")
    structure = _object(obj, "tableStructure", field, fail)
    columns_field = f"{field}.tableStructure.tableColumns"
    specs = _object(structure, "tableColumns", f"{field}.tableStructure", fail)
    if not specs:
        raise fail(columns_field, "expected at least one column, found none")
    columns = sorted(
        (_column(str(n), s, columns_field, fail) for n, s in specs.items()), key=lambda c: c.ordinal
    )
    for before, after in itertools.pairwise(columns):
        if before.ordinal == after.ordinal:
            raise fail(
                columns_field, f"columns {before.name!r} and {after.name!r} share ordinal {after.ordinal}"
            )
    data_schema = obj.get("dataSchema")
    if data_schema is not None and not isinstance(data_schema, str):
        raise fail(
            f"{field}.dataSchema", f"expected a string (an Avro schema), found {type(data_schema).__name__}"
        )
    return QlikTableMetadata(
        schema_id=schema_id,
        server=_str(lineage, "server", lineage_field, fail),
        task=_str(lineage, "task", lineage_field, fail),
        schema=_str(lineage, "schema", lineage_field, fail),
        table=_str(lineage, "table", lineage_field, fail, required=True),
        table_version=_int(lineage, "tableVersion", lineage_field, fail),
        timestamp=timestamp or None,
        columns=tuple(columns),
        data_schema=data_schema or None,
    )


def hex_bytes(text: str) -> bytes:
    """A binary value written as hex digits (Replicate's JSON form); ValueError otherwise.

    >>> hex_bytes("0aFF")
    b'\\n\\xff'
    """
    try:
        return binascii.unhexlify(text.strip())
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"expected hex digits, found {text[:40]!r}") from exc
