"""SharePlex JSON (Quest SharePlex, as also written by Alibaba DTS): one Oracle row change per message.

::

    {"meta": {"time": "2017-06-16T15:38:13", "userid": 84, "op": "upd", "scn": "14589063118712",
              "rowid": "AAATGpAAIAAItcIAAA", "trans": "7.0.411499", "seq": 2, "size": 11,
              "table": "CL_BIZ1.MIO_LOG", "idx": "2/11", "posttime": "2017-06-16T15:40:00"},
     "data": {"CNTR_NO": "1171201606"},
     "key": {"MIO_LOG_ID": "32537893", "CNTR_NO": "1171201606syui26"}}

Mapping:

* ``ins``/``INSERT`` → ``c`` (``data`` is the row); ``del``/``DELETE`` → ``d`` (``data`` is the
  before image); ``TRUNCATE`` → ``t`` with no images; ``DROP COLUMN`` → a schema change.
* ``upd``/``UPDATE``: ``key`` is the before image and ``data`` holds the changed columns, so
  ``after`` = ``key`` overlaid with ``data``. A column in neither section is ``UNAVAILABLE``.
* ``UPDATE BEFORE`` + ``UPDATE AFTER``: the pair is one update. ``UPDATE BEFORE`` emits nothing;
  its row is kept in the metadata store under (table, ``trans``, ``rowid``), and the following
  ``UPDATE AFTER`` of that row emits one ``u`` with both images (``after`` = before overlaid with
  the AFTER's ``data``). An ``UPDATE AFTER`` whose BEFORE was never seen has ``before: null``.
* ``OWNER.TABLE`` → ``db`` = OWNER, ``schema`` = null, ``table`` = TABLE.
* ``trans``/``seq`` → the ``transaction`` block (``total_order`` = ``data_collection_order`` =
  ``seq``); ``scn``, ``rowid``, ``userid``, ``trans``, ``seq``, ``size``, ``idx``, ``posttime`` are
  kept as source fields; ``time`` (commit time, UTC) → ``source.ts_ms``; ``posttime`` (when the
  change was posted to the target) → the event's ``ts_ms``.
* ``source.sequence`` = the commit SCN zero-padded to 20 digits, ``:``, ``seq`` zero-padded to 10
  digits: every change of a transaction shares its commit SCN and ``seq`` orders them within it.

SharePlex carries neither column types nor primary keys: values are strings unless
``column.types`` declares a column's type, and the key is only known from ``key.columns``. With
``track.columns`` (default) the columns seen per table are remembered in the metadata store so
that a later partial update lists every known column, the absent ones as ``UNAVAILABLE``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import Field, field_validator

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.decoders.base import Decoder, Message
from transforms.decoders.cache import TableCache, TableLru
from transforms.decoders.fields import optional_int, optional_scalar, parse_int
from transforms.decoders.rowplan import RowPlans
from transforms.envelope import (
    ChangeEvent,
    Event,
    Operation,
    SchemaChangeEvent,
    SourceInfo,
    TransactionRef,
    epoch_ms,
)
from transforms.metadata import MetadataStore
from transforms.options import FormatOptions
from transforms.values import CoercionError, parse_datetime

__all__ = ["ShareplexJsonDecoder", "ShareplexJsonOptions", "oracle_column"]

_COLUMNS_NS = "shareplex-json.columns"
_BEFORE_NS = "shareplex-json.update-before"
_MAX_TRACKED_COLUMNS = 4096  # Oracle allows 1000 columns per table

_TYPE_RE = re.compile(
    r"^\s*([a-z_][a-z0-9_]*(?:\s+(?:precision|raw))?)\s*(?:\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\))?\s*(.*)$",
    re.IGNORECASE,
)
_CONNECT_NAMES = {
    t.value: t for t in ConnectType if t not in (ConnectType.ARRAY, ConnectType.MAP, ConnectType.STRUCT)
}
_ORACLE_STRINGS = frozenset(
    {
        "varchar2",
        "nvarchar2",
        "varchar",
        "char",
        "nchar",
        "clob",
        "nclob",
        "long",
        "rowid",
        "urowid",
        "xmltype",
    }
)
_ORACLE_BYTES = frozenset({"raw", "long raw", "blob"})


def oracle_column(name: str, type_text: str) -> Column:
    """The Debezium-style column of an Oracle type name (or a Connect type name such as ``int64``).

    Raises ValueError for a type it does not know.

    >>> oracle_column("ID", "NUMBER(10)").type
    <ConnectType.INT64: 'int64'>
    >>> oracle_column("AMT", "NUMBER(12,2)").params
    (('connect.decimal.precision', '12'), ('scale', '2'))
    """
    m = _TYPE_RE.match(type_text)
    if not m:
        raise ValueError(f"unknown column type {type_text!r}")
    base = " ".join(m.group(1).lower().split())
    p = int(m.group(2)) if m.group(2) else None
    s = int(m.group(3)) if m.group(3) else None
    rest = m.group(4).lower()
    st = type_text.strip()
    if base in _CONNECT_NAMES and p is None:
        return Column(name, _CONNECT_NAMES[base], source_type=st)
    if base in ("number", "numeric", "decimal"):
        if p is None:
            return Column.decimal(name, None, None, source_type=st)
        if not s:
            for limit, ctype in (
                (3, ConnectType.INT8),
                (5, ConnectType.INT16),
                (10, ConnectType.INT32),
                (19, ConnectType.INT64),
            ):
                if p < limit:
                    return Column(name, ctype, source_type=st)
        return Column.decimal(name, p, s or 0, source_type=st)
    if base in ("integer", "int", "smallint"):
        return Column.decimal(name, 38, 0, source_type=st)
    if base == "binary_float":
        return Column(name, ConnectType.FLOAT32, source_type=st)
    if base in ("binary_double", "float", "double precision", "real"):
        return Column(name, ConnectType.FLOAT64, source_type=st)
    if base == "date":
        return Column(name, ConnectType.INT64, logical=Logical.TIMESTAMP, source_type=st)
    if base == "timestamp":
        if "time zone" in rest:
            return Column(name, ConnectType.STRING, logical=Logical.ZONED_TIMESTAMP, source_type=st)
        precision = 6 if p is None else p
        logical = Logical.TIMESTAMP if precision <= 3 else Logical.MICRO_TIMESTAMP
        return Column(name, ConnectType.INT64, logical=logical, source_type=st)
    if base in _ORACLE_STRINGS or base.startswith("interval"):
        return Column(name, ConnectType.STRING, source_type=st)
    if base in _ORACLE_BYTES:
        return Column(name, ConnectType.BYTES, source_type=st)
    raise ValueError(f"unknown column type {type_text!r}")


def _parse_key_columns(text: str) -> dict[str, tuple[str, ...]]:
    """``"A,B"`` → {"*": (A, B)}; ``"OWNER.T:A,B;OWNER.U:C"`` → per table."""
    out: dict[str, tuple[str, ...]] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        table, sep, cols = part.rpartition(":")
        names = tuple(c.strip() for c in cols.split(",") if c.strip())
        if not names:
            raise ValueError(f"no columns in {part!r}")
        out[table.strip().upper() if sep else "*"] = names
    return out


class ShareplexJsonOptions(FormatOptions):
    """Options of the ``shareplex-json`` format."""

    key_columns: str | None = Field(
        None,
        alias="key.columns",
        description="Key columns: 'COL1,COL2' for every table, or per table 'OWNER.TABLE:COL1,COL2;OWNER.T2:C'.",
    )
    column_types: dict[str, dict[str, str]] | None = Field(
        None,
        alias="column.types",
        description="Column types as JSON {'OWNER.TABLE' or '*': {'COL': 'NUMBER(10,2)'}} (Oracle or Connect type "
        "names); undeclared columns are strings.",
    )
    track_columns: bool = Field(
        True,
        alias="track.columns",
        description="Remember each table's columns in the metadata store, so partial updates list the absent "
        "ones as unavailable.",
    )
    default_table: str | None = Field(
        None,
        alias="default.table",
        description="'OWNER.TABLE' for messages without meta.table; else the topic name is the table.",
    )

    @field_validator("key_columns")
    @classmethod
    def _valid_key_columns(cls, value: str | None) -> str | None:
        if value is not None:
            _parse_key_columns(value)
        return value

    @field_validator("column_types", mode="before")
    @classmethod
    def _valid_column_types(cls, value: Any) -> Any:
        if isinstance(value, str | bytes):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"expected a JSON object: {exc}") from exc
        if isinstance(value, dict):
            for cols in value.values():
                if isinstance(cols, dict):
                    for col, type_text in cols.items():
                        if isinstance(type_text, str):
                            oracle_column(str(col), type_text)
        return value


_OPS = {
    "INS": Operation.CREATE,
    "INSERT": Operation.CREATE,
    "UPD": Operation.UPDATE,
    "UPDATE": Operation.UPDATE,
    "DEL": Operation.DELETE,
    "DELETE": Operation.DELETE,
    "TRUNCATE": Operation.TRUNCATE,
    "TRUNC": Operation.TRUNCATE,
}
_UPDATE_BEFORE = frozenset({"UPDATE BEFORE", "UPD BEFORE"})
_UPDATE_AFTER = frozenset({"UPDATE AFTER", "UPD AFTER"})
_DROP_COLUMN = frozenset({"DROP COLUMN", "DROP COL"})
_OTHER_KINDS = _UPDATE_BEFORE | _UPDATE_AFTER | _DROP_COLUMN
_KNOWN = ", ".join([*_OPS, *sorted(_OTHER_KINDS)])
_MAX_CACHED_TIMES = 1024  # entries of the cache of parsed meta times (cleared when full)
_MAX_CACHED_TIME_CHARS = 64  # longer time texts (padded with spaces) are not cached

_Shape = tuple[str | None, str, tuple[str, ...], tuple[str, ...]]


def _op_kind(op_text: str) -> str:
    """``meta.op`` normalized: upper case, ``_``/``-`` as spaces, runs of spaces as one."""
    return " ".join(op_text.replace("_", " ").replace("-", " ").upper().split())


# the usual spellings of the operations (as written, lower and upper case), already normalized
_KINDS = {
    spelling: _op_kind(spelling)
    for kind in [*_OPS, *_OTHER_KINDS]
    for spelling in (kind, kind.lower(), kind.replace(" ", "_"), kind.lower().replace(" ", "_"))
}


class ShareplexJsonDecoder(Decoder):
    """Decodes SharePlex JSON change messages (Oracle source) into canonical events."""

    format_id = "shareplex-json"
    description = "Quest SharePlex JSON (also Alibaba DTS): ins/upd/del, UPDATE BEFORE/AFTER pairs, TRUNCATE, DROP COLUMN."
    options_model = ShareplexJsonOptions

    def __init__(self, options: FormatOptions | None = None, metadata: MetadataStore | None = None) -> None:
        super().__init__(options, metadata)
        opts = self._opts = self.options_as(ShareplexJsonOptions)
        self._keys = _parse_key_columns(opts.key_columns) if opts.key_columns else {}
        self._declared: dict[str, tuple[Column, ...]] = {
            table.upper(): tuple(oracle_column(name, t) for name, t in cols.items())
            for table, cols in (opts.column_types or {}).items()
        }
        self._tables = TableCache()
        # (owner, table, known column names, seen column names) -> (table schema, whether the seen
        # columns add to the known ones), see _schema
        # (bounded by the table budget, transforms.table_budget)
        self._schemas: TableLru[_Shape, tuple[TableSchema, bool]] = TableLru(
            lambda key, _: len(key[2]) + len(key[3])
        )
        self._plans = RowPlans()
        # meta time text -> epoch ms: the messages of a transaction share their times
        self._times: dict[str, int] = {}

    # -- fields ----------------------------------------------------------------------------

    def _section(
        self, doc: Mapping[str, Any], name: str, raw: bytes, required: bool
    ) -> dict[str, Any] | None:
        value = doc.get(name)
        if value is None:
            if required:
                raise self.error(name, "expected an object of column values, found nothing", raw)
            return None
        if not isinstance(value, dict):
            raise self.error(name, f"expected an object of column values, found {type(value).__name__}", raw)
        return value

    def _time_ms(self, meta: Mapping[str, Any], name: str, raw: bytes) -> int | None:
        value = meta.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(
                f"meta.{name}", f"expected a time like '2017-06-16T14:24:34Z', found {value!r:.60}", raw
            )
        ms = self._times.get(value)
        if ms is not None:
            return ms
        try:
            ms = epoch_ms(parse_datetime(value))
        except CoercionError as exc:
            raise self.error(f"meta.{name}", str(exc), raw) from exc
        except (OverflowError, ValueError) as exc:  # a zone offset pushing year 1 or 9999 out of range
            raise self.error(f"meta.{name}", f"time {value!r:.60} is out of range", raw) from exc
        if len(value) <= _MAX_CACHED_TIME_CHARS:
            if len(self._times) >= _MAX_CACHED_TIMES:
                self._times.clear()
            self._times[value] = ms
        return ms

    # -- decode ----------------------------------------------------------------------------

    def decode(self, message: Message) -> list[Event]:
        if message.value is None:
            return []
        raw = message.value
        doc = self.load_json(message)
        meta = doc.get("meta")
        if not isinstance(meta, dict):
            raise self.error("meta", f"expected the 'meta' object, found {type(meta).__name__}", raw)
        op_text = meta.get("op")
        if not isinstance(op_text, str):
            raise self.error("meta.op", f"expected the operation as a string, found {op_text!r}", raw)
        kind = _KINDS.get(op_text) or _op_kind(op_text)
        op = _OPS.get(kind)
        if op is None and kind not in _OTHER_KINDS:
            raise self.error("meta.op", f"unknown operation {op_text!r}; expected one of {_KNOWN}", raw)

        owner, table = self._names(meta, message, raw)
        scn = optional_scalar(self, meta, "scn", raw, where="meta.")
        scn_number = parse_int(scn) if scn != "" else None
        if scn not in (None, "") and (scn_number is None or scn_number < 0):
            raise self.error("meta.scn", f"expected a decimal SCN, found {scn!r:.60}", raw)
        seq = optional_int(self, meta, "seq", raw, where="meta.")
        trans = optional_scalar(self, meta, "trans", raw, where="meta.")
        rowid = optional_scalar(self, meta, "rowid", raw, where="meta.")
        kept = (
            ("scn", scn),
            ("rowid", rowid),
            ("userid", optional_scalar(self, meta, "userid", raw, where="meta.")),
            ("trans", trans),
            ("seq", seq),
            ("size", optional_int(self, meta, "size", raw, where="meta.")),
            ("idx", optional_scalar(self, meta, "idx", raw, where="meta.")),
            ("posttime", optional_scalar(self, meta, "posttime", raw, where="meta.")),
        )
        fields = {name: value for name, value in kept if value is not None}
        ts_ms = self._time_ms(meta, "time", raw)
        post_ms = self._time_ms(meta, "posttime", raw)
        sequence = f"{scn_number:020d}:{seq:010d}" if scn_number is not None and seq is not None else None
        source = SourceInfo(connector=self.format_id, ts_ms=ts_ms, sequence=sequence, fields=fields)
        tx = TransactionRef(str(trans), seq, seq) if trans not in (None, "") else None
        qualified = f"{owner}.{table}" if owner else table

        if kind in _DROP_COLUMN:
            return self._drop_column(doc, owner, table, qualified, source, post_ms, raw)

        data = self._section(doc, "data", raw, required=op is not Operation.TRUNCATE)
        key = self._section(doc, "key", raw, required=False)
        if kind in _UPDATE_BEFORE:
            row = {**(key or {}), **(data or {})}
            self._image(self._schema(owner, table, qualified, list(row), True, raw), row, "data", raw)
            self.metadata.put(_BEFORE_NS, self._before_key(qualified, trans, rowid), row)
            return []

        before_raw: dict[str, Any] | None
        after_raw: dict[str, Any] | None
        if kind in _UPDATE_AFTER:
            op = Operation.UPDATE
            before_key = self._before_key(qualified, trans, rowid)
            remembered = self.metadata.get(_BEFORE_NS, before_key)
            before_raw = remembered if isinstance(remembered, dict) else None
            if before_raw is not None:
                self.metadata.put(_BEFORE_NS, before_key, None)
            after_raw = {**(before_raw or {}), **(data or {})}
        elif op is Operation.CREATE:
            before_raw, after_raw = None, data
        elif op is Operation.UPDATE:
            before_raw = key
            after_raw = {**(key or {}), **(data or {})}
        elif op is Operation.DELETE:
            before_raw, after_raw = {**(key or {}), **(data or {})}, None
        else:
            before_raw = after_raw = None
        assert op is not None

        seen = [*(before_raw or {}), *(after_raw or {})]
        schema = self._schema(owner, table, qualified, seen, op is not Operation.TRUNCATE, raw)
        before = self._image(schema, before_raw, "key" if op is Operation.UPDATE else "data", raw)
        after = self._image(schema, after_raw, "data", raw)
        return [ChangeEvent(op, schema, before, after, source, tx, ts_ms=post_ms)]

    @staticmethod
    def _before_key(qualified: str, trans: Any, rowid: Any) -> str:
        """Where an UPDATE BEFORE row waits for its UPDATE AFTER in the metadata store."""
        return f"{qualified}\x1f{trans}\x1f{rowid if rowid is not None else ''}"

    def _names(self, meta: Mapping[str, Any], message: Message, raw: bytes) -> tuple[str | None, str]:
        name = meta.get("table")
        if name is None:
            name = self._opts.default_table or message.topic or None
            if name is None:
                raise self.error(
                    "meta.table", "expected 'OWNER.TABLE'; set 'default.table' for messages without one", raw
                )
        if not isinstance(name, str) or not name.strip():
            raise self.error("meta.table", f"expected 'OWNER.TABLE', found {name!r}", raw)
        owner, _, table = name.strip().partition(".")
        if not table:
            return None, owner
        return owner, table

    def _known_columns(self, qualified: str) -> list[str]:
        if not self._opts.track_columns:
            return []
        known = self.metadata.get(_COLUMNS_NS, qualified.upper())
        return [str(c) for c in known] if isinstance(known, list) else []

    def _schema(
        self, owner: str | None, table: str, qualified: str, seen: list[str], track: bool, raw: bytes
    ) -> TableSchema:
        known = self._known_columns(qualified)
        # the schema, and whether ``seen`` adds columns to the known ones, depend on the table's
        # name (which finds the declared types and the key, options) and the column names only
        shape = (owner, table, tuple(known), tuple(seen))
        hit = self._schemas.get(shape)
        if hit is None:
            hit = self._build_schema(owner, table, qualified, known, seen, raw)
            self._schemas.put(shape, hit)
        schema, grows = hit
        if grows and track and self._opts.track_columns:
            self.metadata.put(_COLUMNS_NS, qualified.upper(), list(dict.fromkeys([*known, *seen])))
        return schema

    def _build_schema(
        self, owner: str | None, table: str, qualified: str, known: list[str], seen: list[str], raw: bytes
    ) -> tuple[TableSchema, bool]:
        """The table schema, and whether ``seen`` has columns that ``known`` lacks."""
        declared = self._declared.get(qualified.upper()) or self._declared.get("*") or ()
        names = dict.fromkeys([*(c.name for c in declared), *known, *seen])
        if len(names) > _MAX_TRACKED_COLUMNS:
            raise self.error(
                "data", f"{qualified} would have {len(names)} columns, more than {_MAX_TRACKED_COLUMNS}", raw
            )
        by_name = {c.name: c for c in declared}
        columns = tuple(by_name.get(n) or Column(n, ConnectType.STRING) for n in names)
        key = self._keys.get(qualified.upper()) or self._keys.get("*") or ()
        schema = self._tables.intern(TableSchema(owner, None, table, columns, key))
        return schema, len(dict.fromkeys([*known, *seen])) > len(known)

    def _image(
        self, schema: TableSchema, row: Mapping[str, Any] | None, where: str, raw: bytes
    ) -> dict[str, Any] | None:
        # the default fast converters fit _value: they take no dict or list, and none for BYTES
        return None if row is None else self._plans.plan(schema).typed(row, where, raw, self._value)

    def _value(self, col: Column, value: Any, field: str, raw: bytes | str | None) -> Any:
        if isinstance(value, dict | list):
            raise self.error(field, f"expected a scalar column value, found {value!r:.60}", raw)
        if col.type is ConnectType.BYTES and col.logical is None and isinstance(value, str):
            try:
                value = bytes.fromhex(value)
            except ValueError as exc:
                raise self.error(field, f"expected hex-encoded bytes, found {value[:40]!r}", raw) from exc
        return self.coerce(col, value, field, raw)

    def _drop_column(
        self,
        doc: Mapping[str, Any],
        owner: str | None,
        table: str,
        qualified: str,
        source: SourceInfo,
        post_ms: int | None,
        raw: bytes,
    ) -> list[Event]:
        data = self._section(doc, "data", raw, required=False) or {}
        dropped = list(data)
        ddl = f"ALTER TABLE {qualified} DROP ({', '.join(dropped)})" if dropped else None
        new_table: TableSchema | None = None
        known = self._known_columns(qualified)
        if known:
            remaining = [n for n in known if n not in dropped]
            self.metadata.put(_COLUMNS_NS, qualified.upper(), remaining)
            schema = self._schema(owner, table, qualified, [], False, raw)
            new_table = schema.with_columns([c for c in schema.columns if c.name not in dropped])
        return [SchemaChangeEvent(owner, None, table, ddl, source, "ALTER", new_table, ts_ms=post_ms)]
