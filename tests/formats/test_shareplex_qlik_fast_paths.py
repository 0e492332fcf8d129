"""The fast paths of shareplex-json and the Qlik decoders change speed, never results.

The caches keep what a decoder works out from a message's own content (a Qlik metadata message's
validated table, a SharePlex table's schema by its column names, parsed times and masks); what
other replicas change in the shared metadata store must still be seen at once. The Qlik Avro
decoder's fast value converters return what its full per-cell conversion returns.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.formats.test_qlik import (
    _ALL,
    _ORDER_1,
    FORMATS,
    ORDERS,
    ORDERS_V2,
    _cdc,
    _change,
    _decode,
    _decoder,
    json_message,
)
from tests.formats.test_shareplex_json import msg, one
from transforms.decoders import Message, create_decoder
from transforms.decoders.qlik import SCHEMA_NAMESPACE, VERSION_NAMESPACE, _typed_value_converter
from transforms.decoders.qlik_model import QlikColumn, connect_column
from transforms.envelope import SchemaChangeEvent
from transforms.errors import DecodeError
from transforms.metadata import InMemoryMetadataStore
from transforms.values import UNAVAILABLE

# ============================================================================ qlik


@pytest.mark.parametrize("fmt", FORMATS)
def test_qlik_repeated_metadata_message_still_reads_the_shared_store(fmt: str) -> None:
    store = InMemoryMetadataStore()
    decoder = _decoder(fmt, store)
    [created] = _decode(decoder, ORDERS)
    assert isinstance(created, SchemaChangeEvent) and created.change_type == "CREATE"
    assert _decode(decoder, ORDERS) == []  # the same message again: the store knows the version
    # the store forgets the table's version (another deployment, a reset): the same message,
    # whose validation this decoder has cached, is a new table again
    version_key = orjson.dumps([ORDERS.server, ORDERS.task, ORDERS.schema, ORDERS.table]).decode()
    store.put(VERSION_NAMESPACE, version_key, None)
    [again] = _decode(decoder, ORDERS)
    assert isinstance(again, SchemaChangeEvent) and again.change_type == "CREATE"
    assert again.new_table == created.new_table
    # another replica registers a newer version: this decoder's cached older message is no change
    _decode(_decoder(fmt, store), ORDERS_V2)
    assert _decode(decoder, ORDERS) == []
    assert store.get(VERSION_NAMESPACE, version_key) == {"tableVersion": 2, "schemaId": ORDERS_V2.schema_id}


@pytest.mark.parametrize("fmt", FORMATS)
def test_qlik_schema_id_registered_again_with_other_columns(fmt: str) -> None:
    """A schema id is not assumed immutable: data follows the document in the store."""
    store = InMemoryMetadataStore()
    decoder = _decoder(fmt, store)
    reused = replace(ORDERS_V2, schema_id=ORDERS.schema_id)
    _decode(decoder, ORDERS)
    first = _change(decoder, _cdc(ORDERS, "INSERT", 1, _ORDER_1, changed=_ALL))
    _decode(_decoder(fmt, store), reused)  # another replica overwrites the schema id
    row = {**_ORDER_1, "DISCOUNT": None}
    second = _change(decoder, _cdc(reused, "INSERT", 2, row, changed=reused.names, present=reused.names))
    assert "DISCOUNT" not in first.after and "DISCOUNT" in second.after  # type: ignore[operator]
    assert second.source.fields["changed_columns"] == ",".join(reused.names)
    assert first.source.fields["changed_columns"] == ",".join(ORDERS.names)
    _decode(decoder, ORDERS)  # this decoder's cached message puts the first document back
    third = _change(decoder, _cdc(ORDERS, "INSERT", 3, _ORDER_1, changed=_ALL))
    assert third.after == first.after and third.table is first.table


def test_qlik_bad_metadata_message_fails_every_time() -> None:
    store = InMemoryMetadataStore()
    decoder = _decoder(store=store)
    doc: dict[str, Any] = orjson.loads(json_message(ORDERS))
    doc["message"]["lineage"]["timestamp"] = "not a time"
    bad = Message(orjson.dumps(doc))
    errors = []
    for _ in range(2):
        with pytest.raises(DecodeError) as info:
            decoder.decode(bad)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "message.lineage.timestamp" in errors[0]
    assert store.get(SCHEMA_NAMESPACE, ORDERS.schema_id) is None


QLIK_COLUMNS = [
    connect_column(QlikColumn(f"c{i}", i + 1, kind, precision=p, scale=s))
    for i, (kind, p, s) in enumerate(
        [
            ("NUMERIC", 10, 2),
            ("NUMERIC", 0, 0),
            ("DATETIME", 0, 3),
            ("DATETIME", 0, 6),
            ("DATE", 0, 0),
            ("BYTES", 0, 0),
            ("BLOB", 0, 0),
            ("TIME", 0, 0),
            ("INT8", 0, 0),
            ("STRING", 0, 0),
        ]
    )
]
_zones = st.one_of(
    st.none(),
    st.just(dt.UTC),
    st.integers(-1439, 1439).map(lambda m: dt.timezone(dt.timedelta(minutes=m))),
)
typed_values = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True),
    st.decimals(places=0, min_value=Decimal("1e990"), max_value=Decimal("1e1010")),
    st.builds(lambda d, e: Decimal(d).scaleb(e), st.integers(-(10**20), 10**20), st.integers(-1010, 1010)),
    st.sampled_from(
        [Decimal("9" * 1000).scaleb(-900), Decimal("9" * 1001).scaleb(-900), Decimal("1" * 1001)]
    ),
    st.dates(),
    st.datetimes(timezones=_zones),
    st.times(),
    st.binary(max_size=8),
    st.sampled_from(["", "0aFF", "xyz", " 0a ", "2024-03-05", "2024-03-05T10:15:30.5", "1.5", "12"]),
    st.integers(-(2**64), 2**64),
    st.floats(),
    st.booleans(),
)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dt.datetime):
        return a == b and a.tzinfo == b.tzinfo
    return bool(a == b)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(QLIK_COLUMNS), typed_values)
def test_qlik_avro_fast_converters_return_what_the_full_conversion_does(col: Any, raw: Any) -> None:
    reader = _decoder("qlik-avro").reader
    fast = _typed_value_converter(col)
    if fast is None:
        return
    try:
        value = fast(raw)
    except Exception:  # handed to the full conversion, whatever that makes of it
        return
    assert _same(value, reader._value(col, raw, "f", None)), (col, raw, value)


# ============================================================================ shareplex


def test_shareplex_columns_tracked_by_another_replica_are_seen_at_once() -> None:
    store = InMemoryMetadataStore()
    first = create_decoder("shareplex-json", {"key.columns": "ID"}, store)
    other = create_decoder("shareplex-json", {"key.columns": "ID"}, store)
    insert = msg("ins", {"ID": "1", "A": "a"})
    assert one(first.decode(insert)).table.names == ("ID", "A")
    one(other.decode(msg("ins", {"ID": "2", "B": "b"})))
    update = one(first.decode(msg("upd", {"A": "x"}, {"ID": "1"})))
    assert update.table.names == ("ID", "A", "B")
    assert update.after == {"ID": "1", "A": "x", "B": UNAVAILABLE}
    # the same insert again: its schema now has the column the other replica added
    assert one(first.decode(insert)).table.names == ("ID", "A", "B")


def test_shareplex_times_and_operation_spellings() -> None:
    dec = create_decoder("shareplex-json", {}, InMemoryMetadataStore())
    for op in ("ins", "INS", "insert", "Insert", " insert "):
        event = one(dec.decode(msg(op, {"ID": "1"})))
        assert event.op.value == "c" and event.source.ts_ms == 1497623074000
    for op in ("update_before", "Update-Before", "UPDATE  BEFORE"):
        assert dec.decode(msg(op, {"ID": "1"}, rowid="r1")) == []
        assert one(dec.decode(msg("update after", {"ID": "2"}, rowid="r1"))).before == {"ID": "1"}
    for _ in range(2):  # a bad time is not remembered as a good one
        with pytest.raises(DecodeError, match=r"meta\.time"):
            dec.decode(msg("ins", {"ID": "1"}, time="2017-13-01T00:00:00"))
