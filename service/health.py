"""Liveness, startup and readiness of the worker.

* ``/healthz`` (liveness): no fatal error stopped the worker, and it is not stalled: it has not had
  work for ``worker.liveness_stall_seconds`` without making progress (:class:`Progress`). Work is
  records on a partition it owns that it has not fetched yet (the lag, refreshed from the broker
  every :data:`service.app.LAG_REFRESH_SECONDS`, also while nothing flows), or source messages it
  fetched whose output is not acknowledged yet; progress is a message processed or a batch's
  output acknowledged. A worker idle because nothing arrives stays alive, and so does one waiting
  out a Redis outage as long as its attempts come back (a restart would not bring Redis back;
  ``/readyz`` says not ready meanwhile).
* ``/startupz`` (the startup probe): the app started and joined its consumer group.
* ``/readyz`` (readiness): the Faust app started, is a member of its consumer group (not during a
  rebalance: ``joined`` is false from the partitions' revocation to their assignment), Redis
  answers, the metadata log was read to its end (:mod:`service.metadata_log`) and no fatal error
  happened. During a Redis outage the worker pauses and is not ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["HealthState", "Progress", "health_report", "liveness_report", "redis_ping", "startup_report"]


@dataclass
class Progress:
    """The worker's stall clock: what ``/healthz`` and ``cdcnorm_seconds_since_progress`` read.

    The batch processor (:class:`service.batches.BatchProcessor`) reports the messages it fetched
    and whose output is not acknowledged yet (:meth:`observe_unacked`), each message processed or
    acknowledged (:meth:`progressed`) and each state-store retry that came back (:meth:`retried`);
    the lag refresh reports the records not fetched yet (:meth:`observe_lag`). ``since`` is when
    the worker last made progress, or when it started having work after being idle, whichever is
    later. Everything runs on the worker's event loop (no lock), as the web pages do.
    """

    stall_seconds: float = 600.0
    clock: Callable[[], float] = time.monotonic
    lag: int | None = None  # records not fetched yet on the partitions the worker owns (None: unknown)
    unacked: int = 0  # source messages fetched whose output is not acknowledged yet
    since: float = field(default=0.0)
    _answered: float = field(default=0.0, repr=False)  # when the last failed state-store attempt came back

    def __post_init__(self) -> None:
        self.since = self._answered = self.clock()

    @property
    def pending(self) -> bool:
        """Whether the worker has work: records to fetch, or fetched messages not acknowledged."""
        return bool(self.lag) or self.unacked > 0

    def progressed(self) -> None:
        """A message was processed, or a batch's output acknowledged."""
        self.since = self.clock()

    def retried(self) -> None:
        """An attempt at a state-store operation came back failed: the worker waits out an outage.
        Not progress (``seconds_since_progress`` goes on), but an answer: alive."""
        self._answered = self.clock()

    def observe_lag(self, lag: int | None) -> None:
        """The records not fetched yet on the owned partitions (None: unknown, e.g. none owned)."""
        was = self.pending
        self.lag = max(0, lag) if lag is not None else None
        self._work_appeared(was)

    def observe_unacked(self, unacked: int) -> None:
        """The source messages fetched whose output is not acknowledged yet."""
        was = self.pending
        self.unacked = max(0, unacked)
        self._work_appeared(was)

    def _work_appeared(self, was: bool) -> None:
        if not was and self.pending:
            self.since = self.clock()  # the stall clock starts when work appears

    def seconds_since_progress(self) -> float:
        """How long the worker has had work without making progress; 0 when it has none."""
        return max(0.0, self.clock() - self.since) if self.pending else 0.0

    def stalled(self) -> str | None:
        """Why the worker is stalled (the liveness probe fails), or None."""
        if not self.pending:
            return None
        quiet = self.clock() - max(self.since, self._answered)
        if quiet <= self.stall_seconds:
            return None
        work = []
        if self.lag:
            work.append(f"lag {self.lag}")
        if self.unacked:
            work.append(f"{self.unacked} fetched messages not acknowledged")
        return (f"no progress for {quiet:.0f}s with {' and '.join(work)} "
                f"(worker.liveness_stall_seconds: {self.stall_seconds:g})")


class HealthState(Protocol):
    """What the endpoints read (see :class:`service.worker_types.WorkerState`)."""

    started: bool
    joined: bool
    redis_ok: bool
    fatal: BaseException | None
    last_redis_error: str | None
    assigned: set[Any]
    progress: Progress

    @property
    def metadata_error(self) -> str | None: ...

    @property
    def live(self) -> bool: ...

    @property
    def ready(self) -> bool: ...


def _fatal(state: HealthState) -> str | None:
    return None if state.fatal is None else f"{type(state.fatal).__name__}: {state.fatal}"


def liveness_report(state: HealthState) -> dict[str, Any]:
    """The JSON body of ``/healthz``: ``live``, the stall clock and, when not live, the ``reason``."""
    progress = state.progress
    reason = progress.stalled()
    fatal = _fatal(state)
    body: dict[str, Any] = {
        "live": fatal is None and reason is None,
        "seconds_since_progress": round(progress.seconds_since_progress(), 1),
        "stall_seconds": progress.stall_seconds,
        "lag": progress.lag,
        "unacked": progress.unacked,
    }
    if fatal is not None:
        body["reason"] = f"fatal error: {fatal}"
    elif reason is not None:
        body["reason"] = reason
    return body


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
