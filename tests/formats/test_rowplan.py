"""Row plans: a fast converter returns exactly what ``coerce_checked`` returns, or hands over."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import coerce_checked
from transforms.decoders.rowplan import NotFast, RowPlan, RowPlans, fast_converter
from transforms.values import UNAVAILABLE, CoercionError

COLUMNS = [
    Column("i8", ConnectType.INT8),
    Column("i16", ConnectType.INT16),
    Column("i32", ConnectType.INT32),
    Column("i64", ConnectType.INT64),
    Column("s", ConnectType.STRING),
    Column("f64", ConnectType.FLOAT64),
    Column("f32", ConnectType.FLOAT32),
    Column("b", ConnectType.BOOLEAN),
    Column.decimal("d", 10, 2),
    Column.decimal("dv", None, None),
    Column("ts", ConnectType.INT64, logical=Logical.TIMESTAMP),
    Column("mts", ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP),
    Column("nts", ConnectType.INT64, logical=Logical.NANO_TIMESTAMP),
    Column("cts", ConnectType.INT64, logical=Logical.CONNECT_TIMESTAMP),
    Column("cdate", ConnectType.INT32, logical=Logical.CONNECT_DATE),
    Column("date", ConnectType.INT32, logical=Logical.DATE),
]

# text that the slow path treats in its own ways: spaces, signs, separators, exponents,
# non-ASCII digits, special floats, zero dates, the placeholder of an unavailable value
texts = st.one_of(
    st.from_regex(r"\A\s?[+-]?[0-9_]{0,22}(\.[0-9]{0,4})?([eE][+-]?[0-9]{1,4})?\s?\Z"),
    st.sampled_from(["", " ", "nan", "NaN", "inf", "-Infinity", "1e999", "1e-999", "١٢٣", "0x10", "1_000",
                     "0000-00-00 00:00:00", "2020-01-02 03:04:05.123456", "2020-02-30", "2020-01-02T03:04:05Z",
                     "2020-01-02", " 2020-01-02 ", "true", "1", "0", "yes", UNAVAILABLE, "9" * 30, "1" * 1001]),
    st.text(max_size=8),
)
raw_values = st.one_of(
    texts,
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.booleans(),
    st.decimals(allow_nan=True),
    st.lists(st.integers(), max_size=2),
)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()  # the same digits and exponent, not just equal
    return bool(a == b)


@pytest.mark.parametrize("col", COLUMNS, ids=lambda c: c.name)
@settings(max_examples=400, deadline=None)
@given(raw=raw_values)
@example(raw="70000")
@example(raw=" 12 ")
@example(raw="1_2")
def test_fast_converter_agrees_with_coerce_checked(col: Column, raw: Any) -> None:
    fast = fast_converter(col)
    assert fast is not None
    try:
        expected: Any = coerce_checked(col, raw)
    except CoercionError:
        expected = CoercionError
    try:
        got: Any = fast(raw)
    except Exception:
        return  # handed over: the full converter decides
    assert expected is not CoercionError, f"fast converter took {raw!r}, which the full conversion rejects"
    assert _same(got, expected), (raw, got, expected)


def test_plan_passes_nulls_and_marks_absent_columns() -> None:
    calls: list[str] = []

    def slow(col: Column, raw: Any, field: str, payload: bytes | str | None) -> Any:
        calls.append(field)
        return coerce_checked(col, raw)

    plan = RowPlan((Column("id", ConnectType.INT64), Column("t", ConnectType.STRING, logical=Logical.JSON)),
                   fast_converter)
    assert plan.typed({"id": "7", "t": {"a": 1}}, "data[0]", None, slow) == {"id": 7, "t": '{"a":1}'}
    assert calls == ["data[0].t"]  # no fast converter for JSON: the full converter, with the field path
    assert plan.typed({"id": None}, "data[1]", None, slow) == {"id": None, "t": UNAVAILABLE}


def test_plan_falls_back_for_values_the_fast_converter_does_not_take() -> None:
    def slow(col: Column, raw: Any, field: str, payload: bytes | str | None) -> Any:
        raise ValueError(field)

    plan = RowPlan((Column("n", ConnectType.INT16),), fast_converter)
    with pytest.raises(ValueError, match=r"^data\[0\]\.n$"):
        plan.typed({"n": "70000"}, "data[0]", None, slow)


def test_plans_are_kept_by_the_table_instance_and_shared_by_columns_within_a_bound() -> None:
    plans = RowPlans(max_tables=2)
    t1 = TableSchema("db", None, "a", (Column("id", ConnectType.INT64),), ("id",))
    plan = plans.plan(t1)
    assert plans.plan(t1) is plan and t1.memo[plans] is plan  # the instance keeps it
    assert plans.plan(TableSchema("db", None, "z", t1.columns, ("id",))) is plan  # same columns: shared
    for name in "bcd":  # other columns past the bound: the shared cache starts over rather than grow
        plans.plan(TableSchema("db", None, name, (Column(name, ConnectType.INT64),), (name,)))
    assert len(plans._by_columns) <= 2
    assert plans.plan(t1) is plan


def test_not_fast_is_what_the_int_converter_raises() -> None:
    convert = fast_converter(Column("n", ConnectType.INT8))
    assert convert is not None
    with pytest.raises(NotFast):
        convert(128)
