"""Partial-image completion against the in-memory row-state store."""

from __future__ import annotations

import copy
import itertools
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.completion import SEQUENCE_FIELD, complete_partial_images, row_key, table_enabled
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    RowEvent,
    SchemaChangeEvent,
    SourceInfo,
    TransactionEvent,
    TransactionStatus,
)
from transforms.metadata import InMemoryRowStateStore
from transforms.values import UNAVAILABLE

U = UNAVAILABLE
T = TableSchema(
    "shop",
    None,
    "orders",
    tuple(Column(n, ConnectType.STRING) for n in ("id", "a", "b", "c")),
    ("id",),
)
OTHER = T.with_name("shop", None, "items")
NO_KEY = T.with_key(())
SRC = SourceInfo("qlik-json")


def ev(
    op: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None, table: TableSchema = T
) -> ChangeEvent:
    return ChangeEvent(Operation(op), table, before, after, SRC)


class CountingStore(InMemoryRowStateStore):
    """Counts store calls (batching is part of the contract)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[tuple[str, list[str]]] = []
        self.puts: list[tuple[str, dict[str, Any]]] = []

    def get_rows(self, table: str, keys: list[str]) -> list[dict[str, Any] | None]:
        self.gets.append((table, list(keys)))
        return super().get_rows(table, keys)

    def put_rows(self, table: str, rows: dict[str, dict[str, Any] | None]) -> None:
        self.puts.append((table, dict(rows)))
        super().put_rows(table, rows)

    def image(self, key: Any, table: str = "shop.orders") -> dict[str, Any] | None:
        return super().get_rows(table, [row_key({"id": key})])[0]


def complete(events: list[Event], store: CountingStore, tables: Any = None) -> list[Event]:
    snapshot = copy.deepcopy(events)
    out = complete_partial_images(events, store, tables)
    assert events == snapshot, "completion mutated its input"
    return out


def test_fills_absent_after_columns_from_the_stored_image() -> None:
    store = CountingStore()
    complete([ev("c", after={"id": "1", "a": "x", "b": "y", "c": None})], store)
    out = complete([ev("u", after={"id": "1", "a": "x2", "b": U, "c": U})], store)
    assert out[0].after == {"id": "1", "a": "x2", "b": "y", "c": None}  # type: ignore[union-attr]
    assert store.image("1") == {"id": "1", "a": "x2", "b": "y", "c": None}


def test_column_missing_from_stored_image_stays_unavailable() -> None:
    store = CountingStore()
    complete([ev("c", after={"id": "1", "a": "x"})], store)
    out = complete([ev("u", after={"id": "1", "a": U, "b": U})], store)
    assert out[0].after == {"id": "1", "a": "x", "b": U}  # type: ignore[union-attr]
    assert store.image("1") == {"id": "1", "a": "x"}  # only known columns are stored


def test_unknown_row_stays_partial_and_partial_image_is_remembered() -> None:
    store = CountingStore()
    out = complete([ev("u", after={"id": "1", "a": U, "b": "y"})], store)
    assert out[0].after == {"id": "1", "a": U, "b": "y"}  # type: ignore[union-attr]
    out = complete([ev("u", after={"id": "1", "a": "x", "b": U})], store)
    assert out[0].after == {"id": "1", "a": "x", "b": "y"}  # type: ignore[union-attr]


def test_after_prefers_the_events_own_before_image() -> None:
    store = CountingStore()
    complete([ev("c", after={"id": "1", "a": "stale"})], store)
    out = complete([ev("u", before={"id": "1", "a": "fresh"}, after={"id": "1", "a": U})], store)
    assert out[0].after == {"id": "1", "a": "fresh"}  # type: ignore[union-attr]


def test_before_filled_and_delete_forgets_the_row() -> None:
    store = CountingStore()
    complete([ev("r", after={"id": "1", "a": "x", "b": "y"})], store)
    out = complete([ev("d", before={"id": "1", "a": U, "b": "y"})], store)
    assert out[0].before == {"id": "1", "a": "x", "b": "y"}  # type: ignore[union-attr]
    assert store.image("1") is None


def test_key_change_moves_the_image() -> None:
    store = CountingStore()
    complete([ev("c", after={"id": "1", "a": "x", "b": "y"})], store)
    out = complete([ev("u", before={"id": "1", "a": U, "b": U}, after={"id": "2", "a": U, "b": "z"})], store)
    assert out[0].before == {"id": "1", "a": "x", "b": "y"}  # type: ignore[union-attr]
    assert out[0].after == {"id": "2", "a": "x", "b": "z"}  # type: ignore[union-attr]
    assert store.image("1") is None and store.image("2") == {"id": "2", "a": "x", "b": "z"}


def test_events_without_key_or_disabled_tables_are_left_alone() -> None:
    store = CountingStore()
    no_key = ev("u", after={"id": "1", "a": U}, table=NO_KEY)
    key_absent = ev("u", after={"id": U, "a": U})
    other = ev("c", after={"id": "1", "a": "x"}, table=OTHER)
    events: list[Event] = [no_key, key_absent, other]
    out = complete(events, store, {"shop.orders"})
    assert all(a is b for a, b in zip(out, events, strict=True))
    assert store.gets == [] and store.puts == []


def test_non_changes_pass_through() -> None:
    store = CountingStore()
    events: list[Event] = [
        SchemaChangeEvent("shop", None, "orders", "ALTER", SRC),
        TransactionEvent(TransactionStatus.BEGIN, "1", SRC),
        RowEvent(T, {"id": "1", "a": U}, {"id": "1"}, False, Operation.UPDATE),
        ev("t"),
    ]
    out = complete(events, store)
    assert all(a is b for a, b in zip(out, events, strict=True))
    assert store.gets == [] and store.puts == []


def test_store_access_is_batched_per_call() -> None:
    store = CountingStore()
    complete([ev("c", after={"id": str(i), "a": "x", "b": "y"}) for i in range(3)], store)
    assert store.gets == []  # full images need no lookup
    assert len(store.puts) == 1 and len(store.puts[0][1]) == 3
    store.gets.clear()
    store.puts.clear()
    batch: list[Event] = [
        ev("u", after={"id": "0", "a": U, "b": "1"}),
        ev("u", after={"id": "1", "a": U, "b": "1"}),
        ev("u", after={"id": "0", "a": "2", "b": U}),
        ev("c", after={"id": "9", "a": "n", "b": "n"}),
        ev("u", after={"id": "9", "a": U, "b": "m"}),
        ev("d", before={"id": "2", "a": U, "b": U}),
        ev("c", after={"id": "1", "a": "o"}, table=OTHER),
    ]
    out = complete(batch, store)
    assert store.gets == [("shop.orders", [row_key({"id": k}) for k in ("0", "1", "9", "2")])]
    assert [t for t, _ in store.puts] == ["shop.orders", "shop.items"]
    afters = [getattr(e, "after", None) for e in out]
    assert afters[0] == {"id": "0", "a": "x", "b": "1"}
    assert afters[2] == {"id": "0", "a": "2", "b": "1"}  # sees the earlier change of the same call
    assert afters[4] == {"id": "9", "a": "n", "b": "m"}  # filled from the insert in this call
    assert out[5].before == {"id": "2", "a": "x", "b": "y"}  # type: ignore[union-attr]
    assert store.image("0") == {"id": "0", "a": "2", "b": "1"} and store.image("2") is None


def test_table_selectors() -> None:
    assert table_enabled(None, T)
    assert table_enabled({"*"}, T)
    assert table_enabled({"orders"}, T)
    assert table_enabled({"shop.orders"}, T)
    assert not table_enabled({"shop.items"}, T)
    pg = TableSchema("db", "public", "orders", T.columns, T.key)
    assert table_enabled({"db.public.orders"}, pg) and table_enabled({"db.orders"}, pg)
    assert table_enabled(lambda t: t.table == "orders", T)
    store = CountingStore()
    complete([ev("c", after={"id": "1", "a": "x"})], store, lambda t: False)
    assert store.puts == []


def test_stored_images_are_not_shared_with_events() -> None:
    store = CountingStore()
    after = {"id": "1", "a": "x"}
    complete([ev("c", after=after)], store)
    stored = store.image("1")
    assert stored == after and stored is not after


def test_row_key_of_typed_values() -> None:
    assert row_key({"id": Decimal("1.50"), "b": b"\x01"}) == '{"id":"1.5","b":"01"}'
    assert row_key({"id": 1}) != row_key({"id": "1"})


COLUMNS = ("a", "b", "c")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """Successive true rows of one key; the images sent (unchanged columns may be absent); batch cuts."""
    values = st.one_of(st.none(), st.text(max_size=3))
    truth = [{"id": "k", **{c: draw(values) for c in COLUMNS}}]
    for _ in range(draw(st.integers(0, 8))):
        truth.append({**truth[-1], **draw(st.dictionaries(st.sampled_from(COLUMNS), values))})
    sent = [truth[0]]
    for prev, cur in itertools.pairwise(truth):
        unchanged = [c for c in COLUMNS if cur[c] == prev[c]]
        hide = draw(st.sets(st.sampled_from(unchanged))) if unchanged else set()
        sent.append({k: (U if k in hide else v) for k, v in cur.items()})
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(sent) - 1)))))
    return truth, sent, cuts


@settings(max_examples=200, deadline=None)
@given(histories())
def test_completed_images_equal_the_true_rows_however_batched(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]],
) -> None:
    truth, sent, cuts = case
    events: list[Event] = [ev("c", after=sent[0]), *(ev("u", after=a) for a in sent[1:])]
    store = CountingStore()
    out: list[Event] = []
    for start, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
        out.extend(complete_partial_images(events[start:end], store))
    assert [e.after for e in out] == truth  # type: ignore[union-attr]
    assert store.image("k") == truth[-1]
    assert all(len(p[1]) == 1 for p in store.puts) and all(len(g[1]) <= 1 for g in store.gets)


def seq_ev(op: str, seq: int, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> ChangeEvent:
    return ChangeEvent(Operation(op), T, before, after, SourceInfo("qlik-json", sequence=f"{seq:08d}"))


def test_a_replay_behind_the_stored_image_is_not_completed_from_it() -> None:
    """At-least-once: a crash after the store moved on replays older changes; the stored image
    is of a later version, so their absent columns stay absent and the store keeps its image."""
    store = CountingStore()
    first = [
        seq_ev("c", 1, after={"id": "1", "a": "a1", "b": "b1"}),
        seq_ev("u", 2, after={"id": "1", "a": "a2", "b": U}),  # b unchanged: b1
        seq_ev("u", 3, after={"id": "1", "a": "a3", "b": "b3"}),
    ]
    assert [e.after for e in complete(list(first), store)] == [  # type: ignore[union-attr]
        {"id": "1", "a": "a1", "b": "b1"}, {"id": "1", "a": "a2", "b": "b1"}, {"id": "1", "a": "a3", "b": "b3"}]
    assert store.image("1") == {"id": "1", "a": "a3", "b": "b3", SEQUENCE_FIELD: "00000003"}
    puts = len(store.puts)
    replayed = complete(first[1:], store)  # the same changes again, from the second one
    # not b3 (a later version's value): absent, as for a forgotten row
    assert replayed[0].after == {"id": "1", "a": "a2", "b": U}  # type: ignore[union-attr]
    assert replayed[1].after == {"id": "1", "a": "a3", "b": "b3"}  # type: ignore[union-attr]
    assert store.image("1") == {"id": "1", "a": "a3", "b": "b3", SEQUENCE_FIELD: "00000003"}
    assert len(store.puts) == puts + 1  # only the change at the stored sequence wrote (the same image)
    # the change after the replayed ones completes from the right image
    out = complete([seq_ev("u", 4, after={"id": "1", "a": "a4", "b": U})], store)
    assert out[0].after == {"id": "1", "a": "a4", "b": "b3"}  # type: ignore[union-attr]


def test_the_replay_of_the_stored_change_fills_after_not_before() -> None:
    store = CountingStore()
    complete([seq_ev("c", 1, after={"id": "1", "a": "a1", "b": "b1"}),
              seq_ev("u", 2, before={"id": "1", "a": U, "b": U}, after={"id": "1", "a": "a2", "b": U})], store)
    out = complete([seq_ev("u", 2, before={"id": "1", "a": U, "b": U}, after={"id": "1", "a": "a2", "b": U})], store)
    assert out[0].after == {"id": "1", "a": "a2", "b": "b1"}  # type: ignore[union-attr]
    assert out[0].before == {"id": "1", "a": U, "b": U}  # type: ignore[union-attr]  (a2 is not its before)


def test_a_replay_with_nothing_absent_rewinds_the_store_and_the_rest_of_it_restores_it() -> None:
    """A replayed change without absent columns does not read the store (reads are only for
    partial images): its image replaces the stored one, and the replay, which goes on in order,
    brings the store back to the last version."""
    store = CountingStore()
    events = [seq_ev("c", 1, after={"id": "1", "a": "a1", "b": "b1"}),
              seq_ev("d", 2, before={"id": "1", "a": "a1", "b": "b1"}),
              seq_ev("c", 3, after={"id": "1", "a": "a3", "b": "b3"}),
              seq_ev("u", 4, after={"id": "1", "a": "a4", "b": U})]
    complete(list(events), store)
    replayed = complete(events[1:], store)
    assert replayed[2].after == {"id": "1", "a": "a4", "b": "b3"}  # type: ignore[union-attr]
    assert store.image("1") == {"id": "1", "a": "a4", "b": "b3", SEQUENCE_FIELD: "00000004"}


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_replays_never_complete_with_another_versions_values(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]], data: st.DataObject,
) -> None:
    """Changes 0..done-1 processed, then (a crash) processed again from ``start <= done`` to
    the end: every completed cell is the true value of its own version (or stays absent), and
    the last change and the store end with the true row."""
    truth, sent, _ = case
    events: list[Event] = [seq_ev("c", 0, after=sent[0]),
                           *(seq_ev("u", i, after=a) for i, a in enumerate(sent[1:], 1))]
    done = data.draw(st.integers(0, len(events)))
    start = data.draw(st.integers(0, done))
    store = CountingStore()
    out = complete_partial_images(events[:done], store) + complete_partial_images(events[start:], store)
    versions = [*range(done), *range(start, len(events))]
    for i, event in zip(versions, out, strict=True):
        after = event.after  # type: ignore[union-attr]
        assert all(v == truth[i][k] or (v == U and sent[i][k] == U) for k, v in after.items()), (i, after, truth[i])
    assert out[-1].after == truth[-1]  # type: ignore[union-attr]
    assert {k: v for k, v in (store.image("k") or {}).items() if k != SEQUENCE_FIELD} == truth[-1]


def test_the_in_memory_store_bounds_each_table_on_its_own() -> None:
    store = InMemoryRowStateStore(max_rows=3)
    for table in ("db.a", "db.b"):
        store.put_rows(table, {str(k): {"id": k} for k in range(3)})
    assert store.get_rows("db.a", ["0", "1", "2"]) == [{"id": 0}, {"id": 1}, {"id": 2}]  # b's images evict none of a's
    store.put_rows("db.a", {"1": {"id": 1, "v": 2}})  # rewritten: the most recent
    store.put_rows("db.a", {"3": {"id": 3}, "4": {"id": 4}})  # two more: the 2 least recently written go
    assert store.get_rows("db.a", ["0", "1", "2", "3", "4"]) == [None, {"id": 1, "v": 2}, None, {"id": 3}, {"id": 4}]
    assert store.get_rows("db.b", ["0", "1", "2"]) == [{"id": 0}, {"id": 1}, {"id": 2}]
    store.put_rows("db.b", {"0": None})
    assert store.get_rows("db.b", ["0", "1"]) == [None, {"id": 1}]
