"""arcion-csv and arcion-json: exists semantics, headers, cursor/sequence, options, bad input."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.connect import ConnectType, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.arcion_files import ArcionCsvDecoder, ArcionJsonDecoder, header_columns
from transforms.decoders.arcion_rows import COLUMNS_NAMESPACE, Exists
from transforms.envelope import ChangeEvent, Operation, SnapshotMarker
from transforms.errors import ConfigError, DecodeError
from transforms.metadata import InMemoryMetadataStore
from transforms.values import UNAVAILABLE

CURSOR = (
    '"{""extractorId"":0,""nodeID"":""node1"",""timestamp"":1620787852116,""extractionTimestamp"":1620787852117,'
    '""dscId"":1620787053904,""mutId"":1048480,""partNum"":1,""v"":2}"'
)
COUNTS = '"{""insertCount"":6,""updateCount"":1,""deleteCount"":0,""replaceCount"":0}"'
SEED_UPDATE = f"USA,NULL,1,NULL,NULL,0,NULL,10,2,U,{CURSOR},{COUNTS}"
REGION = {
    "table": "tpch.region",
    "columns": "r_comment,r_name,r_regionkey",
    "key.columns": "r_regionkey",
    "column.types": "r_regionkey:int64",
}
JSON_UPDATE: dict[str, Any] = {
    "tableName": {
        "namespace": {"catalog": None, "schema": "io_blitzz", "hash": 1},
        "name": "region",
        "hash": 2,
    },
    "opType": "U",
    "cursor": '{"extractorId":0,"nodeID":"node1","timestamp":1620788090478,"extractionTimestamp":1620788090478,'
    '"dscId":1620787053905,"mutId":326190,"partNum":1,"v":2}',
    "before": {"r_regionkey": "10", "r_comment": "null", "r_name": "null"},
    "after": {"r_regionkey": "null", "r_comment": "USA", "r_name": "null"},
    "exists": {"r_regionkey": "2", "r_comment": "1", "r_name": "0"},
    "operationcount": '{"insertCount":6,"updateCount":1,"deleteCount":0,"replaceCount":0}',
}


def csv_decoder(options: dict[str, Any] | None = None, metadata: InMemoryMetadataStore | None = None) -> Any:
    return create_decoder("arcion-csv", REGION if options is None else options, metadata)


def decode(decoder: Any, value: bytes | str | dict[str, Any] | None) -> list[Any]:
    if isinstance(value, dict):
        value = orjson.dumps(value)
    elif isinstance(value, str):
        value = value.encode()
    return list(decoder.decode(Message(value=value, topic="t")))


def one(decoder: Any, value: bytes | str | dict[str, Any]) -> ChangeEvent:
    events = decode(decoder, value)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ChangeEvent)
    return event


def names_of(event: ChangeEvent) -> tuple[str, ...]:
    return tuple(c.name for c in event.table.columns)


def decode_error(decoder: Any, value: bytes | str | dict[str, Any]) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(decoder, value)
    return info.value


# ------------------------------------------------------------------------------------ semantics


def test_csv_seed_update_exists_semantics() -> None:
    event = one(csv_decoder(), SEED_UPDATE)
    assert event.op is Operation.UPDATE
    # r_comment: exists 1 (SET), r_name: exists 0 (not in the DML), r_regionkey: exists 2 (WHERE)
    assert event.before == {"r_comment": UNAVAILABLE, "r_name": UNAVAILABLE, "r_regionkey": 10}
    assert event.after == {"r_comment": "USA", "r_name": UNAVAILABLE, "r_regionkey": UNAVAILABLE}
    assert event.table.db == "tpch" and event.table.table == "region" and event.table.key == ("r_regionkey",)
    assert event.table.column("r_regionkey").type is ConnectType.INT64  # type: ignore[union-attr]
    assert event.table.column("r_comment").type is ConnectType.STRING  # type: ignore[union-attr]


def test_csv_cursor_and_counts_in_source() -> None:
    event = one(csv_decoder(), SEED_UPDATE)
    src = event.source
    assert src.connector == "arcion-csv"
    assert src.snapshot is SnapshotMarker.FALSE
    assert src.ts_ms == 1620787852116
    assert event.ts_ms == 1620787852117  # extractionTimestamp
    assert orjson.loads(src.fields["cursor"])["mutId"] == 1048480
    assert src.fields["dsc_id"] == 1620787053904
    assert src.fields["mut_id"] == 1048480
    assert src.fields["node_id"] == "node1"
    assert src.fields["extractor_id"] == 0
    assert src.fields["part_num"] == 1
    assert src.fields["cursor_version"] == 2
    assert src.fields["update_count"] == 1
    assert orjson.loads(src.fields["operation_count"])["insertCount"] == 6
    assert src.sequence == "00000001620787053904-00000000000001048480"


def test_sequence_orders_by_dsc_id_then_mut_id() -> None:
    # the seed: mutId restarts when dscId advances; the sequence must still sort in source order
    decoder = csv_decoder()
    rows = [
        SEED_UPDATE,
        SEED_UPDATE.replace('""mutId"":1048480', '""mutId"":999999999'),
        SEED_UPDATE.replace("1620787053904", "1620787053905").replace('""mutId"":1048480', '""mutId"":1721'),
    ]
    sequences = [one(decoder, r).source.sequence or "" for r in rows]
    assert all(sequences)
    assert sequences == sorted(sequences)


def test_cursor_without_dsc_id_has_no_sequence() -> None:
    # the seed's delete example spells "dscI"; such a cursor is kept but gives no sequence
    row = SEED_UPDATE.replace('""dscId""', '""dscI""')
    event = one(csv_decoder(), row)
    assert event.source.sequence is None
    assert event.source.fields["dsc_i"] == 1620787053904


def test_csv_insert_and_delete_images() -> None:
    decoder = csv_decoder()
    ins = one(decoder, f"India,NULL,1,NULL,NULL,0,10,NULL,1,I,{CURSOR},{COUNTS}")
    assert ins.op is Operation.CREATE and ins.before is None
    assert ins.after == {"r_comment": "India", "r_name": UNAVAILABLE, "r_regionkey": 10}
    dele = one(decoder, f"NULL,NULL,0,NULL,NULL,0,NULL,10,2,D,{CURSOR},{COUNTS}")
    assert dele.op is Operation.DELETE and dele.after is None
    assert dele.before == {"r_comment": UNAVAILABLE, "r_name": UNAVAILABLE, "r_regionkey": 10}


def test_null_literal_is_null_only_where_present() -> None:
    decoder = csv_decoder()
    event = one(decoder, f"NULL,old,3,NULL,NULL,0,5,5,3,U,{CURSOR},{COUNTS}")
    assert event.after == {"r_comment": None, "r_name": UNAVAILABLE, "r_regionkey": 5}
    assert event.before == {"r_comment": "old", "r_name": UNAVAILABLE, "r_regionkey": 5}
    # a custom null literal: NULL is then a string
    custom = csv_decoder({**REGION, "null.literal": ""})
    event = one(custom, f"NULL,,3,,,0,5,5,3,U,{CURSOR},{COUNTS}")
    assert event.after == {"r_comment": "NULL", "r_name": UNAVAILABLE, "r_regionkey": 5}
    assert event.before == {"r_comment": None, "r_name": UNAVAILABLE, "r_regionkey": 5}


def test_update_without_old_values_has_no_before_image() -> None:
    event = one(csv_decoder(), f"x,NULL,1,NULL,NULL,0,NULL,NULL,0,U,{CURSOR},{COUNTS}")
    assert event.before is None
    assert event.after == {"r_comment": "x", "r_name": UNAVAILABLE, "r_regionkey": UNAVAILABLE}


def test_replace_is_an_update() -> None:
    event = one(csv_decoder(), f"c,NULL,1,n,NULL,1,7,7,3,R,{CURSOR},{COUNTS}")
    assert event.op is Operation.UPDATE
    assert event.before == {"r_comment": UNAVAILABLE, "r_name": UNAVAILABLE, "r_regionkey": 7}
    assert event.after == {"r_comment": "c", "r_name": "n", "r_regionkey": 7}


def test_csv_snapshot_row() -> None:
    decoder = csv_decoder({**REGION, "columns": "r_regionkey,r_name,r_comment"})
    event = one(decoder, "0, AFRICA ,NULL")
    assert event.op is Operation.READ and event.before is None
    assert event.after == {"r_regionkey": 0, "r_name": " AFRICA ", "r_comment": None}
    assert event.source.snapshot is SnapshotMarker.TRUE and event.source.ts_ms is None
    assert event.source.sequence is None


def test_column_types_option() -> None:
    options = {
        "table": "db.t",
        "columns": "k,price,day,flag,at,doc",
        "key.columns": "k",
        "column.types": "k:int32, price:decimal(10,2),day:date,flag:boolean,at:timestamp,doc:json",
    }
    event = one(csv_decoder(options), '1,12.50,2021-05-12,true,2021-05-12 01:02:03.250,"{""a"":1}"')
    assert event.after == {
        "k": 1,
        "price": Decimal("12.50"),
        "day": dt.date(2021, 5, 12),
        "flag": True,
        "at": dt.datetime(2021, 5, 12, 1, 2, 3, 250000),
        "doc": '{"a":1}',
    }
    table = event.table
    assert table.column("price").is_decimal  # type: ignore[union-attr]
    assert table.column("day").logical == Logical.DATE  # type: ignore[union-attr]
    assert table.column("at").logical == Logical.TIMESTAMP  # type: ignore[union-attr]


def test_csv_delimiter_option() -> None:
    decoder = csv_decoder({**REGION, "csv.delimiter": "|"})
    row = (
        SEED_UPDATE.replace(",", "|")
        .replace(CURSOR.replace(",", "|"), CURSOR)
        .replace(COUNTS.replace(",", "|"), COUNTS)
    )
    assert one(decoder, row).after == {"r_comment": "USA", "r_name": UNAVAILABLE, "r_regionkey": UNAVAILABLE}


def test_input_tombstone_and_blank_message() -> None:
    assert decode(csv_decoder(), None) == []
    assert decode(csv_decoder(), b"\n") == []
    assert decode(create_decoder("arcion-json", {}), None) == []


def test_schemas_are_reused() -> None:
    decoder = csv_decoder()
    assert one(decoder, SEED_UPDATE).table is one(decoder, SEED_UPDATE).table


# -------------------------------------------------------------------------------------- headers


def test_header_line_sets_columns_in_shared_store() -> None:
    store = InMemoryMetadataStore()
    options = {"table": "tpch.region", "key.columns": "r_regionkey"}
    header = "r_comment_new,r_comment_old,r_comment_exists,r_name_new,r_name_old,r_name_exists,"
    header += "r_regionkey_new,r_regionkey_old,r_regionkey_exists,op,cursor,operation_count"
    assert decode(csv_decoder(options, store), header) == []
    assert store.get(COLUMNS_NAMESPACE, "tpch.region") == ["r_comment", "r_name", "r_regionkey"]
    # another replica sharing the store decodes the data rows
    event = one(csv_decoder(options, store), SEED_UPDATE)
    assert names_of(event) == ("r_comment", "r_name", "r_regionkey")
    assert event.before == {"r_comment": UNAVAILABLE, "r_name": UNAVAILABLE, "r_regionkey": "10"}


def test_header_and_rows_in_one_message() -> None:
    decoder = csv_decoder({"table": "tpch.region"})
    events = decode(decoder, "r_regionkey,r_name\n0,AFRICA\n1,AMERICA\n")
    assert [e.after for e in events] == [
        {"r_regionkey": "0", "r_name": "AFRICA"},
        {"r_regionkey": "1", "r_name": "AMERICA"},
    ]


def test_header_replaces_columns_option() -> None:
    store = InMemoryMetadataStore()
    decoder = csv_decoder({"table": "db.t", "columns": "a,b"}, store)
    # with known columns, a row of other names is a header only with the realtime triplet shape
    assert decode_error(decoder, "x,y,z").field == "columns"
    assert decode(decoder, "x,x,x,y,y,y,z,z,z,op,cursor,counts") == []
    assert one(decoder, "1,2,3").after == {"x": "1", "y": "2", "z": "3"}
    # a snapshot row of names for the known column count is data, unless it repeats the header
    assert one(decoder, "p,q,r").after == {"x": "p", "y": "q", "z": "r"}
    assert decode(decoder, "X,Y,Z") == []
    # without known columns, a row of distinct names is a snapshot header
    fresh = csv_decoder({"table": "db.u"}, store)
    assert decode(fresh, "k,v") == []
    assert store.get(COLUMNS_NAMESPACE, "db.u") == ["k", "v"]


@pytest.mark.parametrize(
    ("fields", "known", "expected"),
    [
        (["a", "b"], None, ["a", "b"]),
        (["a", "b"], ["a", "b"], ["a", "b"]),
        (["AFRICA", "EUROPE"], ["a", "b"], None),
        (["a", "b", "c"], ["a", "b"], None),
        (["a", "a"], None, None),
        (["0", "AFRICA"], None, None),
        (["NEW_VAL_a", "OLD_VAL_a", "EXISTS_VAL_a", "op", "cursor", "count"], None, ["a"]),
        (["a", "a", "a", "b", "b", "b", "op", "cursor", "count"], None, ["a", "b"]),
        (["Col_After", "col_before", "COL_EXISTS", "op", "cursor", "count"], ["x"], ["Col"]),
        (
            ["a_new", "b_old", "a_exists", "op", "cursor", "count"],
            None,
            ["a_new", "b_old", "a_exists", "op", "cursor", "count"],
        ),
        (["USA", "NULL", "1", "U"], None, None),
    ],
)
def test_header_rule(fields: list[str], known: list[str] | None, expected: list[str] | None) -> None:
    assert header_columns(fields, known) == expected


# ----------------------------------------------------------------------------------------- JSON


def test_json_realtime_update() -> None:
    decoder = create_decoder(
        "arcion-json", {"key.columns": "r_regionkey", "column.types": "r_regionkey:int64"}
    )
    event = one(decoder, JSON_UPDATE)
    assert event.op is Operation.UPDATE
    assert event.table.db is None and event.table.schema == "io_blitzz" and event.table.table == "region"
    assert event.before == {"r_regionkey": 10, "r_comment": UNAVAILABLE, "r_name": UNAVAILABLE}
    assert event.after == {"r_regionkey": UNAVAILABLE, "r_comment": "USA", "r_name": UNAVAILABLE}
    assert event.source.sequence == "00000001620787053905-00000000000000326190"
    assert event.source.fields["mut_id"] == 326190
    assert event.source.ts_ms == 1620788090478


def test_json_null_string_and_json_null_are_null_where_present() -> None:
    decoder = create_decoder("arcion-json", {})
    doc = {
        **JSON_UPDATE,
        "after": {"r_comment": "null", "r_name": None},
        "exists": {"r_comment": 1, "r_name": 1},
    }
    doc["before"] = {}
    event = one(decoder, doc)
    assert event.after == {"r_comment": None, "r_name": None}
    assert event.before is None


def test_json_columns_option_orders_and_marks_missing_unavailable() -> None:
    decoder = create_decoder("arcion-json", {"table": "db.t", "columns": "c,b,a"})
    event = one(decoder, {"a": "1", "b": "null"})
    assert names_of(event) == ("c", "b", "a")
    assert event.after == {"c": UNAVAILABLE, "b": None, "a": "1"}
    err = decode_error(decoder, {"a": "1", "z": "2"})
    assert err.field == "z"


def test_json_table_option_for_snapshot_rows() -> None:
    event = one(create_decoder("arcion-json", {"table": "db.schema.t"}), {"a": "1"})
    assert (event.table.db, event.table.schema, event.table.table) == ("db", "schema", "t")
    assert event.op is Operation.READ and event.source.snapshot is SnapshotMarker.TRUE


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (SEED_UPDATE[:-40], "row"),  # truncated inside the quoted counts
        ('USA,"NULL"x,1', "row"),
        ("USA,NULL,1,NULL,NULL,0,NULL,10,2", "columns"),  # 3x fields for x columns
        ("a,b,c,d", "columns"),
        (SEED_UPDATE.replace("NULL,10,2,U", "NULL,10,4,U"), "exists.r_regionkey"),
        (SEED_UPDATE.replace("NULL,10,2,U", "NULL,10,x,U"), "exists.r_regionkey"),
        (SEED_UPDATE.replace(",U,", ",Q,"), "op"),
        (SEED_UPDATE.replace(CURSOR, '"{not json"'), "cursor"),
        (SEED_UPDATE.replace(COUNTS, '"{""insertCount"":""six""}"'), "operationcount.insertCount"),
        (SEED_UPDATE.replace("NULL,10,2", "NULL,ten,2"), "old.r_regionkey"),
    ],
)
def test_csv_bad_rows(row: str, field: str) -> None:
    err = decode_error(csv_decoder(), row)
    assert err.format_id == "arcion-csv"
    assert err.field == field
    assert "payload:" in str(err)


def test_csv_missing_table_columns_and_key() -> None:
    assert decode_error(csv_decoder({"columns": "a"}), "1").field == "table"
    err = decode_error(csv_decoder({"table": "db.t"}), "1,2")
    assert err.field == "columns" and "unknown" in err.reason
    assert (
        decode_error(csv_decoder({"table": "db.t", "columns": "a", "key.columns": "id"}), "1").field
        == "key.columns"
    )
    assert decode_error(csv_decoder(), b"\xff\xfe").field is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (b'{"opType":"U","exists":{"a":"1"', None),  # truncated JSON
        (b"[1]", None),
        ({**JSON_UPDATE, "opType": "X"}, "opType"),
        ({**JSON_UPDATE, "opType": 1}, "opType"),
        ({**JSON_UPDATE, "exists": {**JSON_UPDATE["exists"], "r_name": "5"}}, "exists.r_name"),
        ({**JSON_UPDATE, "exists": {"r_regionkey": "2", "r_comment": "1"}}, "exists.r_name"),
        ({**JSON_UPDATE, "exists": "2,1,0"}, "exists"),
        ({**JSON_UPDATE, "after": {}}, "after.r_comment"),
        ({**JSON_UPDATE, "before": ["10"]}, "before"),
        ({**JSON_UPDATE, "cursor": "[]"}, "cursor"),
        ({**JSON_UPDATE, "cursor": 5}, "cursor"),
        ({**JSON_UPDATE, "cursor": '{"timestamp":"now"}'}, "cursor.timestamp"),
        ({**JSON_UPDATE, "operationcount": "{"}, "operationcount"),
        (
            {**JSON_UPDATE, "tableName": {"namespace": {"schema": 1}, "name": "t"}},
            "tableName.namespace.schema",
        ),
        ({**JSON_UPDATE, "tableName": {"namespace": {}}}, "tableName.name"),
        ({k: v for k, v in JSON_UPDATE.items() if k != "tableName"}, "tableName"),
        ({**JSON_UPDATE, "after": {"r_comment": {"x": 1}}}, "after.r_comment"),
    ],
)
def test_json_bad_rows(doc: bytes | dict[str, Any], field: str | None) -> None:
    err = decode_error(create_decoder("arcion-json", {}), doc)
    assert err.format_id == "arcion-json"
    assert err.field == field
    assert "payload:" in str(err)


def test_json_snapshot_bad_rows() -> None:
    decoder = create_decoder("arcion-json", {"table": "db.t"})
    assert decode_error(decoder, {"a": {"nested": 1}}).field == "a"
    assert decode_error(decoder, {}).field is None
    assert decode_error(create_decoder("arcion-json", {}), {"a": "1"}).field == "table"


@pytest.mark.parametrize(
    "options",
    [
        {"tabel": "db.t"},
        {"table": "a.b.c.d"},
        {"table": "db."},
        {"columns": "a,,b"},
        {"columns": "a,A"},
        {"column.types": "a:varchar"},
        {"column.types": "a"},
        {"csv.delimiter": "||"},
    ],
)
def test_bad_options(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        create_decoder("arcion-csv", options)


def test_csv_options_are_not_json_options() -> None:
    with pytest.raises(ConfigError):
        create_decoder("arcion-json", {"csv.delimiter": ";"})
    assert isinstance(create_decoder("arcion-json", {}), ArcionJsonDecoder)
    assert isinstance(csv_decoder(), ArcionCsvDecoder)


# ------------------------------------------------------------------------------------- property

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"))
    | st.sampled_from([",", '"', " ", "'", "{", "}"]),
    max_size=10,
)
_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=6, unique=True)
_CURSOR = {"extractorId": 0, "timestamp": 1, "extractionTimestamp": 2, "dscId": 3, "mutId": 4, "v": 2}
_COUNTS = {"insertCount": 1, "updateCount": 0, "deleteCount": 0, "replaceCount": 0}


@st.composite
def _changes(
    draw: st.DrawFn, null: str
) -> tuple[list[str], str, list[tuple[str | None, str | None, Exists]]]:
    names = draw(_NAMES)
    value = st.none() | _TEXT.filter(lambda s: s != null)
    cells = [(draw(value), draw(value), draw(st.sampled_from(list(Exists)))) for _ in names]
    return names, draw(st.sampled_from("IUDR")), cells


def _expected(
    names: list[str], op: str, cells: list[tuple[str | None, str | None, Exists]]
) -> tuple[Operation, dict[str, Any] | None, dict[str, Any] | None]:
    after = {n: new if ex.in_new else UNAVAILABLE for n, (new, _, ex) in zip(names, cells, strict=True)}
    before = {n: old if ex.in_old else UNAVAILABLE for n, (_, old, ex) in zip(names, cells, strict=True)}
    if op == "I":
        return Operation.CREATE, None, after
    if op == "D":
        return Operation.DELETE, before, None
    return Operation.UPDATE, before if any(ex.in_old for _, _, ex in cells) else None, after


def _check(
    event: ChangeEvent, expected: tuple[Operation, dict[str, Any] | None, dict[str, Any] | None]
) -> None:
    # equality also says: an absent column is UNAVAILABLE, never None
    assert (event.op, event.before, event.after) == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_changes("NULL"))
def test_property_csv_realtime_roundtrip(
    change: tuple[list[str], str, list[tuple[str | None, str | None, Exists]]],
) -> None:
    names, op, cells = change
    out = io.StringIO()
    fields: list[str] = []
    for new, old, ex in cells:
        fields += ["NULL" if new is None else new, "NULL" if old is None else old, str(int(ex))]
    fields += [op, orjson.dumps(_CURSOR).decode(), orjson.dumps(_COUNTS).decode()]
    csv.writer(out, lineterminator="").writerow(fields)
    decoder = create_decoder("arcion-csv", {"table": "db.t", "columns": ",".join(names)})
    _check(one(decoder, out.getvalue()), _expected(names, op, cells))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_changes("null"), st.data())
def test_property_json_realtime_roundtrip(
    change: tuple[list[str], str, list[tuple[str | None, str | None, Exists]]], data: st.DataObject
) -> None:
    names, op, cells = change
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    exists: dict[str, Any] = {}
    for name, (new, old, ex) in zip(names, cells, strict=True):
        exists[name] = data.draw(st.sampled_from([str(int(ex)), int(ex)]))
        for image, value, present in ((after, new, ex.in_new), (before, old, ex.in_old)):
            if present or data.draw(st.booleans()):
                image[name] = data.draw(st.sampled_from(["null", None])) if value is None else value
    doc = {
        "tableName": {"namespace": {"catalog": None, "schema": "s"}, "name": "t"},
        "opType": op,
        "cursor": orjson.dumps(_CURSOR).decode(),
        "before": before,
        "after": after,
        "exists": exists,
        "operationcount": orjson.dumps(_COUNTS).decode(),
    }
    _check(one(create_decoder("arcion-json", {}), doc), _expected(names, op, cells))


@settings(max_examples=200, deadline=None)
@given(
    _NAMES.flatmap(
        lambda names: st.tuples(
            st.just(names), st.lists(st.none() | _TEXT, min_size=len(names), max_size=len(names))
        )
    )
)
def test_property_snapshot_rows(row: tuple[list[str], list[str | None]]) -> None:
    names, values = row
    if any(v in ("NULL", "null") for v in values):
        return
    expected = dict(zip(names, values, strict=True))
    # csv: a row that repeats the column names is a header by rule; such rows are not data
    if [(v or "").lower() for v in values] != [n.lower() for n in names]:
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(["NULL" if v is None else v for v in values])
        text = out.getvalue()
        if text:
            event = one(create_decoder("arcion-csv", {"table": "db.t", "columns": ",".join(names)}), text)
            assert event.op is Operation.READ and event.after == expected
    event = one(create_decoder("arcion-json", {"table": "db.t"}), {n: v for n, v in expected.items()})
    assert event.op is Operation.READ and event.after == expected
