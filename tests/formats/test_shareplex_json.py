"""shareplex-json: the semantics spelled out as assertions, bad input, and round-trip properties."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_connect_accepts
from transforms.connect import ConnectType
from transforms.decoders import Message, create_decoder
from transforms.decoders.shareplex_json import ShareplexJsonDecoder, oracle_column
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SchemaChangeEvent, emit
from transforms.errors import ConfigError, DecodeError
from transforms.metadata import InMemoryMetadataStore
from transforms.values import UNAVAILABLE

META = {
    "time": "2017-06-16T14:24:34",
    "userid": 84,
    "scn": "14589063118712",
    "rowid": "AAATGpAAIAAItcIAAA",
    "trans": "7.0.411499",
    "seq": 1,
    "size": 11,
    "table": "CL_BIZ1.MIO_LOG",
    "idx": "1/11",
    "posttime": "2017-06-16T14:33:52",
}


def msg(
    op: str, data: dict[str, Any] | None = None, key: dict[str, Any] | None = None, **meta: Any
) -> Message:
    doc: dict[str, Any] = {"meta": {**META, "op": op, **meta}}
    if data is not None:
        doc["data"] = data
    if key is not None:
        doc["key"] = key
    return Message(orjson.dumps(doc), topic="topic")


def decoder(**options: Any) -> ShareplexJsonDecoder:
    dec = create_decoder("shareplex-json", options)
    assert isinstance(dec, ShareplexJsonDecoder)
    return dec


def one(events: list[Any]) -> ChangeEvent:
    (event,) = events
    assert isinstance(event, ChangeEvent)
    return event


# ------------------------------------------------------------------------------ behaviour


@pytest.mark.parametrize("op", ["ins", "INSERT", "insert"])
def test_insert(op: str) -> None:
    event = one(decoder().decode(msg(op, {"MIO_LOG_ID": "32539737", "N": None})))
    assert event.op is Operation.CREATE
    assert event.before is None
    assert event.after == {"MIO_LOG_ID": "32539737", "N": None}
    assert (event.table.db, event.table.schema, event.table.table) == ("CL_BIZ1", None, "MIO_LOG")


def test_values_stay_strings_and_key_is_none_without_option() -> None:
    event = one(decoder().decode(msg("ins", {"ID": "0042"})))
    assert event.after == {"ID": "0042"}
    assert event.table.columns[0].type is ConnectType.STRING
    assert event.table.key == ()
    (record,) = emit([event], EmitOptions())
    assert record.key is None


def test_key_columns_option_global_and_per_table() -> None:
    assert one(
        decoder(**{"key.columns": "MIO_LOG_ID"}).decode(msg("ins", {"MIO_LOG_ID": "1"}))
    ).table.key == ("MIO_LOG_ID",)
    per_table = decoder(**{"key.columns": "CL_BIZ1.MIO_LOG:A,B;OTHER.T:C"})
    assert one(per_table.decode(msg("ins", {"A": "1", "B": "2"}))).table.key == ("A", "B")
    assert one(per_table.decode(msg("ins", {"C": "1"}, table="OTHER.T"))).table.key == ("C",)
    assert one(per_table.decode(msg("ins", {"C": "1"}, table="X.Y"))).table.key == ()


def test_update_key_is_before_and_after_is_before_overlaid_with_data() -> None:
    key = {"MIO_LOG_ID": "32537893", "POL_CODE": None, "CNTR_NO": "1171201606syui26"}
    event = one(decoder().decode(msg("upd", {"CNTR_NO": "1171201606"}, key)))
    assert event.op is Operation.UPDATE
    assert event.before == key
    assert event.after == {"MIO_LOG_ID": "32537893", "POL_CODE": None, "CNTR_NO": "1171201606"}


def test_update_columns_in_neither_section_are_unavailable() -> None:
    dec = decoder()
    dec.decode(msg("ins", {"ID": "1", "A": "a", "B": None}))
    event = one(dec.decode(msg("upd", {"A": "b"}, {"ID": "1"})))
    assert event.before == {"ID": "1", "A": UNAVAILABLE, "B": UNAVAILABLE}
    assert event.after == {"ID": "1", "A": "b", "B": UNAVAILABLE}


def test_track_columns_off_lists_only_the_message_columns() -> None:
    dec = decoder(**{"track.columns": "false"})
    dec.decode(msg("ins", {"ID": "1", "A": "a", "B": None}))
    event = one(dec.decode(msg("upd", {"A": "b"}, {"ID": "1"})))
    assert event.after == {"ID": "1", "A": "b"}


def test_delete_data_is_the_before_image() -> None:
    event = one(decoder().decode(msg("del", {"MIO_LOG_ID": "32539739", "POL_CODE": None})))
    assert event.op is Operation.DELETE
    assert event.before == {"MIO_LOG_ID": "32539739", "POL_CODE": None}
    assert event.after is None


def test_truncate() -> None:
    event = one(decoder().decode(msg("TRUNCATE")))
    assert event.op is Operation.TRUNCATE
    assert event.before is None and event.after is None


def test_update_before_and_after_pair_becomes_one_update() -> None:
    dec = decoder()
    assert dec.decode(msg("UPDATE BEFORE", {"ID": "1", "A": "old", "B": "same"}, seq=3)) == []
    event = one(dec.decode(msg("UPDATE AFTER", {"ID": "1", "A": "new"}, seq=4)))
    assert event.op is Operation.UPDATE
    assert event.before == {"ID": "1", "A": "old", "B": "same"}
    assert event.after == {"ID": "1", "A": "new", "B": "same"}
    assert event.transaction is not None and event.transaction.total_order == 4
    # the remembered before image is used once
    again = one(dec.decode(msg("UPDATE AFTER", {"ID": "1", "A": "newer"}, seq=5)))
    assert again.before is None
    assert again.after == {"ID": "1", "A": "newer", "B": UNAVAILABLE}


def test_update_pair_is_matched_by_row_and_shared_through_the_store() -> None:
    store = InMemoryMetadataStore()
    first = ShareplexJsonDecoder(metadata=store)
    second = ShareplexJsonDecoder(metadata=store)
    first.decode(msg("UPDATE_BEFORE", {"ID": "1", "A": "x"}, rowid="R1"))
    first.decode(msg("UPDATE_BEFORE", {"ID": "2", "A": "y"}, rowid="R2"))
    event = one(second.decode(msg("UPDATE_AFTER", {"ID": "2", "A": "z"}, rowid="R2")))
    assert event.before == {"ID": "2", "A": "y"}


def test_drop_column_is_a_schema_change_and_forgets_the_column() -> None:
    dec = decoder()
    dec.decode(msg("ins", {"ID": "1", "A": "a", "GONE": "g"}))
    (change,) = dec.decode(msg("DROP COLUMN", {"GONE": None}))
    assert isinstance(change, SchemaChangeEvent)
    assert (change.db, change.schema, change.table) == ("CL_BIZ1", None, "MIO_LOG")
    assert change.ddl == "ALTER TABLE CL_BIZ1.MIO_LOG DROP (GONE)"
    assert change.new_table is not None
    assert [c.name for c in change.new_table.columns] == ["ID", "A"]
    event = one(dec.decode(msg("upd", {"A": "b"}, {"ID": "1"})))
    assert set(event.after or {}) == {"ID", "A"}


def test_transaction_source_fields_and_times() -> None:
    event = one(decoder().decode(msg("ins", {"ID": "1"})))
    assert event.transaction is not None
    assert (event.transaction.id, event.transaction.total_order, event.transaction.data_collection_order) == (
        "7.0.411499",
        1,
        1,
    )
    assert event.source.fields == {
        "scn": "14589063118712",
        "rowid": "AAATGpAAIAAItcIAAA",
        "userid": 84,
        "trans": "7.0.411499",
        "seq": 1,
        "size": 11,
        "idx": "1/11",
        "posttime": "2017-06-16T14:33:52",
    }
    assert event.source.ts_ms == 1497623074000  # 2017-06-16T14:24:34Z
    assert event.ts_ms == 1497623632000  # posttime
    zoned = one(decoder().decode(msg("ins", {"ID": "1"}, time="2017-06-16T14:24:34Z")))
    assert zoned.source.ts_ms == 1497623074000


def test_sequence_sorts_by_scn_then_seq() -> None:
    dec = decoder()
    seqs = [
        one(dec.decode(msg("ins", {"ID": "1"}, scn=scn, seq=seq))).source.sequence
        for scn, seq in [("999", 2), ("999", 10), ("1000", 1), ("14589063118712", 1)]
    ]
    assert seqs == sorted(seqs)  # type: ignore[type-var]
    assert seqs[0] == "00000000000000000999:0000000002"
    assert one(dec.decode(msg("ins", {"ID": "1"}, scn=None))).source.sequence is None


def test_column_types_option_types_values() -> None:
    dec = decoder(
        **{"column.types": '{"CL_BIZ1.MIO_LOG": {"ID": "NUMBER(12)", "AMT": "NUMBER(10,2)", "D": "DATE"}}'}
    )
    event = one(
        dec.decode(msg("ins", {"ID": "32539737", "AMT": "10.50", "D": "2017-06-16T14:24:34", "S": "x"}))
    )
    assert event.after is not None
    assert event.after["ID"] == 32539737
    assert event.after["AMT"] == Decimal("10.50")
    assert event.after["S"] == "x"
    (record,) = emit([event], EmitOptions())
    assert record.value is not None and record.value["payload"]["after"]["D"] == 1497623074000


def test_missing_table_uses_default_table_then_topic() -> None:
    payload = b'{"meta":{"op":"del"},"data":{"A":"1"}}'
    event = one(decoder(**{"default.table": "O.T"}).decode(Message(payload)))
    assert (event.table.db, event.table.table) == ("O", "T")
    event = one(decoder().decode(Message(payload, topic="orders")))
    assert (event.table.db, event.table.table) == (None, "orders")


def test_oracle_types() -> None:
    assert oracle_column("a", "NUMBER").logical == "io.debezium.data.VariableScaleDecimal"
    assert oracle_column("a", "NUMBER(2)").type is ConnectType.INT8
    assert oracle_column("a", "number(18,0)").type is ConnectType.INT64
    assert oracle_column("a", "NUMBER(20)").logical == "org.apache.kafka.connect.data.Decimal"
    assert oracle_column("a", "TIMESTAMP(6) WITH TIME ZONE").logical == "io.debezium.time.ZonedTimestamp"
    assert oracle_column("a", "long raw").type is ConnectType.BYTES
    assert oracle_column("a", "int64").type is ConnectType.INT64


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "payload, field",
    [
        (b'{"meta":{"op":"ins"', None),
        (b'"x"', None),
        (b'{"data":{"A":"1"}}', "meta"),
        (b'{"meta":{"table":"O.T"},"data":{"A":"1"}}', "meta.op"),
        (b'{"meta":{"op":"merge","table":"O.T"},"data":{"A":"1"}}', "meta.op"),
        (b'{"meta":{"op":"ins","table":"O.T"}}', "data"),
        (b'{"meta":{"op":"ins","table":"O.T"},"data":["A"]}', "data"),
        (b'{"meta":{"op":"upd","table":"O.T"},"data":{"A":"1"},"key":"k"}', "key"),
        (b'{"meta":{"op":"ins","table":7},"data":{"A":"1"}}', "meta.table"),
        (b'{"meta":{"op":"ins","table":"O.T","time":"yesterday"},"data":{"A":"1"}}', "meta.time"),
        (b'{"meta":{"op":"ins","table":"O.T","seq":"first"},"data":{"A":"1"}}', "meta.seq"),
        (b'{"meta":{"op":"ins","table":"O.T","scn":"12x"},"data":{"A":"1"}}', "meta.scn"),
        (b'{"meta":{"op":"ins","table":"O.T","scn":[1]},"data":{"A":"1"}}', "meta.scn"),
        (b'{"meta":{"op":"ins","table":"O.T"},"data":{"A":{"x":1}}}', "data.A"),
        (b'{"meta":{"op":"UPDATE BEFORE","table":"O.T"},"data":{"A":[1]}}', "data.A"),
    ],
)
def test_bad_input_is_a_decode_error_naming_the_field(payload: bytes, field: str | None) -> None:
    with pytest.raises(DecodeError) as err:
        decoder().decode(Message(payload, topic="t"))
    assert err.value.format_id == "shareplex-json"
    assert err.value.field == field
    assert "payload: " in str(err.value)


def test_typed_value_errors_name_the_column() -> None:
    dec = decoder(**{"column.types": '{"*": {"ID": "NUMBER(12)"}}'})
    with pytest.raises(DecodeError) as err:
        dec.decode(msg("upd", {"X": "1"}, {"ID": "abc"}))
    assert err.value.field == "key.ID"


@pytest.mark.parametrize(
    "options",
    [
        {"key.columns": "O.T:"},
        {"column.types": "{not json"},
        {"column.types": '{"*": {"A": "WIBBLE"}}'},
        {"x": "1"},
    ],
)
def test_bad_options_are_config_errors(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        create_decoder("shareplex-json", options)


def test_tombstone_input_is_empty() -> None:
    assert decoder().decode(Message(None)) == []


# ------------------------------------------------------------------------------ properties

NAMES = st.text("ABCDEFGH_", min_size=1, max_size=6)
VALUES = st.one_of(st.none(), st.text(max_size=8), st.integers(-(10**12), 10**12).map(str))


@st.composite
def shareplex_changes(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    row = {n: draw(VALUES) for n in names}
    op = draw(st.sampled_from(["ins", "upd", "del", "pair"]))
    key_cols = draw(st.lists(st.sampled_from(names), unique=True))
    changed = {n: draw(VALUES) for n in draw(st.lists(st.sampled_from(names), unique=True))}
    return {"names": names, "row": row, "op": op, "key": {n: row[n] for n in key_cols}, "changed": changed}


@settings(max_examples=200, deadline=None)
@given(shareplex_changes())
def test_round_trip_keeps_op_images_and_absence(connect_checker: Any, change: dict[str, Any]) -> None:
    names, row, op, key, changed = (
        change["names"],
        change["row"],
        change["op"],
        change["key"],
        change["changed"],
    )
    dec = ShareplexJsonDecoder()
    dec.decode(msg("ins", dict(row), seq=1))  # teaches the decoder every column of the table

    def full(image: dict[str, Any]) -> dict[str, Any]:
        return {n: image.get(n, UNAVAILABLE) for n in names}

    if op == "ins":
        event = one(dec.decode(msg("ins", dict(row), seq=2)))
        assert (event.op, event.before, event.after) == (Operation.CREATE, None, row)
    elif op == "del":
        event = one(dec.decode(msg("del", dict(row), seq=2)))
        assert (event.op, event.before, event.after) == (Operation.DELETE, row, None)
    elif op == "upd":
        event = one(dec.decode(msg("upd", dict(changed), dict(key), seq=2)))
        assert event.op is Operation.UPDATE
        assert event.before == full(key)
        assert event.after == full({**key, **changed})
    else:
        assert dec.decode(msg("UPDATE BEFORE", dict(row), seq=2)) == []
        event = one(dec.decode(msg("UPDATE AFTER", dict(changed), seq=3)))
        assert event.op is Operation.UPDATE
        assert event.before == row
        assert event.after == {**row, **changed}
    assert_connect_accepts(connect_checker, emit([event], EmitOptions()))
    for image in (event.before, event.after):
        if image is not None:
            assert set(image) == set(names)
            for n in names:
                present = n in row if op != "upd" else n in key or n in changed
                if image is event.before and op == "upd":
                    present = n in key
                assert (image[n] == UNAVAILABLE) == (not present)
