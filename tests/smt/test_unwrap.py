"""unwrap: Debezium ExtractNewRecordState semantics, checked through the emitter."""

from __future__ import annotations

from typing import Any

import pytest

from tests.smt.samples import NON_DATA, ORDERS, TX, apply_pure, change, make, only, row
from transforms.connect import ConnectType
from transforms.envelope import ChangeEvent, EmitOptions, Event, Operation, RowEvent, emit
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain
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


@pytest.mark.parametrize(
    ("mode", "drop_tombstones", "expected"),
    [
        ("drop", True, []),
        ("drop", False, [({"id": 1}, None)]),
        ("none", True, [({"id": 1}, None)]),
        ("none", False, [({"id": 1}, None)]),
        ("rewrite", True, [({"id": 1}, "deleted-row")]),
        ("rewrite", False, [({"id": 1}, "deleted-row"), ({"id": 1}, None)]),
    ],
)
def test_delete_handling(mode: str, drop_tombstones: bool, expected: list[tuple[Any, Any]]) -> None:
    unwrap = make("unwrap", delete__handling__mode=mode, drop__tombstones=drop_tombstones)
    out = apply_pure(unwrap, change("d"))
    deleted_row = {**row(note="old"), "amount": "A+c=", "__deleted": "true"}
    assert _records(out) == [(k, deleted_row if v == "deleted-row" else v) for k, v in expected]


def test_emitter_tombstones_option_still_applies() -> None:
    out = make("unwrap", drop__tombstones=False).apply(change("d"))
    assert emit(out, EmitOptions(tombstones=False)) == []


def test_rewrite_marks_other_rows_not_deleted() -> None:
    out = only(make("unwrap", delete__handling__mode="rewrite").apply(change("c")))
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
    unwrap = make("unwrap", delete__handling__mode="rewrite", add__fields="op")
    out = only(unwrap.apply(change("d")))
    assert out.row["__op"] == "d" and out.row["__deleted"] == "true" and out.deleted


def test_key_change_becomes_delete_then_insert() -> None:
    event = change("u", before=row(1), after=row(2))
    unwrap = make("unwrap", delete__handling__mode="rewrite", drop__tombstones=False, add__fields="op")
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
        ({"route.by.field": "x"}, "transforms[0].route.by.field"),
    ],
)
def test_config_errors(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "unwrap", **config}])
    assert info.value.key == key
