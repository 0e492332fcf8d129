"""Fixtures of the security tests: test certificates and secured redis-servers (own ports)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.security.servers import TlsFiles, make_tls_files, start_redis_server

# Distinctive secrets: a test fails if any of them shows up where it must not.
REDIS_PASSWORD = "redis-pw-Zq81vX"  # requirepass (the `default` user)
REDIS_ACL_USER = "cdcnorm-app"
REDIS_ACL_PASSWORD = "acl-pw-Kd03mT"
KEY_PASSWORD = "key-pw-Hs52bN"  # encrypts the client key


@dataclass(frozen=True)
class SecuredRedis:
    """A running secured redis-server: its URL (no credentials) and what it accepts."""

    url: str
    password: str
    acl_user: str
    acl_password: str


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    try:
        return make_tls_files(tmp_path_factory.mktemp("tls"), KEY_PASSWORD)
    except (RuntimeError, OSError) as exc:  # pragma: no cover - no openssl
        pytest.skip(f"cannot make test certificates: {exc}")


def _acl(user: str, password: str) -> list[str]:
    # the ACL user may only touch cdcnorm keys: proves the worker's key_prefix fits an ACL
    return ["--user", user, "on", f">{password}", "~cdcnorm*", "+@all"]


@pytest.fixture(scope="session")
def auth_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRedis]:
    """redis-server with ``--requirepass`` and an ACL user, plain TCP."""
    log_dir = Path(tmp_path_factory.mktemp("redis-auth"))
    try:
        server = start_redis_server(
            ["--requirepass", REDIS_PASSWORD, *_acl(REDIS_ACL_USER, REDIS_ACL_PASSWORD)],
            log_dir,
            {"password": REDIS_PASSWORD},
        )
    except RuntimeError as exc:  # pragma: no cover
        pytest.skip(f"cannot start redis-server with AUTH: {exc}")
    try:
        yield SecuredRedis(server.address, REDIS_PASSWORD, REDIS_ACL_USER, REDIS_ACL_PASSWORD)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[SecuredRedis]:
    """redis-server with TLS only, client certificates required, ``--requirepass`` and an ACL user.

    Skipped when this redis-server is built without TLS.
    """
    log_dir = Path(tmp_path_factory.mktemp("redis-tls"))
    args = [
        "--tls-cert-file", str(tls_files.server_cert), "--tls-key-file", str(tls_files.server_key),
        "--tls-ca-cert-file", str(tls_files.ca), "--tls-auth-clients", "yes",
        "--requirepass", REDIS_PASSWORD, *_acl(REDIS_ACL_USER, REDIS_ACL_PASSWORD),
    ]
    ping = {
        "password": REDIS_PASSWORD, "ssl_ca_certs": str(tls_files.ca),
        "ssl_certfile": str(tls_files.client_cert), "ssl_keyfile": str(tls_files.client_key),
    }
    try:
        server = start_redis_server(args, log_dir, ping, tls=True)
    except (RuntimeError, TimeoutError) as exc:
        logs = "\n".join(p.read_text(errors="replace") for p in log_dir.glob("*.log"))
        if "tls" in logs.lower() and ("not compiled" in logs.lower() or "bad directive" in logs.lower()):
            pytest.skip("this redis-server has no TLS support (see test_tls_settings_reach_the_client_kwargs)")
        raise RuntimeError(f"TLS redis-server did not start: {exc}\n{logs[-2000:]}") from exc
    try:
        yield SecuredRedis(server.address, REDIS_PASSWORD, REDIS_ACL_USER, REDIS_ACL_PASSWORD)
    finally:
        server.stop()
