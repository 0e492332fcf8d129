"""Images decoded straight to Connect JSON (``ChangeEvent.encoded``) give the records the typed path gives.

Where a pipeline sends a decoder's events straight to the emitter (no chain, no key overrides,
see ``Pipeline.process_rows``), the Debezium JSON decoder hands over images already in Connect
JSON form: a Debezium decimal's base64 or epoch milliseconds that are already what the emitter
would write are checked and kept, instead of being typed and encoded back. That is a speed path
only: these tests hold it to the typed path, cell by cell (every value the direct converters take
encodes back to itself; a cell they do not take is typed with the same errors) and record by
record (the same bytes, headers and errors for the golden messages and thousands of mutants).
"""

from __future__ import annotations

import base64
import math
from random import Random
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import mutate
from tests.fuzz.seeds import format_seeds
from transforms.connect import Column, ConnectType, DecimalHandlingMode, Logical
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_values import RowLayout
from transforms.decoders.rowplan import decimal_converter, fast_converter, text_direct
from transforms.envelope import EmitOptions
from transforms.envelope_codec import _row_parts, encode_cells
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline
from transforms.smt.registry import build_chain
from transforms.values import encoder_for

DIRECT_FORMATS = ("debezium-json", "canal-json")
"""The decoders that hand over encoded images (the others always type them)."""

COLUMNS = [
    Column.decimal("d0", 10, 0),
    Column.decimal("d2", 10, 2),
    Column.decimal("d30", 65, 30),
    Column("ts", ConnectType.INT64, logical=Logical.TIMESTAMP),
    Column("cts", ConnectType.INT64, logical=Logical.CONNECT_TIMESTAMP),
    Column("mts", ConnectType.INT64, logical=Logical.MICRO_TIMESTAMP),
    Column("nts", ConnectType.INT64, logical=Logical.NANO_TIMESTAMP),
    Column("date", ConnectType.INT32, logical=Logical.DATE),
    Column("cdate", ConnectType.INT32, logical=Logical.CONNECT_DATE),
    Column("bytes", ConnectType.BYTES),
    Column("i64", ConnectType.INT64),
    Column("s", ConnectType.STRING),
    Column("f64", ConnectType.FLOAT64),
]

_EDGES = [
    -62_135_596_800_000, -62_135_596_800_001, 253_402_300_799_999, 253_402_300_800_000,  # ms of year 1 / 10000
    -62_135_596_800_000_000, 253_402_300_800_000_000 - 1, 253_402_300_800_000_000,  # us
    -719_162, -719_163, 2_932_896, 2_932_897,  # days of 0001-01-01 / 9999-12-31
    1_700_000_000_123_456_789, 1_700_000_000_123_456_000, -1, 0, 2**63, -(2**63) - 1,
]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


raw_values = st.one_of(
    st.sampled_from(_EDGES),
    st.integers(-(2**80), 2**80),
    st.integers(-(10**12), 10**12),
    st.binary(max_size=6).map(_b64),  # includes non-minimal two's complement (0x00 0x01, 0xff 0xff)
    st.binary(min_size=399, max_size=402).map(_b64),  # around the bound of the fast decoder
    st.sampled_from(["AGU=", "AGV=", "AA==", "AAA=", "/w==", "//8=", "AQ", "AQ==\n", " AQ==", "", "=", "_Q==",
                     "1.5", "12", "2020-01-02", "2020-01-02T03:04:05Z", "__debezium_unavailable_value"]),
    st.text(max_size=6),
    st.floats(),
    st.booleans(),
    st.decimals(allow_nan=False, places=3),
)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize("mode", list(DecimalHandlingMode), ids=str)
@pytest.mark.parametrize("col", COLUMNS, ids=lambda c: c.name)
@settings(max_examples=300, deadline=None)
@given(raw=raw_values)
@example(raw="AGU=")  # 0x00 0x65: a redundant sign byte
@example(raw="AACA")  # 0x00 0x00 0x80: not the fewest bytes
@example(raw="AGV=")  # not canonical base64 (pad bits set)
@example(raw=1_700_000_000_123)
@example(raw=1_700_000_000_123_456_789)  # nanoseconds beyond a datetime's microseconds
@example(raw=2_932_897)
def test_a_cell_in_connect_json_is_what_the_emitter_makes_of_its_typed_value(
    col: Column, mode: DecimalHandlingMode, raw: Any
) -> None:
    layout = RowLayout((col,))
    row = {col.name: raw}
    try:
        typed: Any = layout.decode(row, "after")
    except Exception as exc:  # a FieldError (the decoder names the field)
        with pytest.raises(type(exc)) as direct_error:
            layout.connect_json(row, "after", mode)
        assert str(direct_error.value) == str(exc)
        return
    encoders = _row_parts((col,), mode)[0]
    try:
        expected: Any = encode_cells(encoders, typed)
    except Exception:  # the emitter fails on it (from the typed row): the direct path hands over
        expected = None
    got = layout.connect_json(row, "after", mode)
    assert _same(got, expected), (raw, got, expected)


def test_an_absent_cell_is_unavailable_either_way() -> None:
    layout = RowLayout(tuple(COLUMNS))
    row = {"d2": "AIA="}  # 1.28: 0x00 0x80, the fewest bytes
    got = layout.connect_json(row, "after", DecimalHandlingMode.PRECISE)
    assert got is not None and got["d2"] == "AIA="
    assert got == encode_cells(_row_parts(tuple(COLUMNS), DecimalHandlingMode.PRECISE)[0], layout.decode(row, "after"))
    assert got["s"] == got["ts"] == got["bytes"] == "__debezium_unavailable_value"


decimal_texts = st.one_of(
    st.from_regex(r"\A-?[0-9]{0,22}(\.[0-9]{0,12})?\Z"),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["-0", "-0.00", "0.", ".5", "1e3", " 1.5", "1_000", "+1", "١٢", "-", "", "9" * 41, "1." + "0" * 39]),
    st.integers(-(10**30), 10**30),
    st.text(max_size=6),
)


@pytest.mark.parametrize("scale", [0, 1, 2, 6, 30, 70])
@settings(max_examples=400, deadline=None)
@given(raw=decimal_texts)
@example(raw="-0.5")
@example(raw="12.345")  # more digits than the scale of 2: rounded by the encoder, not taken
def test_a_plain_decimal_text_is_the_base64_the_emitter_writes(scale: int, raw: Any) -> None:
    """text_direct against the fast converter of text decoders and the emitter's encoder."""
    col = Column.decimal("d", 80, scale)
    _agrees_with_the_typed_path(col, raw)
    assert fast_converter(col) is decimal_converter
    assert text_direct(col, DecimalHandlingMode.STRING) is None


def _agrees_with_the_typed_path(col: Column, raw: Any) -> None:
    """Where the text decoders' direct converter takes ``raw``, it gives what the emitter's
    encoder makes of the fast converter's value (which must then take it too)."""
    direct = text_direct(col, DecimalHandlingMode.PRECISE)
    assert direct is not None
    try:
        got = direct(raw)
    except Exception:  # not taken: the typed path decides
        return
    encoder = encoder_for(col, DecimalHandlingMode.PRECISE)
    fast = fast_converter(col)
    assert encoder is not None and fast is not None
    assert got == encoder(fast(raw)), raw


datetime_texts = st.one_of(
    st.datetimes().map(lambda d: d.isoformat(sep=" ")),
    st.datetimes().map(lambda d: d.isoformat(sep="T", timespec="milliseconds")),
    st.datetimes().map(lambda d: d.date().isoformat()),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}([ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,8})?)?\Z"),
    st.sampled_from(["0000-00-00 00:00:00", "0000-00-00", "2024-02-30", "2024-01-02 24:00:00", "2024-01-02 03:04:05.",
                     " 2024-01-02", "2024-01-02 ", "2024-01-02T03:04:05Z", "2024-01-02 03:04:05+01:00", "2024-1-2",
                     "2024-01-02 03:04:05.1234567", "+024-01-02", "2024-01-02 03:04", "٢٠٢٤-01-02"]),
    st.text(max_size=12),
)


@pytest.mark.parametrize("col", [c for c in COLUMNS if c.name in ("ts", "cts", "mts", "nts", "date", "cdate")],
                         ids=lambda c: c.name)
@settings(max_examples=400, deadline=None)
@given(raw=datetime_texts)
@example(raw="2024-01-02 03:04:05.123")
@example(raw="1969-12-31 23:59:59.999999")
def test_a_plain_datetime_text_is_the_epoch_value_the_emitter_writes(col: Column, raw: Any) -> None:
    """text_direct against the fast converter of text decoders (parse_datetime) and the encoder."""
    _agrees_with_the_typed_path(col, raw)


# ----------------------------------------------------------------------------- records


def _records(records: list[Any]) -> list[Any]:
    return [(r.topic, r.key_bytes(), r.value_bytes(), r.headers) for r in records]


def _outcome(pipeline: Pipeline, message: Message) -> Any:
    """What process_rows and process make of the message (records, or the error)."""
    try:
        processed = pipeline.process_rows(message)
    except Exception as exc:  # compared between the two paths
        return ("error", type(exc).__name__, str(exc))
    try:
        whole: Any = _records(pipeline.process(message))
    except Exception as exc:  # all or nothing: a bad row fails the message
        whole = ("error", type(exc).__name__, str(exc))
    return _records(processed.records), [(type(e).__name__, str(e), e.row) for e in processed.row_errors], whole


def _pipelines(seed: Any, mode_option: str | None = None) -> tuple[Pipeline, Pipeline]:
    out = []
    for direct in (True, False):
        decoder = seed.decoder()
        pipeline = Pipeline(decoder, EmitOptions(prefix="cdcnorm", decimal_mode=decoder.options.decimal_handling_mode))
        pipeline.direct_emit = direct
        out.append(pipeline)
    return out[0], out[1]


@pytest.mark.parametrize("format_id", DIRECT_FORMATS)
def test_golden_messages_give_the_same_records_both_ways(format_id: str) -> None:
    seeds = format_seeds(format_id)
    assert len(seeds) > 50
    encoded = 0
    for seed in seeds:
        direct, typed = _pipelines(seed)
        got, expected = _outcome(direct, seed.message), _outcome(typed, seed.message)
        assert got == expected, seed.label
        if not isinstance(got[0], str):
            encoded += 1
    assert encoded > 40


class _Observed(Pipeline):
    """A pipeline that keeps the events its decoder gave (its hook only looks at them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[Any] = []

    def before_chain(self, events: list[Any]) -> list[Any]:
        self.seen.extend(events)
        return events


def _decoded_events(seed: Any, direct_emit: bool, chain: bool = False) -> list[Any] | None:
    """The events the seed's decoder gave a pipeline (``None``: the message failed)."""
    decoder = seed.decoder()
    steps = build_chain([{"type": "filter", "ops": ["t"], "filter.type": "exclude"}]) if chain else None  # keeps rows
    pipeline = _Observed(decoder, EmitOptions(decimal_mode=decoder.options.decimal_handling_mode), steps)
    pipeline.direct_emit = direct_emit
    try:
        pipeline.process_rows(seed.message)
    except DecodeError:
        return None
    finally:
        assert decoder.emit_direct is None  # set for the one call only
    return pipeline.seen


@pytest.mark.parametrize("format_id", DIRECT_FORMATS)
def test_the_direct_path_is_taken_only_with_nothing_between_decoder_and_emitter(format_id: str) -> None:
    taken = 0
    for seed in format_seeds(format_id):
        if not any(word in (seed.message.value or b"") for word in (b"connect.data.Decimal", b"decimal(")):
            continue
        direct = _decoded_events(seed, True)
        if not direct:
            continue
        taken += 1
        assert all(getattr(e, "encoded", "n/a") in (DecimalHandlingMode.PRECISE, "n/a") for e in direct), seed.label
        assert all(getattr(e, "encoded", None) is None for e in _decoded_events(seed, False) or ()), seed.label
        assert all(getattr(e, "encoded", None) is None for e in _decoded_events(seed, True, chain=True) or ())
    assert taken >= 3


@pytest.mark.parametrize("batch", range(8))
@pytest.mark.parametrize("format_id", DIRECT_FORMATS)
def test_mutated_messages_give_the_same_records_both_ways(format_id: str, batch: int) -> None:
    """Mutants of the golden messages (as the fuzz test makes them): the same records, the same errors."""
    seeds = format_seeds(format_id)
    rng = Random(1000 + batch)
    for _ in range(400):
        seed, other = rng.choice(seeds), rng.choice(seeds)
        message, what = mutate(rng, seed, other)
        direct, typed = _pipelines(seed)
        assert _outcome(direct, message) == _outcome(typed, message), f"{seed.label}: {what}"


@pytest.mark.parametrize("mode", ["precise", "string", "double"])
@pytest.mark.parametrize(("old_key", "new_key"), [("1.0", "1.00"), ("1.001", "1.002"), ("1.00", "1.00"), ("1", "2")])
def test_an_update_of_the_key_is_split_as_the_typed_path_splits_it(mode: str, old_key: str, new_key: str) -> None:
    """The emitter tells a key change by comparing key values: typed decimals 1.0 and 1.00 are
    equal, their strings in string mode are not; so an update whose key cells differ as they came
    is typed (same_key_cells), and both paths split (or not) alike."""
    message = {
        "data": [{"k": new_key, "v": "x"}], "old": [{"k": old_key}], "database": "db", "table": "t",
        "pkNames": ["k"], "isDdl": False, "type": "UPDATE", "es": 1, "ts": 2,
        "mysqlType": {"k": "decimal(10,2)", "v": "varchar(8)"}, "sqlType": {"k": 3, "v": 12},
    }
    outcomes = []
    for direct in (True, False):
        decoder = create_decoder("canal-json", {"decimal.handling.mode": mode})
        pipeline = Pipeline(decoder, EmitOptions(decimal_mode=decoder.options.decimal_handling_mode))
        pipeline.direct_emit = direct
        outcomes.append(_outcome(pipeline, Message(value=orjson.dumps(message), topic="t")))
    assert outcomes[0] == outcomes[1]
    records = outcomes[0][0]
    assert len(records) in (1, 3)  # an update, or a key change's delete, tombstone and create
