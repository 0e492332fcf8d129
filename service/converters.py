"""Output converters: how a topic entry's records are serialized, as Kafka Connect converters do.

The emitter (:func:`transforms.envelope.emit`) makes every record a Connect JSON document,
``{"schema": ..., "payload": ...}`` for the key and for the value. A topic entry's ``output``
block (:class:`OutputConfig`) says how they are written, key and value each like a Connect
``key.converter`` / ``value.converter``:

* ``json`` with schemas (the default; ``JsonConverter``, ``schemas.enable=true``): the document
  as it is, the same bytes as without an ``output`` block;
* ``json`` without schemas (``schemas.enable=false``): the payload alone, as Debezium writes it
  with ``JsonConverter`` and ``schemas.enable=false``, keys too;
* ``avro``: Confluent's wire format (magic byte, 4-byte schema id, Avro body) through
  confluent-kafka's own ``AvroSerializer`` and ``SchemaRegistryClient``. The Avro schema is what
  Confluent's ``AvroConverter`` derives from the same Connect schema (see :mod:`transforms.avro`):
  Debezium's record names (``<prefix>.<db>.<table>.Envelope``/``.Value``/``.Key``), ``connect.*``
  properties, ``decimal`` logical types. Subjects follow the configured name strategy
  (``TopicNameStrategy`` by default: ``<topic>-key``/``<topic>-value``).

A record the converter cannot write (a name or a decimal Avro has no form for, a schema the
registry refuses as incompatible) is a decode error: the message goes to the dead-letter queue
like any other. An unreachable registry (connection errors, timeouts, HTTP 5xx/429, 401/403) is
a :class:`SchemaRegistryUnavailable`, a :class:`~transforms.errors.StateStoreError`: the worker
retries the message with back-off and reports not-ready meanwhile; nothing goes to the DLQ for it.

The registry client is synchronous: registering a new schema (once per schema and subject;
cached afterwards) blocks the worker's loop for one HTTP round trip, bounded by ``timeout_s``.

:class:`SchemaRegistrySettings` is also the sink's ``schema_registry`` section (it reads Avro
records back through the same client).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import orjson
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from cdcnorm_common.registry import (
    SchemaRegistrySettings,
    SchemaRegistryUnavailable,
    is_registry_outage,
    registry_client,
)
from transforms.avro import AvroMappingError, avro_datum, avro_schema
from transforms.envelope import OutRecord
from transforms.errors import DecodeError

__all__ = [
    "ConverterFormat",
    "EncodedRecord",
    "OutputConfig",
    "RecordConverter",
    "SchemaRegistrySettings",
    "SchemaRegistryUnavailable",
    "SubjectNameStrategy",
    "build_converter",
    "is_registry_outage",
    "output_summary",
    "registry_client",
]


# ----------------------------------------------------------------------------- config


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ConverterFormat(StrEnum):
    """The converter of a record part; Connect's class names are accepted too."""

    JSON = "json"
    AVRO = "avro"


_CONVERTER_CLASSES = {
    "org.apache.kafka.connect.json.jsonconverter": "json",
    "io.confluent.connect.avro.avroconverter": "avro",
    "jsonconverter": "json",
    "avroconverter": "avro",
}


def _converter_name(value: Any) -> Any:
    if isinstance(value, str):
        return _CONVERTER_CLASSES.get(value.strip().lower(), value.strip().lower())
    return value


Converter = Annotated[ConverterFormat, BeforeValidator(_converter_name)]


class SubjectNameStrategy(StrEnum):
    """Confluent's subject name strategies (``key.subject.name.strategy`` / ``value.subject.name.strategy``)."""

    TOPIC = "TopicNameStrategy"  # <topic>-key / <topic>-value
    RECORD = "RecordNameStrategy"  # <record full name>
    TOPIC_RECORD = "TopicRecordNameStrategy"  # <topic>-<record full name>

    def function(self) -> Any:
        from confluent_kafka.schema_registry import (
            record_subject_name_strategy,
            topic_record_subject_name_strategy,
            topic_subject_name_strategy,
        )

        return {
            SubjectNameStrategy.TOPIC: topic_subject_name_strategy,
            SubjectNameStrategy.RECORD: record_subject_name_strategy,
            SubjectNameStrategy.TOPIC_RECORD: topic_record_subject_name_strategy,
        }[self]


def _strategy_name(value: Any) -> Any:
    """``io.confluent.kafka.serializers.subject.TopicNameStrategy``, ``TopicNameStrategy``,
    ``topic``, ``record``, ``topic_record`` (any case) all name a strategy."""
    if not isinstance(value, str):
        return value
    short = value.strip().rpartition(".")[2].lower().replace("-", "").replace("_", "")
    for member in SubjectNameStrategy:
        name = member.value.lower()
        if short in (name, name.removesuffix("namestrategy")):
            return member.value
    return value


Strategy = Annotated[SubjectNameStrategy, BeforeValidator(_strategy_name)]
class OutputConfig(_Model):
    """A topic entry's ``output`` block: the key and value converters of its records.

    Connect's spellings are accepted beside the short keys: ``value.converter``,
    ``key.converter`` (class names or ``json``/``avro``), ``value.converter.schemas.enable``,
    ``key.converter.schemas.enable``, ``value.subject.name.strategy``,
    ``key.subject.name.strategy``, ``auto.register.schemas``, ``use.latest.version``,
    ``normalize.schemas``, ``scrub.invalid.names``. The key follows the value unless set: ``key_format`` defaults to
    ``format`` and ``key_schemas_enable`` to ``schemas_enable``.

    >>> OutputConfig.model_validate({"value.converter.schemas.enable": False}).key_schemas
    False
    """

    format: Converter = Field(ConverterFormat.JSON, validation_alias=AliasChoices("format", "value.converter"))
    key_format: Converter | None = Field(None, validation_alias=AliasChoices("key_format", "key.converter"))
    schemas_enable: bool = Field(
        True, validation_alias=AliasChoices("schemas_enable", "value.converter.schemas.enable", "schemas.enable")
    )
    key_schemas_enable: bool | None = Field(
        None, validation_alias=AliasChoices("key_schemas_enable", "key.converter.schemas.enable")
    )
    schema_registry: SchemaRegistrySettings | None = None
    subject_name_strategy: Strategy = Field(
        SubjectNameStrategy.TOPIC,
        validation_alias=AliasChoices("subject_name_strategy", "value.subject.name.strategy"),
    )
    key_subject_name_strategy: Strategy = Field(
        SubjectNameStrategy.TOPIC,
        validation_alias=AliasChoices("key_subject_name_strategy", "key.subject.name.strategy"),
    )
    auto_register_schemas: bool = Field(True, validation_alias=AliasChoices("auto_register_schemas", "auto.register.schemas"))
    use_latest_version: bool = Field(False, validation_alias=AliasChoices("use_latest_version", "use.latest.version"))
    normalize_schemas: bool = Field(False, validation_alias=AliasChoices("normalize_schemas", "normalize.schemas"))
    scrub_invalid_names: bool = Field(
        False,
        validation_alias=AliasChoices("scrub_invalid_names", "scrub.invalid.names"),
        description="Avro names as AvroConverter's scrub.invalid.names=true writes them (first name -> first_name).",
    )

    @property
    def key_converter(self) -> ConverterFormat:
        return self.key_format or self.format

    @property
    def key_schemas(self) -> bool:
        return self.schemas_enable if self.key_schemas_enable is None else self.key_schemas_enable

    @property
    def is_default(self) -> bool:
        """JSON with schemas for key and value: the emitter's bytes, unchanged."""
        return self.format is ConverterFormat.JSON and self.key_converter is ConverterFormat.JSON and (
            self.schemas_enable and self.key_schemas
        )

    @model_validator(mode="after")
    def _consistent(self) -> OutputConfig:
        avro = ConverterFormat.AVRO in (self.format, self.key_converter)
        if avro and self.schema_registry is None:
            raise ValueError("the avro converter needs schema_registry (url, ...)")
        if not avro and self.schema_registry is not None:
            raise ValueError("schema_registry is set but no converter is avro")
        if self.use_latest_version and self.auto_register_schemas:
            raise ValueError("use_latest_version needs auto_register_schemas: false")
        return self


# ----------------------------------------------------------------------------- records


class EncodedRecord(OutRecord):
    """An :class:`OutRecord` whose key and value bytes were written by a converter.

    ``key``/``value`` keep the Connect JSON documents (for tools and tests); the bytes sent are
    :meth:`key_bytes`/:meth:`value_bytes`.
    """

    __slots__ = ("encoded_key", "encoded_value")

    def __init__(self, record: OutRecord, key: bytes | None, value: bytes | None) -> None:
        super().__init__(record.topic, record.key, record.value, record.headers)
        self.encoded_key = key
        self.encoded_value = value

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle, by this class's own arguments
        return type(self), (OutRecord(self.topic, self.key, self.value, self.headers), self.encoded_key,
                            self.encoded_value)

    def key_bytes(self) -> bytes | None:
        return self.encoded_key

    def value_bytes(self) -> bytes | None:
        return self.encoded_value


class _Part:
    """Writes one part (key or value) of records."""

    def encode(self, topic: str, doc: dict[str, Any] | None, record: OutRecord) -> bytes | None:
        raise NotImplementedError


class _JsonWithSchema(_Part):
    """``JsonConverter`` with ``schemas.enable=true``: the emitter's own bytes."""

    def __init__(self, is_key: bool) -> None:
        self.is_key = is_key

    def encode(self, topic: str, doc: dict[str, Any] | None, record: OutRecord) -> bytes | None:
        return record.key_bytes() if self.is_key else record.value_bytes()


class _JsonPayload(_Part):
    """``JsonConverter`` with ``schemas.enable=false``: the payload alone."""

    def encode(self, topic: str, doc: dict[str, Any] | None, record: OutRecord) -> bytes | None:
        if doc is None:
            return None
        return orjson.dumps(_payload(doc))


def _payload(doc: dict[str, Any]) -> Any:
    if len(doc) == 2 and "schema" in doc and "payload" in doc:
        return doc["payload"]
    return doc


_MAX_SCHEMAS = 10_000


class _Avro(_Part):
    """Confluent Avro through ``AvroSerializer``: one serializer per distinct Avro schema."""

    def __init__(self, client: Any, is_key: bool, config: OutputConfig) -> None:
        from confluent_kafka.serialization import MessageField

        self.client = client
        self.scrub = config.scrub_invalid_names
        self.field = MessageField.KEY if is_key else MessageField.VALUE
        strategy = config.key_subject_name_strategy if is_key else config.subject_name_strategy
        self.conf = {
            "subject.name.strategy": strategy.function(),
            "auto.register.schemas": config.auto_register_schemas,
            "use.latest.version": config.use_latest_version,
            "normalize.schemas": config.normalize_schemas,
        }
        # id(Connect schema) -> (the schema, its serializer): the emitter shares schema objects
        self._by_id: dict[int, tuple[Any, Any]] = {}
        # Avro schema text -> serializer (schemas equal in content share one)
        self._by_text: dict[bytes, Any] = {}

    def serializer(self, schema: Any) -> Any:
        hit = self._by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        try:
            text = orjson.dumps(avro_schema(schema, self.scrub))
        except (AvroMappingError, KeyError, TypeError, ValueError) as exc:
            name = schema.get("name") if isinstance(schema, dict) else None
            raise DecodeError("avro", name, f"no Avro schema for this record: {exc}") from exc
        serializer = self._by_text.get(text)
        if serializer is None:
            from confluent_kafka.schema_registry.avro import AvroSerializer

            if len(self._by_text) >= _MAX_SCHEMAS:
                self._by_text.clear()
            try:
                serializer = self._by_text[text] = AvroSerializer(self.client, text.decode(), conf=dict(self.conf))
            except Exception as exc:  # fastavro refused the schema
                raise DecodeError("avro", None, f"the Avro schema does not parse: {exc}") from exc
        if len(self._by_id) >= _MAX_SCHEMAS:
            self._by_id.clear()
        self._by_id[id(schema)] = (schema, serializer)
        return serializer

    def encode(self, topic: str, doc: dict[str, Any] | None, record: OutRecord) -> bytes | None:
        from confluent_kafka.serialization import SerializationContext

        if doc is None:
            return None
        if not (len(doc) == 2 and "schema" in doc and "payload" in doc) or not isinstance(doc["schema"], dict):
            raise DecodeError("avro", None, "a record without a Connect schema cannot be written as Avro")
        schema = doc["schema"]
        serializer = self.serializer(schema)
        try:
            datum = avro_datum(schema, doc["payload"], self.scrub)
            data: bytes | None = serializer(datum, SerializationContext(topic, self.field))
            return data
        except AvroMappingError as exc:
            raise DecodeError("avro", schema.get("name"), str(exc)) from exc
        except Exception as exc:
            if is_registry_outage(exc):
                raise SchemaRegistryUnavailable(f"schema registry: {exc}") from exc
            raise DecodeError("avro", schema.get("name"), f"{type(exc).__name__}: {exc}") from exc


class RecordConverter:
    """Serializes the emitter's records with a topic entry's key and value converters."""

    def __init__(self, key: _Part, value: _Part) -> None:
        self.key = key
        self.value = value

    def convert(self, records: list[OutRecord]) -> list[OutRecord]:
        """The records with their key and value bytes written (raises DecodeError for a record the
        converter cannot write, :class:`SchemaRegistryUnavailable` when the registry is down)."""
        out: list[OutRecord] = []
        for record in records:
            topic = record.topic
            key = self.key.encode(topic, record.key, record)
            value = self.value.encode(topic, record.value, record)
            out.append(EncodedRecord(record, key, value))
        return out


def _part(fmt: ConverterFormat, schemas: bool, is_key: bool, config: OutputConfig, client: Any) -> _Part:
    if fmt is ConverterFormat.AVRO:
        return _Avro(client, is_key, config)
    return _JsonWithSchema(is_key) if schemas else _JsonPayload()


def build_converter(config: OutputConfig | None, client: Any = None) -> RecordConverter | None:
    """The converter of an ``output`` block; ``None`` when records leave as the emitter wrote them
    (no block, or JSON with schemas for both parts). ``client`` overrides the registry client
    built from ``schema_registry`` (tests share one mock registry this way)."""
    if config is None or config.is_default:
        return None
    if client is None and config.schema_registry is not None:
        client = registry_client(config.schema_registry)
    return RecordConverter(
        _part(config.key_converter, config.key_schemas, True, config, client),
        _part(config.format, config.schemas_enable, False, config, client),
    )


def output_summary(config: OutputConfig | None) -> str:
    """A short description for ``validate-config``: ``json``, ``json (no schemas)``, ``avro``..."""
    if config is None or config.is_default:
        return "json"

    def one(fmt: ConverterFormat, schemas: bool) -> str:
        return "avro" if fmt is ConverterFormat.AVRO else ("json" if schemas else "json (no schemas)")

    value = one(config.format, config.schemas_enable)
    key = one(config.key_converter, config.key_schemas)
    return value if key == value else f"key {key}, value {value}"

