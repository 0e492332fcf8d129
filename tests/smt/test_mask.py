"""mask: type-preserving masks, hash mode, key-column safety, absent values untouched."""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal

import pytest

from tests.smt.samples import NON_DATA, ORDERS, apply_pure, change, make, only, row_event
from transforms.connect import Column, ConnectType, TableSchema
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain
from transforms.smt.mask import MaskField
from transforms.values import UNAVAILABLE

EVERYTHING = TableSchema(
    "d",
    None,
    "t",
    tuple(
        Column(n, ConnectType.STRING)
        for n in ("s", "i", "f", "dec", "b", "by", "ts", "tz", "day", "tm", "st", "arr", "nul", "gone")
    ),
    (),
)


def test_masks_both_images_with_defaults() -> None:
    out = only(apply_pure(make("mask", fields="email,amount"), change()))
    for image in (out.before, out.after):
        assert image["email"] == "****"
        assert image["amount"] == Decimal(0)
        assert image["id"] == 1
    assert out.table is ORDERS


def test_mask_values_by_type() -> None:
    values = {
        "s": "secret",
        "i": 42,
        "f": 1.5,
        "dec": Decimal("3.14"),
        "b": True,
        "by": b"\x01",
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5),
        "tz": dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "day": dt.date(2024, 1, 2),
        "tm": dt.timedelta(hours=5),
        "st": {"a": 1},
        "arr": [1, 2],
        "nul": None,
        "gone": UNAVAILABLE,
    }
    mask = make("mask", fields=list(values), replacement="X")
    out = only(apply_pure(mask, change("c", after=values, table=EVERYTHING))).after
    assert out == {
        "s": "X",
        "i": 0,
        "f": 0.0,
        "dec": Decimal(0),
        "b": False,
        "by": b"",
        "ts": dt.datetime(1970, 1, 1),
        "tz": dt.datetime(1970, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "day": dt.date(1970, 1, 1),
        "tm": dt.timedelta(0),
        "st": {},
        "arr": [],
        "nul": None,
        "gone": UNAVAILABLE,
    }
    assert type(out["b"]) is bool and type(out["i"]) is int
    assert out["tz"] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def test_unavailable_and_null_stay_as_they_are() -> None:
    event = change(after={"id": 1, "email": UNAVAILABLE, "amount": None, "note": "n"})
    out = only(apply_pure(make("mask", fields="email,amount"), event))
    assert out.after == {"id": 1, "email": UNAVAILABLE, "amount": None, "note": "n"}


def test_hash_mode_is_stable_and_salted() -> None:
    mask = make("mask", fields="email", mode="hash", hash__salt="pepper")
    out = only(apply_pure(mask, change()))
    expected = hashlib.sha256(b"pepper" + b"a@example.com").hexdigest()
    assert out.after["email"] == out.before["email"] == expected
    assert make("mask", fields="by", mode="hash").apply(change("c", after={"by": b"x"}, table=EVERYTHING))[
        0
    ].after == {"by": hashlib.sha256(b"x").digest()}  # type: ignore[union-attr]


def test_key_columns_only_hashable_with_hash_mode() -> None:
    keyed = TableSchema("d", None, "users", (Column("email", ConnectType.STRING, False),), ("email",))
    event = change("c", after={"email": "a@b"}, table=keyed)
    with pytest.raises(TransformError, match="same key"):
        make("mask", fields="email").apply(event)
    out = only(make("mask", fields="email", mode="hash").apply(event))
    assert out.after["email"] == hashlib.sha256(b"a@b").hexdigest()
    with pytest.raises(TransformError, match="same key"):
        make("mask", fields="id", mode="hash").apply(change())  # int key would collapse to 0


def test_columns_not_in_the_row_are_ignored_and_event_kept() -> None:
    event = change()
    assert apply_pure(make("mask", fields="ssn"), event)[0] is event


def test_row_events_and_other_events() -> None:
    mask = make("mask", fields="email")
    out = only(apply_pure(mask, row_event()))
    assert out.row["email"] == "****"
    for build in NON_DATA:
        event = build()
        assert apply_pure(mask, event)[0] is event


def test_unmaskable_type_is_a_transform_error() -> None:
    mask = make("mask", fields="s")
    assert isinstance(mask, MaskField)
    with pytest.raises(TransformError, match="cannot mask"):
        mask.mask(object())


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({}, "transforms[0].fields"),
        ({"fields": ""}, "transforms[0].fields"),
        ({"fields": "a", "mode": "sha1"}, "transforms[0].mode"),
        ({"fields": "a", "replacement": 5}, "transforms[0].replacement"),
        ({"fields": "a", "numeric.replacement": "maybe"}, "transforms[0].numeric.replacement"),
    ],
)
def test_config_errors(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "mask", **config}])
    assert info.value.key == key


TYPED = TableSchema(
    "d",
    None,
    "t",
    (
        Column("id", ConnectType.INT64, False),
        Column("s", ConnectType.STRING),
        Column("i8", ConnectType.INT8),
        Column("i", ConnectType.INT32),
        Column("f", ConnectType.FLOAT64),
        Column.decimal("dec", 10, 2),
        Column("b", ConnectType.BOOLEAN),
    ),
    ("id",),
)
TYPED_ROW = {"id": 1, "s": "x", "i8": 3, "i": 4, "f": 1.5, "dec": Decimal("3.14"), "b": True}
MASKED = "s,i8,i,f,dec,b"


def test_connect_class_name_masks_with_connect_defaults() -> None:
    """Connect's MaskField without a replacement: the type's empty value, "" for strings."""
    mask = build_chain([{"type": "org.apache.kafka.connect.transforms.MaskField$Value", "fields": MASKED}])
    out = only(mask.apply([change("c", after=TYPED_ROW, table=TYPED)])).after
    assert out == {"id": 1, "s": "", "i8": 0, "i": 0, "f": 0.0, "dec": Decimal(0), "b": False}


def test_numeric_replacement_converts_to_each_type() -> None:
    mask = make("mask", fields=MASKED, replacement="12", numeric__replacement=True)
    out = only(apply_pure(mask, change("c", after=TYPED_ROW, table=TYPED))).after
    assert out == {"id": 1, "s": "12", "i8": 12, "i": 12, "f": 12.0, "dec": Decimal(12), "b": False}
    assert type(out["i"]) is int and type(out["f"]) is float
    floats = make("mask", fields="f,dec", replacement="2.5", numeric__replacement=True)
    assert only(floats.apply(change("c", after=TYPED_ROW, table=TYPED))).after["dec"] == Decimal("2.5")
    # without numeric.replacement (our mask), numbers are 0 whatever the replacement
    assert (
        only(
            make("mask", fields="i", replacement="12").apply(change("c", after=TYPED_ROW, table=TYPED))
        ).after["i"]
        == 0
    )


@pytest.mark.parametrize(
    ("replacement", "fields", "reason"),
    [
        ("****", "i", "is not an int32 number"),
        ("****", "f", "is not a number"),
        ("****", "dec", "is not a number"),
        ("2.5", "i", "is not an int32 number"),
        ("300", "i8", "is not an int8 number"),
        ("NaN", "f", "is not a number"),
    ],
)
def test_numeric_replacement_must_suit_each_numeric_column(
    replacement: str, fields: str, reason: str
) -> None:
    mask = make("mask", fields=fields, replacement=replacement, numeric__replacement=True)
    with pytest.raises(TransformError, match=reason):
        mask.apply(change("c", after=TYPED_ROW, table=TYPED))
    # a string column takes any replacement
    assert (
        only(
            make("mask", fields="s", replacement=replacement, numeric__replacement=True).apply(
                change("c", after=TYPED_ROW, table=TYPED)
            )
        ).after["s"]
        == replacement
    )
