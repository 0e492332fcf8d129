"""Behaviour of the aws-dms-json decoder: operations, before-images, control records and the table
definitions they carry, errors."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from tests.formats.strategies import json_values
from transforms.connect import Column, ConnectType, Logical
from transforms.decoders import Message, aws_dms_json, create_decoder
from transforms.decoders.aws_dms_json import AwsDmsJsonDecoder
from transforms.envelope import (
    ChangeEvent,
    EmitOptions,
    Operation,
    OutRecord,
    SchemaChangeEvent,
    SnapshotMarker,
    emit,
)
from transforms.errors import ConfigError, DecodeError
from transforms.pipeline import Pipeline
from transforms.values import UNAVAILABLE

META = {
    "timestamp": "2024-07-29T00:58:17.983670Z",
    "record-type": "data",
    "partition-key-type": "schema-table",
    "schema-name": "public",
    "table-name": "foo",
}


def decode(doc: Any, options: dict[str, Any] | None = None) -> list[Any]:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return create_decoder("aws-dms-json", options).decode(Message(raw))


def one_change(doc: Any, options: dict[str, Any] | None = None) -> ChangeEvent:
    events = decode(doc, options)
    assert len(events) == 1 and isinstance(events[0], ChangeEvent)
    return events[0]


def data(operation: str, row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"data": row, "metadata": {**META, "operation": operation}, **extra}


def test_registered() -> None:
    assert isinstance(create_decoder("aws-dms-json"), AwsDmsJsonDecoder)


@pytest.mark.parametrize(
    ("operation", "op"),
    [
        ("load", Operation.READ),
        ("insert", Operation.CREATE),
        ("update", Operation.UPDATE),
        ("delete", Operation.DELETE),
    ],
)
def test_operations(operation: str, op: Operation) -> None:
    event = one_change(data(operation, {"id": 1, "n": "a"}))
    assert event.op is op
    assert (event.table.db, event.table.schema, event.table.table) == (None, "public", "foo")
    if op is Operation.DELETE:
        assert (event.before, event.after) == ({"id": 1, "n": "a"}, None)
    else:
        assert (event.before, event.after) == (None, {"id": 1, "n": "a"})
    assert event.source.snapshot is (SnapshotMarker.TRUE if op is Operation.READ else SnapshotMarker.FALSE)


def test_bi_prefixed_columns_are_the_before_image() -> None:
    row = {"id": 105, "address": "Beijing", "BI_id": 105, "BI_address": "Shanghai"}
    event = one_change(data("update", row))
    assert event.after == {"id": 105, "address": "Beijing"}
    assert event.before == {"id": 105, "address": "Shanghai"}
    assert [c.name for c in event.table.columns] == ["id", "address"]


def test_pk_only_before_image_leaves_other_columns_unavailable() -> None:
    event = one_change(data("update", {"id": 46, "age": 33}, **{"before-image": {"id": 46}}))
    assert event.before == {"id": 46, "age": UNAVAILABLE}


def test_empty_or_missing_before_image_gives_null_before() -> None:
    assert one_change(data("update", {"id": 1}, **{"before-image": {}})).before is None
    assert one_change(data("update", {"id": 1})).before is None


def test_before_image_options() -> None:
    event = one_change(
        data("update", {"id": 2, "OLD_id": 1}, prior={"x": 0}),
        {"before.image.prefix": "OLD_", "before.image.field": "prior"},
    )
    assert event.after == {"id": 2, "x": UNAVAILABLE}
    assert event.before == {"id": 1, "x": 0}
    keep = one_change(data("insert", {"BI_x": 1}), {"before.image.prefix": ""})
    assert keep.after == {"BI_x": 1}
    with pytest.raises(ConfigError):
        create_decoder("aws-dms-json", {"before.image": "x"})


def test_times_and_transaction() -> None:
    doc = data("insert", {"id": 1})
    doc["metadata"].update(
        {
            "commit-timestamp": "2024-07-29T00:58:17.974340Z",
            "transaction-id": 1139,
            "transaction-record-id": 3,
            "stream-position": "00000002/7C007178.3.00000002/7C007178",
        }
    )
    event = one_change(doc)
    assert event.source.ts_ms == 1722214697974  # commit time
    assert event.ts_ms == 1722214697983  # DMS's own timestamp
    assert event.transaction is not None and (event.transaction.id, event.transaction.total_order) == (
        "1139",
        3,
    )
    assert event.source.fields["stream_position"] == "00000002/7C007178.3.00000002/7C007178"


def test_without_commit_timestamp_source_time_is_the_record_timestamp() -> None:
    assert one_change(data("insert", {"id": 1})).source.ts_ms == 1722214697983


def test_control_create_table_is_a_schema_change_with_definition() -> None:
    doc = {
        "control": {
            "table-def": {
                "columns": {
                    "id": {"type": "INT32", "nullable": False},
                    "p": {"type": "NUMERIC", "precision": 10, "scale": 2},
                },
                "primary-key": ["id"],
            }
        },
        "metadata": {**META, "record-type": "control", "operation": "create-table"},
    }
    (event,) = decode(doc)
    assert isinstance(event, SchemaChangeEvent)
    assert (event.schema, event.table, event.change_type) == ("public", "foo", "CREATE")
    assert event.new_table is not None and event.new_table.key == ("id",)
    assert event.new_table.columns[1].is_decimal and event.new_table.columns[1].scale == 2
    assert event.source.fields["operation"] == "create-table"


@pytest.mark.parametrize(
    ("operation", "change_type"),
    [
        ("drop-table", "DROP"),
        ("add-column", "ALTER"),
        ("rename-column", "ALTER"),
        ("column-type-change", "ALTER"),
    ],
)
def test_control_table_changes(operation: str, change_type: str) -> None:
    (event,) = decode({"metadata": {**META, "record-type": "control", "operation": operation}})
    assert isinstance(event, SchemaChangeEvent) and event.change_type == change_type


def test_other_control_records_carry_no_change() -> None:
    assert decode({"metadata": {**META, "record-type": "control", "operation": "task-restart"}}) == []


def test_tombstone_input_is_ignored() -> None:
    assert AwsDmsJsonDecoder().decode(Message(None)) == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"data":{"id":1},"metadata":{}', None),
        ({"data": {"id": 1}}, "metadata"),
        ({"data": {"id": 1}, "metadata": "x"}, "metadata"),
        ({"data": {"id": 1}, "metadata": {**META, "operation": "upsert"}}, "metadata.operation"),
        ({"data": {"id": 1}, "metadata": {**META, "operation": 1}}, "metadata.operation"),
        (
            {"data": {"id": 1}, "metadata": {**META, "operation": "insert", "record-type": "row"}},
            "metadata.record-type",
        ),
        (
            {"data": {"id": 1}, "metadata": {"record-type": "data", "operation": "insert"}},
            "metadata.table-name",
        ),
        ({"data": [1], "metadata": {**META, "operation": "insert"}}, "data"),
        ({"metadata": {**META, "operation": "insert"}}, "data"),
        (
            {"data": {"id": 1}, "metadata": {**META, "operation": "insert", "timestamp": "later"}},
            "metadata.timestamp",
        ),
        (
            {"data": {"id": 1}, "metadata": {**META, "operation": "insert", "commit-timestamp": 5}},
            "metadata.commit-timestamp",
        ),
        (
            {"data": {"id": 1}, "metadata": {**META, "operation": "insert", "transaction-id": {}}},
            "metadata.transaction-id",
        ),
        (
            {
                "data": {"id": 1},
                "metadata": {
                    **META,
                    "operation": "insert",
                    "transaction-id": 1,
                    "transaction-record-id": "x",
                },
            },
            "metadata.transaction-record-id",
        ),
        (
            {"data": {"id": 1}, "before-image": "x", "metadata": {**META, "operation": "update"}},
            "before-image",
        ),
        (
            {"control": [], "metadata": {**META, "record-type": "control", "operation": "create-table"}},
            "control",
        ),
        (
            {
                "control": {"table-def": {"columns": {"a": {}}}},
                "metadata": {**META, "record-type": "control", "operation": "create-table"},
            },
            "control.table-def.columns.a.type",
        ),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(raw: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(raw)
    err = info.value
    assert err.format_id == "aws-dms-json"
    assert err.field == field
    assert err.preview and "payload:" in str(err)


_values = st.one_of(st.none(), st.integers(-1000, 1000), st.text(max_size=4))
_rows = st.dictionaries(st.sampled_from(["a", "b", "c"]), _values, min_size=1)


@settings(max_examples=200, deadline=None)
@given(after=_rows, before=_rows)
def test_property_bi_columns_split_into_before(after: dict[str, Any], before: dict[str, Any]) -> None:
    row = {**after, **{f"BI_{k}": v for k, v in before.items()}}
    event = one_change(data("update", row))
    assert event.after is not None and event.before is not None
    assert not any(name.startswith("BI_") for name in event.after)
    assert set(event.after) == set(event.before) == set(after) | set(before)
    for name in event.before:
        assert (event.before[name] == UNAVAILABLE) == (name not in before)
        assert (event.after[name] == UNAVAILABLE) == (name not in after)


_json = json_values
_meta = st.fixed_dictionaries(
    {},
    optional={
        "record-type": _json | st.sampled_from(["data", "control"]),
        "operation": _json
        | st.sampled_from(["load", "insert", "update", "delete", "create-table", "drop-table"]),
        "schema-name": _json | st.just("s"),
        "table-name": _json | st.just("t"),
        "timestamp": _json,
        "commit-timestamp": _json,
        "transaction-id": _json,
        "transaction-record-id": _json,
        "stream-position": _json,
    },
)
_docs = st.fixed_dictionaries(
    {}, optional={"data": _json | _rows, "metadata": _json | _meta, "before-image": _json, "control": _json}
)


@settings(max_examples=200, deadline=None)
@given(doc=_docs)
def test_property_only_decode_errors_escape(doc: dict[str, Any], connect_checker: Any) -> None:
    try:
        records = emit(decode(doc), EmitOptions())
    except DecodeError as err:
        assert err.format_id in ("aws-dms-json", "emit")
        return
    assert_connect_accepts(connect_checker, records)  # what decodes is valid for Kafka Connect


# -- table definitions from control records ------------------------------------------------

TABLE_DEF: dict[str, Any] = {
    "columns": {
        "id": {"type": "INT4", "nullable": False},
        "born": {"type": "DATE"},
        "seen": {"type": "TIMESTAMP", "precision": 0, "scale": 6},
        "price": {"type": "NUMERIC", "precision": 10, "scale": 2},
        "name": {"type": "STRING", "length": 20},
    },
    "primary-key": ["id"],
}
ROW = {"id": 7, "born": "2024-01-02", "seen": "2024-01-02 03:04:05.123456", "price": "9.99", "name": "Ann"}


def control(operation: str, table_def: dict[str, Any] | None = None, table: str = "foo") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "metadata": {**META, "record-type": "control", "operation": operation, "table-name": table}
    }
    if table_def is not None:
        doc["control"] = {"table-def": table_def}
    return doc


class Stream:
    """One decoder fed message after message (the definitions live in its metadata store), emitting through a pipeline."""

    def __init__(
        self, options: dict[str, Any] | None = None, key_overrides: dict[str, tuple[str, ...]] | None = None
    ) -> None:
        self.decoder = create_decoder("aws-dms-json", options)
        self.pipeline = Pipeline(self.decoder, EmitOptions(), key_overrides=key_overrides)

    def events(self, doc: dict[str, Any]) -> list[Any]:
        return self.decoder.decode(Message(orjson.dumps(doc)))

    def change(self, doc: dict[str, Any]) -> ChangeEvent:
        (event,) = self.events(doc)
        assert isinstance(event, ChangeEvent)
        return event

    def records(self, doc: dict[str, Any]) -> list[OutRecord]:
        return self.pipeline.process(Message(orjson.dumps(doc)))


def defined(table_def: dict[str, Any] = TABLE_DEF, **kwargs: Any) -> Stream:
    stream = Stream(**kwargs)
    (event,) = stream.events(control("create-table", table_def))
    assert isinstance(event, SchemaChangeEvent)
    return stream


def value_fields(record: OutRecord) -> dict[str, dict[str, Any]]:
    assert record.value is not None
    (after,) = (f for f in record.value["schema"]["fields"] if f["field"] == "after")
    return {f["field"]: f for f in after["fields"]}


def test_table_def_types_the_data_of_its_table() -> None:
    event = defined().change(data("insert", ROW))
    table = event.table
    assert table.key == ("id",)
    assert [(c.name, c.type, c.logical) for c in table.columns] == [
        ("id", ConnectType.INT32, None),
        ("born", ConnectType.INT32, Logical.DATE),
        ("seen", ConnectType.INT64, Logical.MICRO_TIMESTAMP),
        ("price", ConnectType.BYTES, Logical.DECIMAL),
        ("name", ConnectType.STRING, None),
    ]
    assert table.columns[3].params == (("connect.decimal.precision", "10"), ("scale", "2"))
    assert event.after == {
        "id": 7,
        "born": dt.date(2024, 1, 2),
        "seen": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        "price": Decimal("9.99"),
        "name": "Ann",
    }


def test_table_def_gives_the_key_and_the_delete_tombstone() -> None:
    stream = defined()
    (insert,) = stream.records(data("insert", ROW))
    assert insert.key is not None and insert.key["payload"] == {"id": 7}
    assert insert.key["schema"]["fields"] == [{"type": "int32", "optional": False, "field": "id"}]
    assert insert.value is not None
    after = insert.value["payload"]["after"]
    assert after["born"] == 19724  # io.debezium.time.Date: days since the epoch
    assert after["seen"] == 1704164645123456  # MicroTimestamp
    assert after["price"] == "A+c="  # Decimal 9.99: unscaled 999, base64
    fields = value_fields(insert)
    assert fields["born"]["name"] == Logical.DATE and fields["seen"]["name"] == Logical.MICRO_TIMESTAMP
    delete, tombstone = stream.records(data("delete", ROW))
    assert delete.key == tombstone.key == insert.key
    assert delete.value is not None and delete.value["payload"]["op"] == "d"
    assert tombstone.value is None


def test_key_change_is_a_delete_tombstone_and_create() -> None:
    row = {**ROW, "id": 8, "BI_id": 7}
    records = defined().records(data("update", row))
    assert [(r.key and r.key["payload"], r.value and r.value["payload"]["op"]) for r in records] == [
        ({"id": 7}, "d"),
        ({"id": 7}, None),
        ({"id": 8}, "c"),
    ]


def test_bi_columns_are_typed_by_the_definition() -> None:
    row = {**ROW, "price": "10.50", **{f"BI_{k}": v for k, v in ROW.items()}, "BI_born": "2023-12-31"}
    event = defined().change(data("update", row))
    assert event.before is not None and event.after is not None
    assert event.before["born"] == dt.date(2023, 12, 31) and event.before["price"] == Decimal("9.99")
    assert event.after["price"] == Decimal("10.50")
    assert not any(c.name.startswith("BI_") for c in event.table.columns)


def test_before_image_attribute_is_typed_by_the_definition() -> None:
    event = defined().change(
        data("update", ROW, **{"before-image": {"id": "7", "seen": "2024-01-01 00:00:00"}})
    )
    assert event.before == {
        "id": 7,
        "born": UNAVAILABLE,
        "seen": dt.datetime(2024, 1, 1),
        "price": UNAVAILABLE,
        "name": UNAVAILABLE,
    }


def test_a_column_an_insert_lacks_is_null_one_an_update_lacks_is_unavailable() -> None:
    stream = defined()
    assert stream.change(data("load", {"id": 1})).after == {
        "id": 1,
        "born": None,
        "seen": None,
        "price": None,
        "name": None,
    }
    update = stream.change(data("update", {"id": 1, "name": "x"}))
    assert update.after == {
        "id": 1,
        "born": UNAVAILABLE,
        "seen": UNAVAILABLE,
        "price": UNAVAILABLE,
        "name": "x",
    }
    delete = stream.change(data("delete", {"id": 1}))
    assert delete.before is not None and delete.before["price"] == UNAVAILABLE


def test_row_columns_are_optional_the_schema_change_keeps_nullable() -> None:
    stream = Stream()
    (change,) = stream.events(control("create-table", TABLE_DEF))
    assert isinstance(change, SchemaChangeEvent) and change.new_table is not None
    assert not change.new_table.columns[0].optional
    event = stream.change(data("insert", ROW))
    assert all(c.optional for c in event.table.columns)
    assert event.table.key_columns()[0].optional is False


def test_data_columns_the_definition_lacks_keep_inference() -> None:
    event = defined().change(data("insert", {**ROW, "extra": 5, "doc": {"a": 1}}))
    columns = {c.name: c for c in event.table.columns}
    assert list(columns)[-2:] == ["extra", "doc"]
    assert columns["extra"].type is ConnectType.INT64
    assert columns["doc"].logical == Logical.JSON
    assert event.after is not None and event.after["extra"] == 5 and event.after["doc"] == '{"a":1}'


def test_other_tables_keep_inference() -> None:
    stream = defined()
    doc = data("insert", ROW)
    doc["metadata"]["table-name"] = "bar"
    assert stream.change(doc).table == one_change(doc).table
    other_schema = data("insert", ROW)
    other_schema["metadata"]["schema-name"] = "other"
    assert stream.change(other_schema).table.key == ()


def test_drop_table_forgets_the_definition() -> None:
    stream = defined()
    stream.events(control("drop-table"))
    event = stream.change(data("insert", ROW))
    plain = one_change(data("insert", ROW))
    assert (event.table, event.after) == (plain.table, plain.after)
    assert event.table.key == () and event.after is not None and event.after["born"] == "2024-01-02"


@pytest.mark.parametrize(
    ("operation", "kept"),
    [
        ("add-column", True),
        ("drop-column", False),
        ("rename-column", False),
        ("column-type-change", False),
        ("change-columns", False),
        ("rename-table", False),
        ("create-table", False),
    ],
)
def test_a_table_change_without_a_table_def_forgets_it_unless_it_adds_a_column(
    operation: str, kept: bool
) -> None:
    stream = defined()
    stream.events(control(operation))
    assert (stream.change(data("insert", ROW)).table.key == ("id",)) is kept


def test_a_later_table_def_replaces_the_earlier() -> None:
    stream = defined()
    stream.events(
        control(
            "add-column",
            {"columns": {**TABLE_DEF["columns"], "n": {"type": "INT8"}}, "primary-key": ["id", "n"]},
        )
    )
    event = stream.change(data("insert", {**ROW, "n": "12"}))
    assert event.table.key == ("id", "n")
    assert event.table.columns[-1] == Column("n", ConnectType.INT64, source_type="INT8")
    assert event.after is not None and event.after["n"] == 12


def test_task_control_records_change_no_definition() -> None:
    stream = defined()
    doc = control("task-restart")
    doc["metadata"].update({"schema-name": "", "table-name": ""})
    assert stream.events(doc) == []
    assert stream.change(data("insert", ROW)).table.key == ("id",)


def test_configured_key_columns_win_over_the_primary_key() -> None:
    stream = defined(key_overrides={"public.foo": ("name",)})
    (record,) = stream.records(data("insert", ROW))
    assert record.key is not None and record.key["payload"] == {"name": "Ann"}


def test_the_parsed_definitions_cache_is_bounded_and_the_store_keeps_them(
    table_budget: Callable[[int], None],
) -> None:
    """The cache holds what the table budget allows (two definitions here); the store keeps all."""
    stream = Stream()
    for table in ("a", "b", "c"):
        stream.events(control("create-table", TABLE_DEF, table))
    keys = {}
    for table in ("a", "b", "c", "a"):
        doc = data("insert", ROW)
        doc["metadata"]["table-name"] = table
        keys[table] = stream.change(doc).table.key
        if table == "a" and len(keys) == 1:
            table_budget(2 * stream.decoder._definitions.weight)  # room for two definitions
    assert keys == {"a": ("id",), "b": ("id",), "c": ("id",)}  # parsed again from the store
    assert len(stream.decoder._definitions) == 2


def test_a_definition_lives_in_the_metadata_store_so_a_new_decoder_on_it_has_it() -> None:
    """A worker restarted after the control record (or another replica) decodes the table's data
    with its definition: the definition is in the shared store, not in the decoder."""
    from transforms.metadata import InMemoryMetadataStore, ScopedMetadataStore

    store = InMemoryMetadataStore()
    first = create_decoder("aws-dms-json", None, store)
    first.decode(Message(orjson.dumps(control("create-table", TABLE_DEF))))
    fresh = create_decoder("aws-dms-json", None, store)
    (event,) = fresh.decode(Message(orjson.dumps(data("insert", ROW))))
    assert event.table.key == ("id",)
    other_entry = create_decoder("aws-dms-json", None, ScopedMetadataStore(store, "another-topic"))
    (event,) = other_entry.decode(Message(orjson.dumps(data("insert", ROW))))
    assert event.table.key == ()  # an entry's definitions are its own
    first.decode(Message(orjson.dumps(control("drop-table", None))))
    (event,) = fresh.decode(Message(orjson.dumps(data("insert", ROW))))
    assert event.table.key == ()


UINT8_MAX = 2**64 - 1


@pytest.mark.parametrize(
    ("spec", "raw", "ctype", "logical", "value"),
    [
        ({"type": "INT1"}, -128, ConnectType.INT8, None, -128),
        ({"type": "INT2"}, "32767", ConnectType.INT16, None, 32767),
        ({"type": "INT4"}, 5, ConnectType.INT32, None, 5),
        ({"type": "INT8"}, 2**63 - 1, ConnectType.INT64, None, 2**63 - 1),
        ({"type": "UINT1"}, 255, ConnectType.INT16, None, 255),
        ({"type": "UINT2"}, 65535, ConnectType.INT32, None, 65535),
        ({"type": "UINT4"}, 2**32 - 1, ConnectType.INT64, None, 2**32 - 1),
        ({"type": "UINT8"}, UINT8_MAX, ConnectType.BYTES, Logical.DECIMAL, Decimal(UINT8_MAX)),
        (
            {"type": "NUMERIC", "precision": 38, "scale": 4},
            1.25,
            ConnectType.BYTES,
            Logical.DECIMAL,
            Decimal("1.25"),
        ),
        (
            {"type": "NUMERIC", "precision": 0, "scale": 0},
            "1.5",
            ConnectType.STRUCT,
            Logical.VARIABLE_SCALE_DECIMAL,
            Decimal("1.5"),
        ),
        ({"type": "NUMERIC"}, "-3", ConnectType.STRUCT, Logical.VARIABLE_SCALE_DECIMAL, Decimal(-3)),
        ({"type": "REAL4"}, 1.5, ConnectType.FLOAT32, None, 1.5),
        ({"type": "REAL8"}, "2.5", ConnectType.FLOAT64, None, 2.5),
        ({"type": "BOOLEAN"}, True, ConnectType.BOOLEAN, None, True),
        ({"type": "STRING", "length": 5}, "abc", ConnectType.STRING, None, "abc"),
        ({"type": "WSTRING", "length": 5}, "äbc", ConnectType.STRING, None, "äbc"),
        ({"type": "CLOB"}, "long", ConnectType.STRING, None, "long"),
        ({"type": "NCLOB"}, "long", ConnectType.STRING, None, "long"),
        ({"type": "DATE"}, "1970-01-02", ConnectType.INT32, Logical.DATE, dt.date(1970, 1, 2)),
        (
            {"type": "TIME"},
            "12:30:00.5",
            ConnectType.INT64,
            Logical.MICRO_TIME,
            dt.timedelta(hours=12, minutes=30, seconds=0.5),
        ),
        (
            {"type": "DATETIME", "scale": 3},
            "2024-01-02 03:04:05.678",
            ConnectType.INT64,
            Logical.TIMESTAMP,
            dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
        ),
        (
            {"type": "DATETIME", "scale": 0},
            "2024-01-02T03:04:05Z",
            ConnectType.INT64,
            Logical.TIMESTAMP,
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        ),
        (
            {"type": "DATETIME", "precision": 6},
            "2024-01-02 03:04:05.000001",
            ConnectType.INT64,
            Logical.MICRO_TIMESTAMP,
            dt.datetime(2024, 1, 2, 3, 4, 5, 1),
        ),
        (
            {"type": "DATETIME"},
            "2024-01-02 03:04:05",
            ConnectType.INT64,
            Logical.MICRO_TIMESTAMP,
            dt.datetime(2024, 1, 2, 3, 4, 5),
        ),
        (
            {"type": "TIMESTAMP", "scale": 9},
            "2024-01-02 03:04:05.123456789",
            ConnectType.INT64,
            Logical.MICRO_TIMESTAMP,
            dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        ),
        ({"type": "BYTES", "length": 2}, "0x0aFF", ConnectType.BYTES, None, b"\n\xff"),
        ({"type": "BYTE", "length": 2}, "0aff", ConnectType.BYTES, None, b"\n\xff"),
        ({"type": "BLOB"}, "0X00", ConnectType.BYTES, None, b"\x00"),
        ({"type": "GUID"}, "x-y", ConnectType.STRING, None, "x-y"),
    ],
)
def test_dms_types(
    spec: dict[str, Any], raw: Any, ctype: ConnectType, logical: str | None, value: Any
) -> None:
    stream = defined({"columns": {"id": {"type": "INT4"}, "v": spec}, "primary-key": ["id"]})
    event = stream.change(data("insert", {"id": 1, "v": raw}))
    col = event.table.columns[1]
    assert (col.type, col.logical, col.source_type) == (ctype, logical, spec["type"])
    assert event.after is not None and event.after["v"] == value
    (record,) = stream.records(data("insert", {"id": 1, "v": raw}))  # and it emits
    assert record.value is not None


def test_uint8_beyond_int64_is_an_exact_decimal() -> None:
    stream = defined({"columns": {"id": {"type": "UINT8"}}, "primary-key": ["id"]})
    (record,) = stream.records(data("insert", {"id": UINT8_MAX}))
    assert record.key is not None and record.key["schema"]["fields"][0]["parameters"] == {
        "connect.decimal.precision": "20",
        "scale": "0",
    }
    assert record.key["payload"] == {
        "id": base64.b64encode(UINT8_MAX.to_bytes(9, "big", signed=True)).decode()
    }


@pytest.mark.parametrize(
    ("table_def", "row", "field"),
    [
        (
            {"columns": {"p": {"type": "NUMERIC", "precision": 10, "scale": 5000}}},
            None,
            "control.table-def.columns.p",
        ),
        ({"columns": {"t": {"type": "DATETIME", "scale": "x"}}}, None, "control.table-def.columns.t.scale"),
        ({"columns": {"": {"type": "INT4"}}}, None, "control.table-def.columns"),
        ({"columns": {"b": {"type": "BYTES"}}}, {"b": "0xZZ"}, "data.b"),
        ({"columns": {"d": {"type": "DATE"}}}, {"d": "yesterday"}, "data.d"),
        ({"columns": {"n": {"type": "INT2"}}}, {"n": 70000}, "data.n"),
        ({"columns": {"n": {"type": "INT4"}}}, {"BI_n": "x", "n": 1}, "data.n"),
    ],
)
def test_values_that_do_not_fit_the_definition_are_decode_errors(
    table_def: dict[str, Any], row: dict[str, Any] | None, field: str
) -> None:
    stream = Stream()
    if row is None:
        with pytest.raises(DecodeError) as info:
            stream.events(control("create-table", table_def))
    else:
        stream.events(control("create-table", table_def))
        with pytest.raises(DecodeError) as info:
            stream.events(data("update", row))
    assert info.value.format_id == "aws-dms-json"
    assert info.value.field == field


def test_precision_and_scale_of_other_types_are_not_read() -> None:
    stream = defined({"columns": {"s": {"type": "STRING", "precision": "n/a", "scale": 9999}}})
    assert stream.change(data("insert", {"s": "x"})).after == {"s": "x"}


def test_a_key_column_an_insert_lacks_is_absent_not_null() -> None:
    stream = defined()
    event = stream.change(data("insert", {"name": "no id"}))
    assert event.after is not None and event.after["id"] == UNAVAILABLE and event.after["price"] is None
    (record,) = stream.records(data("insert", {"name": "no id"}))
    assert record.key is None


# every type the decoder knows, the ones it maps apart, and an unknown one
_dms_types = st.sampled_from(
    sorted({*aws_dms_json._DMS_TYPES, "NUMERIC", "DECIMAL", "UINT8", "DATETIME", "TIMESTAMP", "X"})
)
_specs = st.fixed_dictionaries(
    {"type": _dms_types},
    optional={
        "precision": st.integers(0, 40) | _json,
        "scale": st.integers(-2, 12) | _json,
        "nullable": _json,
    },
)


@settings(max_examples=200, deadline=None)
@given(
    columns=st.dictionaries(st.sampled_from(["a", "b", "c"]), _specs, min_size=1),
    key=st.lists(st.sampled_from(["a", "b", "x"]), max_size=2),
    rows=st.lists(
        st.tuples(st.sampled_from(["load", "insert", "update", "delete"]), _json | _rows), max_size=4
    ),
)
def test_property_with_a_definition_only_decode_errors_escape(
    columns: dict[str, Any], key: list[str], rows: list[tuple[str, Any]]
) -> None:
    stream = Stream()
    try:
        stream.records(control("create-table", {"columns": columns, "primary-key": key}))
    except DecodeError:
        return
    for operation, row in rows:
        # the decoder's DecodeError, or the emitter's (for a row it refuses, e.g. an empty column name)
        with contextlib.suppress(DecodeError):
            stream.records(data(operation, row))
