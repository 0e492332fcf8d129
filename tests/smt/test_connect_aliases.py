"""Kafka Connect and Debezium spellings: class names and option names give the same chain.

Each alias names the same class as its short name and, given the same options in its own
spelling, builds the same config and the same output; where the Connect/Debezium class has
other defaults, the alias has them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.smt.samples import NON_DATA, ORDERS, apply_pure, change, row, row_event
from transforms.envelope import EmitOptions, Event, Operation, RowEvent, emit
from transforms.errors import ConfigError
from transforms.smt import (
    PREDICATE_ALIASES,
    TRANSFORM_ALIASES,
    build_chain,
    catalog,
    config_docs,
    create_predicate,
    create_transform,
    predicate_class,
    transform_class,
)

CONNECT = "org.apache.kafka.connect.transforms."
DEBEZIUM_UNWRAP = "io.debezium.transforms.ExtractNewRecordState"

SAMPLES: tuple[Event, ...] = (
    change("c"),
    change("u"),
    change("d"),
    change("r", topic="cdcnorm.shop.orders"),
    change("u", before=row(1), after=row(2)),
    row_event("c"),
    *(build() for build in NON_DATA),
)


def _records(transform: Any, events: tuple[Event, ...] = SAMPLES) -> list[tuple[Any, ...]]:
    out: list[Event] = []
    for event in events:
        out.extend(apply_pure(transform, event))
    return [(r.topic, r.key, r.value, r.headers) for r in emit(out, EmitOptions())]


# (alias, short name, the same options in the alias's spelling, in ours)
SAME_OPTIONS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    (
        CONNECT + "RegexRouter",
        "route",
        {"regex": r"cdcnorm\.(.*)", "replacement": "lake.$1"},
        {"regex": r"cdcnorm\.(.*)", "replacement": "lake.$1"},
    ),
    (CONNECT + "Filter", "filter", {}, {}),
    (
        CONNECT + "ReplaceField$Value",
        "replace-field",
        {"exclude": "note", "renames": "email:mail"},
        {"exclude": "note", "renames": "email:mail"},
    ),
    (CONNECT + "ReplaceField$Value", "replace-field", {"include": "id,email"}, {"include": "id,email"}),
    (
        CONNECT + "InsertField$Value",
        "insert-field",
        {"static.field": "region!", "static.value": "eu", "topic.field": "topic"},
        {"static.field": "region!", "static.value": "eu", "topic.field": "topic"},
    ),
    (
        CONNECT + "MaskField$Value",
        "mask",
        {"fields": "email,amount", "replacement": "7"},
        {"fields": "email,amount", "replacement": "7", "numeric.replacement": True},
    ),
    (
        CONNECT + "MaskField$Value",
        "mask",
        {"fields": "email"},
        {"fields": "email", "replacement": "", "numeric.replacement": True},
    ),
    *[
        (
            DEBEZIUM_UNWRAP,
            "unwrap",
            {
                "delete.tombstone.handling.mode": mode,
                "add.fields": "op,table,source.ts_ms",
                "add.headers": "op",
            },
            {
                "delete.tombstone.handling.mode": mode,
                "add.fields": "op,table,source.ts_ms",
                "add.headers": "op",
            },
        )
        for mode in ("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")
    ],
    (DEBEZIUM_UNWRAP, "unwrap", {}, {"delete.tombstone.handling.mode": "tombstone"}),
]


@pytest.mark.parametrize(("alias", "name", "theirs", "ours"), SAME_OPTIONS)
def test_alias_builds_the_same_transform(
    alias: str, name: str, theirs: dict[str, Any], ours: dict[str, Any]
) -> None:
    connect, short = create_transform(alias, theirs), create_transform(name, ours)
    assert type(connect) is type(short) is transform_class(name) is transform_class(alias)
    assert connect.config == short.config
    assert _records(connect) == _records(short)


def test_every_alias_is_tested() -> None:
    assert {alias for alias, *_ in SAME_OPTIONS} == set(TRANSFORM_ALIASES)


def test_alias_steps_in_a_chain() -> None:
    specs = [
        {"type": DEBEZIUM_UNWRAP, "delete.tombstone.handling.mode": "rewrite"},
        {"type": CONNECT + "Filter", "predicate": {"type": CONNECT + "predicates.RecordIsTombstone"}},
        {
            "type": CONNECT + "RegexRouter",
            "regex": r"cdcnorm\.(.*)",
            "replacement": "lake.$1",
            "predicate": {"type": CONNECT + "predicates.TopicNameMatches", "pattern": r"cdcnorm\.shop\..*"},
        },
    ]
    chain = build_chain(specs, emit_options=EmitOptions())
    out = chain.apply([change("c"), change("d")])
    assert [(e.topic, e.op, e.deleted) for e in out if isinstance(e, RowEvent)] == [
        ("lake.shop.orders", Operation.CREATE, False),
        ("lake.shop.orders", Operation.DELETE, True),
    ]


# ------------------------------------------------------------------------------ predicates


def test_topic_name_matches_takes_pattern_or_regex() -> None:
    alias = CONNECT + "predicates.TopicNameMatches"
    configs = [
        create_predicate(alias, {"pattern": r"cdcnorm\.shop\..*"}).config,
        create_predicate(alias, {"regex": r"cdcnorm\.shop\..*"}).config,
        create_predicate("topic-matches", {"pattern": r"cdcnorm\.shop\..*"}).config,
        create_predicate("topic-matches", {"regex": r"cdcnorm\.shop\..*"}).config,
    ]
    assert all(c == configs[0] for c in configs)
    assert type(create_predicate(alias, {"pattern": "x"})) is predicate_class("topic-matches")
    assert create_predicate(alias, {"pattern": r"cdcnorm\.shop\..*"}).test(change())


@pytest.mark.parametrize(
    ("config", "key", "reason"),
    [
        (
            {"pattern": "a", "regex": "b"},
            "predicate.pattern",
            "another spelling of 'regex', which is also set",
        ),
        ({"pattern": "("}, "predicate.pattern", "invalid regular expression"),
        ({"pattern": ""}, "predicate.pattern", "at least 1 character"),
        ({}, "predicate.regex", "required"),
    ],
)
def test_topic_name_matches_errors_name_the_key_typed(config: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_predicate(CONNECT + "predicates.TopicNameMatches", config)
    assert info.value.key == key and reason in info.value.reason
    if "pattern" in config and key.endswith("pattern"):
        assert info.value.value == config["pattern"]


def test_record_is_tombstone_matches_null_rows_only() -> None:
    alias = create_predicate(CONNECT + "predicates.RecordIsTombstone")
    assert type(alias) is predicate_class("is-tombstone")
    null_row = RowEvent(ORDERS, None, row(), True, Operation.DELETE)
    assert alias.test(null_row)
    for event in (change("d"), row_event("d"), *SAMPLES):
        assert not alias.test(event)


def test_has_header_key_by_class_name() -> None:
    alias = create_predicate(CONNECT + "predicates.HasHeaderKey", {"name": "h"})
    assert alias.config == create_predicate("has-header-key", {"name": "h"}).config
    assert alias.test(change(headers=(("h", b"1"),))) and not alias.test(change())


def test_every_predicate_alias_names_a_predicate() -> None:
    for alias, target in PREDICATE_ALIASES.items():
        assert predicate_class(alias) is predicate_class(target.target)


# ------------------------------------------------------------------------------ errors, deprecation


@pytest.mark.parametrize("variant", ["ReplaceField$Key", "MaskField$Key", "InsertField$Key"])
def test_key_variants_are_refused_with_the_reason(variant: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": CONNECT + variant, "fields": "x"}])
    assert info.value.key == "transforms[0].type"
    assert (
        "record values only" in info.value.reason and variant.replace("$Key", "$Value") in info.value.reason
    )


def test_unknown_class_name_lists_the_class_names() -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": CONNECT + "ReplaceField$value"}])
    assert CONNECT + "ReplaceField$Value" in info.value.reason
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "replace-fields"}])
    assert "replace-field" in info.value.reason and CONNECT not in info.value.reason


@pytest.mark.parametrize(("deprecated", "replacement"), [("blacklist", "exclude"), ("whitelist", "include")])
def test_deprecated_replace_field_keys_warn_and_read_as_the_new_one(
    deprecated: str, replacement: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="transforms.smt.registry"):
        old = create_transform(
            CONNECT + "ReplaceField$Value", {deprecated: "id,email"}, where="transforms[3]"
        )
    assert old.config == create_transform("replace-field", {replacement: "id,email"}).config
    assert [r.getMessage() for r in caplog.records] == [
        f"transforms[3].{deprecated} is deprecated: use {replacement} instead"
    ]
    with pytest.raises(ConfigError) as info:
        create_transform("replace-field", {deprecated: "a", replacement: "b"})
    assert info.value.key == f"transform.{deprecated}" and info.value.value == "a"


def test_error_in_a_deprecated_key_names_it() -> None:
    with pytest.raises(ConfigError) as info:
        create_transform("replace-field", {"blacklist": "a", "renames": "a:b"})
    assert info.value.key == "transform.renames"
    with pytest.raises(ConfigError) as info:
        create_transform("replace-field", {"whitelist": 5})
    assert info.value.key == "transform.whitelist" and info.value.value == 5


# ------------------------------------------------------------------------------ documentation


def test_config_docs_show_other_spellings_and_alias_defaults() -> None:
    names = [d.name for d in config_docs("replace-field")]
    assert names.index("blacklist") == names.index("exclude") + 1
    assert next(d for d in config_docs("replace-field") if d.name == "blacklist").description == (
        "Deprecated: use exclude."
    )
    assert next(d for d in config_docs("topic-matches") if d.name == "pattern").description == (
        "Another spelling of regex."
    )
    mode = {d.name: d.default for d in config_docs(DEBEZIUM_UNWRAP)}["delete.tombstone.handling.mode"]
    assert mode == "tombstone"
    assert {d.name: d.default for d in config_docs("unwrap")}["delete.tombstone.handling.mode"] == "drop"
    assert {d.name: d.default for d in config_docs(CONNECT + "MaskField$Value")}[
        "numeric.replacement"
    ] is True


def test_catalog_lists_every_alias() -> None:
    entries = catalog()
    listed = {a for e in entries for a in e.aliases}
    assert listed == set(TRANSFORM_ALIASES) | set(PREDICATE_ALIASES)
    route = next(e for e in entries if e.name == "route")
    assert route.kind == "transform" and route.aliases == [CONNECT + "RegexRouter"] and route.description
    assert {o.name for o in route.options} >= {"regex", "replacement"}
