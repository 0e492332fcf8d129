"""Output converters (service/converters.py): JSON with and without schemas, Confluent Avro.

The Avro path runs against confluent-kafka's in-memory ``mock://`` registry: every golden record
is serialized with ``AvroSerializer`` and read back with ``AvroDeserializer``; what comes back is
the JSON converter's payload. tests/compat/test_avro_compat.py checks the same bytes against
Confluent's own AvroConverter in the JVM.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from service.app import Normalizer
from service.config import parse_config
from service.converters import (
    ConverterFormat,
    EncodedRecord,
    OutputConfig,
    SchemaRegistrySettings,
    SchemaRegistryUnavailable,
    SubjectNameStrategy,
    build_converter,
    is_registry_outage,
    output_summary,
)
from tests.compat.records import golden_records
from tests.goldens import Case, cases
from transforms.avro import AvroMappingError, connect_payload
from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders import Message
from transforms.envelope import ChangeEvent, EmitOptions, Operation, OutRecord, SourceInfo, emit
from transforms.errors import DecodeError, StateStoreError

CASES = cases()


def _mock() -> Any:
    return SchemaRegistryClient.new_client({"url": "mock://converters"})


def _avro(client: Any, **settings: Any) -> Any:
    config = OutputConfig.model_validate({"format": "avro", "schema_registry": {"url": "mock://converters"}, **settings})
    converter = build_converter(config, client)
    assert converter is not None
    return converter


def _records(case: Case) -> list[OutRecord]:
    return golden_records(case)


def _changes(format_id: str) -> list[OutRecord]:
    """The keyed change records of the first golden case of ``format_id`` that has some."""
    for case in CASES:
        if case.format_id == format_id:
            found = [
                r for r in golden_records(case)
                if r.key is not None and r.value is not None and r.value["schema"].get("name", "").endswith(".Envelope")
            ]
            if found:
                return found
    raise AssertionError(f"no golden {format_id} case with keyed changes")


# ----------------------------------------------------------------------------- JSON


def test_default_output_leaves_records_alone() -> None:
    assert build_converter(None) is None
    assert build_converter(OutputConfig()) is None
    assert build_converter(OutputConfig.model_validate({"value.converter": "org.apache.kafka.connect.json.JsonConverter"})) is None
    assert output_summary(None) == output_summary(OutputConfig()) == "json"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_json_without_schemas_writes_the_payload_alone(case: Case) -> None:
    converter = build_converter(OutputConfig.model_validate({"value.converter.schemas.enable": False}))
    assert converter is not None
    records = _records(case)
    for record, out in zip(records, converter.convert(records), strict=True):
        assert isinstance(out, EncodedRecord)
        assert out.topic == record.topic and out.headers == record.headers
        for doc, data in ((record.key, out.key_bytes()), (record.value, out.value_bytes())):
            if doc is None:
                assert data is None
            else:
                assert orjson.loads(data) == doc["payload"]  # keys too: they follow the value
                assert data == orjson.dumps(doc["payload"])


def test_an_encoded_record_copies_and_pickles_with_its_bytes() -> None:
    """OutRecord (compiled) rebuilds a copy through its constructor; the worker's subclass,
    whose constructor differs, says how it is rebuilt."""
    import copy
    import pickle

    record = EncodedRecord(OutRecord("t", {"id": 1}, {"v": 2}, (("h", b"1"),)), b"k", b"v")
    for again in (copy.copy(record), copy.deepcopy(record), pickle.loads(pickle.dumps(record))):
        assert type(again) is EncodedRecord and again == record
        assert (again.key_bytes(), again.value_bytes(), again.headers) == (b"k", b"v", (("h", b"1"),))


def test_key_and_value_schemas_enable_apart() -> None:
    case = next(c for c in CASES if any(r.key for r in golden_records(c)))
    config = OutputConfig.model_validate({"key.converter.schemas.enable": False})
    assert config.schemas_enable and not config.key_schemas
    assert output_summary(config) == "key json (no schemas), value json"
    converter = build_converter(config)
    assert converter is not None
    records = _records(case)
    for record, out in zip(records, converter.convert(records), strict=True):
        assert out.value_bytes() == record.value_bytes()  # unchanged, the schema spliced in
        if record.key is not None:
            assert out.key_bytes() == orjson.dumps(record.key["payload"])


# ----------------------------------------------------------------------------- Avro


def _framing(data: bytes) -> int:
    assert data[:1] == b"\x00", "Confluent's magic byte"
    return int.from_bytes(data[1:5], "big")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_avro_round_trip_through_the_mock_registry(case: Case) -> None:
    """Serialized with AvroSerializer, read back with AvroDeserializer: the JSON converter's payload."""
    client = _mock()
    converter = _avro(client)
    deserializer = AvroDeserializer(client)
    records = _records(case)
    try:
        converted = converter.convert(records)
    except DecodeError as exc:
        # the one golden table Avro cannot name: two Geometry structs that differ in parameters
        assert "Can't redefine" in str(exc), exc
        return
    for record, out in zip(records, converted, strict=True):
        for field, doc, data in (
            (MessageField.KEY, record.key, out.key_bytes()),
            (MessageField.VALUE, record.value, out.value_bytes()),
        ):
            if doc is None:
                assert data is None  # tombstones stay null
                continue
            assert data is not None
            _framing(data)
            back = deserializer(data, SerializationContext(out.topic, field))
            assert connect_payload(doc["schema"], back) == doc["payload"]


def test_avro_subjects_follow_the_topic_name_strategy() -> None:
    client = _mock()
    records = _changes("canal-json")
    _avro(client).convert(records)
    subjects = set(client.get_subjects())
    for record in records:
        if record.value is not None:
            assert f"{record.topic}-value" in subjects
        if record.key is not None:
            assert f"{record.topic}-key" in subjects
    schema = client.get_latest_version(f"{records[0].topic}-value").schema
    avro = orjson.loads(schema.schema_str)
    assert avro["name"] == "Envelope" and avro["connect.name"].endswith(".Envelope")
    assert avro["namespace"] == avro["connect.name"].removesuffix(".Envelope")


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [
        ("RecordNameStrategy", "{name}"),
        ("io.confluent.kafka.serializers.subject.TopicRecordNameStrategy", "{topic}-{name}"),
        ("topic", "{topic}-value"),
    ],
)
def test_avro_subject_name_strategies(strategy: str, subject: str) -> None:
    client = _mock()
    records = _changes("maxwell-json")
    _avro(client, **{"value.subject.name.strategy": strategy, "key.subject.name.strategy": strategy}).convert(records[:1])
    record = records[0]
    name = record.value["schema"]["name"]
    subjects = set(client.get_subjects())
    assert subject.format(topic=record.topic, name=name) in subjects


def test_avro_keys_and_json_values_mix() -> None:
    client = _mock()
    config = OutputConfig.model_validate(
        {"key.converter": "io.confluent.connect.avro.AvroConverter", "schema_registry": {"url": "mock://x"}}
    )
    assert config.key_converter is ConverterFormat.AVRO and config.format is ConverterFormat.JSON
    assert output_summary(config) == "key avro, value json"
    converter = build_converter(config, client)
    assert converter is not None
    records = _changes("canal-json")
    for record, out in zip(records, converter.convert(records), strict=True):
        assert out.value_bytes() == record.value_bytes()
        _framing(out.key_bytes() or b"")


def _table_event(column: str = "id") -> ChangeEvent:
    table = TableSchema("db", None, "t", (Column(column, ConnectType.INT64, False), Column("v", ConnectType.STRING)), (column,))
    return ChangeEvent(Operation.CREATE, table, None, {column: 1, "v": "x"}, SourceInfo("canal-json", 1))


def test_avro_refuses_a_field_name_avro_cannot_hold() -> None:
    """AvroConverter's default (scrub.invalid.names=false) fails on such a name: so does cdcnorm."""
    with pytest.raises(DecodeError, match="not a valid Avro name"):
        _avro(_mock()).convert(emit([_table_event("first name")], EmitOptions()))


def test_avro_scrubs_field_names_when_asked() -> None:
    client = _mock()
    records = emit([_table_event("first name")], EmitOptions())
    (out,) = _avro(client, **{"scrub.invalid.names": True}).convert(records)
    value = AvroDeserializer(client)(out.value_bytes(), SerializationContext(out.topic, MessageField.VALUE))
    assert value["after"] == {"first_name": 1, "v": "x"}
    key = AvroDeserializer(client)(out.key_bytes(), SerializationContext(out.topic, MessageField.KEY))
    assert key == {"first_name": 1}


_DECIMAL_2 = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}


@pytest.mark.parametrize(
    ("value", "unscaled"),
    [("1.28", 128), ("-1.28", -128), ("-1.280", -128), ("0", 0), ("12345678901234567890123456789012345.67",
                                                                      1234567890123456789012345678901234567)],
)
def test_avro_decimal_reads_back_as_connect_writes_it(value: str, unscaled: int) -> None:
    """A decimal fastavro read at its schema's scale: BigInteger.toByteArray of the unscaled value."""
    raw = base64.b64decode(connect_payload(_DECIMAL_2, Decimal(value)))
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    assert raw == unscaled.to_bytes(len(raw), "big", signed=True)
    assert len(raw) == (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1


@pytest.mark.parametrize("value", ["1.285", "-0.001", "NaN", "Infinity"])
def test_avro_decimal_beyond_its_scale_is_refused_not_rounded(value: str) -> None:
    """As Connect's Decimal.fromLogical refuses a mismatching scale: no silent rounding."""
    with pytest.raises(AvroMappingError, match=f"decimal {value} "):
        connect_payload(_DECIMAL_2, Decimal(value))


def test_avro_refuses_fields_that_scrub_to_one_name() -> None:
    table = TableSchema("db", None, "t", (Column("a b", ConnectType.INT64, False), Column("a_b", ConnectType.STRING)), ())
    event = ChangeEvent(Operation.CREATE, table, None, {"a b": 1, "a_b": "x"}, SourceInfo("canal-json", 1))
    with pytest.raises(DecodeError, match="share the Avro names"):
        _avro(_mock(), scrub_invalid_names=True).convert(emit([event], EmitOptions()))


class _FailingRegistry:
    """A registry client whose every call fails as given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def register_schema_full_response(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def lookup_schema(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def config(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("status", [500, 503, 401, 403, 429])
def test_registry_outage_is_retried_not_dead_lettered(status: int) -> None:
    records = emit([_table_event()], EmitOptions())
    with pytest.raises(SchemaRegistryUnavailable) as info:
        _avro(_FailingRegistry(SchemaRegistryError(status, 50001, "down"))).convert(records)
    assert isinstance(info.value, StateStoreError)


def test_registry_unreachable_is_an_outage() -> None:
    records = emit([_table_event()], EmitOptions())
    with pytest.raises(SchemaRegistryUnavailable):
        _avro(_FailingRegistry(ConnectionRefusedError("refused"))).convert(records)
    assert is_registry_outage(TimeoutError())


def test_incompatible_schema_is_a_dead_letter() -> None:
    records = emit([_table_event()], EmitOptions())
    with pytest.raises(DecodeError, match="incompatible"):
        _avro(_FailingRegistry(SchemaRegistryError(409, 409, "Schema being registered is incompatible"))).convert(records)


# ----------------------------------------------------------------------------- the worker


def _normalizer(output: dict[str, Any]) -> Normalizer:
    return Normalizer(parse_config({"topic_prefix": "p", "topics": [{"name": "src", "format": "maxwell-json", "output": output}]}))


MAXWELL = b'{"database":"shop","table":"orders","type":"insert","ts":1700000000,"xid":1,"data":{"id":7,"note":"x"},"primary_key":[7],"primary_key_columns":["id"]}'


def test_worker_writes_avro_records() -> None:
    normalizer = _normalizer({"format": "avro", "schema_registry": {"url": "mock://worker"}})
    runtime = normalizer.runtime_for("src")
    assert runtime is not None and runtime.converter is not None
    outcome = normalizer.process(Message(MAXWELL, None, "src", 0, 0), runtime)
    assert outcome.dlq is None and outcome.records
    record = outcome.records[0]
    value = record.value_bytes()
    assert value is not None
    _framing(value)
    client = runtime.converter.value.client  # type: ignore[attr-defined]
    back = AvroDeserializer(client)(value, SerializationContext(record.topic, MessageField.VALUE))
    assert back["after"] == {"id": 7, "note": "x"} and back["op"] == "c"


def test_worker_dead_letters_what_avro_cannot_write() -> None:
    normalizer = _normalizer({"format": "avro", "schema_registry": {"url": "mock://worker"}})
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    bad = MAXWELL.replace(b'"note"', b'"a note"')
    outcome = normalizer.process(Message(bad, None, "src", 0, 1), runtime)
    assert outcome.dlq is not None and outcome.error_class == "DecodeError"
    assert outcome.dlq[2] == bad  # the original bytes go to the DLQ


def test_worker_retries_while_the_registry_is_down() -> None:
    normalizer = _normalizer({"format": "avro", "schema_registry": {"url": "mock://worker"}})
    runtime = normalizer.runtime_for("src")
    assert runtime is not None and runtime.converter is not None
    runtime.converter.value.client = _FailingRegistry(SchemaRegistryError(503, 50003, "down"))  # type: ignore[attr-defined]
    runtime.converter.key.client = runtime.converter.value.client  # type: ignore[attr-defined]
    with pytest.raises(StateStoreError):
        normalizer.process(Message(MAXWELL, None, "src", 0, 2), runtime)


def test_worker_json_without_schemas() -> None:
    normalizer = _normalizer({"schemas.enable": False})
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    record = normalizer.process(Message(MAXWELL, None, "src", 0, 0), runtime).records[0]
    value = orjson.loads(record.value_bytes() or b"")
    assert "schema" not in value and value["after"] == {"id": 7, "note": "x"}
    assert orjson.loads(record.key_bytes() or b"") == {"id": 7}


# ----------------------------------------------------------------------------- config


def test_connect_spellings_are_aliases() -> None:
    config = OutputConfig.model_validate(
        {
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": False,
            "value.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
            "key.subject.name.strategy": "RecordNameStrategy",
            "auto.register.schemas": False,
            "schema_registry": {"schema.registry.url": "http://a:8081, http://b:8081"},
        }
    )
    assert config.format is ConverterFormat.AVRO and config.key_converter is ConverterFormat.JSON
    assert not config.key_schemas
    assert config.subject_name_strategy is SubjectNameStrategy.TOPIC_RECORD
    assert config.key_subject_name_strategy is SubjectNameStrategy.RECORD
    assert not config.auto_register_schemas
    assert config.schema_registry is not None and config.schema_registry.url == "http://a:8081,http://b:8081"


@pytest.mark.parametrize(
    ("output", "key", "reason"),
    [
        ({"format": "avro"}, "topics[0].output", "needs schema_registry"),
        ({"schema_registry": {"url": "http://x"}}, "topics[0].output", "no converter is avro"),
        ({"format": "protobuf"}, "topics[0].output.format", "'json' or 'avro'"),
        ({"format": "avro", "schema_registry": {"url": "ftp://x"}}, "topics[0].output.schema_registry.url", "http://"),
        ({"format": "avro", "schema_registry": {"url": "http://u:pw@x"}}, "topics[0].output.schema_registry.url", "no credentials"),
        ({"format": "avro", "schema_registry": {"url": "http://x", "username": "u"}}, "topics[0].output.schema_registry", "both"),
        ({"format": "avro", "schema_registry": {"url": "http://x", "bearer_token": "t"}}, "topics[0].output.schema_registry", "logical_cluster"),
        ({"format": "avro", "schema_registry": {"url": "http://x", "oauth_client_id": "c", "bearer_logical_cluster": "l"}}, "topics[0].output.schema_registry", "oauth_client_secret"),
        ({"format": "avro", "schema_registry": {"url": "http://x", "username": "u", "password": "p", "bearer_token": "t", "bearer_logical_cluster": "l"}}, "topics[0].output.schema_registry", "choose one"),
        ({"format": "avro", "schema_registry": {"url": "http://x"}, "use.latest.version": True}, "topics[0].output", "auto_register_schemas"),
        ({"format": "avro", "schema_registry": {"url": "http://x"}, "subject_name_strategy": "Nope"}, "topics[0].output.subject_name_strategy", "TopicNameStrategy"),
        ({"colour": "red"}, "topics[0].output.colour", "unknown key"),
    ],
)
def test_bad_output_config_names_the_key(output: dict[str, Any], key: str, reason: str) -> None:
    from transforms.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config({"topics": [{"name": "src", "format": "canal-json", "output": output}]})
    assert info.value.key == key
    assert reason in info.value.reason


def test_registry_secrets_resolve_and_stay_masked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SR_PASSWORD", "hunter2-sr")
    secret = tmp_path / "token"
    secret.write_text("tok-123\n")
    basic = SchemaRegistrySettings.model_validate({"url": "https://sr:8081", "username": "svc", "password": "${SR_PASSWORD}"})
    assert basic.client_config()["basic.auth.user.info"] == "svc:hunter2-sr"
    assert "hunter2-sr" not in repr(basic) and list(basic.secret_values()) == ["hunter2-sr"]
    bearer = SchemaRegistrySettings.model_validate(
        {"url": "https://sr", "bearer_token": f"file:{secret}", "bearer_logical_cluster": "lsrc-1"}
    )
    conf = bearer.client_config()
    assert conf["bearer.auth.credentials.source"] == "STATIC_TOKEN" and conf["bearer.auth.token"] == "tok-123"
    assert conf["bearer.auth.logical.cluster"] == "lsrc-1"
    with pytest.raises(Exception, match="NO_SUCH_SR_VAR"):
        SchemaRegistrySettings.model_validate({"url": "https://sr", "username": "u", "password": "${NO_SUCH_SR_VAR}"})


def test_registry_oauth_and_tls_settings(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_text("x")
    settings = SchemaRegistrySettings.model_validate(
        {
            "url": "https://sr",
            "oauth_client_id": "cid",
            "oauth_client_secret": "csecret",
            "oauth_scope": "schema",
            "oauth_token_endpoint_url": "https://idp/token",
            "bearer_logical_cluster": "lsrc-1",
            "bearer_identity_pool_id": "pool-1",
            "ssl_cafile": str(ca),
            "ssl_certfile": str(cert),
            "ssl_keyfile": str(key),
            "ssl_key_password": "kp",
        }
    )
    conf = settings.client_config()
    assert conf["bearer.auth.credentials.source"] == "OAUTHBEARER"
    assert (conf["bearer.auth.client.id"], conf["bearer.auth.client.secret"]) == ("cid", "csecret")
    assert conf["bearer.auth.issuer.endpoint.url"] == "https://idp/token" and conf["bearer.auth.scope"] == "schema"
    assert conf["bearer.auth.identity.pool.id"] == "pool-1"
    assert conf["ssl.ca.location"] == str(ca) and conf["ssl.certificate.location"] == str(cert)
    assert conf["ssl.key.location"] == str(key) and conf["ssl.key.password"] == "kp"
    with pytest.raises(Exception, match="does not exist"):
        SchemaRegistrySettings.model_validate({"url": "https://sr", "ssl_cafile": str(tmp_path / "missing.pem")})


def test_mock_client_takes_the_settings() -> None:
    """The config we build is one confluent-kafka's client accepts (no unknown keys)."""
    from service.converters import registry_client

    client = registry_client(SchemaRegistrySettings.model_validate({"url": "mock://settings", "username": "u", "password": "p"}))
    assert client.get_subjects() == []


def test_encoded_bytes_are_not_base64_text() -> None:
    """Avro bytes columns carry raw bytes (the Connect JSON form is base64 text)."""
    client = _mock()
    table = TableSchema("db", None, "b", (Column("id", ConnectType.INT32, False), Column("blob", ConnectType.BYTES)), ("id",))
    event = ChangeEvent(Operation.CREATE, table, None, {"id": 1, "blob": b"\x00\x01raw"}, SourceInfo("canal-json", 1))
    record = emit([event], EmitOptions())[0]
    out = _avro(client).convert([record])[0]
    assert b"\x00\x01raw" in (out.value_bytes() or b"")
    assert base64.b64encode(b"\x00\x01raw") not in (out.value_bytes() or b"")
