"""Kafka SASL/TLS and Redis AUTH/TLS settings: parsed from pipeline.yaml, handed to every client
(confluent-kafka, aiokafka through Faust, redis-py), and rejected when inconsistent."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from service.config import PipelineConfig, parse_config
from service.transport import faust_credentials
from tests.security.conftest import KEY_PASSWORD
from tests.security.servers import TlsFiles
from transforms.errors import ConfigError

KAFKA_PASSWORD = "kafka-pw-Wm47cR"


def config(broker: dict[str, Any] | None = None, redis: dict[str, Any] | None = None) -> PipelineConfig:
    raw: dict[str, Any] = {"topics": [{"name": "src", "format": "canal-json"}]}
    if broker is not None:
        raw["broker"] = broker
    if redis is not None:
        raw["redis"] = redis
    return parse_config(raw)


def error(broker: dict[str, Any] | None = None, redis: dict[str, Any] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config(broker, redis)
    return info.value


def sasl(protocol: str, mechanism: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": "b1:9096,b2:9096",
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_username": "${CDCNORM_T_KAFKA_USER}",
        "sasl_password": "${CDCNORM_T_KAFKA_PW}",
        **more,
    }


@pytest.fixture(autouse=True)
def _kafka_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_T_KAFKA_USER", "cdcnorm-svc")
    monkeypatch.setenv("CDCNORM_T_KAFKA_PW", KAFKA_PASSWORD)


def faust_aiokafka_kwargs(cfg: PipelineConfig) -> dict[str, Any]:
    """What Faust's aiokafka driver hands to AIOKafkaConsumer/Producer for our credentials."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    return dict(credentials_to_aiokafka_auth(faust_credentials(cfg.broker)))


def build_aiokafka_consumer(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Construct (never start) a real AIOKafkaConsumer: it validates the SASL/TLS arguments."""
    from aiokafka import AIOKafkaConsumer

    async def build() -> dict[str, Any]:
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", **kwargs)
        client = consumer._client
        seen = {
            "security_protocol": client._security_protocol,
            "sasl_mechanism": client._sasl_mechanism,
            "sasl_plain_username": client._sasl_plain_username,
            "sasl_plain_password": client._sasl_plain_password,
            "ssl_context": client._ssl_context,
        }
        await consumer.stop()
        return seen

    return asyncio.run(build())


def build_confluent_consumer(conf: dict[str, Any]) -> None:
    """Construct a real confluent-kafka Consumer: librdkafka rejects unknown or unsupported settings."""
    from confluent_kafka import Consumer

    Consumer({**conf, "group.id": "cdcnorm-security-test", "log_level": 0}).close()


# ----------------------------------------------------------------------------- Kafka


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_reaches_confluent_kafka_and_aiokafka(protocol: str, mechanism: str, tls_files: TlsFiles) -> None:
    extra = {"ssl_cafile": str(tls_files.ca)} if protocol == "SASL_SSL" else {}
    cfg = config(sasl(protocol, mechanism, **extra))

    conf = cfg.broker.librdkafka()
    assert conf["bootstrap.servers"] == "b1:9096,b2:9096"
    assert conf["security.protocol"] == protocol
    assert conf["sasl.mechanism"] == mechanism
    assert conf["sasl.username"] == "cdcnorm-svc"
    assert conf["sasl.password"] == KAFKA_PASSWORD
    if protocol == "SASL_SSL":
        assert conf["ssl.ca.location"] == str(tls_files.ca)
        assert conf["ssl.endpoint.identification.algorithm"] == "https"
    else:
        assert not any(k.startswith("ssl.") for k in conf)
    build_confluent_consumer(conf)

    faust_kwargs = faust_aiokafka_kwargs(cfg)
    assert faust_kwargs["security_protocol"] == protocol
    assert faust_kwargs["sasl_mechanism"] == mechanism
    assert faust_kwargs["sasl_plain_username"] == "cdcnorm-svc"
    assert faust_kwargs["sasl_plain_password"] == KAFKA_PASSWORD
    assert (faust_kwargs["ssl_context"] is not None) == (protocol == "SASL_SSL")

    direct = cfg.broker.aiokafka_auth()
    assert {k: v for k, v in direct.items() if k != "ssl_context"} == {
        k: v for k, v in faust_kwargs.items() if k != "ssl_context"
    }
    seen = build_aiokafka_consumer(direct)
    assert seen["security_protocol"] == protocol
    assert seen["sasl_mechanism"] == mechanism
    assert seen["sasl_plain_password"] == KAFKA_PASSWORD
    assert isinstance(seen["ssl_context"], ssl.SSLContext) == (protocol == "SASL_SSL")
    print(f"{protocol}/{mechanism}: librdkafka keys {sorted(conf)}; aiokafka keys {sorted(faust_kwargs)}")


def test_ssl_with_client_certificate_and_encrypted_key(tls_files: TlsFiles, tmp_path: Path) -> None:
    key_pw = tmp_path / "key-password"
    key_pw.write_text(KEY_PASSWORD + "\n")
    cfg = config(
        {
            "security_protocol": "SSL",
            "ssl_cafile": str(tls_files.ca),
            "ssl_certfile": str(tls_files.client_cert),
            "ssl_keyfile": str(tls_files.client_key_encrypted),
            "ssl_password": f"file:{key_pw}",
        }
    )
    conf = cfg.broker.librdkafka()
    assert conf["security.protocol"] == "SSL"
    assert conf["ssl.certificate.location"] == str(tls_files.client_cert)
    assert conf["ssl.key.location"] == str(tls_files.client_key_encrypted)
    assert conf["ssl.key.password"] == KEY_PASSWORD
    assert "sasl.mechanism" not in conf
    build_confluent_consumer(conf)

    faust_kwargs = faust_aiokafka_kwargs(cfg)
    assert faust_kwargs["security_protocol"] == "SSL"
    context = faust_kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs(), "the test CA is loaded"
    seen = build_aiokafka_consumer(cfg.broker.aiokafka_auth())
    assert seen["security_protocol"] == "SSL" and isinstance(seen["ssl_context"], ssl.SSLContext)


def test_wrong_key_password_is_a_config_error_without_the_password(tls_files: TlsFiles) -> None:
    cfg = config(
        {
            "security_protocol": "SSL",
            "ssl_certfile": str(tls_files.client_cert),
            "ssl_keyfile": str(tls_files.client_key_encrypted),
            "ssl_password": "not-the-key-pw-Qx",
        }
    )
    with pytest.raises(ConfigError) as info:
        faust_credentials(cfg.broker)
    assert info.value.key == "broker.ssl_certfile"
    assert "not-the-key-pw-Qx" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is not None  # suppressed, not chained


def test_hostname_check_can_be_turned_off_for_both_clients(tls_files: TlsFiles) -> None:
    cfg = config({"security_protocol": "SSL", "ssl_cafile": str(tls_files.ca), "ssl_check_hostname": False})
    assert cfg.broker.librdkafka()["ssl.endpoint.identification.algorithm"] == "none"
    context = cfg.broker.ssl_context()
    assert context is not None and context.check_hostname is False
    assert "no-hostname-check" in cfg.broker.describe_security()


def test_plaintext_has_no_credentials() -> None:
    cfg = config({"bootstrap_servers": "127.0.0.1:9092"})
    assert faust_credentials(cfg.broker) is None
    assert cfg.broker.aiokafka_auth() == {"security_protocol": "PLAINTEXT"}
    assert cfg.broker.librdkafka() == {
        "bootstrap.servers": "127.0.0.1:9092", "security.protocol": "PLAINTEXT", "client.id": "cdcnorm",
    }


@pytest.mark.parametrize(
    ("broker", "expected"),
    [
        ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism set but security_protocol is PLAINTEXT"),
        ({"security_protocol": "SSL", "sasl_username": "u", "sasl_password": "x"}, "sasl_username, sasl_password set"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": "x"}, "sasl_mechanism is required"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"}, "are required with SASL"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_username": "u", "sasl_password": "x"},
         "Input should be"),
        ({"security_protocol": "TLS"}, "Input should be"),
    ],
)
def test_inconsistent_kafka_security_is_rejected(broker: dict[str, Any], expected: str) -> None:
    exc = error(broker)
    assert exc.key.startswith("broker")
    assert expected in exc.reason
    assert "'x'" not in str(exc)


def test_tls_files_without_tls_are_rejected(tls_files: TlsFiles) -> None:
    exc = error(sasl("SASL_PLAINTEXT", "PLAIN", ssl_cafile=str(tls_files.ca)))
    assert exc.key == "broker" and "ssl_cafile set but security_protocol is SASL_PLAINTEXT" in exc.reason
    exc = error({"security_protocol": "SSL", "ssl_keyfile": str(tls_files.client_key)})
    assert "ssl_keyfile needs ssl_certfile" in exc.reason
    exc = error({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"})
    assert exc.key == "broker.ssl_cafile" and "does not exist" in exc.reason


# ----------------------------------------------------------------------------- Redis


def test_redis_password_and_acl_user_reach_the_client_kwargs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_T_REDIS_USER", "cdcnorm-app")
    pw = tmp_path / "redis-pw"
    pw.write_text("redis-pw-Lk29\n")
    cfg = config(redis={"url": "redis://cache:6379/2", "username": "${CDCNORM_T_REDIS_USER}", "password": f"file:{pw}"})
    kwargs = cfg.redis.client_kwargs()
    assert kwargs["username"] == "cdcnorm-app"
    assert kwargs["password"] == "redis-pw-Lk29"
    assert not any(k.startswith("ssl") for k in kwargs)
    assert cfg.redis.describe_security() == "auth=acl user=cdcnorm-app"

    from service.state import connect_redis

    client = connect_redis(cfg.redis)
    conn = client.connection_pool.connection_kwargs
    assert conn["username"] == "cdcnorm-app" and conn["password"] == "redis-pw-Lk29" and conn["db"] == 2
    assert client.connection_pool.connection_class.__name__ == "Connection"
    client.close()


def test_tls_settings_reach_the_client_kwargs(tls_files: TlsFiles) -> None:
    """Holds with or without a TLS-capable redis-server (test_redis_security connects for real)."""
    cfg = config(
        redis={
            "url": "rediss://cache.example:6380/0",
            "password": "${CDCNORM_T_KAFKA_PW}",
            "ssl_cafile": str(tls_files.ca),
            "ssl_certfile": str(tls_files.client_cert),
            "ssl_keyfile": str(tls_files.client_key_encrypted),
            "ssl_password": KEY_PASSWORD,
        }
    )
    kwargs = cfg.redis.client_kwargs()
    assert kwargs == {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "password": KAFKA_PASSWORD,
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": str(tls_files.ca),
        "ssl_certfile": str(tls_files.client_cert),
        "ssl_keyfile": str(tls_files.client_key_encrypted),
        "ssl_password": KEY_PASSWORD,
    }
    from service.state import connect_redis

    client = connect_redis(cfg.redis)
    pool = client.connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"
    conn: Any = pool.make_connection()
    assert (conn.ca_certs, conn.certfile, conn.keyfile) == (
        str(tls_files.ca), str(tls_files.client_cert), str(tls_files.client_key_encrypted)
    )
    assert conn.cert_reqs == ssl.CERT_REQUIRED and conn.check_hostname is True
    client.close()
    assert cfg.redis.describe_security() == f"auth=password tls ca={tls_files.ca} client-cert"


@pytest.mark.parametrize(
    ("redis", "key", "expected"),
    [
        ({"url": "redis://:inline-pw-Rt5@cache:6379/0"}, "redis.url", "put it in redis.password"),
        ({"url": "rediss://app:inline-pw-Rt5@cache:6379/0"}, "redis.url", "put it in redis.password"),
        ({"url": "redis://cache:6379/0", "ssl_cafile": "CA"}, "redis", "set but the url is not rediss://"),
        ({"url": "rediss://cache:6379/0", "ssl_certfile": "CERT"}, "redis", "ssl_certfile and ssl_keyfile go together"),
        ({"username": "app"}, "redis", "username needs a password"),
        ({"url": "redis://app@cache:6379/0", "username": "app", "password": "x"}, "redis", "given twice"),
        ({"url": "http://cache:6379"}, "redis.url", "expected a redis://"),
    ],
)
def test_inconsistent_redis_security_is_rejected(
    redis: dict[str, Any], key: str, expected: str, tls_files: TlsFiles
) -> None:
    redis = {k: {"CA": str(tls_files.ca), "CERT": str(tls_files.client_cert)}.get(v, v) for k, v in redis.items()}
    exc = error(redis=redis)
    assert exc.key == key
    assert expected in exc.reason
    assert "inline-pw-Rt5" not in str(exc)
