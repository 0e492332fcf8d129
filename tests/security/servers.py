"""Throwaway secured servers for the security tests: a test CA with server and client
certificates (``openssl``), and ``redis-server`` with AUTH/ACL and TLS on its own port.

Like :mod:`service.local`, every server binds to 127.0.0.1 on a free port and is stopped by
the :class:`~service.local.LocalProcess` that started it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.local import LocalProcess, free_port, wait_for

__all__ = ["TlsFiles", "make_tls_files", "start_redis_server"]


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1/localhost, and a client
    certificate whose key exists in clear and encrypted with :attr:`key_password`."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path
    key_password: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_tls_files(directory: Path, key_password: str) -> TlsFiles:
    """Create the CA and the certificates with the ``openssl`` command (EC P-256, 2 days)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is not installed")
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"), "-days", "2",
             "-subj", "/CN=cdcnorm test CA")
    exts = {
        "server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        "client": "extendedKeyUsage=clientAuth\n",
    }
    for name, ext in exts.items():
        (d / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + ext)
        _openssl("req", *ec, "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
                 "-subj", f"/CN=cdcnorm test {name}")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-out", str(d / f"{name}.pem"), "-days", "2", "-extfile", str(d / f"{name}.ext"))
    _openssl("pkey", "-in", str(d / "client.key"), "-aes256", "-passout", f"pass:{key_password}",
             "-out", str(d / "client-encrypted.key"))
    return TlsFiles(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key",
                    d / "client-encrypted.key", key_password)


def start_redis_server(
    args: list[str],
    log_dir: Path,
    ping_kwargs: dict[str, Any],
    *,
    tls: bool = False,
    timeout_s: float = 10.0,
) -> LocalProcess:
    """``redis-server`` on 127.0.0.1 with extra ``args`` (``--requirepass``, ``--user``, ``--tls-*``).

    With ``tls`` the server listens with TLS only (``--port 0 --tls-port N``). Ready when a
    client built with ``ping_kwargs`` gets PONG. :attr:`LocalProcess.address` is the URL
    (``redis://`` or ``rediss://``) without credentials.
    """
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    ports = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
    cmd = [binary, *ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", *args]
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"redis-{port}.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"{'rediss' if tls else 'redis'}://127.0.0.1:{port}/0"
    local = LocalProcess("redis", proc, url, log_path)

    def ready() -> bool:
        if not local.running:
            return True
        client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, **ping_kwargs)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    try:
        wait_for(ready, timeout_s, "secured redis-server")
        if not local.running:
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {local.log_tail()}")
    except BaseException:
        local.stop()
        raise
    return local
