"""The worker reaches a Redis that wants TLS with a client certificate and an ACL user
(``-m integration``): every RedisConfig setting must reach the worker's client."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from service.local import wait_for
from tests.security.conftest import SecuredRedis
from tests.security.servers import TlsFiles
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_worker_is_ready_against_tls_and_acl_redis(
    kafka_bootstrap: str, tls_redis: SecuredRedis, tls_files: TlsFiles, tmp_path: Path
) -> None:
    prefix = f"tls{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": kafka_bootstrap, "session_timeout_s": 6},
        "redis": {
            "url": tls_redis.url, "key_prefix": f"cdcnorm:{prefix}:",
            "username": tls_redis.acl_user, "password": "${CDCNORM_T_TLS_REDIS_PW}",
            "ssl_cafile": str(tls_files.ca), "ssl_certfile": str(tls_files.client_cert),
            "ssl_keyfile": str(tls_files.client_key),
        },
        "worker": {"app_id": f"{prefix}-group"},
        "topics": [{"name": f"{prefix}-src", "format": "canal-json"}],
    }
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CDCNORM_T_TLS_REDIS_PW", tls_redis.acl_password)
        worker = WorkerProcess(config, tmp_path)
    try:
        report: dict[str, Any] = {}

        def settled() -> bool:
            if not worker.process.running:
                raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
            report.update(worker.readiness())
            return bool(report.get("started") and report.get("joined"))

        wait_for(settled, 60, "the worker to start and join its group", 0.3)
        print(f"readiness against TLS+ACL Redis: redis={report.get('redis')} error={report.get('redis_error')}")
        assert report["redis"] is True, report.get("redis_error")
    finally:
        worker.stop()
    assert tls_redis.acl_password not in (worker.process.log_path or Path("/dev/null")).read_text(errors="replace")
