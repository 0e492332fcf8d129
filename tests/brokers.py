"""Which broker the integration, fault and compatibility tests run on.

``CDCNORM_TEST_BROKER`` chooses: ``kafka`` (the default, and what CI runs: Apache Kafka itself,
one KRaft node per session, :mod:`service.local_kafka`) or ``tansu`` (the light broker
``cdcnorm up`` starts by default; a quick local run). Tests that are about one broker in
particular (the Tansu smoke tests, the Kafka cluster faults) start that one whatever this says.
"""

from __future__ import annotations

import os
from pathlib import Path

from service.local import BROKERS, LocalBroker, start_broker

__all__ = ["TEST_BROKER", "start_test_broker"]

TEST_BROKER = os.environ.get("CDCNORM_TEST_BROKER", "kafka")
if TEST_BROKER not in BROKERS:
    raise ValueError(f"CDCNORM_TEST_BROKER={TEST_BROKER!r}: expected one of {', '.join(BROKERS)}")


def start_test_broker(log_dir: Path) -> LocalBroker:
    """A broker of :data:`TEST_BROKER` for one test or session, logging into ``log_dir``."""
    return start_broker(TEST_BROKER, log_dir=log_dir)
