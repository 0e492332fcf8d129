"""Per-table state is bounded by the table budget (columns), not by a count of tables (issue 29).

A database of more tables than any fixed count must not make the decoders, the transforms and
the emitter rebuild every table's schema per message; past the budget, the least recently used
tables go, and what is kept never weighs more than the budget.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import transforms.envelope_codec as envelope_codec
from bench.typed_canal import canal_message
from service.app import Normalizer
from service.config import parse_config
from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders import Message, create_decoder
from transforms.decoders.rowplan import RowPlans
from transforms.envelope import ChangeEvent, EmitOptions, Event, emit
from transforms.errors import ConfigError
from transforms.pipeline import Pipeline
from transforms.table_budget import (
    DEFAULT_TABLE_BUDGET,
    TableLru,
    set_table_budget,
    table_budget,
    table_weight,
)

COLUMNS = 8  # the columns of bench.typed_canal's tables


class Builds:
    """The tables whose canal schema the decoder built (a cache miss), in order.

    A table's events carry the schema object the decoder built for it, the same object for as
    long as the decoder keeps it: a new object is a build. (Observed on the events, not by
    patching the decoder, whose compiled methods cannot be patched: transforms.compiled.)
    """

    def __init__(self) -> None:
        self.tables: list[str] = []
        self._last: dict[str, TableSchema] = {}

    def see(self, events: list[Event]) -> None:
        for event in events:
            assert isinstance(event, ChangeEvent)
            if self._last.get(event.table.table) is not event.table:
                self.tables.append(event.table.table)
                self._last[event.table.table] = event.table

    def __len__(self) -> int:
        return len(self.tables)

    def clear(self) -> None:
        self.tables.clear()


def _run(pipeline: Pipeline, tables: int, rounds: int, builds: Builds | None = None) -> list[bytes]:
    """The records' values of ``rounds`` messages per table (``Pipeline.process``, its events seen)."""
    out = []
    for i in range(tables * rounds):
        events = pipeline.events(Message(value=canal_message(i, tables), topic="src"))
        if builds is not None:
            builds.see(events)
        for record in emit(events, pipeline.emit_options):
            value = record.value_bytes()
            assert value is not None
            out.append(value)
    return out


@pytest.fixture
def builds() -> Builds:
    return Builds()


def test_more_tables_than_the_old_count_bounds_are_built_once(builds: Builds) -> None:
    """5,000 tables (the caches used to hold 4,096): each schema is built once, however often met."""
    pipeline = Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm"))
    _run(pipeline, 5_000, 2, builds)
    assert len(builds) == 5_000


@pytest.fixture
def fresh_emitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emitter's process-wide caches, empty (a budget applies to a cache at its next insert)."""
    monkeypatch.setattr(envelope_codec, "_codec_cache", TableLru(lambda key, _: len(key[0].columns)))
    monkeypatch.setattr(envelope_codec, "_last_codec", [None])


def test_past_the_budget_the_least_recently_used_tables_go(
    builds: Builds, table_budget: Callable[[int], None], fresh_emitter: None
) -> None:
    table_budget(10 * table_weight(COLUMNS))  # room for 10 tables in each per-table cache
    decoder = create_decoder("canal-json")
    pipeline = Pipeline(decoder, EmitOptions(prefix="cdcnorm"))
    _run(pipeline, 30, 2, builds)
    assert len(builds) == 60  # 30 tables round-robin through room for 10: every message misses
    builds.clear()
    _run(pipeline, 10, 3, builds)  # 10 tables fit: built once, then kept
    assert len(builds) == 10
    budget = table_budget_now()
    assert len(envelope_codec._codec_cache) == 10
    for cache in (decoder._shapes, decoder._tables._tables, decoder._plans._by_columns,
                  envelope_codec._codec_cache):
        assert cache.weight <= budget
    # what a table object keeps for itself (its row plan and codec, TableSchema.memo) goes with it:
    # the table objects still alive that hold a plan of this decoder are those of the 10 tables kept
    builds._last.clear()
    gc.collect()
    holding = {o.table for o in gc.get_objects() if type(o) is TableSchema and decoder._plans in o.memo}
    assert holding == {f"t{i}" for i in range(10)}


def table_budget_now() -> int:
    return table_budget()


def test_the_output_does_not_depend_on_the_budget(table_budget: Callable[[int], None]) -> None:
    """Forgetting a table and building it again gives the same bytes as keeping it."""
    kept = _run(Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm")), 50, 2)
    table_budget(1_000)
    forgotten = _run(Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm")), 50, 2)
    assert forgotten == kept
    first = orjson.loads(kept[0])
    assert first["schema"]["name"] == "cdcnorm.shop.t0.Envelope" and first["payload"]["after"]["id"] == 0


def test_tables_with_the_same_columns_share_one_row_plan() -> None:
    plans = RowPlans()
    columns = (Column("id", ConnectType.INT64, False), Column("v", ConnectType.STRING))
    a = plans.plan(TableSchema("db", None, "a", columns, ("id",)))
    assert plans.plan(TableSchema("db", None, "b", columns, ("id",))) is a


def test_an_lru_keeps_within_its_budget_and_evicts_the_oldest(table_budget: Callable[[int], None]) -> None:
    table_budget(8)
    cache: TableLru[str, int] = TableLru(lambda _, columns: columns)
    cache.put("a", 2)  # weighs 3
    cache.put("b", 2)
    assert cache.get("a") == 2  # a is now the most recent
    cache.put("c", 2)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), cache.weight) == (2, None, 2, 6)
    cache.put("huge", 100)  # above the whole budget: not kept, nothing evicted
    assert cache.get("huge") is None and cache.weight == 6
    table_budget(3)  # a smaller budget applies at the next insert
    cache.put("d", 1)
    assert cache.weight <= 3 and cache.get("d") == 1


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_a_bad_budget_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="whole number of columns"):
        set_table_budget(bad)
    assert table_budget() == DEFAULT_TABLE_BUDGET


def test_the_worker_takes_the_budget_from_its_config(table_budget: Callable[[int], None]) -> None:
    raw = {"topics": [{"name": "src", "format": "canal-json"}], "worker": {"table_cache_columns": 250_000}}
    Normalizer(parse_config(raw, for_worker=False))
    assert table_budget_now() == 250_000


def test_a_budget_below_the_floor_stops_the_config_with_its_key() -> None:
    raw = {"topics": [{"name": "src", "format": "canal-json"}], "worker": {"table_cache_columns": 10}}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, for_worker=False)
    assert "worker.table_cache_columns" in str(caught.value)


def test_tables_with_the_same_columns_share_their_row_encoding() -> None:
    """Many tables of one structure (the tenants of one database) read one set of encoders."""
    columns = (Column("id", ConnectType.INT64, False), Column.decimal("price", 10, 2))
    opts = EmitOptions(prefix="cdcnorm")
    a = envelope_codec._codec(TableSchema("db", None, "a", columns, ("id",)), opts)
    b = envelope_codec._codec(TableSchema("db", None, "b", columns, ("id",)), opts)
    assert a.row_schema["name"] != b.row_schema["name"]  # each table its own names
    assert a.encoders and a.encoders is b.encoders and a.absent_marks is b.absent_marks
    assert a.key_encoders is b.key_encoders


def test_a_records_bytes_are_its_documents_json_however_its_schema_json_is_found() -> None:
    """The emitter's records find their schemas' JSON in their table's codec (OutRecord.schemas);
    a copy, a record whose value was replaced, and a schema-less document give the same bytes as
    serializing the documents."""
    import copy

    pipeline = Pipeline(create_decoder("canal-json"), EmitOptions(prefix="cdcnorm"))
    records = [r for i in range(6) for r in pipeline.process(Message(value=canal_message(i, 3), topic="src"))]
    for record in records:
        assert record.schemas is not None
        for twin in (record, copy.copy(record), copy.deepcopy(record)):
            assert twin.key_bytes() == orjson.dumps(record.key)
            assert twin.value_bytes() == orjson.dumps(record.value)
        assert record.value is not None
        record.value = {"schema": dict(record.value["schema"], name="other"), "payload": record.value["payload"]}
        assert record.value_bytes() == orjson.dumps(record.value)
        record.value = {"payload": record.value["payload"], "schema": record.value["schema"]}
        assert record.value_bytes() == orjson.dumps(record.value)


def test_a_table_object_keeps_a_bounded_memo_however_many_options_objects_meet_it() -> None:
    """Options made per call (equal, not the same object) do not grow what a table keeps."""
    from transforms.connect import MEMO_ENTRIES

    decoder = create_decoder("canal-json")
    events = decoder.decode(Message(value=canal_message(0, 1), topic="src"))
    table = events[0].table
    first = [r.value_bytes() for r in emit(events, EmitOptions(tombstones=False))]
    for _ in range(100):
        assert [r.value_bytes() for r in emit(events, EmitOptions(tombstones=False))] == first
    assert len(table.memo) <= MEMO_ENTRIES
