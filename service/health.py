"""Liveness and readiness of the worker.

* ``/healthz`` (liveness): the process runs and no fatal error stopped it.
* ``/readyz`` (readiness): the Faust app started, joined its consumer group, Redis answers, the
  metadata log was read to its end (:mod:`service.metadata_log`) and no fatal error happened.
  During a Redis outage the worker pauses and is not ready.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["HealthState", "health_report", "redis_ping"]


class HealthState(Protocol):
    """What the endpoints read (see :class:`service.worker_types.WorkerState`)."""

    started: bool
    joined: bool
    redis_ok: bool
    fatal: BaseException | None
    last_redis_error: str | None
    assigned: set[Any]

    @property
    def metadata_error(self) -> str | None: ...

    @property
    def live(self) -> bool: ...

    @property
    def ready(self) -> bool: ...


def health_report(state: HealthState) -> dict[str, Any]:
    """The JSON body of ``/readyz``: ``ready`` plus the flags it is made of."""
    return {
        "ready": state.ready,
        "live": state.live,
        "started": state.started,
        "joined": state.joined,
        "assigned_partitions": sorted(f"{tp.topic}[{tp.partition}]" for tp in state.assigned),
        "redis": state.redis_ok,
        "redis_error": None if state.redis_ok else state.last_redis_error,
        "metadata_log": state.metadata_error is None,
        "metadata_log_error": state.metadata_error,
        "fatal": None if state.fatal is None else f"{type(state.fatal).__name__}: {state.fatal}",
    }


async def redis_ping(client: Any, timeout_s: float = 1.0) -> bool:
    """True when Redis answers PING (run off the event loop; never raises)."""

    def ping() -> bool:
        try:
            return bool(client.ping())
        except Exception:
            return False

    try:
        return await asyncio.wait_for(asyncio.to_thread(ping), timeout_s + 1.0)
    except TimeoutError:
        return False
