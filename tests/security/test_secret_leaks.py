"""Secrets never leave the process: not in repr/str of the config, not in `validate-config` output,
not in any ConfigError (whatever level fails), not in log records at any level."""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app, config_sections
from service.config import SecretRedactor, load_config, mask_secrets, mask_url
from transforms.errors import ConfigError

_load_config = functools.partial(load_config, sections=config_sections())  # as the cdcnorm command checks a file

# Each one distinctive; each delivered a different way.
ENV_KAFKA = "envKafkaPw-9fQ2"  # ${CDCNORM_LEAK_KAFKA_PW}
FILE_REDIS = "fileRedisPw-4hT7"  # file:
ENV_CATALOG = "envCatalogCred-1xN8"  # ${CDCNORM_LEAK_CATALOG} under sink.catalog.properties.credential
LITERAL_S3 = "literalS3Secret-6kW3"  # literal in sink.spark_conf (a secret-looking key)
LITERAL_SALT = "literalSalt-2mP5"  # hash.salt of a mask transform
LITERAL_KAFKA = "literalKafkaPw-7bV1"  # a literal broker password (only in the failing variants)
SECRETS = (ENV_KAFKA, FILE_REDIS, ENV_CATALOG, LITERAL_S3, LITERAL_SALT, LITERAL_KAFKA)


@pytest.fixture
def secret_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDCNORM_LEAK_KAFKA_PW", ENV_KAFKA)
    monkeypatch.setenv("CDCNORM_LEAK_CATALOG", ENV_CATALOG)
    secret = tmp_path / "redis-password"
    secret.write_text(FILE_REDIS + "\n")
    return secret


def good_raw(redis_secret: Path) -> dict[str, Any]:
    return {
        "topic_prefix": "p",
        "broker": {
            "bootstrap_servers": "kafka-1:9096",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "svc",
            "sasl_password": "${CDCNORM_LEAK_KAFKA_PW}",
        },
        "redis": {"url": "rediss://cache:6380/0", "username": "app", "password": f"file:{redis_secret}"},
        "topics": [
            {
                "name": "src",
                "format": "canal-json",
                "transforms": [{"type": "mask", "fields": "email", "mode": "hash", "hash.salt": LITERAL_SALT}],
            }
        ],
        "sink": {
            "topics": ["p.shop.users"],
            "catalog": {
                "type": "rest",
                "warehouse": "s3://lake/wh",
                "properties": {"uri": "https://catalog:8181", "credential": "${CDCNORM_LEAK_CATALOG}"},
            },
            "spark_conf": {"spark.hadoop.fs.s3a.secret.key": LITERAL_S3},
        },
    }


def write(tmp_path: Path, raw: dict[str, Any] | str, name: str = "pipeline.yaml") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw, sort_keys=False))
    return path


def assert_clean(*texts: str, caplog: pytest.LogCaptureFixture | None = None) -> None:
    blobs = list(texts)
    if caplog is not None:
        blobs += [r.getMessage() for r in caplog.records]
        blobs += [caplog.text]
    for blob in blobs:
        for secret in SECRETS:
            assert secret not in blob, f"secret {secret[:8]}... leaked in: {blob[:500]}"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def test_valid_config_with_secrets_prints_none(
    secret_env: Path, tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, good_raw(secret_env))
    cfg = _load_config(path)
    # the secrets were resolved and reach the clients ...
    assert cfg.broker.librdkafka()["sasl.password"] == ENV_KAFKA
    assert cfg.redis.client_kwargs()["password"] == FILE_REDIS
    assert set(cfg.secret_values()) >= {ENV_KAFKA, FILE_REDIS, ENV_CATALOG, LITERAL_S3}
    from sink.main import load_sink_config

    sink, kafka = load_sink_config(path)
    assert sink.catalog.properties["credential"] == ENV_CATALOG
    # every reference of the document is resolved once, by parse_config (the sink's too)
    assert cfg.sink is not None and cfg.sink["catalog"]["properties"]["credential"] == ENV_CATALOG
    assert sink.spark_conf["spark.hadoop.fs.s3a.secret.key"] == LITERAL_S3
    assert kafka["sasl.password"] == ENV_KAFKA
    # ... and are printed nowhere
    assert_clean(repr(cfg), str(cfg), cfg.model_dump_json(), repr(cfg.summary()),
                 repr(cfg.broker), repr(cfg.redis), cfg.broker.describe_security(), cfg.redis.describe_security())

    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    assert "security: kafka SASL_SSL SCRAM-SHA-512 user=svc ca=system; redis auth=acl user=app tls ca=system" in result.output
    assert_clean(result.output, result.stderr, caplog=debug_logs)
    print(f"validate-config printed {len(result.output)} chars, {len(debug_logs.records)} log records; no secret")


def _variants(redis_secret: Path) -> dict[str, tuple[Any, str]]:
    """name -> (raw config or YAML text, expected error key)."""
    good = good_raw(redis_secret)

    def with_(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
        raw = yaml.safe_load(yaml.safe_dump(good))
        node = raw
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        return raw

    literal_broker = {**good["broker"], "sasl_password": LITERAL_KAFKA}
    duplicate = with_(("broker",), literal_broker)
    duplicate["topics"].append(dict(duplicate["topics"][0]))
    yaml_text = yaml.safe_dump(good, sort_keys=False).replace(
        "sasl_password: ${CDCNORM_LEAK_KAFKA_PW}", f"sasl_password: [{LITERAL_KAFKA}"
    )
    return {
        "secret of the wrong type": (with_(("broker", "sasl_password"), {"v": LITERAL_KAFKA}), "broker.sasl_password"),
        "broker-level check with a literal password": (
            with_(("broker",), {**literal_broker, "sasl_username": None}), "broker"),
        "root-level check (duplicate topic) shows the whole document": (duplicate, "<root>"),
        "unknown top-level key holding a secret": (with_(("password",), LITERAL_KAFKA), "password"),
        "unknown broker key": (with_(("broker", "sasl_pasword"), LITERAL_KAFKA), "broker.sasl_pasword"),
        "unknown redis key": (with_(("redis", "tls_password"), LITERAL_KAFKA), "redis.tls_password"),
        "password inside the redis url": (
            with_(("redis", "url"), f"rediss://app:{LITERAL_KAFKA}@cache:6380/0"), "redis.url"),
        "topic entry check shows the entry (salt inside)": (
            with_(("topics", 0, "pattern"), "src.*"), "topics[0]"),
        "bad transform next to the salt": (
            with_(("topics", 0, "transforms", 0, "mode"), "scramble"), "topics[0].transforms[0].mode"),
        "unknown sink key": (with_(("sink", "catalog", "secret"), LITERAL_KAFKA), "sink.catalog.secret"),
        "sink-level check shows the sink": (with_(("sink", "topics"), []), "sink"),
        "sink secret from a missing variable": (
            with_(("sink", "catalog", "properties", "token"), "${CDCNORM_LEAK_MISSING}"),
            "sink.catalog.properties.token"),
        "missing environment variable": (with_(("broker", "sasl_password"), "${CDCNORM_LEAK_MISSING}"),
                                         "broker.sasl_password"),
        "YAML syntax error on the secret's line": (yaml_text, "<file>"),
    }


@pytest.mark.parametrize("variant", list(_variants(Path("x"))))
def test_every_config_error_masks_secrets(
    variant: str, secret_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("CDCNORM_LEAK_MISSING", raising=False)
    raw, key = _variants(secret_env)[variant]
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError) as info:
        _load_config(path)
    exc = info.value
    assert exc.key == key, str(exc)
    rendered = "".join(traceback.format_exception(exc))
    assert_clean(str(exc), repr(exc.value), rendered)

    runner = CliRunner()
    result = runner.invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"{key}="), result.output
    assert_clean(result.output, caplog=debug_logs)
    commands = [["worker", "--config", str(path)]]
    from sink.main import read_sink_config

    try:
        read_sink_config(path)
    except ConfigError:  # the sink checks its own sections only: run it only where it stops before Spark
        commands.append(["sink", "--config", str(path)])
    for command in commands:
        result = runner.invoke(app, command)
        assert result.exit_code == 1, result.output
        assert_clean(result.output, caplog=debug_logs)
    print(f"{variant}: {exc.key}: {exc.reason[:80]}")


def test_masking_helpers() -> None:
    assert mask_url("redis://:pw-1@h:1/0 and kafka://u:pw-2@b:9092") == "redis://:***@h:1/0 and kafka://u:***@b:9092"
    assert mask_url("rediss://app@h:1/0") == "rediss://app@h:1/0"
    masked = mask_secrets(
        "sink",
        {"spark_conf": {"spark.hadoop.fs.s3a.secret.key": "s", "spark.sql.shuffle.partitions": "8"},
         "catalog": {"properties": {"token": "${TOKEN}", "credential": "file:/run/cred", "uri": "http://u:p@h"}}},
    )
    assert masked == {
        "spark_conf": {"spark.hadoop.fs.s3a.secret.key": "***", "spark.sql.shuffle.partitions": "8"},
        "catalog": {"properties": {"token": "${TOKEN}", "credential": "file:/run/cred", "uri": "http://u:***@h"}},
    }


def test_redactor_scrubs_every_level_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    secret = "redactMe-3vJ6"
    SecretRedactor([secret, "abc"]).install()
    logger = logging.getLogger("cdcnorm.test.redaction")
    caplog.set_level(logging.DEBUG, logger=logger.name)
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL):
        logger.log(level, "connecting with password=%s", secret)
    logger.info(f"an f-string with {secret} inside")
    try:
        raise RuntimeError(f"client said: bad password {secret}")
    except RuntimeError:
        logger.exception("login failed")
    logger.info("short values like %s are not redacted", "abc")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 8
    assert all(secret not in m for m in messages)
    assert messages[0] == "connecting with password=***"
    assert secret not in caplog.text and "client said: bad password ***" in caplog.text
    assert messages[-1] == "short values like abc are not redacted"
