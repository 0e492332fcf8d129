"""The sink's config loader: the ``broker:`` and ``sink:`` sections only, through
``transforms.configfile`` (no ``service.config``), every problem of both at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sink.config import SinkConfig
from sink.main import read_sink_config
from transforms.configfile import ConfigErrors
from transforms.errors import ConfigError


def _write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def test_reads_broker_and_sink_and_ignores_the_worker_sections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_T_KAFKA_PW", "kafkaPw-9x")
    monkeypatch.setenv("CDCNORM_T_TOKEN", "tokenPw-7y")
    monkeypatch.delenv("CDCNORM_T_REDIS_PW", raising=False)
    raw = {
        "broker": {
            "bootstrap_servers": "b1:9092,b2:9092",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password": "${CDCNORM_T_KAFKA_PW}",
        },
        # the worker's: an unset variable and an unknown key are not the sink's problem
        "redis": {"password": "${CDCNORM_T_REDIS_PW}", "colour": 1},
        "topics": [],
        "sink": {
            "topics": ["cdcnorm.shop.orders"],
            "catalog": {"warehouse": "file:/tmp/wh", "properties": {"token": "${CDCNORM_T_TOKEN}"}},
            "spark_conf": {"spark.hadoop.fs.s3a.secret.key": "s3-literal-secret"},
        },
    }
    sink, broker, secrets = read_sink_config(_write(tmp_path, raw))
    assert broker.bootstrap == "b1:9092,b2:9092"
    assert broker.librdkafka()["sasl.password"] == "kafkaPw-9x"
    assert sink.catalog.warehouse == "file:/tmp/wh"  # not read as a file reference in the sink section
    assert sink.catalog.properties["token"] == "tokenPw-7y"
    assert {"kafkaPw-9x", "tokenPw-7y", "s3-literal-secret"} <= set(secrets)


def test_every_problem_of_both_sections_at_once(tmp_path: Path) -> None:
    raw = {
        "broker": {"bootstrap_servers": "no-port-here"},
        "topics": [{"name": "b", "format": "shareplex-jsn"}],
        "sink": {"topics": ["t"], "trigger_interval_seconds": -1, "colour": 1},
    }
    with pytest.raises(ConfigErrors) as info:
        read_sink_config(_write(tmp_path, raw))
    assert [e.key for e in info.value.errors] == [
        "broker.bootstrap_servers",
        "sink.trigger_interval_seconds",
        "sink.colour",
    ]


def test_a_config_without_a_sink_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_sink_config(_write(tmp_path, {"topics": [{"name": "a", "format": "canal-json"}]}))
    assert info.value.key == "sink"


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [(r"cdcnorm\.shop\.t_\d+", r"\d -> [0-9]"), (r"cdcnorm\.\w+\.orders", r"\w -> [[:alnum:]_]")],
)
def test_a_topic_pattern_with_a_perl_class_is_refused_with_its_posix_form(pattern: str, hint: str) -> None:
    # librdkafka compiles subscription patterns with POSIX regcomp(REG_EXTENDED): \d is a literal
    # "d" there, so the sink would subscribe to nothing, silently
    with pytest.raises(ValueError, match="POSIX extended") as err:
        SinkConfig.from_section({"topic_pattern": pattern})
    assert hint in str(err.value)


@pytest.mark.parametrize("pattern", [r"cdcnorm\.[^.]+\.[^.]+", r"cdcnorm\.shop\.t_[0-9]+", r"a\\d"])
def test_posix_topic_patterns_are_accepted(pattern: str) -> None:
    assert SinkConfig.from_section({"topic_pattern": pattern}).topic_pattern == pattern


def test_sink_knobs_of_retries_and_ownership_are_checked_with_their_keys(tmp_path: Path) -> None:
    raw = {
        "broker": {"bootstrap_servers": "127.0.0.1:9092"},
        "sink": {"topics": ["t"], "group_id": "g", "take_over_tables_from": "g", "liveness_stall_seconds": 30,
                 "write_retry": {"max_backoff_seconds": 45}},
    }
    with pytest.raises(ConfigErrors) as info:
        read_sink_config(_write(tmp_path, raw))
    problems = {e.key: e.reason for e in info.value.errors}
    assert set(problems) == {"sink.take_over_tables_from", "sink.write_retry"}, problems
    assert "own group_id" in problems["sink.take_over_tables_from"]
    assert "not below liveness_stall_seconds (30)" in problems["sink.write_retry"]
