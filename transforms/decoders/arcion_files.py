"""Arcion Replicant file rows: ``arcion-csv`` and ``arcion-json`` (S3/file target output).

The row semantics (exists codes, images per operation, cursor, sequence, types) are shared and
documented in :mod:`transforms.decoders.arcion_rows`. This module reads the two syntaxes.

**arcion-csv**: one row per line (a message may hold several rows, e.g. a file). For a table
of *x* columns a snapshot row has *x* fields and a realtime row *3x+3*::

    USA,NULL,1,NULL,NULL,0,NULL,10,2,U,"{""extractorId"":0,...,""dscId"":1620787053904,
    ""mutId"":1048480,...}","{""insertCount"":6,""updateCount"":1,...}"

CSV rows do not name their table or columns: the table comes from the ``table`` option, the
column names from a header line (Replicant's ``include-header``) or the ``columns`` option.
A header line produces no events; its column names are stored in the metadata store under
``arcion.columns``/``<table option>`` so that later messages, on any replica sharing the
store, use them. A stored header takes precedence over the ``columns`` option.

A line is a **header** when every field is a name (a letter or ``_``, then letters, digits,
``_``, ``$``, ``#``, ``@``; surrounding blanks ignored) and one of:

* it repeats the known column names (case-insensitively), or
* it is a realtime header: *3y+3* fields whose first *3y* form *y* triplets that each name one
  column: the same name three times, or the name with a new/old/exists marker as prefix or
  suffix (``r_name_new,r_name_old,r_name_exists``, ``NEW_VAL_r_name,OLD_VAL_r_name,
  EXISTS_VAL_r_name``, markers ``new``/``new_val``/``after``, ``old``/``old_val``/``before``,
  ``exists``/``exists_val``); the last three fields name the op/cursor/count columns, or
* no columns are known yet for the table and its names are distinct (a snapshot header).

So a snapshot data row of *x* name-like values for a table of *x* known columns is data; a
data row can only be taken for a header while the table's columns are unknown (when it could
not be decoded anyway), and a malformed row cannot replace known columns unless it has the
realtime header's triplet shape. Realtime data rows never look like headers (their exists codes
are digits). A snapshot header with other columns than the stored ones is therefore rejected
(a field count error); clear ``arcion.columns``/``<table>`` in the store after such a change.

Fields are kept verbatim (no trimming); ``NULL`` (option ``null.literal``) is SQL NULL. The
delimiter, quote and escape characters follow Replicant's ``delimiter``/``quote``/``escape``
applier settings through ``csv.delimiter``/``csv.quote``/``csv.escape``.

**arcion-json**: one JSON object per message. A realtime row names its table and carries
``opType``, ``cursor``, ``before``, ``after``, ``exists`` and ``operationcount``; any other
object is a snapshot row mapping column names to values (its table from the ``table`` option).
Columns are ordered as in ``exists`` (realtime) or the object (snapshot), unless the ``columns``
option fixes the order; a column the option lists but the row lacks is absent (UNAVAILABLE).
``tableName.namespace.catalog`` is ``source.db``, ``namespace.schema`` is ``source.schema``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, field_validator

from transforms.decoders.arcion_rows import (
    COLUMNS_NAMESPACE,
    CSV_FIELDS,
    JSON_FIELDS,
    ArcionFileOptions,
    ArcionRowBuilder,
    Exists,
    exists_code,
    split_table_name,
)
from transforms.decoders.base import Decoded, Decoder, Message
from transforms.envelope import ChangeEvent, Event
from transforms.errors import DecodeError
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions

__all__ = ["ArcionCsvDecoder", "ArcionCsvOptions", "ArcionJsonDecoder", "header_columns"]


class ArcionCsvOptions(ArcionFileOptions):
    """Options of the ``arcion-csv`` format."""

    csv_delimiter: str = Field(",", alias="csv.delimiter", description="The field delimiter (one character).")
    csv_quote: str = Field('"', alias="csv.quote", description="The quote character (one character).")
    csv_escape: str | None = Field(
        None, alias="csv.escape", description="The escape character, if any; quotes are otherwise doubled."
    )

    @field_validator("csv_delimiter", "csv_quote", "csv_escape")
    @classmethod
    def _one_char(cls, value: str | None) -> str | None:
        if value is not None and (len(value) != 1 or value in "\r\n"):
            raise ValueError(f"expected one character other than a line break, found {value!r}")
        return value


# ------------------------------------------------------------------------------------------ header

_NAME_RE = re.compile(r"^[^\W\d][\w$#@]*$")
_MARKERS = (
    ("new_val", "newval", "new", "after"),
    ("old_val", "oldval", "old", "before"),
    ("exists_val", "existsval", "exists"),
)


def _bases(name: str, markers: tuple[str, ...]) -> dict[str, str]:
    """The name without its marker prefix or suffix (the longest that matches): lower → as written."""
    low = name.lower()
    out: dict[str, str] = {}
    for marker in markers:
        cut = len(marker) + 1
        if len(low) > cut and low.endswith("_" + marker):
            out.setdefault(low[:-cut], name[:-cut])
            break
    for marker in markers:
        cut = len(marker) + 1
        if len(low) > cut and low.startswith(marker + "_"):
            out.setdefault(low[cut:], name[cut:])
            break
    return out


def _triplet_name(new: str, old: str, exists: str) -> str | None:
    if new.lower() == old.lower() == exists.lower():
        return new
    new_bases = _bases(new, _MARKERS[0])
    common = new_bases.keys() & _bases(old, _MARKERS[1]).keys() & _bases(exists, _MARKERS[2]).keys()
    return new_bases[common.pop()] if len(common) == 1 else None


def _distinct(names: Sequence[str]) -> bool:
    return len({n.lower() for n in names}) == len(names)


def header_columns(fields: Sequence[str], known: Sequence[str] | None) -> list[str] | None:
    """The column names if a CSV row is a header line (see the module docs), else ``None``.

    >>> header_columns(["r_regionkey", "r_name"], None)
    ['r_regionkey', 'r_name']
    >>> header_columns(["a_new", "a_old", "a_exists", "op", "cursor", "opcount"], ["a"])
    ['a']
    >>> header_columns(["AFRICA", "EUROPE"], ["r_regionkey", "r_name"]) is None
    True
    """
    names = [f.strip() for f in fields]
    if not names or not all(_NAME_RE.match(n) for n in names):
        return None
    if known is not None and len(names) == len(known):
        return names if [n.lower() for n in names] == [k.lower() for k in known] else None
    if len(names) >= 6 and len(names) % 3 == 0:
        triplets = [_triplet_name(*names[i : i + 3]) for i in range(0, len(names) - 3, 3)]
        columns = [t for t in triplets if t is not None]
        if len(columns) == len(triplets) and _distinct(columns):
            return columns
    return names if known is None and _distinct(names) else None


# --------------------------------------------------------------------------------------- decoders


class ArcionCsvDecoder(Decoder):
    """Decodes Arcion Replicant CSV file rows (snapshot: x fields; realtime: 3x+3 fields)."""

    format_id: ClassVar[str] = "arcion-csv"
    description: ClassVar[str] = "Arcion Replicant file rows, CSV (snapshot x columns; realtime 3x+3)"
    options_model: ClassVar[type[FormatOptions]] = ArcionCsvOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self.options
        assert isinstance(opts, ArcionCsvOptions)
        self.csv_options = opts
        self._rows = ArcionRowBuilder(self.format_id, opts, "NULL")

    def decode(self, message: Message) -> list[Event]:
        return self.decode_rows(message).strict()

    def decode_rows(self, message: Message) -> Decoded:
        """The message's rows; a row that does not decode is an error of that row (its index
        among the message's CSV records, a header line counted), and the other rows decode."""
        data = message.value
        if data is None:
            return Decoded([])
        self.check_size(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(None, f"expected UTF-8 text: {exc}", data) from exc
        records = self._records(text, data)
        if not records:
            return Decoded([])
        db, schema, name = self._rows.table_from_option(data)
        table_key = self.csv_options.table or name
        known = self._known_columns(table_key)
        events: list[Event] = []
        errors: list[DecodeError] = []
        for index, fields in enumerate(records):
            header = header_columns(fields, known)
            if header is not None:
                self.metadata.put(COLUMNS_NAMESPACE, table_key, header)
                known = header
                continue
            columns = self._columns(known, fields, data)  # none known: no row of the message decodes
            try:
                events.append(self._row(fields, columns, (db, schema, name), data))
            except DecodeError as exc:  # a bad value loses only its own row
                exc.row = index
                errors.append(exc)
        return Decoded(events, errors)

    def _records(self, text: str, data: bytes) -> list[list[str]]:
        opts = self.csv_options
        reader = csv.reader(
            io.StringIO(text, newline=""),
            delimiter=opts.csv_delimiter,
            quotechar=opts.csv_quote,
            escapechar=opts.csv_escape,
            doublequote=True,
            strict=True,
        )
        try:
            return [row for row in reader if row]
        except csv.Error as exc:
            raise self.error("row", f"truncated or malformed CSV row: {exc}", data) from exc

    def _known_columns(self, table_key: str) -> list[str] | None:
        stored = self.metadata.get(COLUMNS_NAMESPACE, table_key)
        if isinstance(stored, list) and stored and all(isinstance(n, str) for n in stored):
            return stored
        columns = self.csv_options.columns
        return list(columns) if columns is not None else None

    def _columns(self, known: list[str] | None, fields: list[str], data: bytes) -> list[str]:
        """The known column names; a DecodeError when there are none."""
        if known is None:
            raise self.error(
                "columns",
                f"column names of {self.csv_options.table} unknown: set the columns option or send the "
                f"header line first (row has {len(fields)} fields)",
                data,
            )
        return known

    def _row(
        self,
        fields: list[str],
        known: list[str],
        name: tuple[str | None, str | None, str],
        data: bytes,
    ) -> ChangeEvent:
        x, n = len(known), len(fields)
        table = self._rows.table(*name, known, data)
        if n == x:
            return self._rows.snapshot_event(table, dict(zip(known, fields, strict=True)), data)
        if n != 3 * x + 3:
            raise self.error(
                "columns",
                f"expected {x} fields (snapshot) or {3 * x + 3} fields (realtime) for the {x} columns "
                f"{','.join(known)}, found {n}",
                data,
            )
        cells = []
        for i, col in enumerate(known):
            raw_code = fields[3 * i + 2]
            code = exists_code(raw_code)
            if code is None:
                code = self._rows.exists(raw_code, f"exists.{col}", data)
            cells.append((fields[3 * i], fields[3 * i + 1], code))
        return self._rows.change_event(
            table, fields[3 * x], cells, fields[3 * x + 1], fields[3 * x + 2], CSV_FIELDS, data
        )


_REALTIME_PARTS = ("exists", "before", "after", "tableName")
_NO_CODE: Any = object()


class ArcionJsonDecoder(Decoder):
    """Decodes Arcion Replicant JSON file rows (snapshot rows and realtime change rows)."""

    format_id: ClassVar[str] = "arcion-json"
    description: ClassVar[str] = (
        "Arcion Replicant file rows, JSON (snapshot rows; realtime tableName/opType/before/after/exists)"
    )
    options_model: ClassVar[type[FormatOptions]] = ArcionFileOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self.options
        assert isinstance(opts, ArcionFileOptions)
        self.file_options = opts
        self._rows = ArcionRowBuilder(self.format_id, opts, "null")

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        doc = self.load_json(message)
        data = message.value
        if "opType" in doc and any(isinstance(doc.get(k), dict) for k in _REALTIME_PARTS):
            return [self._realtime(doc, data)]
        return [self._snapshot(doc, data)]

    def _ordered(self, names: list[str], field_prefix: str, data: bytes) -> list[str]:
        columns = self.file_options.columns
        if columns is None:
            return names
        extra = [n for n in names if n not in columns]
        if extra:
            raise self.error(
                f"{field_prefix}{extra[0]}", f"column not in the columns option ({','.join(columns)})", data
            )
        return list(columns)

    def _snapshot(self, doc: dict[str, Any], data: bytes) -> ChangeEvent:
        if not doc:
            raise self.error(None, "expected a snapshot row with at least one column, found {}", data)
        db, schema, name = self._rows.table_from_option(data)
        columns = self._ordered(list(doc), "", data)
        table = self._rows.table(db, schema, name, columns, data)
        return self._rows.snapshot_event(table, doc, data)

    def _table_name(self, doc: dict[str, Any], data: bytes) -> tuple[str | None, str | None, str]:
        raw = doc.get("tableName")
        if raw is None:
            if self.file_options.table is None:
                raise self.error("tableName", "missing table name (and no table option)", data)
            return split_table_name(self.file_options.table)
        if isinstance(raw, str):
            try:
                return split_table_name(raw)
            except ValueError as exc:
                raise self.error("tableName", str(exc), data) from exc
        if not isinstance(raw, dict):
            raise self.error("tableName", f"expected an object, found {type(raw).__name__}", data)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise self.error("tableName.name", f"expected a table name, found {name!r}", data)
        namespace = raw.get("namespace")
        if namespace is None:
            namespace = {}
        if not isinstance(namespace, dict):
            raise self.error(
                "tableName.namespace", f"expected an object, found {type(namespace).__name__}", data
            )
        parts: list[str | None] = []
        for key in ("catalog", "schema"):
            value = namespace.get(key)
            if value is not None and not isinstance(value, str):
                raise self.error(
                    f"tableName.namespace.{key}", f"expected a string or null, found {value!r}", data
                )
            parts.append(value or None)
        return parts[0], parts[1], name

    def _image(self, doc: dict[str, Any], key: str, data: bytes) -> dict[str, Any]:
        image = doc.get(key)
        if image is None:
            return {}
        if not isinstance(image, dict):
            raise self.error(key, f"expected an object, found {type(image).__name__}", data)
        return image

    def _realtime(self, doc: dict[str, Any], data: bytes) -> ChangeEvent:
        db, schema, name = self._table_name(doc, data)
        exists = doc.get("exists")
        if not isinstance(exists, dict):
            found = "nothing" if exists is None else type(exists).__name__
            raise self.error("exists", f"expected an object of exists codes, found {found}", data)
        before, after = self._image(doc, "before", data), self._image(doc, "after", data)
        for image_name, image in (("before", before), ("after", after)):
            if image.keys() <= exists.keys():
                continue
            unknown = next(c for c in image if c not in exists)
            raise self.error(f"exists.{unknown}", f"no exists code for the {image_name} column {unknown!r}", data)
        columns = self._ordered(list(exists), "exists.", data)
        table = self._rows.table(db, schema, name, columns, data)
        cells: list[tuple[Any, Any, Exists]] = []
        for col in columns:
            raw_code = exists.get(col, _NO_CODE)
            code = exists_code(raw_code)
            if code is None:
                code = Exists.ABSENT if raw_code is _NO_CODE else self._rows.exists(raw_code, f"exists.{col}", data)
            # a column the code puts in an image must be there (after before before)
            if (code & 1 and col not in after) or (code & 2 and col not in before):
                image_name = "after" if code & 1 and col not in after else "before"
                raise self.error(
                    f"{image_name}.{col}",
                    f"exists code {int(code)} puts the column in {image_name}, but it is missing",
                    data,
                )
            cells.append((after.get(col), before.get(col), code))
        return self._rows.change_event(
            table, doc.get("opType"), cells, doc.get("cursor"), doc.get("operationcount"), JSON_FIELDS, data
        )
