"""Behaviour of the aws-dms-json decoder: operations, before-images, control records, errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.formats.strategies import json_values
from transforms.decoders import Message, create_decoder
from transforms.decoders.aws_dms_json import AwsDmsJsonDecoder
from transforms.envelope import ChangeEvent, Operation, SchemaChangeEvent, SnapshotMarker
from transforms.errors import ConfigError, DecodeError
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
def test_property_only_decode_errors_escape(doc: dict[str, Any]) -> None:
    try:
        decode(doc)
    except DecodeError as err:
        assert err.format_id == "aws-dms-json"
