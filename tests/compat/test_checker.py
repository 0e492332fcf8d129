"""The checker itself: it must refuse what the real runtime refuses, or the harness proves nothing."""

from __future__ import annotations

from typing import Any

import orjson

ROW = {"type": "struct", "optional": True, "name": "p.db.t.Value", "fields": [{"type": "int64", "optional": True, "field": "n"}]}
SOURCE = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "fields": [{"type": "string", "optional": True, "field": "table"}, {"type": "int64", "optional": True, "field": "ts_ms"}],
}


def _envelope(row_schema: dict[str, Any], after: Any, op: str = "c") -> bytes:
    schema = {
        "type": "struct",
        "name": "p.db.t.Envelope",
        "optional": False,
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            SOURCE,
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    payload = {"before": None, "after": after, "source": {"table": "t", "ts_ms": 5}, "op": op}
    return orjson.dumps({"schema": schema, "payload": payload})


def test_a_valid_envelope_passes(connect_checker: Any) -> None:
    (verdict,) = connect_checker.check([("p.db.t", None, _envelope(ROW, {"n": 1}))])
    assert verdict.ok, verdict


def test_float64_type_name_is_refused(connect_checker: Any) -> None:
    row = {**ROW, "fields": [{"type": "float64", "optional": True, "field": "n"}]}
    (verdict,) = connect_checker.check([("p.db.t", None, _envelope(row, {"n": 1.5}))])
    assert not verdict.ok and verdict.stage == "value.toConnectData" and "float64" in verdict.error


def test_string_in_an_int_field_is_caught_by_the_round_trip(connect_checker: Any) -> None:
    # JsonConverter reads "x" as 0 for an int64 field without complaint; only the round trip shows it
    (verdict,) = connect_checker.check([("p.db.t", None, _envelope(ROW, {"n": "__debezium_unavailable_value"}))])
    assert not verdict.ok and verdict.stage == "value.roundtrip"


def test_unwrap_must_reproduce_the_after_image(connect_checker: Any) -> None:
    (verdict,) = connect_checker.check([("p.db.t", None, _envelope(ROW, None, op="c"))])
    assert not verdict.ok and verdict.stage == "unwrap"


def test_bad_key_is_refused(connect_checker: Any) -> None:
    key = orjson.dumps({"schema": {"type": "struct", "optional": False, "fields": [{"type": "int32", "optional": False, "field": "id"}]}, "payload": {"id": None}})
    (verdict,) = connect_checker.check([("p.db.t", key, _envelope(ROW, {"n": 1}))])
    assert not verdict.ok and verdict.stage == "key.toConnectData"
