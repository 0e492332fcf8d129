"""unwrap: Debezium ExtractNewRecordState semantics, checked through the emitter."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.smt.samples import NON_DATA, ORDERS, TX, apply_pure, change, make, only, row
from transforms.connect import ConnectType, TableSchema
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    Event,
    NativeLayout,
    NativeSource,
    Operation,
    RowEvent,
    SourceInfo,
    emit,
)
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain, create_transform
from transforms.values import UNAVAILABLE

PLAIN = EmitOptions(schemas=False)


def _records(events: list[Event]) -> list[tuple[Any, Any]]:
    return [(r.key, r.value) for r in emit(events, PLAIN)]


def test_insert_update_snapshot_become_after_rows() -> None:
    unwrap = make("unwrap")
    for op in ("c", "u", "r"):
        out = only(apply_pure(unwrap, change(op)))
        assert isinstance(out, RowEvent)
        assert out.row == row() and out.op is Operation(op) and not out.deleted
        assert out.table is ORDERS
    assert _records([only(unwrap.apply(change("u")))]) == [({"id": 1}, {**row(), "amount": "A+c="})]


DELETED_ROW = {**row(note="old"), "amount": "A+c=", "__deleted": "true"}
TOMBSTONE = ({"id": 1}, None)
REWRITTEN = ({"id": 1}, DELETED_ROW)

# what a delete becomes under each mode: Debezium 3's DefaultDeleteHandlingStrategy, where the
# null-valued record of `tombstone` is written as a tombstone (see the module's docstring)
MODES = [
    ("drop", []),
    ("tombstone", [TOMBSTONE]),
    ("rewrite", [REWRITTEN]),
    ("rewrite-with-tombstone", [REWRITTEN, TOMBSTONE]),
    ("delete-to-tombstone", [TOMBSTONE]),
]


@pytest.mark.parametrize(("mode", "expected"), MODES)
def test_delete_tombstone_handling_mode(mode: str, expected: list[tuple[Any, Any]]) -> None:
    unwrap = make("unwrap", delete__tombstone__handling__mode=mode)
    assert _records(apply_pure(unwrap, change("d"))) == expected
    created = only(unwrap.apply(change("c")))
    assert ("__deleted" in created.row) == mode.startswith("rewrite")


def test_mode_is_read_as_debezium_reads_it() -> None:
    assert (
        make("unwrap", delete__tombstone__handling__mode=" Rewrite ").config.delete_tombstone_handling_mode
        == "rewrite"
    )


def test_delete_without_before_image_is_dropped_like_debezium() -> None:
    event = ChangeEvent(Operation.DELETE, ORDERS, None, None, change().source)
    for mode, _ in MODES:
        out = make("unwrap", delete__tombstone__handling__mode=mode).apply(event)
        assert [e.row for e in out if isinstance(e, RowEvent)] == (
            [None] if mode == "rewrite-with-tombstone" else []
        )


def test_debezium_class_name_defaults_to_tombstone() -> None:
    unwrap = create_transform("io.debezium.transforms.ExtractNewRecordState")
    assert _records(unwrap.apply(change("d"))) == [TOMBSTONE]
    assert make("unwrap").config.delete_tombstone_handling_mode == "drop"


# Debezium 2.x (LegacyDeleteHandlingStrategy): delete.handling.mode x drop.tombstones
LEGACY = [
    ({}, "drop", []),
    ({"delete.handling.mode": "drop"}, "drop", []),
    ({"drop.tombstones": False}, None, [TOMBSTONE]),
    ({"delete.handling.mode": "none"}, "tombstone", [TOMBSTONE]),
    ({"delete.handling.mode": "none", "drop.tombstones": False}, None, [TOMBSTONE, TOMBSTONE]),
    ({"delete.handling.mode": "rewrite"}, "rewrite", [REWRITTEN]),
    (
        {"delete.handling.mode": "rewrite", "drop.tombstones": "false"},
        "rewrite-with-tombstone",
        [REWRITTEN, TOMBSTONE],
    ),
    ({"delete.handling.mode": "drop", "drop.tombstones": True}, "drop", []),
]


@pytest.mark.parametrize(("legacy", "same_as", "expected"), LEGACY)
def test_deprecated_delete_options(
    legacy: dict[str, Any], same_as: str | None, expected: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="transforms.smt.registry"):
        unwrap = only(build_chain([{"type": "unwrap", **legacy}]).steps).transform
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"transforms[0].{key} is deprecated: use delete.tombstone.handling.mode instead"
        for key in sorted(legacy)
    ]
    events = [change("d"), change("c"), change("u", before=row(1), after=row(2))]
    out = _records([e for event in events for e in apply_pure(unwrap, event)])
    assert out[: len(expected)] == expected
    if same_as is not None:
        new = make("unwrap", delete__tombstone__handling__mode=same_as)
        assert out == _records([e for event in events for e in new.apply(event)])


@pytest.mark.parametrize("legacy", [{"delete.handling.mode": "rewrite"}, {"drop.tombstones": False}])
def test_old_and_new_mode_together_are_a_config_error(legacy: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "unwrap", "delete.tombstone.handling.mode": "rewrite", **legacy}])
    (key,) = legacy
    assert info.value.key == f"transforms[0].{key}"
    assert "delete.tombstone.handling.mode" in info.value.reason
    with pytest.raises(ConfigError):  # the class name too, whose default mode is not set here
        build_chain(
            [
                {
                    "type": "io.debezium.transforms.ExtractNewRecordState",
                    "delete.tombstone.handling.mode": "drop",
                    **legacy,
                }
            ]
        )


def test_legacy_keys_keep_the_debezium_class_default_off() -> None:
    unwrap = create_transform(
        "io.debezium.transforms.ExtractNewRecordState", {"delete.handling.mode": "rewrite"}
    )
    assert _records(unwrap.apply(change("d"))) == [REWRITTEN]


def test_emitter_tombstones_option_still_applies() -> None:
    out = make("unwrap", delete__tombstone__handling__mode="delete-to-tombstone").apply(change("d"))
    assert emit(out, EmitOptions(tombstones=False)) == []


def test_rewrite_marks_other_rows_not_deleted() -> None:
    out = only(make("unwrap", delete__tombstone__handling__mode="rewrite").apply(change("c")))
    assert out.row["__deleted"] == "false"
    assert out.table.column("__deleted").type is ConnectType.STRING


def test_add_fields() -> None:
    unwrap = make("unwrap", add__fields="op,table,source.ts_ms,sequence,lsn,transaction.id")
    out = only(apply_pure(unwrap, change("u", transaction=TX)))
    assert {k: v for k, v in out.row.items() if k.startswith("__")} == {
        "__op": "u",
        "__table": "orders",
        "__source_ts_ms": 1_700_000_000_000,
        "__sequence": "000001",
        "__lsn": None,
        "__transaction_id": "tx-1",
    }
    assert [c.name for c in out.table.columns][4:] == [
        "__op",
        "__table",
        "__source_ts_ms",
        "__sequence",
        "__lsn",
        "__transaction_id",
    ]


def test_rewritten_delete_has_added_fields_of_the_delete() -> None:
    unwrap = make("unwrap", delete__tombstone__handling__mode="rewrite", add__fields="op")
    out = only(unwrap.apply(change("d")))
    assert out.row["__op"] == "d" and out.row["__deleted"] == "true" and out.deleted
    assert [c.name for c in out.table.columns][-2:] == ["__deleted", "__op"]  # Debezium's order


def test_key_change_becomes_delete_then_insert() -> None:
    event = change("u", before=row(1), after=row(2))
    unwrap = make("unwrap", delete__tombstone__handling__mode="rewrite-with-tombstone", add__fields="op")
    out = apply_pure(unwrap, event)
    records = _records(out)
    assert [k for k, _ in records] == [{"id": 1}, {"id": 1}, {"id": 2}]
    assert records[0][1]["__op"] == "d" and records[0][1]["__deleted"] == "true"
    assert records[1][1] is None
    assert records[2][1]["__op"] == "c" and records[2][1]["id"] == 2


def test_truncate_dropped_or_passed() -> None:
    truncate = ChangeEvent(Operation.TRUNCATE, ORDERS, None, None, change().source)
    assert apply_pure(make("unwrap"), truncate) == []
    assert apply_pure(make("unwrap", truncate__handling__mode="pass"), truncate)[0] is truncate


def test_unavailable_passes_into_the_row() -> None:
    after = {"id": 1, "email": UNAVAILABLE, "amount": None, "note": None}
    out = only(apply_pure(make("unwrap"), change("u", after=after)))
    assert out.row == after
    assert _records([out])[0][1]["email"] == UNAVAILABLE


def test_missing_after_is_a_transform_error() -> None:
    with pytest.raises(TransformError, match="no after image"):
        make("unwrap").apply(ChangeEvent(Operation.CREATE, ORDERS, None, None, change().source))


def test_other_events_and_rows_pass() -> None:
    unwrap = make("unwrap")
    for build in NON_DATA:
        event = build()
        assert apply_pure(unwrap, event)[0] is event
    row_event = only(unwrap.apply(change("c")))
    assert unwrap.apply(row_event)[0] is row_event


def test_topic_and_headers_carry_over() -> None:
    event = change("c", topic="t", headers=(("h", b"v"),))
    out = only(make("unwrap").apply(event))
    assert out.topic == "t" and out.headers == (("h", b"v"),)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"delete.handling.mode": "rewrite-with-tombstone"}, "transforms[0].delete.handling.mode"),
        ({"drop.tombstones": "maybe"}, "transforms[0].drop.tombstones"),
        ({"add.fields": "topic"}, "transforms[0].add.fields"),
        ({"truncate.handling.mode": "keep"}, "transforms[0].truncate.handling.mode"),
        ({"delete.tombstone.handling.mode": "none"}, "transforms[0].delete.tombstone.handling.mode"),
        ({"delete.handling.mode": "tombstone"}, "transforms[0].delete.handling.mode"),
        ({"add.headers": "topic"}, "transforms[0].add.headers"),
        ({"add.headers": "op,op"}, "transforms[0].add.headers"),
        ({"add.fields": "op:a:b"}, "transforms[0].add.fields"),
        ({"drop.fields.from.key": True}, "transforms[0].drop.fields.from.key"),
    ],
)
def test_config_errors(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "unwrap", **config}])
    assert info.value.key == key


def test_add_headers_as_connect_writes_them() -> None:
    unwrap = make("unwrap", add__headers="op,table,source.ts_ms,transaction.id,lsn,ts_ms:event_ts")
    out = only(apply_pure(unwrap, change("u", headers=(("h", b"v"),))))
    assert out.headers == (
        ("h", b"v"),
        ("__op", b"u"),
        ("__table", b"orders"),
        ("__source_ts_ms", b"1700000000000"),
        ("__event_ts", b"1700000000000"),
    )  # no transaction and no lsn: no header
    assert "__op" not in out.row
    assert emit([out], PLAIN)[0].headers == out.headers


def test_add_headers_on_deletes_and_their_tombstones() -> None:
    unwrap = make(
        "unwrap",
        delete__tombstone__handling__mode="rewrite-with-tombstone",
        add__headers="op,table",
        add__headers__prefix="cdc_",
    )
    deleted, tombstone = apply_pure(unwrap, change("d"))
    assert deleted.headers == (("cdc_op", b"d"), ("cdc_table", b"orders"))
    assert (
        isinstance(tombstone, RowEvent) and tombstone.row is None and tombstone.headers == (("cdc_op", b"d"),)
    )
    null = only(
        make("unwrap", delete__tombstone__handling__mode="tombstone", add__headers="op").apply(change("d"))
    )
    assert null.row is None and null.headers == (("__op", b"d"),)


def test_add_fields_with_new_names() -> None:
    out = only(make("unwrap", add__fields="op:operation,source.ts_ms:event_ts").apply(change("c")))
    assert out.row["__operation"] == "c" and out.row["__event_ts"] == 1_700_000_000_000


def test_route_by_field() -> None:
    unwrap = make(
        "unwrap", route__by__field="email", delete__tombstone__handling__mode="rewrite-with-tombstone"
    )
    assert only(unwrap.apply(change("c"))).topic == "a@example.com"
    assert only(unwrap.apply(change("c", after=row(email=None), topic="t"))).topic == "t"
    assert only(unwrap.apply(change("c", after=row(email="  ")))).topic is None
    deleted, tombstone = unwrap.apply(change("d", before=row(email="gone")))
    assert deleted.topic == "gone" and tombstone.topic is None  # the tombstone stays where it was
    null = only(
        make("unwrap", route__by__field="email", delete__tombstone__handling__mode="tombstone").apply(
            change("d", before=row(email="gone"))
        )
    )
    assert null.topic == "gone"
    assert make("unwrap", route__by__field=" ").config.route_by_field is None


@pytest.mark.parametrize(("field", "reason"), [("nope", "not a column"), ("id", "not a string column")])
def test_route_by_field_errors(field: str, reason: str) -> None:
    with pytest.raises(TransformError, match=reason):
        make("unwrap", route__by__field=field).apply(change("c"))


@pytest.mark.parametrize("listed", [b'["note","email","id","absent"]', b"note, email,id,absent"])
def test_drop_fields_header_drops_optional_non_key_columns(listed: bytes) -> None:
    unwrap = make("unwrap", drop__fields__header__name="drop", add__fields="op")
    out = only(apply_pure(unwrap, change("u", headers=(("drop", listed),))))
    assert out.row == {"id": 1, "amount": row()["amount"], "__op": "u"}
    assert [c.name for c in out.table.columns] == ["id", "amount", "__op"]
    assert _records([out])[0][1] == {"id": 1, "amount": "A+c=", "__op": "u"}
    assert only(unwrap.apply(change("u"))).row == {**row(), "__op": "u"}  # no header, nothing dropped
    assert only(unwrap.apply(change("u", headers=(("drop", b"[]"),)))).row == {**row(), "__op": "u"}


def test_row_keeps_the_key_of_the_change() -> None:
    """A key column absent from an update's after image is keyed from before, as the change was."""
    after = {k: v for k, v in row(1).items() if k != "id"}
    out = only(apply_pure(make("unwrap"), change("u", before=row(1), after=after)))
    assert out.row == after and out.key_source == {**after, "id": 1}
    same = only(make("unwrap").apply(change("u")))
    assert same.key_source is same.row or same.key_source == same.row


def test_derived_tables_keep_the_topic_namespace() -> None:
    table = TableSchema("inventory", "public", "orders", ORDERS.columns, ORDERS.key, topic_namespace="public")
    for name, config in (
        ("unwrap", {"delete.tombstone.handling.mode": "rewrite", "add.fields": "op"}),
        ("replace-field", {"exclude": "note"}),
        ("insert-field", {"static.field": "s", "static.value": "v"}),
    ):
        out = only(create_transform(name, config).apply(change("c", table=table)))
        assert out.table.topic_namespace == "public", name


def test_connector_source_fields_are_read_from_its_own_block() -> None:
    schema = {
        "type": "struct",
        "name": "io.debezium.connector.mongodb.Source",
        "optional": False,
        "fields": [
            {"type": "string", "optional": False, "field": "collection"},
            {"type": "int32", "optional": True, "field": "ord"},
            {
                "type": "string",
                "optional": True,
                "name": "io.debezium.data.Enum",
                "version": 1,
                "parameters": {"allowed": "true,false"},
                "field": "snapshot",
            },
        ],
    }
    native = NativeSource(
        NativeLayout(2, schema, (), ()), {"collection": "orders", "ord": 3, "snapshot": "false"}, {}
    )
    event = change("c", source=SourceInfo("debezium-json", ts_ms=5, native=native))
    unwrap = make("unwrap", add__fields="collection,source.ord,snapshot,table", add__headers="collection")
    out = only(apply_pure(unwrap, event))
    added = {k: v for k, v in out.row.items() if k.startswith("__")}
    assert added == {"__collection": "orders", "__source_ord": 3, "__snapshot": "false", "__table": None}
    columns = {c.name: c for c in out.table.columns}
    assert columns["__source_ord"].type is ConnectType.INT32 and columns["__source_ord"].optional
    assert columns["__snapshot"].logical == "io.debezium.data.Enum"
    assert columns["__collection"].optional
    assert out.headers == (("__collection", b"orders"),)
