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
    ],
)
def test_config_errors(config: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "mask", **config}])
    assert info.value.key == key
