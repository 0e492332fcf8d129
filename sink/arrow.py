"""Change rows as Parquet files that an Iceberg table can adopt as they are (the fast path).

The sink normally writes a table's micro-batch with a Spark SQL MERGE. On the fast path the
executors' Python workers write the rows straight into the table's data folder with pyarrow, and
the driver commits the files with Iceberg's Java API (:mod:`sink.datafiles`). For Iceberg to
adopt a file, every Parquet column carries the Iceberg field id of its column (nested fields,
list elements and map keys and values too), and every value must be the one Spark would have
stored for the same change: a value this module cannot store exactly raises
:class:`Unrepresentable`, and the caller MERGEs that table's batch instead.

Pure Python and pyarrow (no Spark, no py4j): it runs in the executors' Python workers.

=================  ==============================  ======================================
Iceberg type       Arrow type (Parquet)            Python values (:mod:`sink.types`)
=================  ==============================  ======================================
boolean            bool                            bool
int / long         int32 / int64                   int within the type's range
float / double     float32 / float64               float, or int (its float value)
decimal(P,S)       decimal128(P,S) (INT32/INT64    Decimal that fits P digits at scale S
                   for P <= 9/18, as Iceberg)
date               date32                          datetime.date
time               time64[us]                      datetime.time (the sink stores none)
timestamp          timestamp[us]                   naive datetime
timestamptz        timestamp[us, UTC]              datetime, any offset (naive: UTC)
string / binary    string / binary                 str / bytes
uuid / fixed[L]    fixed_size_binary(16 / L)       bytes of that length (the sink stores none)
struct/list/map    struct / list / map             dict / list / dict
=================  ==============================  ======================================
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from transforms.errors import CdcnormError

__all__ = [
    "FIELD_ID",
    "Unrepresentable",
    "WrittenFile",
    "arrow_schema",
    "field_ids",
    "new_data_path",
    "select",
    "storage_options",
    "table_filesystem",
    "to_arrow_table",
    "write_parquet",
]

# the Arrow field metadata key pyarrow writes as the Parquet field_id (Iceberg's column ids)
FIELD_ID = b"PARQUET:field_id"


class Unrepresentable(CdcnormError, ValueError):
    """A value (or a column type) the fast path cannot store exactly as Spark would: the caller
    writes the table's batch through the Spark MERGE instead."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"column {column}: {reason}")
        self.column = column
        self.reason = reason

    def __reduce__(self) -> tuple[type[Unrepresentable], tuple[str, str]]:
        return Unrepresentable, (self.column, self.reason)


# -- schema ----------------------------------------------------------------------------------

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "string": pa.string(),
    "binary": pa.binary(),
    "uuid": pa.binary(16),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")


def arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of an Iceberg schema given as its JSON (``SchemaParser.toJson``), every
    field with its Iceberg id in :data:`FIELD_ID`; ``required`` fields are not nullable.

    A type the fast path does not write (e.g. format v3's ``timestamp_ns`` or ``variant``)
    raises :class:`Unrepresentable` naming the column.

    >>> s = arrow_schema('{"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, '
    ...                  '"type": "long"}, {"id": 2, "name": "tags", "required": false, "type": '
    ...                  '{"type": "list", "element-id": 3, "element": "string", "element-required": false}}]}')
    >>> s.field("id")
    pyarrow.Field<id: int64 not null>
    >>> s.field("tags").type.value_field.metadata
    {b'PARQUET:field_id': b'3'}
    """
    parsed = orjson.loads(schema_json)
    return pa.schema([_field(f["name"], f["id"], f["type"], f["required"], f["name"]) for f in parsed["fields"]])


def _field(name: str, field_id: int, type_json: Any, required: bool, path: str) -> pa.Field:
    meta = {FIELD_ID: str(int(field_id)).encode()}
    return pa.field(name, _arrow_type(type_json, path), nullable=not required, metadata=meta)


def _arrow_type(type_json: Any, path: str) -> pa.DataType:
    if isinstance(type_json, str):
        primitive = _PRIMITIVES.get(type_json)
        if primitive is not None:
            return primitive
        if m := _DECIMAL.fullmatch(type_json):
            return pa.decimal128(int(m[1]), int(m[2]))
        if m := _FIXED.fullmatch(type_json):
            return pa.binary(int(m[1]))
    elif isinstance(type_json, dict):
        kind = type_json.get("type")
        if kind == "struct":
            return pa.struct(
                [_field(f["name"], f["id"], f["type"], f["required"], f"{path}.{f['name']}") for f in type_json["fields"]]
            )
        if kind == "list":
            element = _field(
                "element", type_json["element-id"], type_json["element"], type_json["element-required"], f"{path}.element"
            )
            return pa.list_(element)
        if kind == "map":
            key = _field("key", type_json["key-id"], type_json["key"], True, f"{path}.key")
            value = _field("value", type_json["value-id"], type_json["value"], type_json["value-required"], f"{path}.value")
            return pa.map_(key, value)
    raise Unrepresentable(path, f"Iceberg type {orjson.dumps(type_json).decode()} has no Parquet fast path")


def select(schema: pa.Schema, names: Iterable[str]) -> pa.Schema:
    """The schema of some top-level columns, in the order given, with their field ids: an
    equality-delete file holds the key columns of its table.

    >>> select(pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string())]), ["b"]).names
    ['b']
    """
    return pa.schema([schema.field(name) for name in names])


def field_ids(schema: pa.Schema, names: Iterable[str]) -> list[int]:
    """The Iceberg field ids of top-level columns (an equality-delete file's equality ids)."""
    return [int(schema.field(name).metadata[FIELD_ID]) for name in names]


# -- values ----------------------------------------------------------------------------------


class _Bad(Exception):
    """A value that does not fit its column (becomes :class:`Unrepresentable`)."""


@dataclass(frozen=True, slots=True)
class _Primitive:
    """The Python types a primitive column takes, and what a value needs before pyarrow takes
    it: ``one`` fixes or checks a value (in a nested column); ``many`` a whole column when it
    holds values of the types ``when`` (the hot path: cheaper than ``one`` on each value)."""

    allowed: frozenset[type]
    when: frozenset[type] = frozenset()
    one: Callable[[Any], Any] | None = None
    many: Callable[[list[Any]], list[Any]] | None = None


_NAN = float("nan")  # the canonical quiet NaN, as Java's Float.NaN and Double.NaN


def _float(value: Any) -> float:
    """A value of a float field in a nested column: an int as its number, NaN canonical."""
    try:
        number = float(value)
    except OverflowError as exc:
        raise _Bad(f"found {_shown(value)}, beyond the double range") from exc
    return number if number == number else _NAN


def _floats(values: list[Any]) -> list[Any]:
    # an int in a float column is that number, rounded to a double first as both Spark paths do
    # (pyarrow refuses an int that float32 cannot hold exactly)
    return [_float(v) if type(v) is int else v for v in values]


def _naive(value: Any) -> Any:
    if value.tzinfo is not None:
        raise _Bad(f"expected a naive value (no time zone), found {value.isoformat()}")
    return value


def _naives(values: list[Any]) -> list[Any]:
    aware = next((v for v in values if v is not None and v.tzinfo is not None), None)
    if aware is not None:
        _naive(aware)  # raises, naming the value
    return values


def _whole_offset(value: Any) -> Any:
    offset = value.utcoffset()
    if offset is not None and offset.microseconds:
        # pyarrow would drop the offset's fraction of a second
        raise _Bad(f"found {value.isoformat()}: an offset with a fraction of a second")
    return value


def _whole_offsets(values: list[Any]) -> list[Any]:
    """``values`` after :func:`_whole_offset`, checked once per fixed offset
    (``datetime.timezone``: what the decoders make), value by value for other zones."""
    for tz in {v.tzinfo for v in values if v is not None}:
        if type(tz) is dt.timezone:
            _whole_offset(dt.datetime(2000, 1, 1, tzinfo=tz))
        elif tz is not None:
            for v in values:
                if v is not None and v.tzinfo is tz:
                    _whole_offset(v)
    return values


def _time(value: Any) -> Any:
    if value.tzinfo is not None:
        raise _Bad(f"expected a time without zone, found {value.isoformat()}")
    return value


def _each(one: Callable[[Any], Any]) -> Callable[[list[Any]], list[Any]]:
    return lambda values: [None if v is None else one(v) for v in values]


_DATETIME = frozenset({dt.datetime})


def _primitive(t: pa.DataType) -> _Primitive:
    if pa.types.is_boolean(t):
        return _Primitive(frozenset({bool}))
    if pa.types.is_integer(t):
        return _Primitive(frozenset({int}))  # pyarrow checks the range
    if pa.types.is_floating(t):
        return _Primitive(frozenset({float, int}), frozenset({int}), _float, _floats)
    if pa.types.is_decimal(t):
        return _Primitive(frozenset({Decimal}))  # pyarrow refuses a loss of digits, NaN, inf
    if pa.types.is_string(t):
        return _Primitive(frozenset({str}))
    if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        return _Primitive(frozenset({bytes, bytearray}))  # pyarrow checks a fixed length
    if pa.types.is_date32(t):
        return _Primitive(frozenset({dt.date}))  # not a datetime
    if pa.types.is_time64(t):
        return _Primitive(frozenset({dt.time}), frozenset({dt.time}), _time, _each(_time))
    if pa.types.is_timestamp(t) and t.tz:
        # any offset: pyarrow stores the UTC instant; a naive value is UTC, as the Spark path
        # reads it in the session time zone (UTC)
        return _Primitive(_DATETIME, _DATETIME, _whole_offset, _whole_offsets)
    if pa.types.is_timestamp(t):
        return _Primitive(_DATETIME, _DATETIME, _naive, _naives)
    raise TypeError(f"no value rules for Arrow type {t}")


def _shown(value: Any) -> str:
    """A value's type and a preview of it, for an error message."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _mismatch(t: pa.DataType, value: Any) -> str:
    return f"expected {t}, found {_shown(value)}"


def _column(t: pa.DataType) -> Callable[[list[Any]], pa.Array]:
    """What turns a column's values into its Arrow array; raises :class:`_Bad` (and pyarrow's
    errors for what pyarrow checks itself).

    A primitive column is checked with one pass over its types (the hot path); a nested column
    value by value."""
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_map(t):
        check = _value(t, True)
        return lambda values: pa.array([check(v) for v in values], type=t)
    rules = _primitive(t)
    floating = pa.types.is_floating(t)
    nan = pa.scalar(_NAN, type=t) if floating else None

    def column(values: list[Any]) -> pa.Array:
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if not kinds <= rules.allowed:
            bad = next(v for v in values if v is not None and type(v) not in rules.allowed)
            raise _Bad(_mismatch(t, bad))
        if rules.many is not None and not kinds.isdisjoint(rules.when):
            values = rules.many(values)
        array = pa.array(values, type=t)
        if floating:
            # any NaN as the canonical one: Spark's row writer stores every NaN as Float.NaN /
            # Double.NaN (a NaN computed in Python, e.g. inf - inf, has the sign bit set)
            is_nan = pc.is_nan(array)
            if pc.any(is_nan).as_py():
                array = pc.if_else(is_nan, nan, array)
        return array

    return column


def _value(t: pa.DataType, nullable: bool) -> Callable[[Any], Any]:
    """The checker of one value of type ``t`` inside a nested column."""
    if pa.types.is_struct(t):
        members = [(t.field(i).name, _value(t.field(i).type, t.field(i).nullable)) for i in range(t.num_fields)]

        def struct(value: Any) -> Any:
            if value is None:
                return _null(nullable, t)
            if type(value) is not dict:
                raise _Bad(_mismatch(t, value))
            return {name: check(value.get(name)) for name, check in members}

        return struct
    if pa.types.is_list(t):
        element = _value(t.value_type, t.value_field.nullable)

        def list_(value: Any) -> Any:
            if value is None:
                return _null(nullable, t)
            if type(value) is not list and type(value) is not tuple:
                raise _Bad(_mismatch(t, value))
            return [element(v) for v in value]

        return list_
    if pa.types.is_map(t):
        key, item = _value(t.key_type, False), _value(t.item_type, t.item_field.nullable)

        def map_(value: Any) -> Any:
            if value is None:
                return _null(nullable, t)
            if type(value) is not dict:
                raise _Bad(_mismatch(t, value))
            return {key(k): item(v) for k, v in value.items()}

        return map_
    rules = _primitive(t)

    def primitive(value: Any) -> Any:
        if value is None:
            return _null(nullable, t)
        kind = type(value)
        if kind not in rules.allowed:
            raise _Bad(_mismatch(t, value))
        return value if rules.one is None else rules.one(value)

    return primitive


def _null(nullable: bool, t: pa.DataType) -> None:
    if not nullable:
        raise _Bad(f"expected {t}, found NULL in a required field")
    return None


@lru_cache(maxsize=256)
def _converter(t: pa.DataType) -> Callable[[list[Any]], pa.Array]:
    return _column(t)


def to_arrow_table(schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The rows (column name -> value, as :mod:`sink.types` decodes them) as an Arrow table of
    ``schema``: a column missing from a row is NULL, a row's keys that are not columns are left
    out (as the Spark path does).

    Values are stored as Spark stores them through the MERGE path: a float column's value as
    its float32 value (rounded as Java's ``(float)`` cast: 1e300 becomes inf), an int in a
    float or double column as that number, NaN and infinities kept, a zoned datetime as its UTC
    instant. A value that cannot be stored exactly (an int beyond its column, a Decimal with more
    digits than its column, a value of another type, NULL in a required column) raises
    :class:`Unrepresentable`.

    >>> schema = arrow_schema('{"type": "struct", "fields": [{"id": 1, "name": "f", "required": false, "type": "float"}]}')
    >>> to_arrow_table(schema, [{"f": 0.1}, {"f": 2}, {}]).column("f").to_pylist()
    [0.10000000149011612, 2.0, None]
    """
    arrays = []
    for field in schema:
        name = field.name
        try:
            array = _converter(field.type)([row.get(name) for row in rows])
        except _Bad as exc:
            raise Unrepresentable(name, str(exc)) from None
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            raise Unrepresentable(name, f"{type(exc).__name__}: {exc}") from exc
        if not field.nullable and array.null_count:
            raise Unrepresentable(name, "NULL in a required column")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


# -- files -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A Parquet file written for a table: what the driver needs to commit it without opening
    it. ``path`` is spelled as the table location spells it (``file:/...``, ``s3://...``);
    ``footer`` is the file's Thrift ``FileMetaData``, from which Iceberg's own code computes the
    column metrics (:mod:`sink.datafiles`)."""

    path: str
    size: int
    record_count: int
    footer: bytes


_KIND = re.compile(r"[A-Za-z0-9_-]+")


def new_data_path(location: str, kind: str) -> str:
    """A new file path in the data folder of the table at ``location``, named as Iceberg names
    its own (a random UUID first, so files spread over an object store's key space), with
    ``kind`` (``data``, ``eq-deletes``) to tell them apart when listing the folder.

    >>> new_data_path("file:/wh/db/t/", "data")  # doctest: +ELLIPSIS
    'file:/wh/db/t/data/...-data.parquet'
    """
    if not _KIND.fullmatch(kind):
        raise ValueError(f"file kind {kind!r}: letters, digits, '-' and '_' only")
    return f"{location.rstrip('/')}/data/{uuid.uuid4()}-{kind}.parquet"


_FOOTER_TAIL = 8  # the footer length (4 bytes, little-endian) and the magic PAR1
# no folders to create (pyarrow would write an empty marker object for one)
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})


def write_parquet(
    table: pa.Table, path: str, compression: str = "zstd", filesystem: pafs.FileSystem | None = None
) -> WrittenFile:
    """Write ``table`` as one Parquet file at ``path`` (a local path, a ``file:`` URI, or a URI
    pyarrow opens: ``s3://`` (``s3a://``/``s3n://`` too), ``gs://``, ``hdfs://``, ...), parent
    folders created. ``filesystem`` writes with that pyarrow file system instead (e.g. an
    ``S3FileSystem`` with the catalog's endpoint and credentials, which pyarrow does not read
    from Spark's Hadoop conf); ``path`` keeps its scheme either way, as the table names it.

    The file is built in memory and written in one piece (one PUT on an object store); its
    footer is cut from the same bytes, so nothing reads it back.
    """
    fs, fs_path = _filesystem(path, filesystem)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        store_schema=False,  # no ARROW:schema blob in the footer: Iceberg reads the field ids
        store_decimal_as_integer=True,  # INT32/INT64 for decimal(P<=9/18), as Iceberg writes them
    )
    data = sink.getvalue()
    parent = fs_path.rsplit("/", 1)[0]
    if parent and fs.type_name not in _OBJECT_STORES:
        fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(fs_path) as out:
        out.write(data)
    return WrittenFile(path, data.size, table.num_rows, _footer(data))


def _footer(data: pa.Buffer) -> bytes:
    """The Thrift ``FileMetaData`` of a Parquet file's bytes: before the last 8 (its length,
    then ``PAR1``)."""
    tail = data.slice(data.size - _FOOTER_TAIL).to_pybytes()
    if tail[4:] != b"PAR1":
        raise ValueError("not a Parquet file: no PAR1 at its end")
    length = int.from_bytes(tail[:4], "little")
    footer: bytes = data.slice(data.size - _FOOTER_TAIL - length, length).to_pybytes()
    return footer


# the catalog properties (Iceberg's S3FileIO names them so) that say how to reach the tables'
# object store: the write tasks' pyarrow needs the same endpoint and credentials as Iceberg's FileIO
S3_PROPERTIES = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token",
                 "s3.path-style-access", "client.region")
_S3_SCHEMES = ("s3", "s3a", "s3n")


def storage_options(properties: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The object-store settings among a catalog's ``properties``, for the write tasks (a
    hashable, picklable tuple).

    >>> storage_options({"uri": "http://cat", "s3.endpoint": "http://127.0.0.1:7070"})
    (('s3.endpoint', 'http://127.0.0.1:7070'),)
    """
    return tuple(sorted((k, v) for k, v in properties.items() if k in S3_PROPERTIES))


def table_filesystem(location: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem | None:
    """The pyarrow file system to write a table's files at ``location`` with: an
    ``S3FileSystem`` built from the catalog's ``options`` (:func:`storage_options`) for an
    ``s3://`` location when there are any, else ``None`` (pyarrow's own from the URI and the
    standard AWS environment)."""
    if not options or location.partition("://")[0] not in _S3_SCHEMES:
        return None
    return _s3_filesystem(options)


@lru_cache(maxsize=8)
def _s3_filesystem(options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    o = dict(options)
    kwargs: dict[str, Any] = {}
    endpoint = o.get("s3.endpoint")
    if endpoint:
        scheme, sep, host = endpoint.partition("://")
        kwargs["endpoint_override"] = host.rstrip("/") if sep else endpoint
        kwargs["scheme"] = scheme if sep else "https"
        # Iceberg's s3.path-style-access (false by default): pyarrow addresses an overridden
        # endpoint by path unless told to use virtual hosts
        kwargs["force_virtual_addressing"] = o.get("s3.path-style-access", "false").lower() != "true"
    for prop, arg in (("s3.access-key-id", "access_key"), ("s3.secret-access-key", "secret_key"),
                      ("s3.session-token", "session_token"), ("client.region", "region")):
        if o.get(prop):
            kwargs[arg] = o[prop]
    return pafs.S3FileSystem(**kwargs)


def _filesystem(path: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    """The file system of ``path`` and the path within it."""
    scheme, sep, rest = path.partition("://")
    if path.startswith("file:"):
        local = path[len("file:") :]
        if local.startswith("//"):
            local = local[2:]  # file:///tmp/x
        if not local.startswith("/"):
            raise ValueError(f"{path}: a file: URI with a host or a relative path")
        return filesystem if filesystem is not None else pafs.LocalFileSystem(), local
    if not sep or "/" in scheme:  # a local path
        return filesystem if filesystem is not None else pafs.LocalFileSystem(), path
    if filesystem is not None:
        return filesystem, rest
    netloc, _, key = rest.partition("/")
    fs, root = _uri_filesystem("s3" if scheme in ("s3a", "s3n") else scheme, netloc)
    return fs, f"{root.rstrip('/')}/{key}"


@lru_cache(maxsize=16)
def _uri_filesystem(scheme: str, netloc: str) -> tuple[pafs.FileSystem, str]:
    """One pyarrow file system per bucket / name node, kept for the worker's life: making an
    S3 client resolves credentials and regions, too slow for every file."""
    fs, root = pafs.FileSystem.from_uri(f"{scheme}://{netloc}/")
    return fs, root
