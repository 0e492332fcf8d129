"""The emitter's shortcuts give the bytes the plain path gives, and never change the events.

* ``encode_row`` skips cells whose encoder would return them unchanged (``encoder_passes``)
  and copies a row only when a cell changes;
* the rows of one message share one source block.
"""

from __future__ import annotations

import copy
import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from transforms.connect import Column, ConnectType, Logical, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit
from transforms.options import DecimalHandlingMode
from transforms.values import encoder_for, encoder_passes

COLUMNS = (
    Column("id", ConnectType.INT64, False),
    Column("name", ConnectType.STRING),
    Column("blob", ConnectType.BYTES),
    Column("at", ConnectType.STRING, logical=Logical.ZONED_TIMESTAMP),
    Column.decimal("amount", 10, 2),
    Column("day", ConnectType.INT32, logical=Logical.DATE),
)
TABLE = TableSchema("shop", None, "orders", COLUMNS, ("id",))
OPTS = EmitOptions(prefix="p")


@given(st.text())
def test_an_encoder_returns_the_values_of_its_passes_type_unchanged(text: str) -> None:
    for col in COLUMNS:
        for mode in DecimalHandlingMode:
            enc = encoder_for(col, mode)
            if enc is not None and encoder_passes(enc) is str:
                assert enc(text) is text


def test_encoders_that_change_strings_do_not_claim_to_pass_them() -> None:
    decimal = encoder_for(Column.decimal("amount", 10, 2), DecimalHandlingMode.PRECISE)
    date = encoder_for(Column("day", ConnectType.INT32, logical=Logical.DATE), DecimalHandlingMode.PRECISE)
    assert decimal is not None and date is not None
    assert encoder_passes(decimal) is type(None)
    assert encoder_passes(date) is type(None)


def _row(i: int, **changes: Any) -> dict[str, Any]:
    row = {"id": i, "name": f"n{i}", "blob": "AAE=", "at": "2024-01-02T03:04:05Z", "amount": None, "day": None}
    row.update(changes)
    return row


def _plain(records: list[Any]) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key_bytes(), r.value_bytes()) for r in records]


def test_rows_are_not_modified_and_bytes_match_a_fresh_serialization() -> None:
    source = SourceInfo("canal-json", ts_ms=1, fields={"file": "b.1", "pos": 4})
    rows = [
        _row(1),  # nothing to encode: no copy needed
        _row(2, blob=b"\x00\x01", at=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)),
        _row(3, amount=Decimal("12.30"), day=dt.date(2024, 1, 2), name=None),
    ]
    events = [ChangeEvent(Operation.CREATE, TABLE, None, row, source) for row in rows]
    before = copy.deepcopy(rows)
    records = emit(events, OPTS)
    assert rows == before  # the events' images are untouched
    values = [orjson.loads(v) for _, v in _plain(records)]
    assert [v["payload"]["after"]["blob"] for v in values] == ["AAE=", "AAE=", "AAE="]
    assert values[1]["payload"]["after"]["at"] == "2024-01-02T03:04:05Z"
    assert values[2]["payload"]["after"]["amount"] == "BM4="  # 1230 as unscaled bytes
    assert values[2]["payload"]["after"]["day"] == 19724
    # the bytes are those of the record documents serialized from scratch
    for record, (key, value) in zip(records, _plain(records), strict=True):
        assert value == orjson.dumps(record.value)
        assert key == orjson.dumps(record.key)


def test_the_rows_of_one_message_share_a_source_block_and_others_get_their_own() -> None:
    first = SourceInfo("canal-json", ts_ms=1, fields={"pos": 4})
    second = SourceInfo("canal-json", ts_ms=2, fields={"pos": 5, "gtid": "g:1"})
    events = [
        ChangeEvent(Operation.CREATE, TABLE, None, _row(1), first),
        ChangeEvent(Operation.CREATE, TABLE, None, _row(2), first),
        ChangeEvent(Operation.CREATE, TABLE, None, _row(3), second),
    ]
    records = emit(events, OPTS)
    sources = [r.value["payload"]["source"] for r in records if r.value is not None]
    assert sources[0] is sources[1]
    assert sources[2]["ts_ms"] == 2 and sources[2]["pos"] == 5 and sources[2]["gtid"] == "g:1"
    assert "gtid" not in sources[0]
    schemas = [r.value["schema"] for r in records if r.value is not None]
    source_fields = [f["field"] for f in schemas[2]["fields"][2]["fields"]]
    assert "gtid" in source_fields
    assert "gtid" not in [f["field"] for f in schemas[0]["fields"][2]["fields"]]
    # emitting the same events again gives the same bytes (nothing cached goes stale)
    assert _plain(emit(events, OPTS)) == _plain(records)
