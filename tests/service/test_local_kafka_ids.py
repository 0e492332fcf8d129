"""The cluster ids :func:`service.local_kafka.start_kafka` formats its nodes with."""

from __future__ import annotations

import base64
import uuid

import pytest

from service import local_kafka
from service.local_kafka import new_cluster_id


def test_a_cluster_id_is_a_uuid_that_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's storage tool reads "-t -Xyz..." as a missing argument: a UUID whose URL-safe base64
    # starts with "-" (first byte 0xf8..0xfb) is drawn again, as Kafka's Uuid.randomUuid() does
    dashed = uuid.UUID(bytes=b"\xf8" + b"\x01" * 15)
    plain = uuid.UUID(bytes=b"\x10" * 16)
    assert base64.urlsafe_b64encode(dashed.bytes).decode().startswith("-")
    draws = iter([dashed, dashed, plain])
    monkeypatch.setattr(local_kafka.uuid, "uuid4", lambda: next(draws))
    assert new_cluster_id() == base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")


def test_cluster_ids_are_22_characters_and_distinct() -> None:
    ids = {new_cluster_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
