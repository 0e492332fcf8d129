"""The sink reads every output converter of the worker (sink.changes.RecordParser).

A record written as Avro (through the mock registry) or as JSON with schemas parses to the same
change; JSON without schemas parses to the same rows and keys, typed by inference.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from service.converters import OutputConfig, SchemaRegistryUnavailable, build_converter
from sink.changes import ChangeParseError, RecordParser, SinkChange, parse_record
from sink.config import SinkConfig
from tests.compat.records import golden_records
from tests.goldens import Case, cases
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, OutRecord, SourceInfo, emit

CASES = cases()


def _converted(records: list[OutRecord], output: dict[str, Any], client: Any = None) -> list[OutRecord]:
    converter = build_converter(OutputConfig.model_validate(output), client)
    assert converter is not None
    return converter.convert(records)


def _parse(parser: RecordParser, records: list[OutRecord]) -> list[SinkChange | None]:
    return [parser.parse(r.topic, 0, offset, r.key_bytes(), r.value_bytes()) for offset, r in enumerate(records)]


def _json_changes(records: list[OutRecord]) -> list[SinkChange | None]:
    out = []
    for offset, r in enumerate(records):
        try:
            out.append(parse_record(r.topic, 0, offset, r.key_bytes(), r.value_bytes()))
        except ChangeParseError:
            out.append(None)
    return out


@pytest.mark.parametrize("case", CASES, ids=str)
def test_avro_records_parse_like_json_ones(case: Case) -> None:
    records = golden_records(case)
    client = SchemaRegistryClient.new_client({"url": "mock://sink"})
    try:
        avro = _converted(records, {"format": "avro", "schema_registry": {"url": "mock://sink"}}, client)
    except Exception as exc:  # the golden table Avro cannot name (see tests/service/test_converters.py)
        assert "Can't redefine" in str(exc)
        return
    parser = RecordParser(client)
    want = _json_changes(records)
    for offset, (record, expected) in enumerate(zip(avro, want, strict=True)):
        try:
            got = parser.parse(record.topic, 0, offset, record.key_bytes(), record.value_bytes())
        except ChangeParseError:
            got = None
        assert got == expected, f"record {offset} of {case}"


ORDERS = TableSchema(
    "shop",
    None,
    "orders",
    (
        Column("id", ConnectType.INT64, False),
        Column("customer", ConnectType.STRING),
        Column("qty", ConnectType.INT32),
        Column("price", ConnectType.FLOAT64),
        Column("paid", ConnectType.BOOLEAN),
    ),
    ("id",),
)


def _events() -> list[ChangeEvent]:
    source = SourceInfo("canal-json", 1_700_000_000_000, sequence="0001")
    rows = [{"id": i, "customer": f"c{i}", "qty": i * 2, "price": i + 0.5, "paid": i % 2 == 0} for i in range(1, 4)]
    events = [ChangeEvent(Operation.CREATE, ORDERS, None, row, source) for row in rows]
    events.append(ChangeEvent(Operation.UPDATE, ORDERS, rows[0], {**rows[0], "qty": 99, "customer": None}, source))
    events.append(ChangeEvent(Operation.DELETE, ORDERS, rows[1], None, source))
    return events


def test_schemaless_json_parses_to_the_same_rows_and_keys() -> None:
    records = emit(_events(), EmitOptions())
    schemaless = _converted(records, {"schemas.enable": False})
    assert all("payload" not in orjson.loads(r.value_bytes()) for r in schemaless if r.value_bytes() is not None)
    parser = RecordParser()
    want = [c for c in _json_changes(records) if c is not None]
    got = [c for c in _parse(parser, schemaless) if c is not None]
    assert [(c.table, c.op, c.key, c.row, c.seq, c.key_columns) for c in got] == [
        (c.table, c.op, c.key, c.row, c.seq, c.key_columns) for c in want
    ]
    types = {c.name: c.sql_type for c in got[-1].columns}
    assert types["id"] == "bigint" and types["qty"] == "bigint"  # inferred: JSON has no int32
    assert types["price"] == "double" and types["paid"] == "boolean" and types["customer"] == "string"


def test_schemaless_types_stay_stable_per_table() -> None:
    """A column first seen as an int and then with a fraction widens to double, and stays there."""
    parser = RecordParser()
    table = TableSchema("shop", None, "w", (Column("id", ConnectType.INT64, False), Column("n", ConnectType.FLOAT64)), ("id",))
    source = SourceInfo("canal-json", 1)
    values = [1.0, 2.5, 3.0]
    records = emit([ChangeEvent(Operation.CREATE, table, None, {"id": i, "n": v}, source) for i, v in enumerate(values)], EmitOptions())
    changes = _parse(parser, _converted(records, {"schemas.enable": False}))
    kinds = [next(c.sql_type for c in ch.columns if c.name == "n") for ch in changes if ch is not None]
    assert kinds == ["double", "double", "double"]


def test_schemaless_keyless_table_is_append_only() -> None:
    table = TableSchema("shop", None, "log", (Column("msg", ConnectType.STRING),), ())
    records = emit([ChangeEvent(Operation.CREATE, table, None, {"msg": "hi"}, SourceInfo("canal-json", 1))], EmitOptions())
    (change,) = _parse(RecordParser(), _converted(records, {"schemas.enable": False}))
    assert change is not None and change.key is None and change.row == {"msg": "hi"}


def test_json_with_a_null_schema_reads_as_schemaless() -> None:
    records = emit(_events()[:1], EmitOptions())
    record = records[0]
    assert record.value is not None and record.key is not None
    value = orjson.dumps({"schema": None, "payload": record.value["payload"]})
    key = orjson.dumps({"schema": None, "payload": record.key["payload"]})
    change = parse_record(record.topic, 0, 0, key, value)
    assert change is not None and change.key == (1,) and change.row is not None and change.row["customer"] == "c1"


def test_avro_decimals_dates_and_bytes_reach_the_sink_typed() -> None:
    table = TableSchema(
        "shop",
        None,
        "typed",
        (
            Column("id", ConnectType.INT64, False),
            Column.decimal("amount", 10, 2),
            Column("day", ConnectType.INT32, logical="io.debezium.time.Date"),
            Column("blob", ConnectType.BYTES),
            Column("f", ConnectType.FLOAT32),
        ),
        ("id",),
    )
    row = {"id": 1, "amount": Decimal("-12.30"), "day": dt.date(2024, 1, 2), "blob": b"\x00\xff", "f": 1.1}
    records = emit([ChangeEvent(Operation.CREATE, table, None, row, SourceInfo("canal-json", 1))], EmitOptions())
    client = SchemaRegistryClient.new_client({"url": "mock://typed"})
    (avro,) = _converted(records, {"format": "avro", "schema_registry": {"url": "mock://typed"}}, client)
    change = RecordParser(client).parse(avro.topic, 0, 0, avro.key_bytes(), avro.value_bytes())
    assert change == parse_record(records[0].topic, 0, 0, records[0].key_bytes(), records[0].value_bytes())
    assert change is not None and change.row is not None
    assert change.row["amount"] == Decimal("-12.30") and change.row["blob"] == b"\x00\xff"


def test_avro_without_a_registry_says_which_setting() -> None:
    records = emit(_events()[:1], EmitOptions())
    client = SchemaRegistryClient.new_client({"url": "mock://none"})
    (avro,) = _converted(records, {"format": "avro", "schema_registry": {"url": "mock://none"}}, client)
    with pytest.raises(ChangeParseError, match=r"sink\.schema_registry"):
        parse_record(avro.topic, 0, 0, avro.key_bytes(), avro.value_bytes())


class _DownRegistry:
    def get_schema(self, schema_id: int, *args: Any, **kwargs: Any) -> Any:
        raise SchemaRegistryError(503, 50003, "unavailable")


class _EmptyRegistry:
    def get_schema(self, schema_id: int, *args: Any, **kwargs: Any) -> Any:
        raise SchemaRegistryError(404, 40403, "Schema not found")


def test_avro_registry_outage_stops_the_batch_unknown_schema_skips_the_record() -> None:
    records = emit(_events()[:1], EmitOptions())
    client = SchemaRegistryClient.new_client({"url": "mock://down"})
    (avro,) = _converted(records, {"format": "avro", "schema_registry": {"url": "mock://down"}}, client)
    with pytest.raises(SchemaRegistryUnavailable):  # not a ChangeParseError: the runner must not skip it
        RecordParser(_DownRegistry()).parse(avro.topic, 0, 0, None, avro.value_bytes())
    with pytest.raises(ChangeParseError, match="Schema not found"):
        RecordParser(_EmptyRegistry()).parse(avro.topic, 0, 0, None, avro.value_bytes())


def test_sink_config_takes_a_schema_registry() -> None:
    config = SinkConfig.from_section(
        {"topics": ["t"], "schema_registry": {"url": "mock://sink-config", "username": "u", "password": "p"}}
    )
    assert config.schema_registry is not None
    parser = RecordParser.from_settings(config.schema_registry)
    assert parser._registry is not None
    assert RecordParser.from_settings(None)._registry is None
