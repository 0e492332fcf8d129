"""filter: drop events by predicate and by its own db/table/op conditions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.smt.samples import ORDERS, apply_pure, change, make, row_event, schema_change, tx_event
from transforms.envelope import Event
from transforms.errors import ConfigError
from transforms.smt import build_chain

ITEMS = ORDERS.with_name("shop", None, "items")
OTHER_DB = ORDERS.with_name("crm", None, "orders")


def test_without_conditions_drops_everything_it_applies_to() -> None:
    flt = make("filter")
    for event in (change(), row_event(), schema_change(), tx_event()):
        assert apply_pure(flt, event) == []


def test_predicate_scopes_the_filter() -> None:
    chain = build_chain([{"type": "filter", "predicate": {"type": "is-schema-change"}}])
    events: list[Event] = [change(), schema_change(), tx_event()]
    assert chain.apply(events) == [events[0], events[2]]


def test_negated_predicate_keeps_only_matching() -> None:
    chain = build_chain([{"type": "filter", "predicate": {"type": "op-is", "ops": ["r"]}, "negate": True}])
    snap, upd = change("r"), change("u")
    assert chain.apply([snap, upd, tx_event()]) == [snap]


def test_table_and_db_regexes() -> None:
    flt = make("filter", db__regex="shop", table__regex="ord.*")
    orders, items, other = change(), change(table=ITEMS), change(table=OTHER_DB)
    assert apply_pure(flt, orders) == []
    assert apply_pure(flt, items) == [items]
    assert apply_pure(flt, other) == [other]
    assert apply_pure(flt, schema_change()) == []  # shop.orders DDL matches too


def test_ops_condition() -> None:
    flt = make("filter", ops="d,t")
    delete, update = change("d"), change("u")
    assert apply_pure(flt, delete) == []
    assert apply_pure(flt, update) == [update]
    assert apply_pure(flt, row_event("d")) == []


def test_include_mode_keeps_only_matching() -> None:
    flt = make("filter", table__regex="orders", filter__type="include")
    orders, items = change(), change(table=ITEMS)
    assert apply_pure(flt, orders) == [orders]
    assert apply_pure(flt, items) == []


@pytest.mark.parametrize("filter_type", ["exclude", "include"])
def test_events_conditions_cannot_judge_pass_through(filter_type: str) -> None:
    tx = tx_event()
    assert apply_pure(make("filter", table__regex=".*", filter__type=filter_type), tx)[0] is tx
    ddl = schema_change()
    assert apply_pure(make("filter", ops="c", filter__type=filter_type), ddl)[0] is ddl
    nameless = replace(schema_change(), table=None)
    assert apply_pure(make("filter", table__regex=".*", filter__type=filter_type), nameless)[0] is nameless


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"ops": "c,x"}, "transforms[0].ops[1]"),
        ({"table.regex": "["}, "transforms[0].table.regex"),
        ({"filter.type": "keep"}, "transforms[0].filter.type"),
        ({"negate": True}, "transforms[0].negate"),
        ({"tables": "x"}, "transforms[0].tables"),
    ],
)
def test_config_errors(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "filter", **config}])
    assert info.value.key == key
