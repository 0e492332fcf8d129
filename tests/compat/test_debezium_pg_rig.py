"""The Debezium PostgreSQL rig (tests/compat/debezium_pg.py): one real run of Debezium 3.6's
``pgoutput`` connector against a private PostgreSQL 15, checked for what later tests rely on.

One run per module (a few seconds; the JVM lives in a subprocess). ``-m integration``.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.compat.debezium_pg import (
    TOPIC_PREFIX,
    UNAVAILABLE,
    Capture,
    RigError,
    parsed,
    pg_bin_dir,
    replay,
    run_capture,
)
from tests.conftest import assert_connect_accepts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TYPED = f"{TOPIC_PREFIX}.public.typed"
FULL = f"{TOPIC_PREFIX}.public.full_ident"
TRUNCATED = f"{TOPIC_PREFIX}.public.truncated"


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    try:
        pg_bin_dir()
    except RigError as exc:  # pragma: no cover - machine without PostgreSQL 15
        pytest.skip(str(exc))
    if not shutil.which("psql"):  # pragma: no cover
        pytest.skip("psql not found")
    return run_capture(Path(tmp_path_factory.mktemp("debezium-pg")), timeout_s=120)


def _events(capture: Capture) -> list[tuple[str, Any, Any]]:
    """(topic, key payload, value payload or None) per record, in capture order."""
    out = []
    for record in capture.records:
        key, value = parsed(record)
        out.append((record["topic"], key["payload"] if key else None, value["payload"] if value else None))
    return out


def _op(payload: Any) -> str:
    return "tombstone" if payload is None else str(payload["op"])


def _find(capture: Capture, topic: str, op: str, key: dict[str, Any]) -> tuple[int, Any]:
    for i, (t, k, v) in enumerate(_events(capture)):
        if t == topic and k == key and _op(v) == op:
            return i, v
    raise AssertionError(f"no {op} record for {key} on {topic}")


def _after_schema(capture: Capture, topic: str) -> dict[str, dict[str, Any]]:
    for record in capture.records:
        _, value = parsed(record)
        if record["topic"] == topic and value is not None:
            after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
            return {f["field"]: f for f in after["fields"]}
    raise AssertionError(f"no value on {topic}")


def test_the_run_is_quick_and_complete(capture: Capture) -> None:
    ops = Counter(_op(v) for _, _, v in _events(capture))
    assert set(ops) == {"r", "c", "u", "d", "t", "tombstone"}, ops
    # pre-existing rows: 3 typed, 3 full_ident, 2 truncated
    assert ops["r"] == 8
    assert ops["d"] == ops["tombstone"] == 4
    assert capture.elapsed_s < 120


def test_snapshot_then_stream(capture: Capture) -> None:
    flags = [v["source"]["snapshot"] for _, _, v in _events(capture) if v is not None]
    reads = [v for _, _, v in _events(capture) if v is not None and v["op"] == "r"]
    assert all(r["source"]["snapshot"] != "false" for r in reads)
    # every snapshot record comes first, the last one flagged "last"
    assert flags[: len(reads)].count("false") == 0 and flags[len(reads) - 1] == "last"
    assert set(flags[len(reads) :]) == {"false"}


def test_a_tombstone_follows_every_delete(capture: Capture) -> None:
    events = _events(capture)
    for i, (topic, key, value) in enumerate(events):
        if value is not None and value["op"] == "d":
            assert events[i + 1] == (topic, key, None), (
                f"no tombstone right after the delete of {key} on {topic}"
            )


def test_a_primary_key_change_is_a_delete_and_a_create(capture: Capture) -> None:
    events = _events(capture)
    for topic, old, new in ((TYPED, 3, 30), (FULL, 3, 33)):
        i, delete = _find(capture, topic, "d", {"id": old})
        assert events[i + 1] == (topic, {"id": old}, None)
        t, k, create = events[i + 2]
        assert (t, k, create["op"]) == (topic, {"id": new}, "c")
        assert create["after"]["id"] == new and delete["before"]["id"] == old
        # one transaction: same txId and commit LSN
        assert delete["source"]["txId"] == create["source"]["txId"]


def test_default_identity_delete_carries_only_the_key(capture: Capture) -> None:
    _, delete = _find(capture, TYPED, "d", {"id": 4})
    assert delete["before"]["id"] == 4
    assert all(v is None for c, v in delete["before"].items() if c != "id")


def test_unchanged_toast_is_the_unavailable_placeholder(capture: Capture) -> None:
    _, update = _find(capture, TYPED, "u", {"id": 1})
    assert update["before"] is None  # REPLICA IDENTITY DEFAULT
    assert update["after"]["big"] == UNAVAILABLE
    assert update["after"]["note"] == "updated"
    # a changed TOASTed value is sent in full
    _, changed = _find(capture, TYPED, "u", {"id": 5})
    assert changed["after"]["big"].startswith("TOAST+") and len(changed["after"]["big"]) == 4200


def test_full_identity_has_before_images(capture: Capture) -> None:
    _, update = _find(capture, FULL, "u", {"id": 1})
    assert update["before"]["qty"] == 10 and update["after"]["qty"] == 11
    # under FULL the unchanged TOASTed value is present on both sides, not a placeholder
    assert update["before"]["big"] == update["after"]["big"] and update["after"]["big"].startswith("toast-")
    _, delete = _find(capture, FULL, "d", {"id": 2})
    assert delete["before"] == {
        "id": 2,
        "name": "TWO",
        "qty": 20,
        "price": "ANw=",  # Decimal 2.20, scale 2
        "updated": "2024-01-02T00:00:00.000000Z",
        "big": "now set",
    }


def test_truncate_is_emitted_without_a_key(capture: Capture) -> None:
    truncates = [(t, k, v) for t, k, v in _events(capture) if v is not None and v["op"] == "t"]
    assert len(truncates) == 1
    topic, key, value = truncates[0]
    assert topic == TRUNCATED and key is None
    assert value["before"] is None and value["after"] is None and value["source"]["table"] == "truncated"


def test_connect_schema_names_of_the_column_types(capture: Capture) -> None:
    columns = _after_schema(capture, TYPED)
    named = {c: (f["type"], f.get("name")) for c, f in columns.items()}
    assert named == {
        "id": ("int32", None),
        "n_fixed": ("bytes", "org.apache.kafka.connect.data.Decimal"),
        "n_var": ("struct", "io.debezium.data.VariableScaleDecimal"),
        "f4": ("float", None),
        "f8": ("double", None),
        "d": ("int32", "io.debezium.time.Date"),
        "t": ("int64", "io.debezium.time.MicroTime"),
        "ts": ("int64", "io.debezium.time.MicroTimestamp"),
        "tstz": ("string", "io.debezium.time.ZonedTimestamp"),
        "b": ("bytes", None),
        "j": ("string", "io.debezium.data.Json"),
        "jb": ("string", "io.debezium.data.Json"),
        "u": ("string", "io.debezium.data.Uuid"),
        "ia": ("array", None),
        "ta": ("array", None),
        "big": ("string", None),
        "note": ("string", None),
    }
    assert columns["n_fixed"]["parameters"] == {"scale": "10", "connect.decimal.precision": "40"}
    assert columns["ia"]["items"]["type"] == "int32" and columns["ta"]["items"]["type"] == "string"
    assert not columns["id"]["optional"] and columns["note"]["optional"]


def test_nulls_arrive_as_nulls(capture: Capture) -> None:
    _, create = _find(capture, TYPED, "c", {"id": 4})
    assert create["after"]["note"] == "nulls"
    assert all(v is None for c, v in create["after"].items() if c not in ("id", "note"))


def test_replaying_the_records_gives_the_final_tables(capture: Capture) -> None:
    assert replay(capture.records) == capture.tables
    assert [r["id"] for r in capture.tables["public.typed"]] == [1, 2, 5, 30]
    assert [r["id"] for r in capture.tables["public.full_ident"]] == [1, 4, 5, 33]
    assert capture.tables["public.truncated"] == [{"id": 4, "v": "dd"}]


def test_kafka_connect_accepts_every_captured_record(capture: Capture, connect_checker: Any) -> None:
    triples = [(r["topic"], r["key"], r["value"]) for r in capture.records]
    assert assert_connect_accepts(connect_checker, triples, "Debezium PostgreSQL records") == len(
        capture.records
    )
