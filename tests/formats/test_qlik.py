"""Qlik Replicate decoders (qlik-json, qlik-avro): behaviour, bad input, properties.

This module also holds the reproducible generator of the generated case files under
``tests/data/qlik-json/`` and ``tests/data/qlik-avro/`` (Avro encoded with fastavro, one base64
line per message). Rewrite them with ``.venv/bin/python -m tests.formats.test_qlik`` and then
regenerate the expected files; :func:`test_generated_case_files_are_current` fails if the files
and the generator disagree.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from tests.goldens import SHARED, shared_path
from transforms.connect import ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.qlik import ENVELOPE_SCHEMA, SCHEMA_NAMESPACE, VERSION_NAMESPACE
from transforms.decoders.qlik_model import ColumnMask, QlikColumn, connect_column, parse_metadata
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    TransactionEvent,
    TransactionStatus,
    emit,
)
from transforms.errors import DecodeError, UnknownSchemaError
from transforms.metadata import InMemoryMetadataStore
from transforms.values import UNAVAILABLE

DATA = Path(__file__).resolve().parents[1] / "data"
VECTORS = ("vectors", "qlik-replicate")  # under tests.goldens.SHARED

# ============================================================================ generator


@dataclass(frozen=True)
class Col:
    name: str
    type: str
    pk: int = 0
    length: int = 0
    precision: int = 0
    scale: int = 0
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    schema_id: str
    schema: str
    table: str
    version: int
    columns: tuple[Col, ...]
    server: str = "replicate-01"
    task: str = "orcl-to-kafka"
    timestamp: str = "2024-03-05T10:00:00.000"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class Change:
    """One data message: ``present`` lists the columnMask columns (None: no mask)."""

    table: Table
    op: str
    data: Mapping[str, Any] | None
    before: Mapping[str, Any] | None = None
    seq: str = ""
    ts: str = ""
    pos: str = ""
    tx: str = ""
    counter: int | None = None
    last: bool | None = None
    changed: tuple[str, ...] | None = None
    present: tuple[str, ...] | None = None
    schema_id: str | None = None  # override messageSchemaId


def mask(table: Table, names: Sequence[str]) -> bytes:
    """The mask bytes of a set of columns: bit (ordinal - 1) of a big-endian number."""
    bits = 0
    for i, col in enumerate(table.columns, start=1):
        if col.name in names:
            bits |= 1 << (i - 1)
    return bits.to_bytes(len(table.columns) // 8 + 1, "big")


def metadata_body(t: Table) -> dict[str, Any]:
    return {
        "schemaId": t.schema_id,
        "lineage": {
            "server": t.server,
            "task": t.task,
            "schema": t.schema,
            "table": t.table,
            "tableVersion": t.version,
            "timestamp": t.timestamp,
        },
        "tableStructure": {
            "tableColumns": {
                c.name: {
                    "ordinal": i,
                    "type": c.type,
                    "length": c.length,
                    "precision": c.precision,
                    "scale": c.scale,
                    "primaryKeyPosition": c.pk,
                    "nullable": c.nullable,
                }
                for i, c in enumerate(t.columns, start=1)
            }
        },
        "dataSchema": orjson.dumps(data_schema(t)).decode(),
    }


_AVRO_TYPES: dict[str, Any] = {
    "INT1": "int",
    "INT2": "int",
    "INT4": "int",
    "UINT1": "int",
    "UINT2": "int",
    "INT8": "long",
    "UINT4": "long",
    "UINT8": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0},
    "REAL4": "float",
    "REAL8": "double",
    "STRING": "string",
    "WSTRING": "string",
    "CLOB": "string",
    "NCLOB": "string",
    "BYTES": "bytes",
    "BLOB": "bytes",
    "BOOLEAN": "boolean",
    "DATE": {"type": "int", "logicalType": "date"},
    "TIME": {"type": "int", "logicalType": "time-millis"},
    "DATETIME": {"type": "long", "logicalType": "timestamp-micros"},
}


def avro_type(c: Col) -> Any:
    if c.type == "NUMERIC":
        return {"type": "bytes", "logicalType": "decimal", "precision": c.precision, "scale": c.scale}
    return _AVRO_TYPES[c.type]


def data_schema(t: Table) -> dict[str, Any]:
    """The Avro DataRecord schema of a table (Replicate's data schema, logical types on)."""
    return {
        "type": "record",
        "name": "DataRecord",
        "fields": [
            {
                "name": "data",
                "type": {
                    "type": "record",
                    "name": "Data",
                    "fields": [{"name": c.name, "type": ["null", avro_type(c)]} for c in t.columns],
                },
            },
            {"name": "beforeData", "type": ["null", "Data"]},
            {
                "name": "headers",
                "type": {
                    "type": "record",
                    "name": "Headers",
                    "fields": [
                        {
                            "name": "operation",
                            "type": {
                                "type": "enum",
                                "name": "operation",
                                "symbols": ["INSERT", "UPDATE", "DELETE", "REFRESH"],
                            },
                        },
                        {"name": "changeSequence", "type": "string"},
                        {"name": "timestamp", "type": "string"},
                        {"name": "streamPosition", "type": "string"},
                        {"name": "transactionId", "type": "string"},
                        {"name": "changeMask", "type": ["null", "bytes"]},
                        {"name": "columnMask", "type": ["null", "bytes"]},
                        {"name": "transactionEventCounter", "type": ["null", "long"]},
                        {"name": "transactionLastEvent", "type": ["null", "boolean"]},
                    ],
                },
            },
        ],
    }


def metadata_schema(t: Table) -> dict[str, Any]:
    """The Avro MetadataMessage schema of a table (one record per column, as Replicate does)."""
    column_fields = [
        {"name": "ordinal", "type": "int"},
        {"name": "type", "type": "string"},
        {"name": "length", "type": "int"},
        {"name": "precision", "type": "int"},
        {"name": "scale", "type": "int"},
        {"name": "primaryKeyPosition", "type": "int"},
        {"name": "nullable", "type": "boolean"},
    ]
    return {
        "type": "record",
        "name": "MetadataMessage",
        "fields": [
            {"name": "schemaId", "type": "string"},
            {
                "name": "lineage",
                "type": {
                    "type": "record",
                    "name": "Lineage",
                    "fields": [
                        {"name": "server", "type": "string"},
                        {"name": "task", "type": "string"},
                        {"name": "schema", "type": "string"},
                        {"name": "table", "type": "string"},
                        {"name": "tableVersion", "type": "long"},
                        {"name": "timestamp", "type": "string"},
                    ],
                },
            },
            {
                "name": "tableStructure",
                "type": {
                    "type": "record",
                    "name": "TableStructure",
                    "fields": [
                        {
                            "name": "tableColumns",
                            "type": {
                                "type": "record",
                                "name": "TableColumns",
                                "fields": [
                                    {
                                        "name": c.name,
                                        "type": {"type": "record", "name": c.name, "fields": column_fields},
                                    }
                                    for c in t.columns
                                ],
                            },
                        }
                    ],
                },
            },
            {"name": "dataSchema", "type": "string"},
        ],
    }


def json_value(c: Col, value: Any) -> Any:
    """A typed value as Replicate writes it in JSON (binary as hex, temporal as text)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex().upper()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return value


def avro_value(c: Col, value: Any) -> Any:
    """A typed value as fastavro writes it (UINT8 is an Avro decimal(20,0))."""
    if c.type == "UINT8" and value is not None:
        return Decimal(value)
    return value


def _row(t: Table, values: Mapping[str, Any] | None, present: tuple[str, ...] | None, convert: Any) -> Any:
    if values is None:
        return None
    return {
        c.name: convert(c, values.get(c.name)) if present is None or c.name in present else None
        for c in t.columns
    }


def data_body(ch: Change, convert: Any, as_bytes: bool) -> dict[str, Any]:
    t = ch.table
    changed = mask(t, ch.changed) if ch.changed is not None else None
    present = mask(t, ch.present) if ch.present is not None else None
    if not as_bytes:
        changed = changed.hex().upper() if changed is not None else None  # type: ignore[assignment]
        present = present.hex().upper() if present is not None else None  # type: ignore[assignment]
    return {
        "data": _row(t, ch.data, ch.present, convert),
        "beforeData": _row(t, ch.before, ch.present, convert),
        "headers": {
            "operation": ch.op,
            "changeSequence": ch.seq,
            "timestamp": ch.ts,
            "streamPosition": ch.pos,
            "transactionId": ch.tx,
            "changeMask": changed,
            "columnMask": present,
            "transactionEventCounter": ch.counter,
            "transactionLastEvent": ch.last,
        },
    }


def json_message(item: Table | Change) -> bytes:
    if isinstance(item, Table):
        doc = {
            "magic": "atMSG",
            "type": "MD",
            "headers": None,
            "messageSchemaId": item.schema_id,
            "messageSchema": None,
            "message": metadata_body(item),
        }
    else:
        doc = {
            "magic": "atMSG",
            "type": "DT",
            "headers": None,
            "messageSchemaId": item.schema_id or item.table.schema_id,
            "messageSchema": None,
            "message": data_body(item, json_value, as_bytes=False),
        }
    return orjson.dumps(doc)


def _avro(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def avro_envelope(
    kind: str, schema_id: str | None, schema: str | None, message: bytes, magic: bytes = b"atMSG"
) -> bytes:
    record = {
        "magic": magic,
        "type": kind,
        "headers": None,
        "messageSchemaId": schema_id,
        "messageSchema": schema,
        "message": message,
    }
    return _avro(ENVELOPE_SCHEMA, record)


def avro_message(item: Table | Change) -> bytes:
    if isinstance(item, Table):
        schema = metadata_schema(item)
        return avro_envelope("MD", None, orjson.dumps(schema).decode(), _avro(schema, metadata_body(item)))
    body = data_body(item, avro_value, as_bytes=True)
    return avro_envelope(
        "DT", item.schema_id or item.table.schema_id, None, _avro(data_schema(item.table), body)
    )


# ---------------------------------------------------------------------------- scenarios

ORDERS = Table(
    "6A1F0C0E2B3D4F5A6B7C8D9E0F1A2B3C",
    "INVENTORY",
    "ORDERS",
    1,
    (
        Col("ID", "INT4", pk=1, nullable=False),
        Col("CODE", "STRING", length=20),
        Col("QTY", "INT2"),
        Col("PRICE", "NUMERIC", precision=10, scale=2),
        Col("ACTIVE", "BOOLEAN"),
        Col("CREATED", "DATE"),
        Col("UPDATED", "DATETIME", scale=6),
        Col("NOTE", "CLOB"),
        Col("PHOTO", "BLOB"),
    ),
)
ORDERS_V2 = replace(
    ORDERS,
    schema_id="7B2E1D0F3C4E5A6B7C8D9E0F1A2B3C4D",
    version=2,
    timestamp="2024-03-05T11:00:00.000",
    columns=(*ORDERS.columns, Col("DISCOUNT", "NUMERIC", precision=5, scale=3)),
)
ALL_TYPES = Table(
    "0C1D2E3F405162738495A6B7C8D9EAFB",
    "LAB",
    "ALL_TYPES",
    3,
    (
        Col("K1", "INT8", pk=2, nullable=False),
        Col("K2", "STRING", pk=1, length=8, nullable=False),
        Col("C_INT1", "INT1"),
        Col("C_INT2", "INT2"),
        Col("C_INT4", "INT4"),
        Col("C_UINT1", "UINT1"),
        Col("C_UINT2", "UINT2"),
        Col("C_UINT4", "UINT4"),
        Col("C_UINT8", "UINT8"),
        Col("C_NUMERIC", "NUMERIC", precision=12, scale=3),
        Col("C_REAL4", "REAL4"),
        Col("C_REAL8", "REAL8"),
        Col("C_WSTRING", "WSTRING", length=40),
        Col("C_NCLOB", "NCLOB"),
        Col("C_BYTES", "BYTES", length=4),
        Col("C_TIME", "TIME"),
        Col("C_DATETIME3", "DATETIME", scale=3),
        Col("C_DATETIME6", "DATETIME", scale=6),
    ),
)

_ORDER_1 = {
    "ID": 1,
    "CODE": "A-100",
    "QTY": 3,
    "PRICE": Decimal("19.99"),
    "ACTIVE": True,
    "CREATED": dt.date(2024, 3, 1),
    "UPDATED": dt.datetime(2024, 3, 5, 10, 15, 30, 123456),
    "NOTE": "first order",
    "PHOTO": bytes.fromhex("DEADBEEF"),
}
_ORDER_1B = {**_ORDER_1, "QTY": 5, "UPDATED": dt.datetime(2024, 3, 5, 10, 16, 0, 500000)}
_ORDER_2 = {
    "ID": 2,
    "CODE": "B-200",
    "QTY": None,
    "PRICE": Decimal("-0.50"),
    "ACTIVE": False,
    "CREATED": dt.date(2024, 2, 29),
    "UPDATED": None,
    "NOTE": None,
    "PHOTO": None,
}
_ALL = ORDERS.names


def _seq(n: int) -> str:
    return f"2024030510153012{n:019d}"


def _cdc(table: Table, op: str, n: int, data: Any, **kw: Any) -> Change:
    kw.setdefault("present", table.names)
    return Change(
        table,
        op,
        data,
        seq=_seq(n),
        ts=f"2024-03-05T10:15:{30 + n:02d}.{n:03d}",
        pos=f"00000000.01ab{n:04x}.00000001.0000.02.0000:88.67945.{n}",
        **kw,
    )


SCENARIOS: dict[str, list[Table | Change]] = {
    "types": [
        ALL_TYPES,
        Change(
            ALL_TYPES,
            "REFRESH",
            {
                "K1": 9007199254740993,
                "K2": "k-é",
                "C_INT1": -128,
                "C_INT2": -32768,
                "C_INT4": -2147483648,
                "C_UINT1": 255,
                "C_UINT2": 65535,
                "C_UINT4": 4294967295,
                "C_UINT8": 9223372036854775807,
                "C_NUMERIC": Decimal("-123456789.125"),
                "C_REAL4": 1.5,
                "C_REAL8": 2.0000000001,
                "C_WSTRING": "Grüße, 世界",
                "C_NCLOB": "long text",
                "C_BYTES": bytes.fromhex("00FF10"),
                "C_TIME": dt.time(23, 59, 58, 250000),
                "C_DATETIME3": dt.datetime(1999, 12, 31, 23, 59, 59, 999000),
                "C_DATETIME6": dt.datetime(1969, 7, 20, 20, 17, 40, 1),
            },
        ),
        _cdc(
            ALL_TYPES,
            "INSERT",
            1,
            {"K1": 2, "K2": "nulls"},
            tx="000000000000000000000000AA000001",
            counter=1,
            last=True,
            changed=ALL_TYPES.names,
        ),
    ],
    "cdc-stream": [
        ORDERS,
        Change(ORDERS, "REFRESH", _ORDER_2),
        _cdc(
            ORDERS,
            "INSERT",
            1,
            _ORDER_1,
            tx="0000000066DA0202A903000000000000",
            counter=1,
            last=False,
            changed=_ALL,
        ),
        _cdc(
            ORDERS,
            "UPDATE",
            2,
            _ORDER_1B,
            before=_ORDER_1,
            tx="0000000066DA0202A903000000000000",
            counter=2,
            last=True,
            changed=("QTY", "UPDATED"),
        ),
        _cdc(
            ORDERS,
            "DELETE",
            3,
            _ORDER_2,
            tx="0000000066DA0202A904000000000000",
            counter=1,
            last=True,
            changed=("ID",),
        ),
        _cdc(
            ORDERS,
            "UPDATE",
            4,
            {**_ORDER_1B, "ID": 10},
            before=_ORDER_1B,
            tx="0000000066DA0202A905000000000000",
            counter=1,
            last=True,
            changed=("ID",),
        ),
    ],
    "masks": [
        ORDERS,
        # Oracle without full supplemental logging: NOTE and PHOTO could not be replicated
        _cdc(
            ORDERS,
            "UPDATE",
            5,
            {**_ORDER_1B, "NOTE": None},
            before={**_ORDER_1, "NOTE": None},
            changed=("QTY",),
            present=("ID", "CODE", "QTY", "PRICE", "ACTIVE", "CREATED", "UPDATED"),
        ),
        # a delete that carries only the key column
        _cdc(ORDERS, "DELETE", 6, {"ID": 2}, changed=("ID",), present=("ID",)),
        # present but NULL stays null; absent is unavailable
        _cdc(ORDERS, "INSERT", 7, {"ID": 3, "CODE": None}, changed=("ID", "CODE"), present=("ID", "CODE")),
    ],
    "table-version-bump": [
        ORDERS,
        _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL),
        ORDERS_V2,
        _cdc(
            ORDERS_V2,
            "INSERT",
            2,
            {**_ORDER_2, "DISCOUNT": Decimal("0.125")},
            changed=ORDERS_V2.names,
            present=ORDERS_V2.names,
        ),
        # a late message still written with version 1 decodes with version 1
        _cdc(ORDERS, "UPDATE", 3, _ORDER_1B, before=_ORDER_1, changed=("QTY", "UPDATED")),
        ORDERS_V2,  # already seen: no schema change
        ORDERS,  # older: no schema change
        _cdc(
            ORDERS_V2, "DELETE", 4, {**_ORDER_2, "DISCOUNT": None}, changed=("ID",), present=ORDERS_V2.names
        ),
    ],
    "unknown-schema": [
        _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL),
        ORDERS,
        _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL),
        _cdc(ORDERS, "INSERT", 2, _ORDER_2, changed=_ALL, schema_id="FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"),
    ],
    "transaction-end": [
        ORDERS,
        _cdc(
            ORDERS,
            "INSERT",
            1,
            _ORDER_1,
            tx="00000000000000000000000000120001",
            counter=1,
            last=False,
            changed=_ALL,
        ),
        _cdc(
            ORDERS,
            "INSERT",
            2,
            _ORDER_2,
            tx="00000000000000000000000000120001",
            counter=2,
            last=True,
            changed=_ALL,
        ),
    ],
}
SCENARIO_OPTIONS = {"transaction-end": {"transaction.end.events": True}}


def _json_bad_lines() -> list[bytes]:
    md = orjson.loads(json_message(ORDERS))
    dt_ok = orjson.loads(json_message(_cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL)))

    def variant(doc: dict[str, Any], path: Sequence[str], value: Any) -> bytes:
        out = orjson.loads(orjson.dumps(doc))
        node = out
        for part in path[:-1]:
            node = node[part]
        if value is _DROP:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return orjson.dumps(out)

    return [
        b'{"magic":"atMSG","type":"DT","messageSchemaId":"6A1F',
        b"[1, 2]",
        variant(dt_ok, ["magic"], "atMSX"),
        variant(dt_ok, ["type"], "XX"),
        variant(md, ["message", "lineage"], _DROP),
        variant(md, ["message", "tableStructure", "tableColumns", "QTY", "ordinal"], "three"),
        variant(md, ["message", "lineage", "table"], ""),
        orjson.dumps(md),
        variant(dt_ok, ["message", "headers", "operation"], "MERGE"),
        variant(dt_ok, ["message", "headers"], _DROP),
        variant(dt_ok, ["message", "data"], [1, "A-100"]),
        variant(dt_ok, ["message", "data"], None),
        variant(dt_ok, ["message", "data", "QTY"], "three"),
        variant(dt_ok, ["message", "data", "PHOTO"], "not hex"),
        variant(dt_ok, ["message", "data", "SURPRISE"], 1),
        variant(dt_ok, ["message", "headers", "columnMask"], "XYZ"),
        variant(dt_ok, ["message", "headers", "timestamp"], "yesterday"),
        variant(dt_ok, ["message", "headers", "transactionEventCounter"], "first"),
        variant(dt_ok, ["messageSchemaId"], None),
        variant(dt_ok, ["message"], "data"),
        orjson.dumps(dt_ok),
    ]


class _Drop:
    pass


_DROP = _Drop()


def _avro_bad_lines() -> list[bytes]:
    md = avro_message(ORDERS)
    ok = avro_message(_cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL))
    body = _avro(
        data_schema(ORDERS), data_body(_cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL), avro_value, True)
    )
    md_schema = orjson.dumps(metadata_schema(ORDERS)).decode()
    no_data_schema = {**metadata_body(ORDERS), "dataSchema": "{not json"}
    return [
        b"this is not an Avro envelope at all",
        md[:12],
        avro_envelope("DT", ORDERS.schema_id, None, body, magic=b"atMSX"),
        avro_envelope("XX", ORDERS.schema_id, None, body),
        avro_envelope("MD", None, None, b"\x00"),
        avro_envelope("MD", None, "{not json", b"\x00"),
        avro_envelope("MD", None, md_schema, b"\x02\x41"),
        avro_envelope("MD", None, md_schema, _avro(metadata_schema(ORDERS), no_data_schema)),
        md,
        avro_envelope("DT", None, None, body),
        avro_envelope("DT", ORDERS.schema_id, None, body[: len(body) // 2]),
        avro_envelope("DT", ORDERS.schema_id, None, body + b"\x00\x01"),
        md + b"\x07",
        ok,
    ]


def case_files() -> dict[Path, bytes]:
    """Every generated case file (path → content)."""
    files: dict[Path, bytes] = {}
    for name, items in SCENARIOS.items():
        files[DATA / "qlik-json" / f"{name}.txt"] = b"".join(json_message(i) + b"\n" for i in items)
        files[DATA / "qlik-avro" / f"{name}.txt"] = b"".join(
            base64.b64encode(avro_message(i)) + b"\n" for i in items
        )
        if name in SCENARIO_OPTIONS:
            opts = orjson.dumps(SCENARIO_OPTIONS[name]) + b"\n"
            files[DATA / "qlik-json" / f"{name}.options.json"] = opts
            files[DATA / "qlik-avro" / f"{name}.options.json"] = opts
    files[DATA / "qlik-json" / "bad-input.txt"] = b"".join(line + b"\n" for line in _json_bad_lines())
    files[DATA / "qlik-avro" / "bad-input.txt"] = b"".join(
        base64.b64encode(b) + b"\n" for b in _avro_bad_lines()
    )
    if SHARED.joinpath(*VECTORS).exists():  # else that one file is neither written nor checked
        vectors = [
            orjson.loads(SHARED.joinpath(*VECTORS, f"jcustenborder-attunity-json-converter-{n}.json").read_bytes())
            for n in ("Metadata", "Data")
        ]
        files[DATA / "qlik-json" / "vectors-metadata-then-data.txt"] = b"".join(
            orjson.dumps(v) + b"\n" for v in vectors
        )
    return files


def write_case_files() -> None:
    for path, content in case_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        print(f"wrote {path.relative_to(DATA)}")


# ============================================================================ helpers


def _decoder(
    fmt: str = "qlik-json",
    store: InMemoryMetadataStore | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    return create_decoder(fmt, options, store)


def _encode(fmt: str, item: Table | Change) -> bytes:
    return json_message(item) if fmt == "qlik-json" else avro_message(item)


def _decode(decoder: Any, item: Table | Change | bytes) -> list[Any]:
    raw = item if isinstance(item, bytes) else _encode(decoder.format_id, item)
    return decoder.decode(Message(raw))


def _change(decoder: Any, item: Table | Change) -> ChangeEvent:
    events = _decode(decoder, item)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent), events
    return events[0]


FORMATS = ["qlik-json", "qlik-avro"]

# ============================================================================ masks


def test_mask_bit_order_documented_example() -> None:
    # Replicate's documentation: mask 0B = 1011 binary = ordinals 1, 2 and 4
    assert ColumnMask.parse("0B").ordinals() == (1, 2, 4)
    assert ColumnMask.parse("B").ordinals() == (1, 2, 4)
    assert ColumnMask.parse(b"\x0b").ordinals() == (1, 2, 4)


def test_mask_bit_order_multi_byte() -> None:
    # the last byte holds ordinals 1..8; the byte before it 9..16 (16-column table, 8th and 16th changed)
    m = ColumnMask.parse("008080")
    assert m.ordinals() == (8, 16)
    assert m.text == "008080"
    assert ColumnMask.parse("00FFFF").ordinals() == tuple(range(1, 17))
    assert ColumnMask.parse("0100").ordinals() == (9,)
    assert ColumnMask.parse(bytes([0x01, 0x00])).ordinals() == (9,)
    assert not m.has(0) and not m.has(24) and m.has(16)


def test_mask_generator_agrees_with_decoder() -> None:
    raw = mask(ALL_TYPES, ("K1", "C_INT1", "C_DATETIME6"))
    assert ColumnMask.parse(raw).ordinals() == (1, 3, 18)
    assert ColumnMask.parse(raw.hex()).ordinals() == (1, 3, 18)


def test_mask_rejects_non_hex() -> None:
    with pytest.raises(ValueError):
        ColumnMask.parse("XYZ")


# ============================================================================ metadata


def test_vector_metadata_registers_a_json_document() -> None:
    store = InMemoryMetadataStore()
    decoder = _decoder(store=store)
    raw = shared_path(*VECTORS, "jcustenborder-attunity-json-converter-Metadata.json").read_bytes()
    events = decoder.decode(Message(raw))
    assert len(events) == 1 and isinstance(events[0], SchemaChangeEvent)
    change = events[0]
    assert (change.db, change.schema, change.table, change.change_type) == (
        None,
        "employees",
        "salaries",
        "CREATE",
    )
    assert change.new_table is not None
    assert change.new_table.key == ("emp_no", "from_date")  # by primaryKeyPosition
    assert tuple(c.name for c in change.new_table.columns) == ("emp_no", "salary", "from_date", "to_date")
    assert change.source.ts_ms == 1523650438289  # lineage timestamp, UTC
    doc = store.get(SCHEMA_NAMESPACE, "8FB9D3C10EA4B25751DF9CC8318F0A02")
    assert doc is not None
    assert orjson.loads(orjson.dumps(doc)) == doc  # JSON-compatible
    meta = parse_metadata(doc, "stored", lambda f, r: DecodeError("qlik-json", f, r))
    assert meta.table_version == 1 and meta.task == "mysql-to-kafka"
    assert meta.data_schema is not None and "DataRecord" in meta.data_schema
    version = store.get(
        VERSION_NAMESPACE, orjson.dumps([meta.server, meta.task, "employees", "salaries"]).decode()
    )
    assert version == {"tableVersion": 1, "schemaId": "8FB9D3C10EA4B25751DF9CC8318F0A02"}


def test_vector_data_after_metadata() -> None:
    decoder = _decoder()
    metadata = shared_path(*VECTORS, "jcustenborder-attunity-json-converter-Metadata.json").read_bytes()
    data = shared_path(*VECTORS, "jcustenborder-attunity-json-converter-Data.json").read_bytes()
    decoder.decode(Message(metadata))
    [event] = decoder.decode(Message(data))
    assert isinstance(event, ChangeEvent)
    assert event.op is Operation.READ and event.source.snapshot is SnapshotMarker.TRUE
    assert event.before is None
    assert event.after == {
        "emp_no": 14472,
        "salary": 49592,
        "from_date": dt.date(1993, 11, 25),
        "to_date": dt.date(1994, 11, 25),
    }
    assert event.source.sequence is None and event.source.ts_ms is None and event.transaction is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_metadata_shared_through_the_store_between_replicas(fmt: str) -> None:
    store = InMemoryMetadataStore()
    _decode(_decoder(fmt, store), ORDERS)
    other = _decoder(fmt, store)  # another replica: learns the table from the store only
    event = _change(other, _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL))
    assert event.after == _ORDER_1


def test_json_and_avro_share_the_registry() -> None:
    store = InMemoryMetadataStore()
    _decode(_decoder("qlik-avro", store), ORDERS)
    event = _change(_decoder("qlik-json", store), _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL))
    assert event.after == _ORDER_1


@pytest.mark.parametrize("fmt", FORMATS)
def test_table_version_bump_gives_one_schema_change(fmt: str) -> None:
    decoder = _decoder(fmt)
    [first] = _decode(decoder, ORDERS)
    assert isinstance(first, SchemaChangeEvent) and first.change_type == "CREATE"
    assert _decode(decoder, ORDERS) == []  # same version again
    [bump] = _decode(decoder, ORDERS_V2)
    assert isinstance(bump, SchemaChangeEvent) and bump.change_type == "ALTER"
    assert bump.new_table is not None and bump.new_table.columns[-1].name == "DISCOUNT"
    assert bump.source.fields["table_version"] == 2
    assert _decode(decoder, ORDERS_V2) == []
    assert _decode(decoder, ORDERS) == []  # an older version is registered but is no change
    old = _change(decoder, _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL))
    new = _change(
        decoder,
        _cdc(ORDERS_V2, "INSERT", 2, {**_ORDER_1, "DISCOUNT": None}, changed=_ALL, present=ORDERS_V2.names),
    )
    assert "DISCOUNT" not in old.after and new.after["DISCOUNT"] is None  # type: ignore[operator,index]
    assert old.source.fields["table_version"] == 1 and new.source.fields["table_version"] == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_schema_id_is_a_typed_error(fmt: str) -> None:
    decoder = _decoder(fmt)
    with pytest.raises(UnknownSchemaError) as info:
        _decode(decoder, _cdc(ORDERS, "INSERT", 1, _ORDER_1))
    err = info.value
    assert isinstance(err, DecodeError)
    assert err.format_id == fmt and err.field == "messageSchemaId"
    assert ORDERS.schema_id in str(err) and err.preview


def test_avro_data_needs_a_registered_data_schema() -> None:
    store = InMemoryMetadataStore()
    doc = orjson.loads(json_message(ORDERS))
    doc["message"]["dataSchema"] = None
    _decoder("qlik-json", store).decode(Message(orjson.dumps(doc)))
    with pytest.raises(UnknownSchemaError, match="dataSchema"):
        _decode(_decoder("qlik-avro", store), _cdc(ORDERS, "INSERT", 1, _ORDER_1))


# ============================================================================ data


@pytest.mark.parametrize("fmt", FORMATS)
def test_operations_images_and_source(fmt: str) -> None:
    decoder = _decoder(fmt)
    _decode(decoder, ORDERS)
    refresh = _change(decoder, Change(ORDERS, "REFRESH", _ORDER_2))
    assert refresh.op is Operation.READ and refresh.source.snapshot is SnapshotMarker.TRUE
    assert refresh.before is None and refresh.after == _ORDER_2

    update = _change(
        decoder,
        _cdc(
            ORDERS,
            "UPDATE",
            2,
            _ORDER_1B,
            before=_ORDER_1,
            tx="T1",
            counter=2,
            last=True,
            changed=("QTY", "UPDATED"),
        ),
    )
    assert update.op is Operation.UPDATE and update.source.snapshot is SnapshotMarker.FALSE
    assert update.before == _ORDER_1 and update.after == _ORDER_1B
    src = update.source
    assert src.sequence == _seq(2) == src.fields["change_seq"]
    assert src.ts_ms == 1709633732002  # 2024-03-05T10:15:32.002 UTC
    assert src.fields["stream_position"].startswith("00000000.01ab0002")
    assert src.fields["change_mask"] == "0044" and src.fields["changed_columns"] == "QTY,UPDATED"
    assert src.fields["column_mask"] == "01FF"
    assert src.fields["transaction_id"] == "T1"
    assert src.fields["transaction_event_counter"] == 2 and src.fields["transaction_last_event"] is True
    assert update.transaction is not None
    assert (
        update.transaction.id,
        update.transaction.total_order,
        update.transaction.data_collection_order,
    ) == ("T1", 2, 2)

    delete = _change(decoder, _cdc(ORDERS, "DELETE", 3, _ORDER_2, changed=("ID",)))
    assert delete.op is Operation.DELETE and delete.after is None and delete.before == _ORDER_2

    insert = _change(decoder, _cdc(ORDERS, "INSERT", 4, _ORDER_1, changed=_ALL))
    assert insert.op is Operation.CREATE and insert.before is None and insert.after == _ORDER_1
    assert insert.table.key == ("ID",)


def test_delete_with_the_row_in_before_data() -> None:
    decoder = _decoder()
    _decode(decoder, ORDERS)
    doc = orjson.loads(json_message(_cdc(ORDERS, "DELETE", 3, _ORDER_2, changed=("ID",))))
    doc["message"]["beforeData"], doc["message"]["data"] = doc["message"]["data"], None
    [event] = decoder.decode(Message(orjson.dumps(doc)))
    assert event.op is Operation.DELETE and event.before == _ORDER_2 and event.after is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_masked_out_columns_are_unavailable_not_null(fmt: str) -> None:
    decoder = _decoder(fmt)
    _decode(decoder, ORDERS)
    event = _change(decoder, _cdc(ORDERS, "INSERT", 7, {"ID": 3, "CODE": None}, present=("ID", "CODE")))
    assert event.after is not None
    assert event.after["ID"] == 3 and event.after["CODE"] is None  # present NULL stays null
    for name in ORDERS.names[2:]:
        assert event.after[name] == UNAVAILABLE
    records = emit([event], EmitOptions())
    payload = records[0].value["payload"]  # type: ignore[index]
    # QTY is a number: null, named in source.unavailable_after; CODE is a real NULL, not named
    assert payload["after"]["QTY"] is None and payload["after"]["CODE"] is None
    assert "QTY" in payload["source"]["unavailable_after"]
    assert "CODE" not in payload["source"]["unavailable_after"]
    assert payload["source"]["unavailable_before"] is None


def test_json_column_missing_from_image_is_unavailable() -> None:
    decoder = _decoder()
    _decode(decoder, ORDERS)
    doc = orjson.loads(json_message(Change(ORDERS, "REFRESH", _ORDER_2)))
    del doc["message"]["data"]["NOTE"]
    [event] = decoder.decode(Message(orjson.dumps(doc)))
    assert event.after["NOTE"] == UNAVAILABLE and event.after["UPDATED"] is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_transaction_end_events_are_optional(fmt: str) -> None:
    tx = "00000000000000000000000000120001"
    change = _cdc(ORDERS, "INSERT", 2, _ORDER_2, tx=tx, counter=2, last=True, changed=_ALL)
    off = _decoder(fmt)
    _decode(off, ORDERS)
    assert len(_decode(off, change)) == 1
    on = _decoder(fmt, options={"transaction.end.events": True})
    _decode(on, ORDERS)
    first, end = _decode(on, change)
    assert isinstance(first, ChangeEvent) and isinstance(end, TransactionEvent)
    assert end.status is TransactionStatus.END and end.id == tx and end.event_count == 2
    not_last = _cdc(ORDERS, "INSERT", 1, _ORDER_1, tx=tx, counter=1, last=False, changed=_ALL)
    assert len(_decode(on, not_last)) == 1


def test_database_name_option() -> None:
    decoder = _decoder(options={"database.name": "ORCL"})
    [change] = _decode(decoder, ORDERS)
    assert change.db == "ORCL" and change.schema == "INVENTORY"
    event = _change(decoder, Change(ORDERS, "REFRESH", _ORDER_2))
    assert (event.table.db, event.table.schema) == ("ORCL", "INVENTORY")


@pytest.mark.parametrize("fmt", FORMATS)
def test_tombstone_input_is_ignored(fmt: str) -> None:
    assert _decoder(fmt).decode(Message(None)) == []


def test_equal_tables_share_one_schema_object() -> None:
    decoder = _decoder()
    _decode(decoder, ORDERS)
    a = _change(decoder, Change(ORDERS, "REFRESH", _ORDER_2))
    _decode(decoder, replace(ORDERS, schema_id="0" * 32))
    b = _change(decoder, Change(ORDERS, "REFRESH", _ORDER_2, schema_id="0" * 32))
    assert a.table is b.table


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_scenario_same_events_in_json_and_avro(fmt: str) -> None:
    other = "qlik-avro" if fmt == "qlik-json" else "qlik-json"
    a, b = _decoder(fmt), _decoder(other)
    for item in SCENARIOS["cdc-stream"] + SCENARIOS["types"]:
        ea, eb = _decode(a, item), _decode(b, item)
        assert [replace(e, source=replace(e.source, connector="x")) for e in ea] == [
            replace(e, source=replace(e.source, connector="x")) for e in eb
        ]


# ============================================================================ types


def test_type_mapping() -> None:
    def col(kind: str, **kw: Any) -> Any:
        return connect_column(QlikColumn("c", 1, kind, **kw))

    assert [col(k).type for k in ("INT1", "INT2", "INT4", "INT8")] == [
        ConnectType.INT8,
        ConnectType.INT16,
        ConnectType.INT32,
        ConnectType.INT64,
    ]
    assert [col(k).type for k in ("UINT1", "UINT2", "UINT4", "UINT8")] == [
        ConnectType.INT16,
        ConnectType.INT32,
        ConnectType.INT64,
        ConnectType.INT64,
    ]
    numeric = col("NUMERIC", precision=10, scale=2)
    assert numeric.logical == Logical.DECIMAL and (numeric.precision, numeric.scale) == (10, 2)
    assert numeric.source_type == "NUMERIC(10,2)"
    assert col("NUMERIC").logical == Logical.VARIABLE_SCALE_DECIMAL
    assert col("REAL4").type is ConnectType.FLOAT32 and col("REAL8").type is ConnectType.FLOAT64
    for kind in ("STRING", "WSTRING", "CLOB", "NCLOB"):
        assert col(kind).type is ConnectType.STRING and col(kind).logical is None
    assert col("STRING", length=20).source_type == "STRING(20)"
    for kind in ("BLOB", "BYTES"):
        assert col(kind).type is ConnectType.BYTES
    assert (col("DATE").type, col("DATE").logical) == (ConnectType.INT32, Logical.DATE)
    assert (col("TIME").type, col("TIME").logical) == (ConnectType.INT64, Logical.MICRO_TIME)
    assert col("DATETIME", scale=0).logical == Logical.TIMESTAMP
    assert col("DATETIME", scale=3).logical == Logical.TIMESTAMP
    assert col("DATETIME", scale=6).logical == Logical.MICRO_TIMESTAMP
    assert col("DATETIME", scale=9).source_type == "DATETIME(9)"
    assert col("BOOLEAN").type is ConnectType.BOOLEAN
    assert col("SOMETHING_NEW").type is ConnectType.STRING
    # NOT NULL is required in Connect only for key columns: a mask may leave any other column out
    assert col("INT4", nullable=False, primary_key_position=1).optional is False
    assert col("INT4", nullable=False).optional is True


@pytest.mark.parametrize("fmt", FORMATS)
def test_typed_values(fmt: str) -> None:
    decoder = _decoder(fmt)
    _decode(decoder, ALL_TYPES)
    event = _change(decoder, SCENARIOS["types"][1])
    after = event.after
    assert after is not None
    assert event.table.key == ("K2", "K1")  # primaryKeyPosition order
    assert after["K1"] == 9007199254740993 and isinstance(after["K1"], int)
    assert after["C_UINT8"] == 9223372036854775807
    assert after["C_NUMERIC"] == Decimal("-123456789.125")
    assert after["C_REAL4"] == 1.5 and after["C_REAL8"] == 2.0000000001
    assert after["C_BYTES"] == b"\x00\xff\x10"
    assert after["C_TIME"] == dt.timedelta(hours=23, minutes=59, seconds=58, microseconds=250000)
    assert after["C_DATETIME3"] == dt.datetime(1999, 12, 31, 23, 59, 59, 999000)
    assert after["C_DATETIME6"] == dt.datetime(1969, 7, 20, 20, 17, 40, 1)
    assert after["C_DATETIME6"].tzinfo is None
    value = emit([event], EmitOptions())[0].value["payload"]["after"]  # type: ignore[index]
    assert value["K1"] == 9007199254740993  # a JSON number
    assert value["C_DATETIME3"] == 946684799999  # ms
    assert value["C_DATETIME6"] == -14182940000000 + 1  # µs before the epoch
    assert value["C_TIME"] == 86398250000


# ============================================================================ bad input


def _bad(decoder: Any, raw: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decoder.decode(Message(raw))
    err = info.value
    assert err.format_id == decoder.format_id
    assert err.preview  # a payload preview for the DLQ
    return err


@pytest.mark.parametrize(
    ("index", "field", "reason"),
    [
        (0, None, "invalid JSON"),
        (1, None, "expected a JSON object"),
        (2, "magic", "atMSX"),
        (3, "type", "'XX'"),
        (4, "message.lineage", "expected an object"),
        (5, "message.tableStructure.tableColumns.QTY.ordinal", "expected an integer"),
        (6, "message.lineage.table", "non-empty string"),
        (8, "message.headers.operation", "MERGE"),
        (9, "message.headers", "expected an object"),
        (10, "message.data", "expected an object or null"),
        (11, "message.data", "needs the row"),
        (12, "message.data.QTY", "integer"),
        (13, "message.data.PHOTO", "hex"),
        (14, "message.data.SURPRISE", "column not in table INVENTORY.ORDERS version 1"),
        (15, "message.headers.columnMask", "hex"),
        (16, "message.headers.timestamp", "yesterday"),
        (17, "message.headers.transactionEventCounter", "first"),
        (18, "messageSchemaId", "metadata messages"),
        (19, "message", "expected an object"),
    ],
)
def test_json_bad_input(index: int, field: str | None, reason: str) -> None:
    lines = _json_bad_lines()
    decoder = _decoder()
    _decode(decoder, ORDERS)
    err = _bad(decoder, lines[index])
    assert err.field == field and reason in str(err)
    assert not isinstance(err, UnknownSchemaError)
    assert len(decoder.decode(Message(lines[-1]))) == 1  # the decoder still works


@pytest.mark.parametrize(
    ("index", "field", "reason"),
    [
        (0, "envelope", "invalid Avro data"),
        (1, "envelope", "invalid Avro data"),
        (2, "magic", "atMSX"),
        (3, "type", "'XX'"),
        (4, "messageSchema", "expected an Avro schema"),
        (5, "messageSchema", "invalid Avro schema"),
        (6, "message", "invalid Avro data"),
        (7, "message.dataSchema", "invalid Avro schema"),
        (9, "messageSchemaId", "metadata messages"),
        (10, "message", "invalid Avro data"),
        (11, "message", "trailing bytes"),
        (12, "envelope", "trailing bytes"),
    ],
)
def test_avro_bad_input(index: int, field: str, reason: str) -> None:
    lines = _avro_bad_lines()
    decoder = _decoder("qlik-avro")
    _decode(decoder, ORDERS)
    err = _bad(decoder, lines[index])
    assert err.field == field and reason in str(err)
    assert len(decoder.decode(Message(lines[-1]))) == 1


def test_bad_metadata_stores_nothing() -> None:
    store = InMemoryMetadataStore()
    decoder = _decoder(store=store)
    doc = orjson.loads(json_message(ORDERS))
    doc["message"]["lineage"]["timestamp"] = "not a time"
    _bad(decoder, orjson.dumps(doc))
    assert store.get(SCHEMA_NAMESPACE, ORDERS.schema_id) is None


def test_duplicate_ordinals_are_rejected() -> None:
    doc = orjson.loads(json_message(ORDERS))
    doc["message"]["tableStructure"]["tableColumns"]["QTY"]["ordinal"] = 2
    err = _bad(_decoder(), orjson.dumps(doc))
    assert err.field == "message.tableStructure.tableColumns" and "share ordinal 2" in str(err)


def test_corrupt_store_document_is_a_decode_error() -> None:
    store = InMemoryMetadataStore()
    store.put(SCHEMA_NAMESPACE, ORDERS.schema_id, {"schemaId": ORDERS.schema_id})
    err = _bad(_decoder(store=store), json_message(_cdc(ORDERS, "INSERT", 1, _ORDER_1)))
    assert err.field is not None and err.field.startswith(f"{SCHEMA_NAMESPACE}/{ORDERS.schema_id}")


# ============================================================================ generated files


def test_generated_case_files_are_current() -> None:
    for path, content in case_files().items():
        assert path.exists(), f"{path} missing: run python -m tests.formats.test_qlik"
        assert path.read_bytes() == content, f"{path} differs from the generator"


# ============================================================================ property

_PROPERTY_COLUMNS = (
    Col("ID", "INT8", pk=1, nullable=False),
    Col("N4", "INT4"),
    Col("TXT", "WSTRING", length=50),
    Col("AMOUNT", "NUMERIC", precision=12, scale=2),
    Col("FLAG", "BOOLEAN"),
    Col("DAY", "DATE"),
    Col("AT", "DATETIME", scale=6),
    Col("RAW", "BLOB"),
    Col("R8", "REAL8"),
)
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "ID": st.integers(-(2**63), 2**63 - 1),
    "N4": st.integers(-(2**31), 2**31 - 1),
    "TXT": st.text(max_size=20),
    "AMOUNT": st.decimals(
        min_value=-(10**9), max_value=10**9, places=2, allow_nan=False, allow_infinity=False
    ),
    "FLAG": st.booleans(),
    "DAY": st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)),
    "AT": st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31)),
    "RAW": st.binary(max_size=16),
    "R8": st.floats(allow_nan=False, allow_infinity=False),
}


def _rows(draw: Any) -> dict[str, Any]:
    row = {}
    for c in _PROPERTY_COLUMNS:
        strategy = _VALUES[c.name] if not c.nullable else st.none() | _VALUES[c.name]
        row[c.name] = draw(strategy)
    return row


@st.composite
def _changes(draw: Any) -> tuple[Table, list[Change]]:
    size = draw(st.integers(1, len(_PROPERTY_COLUMNS)))
    table = Table("AB" * 16, "S", "PROP", draw(st.integers(1, 10**6)), _PROPERTY_COLUMNS[:size])
    changes = []
    for n in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["REFRESH", "INSERT", "UPDATE", "DELETE"]))
        present = tuple(c.name for c in table.columns if c.name == "ID" or draw(st.booleans()))
        before = _rows(draw) if op == "UPDATE" and draw(st.booleans()) else None
        changes.append(
            Change(
                table,
                op,
                _rows(draw),
                before=before,
                seq=_seq(n),
                tx=draw(st.sampled_from(["", "TX1", "TX2"])),
                counter=n + 1,
                present=present if draw(st.booleans()) else None,
            )
        )
    return table, changes


_OPS = {
    "REFRESH": Operation.READ,
    "INSERT": Operation.CREATE,
    "UPDATE": Operation.UPDATE,
    "DELETE": Operation.DELETE,
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_changes())
def test_property_json_round_trip(connect_checker: Any, case: tuple[Table, list[Change]]) -> None:
    table, changes = case
    decoder = _decoder()
    [schema_change] = decoder.decode(Message(json_message(table)))
    assert isinstance(schema_change, SchemaChangeEvent)
    decoded: list[Any] = [schema_change]
    for ch in changes:
        [event] = decoder.decode(Message(json_message(ch)))
        assert isinstance(event, ChangeEvent)
        decoded.append(event)
        assert event.op is _OPS[ch.op]
        assert event.source.snapshot is (SnapshotMarker.TRUE if ch.op == "REFRESH" else SnapshotMarker.FALSE)
        image = event.before if ch.op == "DELETE" else event.after
        other = event.after if ch.op == "DELETE" else event.before
        assert image is not None
        for c in table.columns:
            got = image[c.name]
            if ch.present is not None and c.name not in ch.present:
                assert got == UNAVAILABLE  # masked out: never None
            else:
                assert got == ch.data[c.name]  # type: ignore[index]
        if ch.op == "UPDATE" and ch.before is not None:
            assert other is not None
            for c in table.columns:
                absent = ch.present is not None and c.name not in ch.present
                assert other[c.name] == (UNAVAILABLE if absent else ch.before[c.name])
        else:
            assert other is None
        assert event.source.sequence == ch.seq
        assert (event.transaction.id if event.transaction else "") == ch.tx
    # every decoded event serializes to records the real Kafka Connect runtime accepts
    assert_connect_accepts(connect_checker, emit(decoded, EmitOptions()))


if __name__ == "__main__":  # pragma: no cover - regenerates the case files
    write_case_files()
    sys.exit(0)
