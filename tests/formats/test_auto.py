"""auto: detection of every golden input, equivalence with the explicit decoders, options, errors."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.goldens import Case, cases, iter_messages, project
from transforms.decoders import Message, create_decoder, decoder_class
from transforms.decoders.auto import DETECTABLE_FORMATS, FORMAT_HEADER, AutoDecoder
from transforms.envelope import ChangeEvent, EmitOptions, SchemaChangeEvent
from transforms.errors import ConfigError, DecodeError, DetectionError
from transforms.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

# Messages that do not say what they are: rows whose table comes from the `table` option
# (Arcion JSON snapshot rows) and flat rows read with `unwrapped=true` (Debezium). They are not
# detectable by design; `fallback` reaches them.
UNDETECTABLE_OPTIONS = frozenset({"table", "unwrapped"})
# Golden cases run through `auto` (arcion-csv is never detected: see the fallback tests).
AUTO_CASES = [c for c in cases() if c.format_id != "arcion-csv"]


def auto(**options: Any) -> AutoDecoder:
    decoder = create_decoder("auto", options)
    assert isinstance(decoder, AutoDecoder)
    return decoder


def line_of(fmt: str, case: str, number: int = 1) -> bytes:
    return (DATA / fmt / f"{case}.txt").read_bytes().splitlines()[number - 1]


def error_lines(case: Case) -> set[int]:
    if not case.expected_path.exists():
        return set()
    rows = [orjson.loads(x) for x in case.expected_path.read_bytes().splitlines() if x.strip()]
    return {r["line"] for r in rows if "error_class" in r}


def is_tombstone(value: bytes) -> bool:
    return value.strip() in (b"", b"null")


def run(decoder: Any, case: Case, binary: bool) -> list[dict[str, Any]]:
    """Per input line: the projected records, or the error (class, field, whether detection failed)."""
    prefix = case.options.get("__topic_prefix", "cdcnorm")
    pipeline = Pipeline(decoder, EmitOptions(prefix=prefix, decimal_mode=decoder.options.decimal_handling_mode))
    out: list[dict[str, Any]] = []
    for number, key, value in iter_messages(case, binary):
        try:
            records = pipeline.process(Message(value=value, key=key, topic=case.name, offset=number - 1))
        except DecodeError as exc:
            out.append({"line": number, "error": type(exc).__name__, "field": exc.field})
            continue
        out.append({"line": number, "records": [project(r) for r in records]})
    return out


# ---------------------------------------------------------------------------------- golden inputs


@pytest.mark.parametrize("case", AUTO_CASES, ids=str)
def test_detects_every_golden_message(case: Case) -> None:
    undetectable = bool(UNDETECTABLE_OPTIONS & set(case.options))
    broken = error_lines(case)
    decoder = AutoDecoder()
    checked = 0
    for number, key, value in iter_messages(case, decoder_class(case.format_id).binary):
        if number in broken or is_tombstone(value):
            continue
        message = Message(value=value, key=key)
        if undetectable:
            try:
                found = decoder.detect(message)
            except DetectionError:
                continue
            assert found == case.format_id, f"{case} line {number}"
            checked += 1
            continue
        assert decoder.detect(message) == case.format_id, f"{case} line {number}"
        checked += 1
    assert checked or undetectable or broken, f"{case}: nothing to detect"
    assert not decoder.detected, "detect() does not count"


@pytest.mark.parametrize("case", AUTO_CASES, ids=str)
def test_output_equals_the_explicit_decoder(case: Case) -> None:
    """Line by line, auto gives the records of the explicit decoder (both with default options).

    A line the explicit decoder rejects is rejected by auto too, with the same error or as not
    detectable; auto never turns a bad message into output of another format.
    """
    binary = decoder_class(case.format_id).binary
    explicit = run(create_decoder(case.format_id), case, binary)
    detected = run(AutoDecoder(), case, binary)
    assert len(explicit) == len(detected)
    for want, got in zip(explicit, detected, strict=True):
        if "records" in want:
            if "error" in got and got["error"] == "DetectionError":
                assert UNDETECTABLE_OPTIONS & set(case.options), f"{case}: {got}"
                continue
            assert got == want, f"{case} line {want['line']}"
        else:
            assert "error" in got, (
                f"{case} line {want['line']}: auto decoded a message {case.format_id} rejects"
            )
            assert got["error"] == "DetectionError" or got == want, f"{case} line {want['line']}"


@pytest.mark.parametrize(
    "case", [c for c in AUTO_CASES if not {k for k in c.options if not k.startswith("__")}], ids=str
)
def test_output_equals_the_golden_expectation(case: Case) -> None:
    expected = [orjson.loads(x) for x in case.expected_path.read_bytes().splitlines() if x.strip()]
    got = run(AutoDecoder(), case, decoder_class(case.format_id).binary)
    records = [{"line": g["line"], **r} for g in got if "records" in g for r in g["records"]]
    assert records == [e for e in expected if "error_class" not in e]


def test_binary_messages_as_base64_text() -> None:
    """The offline CLI passes lines as they are: base64 text of an Avro message is accepted."""
    decoder = AutoDecoder()
    for fmt, case in (("dts-avro", "mysql-dml"), ("qlik-avro", "cdc-stream")):
        for line in (DATA / fmt / f"{case}.txt").read_bytes().splitlines():
            assert decoder.detect(Message(value=line)) == fmt
            assert decoder.detect(Message(value=base64.b64decode(line))) == fmt


# ------------------------------------------------------------------------------------- behaviour


def test_headers_and_counter_report_the_format() -> None:
    decoder = AutoDecoder()
    events = decoder.decode(Message(value=line_of("canal-json", "seed-delete")))
    assert events and all(isinstance(e, ChangeEvent) for e in events)
    assert all((FORMAT_HEADER, b"canal-json") in e.headers for e in events if isinstance(e, ChangeEvent))
    ddl = decoder.decode(Message(value=line_of("canal-json", "seed-ddl")))
    assert [type(e) for e in ddl] == [SchemaChangeEvent]
    decoder.decode(Message(value=line_of("ogg-json", "features")))
    assert decoder.detected == {"canal-json": 2, "ogg-json": 1}


def test_tombstones_are_not_detected_and_produce_nothing() -> None:
    decoder = AutoDecoder()
    for value in (None, b"", b"null", b" null\n", b'{"schema":{"type":"struct"},"payload":null}'):
        assert decoder.decode(Message(value=value)) == []
    assert not decoder.detected
    with pytest.raises(DetectionError, match="tombstone"):
        decoder.detect(Message(value=None))


def test_one_delegate_per_format_sharing_the_metadata_store() -> None:
    """Qlik metadata seen through auto serves later data messages, here and in other decoders."""
    decoder = AutoDecoder()
    metadata, data = (DATA / "qlik-json" / "cdc-stream.txt").read_bytes().splitlines()[:2]
    assert decoder.decode(Message(value=metadata))  # CREATE schema change
    assert decoder.metadata.get("qlik.schema", orjson.loads(metadata)["messageSchemaId"]) is not None
    [change] = decoder.decode(Message(value=data))
    assert isinstance(change, ChangeEvent) and change.table.table == "ORDERS"
    other = create_decoder("qlik-json", metadata=decoder.metadata)
    assert other.decode(Message(value=data))


def test_arcion_kafka_and_debezium_differ_by_the_connector_name() -> None:
    value = orjson.loads(line_of("arcion-kafka", "seed-update", 2))
    decoder = AutoDecoder()
    assert value["payload"]["source"]["connector"] == "MYSQL"
    assert decoder.detect(Message(value=orjson.dumps(value))) == "arcion-kafka"
    value["payload"]["source"]["connector"] = "mysql"
    assert decoder.detect(Message(value=orjson.dumps(value))) == "debezium-json"


def test_cdl_fields_make_a_debezium_envelope_cdl() -> None:
    value = orjson.loads(line_of("cdl-json", "seed-v2-insert"))
    decoder = AutoDecoder()
    assert decoder.detect(Message(value=orjson.dumps(value))) == "cdl-json"
    for name in ("message_version", "message_type", "LOB_COLUMNS", "unique"):
        value["payload"].pop(name, None)
    assert decoder.detect(Message(value=orjson.dumps(value))) == "debezium-json"


@pytest.mark.parametrize(
    ("doc", "fmt"),
    [
        ({"database": "d", "table": "t", "type": "INSERT", "data": [{"id": "1"}]}, "canal-json"),
        ({"database": "d", "table": "t", "type": "insert", "data": {"id": 1}}, "maxwell-json"),
        ({"database": "d", "type": "database-create", "sql": "CREATE DATABASE d"}, "maxwell-json"),
        ({"database": "d", "table": "t", "type": "DELETE", "data": None, "old": [{"id": "1"}]}, "canal-json"),
        ({"status": "BEGIN", "id": "571", "event_count": None, "data_collections": None}, "debezium-json"),
        ({"source": {"connector": "mysql"}, "databaseName": "d", "ddl": "DROP TABLE t"}, "debezium-json"),
        ({"ts_ms": 1}, "debezium-json"),
        ({"metadata": {"record-type": "data"}, "data": {"id": 1}}, "aws-dms-json"),
        ({"meta": {"op": "ins"}, "data": {"ID": "1"}}, "shareplex-json"),
        ({"magic": "atMSG", "type": "DT", "message": {}}, "qlik-json"),
    ],
)
def test_key_signatures(doc: dict[str, Any], fmt: str) -> None:
    assert AutoDecoder().detect(Message(value=orjson.dumps(doc))) == fmt


# ---------------------------------------------------------------------------------------- errors


def test_unknown_json_is_a_detection_error() -> None:
    value = b'{"hello":"world","n":1}'
    with pytest.raises(DetectionError) as info:
        AutoDecoder().decode(Message(value=value))
    exc = info.value
    assert isinstance(exc, DecodeError)
    assert exc.format_id == "auto" and exc.field is None
    assert "no known format" in exc.reason and "hello, n" in exc.reason
    assert exc.preview == value.decode()


@pytest.mark.parametrize(
    "value",
    [b"\xff\xfe\xfd\xfc\x00\x01garbage", b"atMSX\x04DT\x00", b"hello,world", b"[1,2]", b"42", b"{truncated"],
)
def test_garbage_is_a_detection_error(value: bytes) -> None:
    with pytest.raises(DetectionError, match="cannot tell the format") as info:
        AutoDecoder().decode(Message(value=value))
    assert info.value.preview is not None


def test_ambiguous_message_names_the_candidates() -> None:
    value = orjson.dumps(
        {"table": "T", "op_type": "I", "type": "INSERT", "data": [{"ID": 1}], "after": {"ID": 1}}
    )
    with pytest.raises(DetectionError, match="ambiguous: the message matches canal-json, ogg-json"):
        AutoDecoder().detect(Message(value=value))
    assert auto(formats="ogg-json").detect(Message(value=value)) == "ogg-json"


def test_oversized_message_is_rejected_before_detection() -> None:
    with pytest.raises(DecodeError, match="exceeds the limit") as info:
        auto(**{"max.message.bytes": 10}).decode(Message(value=b'{"ts_ms": 1234567890}'))
    assert not isinstance(info.value, DetectionError) and info.value.format_id == "auto"


# --------------------------------------------------------------------------------------- options


def test_allow_list_restricts_the_candidates() -> None:
    canal = Message(value=line_of("canal-json", "seed-delete"))
    debezium = Message(value=orjson.dumps({"before": None, "after": {"id": 1}, "op": "c", "source": {}}))
    dts = Message(value=base64.b64decode(line_of("dts-avro", "mysql-dml")))
    decoder = auto(formats="canal-json, maxwell-json")
    assert decoder.detect(canal) == "canal-json"
    with pytest.raises(DetectionError, match="looks like debezium-json, which the formats option excludes"):
        decoder.detect(debezium)
    with pytest.raises(DetectionError, match="candidates: canal-json, maxwell-json"):
        decoder.detect(dts)
    assert auto(formats="dts-avro").detect(dts) == "dts-avro"


def test_fallback_reaches_formats_that_are_not_detected() -> None:
    """arcion-csv lines decode through fallback=arcion-csv exactly as with the explicit format."""
    for case in cases("arcion-csv"):
        opts = {k: v for k, v in case.options.items() if not k.startswith("__")}
        decoder = auto(fallback="arcion-csv", **{f"fallback.{k}": v for k, v in opts.items()})
        assert run(decoder, case, False) == run(create_decoder("arcion-csv", opts), case, False)
        assert set(decoder.detected) <= {"arcion-csv"}
    snapshot = Message(value=line_of("arcion-json", "seed-snapshot"))
    decoder = auto(fallback="arcion-json", **{"fallback.table": "tpch.region"})
    [event] = decoder.decode(snapshot)
    assert isinstance(event, ChangeEvent) and event.table.table == "region"
    assert (FORMAT_HEADER, b"arcion-json") in event.headers
    # a detected message still goes to its own format
    assert decoder.detect(Message(value=line_of("canal-json", "seed-delete"))) == "canal-json"


def test_common_options_reach_the_delegates() -> None:
    doc = {
        "data": [{"id": "1", "price": "9.90"}],
        "database": "d",
        "table": "t",
        "type": "INSERT",
        "mysqlType": {"id": "int", "price": "decimal(10,2)"},
        "pkNames": ["id"],
    }
    message = Message(value=orjson.dumps(doc))
    projected = []
    for decoder in (
        auto(**{"decimal.handling.mode": "string"}),
        create_decoder("canal-json", {"decimal.handling.mode": "string"}),
    ):
        pipeline = Pipeline(decoder, EmitOptions(decimal_mode=decoder.options.decimal_handling_mode))
        [record] = pipeline.process(message)
        projected.append(project(record))
    assert projected[0] == projected[1]
    assert projected[0]["value"]["after"]["price"] == "9.90"


@pytest.mark.parametrize(
    ("options", "key", "reason"),
    [
        ({"formats": "canal-json,nope"}, "formats", "'nope' is not a detectable format"),
        ({"formats": "arcion-csv"}, "formats", "use fallback=arcion-csv"),
        ({"formats": ""}, "formats", "found none"),
        ({"fallback": "auto"}, "fallback", "unknown fallback format"),
        ({"fallback": "nope"}, "fallback", "unknown fallback format"),
        ({"fallback.table": "db.t"}, "fallback.<option>", "need fallback=ID"),
        ({"fallback": "arcion-csv", "fallback.nope": "1"}, "fallback.nope", "unknown arcion-csv option"),
        (
            {"fallback": "arcion-csv", "fallback.decimal.handling.mode": "string"},
            "fallback.decimal.handling.mode",
            "on auto",
        ),
        ({"key.columns": "id"}, "key.columns", "unknown auto option"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_decoder("auto", options)
    assert info.value.key == key
    assert reason in info.value.reason


# ------------------------------------------------------------------------------------ properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
KEYS = [
    "type",
    "data",
    "database",
    "table",
    "op",
    "op_type",
    "meta",
    "metadata",
    "payload",
    "schema",
    "magic",
    "source",
    "before",
    "after",
    "opType",
    "message_version",
    "isDdl",
    "ts_ms",
    "xid",
    "record-type",
]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), json_values, max_size=6))
def test_any_json_object_detects_or_fails_typed(doc: dict[str, Any]) -> None:
    decoder = AutoDecoder()
    message = Message(value=orjson.dumps(doc))
    with contextlib.suppress(DetectionError):
        assert decoder.detect(message) in DETECTABLE_FORMATS
    with contextlib.suppress(DecodeError):
        decoder.decode(message)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_typed(value: bytes) -> None:
    with contextlib.suppress(DecodeError):
        AutoDecoder().decode(Message(value=value))


def test_detection_is_cheap() -> None:
    decoder = AutoDecoder()
    messages = [
        Message(value=line)
        for line in (DATA / "canal-json" / "paimon-canal-alltype.txt").read_bytes().splitlines()
        if line.startswith(b"{")
    ]
    messages += [
        Message(value=line_of("debezium-json", "flink-debezium-data-schema-include", n)) for n in range(1, 5)
    ]
    start = time.perf_counter()
    for _ in range(200):
        for m in messages:
            decoder.detect(m)
    per_message = (time.perf_counter() - start) / (200 * len(messages))
    assert per_message < 0.001, f"{per_message * 1e6:.0f} µs per message"


# ------------------------------------------------------------------------------------------- CLI


def test_cli_reports_detected_formats_last_on_stderr() -> None:
    stdin = b"\n".join(
        [
            line_of("canal-json", "seed-delete"),
            line_of("dts-avro", "mysql-dml"),
            line_of("ogg-json", "features"),
            b"x",
        ]
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cdcnorm.cli", "transform", "--format", "auto", "-"],
        input=stdin + b"\n",
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    *errors, last = [orjson.loads(x) for x in proc.stderr.splitlines()]
    assert last == {"detected": {"canal-json": 1, "dts-avro": 1, "ogg-json": 1}}
    assert [e["line"] for e in errors] == [4] and errors[0]["error_class"] == "DetectionError"
