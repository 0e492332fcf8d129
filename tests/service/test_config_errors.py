"""Every error of a config file is reported at once: pydantic errors, reference errors, format
options, every failing transform step and the sink section, each with its key path, value and
reason, in document order; `validate-config`, the worker and the sink print the whole list."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app, config_sections
from service.config import ConfigErrors, format_config_error, load_config, parse_config
from transforms.errors import ConfigError

_load_config = functools.partial(load_config, sections=config_sections())  # as the cdcnorm command checks a file
_parse_config = functools.partial(parse_config, sections=config_sections())  # as the cdcnorm command checks a file

SALT = "errSalt-5Gq1"


def three_errors() -> dict[str, Any]:
    """One bad broker value, one unknown format in the second topic entry, one bad sink value."""
    return {
        "topic_prefix": "p",
        "broker": {"bootstrap_servers": "no-port-here"},
        "topics": [
            {"name": "a", "format": "canal-json"},
            {"name": "b", "format": "shareplex-jsn"},
        ],
        "sink": {"topics": ["p.db.t"], "trigger_interval_seconds": -1},
    }


def errors_of(raw: dict[str, Any], **kwargs: Any) -> list[ConfigError]:
    with pytest.raises(ConfigError) as info:
        _parse_config(raw, **kwargs)
    return list(getattr(info.value, "errors", [info.value]))


def test_three_errors_in_different_places_are_all_reported() -> None:
    with pytest.raises(ConfigErrors) as info:
        _parse_config(three_errors())
    exc = info.value
    assert [e.key for e in exc.errors] == ["broker.bootstrap_servers", "topics[1].format", "sink.trigger_interval_seconds"]
    assert [e.value for e in exc.errors] == ["no-port-here", "shareplex-jsn", -1]
    assert "host:port" in exc.errors[0].reason and "unknown format" in exc.errors[1].reason
    assert "greater than 0" in exc.errors[2].reason
    # the first error's key/value, and a reason that lists the others (for `key=value: reason` printers)
    assert (exc.key, exc.value) == ("broker.bootstrap_servers", "no-port-here")
    assert exc.reason.splitlines()[1:] == [format_config_error(e) for e in exc.errors[1:]]
    assert str(exc).splitlines()[0] == "invalid config: 3 errors"


def test_validate_config_prints_every_error_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(three_errors(), sort_keys=False))
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 3, result.output
    assert lines[0].startswith("broker.bootstrap_servers=no-port-here: expected host:port")
    assert lines[1].startswith("topics[1].format=shareplex-jsn: unknown format")
    assert lines[2].startswith("sink.trigger_interval_seconds=-1: ")


# the sink checks the structure only (it runs no decoder): the unknown format is the worker's
@pytest.mark.parametrize(
    ("command", "keys"),
    [
        ("worker", ("broker.bootstrap_servers=", "topics[1].format=", "sink.trigger_interval_seconds=")),
        ("sink", ("broker.bootstrap_servers=", "sink.trigger_interval_seconds=")),
    ],
)
def test_worker_and_sink_stop_with_the_full_list(command: str, keys: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(three_errors(), sort_keys=False))
    result = CliRunner().invoke(app, [command, "--config", str(path)])
    assert result.exit_code == 1
    for key in keys:
        assert key in result.output, result.output


def test_python_m_sink_prints_the_full_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from sink.__main__ import main

    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(three_errors(), sort_keys=False))
    monkeypatch.setattr("sys.argv", ["python -m sink", "--config", str(path)])
    assert main() == 1
    err = capsys.readouterr().err
    assert "2 errors" in err and "broker.bootstrap_servers=no-port-here" in err and "sink.trigger_interval_seconds" in err


def test_pydantic_and_semantic_errors_of_every_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCNORM_E_MISSING", raising=False)
    raw = {
        "topic_prefix": "p",
        "worker": {"app_id": "${CDCNORM_E_MISSING}", "log_level": "LOUD"},
        "topics": [
            {"name": "a", "format": "canal-json", "colour": "blue"},
            {"name": "b", "format": "canal-json", "options": {"decimal.handling.mode": "roman"}},
            {"name": "c", "format": "canal-json", "transforms": [
                {"type": "mask", "fields": "e", "mode": "scramble"},
                {"type": "filter", "table.regex": "ok"},
                {"type": "no-such-step"},
            ]},
        ],
    }
    keys = [e.key for e in errors_of(raw)]
    assert keys == [
        "worker.app_id",  # the missing variable, not a second error about the unresolved value
        "worker.log_level",
        "topics[0].colour",
        "topics[1].options.decimal.handling.mode",
        "topics[2].transforms[0].mode",
        "topics[2].transforms[2].type",
    ], keys
    # without check_formats only what the models see
    assert [e.key for e in errors_of(raw, check_formats=False)] == ["worker.app_id", "worker.log_level", "topics[0].colour"]


def test_one_error_is_a_plain_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        _parse_config({"topics": [{"name": "a", "format": "nope"}]})
    assert not isinstance(info.value, ConfigErrors)
    assert info.value.key == "topics[0].format"


def test_secrets_stay_masked_in_every_listed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_E_SALT", SALT)
    raw = {
        "broker": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": "literalPw-3Zz9"},
        "redis": {"url": "rediss://app:urlPw-6Rt4@cache:6380/0"},
        "topics": [{"name": "a", "format": "canal-json", "transforms": [
            {"type": "mask", "fields": "e", "mode": "scramble", "hash.salt": "${CDCNORM_E_SALT}"}]}],
        "sink": {"topics": ["t"], "catalog": {"properties": {"token": "tokenPw-1Qa8"}, "colour": 1}},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigErrors) as info:
        _load_config(path)
    assert len(info.value.errors) == 4, str(info.value)
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 4
    for text in (str(info.value), repr([e.value for e in info.value.errors]), result.output):
        for secret in (SALT, "literalPw-3Zz9", "urlPw-6Rt4", "tokenPw-1Qa8"):
            assert secret not in text, text
