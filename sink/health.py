"""Liveness and readiness of the sink, and the HTTP server of its metrics port.

* ``/healthz`` (liveness): 503 with the reason when the sink has had records to read, or a
  micro-batch in flight, for ``sink.liveness_stall_seconds`` without committing a micro-batch (a
  hung MERGE or commit, a consumer that no longer fetches what its partitions hold). A sink idle
  because nothing arrives is alive, and so is one whose only backlog is on paused tables (an
  operator has to act on those; a restart would not help).
  A sink retrying a micro-batch whose writes failed (``sink.write_retry``) is alive as long as its
  attempts come back: each failed attempt restarts the stall clock, so a storage outage does not
  get the sink restarted (a restart would not fix the storage), but an attempt that hangs for
  ``sink.liveness_stall_seconds`` does.
* ``/readyz`` (readiness): the Spark session and the consumer are up, the sink is not stopping,
  and its writes succeed: while a micro-batch is being retried it answers 503 with the reason.
* ``/metrics``: the Prometheus metrics (also on ``/``).

"Records to read" comes from the consumer's lag (high watermark minus position): best effort,
since it is only as good as the broker's watermarks (the local Tansu broker's are wrong and
under-report, so there the probe errs on the side of staying alive). A batch in flight counts on
any broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = ["SinkHealth", "serve"]


@dataclass
class SinkHealth:
    """What the probes read; the micro-batch loop updates it (:class:`sink.runner.MicroBatchSink`).

    ``pending`` is true while the sink has something to do: records polled and not yet committed,
    or lag on a partition it reads. ``since`` is when it last made progress, or when it started
    having something to do after being idle, whichever is later.
    """

    stall_seconds: float
    clock: Callable[[], float] = time.monotonic
    started: bool = False
    stopping: bool = False
    pending: bool = False
    since: float = field(default=0.0)
    last_commit: float | None = None  # wall-clock time of the last committed micro-batch
    lag: int | None = None  # records to read on the partitions the sink reads (None: unknown)
    in_flight: int = 0  # records polled, not yet committed
    write_failure: str | None = None  # why the micro-batch being retried failed (None: writes succeed)
    failed_attempts: int = 0  # consecutive failed attempts of that batch
    failing_since: float | None = None  # wall-clock time of its first failure
    next_attempt: float | None = None  # wall-clock time of its next attempt
    _attempted: float = field(default=0.0, repr=False)  # when the last failed attempt came back
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.since = self.clock()
        self._attempted = self.since

    def batch_started(self, records: int) -> None:
        """Records were polled: the sink has work until it commits them."""
        with self._lock:
            self.in_flight = records
            self._set_pending(True)

    def committed(self) -> None:
        """A micro-batch went into Iceberg and its offsets into Kafka: progress."""
        with self._lock:
            self.in_flight = 0
            self.since = self.clock()
            self.last_commit = time.time()
            self.write_failure = self.failing_since = self.next_attempt = None
            self.failed_attempts = 0

    def write_failed(self, reason: str, retry_in: float) -> None:
        """An attempt to write the micro-batch failed (``reason``); the next one is due in
        ``retry_in`` seconds. Not ready until a batch commits; alive, since the attempt came back."""
        with self._lock:
            now = time.time()
            if self.write_failure is None:
                self.failing_since = now
            self.write_failure = reason
            self.failed_attempts += 1
            self.next_attempt = now + retry_in
            self._attempted = self.clock()

    def observe_lag(self, lag: int | None) -> None:
        """The lag after a batch (or an empty poll): pending while it is above zero."""
        with self._lock:
            self.lag = lag
            if not self.in_flight:
                self._set_pending(bool(lag and lag > 0))

    def _set_pending(self, pending: bool) -> None:
        if pending and not self.pending:
            self.since = self.clock()  # the stall clock starts when work appears
        self.pending = pending

    def seconds_since_progress(self) -> float:
        """How long the sink has had work without committing any; 0 when it has none."""
        with self._lock:
            return max(0.0, self.clock() - self.since) if self.pending else 0.0

    def _seconds_without_answer(self) -> float:
        """Like :meth:`seconds_since_progress`, but a failed write attempt counts as an answer."""
        with self._lock:
            return max(0.0, self.clock() - max(self.since, self._attempted)) if self.pending else 0.0

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        stalled = self.seconds_since_progress()
        quiet = self._seconds_without_answer()
        live = quiet <= self.stall_seconds
        body: dict[str, Any] = {
            "live": live,
            "seconds_since_progress": round(stalled, 1),
            "stall_seconds": self.stall_seconds,
            "in_flight": self.in_flight,
            "lag": self.lag,
        }
        if not live:
            work = f"a micro-batch of {self.in_flight} records in flight" if self.in_flight else f"lag {self.lag}"
            body["reason"] = (
                f"no progress for {quiet:.0f}s with {work} (sink.liveness_stall_seconds: {self.stall_seconds:g})"
            )
        if self.write_failure is not None:
            body["write_failing"] = True  # alive while its attempts come back (see the module doc)
        return live, body

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            failure, attempts, since, due = self.write_failure, self.failed_attempts, self.failing_since, self.next_attempt
        ready = self.started and not self.stopping and failure is None
        body: dict[str, Any] = {"ready": ready, "started": self.started, "stopping": self.stopping}
        if failure is not None and since is not None and due is not None:
            body["write_failure"] = failure
            body["failed_attempts"] = attempts
            body["failing_since"] = since
            body["reason"] = (
                f"writing a micro-batch failed {attempts} time(s) in {time.time() - since:.0f}s: {failure}; "
                f"its Kafka offsets are not committed, next attempt in {max(0.0, due - time.time()):.0f}s"
            )
        if self.stopping or not self.started:
            body["reason"] = "stopping" if self.stopping else "starting (Spark session, consumer)"
        if self.last_commit is not None:
            body["last_commit"] = self.last_commit
        return ready, body


def serve(port: int, health: SinkHealth, addr: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` from a daemon thread."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/metrics", "/"):
                self._send(HTTPStatus.OK, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, body = health.liveness() if path == "/healthz" else health.readiness()
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._send(status, orjson.dumps(body), "application/json")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds: not worth a log line each

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="cdcnorm-sink-http", daemon=True).start()
    return server
