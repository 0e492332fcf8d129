"""replace-field: exclude/include/renames over row images, table columns and key."""

from __future__ import annotations

import pytest

from tests.smt.samples import NON_DATA, ORDERS, apply_pure, change, make, only, row_event
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import EmitOptions, emit
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain
from transforms.values import UNAVAILABLE


def test_exclude_drops_from_images_and_table() -> None:
    out = only(apply_pure(make("replace-field", exclude="note,missing"), change()))
    assert [c.name for c in out.table.columns] == ["id", "email", "amount"]
    assert "note" not in out.before and "note" not in out.after
    assert out.table.key == ("id",)


def test_include_keeps_only_listed() -> None:
    out = only(apply_pure(make("replace-field", include=["id", "email"]), change()))
    assert [c.name for c in out.table.columns] == ["id", "email"]
    assert set(out.after) == {"id", "email"}


def test_renames_key_column_everywhere() -> None:
    out = only(apply_pure(make("replace-field", renames="id:order_id,email:mail"), change()))
    assert [c.name for c in out.table.columns] == ["order_id", "mail", "amount", "note"]
    assert out.table.key == ("order_id",)
    assert out.after["order_id"] == 1 and out.before["mail"] == "a@example.com"
    rec = emit([out], EmitOptions())[0]
    assert rec.key == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "order_id"}],
            "optional": False,
            "name": "cdcnorm.shop.orders.Key",
        },
        "payload": {"order_id": 1},
    }
    fields = [f["field"] for f in rec.value["schema"]["fields"][1]["fields"]]  # type: ignore[index]
    assert fields == ["order_id", "mail", "amount", "note"]


def test_renames_as_mapping_and_list() -> None:
    a = make("replace-field", renames={"email": "mail"})
    b = make("replace-field", renames=["email:mail"])
    assert only(a.apply(change())).table == only(b.apply(change())).table


def test_unavailable_values_move_untouched() -> None:
    event = change(after={"id": 1, "email": UNAVAILABLE, "amount": UNAVAILABLE, "note": None})
    out = only(apply_pure(make("replace-field", renames="email:mail", exclude="amount"), event))
    assert out.after == {"id": 1, "mail": UNAVAILABLE, "note": None}


def test_dropping_a_key_column_is_a_transform_error() -> None:
    with pytest.raises(TransformError, match="key column 'id'"):
        make("replace-field", exclude="id").apply(change())
    with pytest.raises(TransformError, match="key column 'id'"):
        make("replace-field", include="email").apply(change())


def test_rename_onto_existing_column_is_a_transform_error() -> None:
    with pytest.raises(TransformError, match="two columns named 'note'"):
        make("replace-field", renames="email:note").apply(change())


def test_derived_table_is_cached_per_input_table() -> None:
    rf = make("replace-field", exclude="note")
    one, two = only(rf.apply(change())), only(rf.apply(change("c")))
    assert one.table is two.table
    copy_of_orders = TableSchema(ORDERS.db, ORDERS.schema, ORDERS.table, ORDERS.columns, ORDERS.key)
    assert only(rf.apply(change(table=copy_of_orders))).table is one.table


def test_untouched_table_returns_event_itself() -> None:
    event = change()
    assert apply_pure(make("replace-field", exclude="nope"), event)[0] is event


def test_row_event_row_and_key_source() -> None:
    out = only(apply_pure(make("replace-field", renames="id:order_id", exclude="note"), row_event()))
    assert out.row == {"order_id": 1, "email": "a@example.com", "amount": out.row["amount"]}
    assert out.key_source["order_id"] == 1
    assert emit([out], EmitOptions(schemas=False))[0].key == {"order_id": 1}


def test_other_events_pass() -> None:
    rf = make("replace-field", exclude="note")
    for build in NON_DATA:
        event = build()
        assert apply_pure(rf, event)[0] is event


def test_nested_columns_keep_their_types() -> None:
    table = TableSchema(
        "d", None, "t", (Column("id", ConnectType.INT32, False), Column.decimal("p", None, None)), ("id",)
    )
    out = only(
        make("replace-field", renames="p:price").apply(change("c", after={"id": 1, "p": 1}, table=table))
    )
    assert out.table.column("price") == table.columns[1].renamed("price")


@pytest.mark.parametrize(
    ("config", "key", "reason"),
    [
        ({}, "transforms[0]", "at least one"),
        ({"renames": "a"}, "transforms[0].renames", "old:new"),
        ({"renames": "a:b,c:b"}, "transforms[0].renames", "more than once"),
        ({"renames": "a:b,a:c"}, "transforms[0].renames", "more than once"),
        ({"exclude": "a", "renames": "a:b"}, "transforms[0].renames", "also excluded"),
        ({"include": "x", "renames": "a:b"}, "transforms[0].renames", "not in include"),
        ({"blacklist": "a", "exclude": "b"}, "transforms[0].blacklist", "another spelling of 'exclude'"),
        ({"renames": "a:b:c"}, "transforms[0].renames", "expected 'old:new'"),
    ],
)
def test_config_errors(config: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "replace-field", **config}])
    assert info.value.key == key
    assert reason in info.value.reason
