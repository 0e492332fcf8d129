"""History tables (``sink.tables`` mode: history, SCD type 2): the timeline rules on their own
(:func:`sink.scd2.versions`), then the scripted history (late and replayed changes, partial rows,
key changes, deletes, a truncate) through the sink, against versions computed here from the
history's events, and a replay of the same offsets that changes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sink.scd2 import Event, _check_strings, in_order, key_of, unchanged_since, versions
from sink.types import IncompatibleSchemaError
from tests.sink.history import History, scripted_history
from tests.sink.scripted import (  # noqa: F401 (the spark and broker fixtures)
    ScriptedBroker,
    scripted_broker,
    scripted_config,
    scripted_sink,
    scripted_spark,
    stored_id,
)
from transforms.envelope import Operation
from transforms.values import UNAVAILABLE

COLS = ["id", "n"]


def _v(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["n"], r["__cdc_seq"], r["__cdc_end_seq"], r["__is_current"]) for r in rows]


def _stored(n: str, seq: str, end: str | None, ts: int, end_ts: int | None = None) -> dict[str, Any]:
    at = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
    to = None if end_ts is None else dt.datetime.fromtimestamp(end_ts / 1000, dt.UTC)
    return {"id": 1, "n": n, "__cdc_seq": seq, "__cdc_op": "c", "__valid_from": at, "__valid_to": to,
            "__cdc_end_seq": end, "__is_current": end is None, "__cdc_ts_ms": ts}


def test_a_late_change_splits_the_version_it_falls_in() -> None:
    stored = [_stored("a", "s1", "s5", 1000, 5000), _stored("b", "s5", None, 5000)]
    got = versions(stored, [Event("s3", "u", {"id": 1, "n": "late"}, 3000)], COLS)
    assert _v(got) == [("a", "s1", "s3", False), ("late", "s3", "s5", False)]
    assert got[1]["__valid_to"] == dt.datetime.fromtimestamp(5, dt.UTC)


def test_a_replayed_change_changes_nothing_and_a_delete_closes_the_current_version() -> None:
    stored = [_stored("a", "s1", "s5", 1000, 5000), _stored("b", "s5", None, 5000)]
    assert versions(stored, [Event("s5", "u", {"id": 1, "n": "b"}, 5000)], COLS) == []
    assert _v(versions(stored, [Event("s7", "d", None, 7000)], COLS)) == [("b", "s5", "s7", False)]


def test_a_stale_change_of_a_deleted_key_stays_in_the_past() -> None:
    stored = [_stored("a", "s1", "s4", 1000, 4000)]  # deleted at s4: no version begins there
    got = versions(stored, [Event("s2", "u", {"id": 1, "n": "stale"}, 2000)], COLS)
    assert _v(got) == [("a", "s1", "s2", False), ("stale", "s2", "s4", False)]


def test_a_partial_change_takes_the_missing_columns_from_the_version_before() -> None:
    got = versions([_stored("a", "s1", None, 1000)], [Event("s2", "u", {"id": 1, "n": None}, 2000, frozenset({"n"}))], COLS)
    assert _v(got) == [("a", "s1", "s2", False), ("a", "s2", None, True)]


def test_a_truncate_ends_the_current_version() -> None:
    got = versions([_stored("a", "s1", None, 1000)], [Event("s3", "t", None, 3000), Event("s4", "c", {"id": 1, "n": "x"}, 4000)], COLS)
    assert _v(got) == [("a", "s1", "s3", False), ("x", "s4", None, True)]


# -- through the sink ---------------------------------------------------------------------------


def _expected(history: History, table: str, key: tuple[str, ...]) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
    """Per key, its versions (data columns, valid from/to in ms, current) from the history's events:
    each insert or update begins one at its source sequence (a key change ends the old key's),
    a delete or a truncate ends the open one, a redelivered sequence is the same change; a column
    a change lacks keeps the value of the version before."""
    per_key: dict[tuple[Any, ...], dict[str, tuple[str, dict[str, Any] | None, int]]] = {}
    truncates = []

    def add(k: tuple[Any, ...], seq: str, row: dict[str, Any] | None, ts: int) -> None:
        per_key.setdefault(k, {}).setdefault(seq, ("start" if row is not None else "end", row, ts))

    for e in history.events:
        if e.table.table != table:
            continue
        seq, ts = e.source.sequence or "", e.source.ts_ms or 0
        if e.op is Operation.TRUNCATE:
            truncates.append((seq, ts))
            continue
        before = tuple((e.before or {}).get(c) for c in key)
        after = tuple((e.after or {}).get(c) for c in key)
        if e.op is Operation.DELETE:
            add(before, seq, None, ts)
        else:
            if e.op is Operation.UPDATE and before != after:
                add(before, seq, None, ts)
            add(after, seq, dict(e.after or {}), ts)
    out: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for k, events in per_key.items():
        for seq, ts in truncates:
            events.setdefault(seq, ("end", None, ts))
        rows: list[list[Any]] = []
        previous: dict[str, Any] = {}
        for seq in sorted(events):
            kind, row, ts = events[seq]
            if rows and rows[-1][2] is None:
                rows[-1][2], rows[-1][3] = ts, False
            if kind == "start":
                assert row is not None
                filled = {c: (previous.get(c) if v == UNAVAILABLE else v) for c, v in row.items()}
                previous = filled
                rows.append([filled, ts, None, True])
        out[k] = [(r[0], r[1], r[2], r[3]) for r in rows]
    return out


def _table_versions(spark: Any, tid: str, key: tuple[str, ...], columns: list[str]) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
    def ms(value: dt.datetime | None) -> int | None:
        return None if value is None else round(value.replace(tzinfo=value.tzinfo or dt.UTC).timestamp() * 1000)

    out: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in spark.sql(f"SELECT * FROM {tid} ORDER BY __cdc_seq").collect():
        row = r.asDict()
        out.setdefault(tuple(row[c] for c in key), []).append(
            ({c: row[c] for c in columns}, ms(row["__valid_from"]), ms(row["__valid_to"]), row["__is_current"]))
    return out


def test_only_a_batch_newer_than_the_table_without_a_truncate_is_in_order() -> None:
    """Which batches the row-delta path takes (the rest are MERGEd): per sequence class, as the
    upsert's row deltas (sink.write_plan)."""

    class C:
        def __init__(self, seq: str, op: Operation = Operation.UPDATE) -> None:
            self.seq, self.op = seq, op

    assert in_order([C("s0005"), C("s0009")], {"s": "s0004"})
    assert in_order([C("s0001")], {})  # a new table
    assert not in_order([C("s0005"), C("s0003")], {"s": "s0004"})  # a late change
    assert not in_order([C("s0005", Operation.TRUNCATE)], {"s": "s0004"})
    assert not in_order([C("k0001:0005")], {"s": "s0004"})  # no source sequence in a table ordered by them
    assert in_order([C("k0001:0005")], {"k0001": "k0001:0004", "k0002": "k0002:0009"})
    assert not in_order([C("s0005")], None)  # not known


def test_a_value_that_is_not_text_in_a_string_column_pauses_the_table() -> None:
    """Two sources that disagree on a column's type (seen with the samples of `cdcnorm up`:
    aws-dms-json's shop.orders.ordered_on is a string in one message, a date in the next): the
    MERGE's Spark rows would store the date as a Java object's text; the table is paused instead."""
    _check_strings("t", ["s"], [{"s": "2024-01-02"}, {"s": None}, {"n": 1}])
    with pytest.raises(IncompatibleSchemaError, match="column s is a string column, a change holds date"):
        _check_strings("t", ["s"], [{"s": "x"}, {"s": dt.date(2024, 1, 2)}])


def test_keys_compare_as_spark_returns_them() -> None:
    zoned = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert key_of((zoned, bytearray(b"ab"), 3)) == (dt.datetime(2024, 1, 1, 10), b"ab", 3)


def test_the_kept_current_versions_hold_while_only_compactions_followed() -> None:
    class Snapshot:
        def __init__(self, sid: int, op: str, parent: int | None) -> None:
            self.sid, self.op, self.parent = sid, op, parent

        def snapshotId(self) -> int:
            return self.sid

        def operation(self) -> str:
            return self.op

        def parentId(self) -> int | None:
            return self.parent

    class Table:
        def __init__(self, *chain: Snapshot) -> None:
            self.by_id = {s.sid: s for s in chain}
            self.current = chain[-1] if chain else None

        def currentSnapshot(self) -> Snapshot | None:
            return self.current

        def snapshot(self, sid: int) -> Snapshot | None:
            return self.by_id.get(sid)

    ours = Snapshot(1, "overwrite", None)
    assert unchanged_since(Table(ours), 1)
    assert unchanged_since(Table(ours, Snapshot(2, "replace", 1), Snapshot(3, "replace", 2)), 1)  # maintenance
    assert not unchanged_since(Table(ours, Snapshot(2, "overwrite", 1)), 1)  # another write
    assert not unchanged_since(Table(Snapshot(5, "replace", None)), 1)  # our snapshot expired: not known
    assert unchanged_since(Table(), None) and not unchanged_since(Table(ours), None)


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.parametrize("cache_rows", [500_000, 5])
def test_history_tables_hold_every_version_and_a_replay_changes_nothing(spark: Any, broker: ScriptedBroker,
                                                                        cache_rows: int) -> None:
    """The scripted history into history tables, with the current versions kept in memory
    (``sink.history_cache_rows``), and with a budget the tables outgrow after their first batch
    (5: kept, then dropped, then read per batch): the same versions either way."""
    history = scripted_history(n_keys=12, n_changes=120, seed=29)
    history.batches = [history.events[i:i + 50] for i in range(0, len(history.events), 50)]
    namespace = f"history_mode_{cache_rows}"
    config = scripted_config(namespace=namespace, deleted_keys_table=f"{namespace}_meta.deleted_keys",
                             history_cache_rows=cache_rows,
                             tables={"shop.orders": {"mode": "history", "partition_by": ["bucket(2, customer)"]},
                                     "shop.users": {"mode": "history"}})
    sink = scripted_sink(spark, config, broker)
    paths = [0, 0]
    for i in range(len(history.batches)):
        broker.feed(history, i)
        report = sink.run_batch()
        paths[0] += report.row_deltas
        paths[1] += report.merges
    # ordered batches are row deltas (sink.scd2: the current versions kept in memory); the
    # truncate, the redeliveries and the stale changes at the end are MERGEd
    assert paths[0] > 0 and paths[1] > 0, paths
    assert sink.tables is not None
    for table, key in (("orders", ("id",)), ("users", ("tenant", "uid"))):
        want = _expected(history, table, key)
        columns = sorted({c for versions_ in want.values() for v in versions_ for c in v[0]})
        got = _table_versions(spark, stored_id(sink, table), key, columns)
        want = {k: [({c: v[0].get(c) for c in columns}, *v[1:]) for v in vs] for k, vs in want.items()}
        assert set(got) == set(want), table
        for k in want:
            assert got[k] == want[k], f"{table} {k}"
        assert sum(v[3] for vs in got.values() for v in vs) == len(history.state[table]), "one current version per live key"
        assert any(len(vs) > 2 for vs in got.values()), f"{table}: no key with a history"
    # the stale changes (the lowest sequence, delivered last) are versions in the past, not current
    stale = [v for vs in _table_versions(spark, stored_id(sink, "orders"), ("id",), ["customer"]).values()
             for v in vs if str(v[0]["customer"]).startswith("STALE")]
    assert stale and not any(v[3] for v in stale), stale
    tid = stored_id(sink, "orders")
    before = sorted(map(tuple, spark.table(tid).collect()))
    # a replay of the same offsets (the group's offsets reset to the start) changes nothing
    broker.rewind(sink, config.group_id)
    again = scripted_sink(spark, config, broker)
    report = again.run_batch()
    assert report.skipped_applied > 0, report.line()
    assert sorted(map(tuple, spark.table(tid).collect())) == before
