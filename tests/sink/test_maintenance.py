"""Table maintenance off the micro-batch's path (sink.maintenance): queued once, one table at a
time in the background, a failure logged and left for the next cadence."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from sink.maintenance import DELETED_KEYS, Maintenance


class DeletedKeys:
    def __init__(self, done: list[str]) -> None:
        self.done = done

    def expire(self) -> None:
        self.done.append("deleted-keys")


class Tables:
    def __init__(self, seconds: float = 0.05, fail: frozenset[str] = frozenset(), gate: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.fail = fail
        self.gate = gate  # set: maintenance may start (the test queues its tables first)
        self.done: list[str] = []
        self.threads: set[str] = set()
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()
        self.deleted_keys = DeletedKeys(self.done)

    def maintain(self, table: tuple[str, str]) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            if self.gate is not None:
                assert self.gate.wait(5)
            time.sleep(self.seconds)
            if table[1] in self.fail:
                raise RuntimeError(f"{table[1]}: ValidationException: found new position deletes")
            self.done.append(table[1])
        finally:
            with self.lock:
                self.running -= 1


def test_due_tables_are_maintained_in_the_background_one_at_a_time() -> None:
    gate = threading.Event()
    tables = Tables(gate=gate)
    maintenance = Maintenance(tables)
    started = time.monotonic()
    # "a" may be taken by the thread at once (then it waits at the gate); "b" is queued while
    # "a" is, whatever the thread does: a table already queued is not queued twice
    for name in ("a", "b", "c", "b"):
        maintenance.submit(("db", name))
    maintenance.submit(DELETED_KEYS)
    assert time.monotonic() - started < 0.05, "submit waited for the maintenance"
    gate.set()
    assert maintenance.drain(5)
    assert tables.done == ["a", "b", "c", "deleted-keys"] and tables.most == 1
    assert tables.threads == {"cdcnorm-maintenance"}
    maintenance.close()


def test_a_failed_maintenance_is_logged_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    tables = Tables(fail=frozenset({"b"}))
    maintenance = Maintenance(tables)
    with caplog.at_level(logging.WARNING, logger="cdcnorm.sink"):
        for name in ("a", "b", "c"):
            maintenance.submit(("db", name))
        assert maintenance.drain(5)
    assert tables.done == ["a", "c"]
    assert "maintenance of db.b failed (tried again at its next cadence): RuntimeError" in caplog.text
    maintenance.close()


def test_close_finishes_the_table_in_hand_and_leaves_the_queue() -> None:
    tables = Tables(seconds=0.3)
    maintenance = Maintenance(tables)
    for name in ("a", "b", "c"):
        maintenance.submit(("db", name))
    time.sleep(0.1)  # a is in hand
    maintenance.close()
    assert tables.done == ["a"] and maintenance.pending == 0
    maintenance.submit(("db", "d"))  # after close: ignored
    assert maintenance.pending == 0
