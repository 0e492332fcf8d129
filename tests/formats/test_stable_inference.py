"""Inferred column types are stable per table (transforms/decoders/schemaless_json.py).

Where a format carries no type metadata (Debezium JSON without a schema, GoldenGate, Maxwell, AWS
DMS) a decoder remembers each table's inferred column types: a column's type is the join of the
types of every non-null value seen so far, so it never goes back, changes at most twice after its
first value, and never puts an integer beyond int64 into an int64 field. A column that has only
been null is undecided (an optional string) until a value arrives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from transforms.connect import Column, ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_json import infer_columns as connect_infer_columns
from transforms.decoders.schemaless_json import (
    INFERRED_TYPES_NAMESPACE,
    ColumnMemory,
    SchemalessShapes,
    dump_types,
    infer_images,
    infer_value,
    load_types,
    widen,
)
from transforms.envelope import EmitOptions, OutRecord, emit
from transforms.metadata import InMemoryMetadataStore

INT = "int64"
DOUBLE = "double"
STRING = "string"
DECIMAL0 = "bytes/org.apache.kafka.connect.data.Decimal"
JSON = "string/io.debezium.data.Json"
BIG = 2**64 - 1


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # the stdlib writes ints of any size


# -- the lattice -------------------------------------------------------------------------------

SAMPLES = [
    None, True, 0, -5, 2**63 - 1, 2**63, BIG, -(2**63), -(2**63) - 1, 1.5, 2.0, "x", "", {"a": 1}, {},
    ["a"], [], [1], ["a", 2],
]
COLUMNS = sorted(
    {c for v in SAMPLES if (c := infer_value("c", v)) is not None}
    | {Column.decimal("c", None, None), Column("c", ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP)},
    key=repr,
)


def test_integers_beyond_int64_infer_an_exact_decimal() -> None:
    for value in (2**63, BIG, -(2**63) - 1, 10**30):
        col = infer_value("c", value)
        assert col is not None and col.logical == Logical.DECIMAL and col.scale == 0
    for value in (2**63 - 1, -(2**63), 0):
        assert infer_value("c", value) == Column("c", ConnectType.INT64)


@pytest.mark.parametrize(
    ("a", "b", "joined"),
    [
        (1, 1.5, DOUBLE),
        (1, BIG, DECIMAL0),
        (1.5, BIG, STRING),
        (True, 1, STRING),
        (["a"], [1], JSON),
        (["a"], {"a": 1}, JSON),
        ({"a": 1}, "x", STRING),
        (1, "x", STRING),
    ],
)
def test_widen_is_the_join(a: Any, b: Any, joined: str) -> None:
    ca, cb = infer_value("c", a), infer_value("c", b)
    assert ca is not None and cb is not None
    assert _label(widen(ca, cb)) == _label(widen(cb, ca)) == joined


def test_widen_is_a_join_semilattice_of_height_two() -> None:
    for a in COLUMNS:
        assert widen(a, a) == a
        for b in COLUMNS:
            ab = widen(a, b)
            assert ab == widen(b, a)
            assert widen(ab, a) == ab and widen(ab, b) == ab  # an upper bound of both
            for c in COLUMNS:
                assert widen(ab, c) == widen(a, widen(b, c))
    # every chain a < b < c < d has at most two steps
    for a in COLUMNS:
        steps = 0
        current = a
        for b in COLUMNS:
            up = widen(current, b)
            if up != current:
                steps += 1
                current = up
        assert steps <= 2, (a, current)


def test_one_message_joins_its_images() -> None:
    inferred = infer_images([{"a": 1, "b": None, "c": True}, {"a": 2.5, "b": None, "c": 1}])
    assert [_label(c) for c in inferred.columns] == [DOUBLE, STRING, STRING]
    assert inferred.undecided == {"b"}
    # the Connect reader: the same join; the UNAVAILABLE marker is a string value there
    assert [c.type.value for c in connect_infer_columns({"a": 1}, {"a": BIG})] == ["bytes"]


# -- the memory --------------------------------------------------------------------------------


def _types(memory: ColumnMemory, table: str, row: dict[str, Any]) -> list[str]:
    return [_label(c) for c in memory.table(table).apply(infer_images([row]))]


def test_the_first_value_sticks_and_widens_once() -> None:
    memory = ColumnMemory()
    rows = [{"k": 1, "v": None}, {"k": BIG, "v": 2}, {"k": 3, "v": 2.5}, {"k": 4, "v": 7}, {"k": 5, "v": "x"}]
    assert [_types(memory, "t", r) for r in rows] == [
        [INT, STRING],  # v undecided: null fixes nothing
        [DECIMAL0, INT],
        [DECIMAL0, DOUBLE],
        [DECIMAL0, DOUBLE],  # never back to int64
        [DECIMAL0, STRING],
    ]
    assert _types(memory, "other", {"k": 1}) == [INT]  # per table


def test_null_does_not_fix_or_reset_a_type() -> None:
    memory = ColumnMemory()
    assert _types(memory, "t", {"v": None}) == [STRING]
    assert _types(memory, "t", {"v": None}) == [STRING]
    assert _types(memory, "t", {"v": 1.5}) == [DOUBLE]
    assert _types(memory, "t", {"v": None}) == [DOUBLE]


def test_the_memory_is_bounded_by_tables_and_columns() -> None:
    memory = ColumnMemory(max_tables=2, max_columns=5)
    for name in ("a", "b", "c"):
        _types(memory, name, {"x": 1})
    assert len(memory) == 2 and memory.weight == 2  # "a" was dropped
    _types(memory, "b", {f"c{i}": 1 for i in range(4)})  # b: 5 columns, c: 1 -> c goes
    assert len(memory) == 1 and memory.weight == 5
    _types(memory, "b", {f"d{i}": 1 for i in range(6)})  # b alone over the budget: it starts over
    assert memory.weight <= 5
    assert _types(memory, "a", {"x": 2.5}) == [DOUBLE]  # a dropped table infers afresh


def test_every_inferred_type_is_kept_by_its_kind() -> None:
    """The store's kinds name every type the inference gives: each column and each join."""
    for a in COLUMNS:
        for b in COLUMNS:
            for col in (a, widen(a, b)):
                assert load_types(dump_types({"c": col})) == {"c": col}
    with pytest.raises(ValueError, match="the inference does not give"):
        dump_types({"c": Column.decimal("c", 10, 2)})


def test_the_memory_keeps_its_types_in_the_store() -> None:
    """Widened types are written to the store at once; a memory that meets the table (a restart,
    another replica, after dropping it) reads them back; a write joins what the store holds."""
    store = InMemoryMetadataStore()
    first = ColumnMemory(store=store)
    assert _types(first, "t", {"k": 1, "v": None}) == [INT, STRING]
    assert store.get(INFERRED_TYPES_NAMESPACE, '"t"') == {"k": "int64"}  # v is undecided: not kept
    assert _types(first, "t", {"k": 2.5}) == [DOUBLE]
    restarted = ColumnMemory(store=store)
    assert _types(restarted, "t", {"k": 1, "v": None}) == [DOUBLE, STRING]
    # another replica widens v meanwhile; the first memory's next write joins it
    assert _types(restarted, "t", {"v": True}) == ["boolean"]
    assert _types(first, "t", {"w": 1}) == [INT]
    assert store.get(INFERRED_TYPES_NAMESPACE, '"t"') == {"k": "double", "v": "boolean", "w": "int64"}
    assert _types(first, "t", {"v": None}) == ["boolean"]
    # a dropped (or re-created) table is typed afresh, by every memory sharing the store
    first.forget("t")
    assert store.get(INFERRED_TYPES_NAMESPACE, '"t"') is None
    assert _types(ColumnMemory(store=store), "t", {"k": 1}) == [INT]
    # a document not understood (a newer version's kind) loses only that column
    store.put(INFERRED_TYPES_NAMESPACE, '"u"', {"a": "int64", "b": "hyperloglog"})
    assert _types(ColumnMemory(store=store), "u", {"a": 1.5, "b": 1}) == [DOUBLE, INT]


_rows_of_abc = st.dictionaries(st.sampled_from("abcdef"), st.sampled_from([None, 1, 2.5, "x", 2**64]), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("pqrs"), _rows_of_abc), max_size=40))
def test_property_the_memory_counts_what_it_holds(ops: list[tuple[str, dict[str, Any]]]) -> None:
    """Columns and kept resolutions are counted; the count stays within the budget; a kept
    resolution is what applying the change again gives."""
    memory = ColumnMemory(max_tables=3, max_columns=12)
    tokens: dict[str, object] = {}  # a token stands for one inferred change
    for table, row in ops:
        inferred = infer_images([row])
        token = tokens.setdefault(repr(list(row.items())), object())
        entry = memory.table(table)
        resets = entry._resets
        expected = entry.apply(inferred)
        got = entry.resolved(token, inferred, lambda cols: cols)
        assert got == expected or entry._resets != resets  # (a table that starts over)
        assert memory.weight == sum(t.weight for t in memory._tables.values())
        assert memory.weight <= 12 and len(memory) <= 3


def test_shape_cache_and_memory_agree() -> None:
    """A cached shape is typed as the table's memory types it, per table."""
    shapes = SchemalessShapes()
    first = shapes.infer({"id": 1, "v": 1.5})
    shapes.table(first, "d", None, "t", ("id",))
    again = shapes.infer({"id": 2, "v": 3})
    table = shapes.table(again, "d", None, "t", ("id",))
    assert [_label(c) for c in table.columns] == [INT, DOUBLE]
    assert [_label(c) for c in again.columns] == [INT, DOUBLE]
    other = shapes.infer({"id": 2, "v": 3})
    assert [_label(c) for c in shapes.table(other, "d", None, "u", ("id",)).columns] == [INT, INT]


# -- through the decoders ----------------------------------------------------------------------


def _debezium(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Message:
    value = {"before": before, "after": after, "source": {"db": "d", "table": "t"}, "op": op}
    row = after if after is not None else before
    assert row is not None
    return Message(value=_dumps(value), key=_dumps({"id": row["id"]}), topic="t")


def _ogg(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Message:
    doc = {"table": "S.T", "op_type": {"c": "I", "u": "U", "d": "D"}[op], "primary_keys": ["id"]}
    if before is not None:
        doc["before"] = before
    if after is not None:
        doc["after"] = after
    return Message(value=_dumps(doc), topic="t")


def _maxwell(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Message:
    kind = {"c": "insert", "u": "update", "d": "delete"}[op]
    doc: dict[str, Any] = {"database": "d", "table": "t", "type": kind, "ts": 1, "primary_key_columns": ["id"]}
    doc["data"] = after if after is not None else before
    if op == "u":
        doc["old"] = before
    return Message(value=_dumps(doc), topic="t")


def _dms(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Message:
    operation = {"c": "insert", "u": "update", "d": "delete"}[op]
    meta = {"record-type": "data", "operation": operation, "table-name": "t", "schema-name": "d"}
    return Message(value=_dumps({"data": after if after is not None else before, "metadata": meta}), topic="t")


Builder = Callable[[str, "dict[str, Any] | None", "dict[str, Any] | None"], Message]
FORMATS: dict[str, Builder] = {
    "debezium-json": _debezium,
    "ogg-json": _ogg,
    "maxwell-json": _maxwell,
    "aws-dms-json": _dms,
}


def _images(op: str, before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any] | None, ...]:
    """The images of a change that the decoder reads (AWS DMS: no before image without its options)."""
    if op == "c":
        return None, after
    if op == "d":
        return before, None
    return before, after


def _label(col: Column | dict[str, Any]) -> str:
    if isinstance(col, Column):
        kind, name = col.type.value, col.logical
        items = col.items.type.value if col.items is not None else None
    else:
        kind, name = col["type"], col.get("name")
        items = col["items"]["type"] if "items" in col else None
    label = f"{kind}/{name}" if name else kind
    return f"{label}<{items}>" if items else label


def _row_fields(record: OutRecord) -> dict[str, str] | None:
    """Column -> type label of a change record's row struct (None for tombstones and others)."""
    if record.value is None or "schema" not in record.value:
        return None
    for field in record.value["schema"]["fields"]:
        if field["field"] == "after":
            return {f["field"]: _label(f) for f in field["fields"]}
    return None


def _decode_all(format_id: str, messages: list[Message]) -> list[list[OutRecord]]:
    decoder = create_decoder(format_id)
    return [emit(decoder.decode(m), EmitOptions(prefix="p")) for m in messages]


def _sequence(format_id: str, changes: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]) -> list[dict[str, str]]:
    out = []
    for records in _decode_all(format_id, [FORMATS[format_id](*c) for c in changes]):
        fields = [f for r in records if (f := _row_fields(r)) is not None]
        out.append(fields[0])
    return out


@pytest.mark.parametrize("format_id", FORMATS)
def test_a_key_column_that_goes_beyond_int64_stays_decimal(format_id: str) -> None:
    rows = [{"id": 1, "v": 1}, {"id": BIG, "v": BIG}, {"id": 2, "v": 3}, {"id": 3, "v": 4.5}]
    types = [(f["id"], f["v"]) for f in _sequence(format_id, [("c", None, r) for r in rows])]
    assert types == [(INT, INT), (DECIMAL0, DECIMAL0), (DECIMAL0, DECIMAL0), (DECIMAL0, STRING)]


def test_the_debezium_key_follows_the_row_columns() -> None:
    rows = [{"id": 1}, {"id": BIG}, {"id": 2}]
    records = _decode_all("debezium-json", [_debezium("c", None, r) for r in rows])
    key_types = [[_label(f) for f in rs[0].key["schema"]["fields"]] for rs in records if rs[0].key]
    assert key_types == [[INT], [DECIMAL0], [DECIMAL0]]


def test_a_debezium_delete_without_before_is_typed_by_the_memory() -> None:
    """The before image built from the Kafka key takes the table's type for the key column."""
    messages = [
        _debezium("c", None, {"id": BIG}),
        Message(
            value=_dumps({"before": None, "after": None, "source": {"db": "d", "table": "t"}, "op": "d"}),
            key=_dumps({"id": 2}),
            topic="t",
        ),
    ]
    delete = _decode_all("debezium-json", messages)[1][0]
    assert _row_fields(delete) == {"id": DECIMAL0}
    assert delete.value is not None and delete.value["payload"]["before"] == {"id": "Ag=="}


def test_debezium_flat_rows_remember_their_table() -> None:
    decoder = create_decoder("debezium-json", {"unwrapped": "true"})
    types = []
    for row in ({"id": 1, "__table": "t"}, {"id": BIG, "__table": "t"}, {"id": 2, "__table": "t"}):
        (record,) = emit(decoder.decode(Message(value=_dumps(row), topic="d.t")), EmitOptions(prefix="p"))
        types.append(_row_fields(record))
    assert types == [{"id": INT}, {"id": DECIMAL0}, {"id": DECIMAL0}]


# -- property: random sequences of changes of one table ----------------------------------------


_ints = st.integers(-(2**63), 2**63 - 1)
_values = st.one_of(
    st.none(),
    st.booleans(),
    _ints,
    st.integers(2**63, BIG),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=2),
    st.lists(st.text(max_size=2), max_size=2),
)
_ids = st.one_of(_ints, st.integers(2**63, BIG), st.text(min_size=1, max_size=3))
_rows = st.builds(
    lambda id_, rest: {"id": id_, **rest},
    _ids,
    st.dictionaries(st.sampled_from(["a", "b", "c"]), _values, max_size=3),
)
_changes = st.lists(st.tuples(st.sampled_from(["c", "u", "d"]), _rows, _rows), min_size=1, max_size=8)


@pytest.mark.parametrize("format_id", FORMATS)
def test_property_types_only_widen_and_values_fit(format_id: str, connect_checker: Any) -> None:
    """For any sequence of changes of one table: a column's type (once it has had a non-null
    value) equals the join of every value seen so far, never goes back and changes at most twice;
    before that it is a string; every record is accepted by the real Connect runtime."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_changes)
    def check(changes: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
        changes = [(op, *_images(op, b, a)) for op, b, a in changes]
        if format_id == "aws-dms-json":  # no before image without the before-image options
            changes = [(op, None if op == "u" else b, a) for op, b, a in changes]
        records = _decode_all(format_id, [FORMATS[format_id](*c) for c in changes])
        seen: dict[str, Column] = {}
        history: dict[str, list[str]] = {}
        for (_, before, after), out in zip(changes, records, strict=True):
            for image in (before, after):
                for name, value in (image or {}).items():
                    col = infer_value(name, value)
                    if col is not None:
                        seen[name] = col if name not in seen else widen(seen[name], col)
            fields = [f for r in out if (f := _row_fields(r)) is not None]
            assert fields, out
            for name, label in fields[0].items():
                if name not in seen:
                    assert label == STRING, (name, label)
                    continue
                assert label == _label(seen[name]), (name, label, seen[name])
                if not history.get(name) or history[name][-1] != label:
                    history.setdefault(name, []).append(label)
        for name, labels in history.items():
            assert len(labels) == len(set(labels)), f"{name} went back: {labels}"
            assert len(labels) <= 3, f"{name} changed more than twice: {labels}"
        assert_connect_accepts(connect_checker, [r for out in records for r in out], f"{format_id} records")

    check()


@pytest.mark.parametrize("format_id", FORMATS)
def test_property_a_restart_types_the_records_as_one_run(format_id: str) -> None:
    """Decoders sharing a metadata store (a worker restarted halfway, the CLI's one store) write
    byte-identical records to one decoder that reads every change: the inferred types live in
    the store, not in the decoder."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_changes, st.integers(min_value=0, max_value=8))
    def check(changes: list[tuple[str, dict[str, Any], dict[str, Any]]], cut: int) -> None:
        messages = [FORMATS[format_id](op, *_images(op, b, a)) for op, b, a in changes]
        options = EmitOptions(prefix="p")
        one = create_decoder(format_id, metadata=InMemoryMetadataStore())
        whole = [emit(one.decode(m), options) for m in messages]
        store = InMemoryMetadataStore()
        halves = [emit(create_decoder(format_id, metadata=store).decode(m), options) for m in messages[:cut]]
        restarted = create_decoder(format_id, metadata=store)
        halves += [emit(restarted.decode(m), options) for m in messages[cut:]]
        assert halves == whole

    check()
