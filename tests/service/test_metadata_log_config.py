"""The ``metadata_log`` section and its wiring into the worker (no broker needed)."""

from __future__ import annotations

import pytest

from service.config import parse_config
from service.health import health_report
from service.worker_types import WorkerState
from transforms.errors import ConfigError

TOPICS = [{"pattern": ".*", "format": "canal-json"}]


def test_defaults_name_the_topic_after_the_app_id() -> None:
    cfg = parse_config({"worker": {"app_id": "erp-normalizer"}, "topics": TOPICS})
    assert cfg.metadata_log.enabled and cfg.metadata_log.replication_factor == -1
    assert cfg.metadata_log.timeout_s == 5.0
    assert cfg.metadata_topic == "erp-normalizer.metadata"
    assert parse_config({"worker": {"app_id": "a b/c"}, "topics": TOPICS}).metadata_topic == "a_b_c.metadata"
    named = parse_config({"metadata_log": {"topic": "shared.meta", "replication_factor": 3}, "topics": TOPICS})
    assert named.metadata_topic == "shared.meta" and named.metadata_log.replication_factor == 3


def test_a_pattern_never_consumes_the_metadata_topic() -> None:
    cfg = parse_config({"topics": TOPICS})
    assert cfg.entry_for(cfg.metadata_topic) is None
    assert cfg.entry_for("legacy.orders") is not None
    off = parse_config({"metadata_log": {"enabled": False}, "topics": TOPICS})
    assert off.entry_for(off.metadata_topic) is not None  # without the log it is just a topic


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"topic": "not a topic"}, "metadata_log.topic"),
        ({"timeout_s": 0}, "metadata_log.timeout_s"),
        ({"replication_factor": -2}, "metadata_log.replication_factor"),
        ({"partitions": 4}, "metadata_log.partitions"),
    ],
)
def test_bad_settings_name_their_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"metadata_log": section, "topics": TOPICS})
    assert key in str(raised.value)


def test_readiness_waits_for_the_metadata_log() -> None:
    status: list[str | None] = ["reading metadata log app.metadata"]
    state = WorkerState(started=True, joined=True, metadata_status=lambda: status[0])
    report = health_report(state)
    assert not state.ready and report["metadata_log"] is False
    assert report["metadata_log_error"] == "reading metadata log app.metadata"
    status[0] = None
    assert state.ready and health_report(state)["metadata_log"] is True
    assert WorkerState(started=True, joined=True).ready  # no log (tests, in-memory stores)


def test_min_insync_replicas_is_at_most_the_replication_factor() -> None:
    cfg = parse_config({"metadata_log": {"replication_factor": 3, "min_insync_replicas": 2}, "topics": TOPICS})
    assert cfg.metadata_log.min_insync_replicas == 2
    assert parse_config({"topics": TOPICS}).metadata_log.min_insync_replicas is None  # the broker's default
    assert parse_config({"metadata_log": {"min_insync_replicas": 2}, "topics": TOPICS})  # the broker's replication
    for section, reason in (({"replication_factor": 2, "min_insync_replicas": 3}, "NOT_ENOUGH_REPLICAS"),
                            ({"min_insync_replicas": 0}, "greater than or equal to 1"),
                            ({"replication_factor": 0}, "at least 1")):
        with pytest.raises(ConfigError) as raised:
            parse_config({"metadata_log": section, "topics": TOPICS})
        key = "replication_factor" if "min_insync_replicas" not in section else "min_insync_replicas"
        assert f"metadata_log.{key}" in str(raised.value) and reason in str(raised.value)
