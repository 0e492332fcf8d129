"""Pipeline config validation: unknown keys, bad values and secrets fail with key path, value, reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app
from service.config import ErrorPolicy, load_config, parse_config
from transforms.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2] / "service" / "pipeline.yaml"


def base(**topic: Any) -> dict[str, Any]:
    return {"topic_prefix": "p", "topics": [{"name": "src", "format": "canal-json", **topic}]}


def error(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value


def test_minimal_defaults() -> None:
    cfg = parse_config(base())
    entry = cfg.topics[0]
    assert entry.errors is ErrorPolicy.DLQ
    assert entry.tombstones is True
    assert entry.topic_template == "{prefix}.{db}.{table}"
    assert entry.output_dlq_topic(cfg.topic_prefix) == "p.dlq"
    assert cfg.transaction_topic == "p.transaction"
    assert cfg.sink is None


def test_unknown_key_names_the_path() -> None:
    raw = base()
    raw["topics"].append({"name": "other", "format": "canal-json", "colour": "blue"})
    exc = error(raw)
    assert exc.key == "topics[1].colour"
    assert exc.value == "blue"
    assert exc.reason == "unknown key"


def test_unknown_top_level_key() -> None:
    exc = error({**base(), "brokers": "x"})
    assert exc.key == "brokers"


def test_bad_value() -> None:
    exc = error(base(errors="ignore"))
    assert exc.key == "topics[0].errors"
    assert exc.value == "ignore"


def test_unknown_format() -> None:
    raw = base()
    raw["topics"].append({"name": "b", "format": "nope"})
    exc = error(raw)
    assert exc.key == "topics[1].format"
    assert exc.value == "nope"
    assert "unknown format" in exc.reason


def test_format_options_checked_through_the_decoder() -> None:
    exc = error(base(options={"no.such.option": 1}))
    assert exc.key == "topics[0].options.no.such.option"
    exc = error(base(options={"decimal.handling.mode": "weird"}))
    assert exc.key == "topics[0].options.decimal.handling.mode"
    assert exc.value == "weird"


def test_name_xor_pattern_and_regex() -> None:
    exc = error({"topics": [{"format": "canal-json"}]})
    assert exc.key == "topics[0]" and "exactly one of name or pattern" in exc.reason
    exc = error({"topics": [{"pattern": "([", "format": "canal-json"}]})
    assert exc.key == "topics[0].pattern"


def test_template_placeholders() -> None:
    exc = error(base(topic_template="{prefix}.{tabel}"))
    assert exc.key == "topics[0].topic_template" and "tabel" in exc.reason


def test_broker_values() -> None:
    exc = error({**base(), "broker": {"bootstrap_servers": "nohostport"}})
    assert exc.key == "broker.bootstrap_servers"
    exc = error({**base(), "broker": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}})
    assert exc.key == "broker" and "sasl_username" in exc.reason


def test_secrets_from_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_TEST_PW", "hunter2")
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-file\n")
    broker = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "u",
        "sasl_password": "${CDCNORM_TEST_PW}",
    }
    cfg = parse_config({**base(), "broker": broker, "redis": {"password": f"file:{secret_file}"}})
    assert cfg.broker.sasl_password is not None
    assert cfg.broker.sasl_password.get_secret_value() == "hunter2"
    assert cfg.redis.password is not None and cfg.redis.password.get_secret_value() == "from-file"
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())
    assert cfg.broker.librdkafka()["sasl.password"] == "hunter2"


def test_missing_secret_env_is_reported_without_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCNORM_NOPE", raising=False)
    exc = error({**base(), "redis": {"password": "${CDCNORM_NOPE}"}})
    assert exc.key == "redis.password"
    assert "CDCNORM_NOPE is not set" in exc.reason


def test_literal_secret_is_masked_in_errors() -> None:
    exc = error({**base(), "broker": {"sasl_password": 12345678}})
    assert exc.key == "broker.sasl_password"
    assert "12345678" not in str(exc)


def test_duplicate_names() -> None:
    raw = {"topics": [{"name": "a", "format": "canal-json"}, {"name": "a", "format": "canal-json"}]}
    assert "listed twice" in error(raw).reason


def test_transform_chain_errors_have_the_entry_path() -> None:
    exc = error(base(transforms=[{"type": "no-such-transform"}]))
    assert exc.key.startswith("topics[0].transforms[0]")


def test_valid_transform_chain() -> None:
    cfg = parse_config(base(transforms=[{"type": "filter", "table.regex": "tmp_.*"}]))
    assert len(cfg.topics[0].transforms) == 1


def test_entry_routing_names_win_and_outputs_never_match() -> None:
    cfg = parse_config(
        {
            "topic_prefix": "out",
            "topics": [
                {"pattern": ".*", "format": "canal-json"},
                {"name": "exact", "format": "debezium-json"},
            ],
        }
    )
    exact = cfg.entry_for("exact")
    assert exact is not None and exact.format == "debezium-json"
    anything = cfg.entry_for("anything")
    assert anything is not None and anything.format == "canal-json"
    assert cfg.entry_for("out.db.table") is None
    assert cfg.entry_for("out.dlq") is None


def test_sample_pipeline_yaml_is_valid() -> None:
    cfg = load_config(SAMPLE)
    formats = {t.format for t in cfg.topics}
    documented = {
        "arcion-csv", "arcion-json", "arcion-kafka", "debezium-json", "canal-json", "shareplex-json",
        "dts-avro", "cdl-json", "qlik-json", "qlik-avro", "auto",
    }
    assert documented <= formats


def test_sample_pipeline_yaml_structure_without_decoders() -> None:
    raw = yaml.safe_load(SAMPLE.read_text())
    cfg = parse_config(raw, check_formats=False)
    assert cfg.topic_prefix == "cdcnorm"


def test_validate_config_cli(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base()))
    runner = CliRunner()
    result = runner.invoke(app, ["validate-config", str(good)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(base(format="nope")))
    result = runner.invoke(app, ["validate-config", str(bad)])
    assert result.exit_code == 1
    assert "topics[0].format=nope: unknown format" in result.output


def test_bounds_have_defaults_and_bad_values_name_the_key() -> None:
    worker = parse_config(base()).worker
    assert (worker.max_inflight_bytes, worker.max_message_bytes, worker.oversized_prefix_bytes) == (64 << 20, 1 << 20, 1024)
    exc = error({**base(), "worker": {"max_message_bytes": 4096, "oversized_prefix_bytes": 4096}})
    assert (exc.key, exc.value) == ("worker.oversized_prefix_bytes", 4096)
    assert "must be below max_message_bytes (4096)" in exc.reason
    exc = error({**base(), "worker": {"max_inflight_bytes": 0}})
    assert (exc.key, exc.value) == ("worker.max_inflight_bytes", 0) and "greater than or equal to 1024" in exc.reason
    exc = error({**base(), "worker": {"max_message_bytes": 2_000_000_000}})
    assert exc.key == "worker.max_message_bytes" and "less than or equal to 900000000" in exc.reason
    exc = error(base(row_state={"max_rows_per_table": 0}))
    assert exc.key == "topics[0].row_state.max_rows_per_table"
    assert worker.max_record_bytes is None  # the producer's limit
    exc = error({**base(), "worker": {"max_record_bytes": 1000}})
    assert exc.key == "worker.max_record_bytes" and "greater than or equal to 65536" in exc.reason
