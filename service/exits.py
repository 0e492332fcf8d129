"""How the worker process ends when it does not end well: a start that fails, and a stop that
takes too long.

**A failed start** (no broker answers the bootstrap, a topic cannot be created): Faust logs the
exception with its traceback and the process would exit 1, or 0 once its own ``SystemExit`` is
swallowed. :class:`StartFailure` keeps the exception and drops the traceback from Faust's line;
the worker then logs one CRITICAL line naming it and exits with :data:`EXIT_FATAL`, as for any
fatal error.

**The stop deadline**: a stop (SIGTERM/SIGINT) that takes longer than
``worker.shutdown_timeout_s`` ends the process.

Faust stops in steps (consumer: last commit and leaving the group; the app's services; the
producer's flush; the event loop's tasks). One of them can wait on a broker that no longer
answers, e.g. a commit to a group coordinator that aiokafka has just marked dead. Kubernetes
would SIGKILL such a pod after its ``terminationGracePeriodSeconds`` with nothing in the log.
The deadline ends it earlier and says why: the coroutine stacks of the tasks still running go
to the log, then the process exits with :data:`EXIT_STOP_DEADLINE`.

Nothing is lost by that exit: the worker commits a source offset only after every output record
of the messages before it was acknowledged, so what was not committed is read again by the
partition's next owner (at least once, in order).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("cdcnorm.worker")

EXIT_FATAL = 3
"""Exit code of a worker stopped by a fatal error, or whose start failed."""

EXIT_STOP_DEADLINE = 4
"""Exit code of a worker whose stop did not finish within ``worker.shutdown_timeout_s``."""


def running_tasks(loop: asyncio.AbstractEventLoop, limit: int = 20) -> str:
    """The stacks of the loop's unfinished tasks (at most ``limit``), for the log. Read from
    another thread while the loop is stuck: a task that changes meanwhile is skipped."""
    out = io.StringIO()
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    except RuntimeError:  # the set changed while it was copied
        return "(the tasks changed while being listed)"
    for task in tasks[:limit]:
        try:
            task.print_stack(limit=8, file=out)
        except Exception as exc:
            out.write(f"{task.get_name()}: stack unavailable ({exc})\n")
    if len(tasks) > limit:
        out.write(f"... and {len(tasks) - limit} more tasks\n")
    return out.getvalue()


class StopDeadline:
    """Started when the stop begins; :meth:`cancel` once the process is about to return."""

    def __init__(self, timeout_s: float, loop: asyncio.AbstractEventLoop) -> None:
        self.timeout_s = timeout_s
        self._loop = loop
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.timeout_s, self._expired)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expired(self) -> None:
        log.error(
            "worker stop did not finish within worker.shutdown_timeout_s=%ss; exiting with code %d "
            "(offsets not committed are read again by the partitions' next owners). Still running:\n%s",
            self.timeout_s, EXIT_STOP_DEADLINE, running_tasks(self._loop),
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(EXIT_STOP_DEADLINE)


class StartFailure(logging.Filter):
    """On Faust's worker logger: the exception its start failed with (``error``), logged without
    its traceback (Faust logs it as ``Error: <exception>``). Once ``started()`` is true the
    filter lets every record through as it is: an error of a running worker keeps its traceback
    and is no start failure."""

    def __init__(self, started: Callable[[], bool] = lambda: False) -> None:
        super().__init__()
        self.error: BaseException | None = None
        self._started = started

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno >= logging.ERROR and not self._started():
            self.error = record.exc_info[1]
            record.exc_info = None
            record.exc_text = None
        return True


def describe_start_failure(error: BaseException | None) -> str:
    """One line for the log: the exception's class and message, or that Faust gave none."""
    if error is None:
        return "the worker could not start (see the lines above)"
    text = str(error)
    name = type(error).__name__
    return f"the worker could not start: {text if text.startswith(name) else f'{name}: {text}'}"
