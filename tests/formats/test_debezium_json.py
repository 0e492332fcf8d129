"""debezium-json: envelope re-emission, schema typing, keys, flat rows, and bad input."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.connect import ConnectType, DecimalHandlingMode, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_json import position_sequence
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    Operation,
    SchemaChangeEvent,
    SnapshotMarker,
    TransactionEvent,
    emit,
)
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE, unscaled_bytes

FORMAT = "debezium-json"

SOURCE = {
    "version": "1.9.7.Final",
    "connector": "mysql",
    "name": "dbserver1",
    "ts_ms": 1596684883000,
    "snapshot": "false",
    "db": "inventory",
    "sequence": None,
    "table": "products",
    "server_id": 223344,
    "gtid": None,
    "file": "mysql-bin.000003",
    "pos": 1816,
    "row": 2,
    "thread": 7,
    "query": None,
}


def envelope(op: Any = "c", before: Any = None, after: Any = None, **extra: Any) -> dict[str, Any]:
    return {"before": before, "after": after, "source": SOURCE, "op": op, "ts_ms": 1596684883100, **extra}


def decode(value: Any, key: Any = None, topic: str = "t", **options: Any) -> list[Any]:
    decoder = create_decoder(FORMAT, options)
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    raw_key = None if key is None else key if isinstance(key, bytes) else orjson.dumps(key)
    return decoder.decode(Message(value=raw, key=raw_key, topic=topic))


def one(value: Any, key: Any = None, **options: Any) -> ChangeEvent:
    events = decode(value, key, **options)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ChangeEvent)
    return event


# ---------------------------------------------------------------------------- envelopes


def test_schemaless_insert_keeps_source_and_builds_binlog_sequence() -> None:
    event = one(envelope("c", after={"id": 1, "name": "a", "w": 1.5, "doc": {"k": 1}}))
    assert event.op is Operation.CREATE
    assert event.before is None
    assert event.after == {"id": 1, "name": "a", "w": 1.5, "doc": '{"k":1}'}
    assert [(c.name, c.type, c.logical) for c in event.table.columns] == [
        ("id", ConnectType.INT64, None),
        ("name", ConnectType.STRING, None),
        ("w", ConnectType.FLOAT64, None),
        ("doc", ConnectType.STRING, Logical.JSON),
    ]
    assert (event.table.db, event.table.schema, event.table.table) == ("inventory", None, "products")
    src = event.source
    assert src.connector == FORMAT
    assert src.ts_ms == 1596684883000
    assert src.snapshot is SnapshotMarker.FALSE
    assert src.sequence == "mysql-bin.0000000003:00000000000000001816:00002"
    assert src.fields["file"] == "mysql-bin.000003"
    assert src.fields["pos"] == 1816
    assert src.fields["server_id"] == 223344
    assert src.fields["source_connector"] == "mysql"
    assert src.fields["source_name"] == "dbserver1"
    assert event.ts_ms == 1596684883100
    assert event.table.key == ()


def test_schema_types_and_decimal_from_base64_at_schema_scale() -> None:
    row_schema = {
        "type": "struct",
        "optional": True,
        "fields": [
            {"type": "int32", "optional": False, "field": "id"},
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "4", "connect.decimal.precision": "8"},
                "field": "price",
            },
            {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "d"},
            {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "ts"},
            {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "z"},
            {"type": "bytes", "optional": True, "field": "blob"},
            {
                "type": "struct",
                "optional": True,
                "name": "io.debezium.data.VariableScaleDecimal",
                "fields": [
                    {"type": "int32", "optional": False, "field": "scale"},
                    {"type": "bytes", "optional": False, "field": "value"},
                ],
                "field": "vsd",
            },
        ],
    }
    schema = {
        "type": "struct",
        "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"}],
        "optional": False,
    }
    after = {
        "id": 7,
        "price": "EtaH",
        "d": 18460,
        "ts": 1595008822123456,
        "z": "2020-07-17T18:00:22Z",
        "blob": "EA==",
        "vsd": {"scale": 2, "value": base64.b64encode(unscaled_bytes(Decimal("-1.25"), 2)).decode()},
    }
    event = one({"schema": schema, "payload": envelope("r", after=after)})
    assert event.op is Operation.READ
    assert event.after == {
        "id": 7,
        "price": Decimal("123.4567"),
        "d": dt.date(2020, 7, 17),
        "ts": dt.datetime(2020, 7, 17, 18, 0, 22, 123456),
        "z": "2020-07-17T18:00:22Z",  # a ZonedTimestamp is a Connect string: checked, kept as written
        "blob": b"\x10",
        "vsd": Decimal("-1.25"),
    }
    price = event.table.column("price")
    assert price is not None and price.scale == 4 and price.precision == 8
    id_col = event.table.column("id")
    assert id_col is not None and id_col.type is ConnectType.INT32 and not id_col.optional
    # the decimal re-encodes under each decimal.handling.mode
    for mode, expected in (
        (DecimalHandlingMode.PRECISE, "EtaH"),
        (DecimalHandlingMode.STRING, "123.4567"),
        (DecimalHandlingMode.DOUBLE, 123.4567),
    ):
        record = emit([event], EmitOptions(decimal_mode=mode))[0]
        assert record.value is not None
        assert record.value["payload"]["after"]["price"] == expected


def test_message_key_names_key_columns_and_keys_the_record() -> None:
    key = {
        "schema": {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "id"}]},
        "payload": {"id": 1},
    }
    event = one(envelope("u", before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"}), key=key)
    assert event.table.key == ("id",)
    records = emit([event], EmitOptions())
    assert records[0].key is not None and records[0].key["payload"] == {"id": 1}
    # a bare key object works too
    assert one(envelope("c", after={"id": 2}), key={"id": 2}).table.key == ("id",)
    # no key → no key columns
    assert one(envelope("c", after={"id": 2})).table.key == ()


def test_key_columns_option_overrides_message_key() -> None:
    event = one(envelope("c", after={"id": 1, "code": "x"}), key={"id": 1}, **{"key.columns": "code"})
    assert event.table.key == ("code",)


def test_delete_without_before_is_filled_from_the_message_key() -> None:
    event = one(envelope("d"), key={"id": 5})
    assert event.op is Operation.DELETE
    assert event.before == {"id": 5}
    assert event.after is None
    records = emit([event], EmitOptions())
    assert [r.value is None for r in records] == [False, True]  # delete then tombstone


def test_delete_drops_after_and_update_keeps_both_images() -> None:
    event = one(envelope("d", before={"id": 1}, after=None))
    assert event.before == {"id": 1} and event.after is None
    update = one(envelope("u", before={"id": 1, "v": 1}, after={"id": 1, "v": 2}))
    assert update.before == {"id": 1, "v": 1} and update.after == {"id": 1, "v": 2}


def test_partial_before_marks_missing_columns_unavailable() -> None:
    event = one(envelope("u", before={"addr": "x"}, after={"id": 1, "addr": "y"}))
    assert event.before == {"id": UNAVAILABLE, "addr": "x"}


def test_truncate_and_read_ops() -> None:
    assert one(envelope("t")).op is Operation.TRUNCATE
    snap = one(envelope("r", after={"id": 1}, source={**SOURCE, "snapshot": "last"}))
    assert snap.op is Operation.READ and snap.source.snapshot is SnapshotMarker.LAST


def test_debezium_010_boolean_snapshot() -> None:
    assert (
        one(envelope("c", after={"id": 1}, source={**SOURCE, "snapshot": True})).source.snapshot
        is SnapshotMarker.TRUE
    )
    assert one(envelope("c", after={"id": 1}, source={**SOURCE, "snapshot": False})).source.snapshot is (
        SnapshotMarker.FALSE
    )


def test_transaction_block_is_kept() -> None:
    tx = {"id": "571:53195829", "total_order": 3, "data_collection_order": 2}
    event = one(envelope("c", after={"id": 1}, transaction=tx))
    assert event.transaction is not None
    assert (event.transaction.id, event.transaction.total_order, event.transaction.data_collection_order) == (
        "571:53195829",
        3,
        2,
    )


def test_postgres_sequence_from_lsn_and_schema_name() -> None:
    source = {
        "connector": "postgresql",
        "db": "postgres",
        "schema": "inventory",
        "table": "t",
        "lsn": 34078720,
    }
    event = one({"op": "c", "after": {"id": 1}, "source": source})
    assert event.source.sequence == "00000000000034078720"
    assert (event.table.db, event.table.schema) == ("postgres", "inventory")


def test_sequence_sorts_in_binlog_order() -> None:
    a = position_sequence({"file": "mysql-bin.000009", "pos": 999999, "row": 0})
    b = position_sequence({"file": "mysql-bin.000010", "pos": 4, "row": 0})
    c = position_sequence({"file": "mysql-bin.000010", "pos": 4, "row": 1})
    assert a is not None and b is not None and c is not None
    assert a < b < c


def test_mongodb_string_images_and_id_key() -> None:
    doc = '{"_id": {"$oid": "67ab"}, "n": {"$numberLong": "17"}, "at": {"$date": 0}, "tags": ["a"]}'
    source = {"connector": "mongodb", "db": "shop", "collection": "orders", "ts_ms": 5000, "ord": 3}
    event = one({"op": "c", "after": doc, "source": source}, key={"id": '{"$oid": "67ab"}'})
    assert event.after == {
        "_id": "67ab",
        "n": 17,
        "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        "tags": ["a"],
    }
    assert event.table.key == ("_id",)
    assert event.table.table == "orders"
    assert event.source.sequence == "000000000005:0000000003"
    delete = one({"op": "d", "before": None, "after": None, "source": source}, key={"id": '{"$oid": "67ab"}'})
    assert delete.before == {"_id": "67ab"}


# ---------------------------------------------------------------------------- no-change values


@pytest.mark.parametrize(
    "value",
    [
        b"null",
        {"schema": None, "payload": None},
        {"ts_ms": 1},
        envelope("m"),
    ],
    ids=["tombstone", "null-payload", "heartbeat", "logical-message"],
)
def test_values_without_a_change(value: Any) -> None:
    assert decode(value) == []


def test_input_tombstone_with_none_value() -> None:
    assert create_decoder(FORMAT).decode(Message(value=None, key=b'{"id":1}')) == []


def test_transaction_metadata_and_schema_change() -> None:
    begin = decode(
        {"status": "BEGIN", "id": "tx1", "event_count": None, "data_collections": None, "ts_ms": 9}
    )
    assert isinstance(begin[0], TransactionEvent) and begin[0].id == "tx1"
    end = decode(
        {
            "status": "END",
            "id": "tx1",
            "event_count": 2,
            "data_collections": [{"data_collection": "inventory.products", "event_count": 2}],
            "ts_ms": 9,
        }
    )
    assert isinstance(end[0], TransactionEvent) and end[0].data_collections == (("inventory.products", 2),)
    ddl = decode(
        {
            "source": SOURCE,
            "ts_ms": 9,
            "databaseName": "inventory",
            "ddl": "ALTER TABLE products ADD c INT",
            "tableChanges": [{"type": "ALTER", "id": '"inventory"."products"', "table": {}}],
        }
    )
    assert isinstance(ddl[0], SchemaChangeEvent) and ddl[0].ddl == "ALTER TABLE products ADD c INT"
    assert ddl[0].db == "inventory" and ddl[0].table == "products"


# ---------------------------------------------------------------------------- flat rows


def test_flat_row_requires_unwrapped_option() -> None:
    with pytest.raises(DecodeError) as info:
        decode({"id": 1, "name": "x"})
    assert info.value.format_id == FORMAT and info.value.field == "op"


def test_flat_row_with_unwrapped_option() -> None:
    event = one({"id": 1, "name": "x"}, key={"id": 1}, unwrapped=True, table="inventory.customers")
    assert event.op is Operation.CREATE and event.after == {"id": 1, "name": "x"}
    assert (event.table.db, event.table.table, event.table.key) == ("inventory", "customers", ("id",))
    deleted = one(
        {"id": 1, "name": "x", "__deleted": "true", "__table": "c2", "__db": "d2", "__lsn": 42},
        unwrapped=True,
    )
    assert (
        deleted.op is Operation.DELETE and deleted.before == {"id": 1, "name": "x"} and deleted.after is None
    )
    assert (deleted.table.db, deleted.table.table) == ("d2", "c2")
    assert deleted.source.fields == {"lsn": 42} and deleted.source.sequence == "00000000000000000042"
    updated = one({"id": 1, "__op": "u"}, unwrapped=True, table="t")
    assert updated.op is Operation.UPDATE


def test_table_falls_back_to_topic_name() -> None:
    event = one({"op": "c", "after": {"id": 1}}, topic="server1.shop.orders")
    assert (event.table.db, event.table.table) == ("shop", "orders")


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (b'{"op": "c", "after": {', None),
        (b"[1, 2]", None),
        (envelope("x", after={"id": 1}), "op"),
        (envelope(1, after={"id": 1}), "op"),
        (envelope("c", after=None), "after"),
        (envelope("u", before={"id": 1}, after=None), "after"),
        (envelope("c", after=[1, 2]), "after"),
        (envelope("c", after='{"a": '), "after"),
        (envelope("c", after={"id": 1}, source="mysql"), "source"),
        (envelope("c", after={"id": 1}, source={**SOURCE, "snapshot": "maybe"}), "source.snapshot"),
        (envelope("c", after={"id": 1}, source={**SOURCE, "ts_ms": "soon"}), "source.ts_ms"),
        (envelope("c", after={"id": 1}, source={**SOURCE, "table": 5}), "source.table"),
        (envelope("c", after={"id": 1}, ts_ms="now"), "ts_ms"),
        (envelope("c", after={"id": 1}, transaction="tx"), "transaction"),
        (
            {"schema": {"type": "struct", "fields": "x"}, "payload": envelope("c", after={"id": 1})},
            "schema.fields",
        ),
        ({"schema": "s", "payload": envelope("c", after={"id": 1})}, "schema"),
        ({"schema": None, "payload": [1]}, "payload"),
    ],
)
def test_bad_input_is_a_decode_error(value: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(value)
    err = info.value
    assert err.format_id == FORMAT
    assert err.field == field
    assert err.preview


def test_value_not_matching_declared_type_names_the_column() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {
                "type": "struct",
                "optional": True,
                "field": "after",
                "fields": [{"type": "int32", "optional": False, "field": "id"}],
            }
        ],
    }
    with pytest.raises(DecodeError) as info:
        decode({"schema": schema, "payload": envelope("c", after={"id": "AQ=="})})
    assert info.value.field == "after.id"
    assert "int32" in str(info.value)


def test_unknown_connect_type_and_bad_key() -> None:
    schema = {
        "type": "struct",
        "fields": [{"type": "struct", "field": "after", "fields": [{"type": "int128", "field": "id"}]}],
    }
    with pytest.raises(DecodeError) as info:
        decode({"schema": schema, "payload": envelope("c", after={"id": 1})})
    assert info.value.field == "schema.after.id"
    with pytest.raises(DecodeError) as info:
        decode(envelope("c", after={"id": 1}), key=b"{not json")
    assert info.value.field == "key"


# ---------------------------------------------------------------------------- properties

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: not f.is_integer()),
    st.text(max_size=12).filter(lambda s: s != UNAVAILABLE),
)
rows = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda s: not s.startswith("__")), scalars, min_size=1, max_size=6
)


@settings(max_examples=200, deadline=None)
@given(rows, st.sampled_from(["c", "r", "u"]))
def test_schemaless_values_survive_decoding(after: dict[str, Any], op: str) -> None:
    event = one(envelope(op, after=after))
    assert event.after == after


@settings(max_examples=200, deadline=None)
@given(rows, st.sampled_from(["c", "u", "d", "r"]))
def test_canonical_output_decodes_to_itself(row: dict[str, Any], op: str) -> None:
    """Re-decoding our own canonical output (with its schema) gives the same record."""
    value = envelope(op, after=None if op == "d" else row, before=row if op in ("u", "d") else None)
    first = emit([one(value)], EmitOptions())[0]
    assert first.value is not None
    second = emit([one(first.value)], EmitOptions())[0]
    assert second.value == first.value


@settings(max_examples=200, deadline=None)
@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**12), max_value=10**12),
)
def test_decimal_bytes_round_trip(value: Decimal) -> None:
    row_schema = {
        "type": "struct",
        "field": "after",
        "optional": True,
        "fields": [
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "3"},
                "field": "p",
            }
        ],
    }
    encoded = base64.b64encode(unscaled_bytes(value, 3)).decode()
    schema = {"type": "struct", "fields": [row_schema]}
    event = one({"schema": schema, "payload": envelope("c", after={"p": encoded})})
    assert event.after == {"p": value}


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=5)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "op": st.sampled_from(["c", "u", "d", "r", "t", "m", "x", 3]),
            "before": json_values,
            "after": json_values,
            "source": json_values,
            "ts_ms": json_values,
            "transaction": json_values,
        },
    ),
    st.booleans(),
)
def test_arbitrary_envelopes_fail_only_with_decode_error(value: dict[str, Any], wrap: bool) -> None:
    doc = {"schema": None, "payload": value} if wrap else value
    try:
        decode(doc, unwrapped=True)
    except DecodeError as exc:
        assert exc.format_id == FORMAT
