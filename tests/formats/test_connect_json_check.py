"""``check_json_struct``: a Debezium source block kept as it came is checked member by member
as JsonConverter reads it; the scalar members are told without a call per member, with the
same result and the same error as :func:`check_json_value` gives for each."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.connect import Column, ConnectType
from transforms.decoders.connect_json import check_json_struct, check_json_value
from transforms.decoders.connect_schema import FieldError
from transforms.values import CoercionError

_TYPES = [
    ConnectType.INT8, ConnectType.INT16, ConnectType.INT32, ConnectType.INT64, ConnectType.FLOAT32,
    ConnectType.FLOAT64, ConnectType.BOOLEAN, ConnectType.STRING, ConnectType.BYTES,
]
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64), st.floats(allow_nan=False),
    st.sampled_from(["", "x", "AAE=", "not base64!"]), st.just([1]), st.just({"a": 1}),
)
_NAMES = ["version", "connector", "ts_ms", "db", "pos", "snapshot"]


def _reference(fields: tuple[Column, ...], value: dict[str, Any], where: str) -> dict[str, Any]:
    """Each member through check_json_value, in order; the undeclared ones dropped."""
    out = {}
    for col in fields:
        checked = check_json_value(col, value.get(col.name), f"{where}.{col.name}")
        if col.name in value:
            out[col.name] = checked
    return {name: out[name] for name in value if name in out}


@settings(max_examples=400, deadline=None)
@example([("connector", ConnectType.BYTES, False)], {"connector": "x"})  # not base64: CoercionError
@given(
    st.lists(st.tuples(st.sampled_from(_NAMES), st.sampled_from(_TYPES), st.booleans()), min_size=1, max_size=5,
             unique_by=lambda f: f[0]),
    st.dictionaries(st.sampled_from([*_NAMES, "undeclared"]), _VALUES, max_size=6),
)
def test_a_struct_checks_as_each_member_does(declared: list[tuple[str, ConnectType, bool]], value: dict[str, Any]) -> None:
    fields = tuple(Column(name, kind, optional) for name, kind, optional in declared)
    try:
        expected: Any = _reference(fields, value, "source")
    except (FieldError, CoercionError) as exc:  # CoercionError: a bytes member that is not base64
        expected = ("error", type(exc), str(exc))
    try:
        got: Any = check_json_struct(fields, value, "source")
    except (FieldError, CoercionError) as exc:
        got = ("error", type(exc), str(exc))
    assert got == expected
    if got == value and not isinstance(got, tuple):
        assert list(got) == list(value)  # the order it came in


def test_an_unchanged_block_is_returned_itself_and_a_changed_one_is_a_copy() -> None:
    fields = (Column("ts_ms", ConnectType.INT64), Column("db", ConnectType.STRING),
              Column("s", ConnectType.STRUCT, fields=(Column("a", ConnectType.INT32),)))
    block = {"db": "shop", "ts_ms": 1, "s": {"a": 1}}
    assert check_json_struct(fields, block, "source") is block
    nested = {"db": "shop", "s": {"a": 1, "b": 2}, "x": 3}
    assert check_json_struct(fields, nested, "source") == {"db": "shop", "s": {"a": 1}}
    assert nested == {"db": "shop", "s": {"a": 1, "b": 2}, "x": 3}  # not modified
    with pytest.raises(FieldError, match=r"source\.ts_ms: expected int64, found str"):
        check_json_struct(fields, {"ts_ms": "1"}, "source")
    with pytest.raises(FieldError, match=r"source\.db: null in a required field"):
        check_json_struct((Column("db", ConnectType.STRING, optional=False),), {}, "source")
