"""Retrying a micro-batch whose writes failed (sink.retry): which failures are retried, their
reason label and one-line description, the back-off; the write-retry config; without Spark."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError

from sink.config import SinkConfig
from sink.retry import Backoff, TableWriteError, describe_failure, failure_reason, is_retried


def _refused() -> TableWriteError:
    cause = OSError("org.apache.iceberg.exceptions.RuntimeIOException: Failed to create file: /wh/shop/t0/metadata/m0.avro\n"
                    "Caused by: java.io.FileNotFoundException: /wh/shop/t0/metadata/m0.avro (Operation not permitted)")
    try:
        raise TableWriteError("shop.t0", cause) from cause
    except TableWriteError as exc:
        return exc


def test_the_file_systems_refusal_is_named_through_the_table_error() -> None:
    exc = _refused()
    assert exc.table == "shop.t0"
    assert failure_reason(exc) == "permission-denied"
    assert describe_failure(exc) == "java.io.FileNotFoundException: /wh/shop/t0/metadata/m0.avro (Operation not permitted)"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("org.apache.iceberg.exceptions.CommitFailedException: Version 7 already exists", "commit-conflict"),
        ("org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain records", "commit-conflict"),
        ("org.apache.iceberg.exceptions.CommitStateUnknownException: rename failed", "commit-state-unknown"),
        ("java.io.IOException: No space left on device", "no-space"),
        ("org.apache.iceberg.exceptions.CommitFailedException: java.io.IOException: Permission denied", "permission-denied"),
        ("java.io.IOException: Connection reset", "io"),
    ],
)
def test_reasons(text: str, reason: str) -> None:
    assert failure_reason(OSError(text)) == reason


def test_a_kafka_commit_failure_is_retried_with_its_own_reason() -> None:
    exc = KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    assert is_retried(exc) and failure_reason(exc) == "kafka"


def test_programming_errors_are_not_retried() -> None:
    assert is_retried(_refused()) and is_retried(OSError("x"))
    assert not is_retried(TypeError("x")) and not is_retried(KeyError("x"))


def test_backoff_doubles_up_to_its_cap_and_jitter_only_shortens() -> None:
    assert [Backoff(0.5, 4.0, jitter=0.0).delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    jittered = [Backoff(1.0, 60.0).delay(3) for _ in range(200)]
    assert all(3.2 <= d <= 4.0 for d in jittered) and len(set(jittered)) > 1
    assert Backoff(1.0, 60.0, jitter=0.0).delay(10_000) == 60.0


def test_write_retry_config_defaults_and_problems() -> None:
    retry = SinkConfig(topics=["t"]).write_retry
    assert (retry.initial_backoff_seconds, retry.max_backoff_seconds, retry.give_up_after_seconds) == (1.0, 60.0, None)
    with pytest.raises(ValidationError, match="is below initial_backoff_seconds"):
        SinkConfig.model_validate({"topics": ["t"], "write_retry": {"initial_backoff_seconds": 5, "max_backoff_seconds": 2}})
    with pytest.raises(ValidationError, match="not below liveness_stall_seconds"):
        SinkConfig.model_validate({"topics": ["t"], "liveness_stall_seconds": 30, "write_retry": {"max_backoff_seconds": 30}})
    with pytest.raises(ValidationError, match="less than or equal to 240"):
        SinkConfig.model_validate({"topics": ["t"], "write_retry": {"max_backoff_seconds": 300}})
