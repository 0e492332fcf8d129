"""Kafka Connect's error-handling keys (errors.tolerance, errors.deadletterqueue.topic.name,
errors.deadletterqueue.context.headers.enable, errors.log.enable) are accepted in a topic entry
and at the top level, next to cdcnorm's own names; both spellings parse the same."""

from __future__ import annotations

from typing import Any

import pytest

from service.config import CONNECT_ERROR_KEYS, ErrorPolicy, PipelineConfig, parse_config
from transforms.errors import ConfigError


def entry(**keys: Any) -> dict[str, Any]:
    return {"name": "src", "format": "canal-json", **keys}


def parse(*entries: dict[str, Any], **top: Any) -> PipelineConfig:
    return parse_config({"topic_prefix": "p", **top, "topics": list(entries)})


def error(*entries: dict[str, Any], **top: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(*entries, **top)
    return info.value


# (Connect key, Connect value, cdcnorm key, cdcnorm value)
ALIASES = [
    ("errors.tolerance", "none", "errors", "fail"),
    ("errors.tolerance", "all", "errors", "dlq"),
    ("errors.tolerance", "ALL", "errors", "dlq"),
    ("errors.deadletterqueue.topic.name", "p.dlq-shop", "dlq_topic", "p.dlq-shop"),
    ("errors.deadletterqueue.context.headers.enable", False, "dlq_context_headers", False),
    ("errors.deadletterqueue.context.headers.enable", "false", "dlq_context_headers", False),
    ("errors.log.enable", False, "log_errors", False),
    ("errors.log.enable", "true", "log_errors", True),
]


def test_every_connect_key_is_covered() -> None:
    assert {a[0] for a in ALIASES} == set(CONNECT_ERROR_KEYS)
    assert {a[2] for a in ALIASES} == set(CONNECT_ERROR_KEYS.values())


@pytest.mark.parametrize(("connect", "connect_value", "own", "own_value"), ALIASES)
def test_both_spellings_parse_the_same(connect: str, connect_value: Any, own: str, own_value: Any) -> None:
    by_connect = parse(entry(**{connect: connect_value}))
    by_own = parse(entry(**{own: own_value}))
    assert by_connect.model_dump() == by_own.model_dump()
    assert by_connect.summary() == by_own.summary()
    # and at the top level, as the default of every entry
    by_connect_top = parse(entry(), **{connect: connect_value})
    by_own_top = parse(entry(), **{own: own_value})
    assert by_connect_top.topics == by_own_top.topics == by_own.topics


def test_defaults_keep_todays_behaviour() -> None:
    topic = parse(entry()).topics[0]
    assert topic.errors is ErrorPolicy.DLQ
    assert topic.dlq_context_headers is True  # Connect's default is false
    assert topic.log_errors is True  # Connect's default is false: cdcnorm keeps its warning per dead letter
    assert topic.dlq_topic is None


@pytest.mark.parametrize(("connect", "value", "own", "own_value"), ALIASES[::2])
def test_both_spellings_at_once_is_an_error_naming_both(connect: str, value: Any, own: str, own_value: Any) -> None:
    exc = error(entry(**{connect: value, own: own_value}))
    assert exc.key == f"topics[0].{connect}"
    assert connect in exc.reason and own in exc.reason
    exc = error(entry(), **{connect: value, own: own_value})
    assert exc.key == connect and own in exc.reason


def test_bad_connect_values_name_the_connect_key() -> None:
    exc = error(entry(**{"errors.tolerance": "sometimes"}))
    assert (exc.key, exc.value) == ("topics[0].errors.tolerance", "sometimes")
    assert "none" in exc.reason and "all" in exc.reason
    exc = error(entry(**{"errors.deadletterqueue.topic.name": "not a topic!"}))
    assert (exc.key, exc.value) == ("topics[0].errors.deadletterqueue.topic.name", "not a topic!")
    exc = error(entry(**{"errors.log.enable": "maybe"}))
    assert exc.key == "topics[0].errors.log.enable"
    exc = error(entry(), **{"errors.deadletterqueue.topic.name": "bad name"})
    assert exc.key == "errors.deadletterqueue.topic.name"


def test_top_level_defaults_yield_to_the_entry() -> None:
    cfg = parse(
        entry(name="a"),
        entry(name="b", errors="dlq", dlq_topic="p.dlq-b", **{"errors.log.enable": True}),
        **{"errors.tolerance": "none", "errors.deadletterqueue.topic.name": "dead.letters",
           "errors.deadletterqueue.context.headers.enable": False, "errors.log.enable": False},
    )
    a, b = cfg.topics
    assert (a.errors, a.dlq_topic, a.dlq_context_headers, a.log_errors) == (ErrorPolicy.FAIL, "dead.letters", False, False)
    assert (b.errors, b.dlq_topic, b.dlq_context_headers, b.log_errors) == (ErrorPolicy.DLQ, "p.dlq-b", False, True)
    # the default DLQ topic is an output topic: never consumed through a pattern
    assert cfg.is_output_topic("dead.letters") and cfg.entry_for("dead.letters") is None
