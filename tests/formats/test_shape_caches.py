"""The per-shape caches of the schemaless JSON, aliyun, arcion and DTS decoders change no result.

Each case decodes a *warm-up* message and then a *probe* through one decoder (so the probe can hit
what the warm-up cached) and compares the probe's records, or its error, with those of a fresh
decoder. The probes are built to share the warm-up's cache key while needing another result:
values that compare equal but differ in type, ints beyond int64, the UNAVAILABLE marker.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions, emit
from transforms.errors import DecodeError
from transforms.values import UNAVAILABLE


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # the stdlib writes ints of any size (orjson stops at 64 bits)


def _outcome(format_id: str, decoder: Any, value: bytes) -> Any:
    try:
        events = decoder.decode(Message(value=value, topic="t"))
    except DecodeError as exc:
        return ("error", exc.field, exc.reason)
    return [(r.topic, r.key_bytes(), r.value_bytes()) for r in emit(events, EmitOptions(prefix="p"))]


def _check(format_id: str, warm_up: dict[str, Any], probe: dict[str, Any]) -> None:
    warm, fresh = create_decoder(format_id, {}), create_decoder(format_id, {})
    for _ in range(2):  # the second round hits the entries the first one made
        _outcome(format_id, warm, _json(warm_up))
    assert _outcome(format_id, warm, _json(probe)) == _outcome(format_id, fresh, _json(probe))


def _elsewhere(doc: dict[str, Any]) -> dict[str, Any]:
    """The same change in another table. The shape caches are keyed by the images alone, so it
    warms them for the probe; the per-table memory of inferred types, which is meant to change a
    later change's types (tests/formats/test_stable_inference.py), stays out of the comparison."""
    doc = copy.deepcopy(doc)
    if "metadata" in doc:
        doc["metadata"]["table-name"] += "_w"
    else:
        doc["table"] += "_W"
    return doc


def _maxwell(data: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = {"database": "d", "table": "t", "type": "update" if old else "insert", "ts": 1, "data": data}
    return {**doc, "old": old} if old else doc


def _ogg(after: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = {"table": "S.T", "op_type": "U" if before else "I", "after": after}
    return {**doc, "before": before} if before else doc


def _dms(data: dict[str, Any]) -> dict[str, Any]:
    return {"data": data, "metadata": {"record-type": "data", "operation": "insert", "table-name": "t"}}


SCHEMALESS_PROBES = [
    pytest.param({"id": 1, "v": 2}, {"id": 1, "v": 2**63}, id="int-beyond-int64"),
    pytest.param({"id": 1, "v": 2}, {"id": 1, "v": -(2**63) - 1}, id="int-below-int64"),
    pytest.param({"id": "a", "v": 2}, {"id": "a", "v": 2**63}, id="only-int-beyond-int64"),
    pytest.param({"id": 1, "v": "x"}, {"id": 1, "v": UNAVAILABLE}, id="unavailable-marker"),
    pytest.param({"id": 1, "v": True}, {"id": 1, "v": 1}, id="bool-vs-int"),
    pytest.param({"id": 1, "v": 1.5}, {"id": 1, "v": 1}, id="float-vs-int"),
    pytest.param({"id": 1, "v": {"a": 1}}, {"id": 1, "v": {"a": 2**70}}, id="json-object-not-serializable"),
    pytest.param({"id": 1, "v": ["a"]}, {"id": 1, "v": [1]}, id="list"),
    pytest.param({"id": 1, "v": None}, {"id": 1, "v": 5}, id="null-then-value"),
    pytest.param({"v": 1, "id": 1}, {"id": 1, "v": 1}, id="column-order"),
]


@pytest.mark.parametrize(("warm_up", "probe"), SCHEMALESS_PROBES)
def test_maxwell_insert(warm_up: dict[str, Any], probe: dict[str, Any]) -> None:
    _check("maxwell-json", _elsewhere(_maxwell(warm_up)), _maxwell(probe))


@pytest.mark.parametrize(("warm_up", "probe"), SCHEMALESS_PROBES)
def test_maxwell_update_old_values(warm_up: dict[str, Any], probe: dict[str, Any]) -> None:
    """The before-image (data overlaid with old) is the second image of the shape."""
    _check("maxwell-json", _elsewhere(_maxwell({"id": 1, "v": 0.5}, warm_up)), _maxwell({"id": 1, "v": 0.5}, probe))


@pytest.mark.parametrize(("warm_up", "probe"), SCHEMALESS_PROBES)
def test_ogg_before_image(warm_up: dict[str, Any], probe: dict[str, Any]) -> None:
    _check("ogg-json", _elsewhere(_ogg({"id": 1, "w": "x"}, warm_up)), _ogg({"id": 1, "w": "x"}, probe))


def test_ogg_before_in_other_order_than_after() -> None:
    after, before = {"id": 1, "a": 1, "b": "x"}, {"b": "y", "id": 1}
    _check("ogg-json", _elsewhere(_ogg(after, before)), _ogg(after, {"b": 2, "id": 1}))


@pytest.mark.parametrize(("warm_up", "probe"), SCHEMALESS_PROBES)
def test_aws_dms(warm_up: dict[str, Any], probe: dict[str, Any]) -> None:
    _check("aws-dms-json", _elsewhere(_dms(warm_up)), _dms(probe))


def _aliyun(columns: list[dict[str, Any]], after: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": {"dataColumn": columns, "primaryKey": ["id"], "source": {"dbName": "d", "tableName": "t"}},
        "payload": {"op": "INSERT", "after": {"dataColumn": after}, "before": None},
    }


ALIYUN_COLUMNS = [{"name": "id", "type": "LONG"}, {"name": "b", "type": "BYTES"}, {"name": "ts", "type": "DATE"}]


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param(_aliyun(ALIYUN_COLUMNS, {"id": 2, "b": "!!", "ts": 1}), id="bad-base64"),
        pytest.param(_aliyun(ALIYUN_COLUMNS, {"id": "2", "b": 5, "ts": "2020-01-01 00:00:00"}), id="other-types"),
        pytest.param(_aliyun(ALIYUN_COLUMNS, {"id": 2, "ts": 10**20}), id="timestamp-overflow"),
        pytest.param(_aliyun(ALIYUN_COLUMNS, {"id": 2, "x": 1}), id="unknown-column"),
        pytest.param(_aliyun([{"name": "id", "type": 1}], {"id": 2}), id="type-not-a-string"),
        pytest.param(_aliyun([{"name": "id", "type": "LONG"}, {"name": "id", "type": "LONG"}], {}), id="twice"),
        pytest.param(_aliyun([{"name": ["id"], "type": "LONG"}], {}), id="unhashable-name"),
    ],
)
def test_aliyun(probe: dict[str, Any]) -> None:
    _check("aliyun-json", _aliyun(ALIYUN_COLUMNS, {"id": 1, "b": "AAE=", "ts": 1590315269000}), probe)


def test_arcion_json_null_literal_and_types() -> None:
    def row(value: Any) -> dict[str, Any]:
        return {
            "tableName": "d.t",
            "opType": "U",
            "before": {"id": "1", "v": value},
            "after": {"id": "1", "v": value},
            "exists": {"id": "3", "v": "3"},
        }

    for probe in ("null", None, 5, {"a": 1}, "text"):
        _check("arcion-json", row("x"), row(probe))
