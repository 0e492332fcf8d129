"""Format detection (``auto``): decide each message's format from its content, then delegate.

Detection looks at the message, never at the topic, and decides from cheap evidence first:

* **Binary** (not JSON): a Qlik Replicate Avro envelope starts with the fixed ``atMSG`` bytes
  (``qlik-avro``); otherwise the bytes are a ``dts-avro`` message when they decode completely
  with the DTS ``Record`` schema (current, then 2019). A line of base64 text whose bytes are one of
  these is accepted too (the offline CLI feeds base64 lines) and decoded before delegation.
* **JSON objects**, by their keys (``body`` is ``payload`` when the document is a Connect
  ``{"schema", "payload"}`` wrapper, else the document):

  ==================  ===========================================================================
  ``qlik-json``       ``magic: "atMSG"``, or ``magic`` + ``type`` + ``message``
  ``canal-json``      ``type`` and one of ``isDdl``/``pkNames``/``mysqlType``/``sqlType``/``es``,
                      or ``data`` (or ``old`` with ``data: null``) is an array and ``type`` is
                      not a Maxwell type (Canal writes ``INSERT``, Maxwell ``insert``)
  ``maxwell-json``    ``type`` + ``database``, and one of ``xid``/``xoffset``/``commit``/
                      ``primary_key_columns``/``def``/``position``/``server_id``/``thread_id``,
                      or ``data`` is an object, or ``type`` is a Maxwell type
  ``ogg-json``        ``op_type`` with ``table``/``op_ts``/``pos``/``before``/``after``
  ``shareplex-json``  ``meta`` is an object with ``op``
  ``aws-dms-json``    ``metadata`` is an object with ``record-type``
  ``arcion-json``     ``opType`` with ``tableName``/``exists``/``cursor``/``before``/``after``
  ``cdl-json``        ``body`` has a CDL field: ``message_version``, ``message_type``,
                      ``DATA_STORE``, ``SEG_OWNER``, ``OPERATION``, ``HEARTBEAT_IDENTIFIER``,
                      ``LOB_COLUMNS`` (CDL 2.0 is a Debezium envelope plus these)
  ``aliyun-json``     ``schema.dataColumn``, or a wrapped ``body.op`` in capitals (``INSERT``,
                      ``UPDATE_AFTER`` ...)
  ``debezium-json``   ``body`` is a Debezium value without CDL/Aliyun fields: an envelope (``op``
                      not in capitals, with ``before``/``after``/``source``), transaction
                      metadata (``status`` BEGIN/END, ``id``, ``event_count``/
                      ``data_collections``), a schema change (``ddl``/``tableChanges`` with
                      ``source``/``databaseName``) or a heartbeat (only ``ts_ms``)
  ``arcion-kafka``    a Debezium envelope whose ``source.connector`` is written in capitals
                      (Arcion writes the source type, ``MYSQL``, ``ORACLE``; Debezium connector
                      names are lower case: ``mysql``, ``postgresql``)
  ==================  ===========================================================================

  Exactly one format must match: none is a :class:`~transforms.errors.DetectionError` saying
  nothing matched (unless ``fallback`` is set), several is a ``DetectionError`` naming them.
  Detection only says which decoder to use; that decoder then validates the message fully, so a
  message with the right shape but bad content fails with that format's own error.

Not detected: ``arcion-csv`` (a CSV line could be anything) and rows that do not say what they
are (Arcion JSON snapshot rows, Debezium ``unwrapped`` flat rows). Use ``fallback`` for those,
or the explicit format.

Options: ``formats`` (an allow-list of candidate formats), ``fallback`` (the format used when
nothing matches) with that format's own options given as ``fallback.<option>=VALUE``, and the
options every format has (``decimal.handling.mode``, ``max.message.bytes``, ``max.json.depth``),
which are passed on to every delegate. Other per-format options (``key.columns``,
``schema.version``, ``transaction.end.events`` ...) are not available through ``auto``: run the
explicit format to use them.

Each detected format gets one decoder instance, created on first use and sharing this decoder's
metadata store (so Qlik metadata messages seen through ``auto`` serve later Qlik data messages).
What was detected is reported: every :class:`~transforms.envelope.ChangeEvent` gets the header
``__cdcnorm.format`` (the format id), and :attr:`AutoDecoder.detected` counts the detected
messages per format (counted on detection, whether or not the delegate then decodes them).

>>> decoder = AutoDecoder()
>>> decoder.detect(Message(value=b'{"table":"HR.EMP","op_type":"I","after":{"ID":1}}'))
'ogg-json'
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from pydantic import Field, field_validator, model_validator

from transforms.decoders.base import Decoded, Decoder, Message
from transforms.envelope import ChangeEvent, Event
from transforms.errors import ConfigError, DetectionError
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions, parse_options

__all__ = ["DETECTABLE_FORMATS", "FORMAT_HEADER", "AutoDecoder", "AutoOptions"]

FORMAT_ID = "auto"
FORMAT_HEADER = "__cdcnorm.format"
"""Header added to every change event decoded through ``auto``: the detected format id."""

_FALLBACK_PREFIX = "fallback."
_FALLBACK_OPTIONS = "fallback.<option>"
_QLIK_AVRO_MAGIC = b"atMSG"  # the fixed 5-byte ``magic`` that starts every Replicate Avro envelope
_BASE64_RE = re.compile(rb"[A-Za-z0-9+/]+={0,2}")


# ----------------------------------------------------------------------------------- signatures


@dataclass(frozen=True, slots=True)
class _Shape:
    """The parts of a JSON document that detection looks at."""

    doc: dict[str, Any]
    body: dict[str, Any]
    wrapped: bool


_CANAL_KEYS = frozenset({"isDdl", "pkNames", "mysqlType", "sqlType", "es"})
_MAXWELL_KEYS = frozenset(
    {"xid", "xoffset", "commit", "primary_key_columns", "def", "position", "server_id", "thread_id"}
)
_MAXWELL_TYPES = frozenset(
    {
        "insert",
        "update",
        "delete",
        "bootstrap-insert",
        "bootstrap-start",
        "bootstrap-complete",
        "heartbeat",
        "database-create",
        "database-alter",
        "database-drop",
        "table-create",
        "table-alter",
        "table-drop",
    }
)
_OGG_KEYS = frozenset({"table", "op_ts", "pos", "before", "after"})
_ARCION_ROW_KEYS = frozenset({"tableName", "exists", "cursor", "before", "after"})
_CDL_KEYS = frozenset(
    {
        "message_version",
        "message_type",
        "DATA_STORE",
        "SEG_OWNER",
        "OPERATION",
        "HEARTBEAT_IDENTIFIER",
        "LOB_COLUMNS",
    }
)
_ENVELOPE_KEYS = frozenset({"before", "after", "source"})


def _is_qlik_json(s: _Shape) -> bool:
    doc = s.doc
    return doc.get("magic") == "atMSG" or ("magic" in doc and "type" in doc and "message" in doc)


def _maxwell_type(doc: dict[str, Any]) -> bool:
    kind = doc.get("type")
    return isinstance(kind, str) and kind in _MAXWELL_TYPES


def _is_canal(s: _Shape) -> bool:
    doc = s.doc
    if "type" not in doc:
        return False
    if not _CANAL_KEYS.isdisjoint(doc):
        return True
    data = doc.get("data")
    rows = isinstance(data, list) or (data is None and isinstance(doc.get("old"), list))
    return rows and not _maxwell_type(doc)


def _is_maxwell(s: _Shape) -> bool:
    doc = s.doc
    if "type" not in doc or "database" not in doc:
        return False
    return not _MAXWELL_KEYS.isdisjoint(doc) or isinstance(doc.get("data"), dict) or _maxwell_type(doc)


def _is_ogg(s: _Shape) -> bool:
    return "op_type" in s.doc and not _OGG_KEYS.isdisjoint(s.doc)


def _is_shareplex(s: _Shape) -> bool:
    meta = s.doc.get("meta")
    return isinstance(meta, dict) and "op" in meta


def _is_aws_dms(s: _Shape) -> bool:
    metadata = s.doc.get("metadata")
    return isinstance(metadata, dict) and "record-type" in metadata


def _is_arcion_row(s: _Shape) -> bool:
    return "opType" in s.doc and not _ARCION_ROW_KEYS.isdisjoint(s.doc)


def _is_cdl(s: _Shape) -> bool:
    return not _CDL_KEYS.isdisjoint(s.body)


def _is_aliyun(s: _Shape) -> bool:
    schema = s.doc.get("schema")
    if isinstance(schema, dict) and "dataColumn" in schema:
        return True
    op = s.body.get("op")
    return s.wrapped and isinstance(op, str) and op.isupper() and not _is_cdl(s)


def _debezium_value(s: _Shape) -> bool:
    """A Debezium value of any kind (envelope, transaction, schema change, heartbeat)."""
    if _is_cdl(s) or _is_aliyun(s):
        return False
    body = s.body
    op = body.get("op")
    if isinstance(op, str):
        return not op.isupper() and not _ENVELOPE_KEYS.isdisjoint(body)
    if body.get("status") in ("BEGIN", "END") and "id" in body:
        return "event_count" in body or "data_collections" in body
    if "ddl" in body or "tableChanges" in body:
        return "source" in body or "databaseName" in body
    return set(body) == {"ts_ms"}


def _arcion_connector(s: _Shape) -> bool:
    source = s.body.get("source")
    connector = source.get("connector") if isinstance(source, dict) else None
    return isinstance(connector, str) and connector.isupper()


def _is_debezium(s: _Shape) -> bool:
    return _debezium_value(s) and not _arcion_connector(s)


def _is_arcion_kafka(s: _Shape) -> bool:
    return _debezium_value(s) and isinstance(s.body.get("op"), str) and _arcion_connector(s)


_JSON_SIGNATURES: dict[str, Callable[[_Shape], bool]] = {
    "qlik-json": _is_qlik_json,
    "canal-json": _is_canal,
    "maxwell-json": _is_maxwell,
    "ogg-json": _is_ogg,
    "shareplex-json": _is_shareplex,
    "aws-dms-json": _is_aws_dms,
    "arcion-json": _is_arcion_row,
    "cdl-json": _is_cdl,
    "aliyun-json": _is_aliyun,
    "debezium-json": _is_debezium,
    "arcion-kafka": _is_arcion_kafka,
}
_BINARY_FORMATS = ("qlik-avro", "dts-avro")

DETECTABLE_FORMATS: tuple[str, ...] = (*_JSON_SIGNATURES, *_BINARY_FORMATS)
"""The formats ``auto`` can recognise (``arcion-csv`` is only reachable through ``fallback``)."""


def _is_dts_record(data: bytes) -> bool:
    """Whether ``data`` is exactly one DTS ``Record`` (current or 2019 schema)."""
    from fastavro import schemaless_reader

    from transforms.decoders.dts_avro import DtsSchemaVersion, record_schema

    for version in (DtsSchemaVersion.CURRENT, DtsSchemaVersion.V2019):
        fo = io.BytesIO(data)
        try:
            record = schemaless_reader(fo, record_schema(version).record)
        except Exception:  # fastavro raises many kinds of errors on bytes that are not a Record
            continue
        if isinstance(record, dict) and fo.tell() == len(data):
            return True
    return False


# --------------------------------------------------------------------------------------- options


def _format_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",") if p.strip()]
    return value


class AutoOptions(FormatOptions):
    """Options of ``auto``: candidate formats, the fallback format and its options."""

    formats: tuple[str, ...] | None = Field(
        None,
        alias="formats",
        description="Comma-separated allow-list of the formats to detect (default: every detectable format: "
        + ", ".join(DETECTABLE_FORMATS)
        + ").",
    )
    fallback: str | None = Field(
        None,
        alias="fallback",
        description="Format used for messages that no candidate matches (e.g. arcion-csv, which is never "
        "detected); default: such messages are errors.",
    )
    fallback_options: dict[str, Any] = Field(
        default_factory=dict,
        alias=_FALLBACK_OPTIONS,
        description="Options of the fallback format, one per fallback.<option>=VALUE (e.g. fallback.table=db.t). "
        "Other formats' own options are not available through auto.",
    )

    @model_validator(mode="before")
    @classmethod
    def _collect_fallback_options(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        nested: dict[str, Any] = dict(data.get(_FALLBACK_OPTIONS) or data.get("fallback_options") or {})
        for key, value in data.items():
            if key in (_FALLBACK_OPTIONS, "fallback_options"):
                continue
            if isinstance(key, str) and key.startswith(_FALLBACK_PREFIX):
                nested[key[len(_FALLBACK_PREFIX) :]] = value
            else:
                out[key] = value
        if nested:
            out[_FALLBACK_OPTIONS] = nested
        return out

    @field_validator("formats", mode="before")
    @classmethod
    def _formats(cls, value: Any) -> Any:
        value = _format_list(value)
        if value is None:
            return None
        if not value:
            raise ValueError("expected a comma-separated list of format ids, found none")
        for fid in value:
            if fid not in DETECTABLE_FORMATS:
                hint = "; use fallback=arcion-csv" if fid == "arcion-csv" else ""
                raise ValueError(
                    f"{fid!r} is not a detectable format (known: {', '.join(DETECTABLE_FORMATS)}){hint}"
                )
        return value

    @field_validator("fallback")
    @classmethod
    def _fallback(cls, value: str | None) -> str | None:
        from transforms.decoders import DECODERS

        if value is not None and (value not in DECODERS or value == FORMAT_ID):
            known = ", ".join(f for f in DECODERS if f != FORMAT_ID)
            raise ValueError(f"unknown fallback format {value!r}; known: {known}")
        return value


def _common_options(options: FormatOptions) -> dict[str, Any]:
    """The options every format has, as set on ``auto``."""
    return {name: getattr(options, name) for name in FormatOptions.model_fields}


# --------------------------------------------------------------------------------------- decoder


class AutoDecoder(Decoder):
    """Detects each message's format from its content and decodes it with that format's decoder."""

    format_id = FORMAT_ID
    description = "Detect the format of each message from its content (JSON keys, Avro magic/schema)."
    options_model = AutoOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self.options
        if not isinstance(opts, AutoOptions):
            opts = self.options = AutoOptions.model_validate(_common_options(opts))
        self._candidates: frozenset[str] = frozenset(opts.formats or DETECTABLE_FORMATS)
        self._fallback: str | None = opts.fallback
        self._delegates: dict[str, Decoder] = {}
        self._delegate_options: dict[str, FormatOptions] = {}
        if opts.fallback_options and opts.fallback is None:
            raise ConfigError(
                _FALLBACK_OPTIONS, dict(opts.fallback_options), "options for the fallback need fallback=ID"
            )
        if opts.fallback is not None:
            self._delegate_options[opts.fallback] = self._fallback_options(
                opts.fallback, opts.fallback_options
            )
        self.detected: Counter[str] = Counter()
        """Messages detected so far, per format id."""

    def _fallback_options(self, fid: str, raw: Mapping[str, Any]) -> FormatOptions:
        from transforms.decoders import decoder_class

        common = {info.alias or name for name, info in FormatOptions.model_fields.items()}
        shared = sorted(common.intersection(raw))
        if shared:
            key = _FALLBACK_PREFIX + shared[0]
            raise ConfigError(
                key, raw[shared[0]], f"set {shared[0]} on auto itself; it applies to every format"
            )
        try:
            return parse_options(
                decoder_class(fid).options_model,
                {**_common_options(self.options), **raw},
                where=f"{fid} option",
            )
        except ConfigError as exc:
            raise ConfigError(_FALLBACK_PREFIX + exc.key, exc.value, exc.reason) from exc

    # -- public ---------------------------------------------------------------------------

    def detect(self, message: Message) -> str:
        """The format id of ``message``; :class:`DetectionError` when it is unknown or ambiguous."""
        fid, _ = self._classify(message)
        if fid is None:
            raise self._fail(None, "a tombstone (null value) has no format", message.value)
        return fid

    def decode(self, message: Message) -> list[Event]:
        return self.decode_rows(message).strict()

    def decode_rows(self, message: Message) -> Decoded:
        """The detected format's :meth:`~Decoder.decode_rows` (a bad row loses only itself)."""
        fid, value = self._classify(message)
        if fid is None:
            return Decoded([])
        self.detected[fid] += 1
        decoded = self._delegate(fid).decode_rows(
            message if value is message.value else replace(message, value=value)
        )
        header = (FORMAT_HEADER, fid.encode())
        events = [replace(e, headers=(*e.headers, header)) if isinstance(e, ChangeEvent) else e for e in decoded.events]
        return Decoded(events, decoded.row_errors)

    # -- detection ------------------------------------------------------------------------

    def _classify(self, message: Message) -> tuple[str | None, bytes | None]:
        """(format id, value to decode); format ``None`` for a tombstone."""
        value = message.value
        if value is None:
            return None, None
        self.check_size(value)
        text = value.strip()
        if text in (b"", b"null"):
            return None, None
        if text[:1] in (b"{", b"["):
            return self._classify_json(value), value
        for data in (value, _base64(text)):
            if data is None:
                continue
            fid = self._binary_match(data)
            if fid is not None and fid in self._candidates:
                return fid, data
            if fid is not None:
                return self._no_match(f"it looks like {fid}, which the formats option excludes", value), value
        return self._no_match(f"not JSON, nor a {' or '.join(_BINARY_FORMATS)} message", value), value

    def _binary_match(self, data: bytes) -> str | None:
        if data.startswith(_QLIK_AVRO_MAGIC):
            return "qlik-avro"
        if "dts-avro" in self._candidates and _is_dts_record(data):
            return "dts-avro"
        return None

    def _classify_json(self, value: bytes) -> str | None:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            return self._no_match(f"invalid JSON ({exc})", value)
        if not isinstance(doc, dict):
            return self._no_match(f"a JSON {type(doc).__name__}, not an object", value)
        payload = doc.get("payload")
        if "payload" in doc and payload is None and set(doc) <= {"schema", "payload"}:
            return None  # a Connect JSON null value: a tombstone
        # the Connect JSON wrapper; Aliyun's adds a "version"
        body = payload if isinstance(payload, dict) and set(doc) <= {"schema", "payload", "version"} else doc
        shape = _Shape(doc, body, body is not doc)
        matches = [fid for fid, signature in _JSON_SIGNATURES.items() if signature(shape)]
        allowed = [fid for fid in matches if fid in self._candidates]
        if len(allowed) == 1:
            return allowed[0]
        if len(allowed) > 1:
            raise self._fail(None, f"ambiguous: the message matches {', '.join(allowed)}", value)
        keys = ", ".join(sorted(doc)[:12]) or "none"
        if matches:
            return self._no_match(
                f"it looks like {', '.join(matches)}, which the formats option excludes (keys: {keys})", value
            )
        return self._no_match(f"no known format has these keys: {keys}", value)

    def _no_match(self, reason: str, payload: bytes) -> str:
        if self._fallback is not None:
            return self._fallback
        candidates = ", ".join(f for f in DETECTABLE_FORMATS if f in self._candidates)
        raise self._fail(None, f"cannot tell the format: {reason} (candidates: {candidates})", payload)

    def _fail(self, field: str | None, reason: str, payload: bytes | None) -> DetectionError:
        return DetectionError(self.format_id, field, reason, payload)

    # -- delegation -----------------------------------------------------------------------

    def _delegate(self, fid: str) -> Decoder:
        decoder = self._delegates.get(fid)
        if decoder is None:
            from transforms.decoders import decoder_class

            cls = decoder_class(fid)
            options = self._delegate_options.get(fid) or cls.options_model.model_validate(
                _common_options(self.options)
            )
            decoder = self._delegates[fid] = cls(options, self.metadata)
        return decoder


def _base64(text: bytes) -> bytes | None:
    """The bytes of a line of standard base64, or ``None`` when it is not one."""
    if len(text) % 4 or not _BASE64_RE.fullmatch(text):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
