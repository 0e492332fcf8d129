"""insert-field: static and metadata fields, typed columns, both images."""

from __future__ import annotations

import pytest

from tests.smt.samples import NON_DATA, ORDERS, SOURCE, TX, apply_pure, change, make, only, row_event
from transforms.connect import Column, ConnectType
from transforms.envelope import EmitOptions
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain
from transforms.values import UNAVAILABLE


def test_static_field_in_both_images() -> None:
    out = only(apply_pure(make("insert-field", static__field="region", static__value="eu"), change()))
    assert out.before["region"] == out.after["region"] == "eu"
    assert out.table.columns[-1] == Column("region", ConnectType.STRING, True)
    assert out.table.key == ORDERS.key


def test_metadata_fields() -> None:
    fields = (
        "op,ts_ms,db,table,source.ts_ms,sequence,connector,snapshot,pos,source.file,transaction.id,topic,name"
    )
    ins = make("insert-field", add__fields=fields)
    out = only(apply_pure(ins, change(transaction=TX, ts_ms=5)))
    added = {k: v for k, v in out.after.items() if k.startswith("__")}
    assert added == {
        "__op": "u",
        "__ts_ms": 5,
        "__db": "shop",
        "__table": "orders",
        "__source_ts_ms": SOURCE.ts_ms,
        "__sequence": "000001",
        "__connector": "canal-json",
        "__snapshot": "false",
        "__pos": 4,
        "__source_file": "bin.001",
        "__transaction_id": "tx-1",
        "__topic": "cdcnorm.shop.orders",
        "__name": "cdcnorm",
    }
    types = {c.name: c.type for c in out.table.columns if c.name.startswith("__")}
    assert types["__ts_ms"] is ConnectType.INT64
    assert types["__pos"] is ConnectType.INT64
    assert types["__source_file"] is ConnectType.STRING
    assert all(c.optional for c in out.table.columns if c.name.startswith("__"))


def test_topic_uses_pipeline_naming_and_routed_topic() -> None:
    chain = build_chain(
        [{"type": "insert-field", "add.fields": "topic"}], emit_options=EmitOptions(prefix="p")
    )
    assert only(chain.apply([change()])).after["__topic"] == "p.shop.orders"
    assert only(chain.apply([change(topic="routed")])).after["__topic"] == "routed"


def test_prefix_and_unavailable_untouched() -> None:
    event = change(after={"id": 1, "email": UNAVAILABLE, "amount": None, "note": None})
    out = only(apply_pure(make("insert-field", add__fields="op", add__fields__prefix="meta_"), event))
    assert out.after == {"id": 1, "email": UNAVAILABLE, "amount": None, "note": None, "meta_op": "u"}
    assert out.before["meta_op"] == "u"


def test_create_has_no_before_to_fill() -> None:
    out = only(apply_pure(make("insert-field", add__fields="op"), change("c")))
    assert out.before is None and out.after["__op"] == "c"


def test_table_cached_per_input_table() -> None:
    ins = make("insert-field", add__fields="op,table")
    assert only(ins.apply(change())).table is only(ins.apply(change("c"))).table


def test_row_events_lack_source_metadata() -> None:
    out = only(apply_pure(make("insert-field", add__fields="op,table,source.ts_ms"), row_event("r")))
    assert out.row["__op"] == "r" and out.row["__table"] == "orders" and out.row["__source_ts_ms"] is None


def test_added_field_replaces_non_key_column_but_not_key() -> None:
    out = only(make("insert-field", static__field="note", static__value="x").apply(change()))
    assert out.after["note"] == "x" and [c.name for c in out.table.columns].count("note") == 1
    with pytest.raises(TransformError, match="key column"):
        make("insert-field", static__field="id", static__value="x").apply(change())


def test_other_events_pass() -> None:
    ins = make("insert-field", add__fields="op")
    for build in NON_DATA:
        event = build()
        assert apply_pure(ins, event)[0] is event


@pytest.mark.parametrize(
    ("config", "key", "reason"),
    [
        ({}, "transforms[0]", "set static.field"),
        ({"static.field": "a"}, "transforms[0]", "go together"),
        ({"add.fields": "transaction.name"}, "transforms[0].add.fields", "transaction fields"),
        ({"add.fields": "a-b"}, "transforms[0].add.fields", "not a field name"),
        ({"add.fields": "op,op"}, "transforms[0].add.fields", "twice"),
        ({"static.field": "", "static.value": "x"}, "transforms[0].static.field", "at least 1"),
        ({"static.field": "!", "static.value": "x"}, "transforms[0].static.field", "name is needed"),
        ({"topic.field": "?"}, "transforms[0].topic.field", "name is needed"),
        ({"partition.field": "p"}, "transforms[0].partition.field", "the Kafka partition is set when"),
        ({"offset.field": "o"}, "transforms[0].offset.field", "the Kafka offset is set when"),
        ({"timestamp.field": "t"}, "transforms[0].timestamp.field", "add.fields=ts_ms or source.ts_ms"),
        (
            {"topic.field": "t", "partition.field": "p"},
            "transforms[0].partition.field",
            "cannot be inserted",
        ),
    ],
)
def test_config_errors(config: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "insert-field", **config}])
    assert info.value.key == key
    assert reason in info.value.reason


def test_connect_field_specs_and_topic_field() -> None:
    ins = make("insert-field", static__field="region!", static__value="eu", topic__field="src_topic?")
    out = only(apply_pure(ins, change(topic="routed")))
    assert out.after["region"] == "eu" and out.after["src_topic"] == "routed"
    assert out.table.columns[-2:] == (  # Kafka Connect's order: the topic field, then the static one
        Column("src_topic", ConnectType.STRING, True),
        Column("region", ConnectType.STRING, False),
    )
    chain = build_chain([{"type": "insert-field", "topic.field": "t"}], emit_options=EmitOptions(prefix="p"))
    row = only(chain.apply([row_event()]))
    assert row.row["t"] == "p.shop.orders"


def test_connect_class_name_and_replace_null_with_default() -> None:
    config = {"static.field": "region", "static.value": "eu", "replace.null.with.default": False}
    connect = build_chain([{"type": "org.apache.kafka.connect.transforms.InsertField$Value", **config}])
    ours = build_chain([{"type": "insert-field", **config}])
    assert connect.steps[0].transform.config == ours.steps[0].transform.config
    assert connect.apply([change()]) == ours.apply([change()])
