"""Pure sink logic: record parsing, type mapping, compaction (no Spark)."""

from __future__ import annotations

import datetime as dt
import decimal
from decimal import Decimal

import orjson
import pytest

from sink.changes import ChangeParseError, compact, parse_record
from sink.types import spark_type, widening
from tests.sink.history import ORDERS, scripted_history
from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders import Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit
from transforms.pipeline import Pipeline
from transforms.values import UNAVAILABLE


def _changes(events, opts=None):
    out = []
    for offset, rec in enumerate(emit(events, opts or EmitOptions())):
        ch = parse_record(rec.topic, 0, offset, rec.key_bytes(), rec.value_bytes())
        if ch is not None:
            out.append(ch)
    return out


ROW = {
    "id": 1,
    "customer": "c",
    "amount": Decimal("12.30"),
    "created": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
    "day": dt.date(2024, 1, 2),
}


def test_parse_maps_envelope_to_typed_row() -> None:
    (change,) = _changes([ChangeEvent(Operation.CREATE, ORDERS, None, ROW, SourceInfo("t", 5, sequence="0009"))])
    assert change.table == ("shop", "orders")
    assert change.op == "c"
    assert change.key == (1,)
    assert change.row == ROW
    assert change.seq == "s0009"
    assert change.ts_ms == 5
    assert [c.sql_type for c in change.columns] == ["bigint", "string", "decimal(10,2)", "timestamp_ntz", "date"]


def test_tombstones_and_non_change_records_are_skipped() -> None:
    assert parse_record("t", 0, 0, b'{"id":1}', None) is None
    assert parse_record("t", 0, 0, None, b'{"schema":null,"payload":{"ddl":"x"}}') is None


def test_bad_records_raise_typed_error() -> None:
    with pytest.raises(ChangeParseError):
        parse_record("t", 0, 0, None, b"{not json")
    with pytest.raises(ChangeParseError, match="unknown op"):
        parse_record("t", 0, 0, None, b'{"payload":{"op":"x","source":{"table":"a"}},"schema":{}}')


def test_delete_uses_before_image_and_placeholder_is_tracked() -> None:
    partial = {**ROW, "customer": UNAVAILABLE}
    changes = _changes(
        [
            ChangeEvent(Operation.UPDATE, ORDERS, ROW, partial, SourceInfo("t", sequence="2")),
            ChangeEvent(Operation.DELETE, ORDERS, ROW, None, SourceInfo("t", sequence="3")),
        ]
    )
    assert changes[0].unavailable == {"customer"}
    assert changes[0].row is not None and changes[0].row["customer"] is None
    assert changes[1].op == "d" and changes[1].row == ROW


def test_typed_absent_columns_are_null_and_listed_and_tracked() -> None:
    partial = {**ROW, "amount": UNAVAILABLE, "day": UNAVAILABLE, "customer": UNAVAILABLE}
    (rec,) = emit([ChangeEvent(Operation.UPDATE, ORDERS, None, partial, SourceInfo("t", sequence="2"))], EmitOptions())
    payload = rec.value["payload"]  # type: ignore[index]
    # a string column holds the placeholder; a decimal and a date cannot: null, named in source
    assert payload["after"]["customer"] == UNAVAILABLE
    assert payload["after"]["amount"] is None and payload["after"]["day"] is None
    assert payload["source"]["unavailable_after"] == ["amount", "day"]
    (change,) = _changes([ChangeEvent(Operation.UPDATE, ORDERS, None, partial, SourceInfo("t", sequence="2"))])
    assert change.unavailable == {"amount", "day", "customer"}


def test_compaction_keeps_last_per_key_in_sequence_order() -> None:
    rows = [{**ROW, "customer": f"v{i}"} for i in range(4)]
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, rows[0], SourceInfo("t", sequence="1")),
        ChangeEvent(Operation.UPDATE, ORDERS, rows[0], rows[2], SourceInfo("t", sequence="3")),
        ChangeEvent(Operation.UPDATE, ORDERS, rows[0], rows[1], SourceInfo("t", sequence="2")),  # out of order
    ]
    batch = compact(_changes(events))[("shop", "orders")]
    (last,) = batch.changes
    assert last.row is not None and last.row["customer"] == "v2"


def test_compaction_folds_partial_image_into_earlier_full_image() -> None:
    full = {**ROW, "customer": "full"}
    partial = {**ROW, "amount": Decimal("1.00"), "customer": UNAVAILABLE}
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, full, SourceInfo("t", sequence="1")),
        ChangeEvent(Operation.UPDATE, ORDERS, full, partial, SourceInfo("t", sequence="2")),
    ]
    (last,) = compact(_changes(events))[("shop", "orders")].changes
    assert last.unavailable == frozenset()
    assert last.row is not None and last.row["customer"] == "full" and last.row["amount"] == Decimal("1.00")
    # the filled value is as new as the change it came from, not as the partial change
    assert last.filled == {"customer": "s1"}


def test_compaction_fill_keeps_the_sequence_of_the_change_that_had_the_value() -> None:
    full = {**ROW, "customer": "full"}
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, full, SourceInfo("t", sequence="1")),
        ChangeEvent(Operation.UPDATE, ORDERS, None, {**ROW, "customer": UNAVAILABLE}, SourceInfo("t", sequence="2")),
        ChangeEvent(Operation.UPDATE, ORDERS, None, {**ROW, "customer": UNAVAILABLE, "day": UNAVAILABLE},
                    SourceInfo("t", sequence="3")),
    ]
    (last,) = compact(_changes(events))[("shop", "orders")].changes
    assert last.row is not None and (last.row["customer"], last.row["day"]) == ("full", ROW["day"])
    assert last.filled == {"customer": "s1", "day": "s2"}


def test_compaction_pk_change_gives_delete_and_insert() -> None:
    moved = {**ROW, "id": 2}
    events = [ChangeEvent(Operation.UPDATE, ORDERS, ROW, moved, SourceInfo("t", sequence="1"))]
    batch = compact(_changes(events))[("shop", "orders")]
    assert sorted((c.key, c.op) for c in batch.changes) == [((1,), "d"), ((2,), "c")]


def test_compaction_truncate_drops_what_came_before() -> None:
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, ROW, SourceInfo("t", sequence="1")),
        ChangeEvent(Operation.TRUNCATE, ORDERS, None, None, SourceInfo("t", sequence="2")),
        ChangeEvent(Operation.CREATE, ORDERS, None, {**ROW, "id": 5}, SourceInfo("t", sequence="3")),
    ]
    batch = compact(_changes(events))[("shop", "orders")]
    assert batch.truncate
    assert [c.key for c in batch.changes] == [(5,)]


def test_offsets_order_changes_without_sequence() -> None:
    events = [
        ChangeEvent(Operation.CREATE, ORDERS, None, ROW, SourceInfo("t")),
        ChangeEvent(Operation.UPDATE, ORDERS, ROW, {**ROW, "customer": "later"}, SourceInfo("t")),
    ]
    (last,) = compact(_changes(events))[("shop", "orders")].changes
    assert last.row is not None and last.row["customer"] == "later"


def test_type_mapping_covers_logical_types() -> None:
    from transforms.connect import DecimalHandlingMode as M
    from transforms.connect import column_schema

    def sql(col: Column) -> str:
        return spark_type(column_schema(col, M.PRECISE))[0]

    assert sql(Column("a", ConnectType.INT16)) == "int"
    assert sql(Column("a", ConnectType.INT64)) == "bigint"
    assert sql(Column.decimal("a", 38, 4)) == "decimal(38,4)"
    assert sql(Column.decimal("a", 50, 4)) == "string"  # beyond Iceberg's 38 digits: the exact text
    assert sql(Column.decimal("a", None, None)) == "string"  # VariableScaleDecimal: the exact text
    assert sql(Column("a", ConnectType.STRING, logical=Logical.ZONED_TIMESTAMP)) == "timestamp"
    assert sql(Column("a", ConnectType.INT64, logical=Logical.NANO_TIMESTAMP)) == "timestamp_ntz"
    assert sql(Column("a", ConnectType.INT64, logical=Logical.MICRO_TIME)) == "bigint"
    assert sql(Column("a", ConnectType.BYTES)) == "binary"
    assert sql(Column("a", ConnectType.STRING, logical=Logical.JSON)) == "string"
    assert widening("int", "bigint") == "bigint"
    assert widening("decimal(10,2)", "decimal(12,3)") is None


def test_scripted_history_compacts_to_expected_state() -> None:
    """Compaction alone (one batch) reproduces the independently computed final state."""
    h = scripted_history(n_keys=10, n_changes=150)
    batches = compact(_changes(h.events))
    got = {}
    for c in batches[("shop", "orders")].changes:
        if c.op != "d":
            got[c.key] = c
    want = h.state["orders"]
    assert set(got) == set(want)
    for key, row in want.items():
        change = got[key]
        assert change.row is not None
        # a column still absent after folding (no full image earlier in the batch) is left to the table
        known = [k for k in row if k not in change.unavailable]
        assert {k: change.row.get(k) for k in known} == {k: row[k] for k in known}


# MySQL's widest DECIMAL is DECIMAL(65,30); Python's default decimal context has 28 digits
WIDE_DECIMALS = [
    (40, 3, "123456789876543212345678987654321.110"),
    (40, 3, "-999999999999999999999999999999999999.999"),
    (65, 30, "12345678901234567890123456789012345.123456789012345678901234567890"),
    (65, 30, "-99999999999999999999999999999999999.999999999999999999999999999999"),
    (65, 30, "0.000000000000000000000000000001"),
    (65, 0, "99999999999999999999999999999999999999999999999999999999999999999"),
    (65, 0, "-18446744073709551615"),
]


@pytest.mark.parametrize("precision, scale, text", WIDE_DECIMALS)
def test_wide_decimals_round_trip_exactly_through_emit_json_and_parse(
    precision: int, scale: int, text: str
) -> None:
    """Every digit survives emit (Connect Decimal bytes) -> JSON -> the sink's decoder; beyond 38
    digits (Iceberg's limit) and for a VariableScaleDecimal, as the exact text of a string column."""
    context_before = decimal.getcontext().prec
    table = TableSchema(
        "shop",
        None,
        "wide",
        (
            Column("id", ConnectType.INT64, False),
            Column.decimal("d", precision, scale),
            Column.decimal("v", None, None),  # VariableScaleDecimal: any scale, any number of digits
        ),
        ("id",),
    )
    value = Decimal(text)
    row = {"id": 1, "d": value, "v": value}
    (change,) = _changes([ChangeEvent(Operation.CREATE, table, None, row, SourceInfo("t", sequence="1"))])
    assert change.row is not None
    sql = {c.name: c.sql_type for c in change.columns}
    assert sql["d"] == ("string" if precision > 38 else f"decimal({precision},{scale})")
    assert sql["v"] == "string"
    if precision > 38:
        assert change.row["d"] == text
    else:
        assert change.row["d"] == value and change.row["d"].as_tuple().exponent == -scale
    assert change.row["v"] == text
    assert decimal.getcontext().prec == context_before  # no change of the global context


def test_wide_decimal_from_canal_reaches_the_sink_exactly() -> None:
    """The issue's case: a MySQL DECIMAL(40,3) from Canal kept exact through to the sink."""
    doc = {
        "database": "shop",
        "table": "wide",
        "type": "INSERT",
        "mysqlType": {"id": "int(11)", "d": "decimal(40,3)", "e": "decimal(65,30)"},
        "pkNames": ["id"],
        "data": [
            {
                "id": "1",
                "d": "123456789876543212345678987654321.110",
                "e": "12345678901234567890123456789012345.123456789012345678901234567890",
            }
        ],
    }
    pipeline = Pipeline(create_decoder("canal-json"), EmitOptions())
    (rec,) = pipeline.process(Message(orjson.dumps(doc)))
    change = parse_record(rec.topic, 0, 0, rec.key_bytes(), rec.value_bytes())
    assert change is not None and change.row is not None
    assert str(change.row["d"]) == "123456789876543212345678987654321.110"
    assert str(change.row["e"]) == "12345678901234567890123456789012345.123456789012345678901234567890"


def test_a_batch_leaves_out_changes_older_than_the_last_truncate() -> None:
    from sink.changes import SinkChange, TableBatch
    from sink.merge import after_truncate

    def change(seq: str, op: str = "u") -> SinkChange:
        return SinkChange(("db", "t"), Operation(op), (seq,), {"k": seq}, seq, None, (), ("k",), "t", 0, 0)

    batch = TableBatch(("db", "t"), changes=[change("s0003"), change("s0005"), change("s0002", "d"), change("k0001:5")],
                       appends=[change("s0001", "c")])
    kept = after_truncate(batch, "s0004")
    assert [c.seq for c in kept.changes] == ["s0005", "s0002", "k0001:5"]  # deletes and partition positions stay
    assert kept.appends == []
    assert after_truncate(batch, "k0000:00000000000000000009") is batch  # a position orders nothing across partitions
