"""Decimals keep every digit: Connect Decimal bytes both ways (values.unscaled_bytes and
decimal_from_unscaled) at MySQL's DECIMAL(65,30) and beyond, without Python's 28-digit default
context rounding them, and without changing that context."""

from __future__ import annotations

import base64
import decimal
from decimal import Decimal

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from transforms.connect import Column, DecimalHandlingMode
from transforms.decoders import Message, create_decoder
from transforms.decoders.connect_json import decode_value
from transforms.envelope import EmitOptions
from transforms.pipeline import Pipeline
from transforms.values import decimal_from_unscaled, encoder_for, unscaled_bytes

WIDE = [
    ("123456789876543212345678987654321.110", 3),  # the MySQL DECIMAL(40,3) value
    ("-999999999999999999999999999999999999.999", 3),
    ("12345678901234567890123456789012345.123456789012345678901234567890", 30),  # DECIMAL(65,30)
    ("-99999999999999999999999999999999999.999999999999999999999999999999", 30),
    ("99999999999999999999999999999999999999999999999999999999999999999", 0),  # DECIMAL(65,0)
    ("0.000000000000000000000000000001", 30),
    ("9" * 900 + "." + "9" * 100, 100),  # PostgreSQL NUMERIC sizes
]


@pytest.mark.parametrize("text, scale", WIDE)
def test_unscaled_bytes_round_trip_exactly(text: str, scale: int) -> None:
    before = decimal.getcontext().prec
    value = Decimal(text)
    back = decimal_from_unscaled(unscaled_bytes(value, scale), scale)
    assert back == value and format(back, "f") == text
    assert decimal.getcontext().prec == before


@given(
    st.integers(min_value=-(10**70), max_value=10**70),
    st.integers(min_value=0, max_value=40),
)
def test_any_unscaled_integer_round_trips(unscaled: int, scale: int) -> None:
    value = Decimal(unscaled).scaleb(-scale, context=decimal.Context(prec=200))
    raw = unscaled_bytes(value, scale)
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    back = decimal_from_unscaled(raw, scale)
    assert back == value and back.as_tuple().exponent == -scale  # the scale's digits after the point


@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=None),
    st.integers(min_value=-5, max_value=40),
)
# more digits beyond the scale than a context sized to the scale holds: rounded once, not twice
@example(Decimal("10469.426967370504361"), 9)
@example(Decimal("-10469.426967370504361"), 9)
@example(Decimal("12350"), -2)
def test_unscaled_bytes_is_the_value_rounded_half_even_at_the_scale(value: Decimal, scale: int) -> None:
    # as quantizing in a context wide enough for every digit (a negative scale rounds to tens,
    # hundreds, ...)
    ctx = decimal.Context(prec=400, rounding=decimal.ROUND_HALF_EVEN, Emax=999_999, Emin=-999_999)
    expected = int(value.quantize(Decimal(1).scaleb(-scale), context=ctx).scaleb(scale, context=ctx))
    assert int.from_bytes(unscaled_bytes(value, scale), "big", signed=True) == expected


@pytest.mark.parametrize(
    "text, scale, rounded",
    [
        ("1.005", 2, "1.00"),
        ("1.015", 2, "1.02"),
        ("-2.5", 0, "-2"),
        ("123456789876543212345678987654321.1105", 3, "123456789876543212345678987654321.110"),
        ("123456789876543212345678987654321.1115", 3, "123456789876543212345678987654321.112"),
        ("1E+40", 0, "1" + "0" * 40),
    ],
)
def test_values_beyond_the_scale_round_half_even(text: str, scale: int, rounded: str) -> None:
    assert str(decimal_from_unscaled(unscaled_bytes(Decimal(text), scale), scale)) == rounded


@pytest.mark.parametrize("text, scale", WIDE[:5])
def test_the_emitted_decimal_decodes_exactly_as_connect_json(text: str, scale: int) -> None:
    col = Column.decimal("d", 65, scale)
    encode = encoder_for(col, DecimalHandlingMode.PRECISE)
    assert encode is not None
    emitted = encode(Decimal(text))
    assert decode_value(col, emitted) == Decimal(text)
    variable = encoder_for(Column.decimal("v", None, None), DecimalHandlingMode.PRECISE)
    assert variable is not None
    assert decode_value(Column.decimal("v", None, None), variable(Decimal(text))) == Decimal(text)


@pytest.mark.parametrize("mode", ["precise", "string"])
def test_canal_wide_decimal_survives_emit_and_json(mode: str) -> None:
    doc = {
        "database": "db",
        "table": "t",
        "type": "INSERT",
        "mysqlType": {"d40": "decimal(40,3)", "d65": "decimal(65,30)"},
        "pkNames": [],
        "data": [
            {
                "d40": "123456789876543212345678987654321.110",
                "d65": "12345678901234567890123456789012345.123456789012345678901234567890",
            }
        ],
    }
    decoder = create_decoder("canal-json", {"decimal.handling.mode": mode})
    pipeline = Pipeline(decoder, EmitOptions(decimal_mode=DecimalHandlingMode(mode)))
    (record,) = pipeline.process(Message(orjson.dumps(doc)))
    after = orjson.loads(record.value_bytes())["payload"]["after"]
    if mode == "string":
        assert after["d40"] == "123456789876543212345678987654321.110"
        assert after["d65"] == "12345678901234567890123456789012345.123456789012345678901234567890"
    else:
        assert (
            str(decimal_from_unscaled(base64.b64decode(after["d40"]), 3))
            == "123456789876543212345678987654321.110"
        )
        assert (
            str(decimal_from_unscaled(base64.b64decode(after["d65"]), 30))
            == "12345678901234567890123456789012345.123456789012345678901234567890"
        )


@pytest.mark.parametrize(
    "unscaled, hex_bytes",
    [
        (0, "00"),
        (-1, "ff"),
        (127, "7f"),
        (128, "0080"),
        (-128, "80"),
        (-129, "ff7f"),
        (-32768, "8000"),
        (-(2**63), "8000000000000000"),
        (2**64 - 1, "00ffffffffffffffff"),
    ],
)
def test_unscaled_bytes_are_minimal_as_java_writes_them(unscaled: int, hex_bytes: str) -> None:
    """BigInteger.toByteArray's form: JsonConverter writes a decimal back that way, so a longer
    sign extension (0xff80 for -128) would not survive a Connect round trip."""
    assert unscaled_bytes(Decimal(unscaled), 0).hex() == hex_bytes
    assert unscaled_bytes(Decimal(unscaled).scaleb(-2), 2).hex() == hex_bytes


@given(st.one_of(
    st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
    st.text(alphabet="AQIBz+/=-_ \n\u00e9", max_size=12),
))
def test_base64_text_reads_as_the_standard_library_reads_it_strictly(text: str) -> None:
    """b64decode and _b64 are binascii called directly (base64's own functions are Python
    frames, per value): the same bytes as base64.b64decode(validate=True), the same refusals."""
    from transforms.values import CoercionError, _b64, b64decode

    try:
        expected: bytes | None = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        expected = None
    if expected is None:
        with pytest.raises(CoercionError, match="expected base64"):
            b64decode(text)
    else:
        assert b64decode(text) == expected
        assert _b64(expected) == base64.b64encode(expected).decode("ascii")
