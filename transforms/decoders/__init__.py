"""Format decoders, one module per format id, registered by name and imported lazily."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from transforms.decoders.base import Decoded, Decoder, Message
from transforms.errors import ConfigError
from transforms.metadata import MetadataStore
from transforms.options import parse_options

__all__ = ["DECODERS", "Decoded", "Decoder", "Message", "create_decoder", "decoder_class"]

DECODERS: dict[str, str] = {
    "arcion-csv": "transforms.decoders.arcion_files:ArcionCsvDecoder",
    "arcion-json": "transforms.decoders.arcion_files:ArcionJsonDecoder",
    "arcion-kafka": "transforms.decoders.arcion_kafka:ArcionKafkaDecoder",
    "debezium-json": "transforms.decoders.debezium_json:DebeziumJsonDecoder",
    "canal-json": "transforms.decoders.canal_json:CanalJsonDecoder",
    "shareplex-json": "transforms.decoders.shareplex_json:ShareplexJsonDecoder",
    "dts-avro": "transforms.decoders.dts_avro:DtsAvroDecoder",
    "cdl-json": "transforms.decoders.cdl_json:CdlJsonDecoder",
    "qlik-json": "transforms.decoders.qlik:QlikJsonDecoder",
    "qlik-avro": "transforms.decoders.qlik:QlikAvroDecoder",
    "maxwell-json": "transforms.decoders.maxwell_json:MaxwellJsonDecoder",
    "ogg-json": "transforms.decoders.ogg_json:OggJsonDecoder",
    "aws-dms-json": "transforms.decoders.aws_dms_json:AwsDmsJsonDecoder",
    "aliyun-json": "transforms.decoders.aliyun_json:AliyunJsonDecoder",
    "auto": "transforms.decoders.auto:AutoDecoder",
}
"""Format id → ``module:Class``. Modules are imported on first use."""


def decoder_class(format_id: str) -> type[Decoder]:
    """The decoder class registered for ``format_id``; ConfigError if there is none."""
    target = DECODERS.get(format_id)
    if target is None:
        raise ConfigError("format", format_id, f"unknown format; known: {', '.join(DECODERS)}")
    module_name, _, class_name = target.partition(":")
    cls: type[Decoder] = getattr(importlib.import_module(module_name), class_name)
    return cls


def create_decoder(
    format_id: str, options: Mapping[str, Any] | None = None, metadata: MetadataStore | None = None
) -> Decoder:
    """A configured decoder; options are validated against the format's declared options."""
    cls = decoder_class(format_id)
    opts = parse_options(cls.options_model, options or {}, where=f"{format_id} option")
    return cls(opts, metadata)
