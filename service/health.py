"""Liveness, startup and readiness of the worker.

* ``/healthz`` (liveness): the process runs and no fatal error stopped it.
* ``/startupz`` (the startup probe): the app started and joined its consumer group.
* ``/readyz`` (readiness): the Faust app started, is a member of its consumer group (not during a
  rebalance: ``joined`` is false from the partitions' revocation to their assignment), Redis
  answers, the metadata log was read to its end (:mod:`service.metadata_log`) and no fatal error
  happened. During a Redis outage the worker pauses and is not ready.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["HealthState", "health_report", "redis_ping", "startup_report"]


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


def _fatal(state: HealthState) -> str | None:
    return None if state.fatal is None else f"{type(state.fatal).__name__}: {state.fatal}"


def startup_report(state: HealthState) -> dict[str, Any]:
    """The JSON body of ``/startupz``: ``started`` once the app started and joined its group."""
    fatal = _fatal(state)
    started = state.started and state.joined and fatal is None
    body: dict[str, Any] = {"started": started, "app_started": state.started, "joined": state.joined}
    if not started:
        body["reason"] = (f"fatal error: {fatal}" if fatal is not None else
                          "starting the app" if not state.started else "joining the consumer group")
    return body


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
        "fatal": _fatal(state),
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
