"""Fuzz seeds: every golden input message, with the decoder state it was decoded in.

A seed is one message of a golden case (``tests/data/<format>/<case>.txt``) plus a snapshot of
the metadata store as it was just before that message, so a mutated Qlik data message still
meets its registered schema and a mutated Shareplex ``UPDATE AFTER`` its remembered before
image. Each fuzz example gets a fresh decoder over a copy-on-write view of the snapshot, so
examples never see each other's state (Hypothesis needs a failing example to replay alike).

A seed also knows how to take its message apart into a mutable tree and put it back together
(:class:`Layout`): JSON documents through ``json`` (which writes integers of any size), Avro
messages through fastavro with their own schema (DTS ``Record``; Qlik's envelope with the
metadata message's ``messageSchema`` or the registered ``dataSchema`` for the body), CSV rows as
lists of fields.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from tests.goldens import cases, iter_messages
from transforms.decoders import Decoder, Message, decoder_class
from transforms.decoders.dts_avro import DtsSchemaVersion, record_schema
from transforms.decoders.qlik import ENVELOPE_SCHEMA, SCHEMA_NAMESPACE
from transforms.errors import DecodeError
from transforms.options import FormatOptions, parse_options

__all__ = ["Layout", "Seed", "SnapshotStore", "format_seeds", "fuzz_formats"]

Tree = Any
"""A message taken apart: a JSON value, an Avro record (fastavro tuple notation), or a pair."""


@dataclass(frozen=True)
class Layout:
    """How to turn a seed message into a tree and back (``decode`` is re-run per example)."""

    kind: str
    decode: Callable[[], Tree]
    encode: Callable[[Tree], bytes]


class SnapshotStore:
    """A copy-on-write metadata store over a frozen snapshot (cheap to create per example)."""

    def __init__(self, base: dict[tuple[str, str], Any]) -> None:
        self._base = base
        self._overlay: dict[tuple[str, str], Any] = {}

    def get(self, namespace: str, key: str) -> Any | None:
        slot = (namespace, key)
        if slot in self._overlay:
            return self._overlay[slot]
        return self._base.get(slot)

    def put(self, namespace: str, key: str, value: Any) -> None:
        self._overlay[(namespace, key)] = value

    def snapshot(self) -> dict[tuple[str, str], Any]:
        """Everything the store holds now, as a new base for other stores."""
        return {**self._base, **self._overlay}


@dataclass(frozen=True)
class Seed:
    """One golden message and what is needed to decode it (and mutants of it) in isolation."""

    format_id: str
    case: str
    line: int
    message: Message
    options: FormatOptions
    store: dict[tuple[str, str], Any] = field(repr=False)
    layout: Layout | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.case}:{self.line}"

    def decoder(self) -> Decoder:
        """A fresh decoder of this seed's format over a private view of its store snapshot."""
        return decoder_class(self.format_id)(self.options, SnapshotStore(self.store))


# ------------------------------------------------------------------------------------ layouts


def _json_layout(value: bytes) -> Layout | None:
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return Layout("json", lambda: orjson.loads(value), _dump_json)


def _dump_json(tree: Tree) -> bytes:
    # json (not orjson) writes integers beyond 64 bits, NaN and lone surrogates as given
    return json.dumps(tree, separators=(",", ":")).encode()


def _avro_reader(schema: Any, data: bytes) -> Any:
    return schemaless_reader(io.BytesIO(data), schema, None, return_record_name=True)


def _avro_writer(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def _avro_layout(kind: str, schema: Any, value: bytes) -> Layout:
    def decode() -> Tree:
        return _avro_reader(schema, value)

    def encode(tree: Tree) -> bytes:
        return _avro_writer(schema, tree)

    return Layout(kind, decode, encode)


def _dts_layout(value: bytes) -> Layout | None:
    for version in (DtsSchemaVersion.CURRENT, DtsSchemaVersion.V2019):
        schema = record_schema(version).record
        try:
            if _avro_writer(schema, _avro_reader(schema, value)) == value:
                return _avro_layout(f"avro-{version.value}", schema, value)
        except Exception:  # not a Record under this schema (bad-input seeds)
            continue
    return None


_ENVELOPE = parse_schema(ENVELOPE_SCHEMA)


@cache
def _parsed(text: str) -> Any:
    return parse_schema(orjson.loads(text))


def _qlik_avro_layout(value: bytes, store: dict[tuple[str, str], Any]) -> Layout | None:
    """The envelope and its body as one tree ``{"envelope": ..., "body": ...}``."""
    try:
        envelope = _avro_reader(_ENVELOPE, value)
        if envelope["type"] == "MD":
            body_schema = _parsed(envelope["messageSchema"])
        else:
            document = store[(SCHEMA_NAMESPACE, envelope["messageSchemaId"])]
            body_schema = _parsed(document["dataSchema"])
        _avro_reader(body_schema, envelope["message"])
    except Exception:  # bad-input seeds, unknown schema ids
        return None

    def decode() -> Tree:
        env = _avro_reader(_ENVELOPE, value)
        return {"envelope": env, "body": _avro_reader(body_schema, env.pop("message"))}

    def encode(tree: Tree) -> bytes:
        env = dict(tree["envelope"])
        env["message"] = _avro_writer(body_schema, tree["body"])
        return _avro_writer(_ENVELOPE, env)

    return Layout("avro-qlik", decode, encode)


def _csv_layout(value: bytes) -> Layout | None:
    """The rows of a CSV message as lists of fields (Arcion's cursor JSON sits in one of them)."""
    try:
        text = value.decode()
        rows = [row for row in csv.reader(io.StringIO(text, newline=""), strict=True) if row]
    except (UnicodeDecodeError, csv.Error):
        return None
    if not rows:
        return None

    def decode() -> Tree:
        return [row for row in csv.reader(io.StringIO(text, newline="")) if row]

    def encode(tree: Tree) -> bytes:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(tree)
        return out.getvalue().encode()

    return Layout("csv", decode, encode)


def _layout(format_id: str, value: bytes, store: dict[tuple[str, str], Any]) -> Layout | None:
    if format_id == "dts-avro":
        return _dts_layout(value)
    if format_id == "qlik-avro":
        return _qlik_avro_layout(value, store)
    if format_id == "arcion-csv":
        return _csv_layout(value)
    return _json_layout(value)


# -------------------------------------------------------------------------------------- seeds


def fuzz_formats() -> list[str]:
    """The formats with golden inputs, plus ``auto``."""
    return [*sorted({c.format_id for c in cases()}), "auto"]


@cache
def _case_seeds(format_id: str) -> tuple[Seed, ...]:
    cls = decoder_class(format_id)
    out: list[Seed] = []
    for case in cases(format_id):
        raw_options = {k: v for k, v in case.options.items() if not k.startswith("__")}
        options = parse_options(cls.options_model, raw_options)
        store = SnapshotStore({})
        decoder = cls(options, store)
        for number, key, value in iter_messages(case, cls.binary):
            snapshot = store.snapshot()
            message = Message(value=value, key=key, topic=case.name, offset=number - 1)
            layout = _layout(format_id, value, snapshot)
            out.append(Seed(format_id, case.name, number, message, options, snapshot, layout))
            with contextlib.suppress(DecodeError):
                decoder.decode(message)
    return tuple(out)


@cache
def format_seeds(format_id: str) -> tuple[Seed, ...]:
    """The seeds of a format; ``auto`` gets every detectable format's seeds, raw (not base64)."""
    if format_id != "auto":
        return _case_seeds(format_id)
    from transforms.decoders.auto import DETECTABLE_FORMATS, AutoOptions

    options = AutoOptions()
    out = []
    for fid in DETECTABLE_FORMATS:
        for seed in _case_seeds(fid):
            out.append(Seed("auto", f"{fid}/{seed.case}", seed.line, seed.message, options, seed.store, seed.layout))
    # the offline CLI feeds binary messages as base64 lines; auto accepts those too
    for fid in ("dts-avro", "qlik-avro"):
        for seed in _case_seeds(fid)[:4]:
            value = base64.b64encode(seed.message.value or b"")
            message = Message(value=value, key=None, topic=seed.message.topic)
            out.append(Seed("auto", f"{fid}/{seed.case}.b64", seed.line, message, options, seed.store, None))
    return tuple(out)
