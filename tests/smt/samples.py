"""Canonical events built directly (no decoders) for the SMT tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    RowEvent,
    SchemaChangeEvent,
    SourceInfo,
    TransactionEvent,
    TransactionRef,
    TransactionStatus,
)
from transforms.smt import Transform, create_transform

ORDERS = TableSchema(
    "shop",
    None,
    "orders",
    (
        Column("id", ConnectType.INT64, False),
        Column("email", ConnectType.STRING),
        Column.decimal("amount", 10, 2),
        Column("note", ConnectType.STRING),
    ),
    ("id",),
)

SOURCE = SourceInfo(
    "canal-json", ts_ms=1_700_000_000_000, sequence="000001", fields={"file": "bin.001", "pos": 4}
)
TX = TransactionRef("tx-1", 3, 1)


def row(
    id_: int = 1, email: Any = "a@example.com", amount: Any = Decimal("9.99"), note: Any = None
) -> dict[str, Any]:
    return {"id": id_, "email": email, "amount": amount, "note": note}


def change(
    op: str = "u",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    table: TableSchema = ORDERS,
    **kw: Any,
) -> ChangeEvent:
    operation = Operation(op)
    if before is None and operation in (Operation.UPDATE, Operation.DELETE):
        before = row(note="old")
    if after is None and operation in (Operation.CREATE, Operation.UPDATE, Operation.READ):
        after = row()
    return ChangeEvent(operation, table, before, after, kw.pop("source", SOURCE), **kw)


def row_event(op: str = "c", data: dict[str, Any] | None = None, table: TableSchema = ORDERS) -> RowEvent:
    data = row() if data is None else data
    return RowEvent(table, data, data, Operation(op) is Operation.DELETE, Operation(op))


def schema_change() -> SchemaChangeEvent:
    return SchemaChangeEvent("shop", None, "orders", "ALTER TABLE orders ADD note TEXT", SOURCE)


def tx_event() -> TransactionEvent:
    return TransactionEvent(TransactionStatus.BEGIN, "tx-1", SOURCE)


def apply_pure(transform: Transform, event: Event) -> list[Event]:
    """``transform.apply(event)``, asserting the input event (and its row dicts) is unchanged."""
    snapshot = copy.deepcopy(event)
    out = transform.apply(event)
    assert event == snapshot, "transform mutated its input"
    return out


def make(name: str, **config: Any) -> Transform:
    """A transform from dotted config keys given as ``a__b=`` → ``a.b``."""
    return create_transform(name, {k.replace("__", "."): v for k, v in config.items()})


def only(events: list[Event]) -> Any:
    assert len(events) == 1, events
    return events[0]


NON_DATA: tuple[Callable[[], Event], ...] = (schema_change, tx_event)
