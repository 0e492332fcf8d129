"""Unknown keys are rejected at every level of pipeline.yaml, with the key path.

Complements tests/service/test_config.py, which covers the top level, ``topics[]`` and
``options``; here: every other section, transform steps and predicates, and the ``sink:``
section, which ``validate-config`` now checks too (it used to fail only when the sink started).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app, config_sections
from service.config import parse_config
from transforms.errors import ConfigError

_parse_config = functools.partial(parse_config, sections=config_sections())  # as the cdcnorm command checks a file


def base(**topic: Any) -> dict[str, Any]:
    return {"topic_prefix": "p", "topics": [{"name": "src", "format": "canal-json", **topic}]}


def sink(**section: Any) -> dict[str, Any]:
    return {**base(), "sink": {"topics": ["p.shop.users"], **section}}


FILTER = {"type": "filter", "table.regex": "tmp_.*"}
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "broker": ({**base(), "broker": {"bootstrap_server": "k:9092"}}, "broker.bootstrap_server", "unknown key"),
    "redis": ({**base(), "redis": {"pasword": "x"}}, "redis.pasword", "unknown key"),
    "web": ({**base(), "web": {"prot": 1}}, "web.prot", "unknown key"),
    "worker": ({**base(), "worker": {"max_inflght": 1}}, "worker.max_inflght", "unknown key"),
    "row_state": (base(row_state={"ttl": 1}), "topics[0].row_state.ttl", "unknown key"),
    "transform step": (
        base(transforms=[FILTER, {"type": "mask", "fields": "a", "colour": "blue"}]),
        "topics[0].transforms[1].colour", "unknown key for transform 'mask'"),
    "predicate": (
        base(transforms=[{**FILTER, "predicate": {"type": "op-is", "ops": "c", "colour": "blue"}}]),
        "topics[0].transforms[0].predicate.colour", "unknown key for predicate 'op-is'"),
    "sink": (sink(colour="blue"), "sink.colour", "unknown key"),
    "sink.catalog": (sink(catalog={"type": "rest", "colour": "blue"}), "sink.catalog.colour", "unknown key"),
    "sink.maintenance": (sink(maintenance={"every_batch": 3}), "sink.maintenance.every_batch", "unknown key"),
}


@pytest.mark.parametrize("level", list(CASES))
def test_unknown_key_at_every_level(level: str) -> None:
    raw, key, reason = CASES[level]
    with pytest.raises(ConfigError) as info:
        _parse_config(raw)
    assert info.value.key == key
    assert info.value.reason.startswith(reason)


@pytest.mark.parametrize("level", ["redis", "predicate", "sink.catalog"])
def test_validate_config_prints_the_key_path(level: str, tmp_path: Path) -> None:
    raw, key, reason = CASES[level]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"{key}=")
    assert reason in result.output
    assert "redis.pasword=***" in result.output or level != "redis"  # a password-like key: value masked


def test_sink_values_are_checked_by_validate_config_too() -> None:
    with pytest.raises(ConfigError) as info:
        _parse_config(sink(write_mode="merge-on-write"))
    assert info.value.key == "sink.write_mode" and info.value.value == "merge-on-write"
    with pytest.raises(ConfigError) as info:
        _parse_config({**base(), "sink": {"group_id": "g"}})
    assert info.value.key == "sink" and "topics" in info.value.reason
