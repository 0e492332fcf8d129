"""route: Kafka Connect RegexRouter semantics over the destination topic."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.smt.samples import NON_DATA, apply_pure, change, make, only, row_event
from transforms.envelope import EmitOptions, emit
from transforms.errors import ConfigError, TransformError
from transforms.smt import build_chain
from transforms.smt.route import java_replacement


def test_routes_default_topic_with_groups() -> None:
    route = make("route", regex=r"cdcnorm\.shop\.(.*)", replacement="archive.$1")
    out = only(apply_pure(route, change()))
    assert out.topic == "archive.orders"
    assert emit([out], EmitOptions())[0].topic == "archive.orders"


def test_regex_must_match_whole_topic() -> None:
    route = make("route", regex=r"shop", replacement="x")
    event = change()
    assert apply_pure(route, event)[0] is event


def test_explicit_topic_wins_over_template() -> None:
    route = make("route", regex=r"custom\.(.*)", replacement="$1.routed")
    out = only(apply_pure(route, change(topic="custom.t")))
    assert out.topic == "t.routed"


def test_topic_naming_from_config_and_from_emit_options() -> None:
    spec = {"type": "route", "regex": r"p\.shop\.orders", "replacement": "x"}
    assert only(build_chain([spec], emit_options=EmitOptions(prefix="p")).apply([change()])).topic == "x"
    assert only(build_chain([spec]).apply([change()])).topic is None  # default prefix cdcnorm: no match
    templ = {**spec, "topic.prefix": "p", "topic.template": "{prefix}.{db}.{table}"}
    assert only(build_chain([templ]).apply([change()])).topic == "x"
    # an explicit config key wins over the pipeline's options
    own = {**spec, "regex": r"q\.shop\.orders", "topic.prefix": "q"}
    assert only(build_chain([own], emit_options=EmitOptions(prefix="p")).apply([change()])).topic == "x"


def test_named_groups_and_escaped_dollar() -> None:
    route = make("route", regex=r"cdcnorm\.(?P<db>\w+)\.(?P<t>\w+)", replacement=r"${t}_\$_${db}")
    assert only(apply_pure(route, change())).topic == "orders_$_shop"


def test_routes_rows_and_passes_other_events() -> None:
    route = make("route", regex=r".*", replacement="all")
    assert only(apply_pure(route, row_event())).topic == "all"
    for build in NON_DATA:
        event = build()
        assert apply_pure(route, event)[0] is event


def test_same_topic_returns_the_event_itself() -> None:
    route = make("route", regex=r"x", replacement="x")
    event = change(topic="x")
    assert apply_pure(route, event)[0] is event


def test_empty_result_is_a_transform_error() -> None:
    route = make("route", regex=r"(a*)x", replacement="$1")
    with pytest.raises(TransformError, match="empty topic"):
        route.apply(change(topic="x"))


def test_predicate_and_negate() -> None:
    other = replace(change(), table=change().table.with_name("shop", None, "items"))
    spec = {
        "type": "route",
        "regex": r"cdcnorm\.shop\.(.*)",
        "replacement": "special.$1",
        "predicate": {"type": "table-matches", "regex": r"shop\.orders"},
    }
    out = build_chain([spec]).apply([change(), other])
    assert [e.topic for e in out] == ["special.orders", None]
    out = build_chain([{**spec, "negate": True}]).apply([change(), other])
    assert [e.topic for e in out] == [None, "special.items"]


def test_chain_order_matters() -> None:
    first = {"type": "route", "regex": r"cdcnorm\.shop\.(.*)", "replacement": "a.$1"}
    second = {"type": "route", "regex": r"a\.(.*)", "replacement": "b.$1"}
    assert only(build_chain([first, second]).apply([change()])).topic == "b.orders"
    assert only(build_chain([second, first]).apply([change()])).topic == "a.orders"


@pytest.mark.parametrize(
    ("config", "key", "reason"),
    [
        ({"regex": "(", "replacement": "x"}, "transforms[0].regex", "invalid regular expression"),
        ({"regex": "(a)", "replacement": "$2"}, "transforms[0].replacement", "no group 2"),
        ({"regex": "(a)", "replacement": "${n}"}, "transforms[0].replacement", "no group named"),
        ({"regex": "(a)", "replacement": "x$"}, "transforms[0].replacement", "illegal group reference"),
        ({"regex": "a"}, "transforms[0].replacement", "required"),
        ({"regex": "a", "replacement": "b", "regexp": "c"}, "transforms[0].regexp", "unknown key"),
        (
            {"regex": "a", "replacement": "b", "topic.template": "{nope}"},
            "transforms[0].topic.template",
            "template",
        ),
    ],
)
def test_config_errors(config: dict[str, str], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_chain([{"type": "route", **config}])
    assert info.value.key == key
    assert reason in info.value.reason


def test_java_replacement() -> None:
    pattern = re.compile("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)")
    assert java_replacement(pattern, "$11") == r"\g<11>"
    assert java_replacement(re.compile("(a)"), "$11") == r"\g<1>1"
    assert java_replacement(re.compile("(a)"), r"a\\b") == r"a\\b"
    assert re.compile("(a)").fullmatch("a").expand(java_replacement(re.compile("(a)"), r"x\\$0")) == "x\\a"  # type: ignore[union-attr]


def test_java_named_groups_are_accepted() -> None:
    route = make("route", regex=r"cdcnorm\.(?<db>\w+)\.(?<t>\w+)", replacement="${db}-${t}")
    assert only(route.apply(change())).topic == "shop-orders"
