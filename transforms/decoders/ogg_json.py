"""Oracle GoldenGate for Big Data JSON, operation format (``ogg-json``): one row operation per message.

``table`` is the fully qualified source table (``SCHEMA.TABLE`` or ``CATALOG.SCHEMA.TABLE``),
``op_type`` is ``I``/``U``/``D``/``T`` (insert, update, delete, truncate), ``op_ts`` the commit
time of the operation in the trail (UTC) and ``current_ts`` when the formatter wrote it. ``pos`` is
the trail position (sequence number and RBA as zero-padded decimal digits), which sorts in source
order. ``before``/``after`` are the row images and ``primary_keys`` the key columns.

GoldenGate may write compressed updates, whose images hold only the key and the changed columns:
a column that one image has and the other lacks is absent from the latter (``UNAVAILABLE``), never
NULL. With ``includeMissing`` images carry ``<col>_isMissing`` flags, which say the same per column.
Values are typed JSON values; Connect types are inferred from them.
"""

from __future__ import annotations

from typing import Any

from transforms.decoders.base import Decoder, Message
from transforms.decoders.fields import check_timestamp, padded_sequence, required_str, string_list
from transforms.decoders.schemaless_json import SchemalessShapes
from transforms.envelope import ChangeEvent, Event, Operation, SourceInfo, TransactionRef
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.values import UNAVAILABLE

__all__ = ["OggJsonDecoder"]

_OPS = {"I": Operation.CREATE, "U": Operation.UPDATE, "D": Operation.DELETE, "T": Operation.TRUNCATE}
_MISSING_SUFFIX = "_isMissing"
_SEQUENCE_WIDTH = 32


class OggJsonDecoder(Decoder):
    """Decodes Oracle GoldenGate JSON operation messages."""

    format_id = "ogg-json"
    description = "Oracle GoldenGate for Big Data JSON (op_type I/U/D/T, before/after, pos)"

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        self._shapes = SchemalessShapes(store=self.metadata)

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        doc = self.load_json(message)
        payload = message.value
        op_type = required_str(self, doc, "op_type", payload)
        op = _OPS.get(op_type)
        if op is None:
            raise self.error("op_type", f"unknown op_type {op_type!r}; expected one of I, U, D, T", payload)
        catalog, schema, table = self._table_name(required_str(self, doc, "table", payload), payload)
        before = self._image(doc, "before", payload)
        after = self._image(doc, "after", payload)
        if op is Operation.CREATE and after is None:
            raise self.error("after", "an insert needs an after image", payload)
        if op is Operation.UPDATE and after is None:
            raise self.error("after", "an update needs an after image", payload)
        if op is Operation.DELETE and before is None:
            raise self.error("before", "a delete needs a before image", payload)
        if op is Operation.TRUNCATE:
            before = after = None
        elif op is Operation.CREATE:
            before = None
        elif op is Operation.DELETE:
            after = None

        shape = self._shapes.infer(after, before)
        columns = shape.columns
        key = string_list(self, doc, "primary_keys", payload) or ()
        unknown = [k for k in key if columns and all(c.name != k for c in columns)]
        if unknown:
            raise self.error("primary_keys", f"key column(s) {unknown} in neither image", payload)
        return [
            ChangeEvent(
                op=op,
                # Oracle-style naming, as Debezium's Oracle connector: topics by schema and table
                table=self._shapes.table(shape, None, schema, table, key),
                before=shape.typed(self, 1, before, "before", payload),
                after=shape.typed(self, 0, after, "after", payload),
                source=self._source(doc, catalog, payload),
                transaction=self._transaction(doc),
                ts_ms=check_timestamp(self, doc.get("current_ts"), "current_ts", payload),
            )
        ]

    def _table_name(self, name: str, payload: bytes) -> tuple[str | None, str | None, str]:
        """(catalog, schema, table) of ``[CATALOG.]SCHEMA.TABLE``."""
        parts = name.split(".")
        if not all(parts) or len(parts) > 3:
            raise self.error("table", f"expected 'SCHEMA.TABLE', found {name!r}", payload)
        padded: list[str | None] = [None] * (3 - len(parts))
        padded.extend(parts)
        return padded[0], padded[1], parts[-1]

    def _image(self, doc: dict[str, Any], field: str, payload: bytes) -> dict[str, Any] | None:
        """An image with ``<col>_isMissing`` flags folded in: a missing column is ``UNAVAILABLE``."""
        raw = doc.get(field)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise self.error(field, f"expected an object (row image), found {type(raw).__name__}", payload)
        flags = {
            name[: -len(_MISSING_SUFFIX)]: value
            for name, value in raw.items()
            if name.endswith(_MISSING_SUFFIX)
            and isinstance(value, bool)
            and name[: -len(_MISSING_SUFFIX)] in raw
        }
        if not flags:
            return raw
        return {
            name: UNAVAILABLE if flags.get(name) else value
            for name, value in raw.items()
            if not (name.endswith(_MISSING_SUFFIX) and name[: -len(_MISSING_SUFFIX)] in flags)
        }

    def _source(self, doc: dict[str, Any], catalog: str | None, payload: bytes) -> SourceInfo:
        fields: dict[str, Any] = {} if catalog is None else {"catalog": catalog}
        sequence: str | None = None
        pos = doc.get("pos")
        if pos is not None:
            if isinstance(pos, bool) or not isinstance(pos, str | int):
                raise self.error("pos", f"expected a trail position, found {pos!r}", payload)
            fields["pos"] = str(pos)
            sequence = padded_sequence(pos, _SEQUENCE_WIDTH)
        for name in ("csn", "xid", "txind"):
            value = _text(doc.get(name))
            if value is not None:
                fields[name] = value
        tokens = doc.get("tokens")
        if tokens is not None:
            if not isinstance(tokens, dict):
                raise self.error("tokens", f"expected an object, found {type(tokens).__name__}", payload)
            fields["tokens"] = tokens
        return SourceInfo(
            connector=self.format_id,
            ts_ms=check_timestamp(self, doc.get("op_ts"), "op_ts", payload),
            sequence=sequence,
            fields=fields,
        )

    def _transaction(self, doc: dict[str, Any]) -> TransactionRef | None:
        xid = _text(doc.get("xid"))
        return TransactionRef(xid) if xid else None


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
