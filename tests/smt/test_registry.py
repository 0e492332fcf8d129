"""build_chain: specs as data, errors naming the step, ordering, lazy registry."""

from __future__ import annotations

from typing import Any

import pytest

from tests.smt.samples import change
from transforms.envelope import Event, RowEvent
from transforms.errors import ConfigError
from transforms.smt import (
    PREDICATES,
    TRANSFORMS,
    ChainStep,
    SmtConfig,
    Transform,
    build_chain,
    config_docs,
    predicate_class,
    transform_class,
)


def test_every_registered_class_loads_and_is_named_as_registered() -> None:
    for name in TRANSFORMS:
        assert transform_class(name).name == name
    for name in PREDICATES:
        assert predicate_class(name).name == name


def test_config_docs_list_declared_keys() -> None:
    docs = {d.name: d for d in config_docs(transform_class("unwrap"))}
    assert docs["delete.tombstone.handling.mode"].default == "drop"
    assert docs["delete.tombstone.handling.mode"].type == "DeleteTombstoneHandling"
    assert docs["delete.handling.mode"].type == "DeleteHandlingMode | None"
    assert docs["delete.handling.mode"].description.startswith("Deprecated")
    assert docs["drop.tombstones"].default is None
    assert docs["add.fields"].description
    assert config_docs(transform_class("route"))[-1].name == "replacement"
    assert {d.name for d in config_docs(transform_class("route"))} >= {"regex", "topic.prefix"}


def test_empty_and_none() -> None:
    assert len(build_chain([])) == 0
    assert len(build_chain(None)) == 0


def test_builds_steps_in_order_with_predicates() -> None:
    chain = build_chain(
        [
            {"type": "mask", "fields": "email"},
            {"type": "filter", "predicate": {"type": "op-is", "ops": "d"}, "negate": False},
            {"type": "unwrap"},
        ]
    )
    assert [type(s.transform).__name__ for s in chain.steps] == [
        "MaskField",
        "Filter",
        "ExtractNewRecordState",
    ]
    assert isinstance(chain.steps[1], ChainStep) and chain.steps[1].predicate is not None
    out = chain.apply([change("c"), change("d")])
    assert len(out) == 1 and isinstance(out[0], RowEvent) and out[0].row is not None
    assert out[0].row["email"] == "****"
    chain.close()


def test_chain_stops_when_everything_is_dropped() -> None:
    class Spy(Transform):
        name = "spy"
        calls = 0

        def apply(self, event: Event) -> list[Event]:
            Spy.calls += 1
            return [event]

    chain = build_chain([{"type": "filter", "predicate": {"type": "op-is", "ops": "d"}}])
    chain.steps.append(ChainStep(Spy(SmtConfig())))
    assert len(chain.apply([change("d")])) == 0 and Spy.calls == 0
    assert len(chain.apply([change("c")])) == 1 and Spy.calls == 1


@pytest.mark.parametrize(
    ("specs", "key", "reason"),
    [
        ("route", "transforms", "expected a list"),
        ([["route"]], "transforms[0]", "mapping"),
        ([{}], "transforms[0].type", "unknown transform"),
        ([{"type": "nope"}], "transforms[0].type", "known: route"),
        (
            [{"type": "unwrap"}, {"type": "unwrap"}, {"type": "route", "regex": "(", "replacement": ""}],
            "transforms[2].regex",
            "",
        ),
        ([{"type": "unwrap", "negate": True}], "transforms[0].negate", "needs a predicate"),
        (
            [{"type": "unwrap", "negate": "yes", "predicate": {"type": "is-transaction"}}],
            "transforms[0].negate",
            "true or false",
        ),
        ([{"type": "unwrap", "predicate": "is-transaction"}], "transforms[0].predicate", "mapping"),
        (
            [{"type": "unwrap", "predicate": {"type": "nope"}}],
            "transforms[0].predicate.type",
            "unknown predicate",
        ),
        ([{"type": "unwrap", "bogus": 1}], "transforms[0].bogus", "delete.handling.mode"),
    ],
)
def test_spec_errors_name_the_step(specs: Any, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain(specs)
    assert info.value.key == key
    assert reason in info.value.reason


def test_error_value_is_the_offending_value() -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "unwrap", "delete.handling.mode": "explode"}])
    assert info.value.value == "explode"
    assert "transforms[0].delete.handling.mode='explode'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "unwrap", "bogus": 1}])
    assert info.value.value == 1
    assert "unknown key for transform 'unwrap'" in info.value.reason
