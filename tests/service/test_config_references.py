"""``${VAR}``, ``${VAR:-default}`` and ``file:/path`` references in every string value of the
config: resolved before validation, missing ones reported with the key path and the variable,
secrets that came from them masked in errors and redacted from logs."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from service.config import ConfigErrors, SecretRedactor, parse_config, resolve_reference
from transforms.configfile import resolve_document
from transforms.errors import ConfigError

SALT = "saltFromEnv-8dK2"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CDCNORM_R_MISSING", "CDCNORM_R_UNSET", "EXPANDVARS_RECOVER_NULL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CDCNORM_R_BOOTSTRAP", "k1:9092,k2:9092")
    monkeypatch.setenv("CDCNORM_R_SALT", SALT)
    monkeypatch.setenv("CDCNORM_R_ZONE", "Asia/Shanghai")
    monkeypatch.setenv("CDCNORM_R_EMPTY", "")


def minimal(**more: Any) -> dict[str, Any]:
    return {"topic_prefix": "p", "topics": [{"name": "src", "format": "canal-json"}], **more}


def error(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value


def test_references_resolve_in_every_section(tmp_path: Path) -> None:
    salt_file = tmp_path / "salt"
    salt_file.write_text("salt-from-file\n")
    raw = {
        "topic_prefix": "${CDCNORM_R_UNSET:-lake}",
        "broker": {"bootstrap_servers": "${CDCNORM_R_BOOTSTRAP}", "session_timeout_s": "${CDCNORM_R_UNSET:-30}"},
        "redis": {"url": "redis://${CDCNORM_R_UNSET:-cache}:6379/0", "key_prefix": "${CDCNORM_R_UNSET:-x}:"},
        "worker": {"app_id": "normalizer-${CDCNORM_R_UNSET:-eu}"},
        "topics": [
            {
                "name": "src.${CDCNORM_R_UNSET:-shop}",
                "format": "canal-json",
                "options": {"timestamp.zone": "${CDCNORM_R_ZONE}"},
                "transforms": [
                    {"type": "mask", "fields": "email", "mode": "hash", "hash.salt": "${CDCNORM_R_SALT}"},
                    {"type": "mask", "fields": "phone", "mode": "hash", "hash.salt": f"file:{salt_file}"},
                ],
                "key_columns": {"shop.users": ["${CDCNORM_R_UNSET:-id}"]},
            }
        ],
        "sink": {
            "topics": ["lake.shop.users"],
            "trigger_interval_seconds": "${CDCNORM_R_UNSET:-7}",
            "catalog": {"type": "${CDCNORM_R_UNSET:-rest}", "warehouse": "s3://${CDCNORM_R_UNSET:-bucket}/wh",
                        "properties": {"uri": "${CDCNORM_R_UNSET:-http://catalog:8181}"}},
        },
    }
    cfg = parse_config(raw)
    assert cfg.topic_prefix == "lake"
    assert cfg.broker.bootstrap_servers == ["k1:9092", "k2:9092"]
    assert cfg.broker.session_timeout_s == 30.0
    assert cfg.redis.url == "redis://cache:6379/0" and cfg.redis.key_prefix == "x:"
    assert cfg.worker.app_id == "normalizer-eu"
    entry = cfg.topics[0]
    assert entry.name == "src.shop"
    assert entry.options == {"timestamp.zone": "Asia/Shanghai"}
    assert [t["hash.salt"] for t in entry.transforms] == [SALT, "salt-from-file"]
    assert entry.key_columns == {"shop.users": ["id"]}
    assert cfg.sink is not None
    assert cfg.sink["catalog"] == {"type": "rest", "warehouse": "s3://bucket/wh", "properties": {"uri": "http://catalog:8181"}}
    from sink.config import SinkConfig

    assert SinkConfig.model_validate(cfg.sink).trigger_interval_seconds == 7.0
    # the salts came from references under secret-looking keys: redacted from logs, masked in repr
    assert {SALT, "salt-from-file"} <= set(cfg.secret_values())
    assert SALT not in repr(cfg) and SALT not in cfg.model_dump_json()


def test_default_applies_when_unset_or_empty() -> None:
    assert resolve_reference("${CDCNORM_R_UNSET:-d}") == "d"
    assert resolve_reference("${CDCNORM_R_EMPTY:-d}") == "d"
    assert resolve_reference("${CDCNORM_R_ZONE:-d}") == "Asia/Shanghai"
    assert resolve_reference("${CDCNORM_R_EMPTY}") == ""


def test_dollar_without_brace_and_backslashes_stay() -> None:
    raw = minimal()
    raw["topics"][0]["transforms"] = [
        {"type": "route", "regex": "p\\.(.*)$", "replacement": "lake.$1"},
        {"type": "filter", "table.regex": "a\\\\b|\\$x"},
    ]
    steps = parse_config(raw).topics[0].transforms
    assert steps[0]["regex"] == "p\\.(.*)$" and steps[0]["replacement"] == "lake.$1"
    assert steps[1]["table.regex"] == "a\\\\b|\\$x"


def test_escape_keeps_a_literal_reference() -> None:
    raw = minimal()
    raw["topics"][0]["transforms"] = [{"type": "insert-field", "static.field": "f", "static.value": "$${CDCNORM_R_SALT}"}]
    assert parse_config(raw).topics[0].transforms[0]["static.value"] == "${CDCNORM_R_SALT}"


def test_missing_variable_names_the_key_and_the_variable() -> None:
    for where, raw in {
        "broker.bootstrap_servers": minimal(broker={"bootstrap_servers": "${CDCNORM_R_MISSING}"}),
        "redis.url": minimal(redis={"url": "redis://${CDCNORM_R_MISSING}:6379/0"}),
        "topics[0].options.timestamp.zone": {"topics": [{"name": "s", "format": "canal-json",
                                                        "options": {"timestamp.zone": "${CDCNORM_R_MISSING}"}}]},
        "topics[0].transforms[0].hash.salt": {"topics": [{"name": "s", "format": "canal-json", "transforms": [
            {"type": "mask", "fields": "e", "mode": "hash", "hash.salt": "${CDCNORM_R_MISSING}"}]}]},
        "sink.catalog.warehouse": minimal(sink={"topics": ["t"], "catalog": {"warehouse": "${CDCNORM_R_MISSING}"}}),
    }.items():
        exc = error(raw)
        assert exc.key == where, str(exc)
        assert "CDCNORM_R_MISSING is not set" in exc.reason, str(exc)


def test_required_message_and_bad_syntax() -> None:
    exc = error(minimal(worker={"app_id": "${CDCNORM_R_MISSING:?the consumer group}"}))
    assert exc.key == "worker.app_id" and "CDCNORM_R_MISSING" in exc.reason and "the consumer group" in exc.reason
    exc = error(minimal(worker={"app_id": "a${}b"}))
    assert exc.key == "worker.app_id" and "$${" in exc.reason


def test_recover_null_does_not_hide_a_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPANDVARS_RECOVER_NULL", "oops")
    assert error(minimal(worker={"app_id": "${CDCNORM_R_MISSING}"})).key == "worker.app_id"


def test_assign_default_does_not_touch_the_environment() -> None:
    assert parse_config(minimal(worker={"app_id": "${CDCNORM_R_UNSET:=g}"})).worker.app_id == "g"
    assert "CDCNORM_R_UNSET" not in os.environ


def test_one_reference_resolving_to_empty_means_not_given() -> None:
    cfg = parse_config(minimal(broker={"sasl_mechanism": "${CDCNORM_R_UNSET:-}", "sasl_password": "${CDCNORM_R_EMPTY}",
                                       "client_id": "${CDCNORM_R_EMPTY}"}))
    assert cfg.broker.sasl_mechanism is None and cfg.broker.sasl_password is None
    assert cfg.broker.client_id == "cdcnorm"  # the default, not ""
    # inside a longer value the empty string stays
    assert parse_config(minimal(worker={"app_id": "a${CDCNORM_R_EMPTY}"})).worker.app_id == "a"


def test_file_references_and_file_uris(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    zone.write_text("UTC\n")
    raw = minimal(sink={"topics": ["t"], "catalog": {"warehouse": "file:/var/lib/wh",
                                                    "properties": {"token": f"file:{zone}"}},
                        "spark_conf": {"spark.eventLog.dir": "file:/tmp/events"}})
    raw["topics"][0]["options"] = {"timestamp.zone": f"file:{zone}"}
    cfg = parse_config(raw)
    assert cfg.topics[0].options["timestamp.zone"] == "UTC"
    assert cfg.sink is not None
    # Spark and Iceberg take file: URIs: in the sink only secret-looking keys read files
    assert cfg.sink["catalog"]["warehouse"] == "file:/var/lib/wh"
    assert cfg.sink["spark_conf"]["spark.eventLog.dir"] == "file:/tmp/events"
    assert cfg.sink["catalog"]["properties"]["token"] == "UTC"
    exc = error(minimal(worker={"app_id": f"file:{tmp_path / 'nope'}"}))
    assert exc.key == "worker.app_id" and "cannot read file" in exc.reason


def test_file_reference_without_a_path_means_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``file:${VAR:-}``: the secret is read from the file the pod names in VAR, and the setting
    is not given where VAR is unset or empty (one config for pods with and without the Secret)."""
    raw = minimal(broker={"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u",
                          "sasl_password": "file:${CDCNORM_R_PW_FILE:-}"},
                  redis={"password": "file:${CDCNORM_R_EMPTY}"})
    raw["topics"][0]["transforms"] = [{"type": "mask", "fields": "phone", "mode": "hash",
                                       "hash.salt": "file:${CDCNORM_R_PW_FILE:-}"}]
    monkeypatch.delenv("CDCNORM_R_PW_FILE", raising=False)
    exc = error(raw)  # SASL without a password: the key was left out, and validation says so
    assert exc.key == "broker" and "password" in exc.reason
    raw["broker"] = {"sasl_password": "file:${CDCNORM_R_PW_FILE:-}"}
    cfg = parse_config(raw)
    assert cfg.broker.sasl_password is None and cfg.redis.password is None
    assert "hash.salt" not in cfg.topics[0].transforms[0]  # the mask's default (no salt) applies
    secret = tmp_path / "password"
    secret.write_text("pw-from-a-Secret-91\n")
    monkeypatch.setenv("CDCNORM_R_PW_FILE", str(secret))
    raw["broker"] = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u",
                     "sasl_password": "file:${CDCNORM_R_PW_FILE:-}"}
    cfg = parse_config(raw)
    assert cfg.broker.sasl_password is not None and cfg.broker.sasl_password.get_secret_value() == "pw-from-a-Secret-91"
    assert cfg.topics[0].transforms[0]["hash.salt"] == "pw-from-a-Secret-91"
    assert "pw-from-a-Secret-91" in cfg.secret_values()
    # a path that names a missing file is still an error, with the key
    monkeypatch.setenv("CDCNORM_R_PW_FILE", str(tmp_path / "absent"))
    with pytest.raises(ConfigErrors) as info:  # the password and the salt both name it
        parse_config(raw)
    exc = info.value
    assert isinstance(exc, ConfigErrors) and "broker.sasl_password" in str(exc) and "cannot read file" in str(exc)
    # an empty file is an empty value, not a setting left out
    secret.write_text("")
    monkeypatch.setenv("CDCNORM_R_PW_FILE", str(secret))
    assert resolve_document({"redis": {"password": "file:${CDCNORM_R_PW_FILE}"}}).doc == {"redis": {"password": ""}}


def test_secret_references_are_masked_in_errors(caplog: pytest.LogCaptureFixture) -> None:
    # a bad broker (no username) whose password came from a reference with a literal default
    exc = error(minimal(broker={"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                "sasl_password": "${CDCNORM_R_UNSET:-defaultPw-77}"}))
    assert exc.key == "broker"
    assert "defaultPw-77" not in str(exc)
    assert exc.value["sasl_password"] == "${CDCNORM_R_UNSET:-***}"
    # a transform failing next to a salt from the environment
    raw = minimal()
    raw["topics"][0]["transforms"] = [{"type": "mask", "fields": "e", "mode": "scramble", "hash.salt": "${CDCNORM_R_SALT}"}]
    exc = error(raw)
    assert SALT not in str(exc)
    # resolved secrets reach the log redactor
    raw["topics"][0]["transforms"][0]["mode"] = "hash"
    SecretRedactor(parse_config(raw).secret_values()).install()
    caplog.set_level(logging.INFO)
    logging.getLogger("cdcnorm.test.references").info("salt is %s", SALT)
    assert SALT not in caplog.text
