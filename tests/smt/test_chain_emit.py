"""End to end: a route + mask + unwrap chain, then the emitter, gives Debezium's flat JSON."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Event, Operation, SourceInfo, emit
from transforms.smt import build_chain
from transforms.values import UNAVAILABLE

CUSTOMERS = TableSchema(
    "shop",
    None,
    "customers",
    (
        Column("id", ConnectType.INT64, False),
        Column("email", ConnectType.STRING),
        Column.decimal("balance", 10, 2),
        Column("created", ConnectType.INT64, logical=Logical.TIMESTAMP),
    ),
    ("id",),
)
SOURCE = SourceInfo("canal-json", ts_ms=1_700_000_000_000, fields={"file": "bin.001", "pos": 4})
CREATED = dt.datetime(2024, 1, 2, 3, 4, 5)
OPTS = EmitOptions(prefix="shop")

CHAIN: list[dict[str, Any]] = [
    {"type": "route", "regex": r"shop\.shop\.(.*)", "replacement": "clean.$1"},
    {"type": "mask", "fields": "email,balance"},
    {
        "type": "unwrap",
        "delete.tombstone.handling.mode": "rewrite-with-tombstone",
        "add.fields": "op,source.ts_ms",
    },
]

KEY = {
    "schema": {
        "type": "struct",
        "fields": [{"type": "int64", "optional": False, "field": "id"}],
        "optional": False,
        "name": "shop.shop.customers.Key",
    },
    "payload": {"id": 1},
}
VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "email"},
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"connect.decimal.precision": "10", "scale": "2"},
            "field": "balance",
        },
        {
            "type": "int64",
            "optional": True,
            "name": "io.debezium.time.Timestamp",
            "version": 1,
            "field": "created",
        },
        {"type": "string", "optional": True, "field": "__deleted"},
        {"type": "string", "optional": True, "field": "__op"},
        {"type": "int64", "optional": True, "field": "__source_ts_ms"},
    ],
    "optional": True,
    "name": "shop.shop.customers.Value",
}


def _value(payload: dict[str, Any]) -> dict[str, Any]:
    return {"schema": VALUE_SCHEMA, "payload": payload}


def _events() -> list[Event]:
    full = {"id": 1, "email": "a@x.io", "balance": Decimal("12.50"), "created": CREATED}
    partial = {"id": 1, "email": UNAVAILABLE, "balance": Decimal("0.01"), "created": CREATED}
    gone = {"id": 1, "email": "a@x.io", "balance": Decimal("0.01"), "created": None}
    return [
        ChangeEvent(Operation.CREATE, CUSTOMERS, None, full, SOURCE),
        ChangeEvent(Operation.UPDATE, CUSTOMERS, full, partial, SOURCE),
        ChangeEvent(Operation.DELETE, CUSTOMERS, gone, None, SOURCE),
    ]


def test_route_mask_unwrap_emits_debezium_flat_records() -> None:
    events = _events()
    records = emit(build_chain(CHAIN, emit_options=OPTS).apply(events), OPTS)
    lines = [orjson.loads(r.to_json_line()) for r in records]
    assert lines == [
        {
            "topic": "clean.customers",
            "key": KEY,
            "value": _value(
                {
                    "id": 1,
                    "email": "****",
                    "balance": "AA==",
                    "created": 1704164645000,
                    "__op": "c",
                    "__source_ts_ms": 1700000000000,
                    "__deleted": "false",
                }
            ),
        },
        {
            "topic": "clean.customers",
            "key": KEY,
            "value": _value(
                {
                    "id": 1,
                    "email": "__debezium_unavailable_value",
                    "balance": "AA==",
                    "created": 1704164645000,
                    "__op": "u",
                    "__source_ts_ms": 1700000000000,
                    "__deleted": "false",
                }
            ),
        },
        {
            "topic": "clean.customers",
            "key": KEY,
            "value": _value(
                {
                    "id": 1,
                    "email": "****",
                    "balance": "AA==",
                    "created": None,
                    "__op": "d",
                    "__source_ts_ms": 1700000000000,
                    "__deleted": "true",
                }
            ),
        },
        {"topic": "clean.customers", "key": KEY, "value": None},
    ]
    assert events == _events()  # the chain left its inputs alone


def test_route_and_mask_keep_the_envelope() -> None:
    records = emit(
        build_chain(CHAIN[:2], emit_options=OPTS).apply(_events()[1:2]),
        EmitOptions(prefix="shop", schemas=False),
    )
    assert len(records) == 1
    record = records[0]
    assert record.topic == "clean.customers"
    assert record.key == {"id": 1}
    payload = record.value
    assert payload is not None
    assert payload["op"] == "u"
    assert payload["before"] == {"id": 1, "email": "****", "balance": "AA==", "created": 1704164645000}
    assert payload["after"] == {"id": 1, "email": UNAVAILABLE, "balance": "AA==", "created": 1704164645000}
    assert payload["source"]["table"] == "customers" and payload["source"]["pos"] == 4
