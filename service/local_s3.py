"""A local S3-compatible object store for the tests: the Versity S3 Gateway (``versitygw``,
Apache-2.0, a Go program), built once from the Go module proxy at a pinned version, serving a
folder through the S3 API (its ``posix`` backend: a bucket is a folder, an object a file).

Why this one: it is a real S3 server that this machine's registries can install (no Docker, no
download outside PyPI, Debian, npm, Maven Central, crates.io and the Go module proxy), small,
and Apache-licensed; MinIO builds from the Go proxy too but is AGPL and far larger. It is for
this machine's tests, never a deployment.

The binary is built into ``<cache>/go/versitygw-<version>/`` (:func:`service.maven.cache_dir`),
under the same lock discipline as the Maven fetches; the build takes a few CPU-minutes once.

>>> S3Server.catalog_properties_for("http://127.0.0.1:7070", "a", "s")["s3.path-style-access"]
'true'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from service.local import free_port, log_tail, stop_process
from service.maven import LocalServiceError, cache_dir

__all__ = ["VERSITYGW", "VERSITYGW_VERSION", "S3Server", "ensure_versitygw", "start_s3_server"]

VERSITYGW = "github.com/versity/versitygw/cmd/versitygw"
VERSITYGW_VERSION = "v1.8.0"
REGION = "us-east-1"


def ensure_versitygw(progress: Callable[[str], None] | None = None) -> Path:
    """The pinned ``versitygw`` binary, built with ``go install`` on first use. Raises
    :class:`LocalServiceError` without Go or when the build fails (its output's last lines)."""
    folder = cache_dir() / "go" / f"versitygw-{VERSITYGW_VERSION}"
    binary = folder / "versitygw"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise LocalServiceError("go not found: the local S3 server is built with the Go toolchain (https://go.dev/dl/)")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if progress:
        progress(f"building {VERSITYGW}@{VERSITYGW_VERSION} from the Go module proxy (once; a few minutes)")
    started = time.monotonic()
    proc = subprocess.run([go, "install", f"{VERSITYGW}@{VERSITYGW_VERSION}"], env={**os.environ, "GOBIN": str(partial)},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise LocalServiceError(f"go install {VERSITYGW}@{VERSITYGW_VERSION} failed (status {proc.returncode}):\n{tail}")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(folder)
    partial.rename(folder)
    if progress:
        progress(f"built versitygw {VERSITYGW_VERSION} in {time.monotonic() - started:.0f}s")
    return binary


@dataclass
class S3Server:
    """A running local S3 server (see the module doc)."""

    endpoint: str
    root: Path
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    log_path: Path
    name: str = "versitygw"

    @staticmethod
    def catalog_properties_for(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
        """Iceberg's ``S3FileIO`` settings for an S3-compatible store at ``endpoint`` (the sink
        passes the same ones to its write tasks' pyarrow)."""
        return {
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": endpoint,
            "s3.path-style-access": "true",
            "s3.access-key-id": access_key,
            "s3.secret-access-key": secret_key,
            "client.region": REGION,
        }

    def catalog_properties(self) -> dict[str, str]:
        return self.catalog_properties_for(self.endpoint, self.access_key, self.secret_key)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.process, timeout_s)


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # an S3 error document (e.g. 403 for an unsigned request): it answers
    except (urllib.error.URLError, OSError):
        return False


def start_s3_server(directory: Path, buckets: tuple[str, ...] = ("lake",), progress: Callable[[str], None] | None = None,
                    timeout_s: float = 30.0) -> S3Server:
    """Serve ``directory/data`` through the S3 API on a free loopback port, with ``buckets``
    made (folders of the posix backend); logs to ``directory/versitygw.log``."""
    binary = ensure_versitygw(progress)
    root = directory / "data"
    for bucket in buckets:
        (root / bucket).mkdir(parents=True, exist_ok=True)
    port = free_port()
    access, secret = "cdcnorm", "cdcnorm-local-secret"
    log_path = directory / "versitygw.log"
    cmd = [str(binary), "--port", f"127.0.0.1:{port}", "--access", access, "--secret", secret, "posix", str(root)]
    with log_path.open("ab") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{port}", root, access, secret, process, log_path)
    deadline = time.monotonic() + timeout_s
    while not _answers(server.endpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise LocalServiceError(f"the local S3 server did not start (log {log_path}):\n{server.log_tail(15)}")
        time.sleep(0.2)
    return server


