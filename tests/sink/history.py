"""A scripted CDC history as canonical records, and its final state computed in plain Python.

Used by the sink tests: the history is emitted with :func:`transforms.envelope.emit` (the same
code the service uses), so the sink is tested on real canonical records.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, OutRecord, SourceInfo, emit
from transforms.values import UNAVAILABLE

ORDERS = TableSchema(
    "shop",
    None,
    "orders",
    (
        Column("id", ConnectType.INT64, False),
        Column("customer", ConnectType.STRING),
        Column.decimal("amount", 10, 2),
        Column("created", ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP),
        Column("day", ConnectType.INT32, logical=Logical.DATE),
    ),
    ("id",),
)
ORDERS_V2 = ORDERS.with_columns((*ORDERS.columns, Column("note", ConnectType.STRING)))
USERS = TableSchema(
    "shop",
    None,
    "users",
    (Column("tenant", ConnectType.STRING, False), Column("uid", ConnectType.INT32, False), Column("name", ConnectType.STRING)),
    ("tenant", "uid"),
)
EVENTS = TableSchema("shop", None, "events", (Column("msg", ConnectType.STRING), Column("n", ConnectType.INT64)), ())


@dataclass
class History:
    """Events in production order plus the independently computed final state per table.

    A history that says where its micro-batches end has ``batches`` (the events of each, in
    order; ``events`` is their concatenation) and ``states`` (the expected state after each).
    """

    events: list[ChangeEvent] = field(default_factory=list)
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    appended: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    batches: list[list[ChangeEvent]] = field(default_factory=list)
    states: list[dict[str, dict[tuple[Any, ...], dict[str, Any]]]] = field(default_factory=list)

    def records(self, opts: EmitOptions | None = None) -> list[OutRecord]:
        return emit(self.events, opts or EmitOptions(prefix="cdcnorm"))


def _source(seq: int, ts: int) -> SourceInfo:
    return SourceInfo("test", ts_ms=ts, sequence=f"{seq:012d}")


def scripted_history(n_keys: int = 40, n_changes: int = 400, seed: int = 7) -> History:
    """Inserts, updates (some partial), deletes, PK changes, a truncate, duplicates,
    out-of-order sequences and a new column mid-stream, over 3 tables."""
    rnd = random.Random(seed)
    h = History()
    orders: dict[int, dict[str, Any]] = {}
    users: dict[tuple[str, int], dict[str, Any]] = {}
    events_rows: list[dict[str, Any]] = []
    seq = 0
    base_ts = 1_700_000_000_000
    orders_table = ORDERS
    truncated_at = ""
    deleted_orders: dict[int, dict[str, Any]] = {}  # id -> the image its delete carried
    for i in range(n_changes):
        seq += 1
        ts = base_ts + seq
        if i == n_changes // 2:
            orders_table = ORDERS_V2  # new column mid-stream
            for row in orders.values():
                row.setdefault("note", None)
        if i == n_changes // 3:
            # truncate users
            h.events.append(ChangeEvent(Operation.TRUNCATE, USERS, None, None, _source(seq, ts)))
            truncated_at = _source(seq, ts).sequence or ""
            users.clear()
            continue
        kind = rnd.random()
        if kind < 0.55:
            oid = rnd.randrange(n_keys)
            prev = orders.get(oid)
            row = {
                "id": oid,
                "customer": f"c{rnd.randrange(10)}",
                "amount": Decimal(rnd.randrange(100000)) / 100,
                "created": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=seq, microseconds=rnd.randrange(10**6)),
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=rnd.randrange(30)),
            }
            if orders_table is ORDERS_V2:
                row["note"] = rnd.choice([None, "x", "y"])
            if prev is None:
                h.events.append(ChangeEvent(Operation.CREATE, orders_table, None, row, _source(seq, ts)))
                orders[oid] = row
            elif rnd.random() < 0.25:
                h.events.append(ChangeEvent(Operation.DELETE, orders_table, prev, None, _source(seq, ts)))
                del orders[oid]
                deleted_orders[oid] = prev
            elif rnd.random() < 0.3:
                # absent columns keep the stored value: a string (the placeholder), and sometimes a
                # decimal and a date too (null, named in source.unavailable_after)
                absent = ["customer", "amount", "day"] if rnd.random() < 0.5 else ["customer"]
                partial = {**row, **dict.fromkeys(absent, UNAVAILABLE)}
                h.events.append(ChangeEvent(Operation.UPDATE, orders_table, prev, partial, _source(seq, ts)))
                orders[oid] = {**row, **{name: prev[name] for name in absent}}
            elif rnd.random() < 0.15:
                new_id = n_keys + rnd.randrange(n_keys)
                if new_id in orders:
                    continue
                moved = {**row, "id": new_id}
                h.events.append(ChangeEvent(Operation.UPDATE, orders_table, prev, moved, _source(seq, ts)))
                del orders[oid]
                orders[new_id] = moved
            else:
                h.events.append(ChangeEvent(Operation.UPDATE, orders_table, prev, row, _source(seq, ts)))
                orders[oid] = row
        elif kind < 0.85:
            k = (rnd.choice(["a", "b"]), rnd.randrange(n_keys // 2))
            prev_u = users.get(k)
            row_u = {"tenant": k[0], "uid": k[1], "name": f"n{seq}"}
            if prev_u is not None and rnd.random() < 0.2:
                h.events.append(ChangeEvent(Operation.DELETE, USERS, prev_u, None, _source(seq, ts)))
                del users[k]
            else:
                op = Operation.CREATE if prev_u is None else Operation.UPDATE
                h.events.append(ChangeEvent(op, USERS, prev_u, row_u, _source(seq, ts)))
                users[k] = row_u
        else:
            row_e = {"msg": f"m{seq}", "n": seq}
            h.events.append(ChangeEvent(Operation.CREATE, EVENTS, None, row_e, _source(seq, ts)))
            events_rows.append(row_e)
    # duplicates (at-least-once redelivery) and out-of-order stale updates at the end. A
    # duplicate that writes a row deleted by then must not bring it back, wherever the batches
    # split (the sink remembers deleted keys for sink.deleted_keys_retention_seconds). Not
    # redelivered: truncates, nor a users change from before the truncate to a key that is gone
    # at the end (a truncate is not remembered per key: it has none).
    def redeliverable(e: ChangeEvent) -> bool:
        if e.op is Operation.TRUNCATE:
            return False
        if e.table.table == "users" and e.source.sequence is not None and e.source.sequence < truncated_at:
            row = e.after or e.before or {}
            return (row.get("tenant"), row.get("uid")) in users
        return True

    candidates = [e for e in h.events if redeliverable(e)]
    dups = rnd.sample(candidates, k=min(20, len(candidates)))
    h.events.extend(dups)
    for e in dups:
        if e.table is EVENTS:
            events_rows.append(dict(e.after or {}))
    # A stale update (lowest sequence, delivered last) of a row that a delete removed must not
    # re-create it, however long before the delete went in.
    gone = sorted(k for k in deleted_orders if k not in orders)
    if gone:
        before = deleted_orders[gone[0]]
        table = ORDERS_V2 if "note" in before else ORDERS
        stale_row = {**before, "customer": "STALE-DELETED"}
        h.events.append(ChangeEvent(Operation.UPDATE, table, before, stale_row, _source(0, base_ts)))
    # A stale update (lowest sequence, delivered last) of a row that still exists must not
    # overwrite it.
    if orders:
        oid = min(orders)
        current = dict(orders[oid])
        table = ORDERS_V2 if "note" in current else ORDERS
        stale_row = {**current, "customer": "STALE"}
        h.events.append(ChangeEvent(Operation.UPDATE, table, current, stale_row, _source(0, base_ts)))
    h.state["orders"] = {(k,): v for k, v in orders.items()}
    h.state["users"] = {k: v for k, v in users.items()}
    h.appended["events"] = events_rows
    return h


def resurrection_history() -> History:
    """A row deleted in one micro-batch, then stale and newer changes of it in later ones (ORDERS).

    * batch 1: insert id 1 (seq 1), update it (seq 5), delete it (seq 7); insert id 2 (seq 2);
    * batch 2: the update seq 5 replayed (an at-least-once redelivery): id 1 stays deleted;
    * batch 3: a genuinely newer insert of id 1 (seq 9): the row is back, with its image;
    * batch 4: the update seq 5 replayed once more: older than the stored row, ignored.

    ``states[i]`` is the ``orders`` state expected after batch ``i + 1``.
    """
    base_ts = 1_700_000_000_000

    def row(oid: int, customer: str) -> dict[str, Any]:
        return {
            "id": oid,
            "customer": customer,
            "amount": Decimal("1.00") * oid,
            "created": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=oid),
            "day": dt.date(2024, 1, oid),
        }

    first, updated, newer, other = row(1, "first"), row(1, "updated"), row(1, "newer"), row(2, "other")
    update5 = ChangeEvent(Operation.UPDATE, ORDERS, first, updated, _source(5, base_ts + 5))
    h = History()
    h.batches = [
        [
            ChangeEvent(Operation.CREATE, ORDERS, None, first, _source(1, base_ts + 1)),
            ChangeEvent(Operation.CREATE, ORDERS, None, other, _source(2, base_ts + 2)),
            update5,
            ChangeEvent(Operation.DELETE, ORDERS, updated, None, _source(7, base_ts + 7)),
        ],
        [update5],
        [ChangeEvent(Operation.CREATE, ORDERS, None, newer, _source(9, base_ts + 9))],
        [update5],
    ]
    h.events = [e for batch in h.batches for e in batch]
    without_1 = {(2,): other}
    with_newer = {(1,): newer, (2,): other}
    h.states = [{"orders": dict(s)} for s in (without_1, without_1, with_newer, with_newer)]
    h.state = {"orders": dict(with_newer)}
    return h


def stale_fill_history() -> History:
    """A partial update whose missing column the batch could fill only from a stale change (ORDERS).

    * batch 1: insert id 1 (seq 1), update its customer to "c5" (seq 5);
    * batch 2: a late full update of seq 3 (customer "STALE", older than the stored row), then a
      partial update at seq 7 that changes the amount and lacks the customer.

    The customer after batch 2 is "c5": the stored value is newer than the one the batch holds.
    """
    base_ts = 1_700_000_000_000
    first = {"id": 1, "customer": "first", "amount": Decimal("1.00"), "created": dt.datetime(2024, 1, 1),
             "day": dt.date(2024, 1, 1)}
    c5, stale = {**first, "customer": "c5"}, {**first, "customer": "STALE"}
    seven = {**c5, "amount": Decimal("7.00")}
    h = History()
    h.batches = [
        [
            ChangeEvent(Operation.CREATE, ORDERS, None, first, _source(1, base_ts + 1)),
            ChangeEvent(Operation.UPDATE, ORDERS, first, c5, _source(5, base_ts + 5)),
        ],
        [
            ChangeEvent(Operation.UPDATE, ORDERS, first, stale, _source(3, base_ts + 3)),
            ChangeEvent(Operation.UPDATE, ORDERS, None, {**seven, "customer": UNAVAILABLE}, _source(7, base_ts + 7)),
        ],
    ]
    h.events = [e for batch in h.batches for e in batch]
    h.states = [{"orders": {(1,): c5}}, {"orders": {(1,): seven}}]
    h.state = {"orders": {(1,): seven}}
    return h


def truncate_history() -> History:
    """A truncate in one micro-batch, and an older change that arrives a batch later (as one from
    another partition can), then a newer one (USERS).

    * batch 1: insert (a, 1) (seq 1) and (a, 2) (seq 2); truncate (seq 4);
    * batch 2: the update of (a, 1) at seq 3, older than the truncate: ignored, the table stays empty;
    * batch 3: insert (a, 2) at seq 5: there.
    """
    base_ts = 1_700_000_000_000
    a1 = {"tenant": "a", "uid": 1, "name": "one"}
    a2 = {"tenant": "a", "uid": 2, "name": "two"}
    h = History()
    h.batches = [
        [
            ChangeEvent(Operation.CREATE, USERS, None, a1, _source(1, base_ts + 1)),
            ChangeEvent(Operation.CREATE, USERS, None, a2, _source(2, base_ts + 2)),
            ChangeEvent(Operation.TRUNCATE, USERS, None, None, _source(4, base_ts + 4)),
        ],
        [ChangeEvent(Operation.UPDATE, USERS, a1, {**a1, "name": "stale"}, _source(3, base_ts + 3))],
        [ChangeEvent(Operation.CREATE, USERS, None, {**a2, "name": "newer"}, _source(5, base_ts + 5))],
    ]
    h.events = [e for batch in h.batches for e in batch]
    h.states = [{"users": {}}, {"users": {}}, {"users": {("a", 2): {**a2, "name": "newer"}}}]
    h.state = h.states[-1]
    return h
