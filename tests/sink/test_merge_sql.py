"""The MERGE statement of a batch, without Spark: partial-update columns keep their stored value
through a CASE, every other column is a plain assignment (so Spark prunes the target scan)."""

from __future__ import annotations

from typing import Any

import pytest

import sink.iceberg as ice
from sink.changes import SinkChange
from sink.config import SinkConfig

COLUMNS = {"id": "bigint", "customer": "string", "amount": "decimal(10,2)"}


class FakeFrame:
    def createOrReplaceTempView(self, name: str) -> None:
        pass


class FakeSpark:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.catalog = self

    def sql(self, statement: str) -> None:
        self.statements.append(statement)

    def dropTempView(self, name: str) -> None:
        pass


def _change(key: int, op: str = "u", unavailable: frozenset[str] = frozenset()) -> SinkChange:
    row = {"id": key, "customer": None if "customer" in unavailable else "c", "amount": None}
    return SinkChange(("db", "t"), op, (key,), row, f"s{key:04d}", 0, (), ("id",), "topic", 0, key, unavailable)


def _merge(changes: list[SinkChange], monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[bool]]:
    spark = FakeSpark()
    tables = ice.IcebergTables(spark, SinkConfig.from_section({"topics": ["t"]}))  # type: ignore[arg-type]
    calls: list[bool] = []  # with_unavailable of each frame built

    def frame(state: Any, batch: list[SinkChange], with_unavailable: bool, with_key: bool = False) -> FakeFrame:
        assert not with_key  # no deleted keys consulted
        calls.append(with_unavailable)
        return FakeFrame()

    monkeypatch.setattr(tables.merger, "frame", frame)
    counts: dict[str, int] = {}
    tables.merger.merge("`lake`.`db`.`t`", ice._TableState(dict(COLUMNS), ("id",)), changes, counts)
    assert counts == {"deletes": sum(c.op == "d" for c in changes), "upserts": sum(c.op != "d" for c in changes)}
    (statement,) = spark.statements
    return statement, calls


def test_complete_images_use_plain_assignments(monkeypatch: pytest.MonkeyPatch) -> None:
    statement, with_unavailable = _merge([_change(1), _change(2, "d")], monkeypatch)
    assert with_unavailable == [False]
    assert "CASE" not in statement and "__cdc_unavailable" not in statement
    assert "t.`customer` = s.`customer`" in statement and "t.`amount` = s.`amount`" in statement


def test_partial_images_keep_only_their_missing_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    statement, with_unavailable = _merge([_change(1), _change(2, unavailable=frozenset({"customer"}))], monkeypatch)
    assert with_unavailable == [True]
    assert (
        "t.`customer` = CASE WHEN array_contains(s.`__cdc_unavailable`, 'customer') THEN t.`customer` "
        "WHEN try_element_at(s.`__cdc_filled`, 'customer') <= t.`__cdc_seq` THEN t.`customer` "
        "ELSE s.`customer` END"
    ) in statement
    assert "t.`amount` = s.`amount`" in statement and "t.`id` = s.`id`" in statement


def test_filled_columns_keep_a_newer_stored_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A column compaction filled from an earlier change of the batch is a CASE too, though no
    change of the batch lacks it any more."""
    filled = _change(2)
    filled.filled["amount"] = "s0001"
    statement, with_unavailable = _merge([_change(1), filled], monkeypatch)
    assert with_unavailable == [True]
    assert "WHEN try_element_at(s.`__cdc_filled`, 'amount') <= t.`__cdc_seq` THEN t.`amount`" in statement
    assert "t.`customer` = s.`customer`" in statement


def _merge_with_deleted_keys(changes: list[SinkChange], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    spark = FakeSpark()
    spark.sql = lambda statement: spark.statements.append(statement) or FakeFrame()  # type: ignore[method-assign]
    tables = ice.IcebergTables(spark, SinkConfig.from_section({"topics": ["t"]}))  # type: ignore[arg-type]
    frames: list[dict[str, Any]] = []
    monkeypatch.setattr(tables.merger, "frame", lambda *_, **kw: frames.append(kw) or FakeFrame())
    tables.merger.merge("`lake`.`db`.`t`", ice._TableState(dict(COLUMNS), ("id",)), changes, {}, deleted_keys="db.t")
    assert frames == [{"with_unavailable": False, "with_key": True}]  # the source carries the key as text
    return spark.statements


def test_remembered_deletes_filter_the_merge_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change that is not a delete and not newer than a remembered delete of its key leaves the
    source before the MERGE; the memory is cut down to the table and the batch's keys first."""
    live, merge = _merge_with_deleted_keys([_change(1), _change(2, "d")], monkeypatch)
    assert "`lake`.`cdcnorm`.`deleted_keys` m LEFT SEMI JOIN b ON m.`__cdc_key` = b.`__cdc_key`" in live
    assert "WHERE m.`__cdc_table` = 'db.t'" in live
    assert "/*+ BROADCAST(b) */" in live
    assert ("LEFT ANTI JOIN d ON s.`__cdc_key` = d.`__cdc_key` AND s.`__cdc_op` <> 'd' "
            "AND d.`__cdc_deleted_seq` >= s.`__cdc_seq`") in live
    view = live.split(" FROM ", 1)[1].split()[0]
    assert f"USING {view}_live s" in merge


def test_a_batch_of_deletes_only_needs_no_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    (merge,) = _merge_with_deleted_keys([_change(1, "d"), _change(2, "d")], monkeypatch)
    assert merge.startswith("MERGE INTO") and "_live" not in merge


def test_one_table_remembers_the_deleted_keys_of_every_table() -> None:
    tables = ice.IcebergTables(FakeSpark(), SinkConfig.from_section({"topics": ["t"]}))  # type: ignore[arg-type]
    assert tables.deleted_keys.table_id() == "`lake`.`cdcnorm`.`deleted_keys`"
    assert tables.iceberg_name(("shop", "orders")) == "shop.orders"
    named = SinkConfig.from_section({"topics": ["t"], "deleted_keys_table": "meta.gone", "namespace": "lakehouse"})
    tables = ice.IcebergTables(FakeSpark(), named)  # type: ignore[arg-type]
    assert tables.deleted_keys.table_id() == "`lake`.`meta`.`gone`"
    assert tables.iceberg_name(("lakehouse", "orders")) == "lakehouse.orders"  # the parser names it (TableNames)


def test_the_memory_is_consulted_only_for_changes_a_remembered_delete_can_supersede(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In an ordered stream every change is newer than the table's newest sequence (which counts
    its deletes): the MERGE then has no anti-join against the deleted keys."""
    tables = ice.IcebergTables(FakeSpark(), SinkConfig.from_section({"topics": ["t"]}))  # type: ignore[arg-type]
    monkeypatch.setattr(tables.deleted_keys, "exist", lambda: True)
    state = ice._TableState(dict(COLUMNS), ("id",), newest={"s": "s0005"})
    assert not tables.deleted_keys.may_be_superseded(state, [_change(6), _change(7)])
    assert tables.deleted_keys.may_be_superseded(state, [_change(5), _change(9)])  # seq 5: deleted at 5 is not older
    assert tables.deleted_keys.may_be_superseded(state, [_change(9), _change(3, "d"), _change(4)])  # the oldest is not the first
    assert not tables.deleted_keys.may_be_superseded(state, [_change(9), _change(3, "d")])  # an old delete alone needs no lookup
    assert not tables.deleted_keys.may_be_superseded(state, [_change(2, "d")])  # deletes only
    state.newest = {}  # nothing given to the table yet
    assert not tables.deleted_keys.may_be_superseded(state, [_change(1)])
    monkeypatch.setattr(tables.deleted_keys, "exist", lambda: False)  # no memory (retention 0, or no delete yet)
    assert not tables.deleted_keys.may_be_superseded(ice._TableState(dict(COLUMNS), ("id",), newest={"s": "s0009"}), [_change(1)])


def test_maintenance_comes_due_once_per_cadence_at_a_different_commit_per_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A database of tables written by the same micro-batches is not maintained all in one."""
    config = SinkConfig.from_section({"topics": ["t"], "maintenance": {"every_batches": 20}})
    tables = ice.IcebergTables(FakeSpark(), config)  # type: ignore[arg-type]
    maintained: list[tuple[str, int]] = []
    names = [f"t{i}" for i in range(50)]
    for name in names:
        tables._state[tables.table_id(("db", name))] = ice._TableState(dict(COLUMNS), ("id",))
    for commits in range(1, 60):
        for name in names:
            state = tables._state[tables.table_id(("db", name))]
            state.commits = commits
            if tables.maintenance_due(("db", name)):
                maintained.append((name, commits))
    per_table = {name: [c for n, c in maintained if n == name] for name in names}
    assert all(len(due) == 2 and due[1] - due[0] == 20 for due in per_table.values()), per_table
    first = [due[0] for due in per_table.values()]
    assert min(first) >= 20, "a table maintained before its first 20 commits"
    assert len(set(first)) > 10, f"50 tables come due at only {sorted(set(first))}"
