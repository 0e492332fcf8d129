"""Predicates: what each one matches, their configs, and negate in a chain."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.smt.samples import ORDERS, change, row_event, schema_change, tx_event
from transforms.envelope import EmitOptions, TransactionEvent
from transforms.errors import ConfigError
from transforms.smt import build_chain, create_predicate


def test_topic_matches_uses_destination_topic() -> None:
    pred = create_predicate("topic-matches", {"regex": r"cdcnorm\.shop\..*"})
    assert pred.test(change()) and pred.test(row_event())
    assert not pred.test(change(topic="elsewhere"))
    assert create_predicate("topic-matches", {"regex": "cdcnorm"}).test(schema_change())
    assert create_predicate("topic-matches", {"regex": r"cdcnorm\.transaction"}).test(tx_event())
    piped = create_predicate(
        "topic-matches", {"regex": r"p\.shop\.orders"}, emit_options=EmitOptions(prefix="p")
    )
    assert piped.test(change())
    tx_topic = create_predicate(
        "topic-matches", {"regex": "txs"}, emit_options=EmitOptions(transaction_topic="txs")
    )
    assert tx_topic.test(tx_event())


def test_table_matches_on_db_dot_table() -> None:
    pred = create_predicate("table-matches", {"regex": r"shop\.(orders|items)"})
    assert pred.test(change()) and pred.test(row_event()) and pred.test(schema_change())
    assert not pred.test(change(table=ORDERS.with_name("crm", None, "orders")))
    assert not pred.test(tx_event())
    assert not pred.test(replace(schema_change(), table=None))
    # without a db name the schema name is used
    assert create_predicate("table-matches", {"regex": r"public\.orders"}).test(
        change(table=ORDERS.with_name(None, "public", "orders"))
    )
    assert not create_predicate("table-matches", {"regex": "orders"}).test(change())  # full match


def test_op_is() -> None:
    pred = create_predicate("op-is", {"ops": "c,r"})
    assert pred.test(change("c")) and pred.test(change("r")) and pred.test(row_event("c"))
    assert not pred.test(change("u")) and not pred.test(schema_change())


def test_kind_predicates() -> None:
    ddl, tx = create_predicate("is-schema-change"), create_predicate("is-transaction")
    assert ddl.test(schema_change()) and not ddl.test(change()) and not ddl.test(tx_event())
    assert tx.test(tx_event()) and not tx.test(change())
    assert isinstance(tx_event(), TransactionEvent)


def test_has_header_key() -> None:
    pred = create_predicate("has-header-key", {"name": "trace"})
    assert pred.test(change(headers=(("trace", b"1"),)))
    assert not pred.test(change()) and not pred.test(schema_change())


def test_negate_inverts_in_chain() -> None:
    spec = {"type": "filter", "predicate": {"type": "op-is", "ops": "d"}}
    events = [change("c"), change("d")]
    assert build_chain([spec]).apply(list(events)) == [events[0]]
    assert build_chain([{**spec, "negate": "true"}]).apply(list(events)) == [events[1]]


@pytest.mark.parametrize(
    ("predicate", "key"),
    [
        ({"type": "op-is"}, "transforms[0].predicate.ops"),
        ({"type": "op-is", "ops": ""}, "transforms[0].predicate.ops"),
        ({"type": "op-is", "ops": "z"}, "transforms[0].predicate.ops[0]"),
        ({"type": "table-matches", "regex": "("}, "transforms[0].predicate.regex"),
        ({"type": "table-matches", "pattern": "x"}, "transforms[0].predicate.pattern"),
        ({"type": "is-schema-change", "x": 1}, "transforms[0].predicate.x"),
        ({"type": "is-deleted"}, "transforms[0].predicate.type"),
        ({"regex": "x"}, "transforms[0].predicate.type"),
        ({"type": "has-header-key"}, "transforms[0].predicate.name"),
    ],
)
def test_config_errors(predicate: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "filter", "predicate": predicate}])
    assert info.value.key == key
