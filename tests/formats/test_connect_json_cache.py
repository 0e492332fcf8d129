"""Connect JSON decoders cache what schemas and row shapes decide; the caches never change results.

``ConnectEnvelopeReader`` caches the columns of envelope and key schemas by their JSON text and
the columns inferred for schemaless images by the images' names and value types, and types cells
with fast converters. Each test decodes a sequence of messages with one decoder (caches warm)
and each message with a fresh decoder too; the outputs (records or errors) must be the same.
"""

from __future__ import annotations

import base64
import copy
import math
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.connect import Column, ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_schema import column_from_schema
from transforms.decoders.connect_values import _fast_decoder, decode_value
from transforms.envelope import EmitOptions, emit
from transforms.errors import DecodeError
from transforms.values import CoercionError


def _outcome(format_id: str, decoder: Any, message: Message) -> Any:
    try:
        return [r.to_json_line() for r in emit(decoder.decode(message), EmitOptions(prefix="t"))]
    except DecodeError as exc:
        return f"{type(exc).__name__}: {exc}"


def assert_cache_transparent(format_id: str, values: list[Any], keys: list[Any] | None = None) -> None:
    """Each message decodes the same with a warm decoder as with a fresh one."""
    shared = create_decoder(format_id)
    for i, value in enumerate(values):
        key = None if keys is None or keys[i] is None else orjson.dumps(keys[i])
        message = Message(value=orjson.dumps(value), key=key, topic="server.inventory.items")
        warm = _outcome(format_id, shared, message)
        fresh = _outcome(format_id, create_decoder(format_id), message)
        assert warm == fresh, f"message {i}: {value!r}"


def _envelope(after: dict[str, Any], fields: list[dict[str, Any]], source_fields: list[dict[str, Any]]) -> Any:
    row = {"type": "struct", "optional": True, "fields": fields}
    return {
        "schema": {
            "type": "struct",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {"type": "struct", "field": "source", "fields": source_fields},
                {"type": "string", "field": "op"},
            ],
        },
        "payload": {
            "before": None,
            "after": after,
            "source": {"db": "inventory", "table": "items", "server_id": "7", "pos": "15", "file": "bin.000002"},
            "op": "c",
        },
    }


ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "bytes", "optional": True, "field": "price", "name": "org.apache.kafka.connect.data.Decimal",
     "parameters": {"scale": "2"}},
    {"type": "string", "optional": True, "field": "name"},
]
SOURCE_FIELDS = [
    {"type": "string", "field": "db"},
    {"type": "int64", "field": "server_id"},
    {"type": "int64", "field": "pos"},
    {"type": "string", "field": "file"},
]


def _variants() -> list[Any]:
    """Envelopes whose schemas are equal as Python values but not as JSON (1 == 1.0 == True)."""
    after = {"id": 1, "price": "AQ==", "name": "x"}
    out = [_envelope(after, ROW_FIELDS, SOURCE_FIELDS)]
    for index, field, value in [
        (1, "scale", 2),
        (1, "scale", 2.0),
        (1, "scale", True),
        (1, "scale", "1"),
        (0, "optional", 0),
        (0, "type", "int64"),
        (0, "type", "string"),
        (2, "type", "int8"),
    ]:
        fields: list[Any] = copy.deepcopy(ROW_FIELDS)
        target = fields[index]["parameters"] if field == "scale" else fields[index]
        target[field] = value
        out.append(_envelope(after, fields, SOURCE_FIELDS))
    for source_type in ("string", "int32", "boolean", "struct", "double"):
        source_fields = copy.deepcopy(SOURCE_FIELDS)
        source_fields[1]["type"] = source_type
        out.append(_envelope(after, ROW_FIELDS, source_fields))
    for after_value in ({"id": "3", "price": 5, "name": 7}, {"id": True, "price": "1.25", "name": None}, {"id": 1}):
        out.append(_envelope(after_value, ROW_FIELDS, SOURCE_FIELDS))
    return out


@pytest.mark.parametrize("format_id", ["debezium-json", "arcion-kafka"])
def test_envelope_schemas_are_cached_by_their_exact_text(format_id: str) -> None:
    values = _variants()
    assert_cache_transparent(format_id, values + values[::-1] + values)


@pytest.mark.parametrize("format_id", ["debezium-json", "arcion-kafka"])
def test_key_schemas_are_cached_by_their_exact_text(format_id: str) -> None:
    value = _envelope({"id": 1, "price": "AQ==", "name": "x"}, ROW_FIELDS, SOURCE_FIELDS)
    keys: list[Any] = [
        {"schema": {"type": "struct", "fields": [{"type": key_type, "optional": optional, "field": "id"}]},
         "payload": {"id": key_value}}
        for key_type in ("int32", "string", "int8", "int64")
        for optional in (False, 0, True)
        for key_value in (1, "1", 300, 1.0)
    ]
    keys += [{"id": 1}, {"other": 1}, None, {"schema": None, "payload": {"id": "2"}}]
    assert_cache_transparent(format_id, [value] * len(keys) * 2, keys + keys[::-1])


SCHEMALESS_VALUES: list[Any] = [1, 1.5, True, "1", None, [], ["a"], ["a", 1], {"a": 1}, 2**63, -1, 0.0]


def test_schemaless_columns_follow_each_message_value_types() -> None:
    """Each message is of its own table: the shape caches (keyed by the images) are shared across
    tables, the per-table memory of inferred types is not (tests/formats/test_stable_inference.py)."""
    values = []
    for first in SCHEMALESS_VALUES:
        for second in SCHEMALESS_VALUES:
            before = {"id": 1, "v": first}
            after = {"id": 1, "v": second} if second is not None else {"id": 1}
            table = f"items{len(values)}"
            values.append({"before": before, "after": after, "op": "u", "source": {"table": table}})
    assert_cache_transparent("debezium-json", values)


def test_mongodb_images_with_dates_and_binaries() -> None:
    docs = ['{"_id": 1, "d": {"$date": 1}}', '{"_id": 1, "d": {"$date": "2020-01-01"}}',
            '{"_id": 1, "d": {"$binary": "AQ=="}}', '{"_id": 1, "d": {"$numberDecimal": "1.5"}}',
            '{"_id": 1, "d": {"$date": 1}}']
    values = [  # a collection each: see test_schemaless_columns_follow_each_message_value_types
        {"after": doc, "op": "c", "source": {"connector": "mongodb", "collection": f"items{i}", "ord": 1, "ts_ms": 5}}
        for i, doc in enumerate(docs)
    ]
    assert_cache_transparent("debezium-json", values)


# -- fast converters --------------------------------------------------------------------------

COLUMNS = [
    column_from_schema(schema, "c")
    for schema in [
        {"type": "int8"},
        {"type": "int32"},
        {"type": "int64"},
        {"type": "string"},
        {"type": "double"},
        {"type": "float"},
        {"type": "boolean"},
        {"type": "bytes", "name": Logical.DECIMAL, "parameters": {"scale": "2"}},
        {"type": "bytes", "name": Logical.DECIMAL, "parameters": {"scale": "0", "connect.decimal.precision": "3"}},
        {"type": "int64", "name": Logical.TIMESTAMP},
        {"type": "int32", "name": Logical.DATE},
        {"type": "string", "name": Logical.ZONED_TIMESTAMP},
        {"type": "string", "name": Logical.JSON},
    ]
] + [Column("t", ConnectType.STRUCT, logical=Logical.TIMESTAMP, fields=(Column("a", ConnectType.INT32),))]

raw_values = st.one_of(
    st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode()),
    st.sampled_from(["", " 1 ", "1.5", "1e3", "nan", "2020-01-02 03:04:05", "2020-01-02", "AQ==", "////", "1_0"]),
    st.text(max_size=6),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.booleans(),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    return bool(a == b)


@pytest.mark.parametrize("col", COLUMNS, ids=lambda c: f"{c.type.value}/{c.logical}")
@settings(max_examples=300, deadline=None)
@given(raw=raw_values)
@example(raw="AQ==")
@example(raw="/////////////w==")
def test_fast_decoder_agrees_with_decode_value(col: Column, raw: Any) -> None:
    fast = _fast_decoder(col)
    if fast is None:
        return
    try:
        expected: Any = decode_value(col, raw)
    except CoercionError:
        expected = CoercionError
    try:
        got = fast(raw)
    except Exception:
        return  # handed over: decode_value decides
    assert expected is not CoercionError, f"fast decoder took {raw!r}, which decode_value rejects"
    assert _same(got, expected), (raw, got, expected)


@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(st.binary(max_size=8), st.binary(min_size=395, max_size=405),
                   st.integers(395, 405).map(lambda n: b"\x7f" + b"\xff" * (n - 1)),
                   st.integers(395, 405).map(lambda n: b"\x80" + b"\x00" * (n - 1))),
    scale=st.one_of(st.integers(0, 4), st.integers(995, 1001), st.integers(-3, -1)),
)
def test_fast_decimal_decoder_agrees_at_the_bounds(data: bytes, scale: int) -> None:
    # the fast path skips check_value for up to 400 bytes at a scale of 0..1000: the longest
    # values and the extreme scales give what decode_value gives, or are handed over
    col = Column("p", ConnectType.BYTES, logical=Logical.DECIMAL, params=(("scale", str(scale)),))
    test_fast_decoder_agrees_with_decode_value.hypothesis.inner_test(col, base64.b64encode(data).decode())  # type: ignore[attr-defined]
