"""Hostile-input limits, for every format.

* ``max.message.bytes`` rejects an oversized message (value, and key through ``decode_safely``)
  in every decoder, the binary ones and ``auto`` included;
* ``max.json.depth`` rejects deeply nested JSON: the message itself, and JSON held in a field
  (MongoDB images and keys, Kafka keys, Qlik ``messageSchema``/``dataSchema``, DTS
  ``pk_uk_info``, Arcion cursors);
* typed values are bounded (integers fit their type, decimals have bounded digits and scale);
* :meth:`~transforms.decoders.base.Decoder.decode_safely` turns anything unexpected into a
  DecodeError and lets other cdcnorm errors through;
* regressions of the bugs the fuzzer (``tests/fuzz``) found, each with the input that hit it.

Messages start from the golden inputs (``tests/data``), taken apart and put back together with
the fuzzer's seeds (:mod:`tests.fuzz.seeds`).
"""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
import pytest

from tests.fuzz.seeds import Seed, SnapshotStore, format_seeds, fuzz_formats
from tests.goldens import DATA
from transforms.connect import Column, ConnectType
from transforms.decoders import Decoder, Message, create_decoder, decoder_class
from transforms.decoders.base import coerce_checked
from transforms.decoders.connect_json import from_extended_json
from transforms.decoders.qlik import ENVELOPE_SCHEMA
from transforms.decoders.qlik_model import ColumnMask
from transforms.envelope import ChangeEvent, EmitOptions, Event, SchemaChangeEvent, emit
from transforms.errors import DecodeError, DetectionError, StateStoreError
from transforms.jsonio import check_depth
from transforms.values import CoercionError

FORMATS = fuzz_formats()
JSON_FORMATS = [f for f in FORMATS if f != "arcion-csv" and (f == "auto" or not decoder_class(f).binary)]
DEEP = 100


def _decodes(seed: Seed, **options: Any) -> bool:
    try:
        _decoder(seed, **options).decode(seed.message)
    except DecodeError:
        return False
    return True


def _decoder(seed: Seed, **options: Any) -> Decoder:
    opts = seed.options.model_copy(update=options)
    return decoder_class(seed.format_id)(opts, SnapshotStore(seed.store))


def _seed(format_id: str, case: str | None = None, *, layout: str | None = None) -> Seed:
    """The first golden message of a format (and case) that decodes to at least one change."""
    for seed in format_seeds(format_id):
        if case is not None and seed.case != case:
            continue
        if layout is not None and (seed.layout is None or not seed.layout.kind.startswith(layout)):
            continue
        try:
            events = seed.decoder().decode(seed.message)
        except DecodeError:
            continue
        if any(isinstance(e, ChangeEvent) for e in events):
            return seed
    raise AssertionError(f"no decodable golden message for {format_id} {case or ''}")


def _with_tree(seed: Seed, change: Any) -> Message:
    assert seed.layout is not None
    tree = seed.layout.decode()
    change(tree)
    return Message(value=seed.layout.encode(tree), key=seed.message.key, topic=seed.message.topic)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# ------------------------------------------------------------------------------- message size


@pytest.mark.parametrize("format_id", FORMATS)
def test_an_oversized_message_is_rejected_by_every_format(format_id: str) -> None:
    seed = _seed(format_id)
    size = len(seed.message.value or b"")
    decoder = _decoder(seed, max_message_bytes=size - 1)
    for decode in (decoder.decode, decoder.decode_safely):
        with pytest.raises(DecodeError, match=f"message of {size} bytes exceeds the limit of {size - 1}"):
            decode(seed.message)


@pytest.mark.parametrize("format_id", FORMATS)
def test_an_oversized_key_is_rejected_by_decode_safely(format_id: str) -> None:
    seed = _seed(format_id)
    decoder = _decoder(seed, max_message_bytes=max(64, len(seed.message.value or b"")))
    key = b"k" * (decoder.options.max_message_bytes + 1)
    with pytest.raises(DecodeError, match=r"key of .* bytes exceeds the limit"):
        decoder.decode_safely(Message(value=seed.message.value, key=key, topic=seed.message.topic))


# ------------------------------------------------------------------------------- JSON depth


@pytest.mark.parametrize("format_id", JSON_FORMATS)
def test_deeply_nested_json_is_rejected(format_id: str) -> None:
    seed = _seed(format_id, layout="json")
    message = _with_tree(seed, lambda tree: tree.update(deep=_nested(DEEP)))
    with pytest.raises(DecodeError, match="nesting deeper than 64"):
        _decoder(seed).decode_safely(message)
    # the limit is an option: raised, the same message gets past the depth check
    try:
        _decoder(seed, max_json_depth=DEEP + 10).decode(message)
    except DecodeError as exc:
        assert "nesting" not in str(exc)


@pytest.mark.parametrize("format_id", JSON_FORMATS)
def test_max_json_depth_is_configurable(format_id: str) -> None:
    seed = _seed(format_id, layout="json")
    depth = check_depth(orjson.loads(seed.message.value or b""), 1000)
    assert _decodes(seed, max_json_depth=depth)
    with pytest.raises(DecodeError, match=f"nesting deeper than {depth - 1}"):
        _decoder(seed, max_json_depth=depth - 1).decode(seed.message)


def test_mongodb_image_strings_are_parsed_within_the_limits() -> None:
    seed = _seed("debezium-json", "paimon-debezium-mongodb-event-insert")
    deep = orjson.dumps({"_id": 1, "x": _nested(DEEP)}).decode()
    message = _with_tree(seed, lambda tree: tree.update(after=deep))
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(message)
    assert info.value.field == "after"


@pytest.mark.parametrize("format_id", ["debezium-json", "arcion-kafka"])
def test_kafka_keys_are_parsed_within_the_limits(format_id: str) -> None:
    seed = _seed(format_id)
    key = orjson.dumps({"id": _nested(DEEP)})
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(Message(value=seed.message.value, key=key, topic=seed.message.topic))
    assert info.value.field == "key"


def test_a_maxwell_key_beyond_the_limits_gives_no_key_columns() -> None:
    seed = _seed("maxwell-json", "kafka-key")
    key = orjson.dumps({"pk.id": _nested(DEEP)})
    events = _decoder(seed).decode(Message(value=seed.message.value, key=key, topic=seed.message.topic))
    assert [e.table.key for e in events if isinstance(e, ChangeEvent)] == [()]


def test_mongodb_key_ids_are_parsed_within_the_limits() -> None:
    seed = _seed("debezium-json", "paimon-debezium-mongodb-event-insert")
    key = orjson.dumps({"id": orjson.dumps({"$oid": _nested(DEEP)}).decode()})
    events = _decoder(seed).decode(Message(value=seed.message.value, key=key, topic=seed.message.topic))
    # an id that is not JSON within the limits is taken as the plain string it is
    assert [e.table.key for e in events if isinstance(e, ChangeEvent)] == [("_id",)]


def _qlik_avro_metadata(change: Any) -> tuple[Seed, Message]:
    seed = next(s for s in format_seeds("qlik-avro") if s.layout is not None and s.message.value and b"MD" in s.message.value[:8])
    return seed, _with_tree(seed, change)


@pytest.mark.parametrize("field", ["messageSchema", "dataSchema"])
def test_qlik_avro_schemas_are_parsed_within_the_limits(field: str) -> None:
    deep = orjson.dumps(_nested(DEEP)).decode()

    def change(tree: dict[str, Any]) -> None:
        if field == "messageSchema":
            tree["envelope"]["messageSchema"] = deep
        else:
            tree["body"]["dataSchema"] = deep

    seed, message = _qlik_avro_metadata(change)
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(message)
    assert info.value.field == ("messageSchema" if field == "messageSchema" else "message.dataSchema")


def test_qlik_avro_rejects_schemas_with_arrays_of_zero_size_items() -> None:
    bomb = {
        "type": "record",
        "name": "Bomb",
        "fields": [{"name": "rows", "type": {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}}],
    }
    seed, message = _qlik_avro_metadata(lambda tree: tree["body"].update(dataSchema=orjson.dumps(bomb).decode()))
    with pytest.raises(DecodeError, match="zero bytes") as info:
        _decoder(seed).decode(message)
    assert info.value.field == "message.dataSchema"


def test_qlik_avro_envelope_with_a_null_array_message_schema_is_rejected() -> None:
    schema = orjson.dumps({"type": "array", "items": "null"}).decode()
    envelope = {"magic": b"atMSG", "type": "MD", "headers": None, "messageSchemaId": None,
                "messageSchema": schema, "message": b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f\x00"}
    import io

    from fastavro import parse_schema, schemaless_writer

    out = io.BytesIO()
    schemaless_writer(out, parse_schema(ENVELOPE_SCHEMA), envelope)
    started = time.perf_counter()
    with pytest.raises(DecodeError, match="zero bytes"):
        create_decoder("qlik-avro").decode(Message(value=out.getvalue()))
    assert time.perf_counter() - started < 1


def test_dts_pk_uk_info_is_parsed_within_the_limits() -> None:
    seed = next(
        s for s in format_seeds("dts-avro")
        if s.layout is not None and b"pk_uk_info" in (s.message.value or b"") and _decodes(s)
    )
    deep = orjson.dumps({"PRIMARY": _nested(DEEP)}).decode()
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(_with_tree(seed, lambda tree: tree["tags"].update(pk_uk_info=deep)))
    assert info.value.field == "tags.pk_uk_info"


def test_arcion_json_cursors_are_parsed_within_the_limits() -> None:
    seed = _seed("arcion-json", "seed-realtime")
    deep = orjson.dumps({"dscId": _nested(DEEP)}).decode()
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(_with_tree(seed, lambda tree: tree.update(cursor=deep)))
    assert info.value.field == "cursor"


def test_arcion_csv_cursors_are_parsed_within_the_limits() -> None:
    seed = _seed("arcion-csv", "seed-realtime")
    deep = orjson.dumps({"dscId": _nested(DEEP)}).decode().replace('"', '""')
    line = f'India,NULL,1,India,NULL,1,10,NULL,1,I,"{deep}","{{}}"'.encode()
    with pytest.raises(DecodeError, match="nesting deeper than 64") as info:
        _decoder(seed).decode(Message(value=line))
    assert info.value.field == "cursor"


# ------------------------------------------------------------------------------- bounded values


@pytest.mark.parametrize(
    ("column", "raw", "reason"),
    [
        (Column("n", ConnectType.INT16), 40_000, "does not fit int16"),
        (Column("n", ConnectType.INT32), "2147483648", "does not fit int32"),
        (Column("n", ConnectType.INT64), 2**64, "does not fit int64"),
        (Column("n", ConnectType.INT64), 1e308, "does not fit int64"),
        (Column("n", ConnectType.INT64), "Infinity", "out of range"),
        (Column("n", ConnectType.INT64), "1e999999999", "digits"),  # values.coerce would build the int
        (Column.decimal("d", None, None), "1e999999", "exponent"),
        (Column.decimal("d", 10, 2), "9" * 1001, "digits"),
        (Column("t", ConnectType.INT64, logical="io.debezium.time.MicroTime"), "99999999999:00:00", "out of range"),
    ],
)
def test_values_beyond_their_type_are_coercion_errors(column: Column, raw: Any, reason: str) -> None:
    with pytest.raises(CoercionError, match=reason):
        coerce_checked(column, raw)


def test_int64_holds_the_signed_range_only() -> None:
    # a Connect int64 is a Java long: a BIGINT UNSIGNED above 2^63-1 needs a Decimal column
    # (bigint.unsigned.handling.mode=precise) or the decoder's two's-complement wrap (long)
    col = Column("n", ConnectType.INT64)
    assert coerce_checked(col, 2**63 - 1) == 2**63 - 1
    assert coerce_checked(col, -(2**63)) == -(2**63)
    with pytest.raises(CoercionError, match="does not fit int64"):
        coerce_checked(col, 2**63)
    with pytest.raises(CoercionError, match="does not fit int64"):
        coerce_checked(col, 2**64 - 1)


def _canal(**doc: Any) -> Message:
    base = {"database": "db", "table": "t", "type": "INSERT", "isDdl": False, "pkNames": ["id"],
            "data": [{"id": "1", "v": "1"}], "mysqlType": {"id": "int", "v": "int"}}
    return Message(value=orjson.dumps({**base, **doc}))


@pytest.mark.parametrize(
    ("doc", "field", "reason"),
    [
        ({"mysqlType": {"id": "int", "v": "decimal(2000,3)"}}, "mysqlType.v", "precision"),
        ({"mysqlType": {"id": "int", "v": "decimal(20,2000)"}}, "mysqlType.v", "scale"),
        ({"mysqlType": {"id": "int", "v": "bit(99999999999)"}}, "mysqlType.v", "BIT"),
        ({"data": [{"id": "1", "v": str(2**40)}]}, "data[0].v", "does not fit int32"),
        ({"es": "²"}, "es", "expected an integer"),
        ({"es": "--5"}, "es", "expected an integer"),
        ({"es": "9" * 5000}, "es", "expected an integer"),
    ],
)
def test_canal_rejects_out_of_range_types_and_values(doc: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as info:
        create_decoder("canal-json").decode(_canal(**doc))
    assert info.value.field == field


def test_connect_decimal_parameters_are_bounded() -> None:
    schema = {"type": "struct", "fields": [
        {"field": "before", "type": "struct", "optional": True, "fields": []},
        {"field": "after", "type": "struct", "optional": True, "fields": [
            {"field": "p", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "9999999"}}]}]}
    value = {"schema": schema, "payload": {"op": "c", "after": {"p": "AQ=="}, "source": {"table": "t"}}}
    with pytest.raises(DecodeError, match="scale 9999999") as info:
        create_decoder("debezium-json").decode(Message(value=orjson.dumps(value)))
    assert info.value.field == "schema.after.p.parameters"


def test_qlik_masks_are_bounded() -> None:
    with pytest.raises(ValueError, match="at most 1024 bytes"):
        ColumnMask.parse("FF" * 1025)
    assert ColumnMask.parse("FF" * 1024).has(8192)


# ------------------------------------------------------------------------------- decode_safely


class _Exploding(Decoder):
    format_id = "exploding"

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def decode(self, message: Message) -> list[Event]:
        raise self.exc


def test_decode_safely_turns_an_unexpected_exception_into_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="unexpected KeyError: 'x'") as info:
        _Exploding(KeyError("x")).decode_safely(Message(value=b"{}"))
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.format_id == "exploding" and info.value.preview == "{}"


def test_decode_safely_lets_other_cdcnorm_errors_through() -> None:
    with pytest.raises(StateStoreError):
        _Exploding(StateStoreError("redis down")).decode_safely(Message(value=b"{}"))
    original = DecodeError("exploding", "f", "bad")
    with pytest.raises(DecodeError) as info:
        _Exploding(original).decode_safely(Message(value=b"{}"))
    assert info.value is original


def test_error_reasons_and_fields_are_clipped() -> None:
    error = _Exploding(KeyError()).error("f" * 500, "r" * 5000)
    assert error.field is not None and len(error.field) < 250
    assert len(error.reason) < 1100 and error.reason.endswith("(5000 chars)")


# ------------------------------------------------------------------------------- regressions


def test_canal_ddl_after_many_comments_is_classified_quickly() -> None:
    sql = "/**/" * 40 + "x"  # the old comment-skipping regex backtracked exponentially
    started = time.perf_counter()
    events = create_decoder("canal-json").decode(
        Message(value=orjson.dumps({"database": "db", "table": "t", "type": "DDL", "isDdl": True, "sql": sql}))
    )
    assert time.perf_counter() - started < 1
    assert [e.change_type for e in events if isinstance(e, SchemaChangeEvent)] == ["ALTER"]
    events = create_decoder("canal-json").decode(
        Message(value=orjson.dumps({"database": "db", "table": "t", "type": "DDL", "isDdl": True,
                                    "sql": "/* a */ /* b */ CREATE TABLE t (id int)"}))
    )
    assert [e.change_type for e in events if isinstance(e, SchemaChangeEvent)] == ["CREATE"]


def test_maxwell_long_binlog_file_names_are_read_in_linear_time() -> None:
    seed = _seed("maxwell-json", layout="json")
    position = "mysql-bin." + "1" * 200_000 + "x:4"  # the old file-index regex was quadratic
    message = _with_tree(seed, lambda tree: tree.update(position=position))
    started = time.perf_counter()
    events = _decoder(seed).decode(message)
    assert time.perf_counter() - started < 1
    assert [e.source.fields["pos"] for e in events if isinstance(e, ChangeEvent)] == [4]


def test_mongodb_subdocuments_do_not_recurse_forever() -> None:
    assert from_extended_json({"address": {"city": "Oslo"}, "n": {"$numberInt": "7"}}) == {
        "address": {"city": "Oslo"},
        "n": 7,
    }
    seed = _seed("debezium-json", "paimon-debezium-mongodb-event-insert")
    after = orjson.dumps({"_id": {"$oid": "5d505646cf6d4fe581014ab2"}, "address": {"city": "Oslo"}}).decode()
    events = _decoder(seed).decode(_with_tree(seed, lambda tree: tree.update(after=after)))
    change = next(e for e in events if isinstance(e, ChangeEvent))
    assert change.after is not None and change.after["address"] == '{"city":"Oslo"}'


@pytest.mark.parametrize("charset", ["base64", "zlib", "idna", "bad\x00name"])
def test_dts_charsets_that_are_not_text_encodings_are_errors(charset: str) -> None:
    seed = next(
        s for s in format_seeds("dts-avro")
        if s.layout is not None and s.case == "mysql-dml" and b"utf8mb4" in (s.message.value or b"")
    )

    def change(tree: dict[str, Any]) -> None:
        for i, (kind, body) in enumerate(tree["afterImages"]):
            if kind.endswith("Character"):
                tree["afterImages"][i] = (kind, {**body, "charset": charset, "value": b"\xff" * 70})

    message = _with_tree(seed, change)
    with pytest.raises(DecodeError, match=r"charset|not valid") as info:
        _decoder(seed).decode(message)
    assert info.value.field is not None and info.value.field.startswith("afterImages.")


@pytest.mark.parametrize("zone", ["x" * 5000, "+99:00", "../../etc/passwd", "Europe/Nowhere"])
def test_dts_time_zones_that_are_not_zones_are_errors(zone: str) -> None:
    seed = next(s for s in format_seeds("dts-avro") if s.layout is not None and _decodes(s) and _has_zoned(s))

    def change(tree: dict[str, Any]) -> None:
        for i, item in enumerate(tree["afterImages"]):
            if item and item[0].endswith("TimestampWithTimeZone"):
                tree["afterImages"][i] = (item[0], {**item[1], "timezone": zone})

    with pytest.raises(DecodeError, match="time zone") as info:
        _decoder(seed).decode(_with_tree(seed, change))
    assert info.value.field is not None and info.value.field.startswith("afterImages.")


def _has_zoned(seed: Seed) -> bool:
    assert seed.layout is not None
    images = seed.layout.decode()["afterImages"]
    return isinstance(images, list) and any(item and item[0].endswith("TimestampWithTimeZone") for item in images)


def test_dts_duplicate_column_names_are_an_error() -> None:
    seed = next(s for s in format_seeds("dts-avro") if s.layout is not None and s.case == "mysql-dml"
                and b"afterImages" not in (s.message.value or b"") and _decodes(s)
                and s.layout.decode()["fields"])

    def change(tree: dict[str, Any]) -> None:
        tree["fields"][1]["name"] = tree["fields"][0]["name"]

    with pytest.raises(DecodeError, match="listed twice") as info:
        _decoder(seed).decode(_with_tree(seed, change))
    assert info.value.field == "fields"


def test_binary_formats_accept_base64_through_auto_within_the_limit() -> None:
    seed = _seed("dts-avro")
    encoded = base64.b64encode(seed.message.value or b"")
    decoder = create_decoder("auto", {"max.message.bytes": len(encoded) - 1})
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decoder.decode(Message(value=encoded))


def _golden_errors(format_id: str, case: str) -> dict[int, tuple[str, str | None]]:
    """The input lines a golden case expects to fail: line -> (error class, field)."""
    expected = DATA / format_id / f"{case}.expected.jsonl"
    rows = [orjson.loads(line) for line in expected.read_bytes().splitlines() if line.strip()]
    return {row["line"]: (row["error_class"], row["field"]) for row in rows if "error_class" in row}


def test_every_golden_message_still_emits_after_decode_safely() -> None:
    """A golden message emits, or fails exactly as its golden file expects (format, class, field)."""
    failed = 0
    for format_id in FORMATS:
        for seed in format_seeds(format_id)[:3]:
            try:
                events = seed.decoder().decode_safely(seed.message)
            except DecodeError as exc:
                failed += 1
                source, _, case = seed.case.rpartition("/") if format_id == "auto" else (format_id, "", seed.case)
                if format_id == "auto" and isinstance(exc, DetectionError):
                    assert exc.format_id == "auto", f"{seed.label}: {exc}"
                    continue
                assert exc.format_id == source, f"{format_id} {seed.label}: the error names format {exc.format_id}"
                expected = _golden_errors(source, case).get(seed.line)
                assert expected == (type(exc).__name__, exc.field), (
                    f"{format_id} {seed.label}: {type(exc).__name__} at field {exc.field!r}, the golden file expects "
                    f"{expected or 'records'}: {exc}"
                )
                continue
            for record in emit(events, EmitOptions(prefix="p")):
                record.to_json_line()
    assert failed, "no golden message failed: the bad-input cases are not among the seeds any more"
