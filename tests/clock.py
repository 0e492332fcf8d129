"""A clock the tests move by hand, for the stall clocks of the worker's and the sink's health
(the ``clock`` fixture of tests/conftest.py gives one)."""

from __future__ import annotations

__all__ = ["Clock"]


class Clock:
    """Seconds that pass only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

