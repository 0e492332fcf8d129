"""Redis AUTH, ACL users and TLS against real redis-servers on their own ports (``-m integration``).

The credentials travel the way the worker's do: pipeline config → ``RedisConfig`` →
``service.state.connect_redis`` → the stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from service.config import RedisConfig, parse_config
from service.state import RedisMetadataStore, check_redis, connect_redis
from tests.security.conftest import SecuredRedis
from tests.security.servers import TlsFiles
from transforms.errors import StateStoreError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def redis_config(**settings: Any) -> RedisConfig:
    raw = {"topics": [{"name": "src", "format": "canal-json"}], "redis": {"key_prefix": "cdcnorm:sec:", **settings}}
    return parse_config(raw).redis


def round_trip(config: RedisConfig) -> None:
    """The metadata store writes and reads a document through the configured client."""
    client = connect_redis(config)
    try:
        check_redis(client, config)
        store = RedisMetadataStore(client, config.key_prefix, 0.0)
        store.put("security-test", "doc", {"ok": True})
        assert store.get("security-test", "doc") == {"ok": True}
    finally:
        client.close()


def refused(config: RedisConfig) -> str:
    client = connect_redis(config)
    try:
        with pytest.raises(StateStoreError) as info:
            check_redis(client, config)
        return str(info.value)
    finally:
        client.close()


def test_requirepass_from_a_secret_file_reaches_the_client(auth_redis: SecuredRedis, tmp_path: Path) -> None:
    secret = tmp_path / "redis-password"
    secret.write_text(auth_redis.password + "\n")
    round_trip(redis_config(url=auth_redis.url, password=f"file:{secret}"))

    wrong = refused(redis_config(url=auth_redis.url, password="wrong-pw-Nv62"))
    assert "rejected the credentials of user 'default'" in wrong and "check redis.username and redis.password" in wrong
    assert "wrong-pw-Nv62" not in wrong and auth_redis.password not in wrong
    missing = refused(redis_config(url=auth_redis.url))
    assert "rejected the credentials" in missing
    print(f"right password: round trip ok; wrong password: {wrong}; none: {missing}")


def test_acl_user_from_the_environment(auth_redis: SecuredRedis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_T_REDIS_USER", auth_redis.acl_user)
    monkeypatch.setenv("CDCNORM_T_REDIS_PW", auth_redis.acl_password)
    config = redis_config(url=auth_redis.url, username="${CDCNORM_T_REDIS_USER}", password="${CDCNORM_T_REDIS_PW}")
    round_trip(config)

    # the ACL allows only cdcnorm* keys: a key outside it is refused, so the user really is in use
    client = connect_redis(config)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set("outside-the-acl", 1)
    client.close()

    wrong = refused(redis_config(url=auth_redis.url, username=auth_redis.acl_user, password=auth_redis.password))
    assert f"rejected the credentials of user '{auth_redis.acl_user}'" in wrong
    assert auth_redis.password not in wrong


def test_store_errors_name_no_secret(auth_redis: SecuredRedis) -> None:
    config = redis_config(url=auth_redis.url, password="wrong-pw-Nv62")
    client = connect_redis(config)
    store = RedisMetadataStore(client, config.key_prefix, 0.0)
    with pytest.raises(StateStoreError) as info:
        store.get("security-test", "doc")
    client.close()
    assert "AuthenticationError" in str(info.value)
    assert "wrong-pw-Nv62" not in str(info.value)


def test_tls_with_client_certificate_and_auth(tls_redis: SecuredRedis, tls_files: TlsFiles, tmp_path: Path) -> None:
    key_pw = tmp_path / "key-password"
    key_pw.write_text(tls_files.key_password)
    good = {
        "url": tls_redis.url,
        "username": tls_redis.acl_user,
        "password": tls_redis.acl_password,
        "ssl_cafile": str(tls_files.ca),
        "ssl_certfile": str(tls_files.client_cert),
        "ssl_keyfile": str(tls_files.client_key_encrypted),
        "ssl_password": f"file:{key_pw}",
    }
    round_trip(redis_config(**good))

    no_cert = {k: v for k, v in good.items() if k not in ("ssl_certfile", "ssl_keyfile", "ssl_password")}
    message = refused(redis_config(**no_cert))
    assert message.startswith("TLS with Redis at rediss://")  # the server drops the handshake
    untrusted = refused(redis_config(**{**good, "ssl_cafile": None}))
    assert untrusted.startswith("TLS with") and "certificate verify failed" in untrusted
    plain = refused(redis_config(**{**no_cert, "url": tls_redis.url.replace("rediss://", "redis://"), "ssl_cafile": None}))
    assert "does not answer" in plain
    for text in (message, untrusted, plain):
        assert tls_redis.acl_password not in text and tls_files.key_password not in text
    print(f"mutual TLS + ACL: ok; without client cert: {message}; untrusted CA: {untrusted}")
