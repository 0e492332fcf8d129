"""Fault injection for the crash tests: SIGKILL the sink at a named point of a micro-batch.

Inert unless ``CDCNORM_CRASH_POINT`` is set (the crash tests set it in the sink's environment:
``tests/sink/test_sink_integration.py``, ``tests/faults/test_crashes.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading

__all__ = ["CRASH_POINTS", "crash_point"]

log = logging.getLogger("cdcnorm.sink")

_COUNT_LOCK = threading.Lock()  # tables are written from several threads
CRASH_POINTS = frozenset({"mid-merge", "between-table-commits", "after-iceberg-commit", "after-kafka-commit"})


def crash_point(name: str) -> None:
    """SIGKILL this process at the point ``name`` when ``CDCNORM_CRASH_POINT`` names it.

    ``CDCNORM_CRASH_AFTER=N`` skips the first N-1 passes. When the sink leads its own process
    group (started in a new session), the whole group is killed, the Spark JVM included, as a
    machine crash would.

    Points (:data:`CRASH_POINTS`): ``mid-merge`` (inside the Iceberg commit callback, before the
    MERGE runs), ``between-table-commits``, ``after-iceberg-commit`` (before the Kafka offset
    commit), ``after-kafka-commit``.
    """
    if os.environ.get("CDCNORM_CRASH_POINT") != name:
        return
    with _COUNT_LOCK:
        remaining = int(os.environ.get("CDCNORM_CRASH_AFTER", "1")) - 1
        if remaining > 0:
            os.environ["CDCNORM_CRASH_AFTER"] = str(remaining)
            return
    log.warning("crash point %s reached: killing the sink (test fault injection)", name)
    _kill_self()


def _kill_self() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
