"""A bad value loses only its own row: a multi-row message emits the rows that decode.

``Decoder.decode_rows`` (and ``Pipeline.process_rows``, what the worker and ``cdcnorm
transform`` run) return the rows that decode and one DecodeError per bad row, its ``row`` the
row's index in the message; ``decode``/``process`` stay all or nothing. A message whose envelope
is bad fails whole either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from transforms.decoders import Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

DATA = Path(__file__).resolve().parents[1] / "data"
# Flink's canal-data.txt, first message: an INSERT of 9 rows (ids 101..109), id typed INTEGER
NINE_ROWS = (DATA / "canal-json" / "flink-canal-data.txt").read_bytes().splitlines()[0]


def nine_rows_one_bad(index: int = 7, value: Any = "A101") -> bytes:
    doc = orjson.loads(NINE_ROWS)
    assert len(doc["data"]) == 9 and doc["mysqlType"]["id"] == "INTEGER"
    doc["data"][index]["id"] = value
    return orjson.dumps(doc)


def test_canal_nine_rows_one_bad_value_gives_eight_records_and_one_row_error() -> None:
    value = nine_rows_one_bad()
    processed = Pipeline(create_decoder("canal-json"), EmitOptions()).process_rows(Message(value, topic="t"))
    assert len(processed.records) == 8
    assert [r.value["payload"]["after"]["id"] for r in processed.records] == [101, 102, 103, 104, 105, 106, 107, 109]
    (error,) = processed.row_errors
    assert isinstance(error, DecodeError)
    assert (error.row, error.field, error.format_id) == (7, "data[7].id", "canal-json")
    assert "A101" in error.reason


def test_decode_and_process_stay_all_or_nothing() -> None:
    message = Message(nine_rows_one_bad(), topic="t")
    decoder = create_decoder("canal-json")
    for strict in (decoder.decode, decoder.decode_safely, Pipeline(decoder, EmitOptions()).process):
        with pytest.raises(DecodeError) as info:
            strict(message)
        assert info.value.row == 7 and info.value.field == "data[7].id"


def test_every_bad_row_is_its_own_error_in_row_order() -> None:
    doc = orjson.loads(NINE_ROWS)
    doc["data"][2]["id"] = "x"
    doc["data"][5]["weight"] = "heavy"
    decoded = create_decoder("canal-json").decode_rows(Message(orjson.dumps(doc), topic="t"))
    assert len(decoded.events) == 7
    assert [(e.row, e.field) for e in decoded.row_errors] == [(2, "data[2].id"), (5, "data[5].weight")]


def test_update_rows_fail_alone_with_their_old_images() -> None:
    doc = orjson.loads(NINE_ROWS)
    doc["type"] = "UPDATE"
    doc["data"] = doc["data"][:3]
    doc["old"] = [{"weight": "1"}, {"weight": "two"}, {"weight": "3"}]
    decoded = create_decoder("canal-json").decode_rows(Message(orjson.dumps(doc), topic="t"))
    assert [e.after["id"] for e in decoded.events if isinstance(e, ChangeEvent) and e.after] == [101, 103]
    assert [(e.row, e.field) for e in decoded.row_errors] == [(1, "old[1].weight")]


@pytest.mark.parametrize(
    "value",
    [
        b'{"data": [{"id": "1"}], "type": "INSERT", "table": "t"',  # not parseable
        orjson.dumps({"data": [{"id": "1"}], "type": "MERGE", "table": "t"}),  # unknown operation
        orjson.dumps({"data": "rows", "type": "INSERT", "table": "t"}),  # data is not an array
    ],
)
def test_a_bad_envelope_fails_the_whole_message(value: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        Pipeline(create_decoder("canal-json"), EmitOptions()).process_rows(Message(value, topic="t"))
    assert info.value.row is None


def test_auto_passes_row_errors_through() -> None:
    decoded = create_decoder("auto").decode_rows(Message(nine_rows_one_bad(), topic="t"))
    assert len(decoded.events) == 8 and [e.row for e in decoded.row_errors] == [7]


def test_a_decoder_of_one_row_per_message_fails_whole() -> None:
    value = orjson.dumps({"database": "d", "table": "t", "type": "insert", "ts": 1, "data": {"id": 1}})
    assert len(create_decoder("maxwell-json").decode_rows(Message(value, topic="t")).events) == 1
    bad = orjson.dumps({"database": "d", "table": "t", "type": "insert", "ts": "x", "data": {"id": 1}})
    with pytest.raises(DecodeError):
        create_decoder("maxwell-json").decode_rows(Message(bad, topic="t"))


def test_arcion_csv_lines_fail_alone_and_a_missing_header_fails_the_message() -> None:
    options = {"table": "tpch.region", "key.columns": "r_regionkey", "column.types": "r_regionkey:int64"}
    lines = [
        b"r_regionkey,r_name,r_comment",
        b"0,AFRICA,first",
        b"one,AMERICA,second",  # not an int64
        b"2,ASIA",  # too few fields
        b"3,EUROPE,fourth",
    ]
    decoded = create_decoder("arcion-csv", options).decode_rows(Message(b"\n".join(lines), topic="t"))
    assert [e.after["r_regionkey"] for e in decoded.events if isinstance(e, ChangeEvent) and e.after] == [0, 3]
    assert [e.row for e in decoded.row_errors] == [2, 3]  # indexes among the message's lines, the header counted
    with pytest.raises(DecodeError) as info:  # no column names known: no row can decode
        create_decoder("arcion-csv", options).decode_rows(Message(b"\n".join(lines[1:]), topic="t"))
    assert info.value.field == "columns" and info.value.row is None
