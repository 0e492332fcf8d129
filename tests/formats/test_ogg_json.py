"""Behaviour of the ogg-json decoder: op types, compressed images, names, position, errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from tests.formats.strategies import json_values
from transforms.decoders import Message, create_decoder
from transforms.decoders.ogg_json import OggJsonDecoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, emit
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE

BASE = {"table": "OGG.TBL_TEST", "op_ts": "2020-05-13 17:26:27.936000", "pos": "00000000000000000000152"}


def decode(doc: Any) -> list[Any]:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return OggJsonDecoder().decode(Message(raw))


def one_change(doc: Any) -> ChangeEvent:
    events = decode(doc)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def test_registered() -> None:
    assert isinstance(create_decoder("ogg-json"), OggJsonDecoder)


@pytest.mark.parametrize(
    ("op_type", "op"),
    [("I", Operation.CREATE), ("U", Operation.UPDATE), ("D", Operation.DELETE), ("T", Operation.TRUNCATE)],
)
def test_op_types(op_type: str, op: Operation) -> None:
    event = one_change({**BASE, "op_type": op_type, "before": {"id": 1}, "after": {"id": 1}})
    assert event.op is op
    assert (event.before is None) == (op in (Operation.CREATE, Operation.TRUNCATE))
    assert (event.after is None) == (op in (Operation.DELETE, Operation.TRUNCATE))


def test_table_name_source_time_and_sequence() -> None:
    event = one_change(
        {**BASE, "op_type": "I", "current_ts": "2020-05-13T13:39:35.766000", "after": {"id": 1}}
    )
    assert (event.table.db, event.table.schema, event.table.table) == (None, "OGG", "TBL_TEST")
    assert event.source.ts_ms == 1589390787936  # op_ts, UTC
    assert event.ts_ms == 1589377175766  # current_ts
    assert event.source.fields["pos"] == "00000000000000000000152"
    assert event.source.sequence == "00000000000000000000152".zfill(32)


def test_three_part_name_keeps_catalog_in_source() -> None:
    event = one_change({**BASE, "table": "PDB1.HR.EMP", "op_type": "I", "after": {"id": 1}})
    assert (event.table.schema, event.table.table) == ("HR", "EMP")
    assert event.source.fields["catalog"] == "PDB1"


def test_sequence_sorts_in_position_order() -> None:
    seqs = [
        one_change({**BASE, "pos": p, "op_type": "I", "after": {"id": 1}}).source.sequence or ""
        for p in ("99", "100", "00000000000000000000101")
    ]
    assert seqs == sorted(seqs)


def test_primary_keys_give_the_key() -> None:
    event = one_change({**BASE, "op_type": "I", "primary_keys": ["id"], "after": {"id": 1, "x": 2}})
    assert event.table.key == ("id",)


def test_compressed_update_columns_absent_from_an_image_are_unavailable() -> None:
    doc = {
        **BASE,
        "op_type": "U",
        "primary_keys": ["ID"],
        "before": {"ID": 1, "SAL": 10},
        "after": {"ID": 1, "SAL": 12, "NOTE": None},
    }
    event = one_change(doc)
    assert event.before == {"ID": 1, "SAL": 10, "NOTE": UNAVAILABLE}
    assert event.after == {"ID": 1, "SAL": 12, "NOTE": None}


def test_is_missing_flags_mark_unavailable_columns() -> None:
    before = {"A": "x", "A_isMissing": False, "B": None, "B_isMissing": True, "C": None, "C_isMissing": False}
    event = one_change({**BASE, "op_type": "D", "before": before})
    assert event.before == {"A": "x", "B": UNAVAILABLE, "C": None}
    assert [c.name for c in event.table.columns] == ["A", "B", "C"]


def test_update_without_before_has_null_before() -> None:
    event = one_change({**BASE, "op_type": "U", "after": {"id": 1}})
    assert event.before is None and event.after == {"id": 1}


def test_int_and_float_widen_to_float() -> None:
    event = one_change({**BASE, "op_type": "U", "before": {"w": 1}, "after": {"w": 5.1}})
    assert event.table.columns[0].type.value == "double"
    assert event.before == {"w": 1.0}


def test_tombstone_input_is_ignored() -> None:
    assert OggJsonDecoder().decode(Message(None)) == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"table":"A.B","op_type":"I","after":{"id":1}', None),
        ({"table": "A.B", "op_type": "X", "after": {"id": 1}}, "op_type"),
        ({"table": "A.B", "after": {"id": 1}}, "op_type"),
        ({"op_type": "I", "after": {"id": 1}}, "table"),
        ({"table": "A..B", "op_type": "I", "after": {"id": 1}}, "table"),
        ({"table": ["A"], "op_type": "I", "after": {"id": 1}}, "table"),
        ({"table": "A.B", "op_type": "I"}, "after"),
        ({"table": "A.B", "op_type": "I", "after": "id=1"}, "after"),
        ({"table": "A.B", "op_type": "D", "after": {"id": 1}}, "before"),
        ({"table": "A.B", "op_type": "U", "before": {"id": 1}}, "after"),
        ({"table": "A.B", "op_type": "I", "op_ts": "13/05/2020", "after": {"id": 1}}, "op_ts"),
        ({"table": "A.B", "op_type": "I", "current_ts": 5, "after": {"id": 1}}, "current_ts"),
        ({"table": "A.B", "op_type": "I", "pos": [1], "after": {"id": 1}}, "pos"),
        ({"table": "A.B", "op_type": "I", "primary_keys": "id", "after": {"id": 1}}, "primary_keys"),
        ({"table": "A.B", "op_type": "I", "primary_keys": ["k"], "after": {"id": 1}}, "primary_keys"),
        ({"table": "A.B", "op_type": "I", "tokens": [1], "after": {"id": 1}}, "tokens"),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(raw: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(raw)
    err = info.value
    assert err.format_id == "ogg-json"
    assert err.field == field
    assert err.preview and "payload:" in str(err)


_values = st.one_of(st.none(), st.integers(-1000, 1000), st.text(max_size=4))
_images = st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), _values, min_size=1)


@settings(max_examples=200, deadline=None)
@given(before=_images, after=_images)
def test_property_absent_columns_are_unavailable_never_null(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    event = one_change({**BASE, "op_type": "U", "before": before, "after": after})
    assert event.before is not None and event.after is not None
    for image, typed in ((before, event.before), (after, event.after)):
        assert set(typed) == set(before) | set(after)
        for name, value in typed.items():
            if name not in image:
                assert value == UNAVAILABLE
            elif image[name] is None:
                assert value is None
            else:
                assert value is not None and value != UNAVAILABLE


_json = json_values
_docs = st.fixed_dictionaries(
    {},
    optional={
        "table": _json | st.just("S.T"),
        "op_type": _json | st.sampled_from(["I", "U", "D", "T"]),
        "op_ts": _json | st.just("2020-01-01 00:00:00"),
        "current_ts": _json,
        "pos": _json,
        "primary_keys": _json | st.just(["A"]),
        "before": _json | _images,
        "after": _json | _images,
        "tokens": _json,
    },
)


@settings(max_examples=200, deadline=None)
@given(doc=_docs)
def test_property_only_decode_errors_escape(doc: dict[str, Any], connect_checker: Any) -> None:
    try:
        records = emit(decode(doc), EmitOptions())
    except DecodeError as err:
        assert err.format_id in ("ogg-json", "emit")
        return
    assert_connect_accepts(connect_checker, records)  # what decodes is valid for Kafka Connect
