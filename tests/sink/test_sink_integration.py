"""The sink against a real broker (Apache Kafka, :mod:`tests.brokers`) and local Spark + Iceberg.

A scripted history across 3 tables is produced as normalized records; the sink runs as its own
process (``python -m sink``) and each Iceberg table must equal the final state computed
independently in plain Python, under both consumer group protocols (``broker.group_protocol``:
classic, and KIP-848's consumer protocol on Apache Kafka), and in the three table modes
(``sink.tables``: upsert, changelog, history; see ``RUNS``). The crash test SIGKILLs the sink
between the Iceberg commit and the offset commit, and between two tables' commits, then restarts it.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from service.local import LocalBroker, create_topics
from tests.brokers import TEST_BROKER
from tests.catalogs import TEST_CATALOG, TestCatalog, start_test_catalog
from tests.sink.history import History, scripted_history

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp: Path, bootstrap: str, group: str, max_records: int, catalog: TestCatalog,
            broker: dict[str, Any] | None = None, catalog_section: dict[str, Any] | None = None, **sink: Any) -> Path:
    cfg = {
        "broker": {"bootstrap_servers": bootstrap, **(broker or {})},
        "topics": [{"name": "unused-source", "format": "canal-json"}],
        "sink": {
            "topic_pattern": r"cdcnorm\.shop\..*",
            "group_id": group,
            "trigger_interval_seconds": 2,
            "max_records_per_batch": max_records,
            "catalog": catalog_section or catalog.section(),
            "maintenance": {"every_batches": 3, "expire_older_than_seconds": 0},
            **sink,
        },
    }
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(config: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args, "--config", str(config)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tables(config: Path, meta: bool = False) -> dict[str, Any]:
    """What ``python -m sink.inspect`` shows (``meta``: with the sink's sequence columns)."""
    proc = _run(config, "sink.inspect", *(["--meta"] if meta else []))
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables: dict[str, Any] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    return tables


def _norm(value: Any) -> Any:
    if isinstance(value, Decimal):
        return f"{value:.2f}"  # the table column is decimal(10,2)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def _current_orders(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The orders' current rows: the table's rows, or a history table's current versions (each
    version once)."""
    if table["mode"] != "history":
        return list(table["rows"])
    versions = [(r["id"], r["__cdc_seq"]) for r in table["rows"]]
    assert len(versions) == len(set(versions)), "versions doubled in shop.orders"
    assert len(versions) > len({i for i, _ in versions}), "a history with one version per key"
    return [r for r in table["rows"] if r["__is_current"]]


def _current_users(table: dict[str, Any], history: History) -> list[dict[str, Any]]:
    """The users' current rows: the table's rows, or a changelog folded in source order (each
    record of the topic once)."""
    if table["mode"] != "changelog":
        return list(table["rows"])
    positions = [(r["__cdc_partition"], r["__cdc_offset"]) for r in table["rows"]]
    assert len(positions) == len(set(positions)), "changes doubled in the shop.users changelog"
    records = [r for r in history.records() if r.value is not None and r.topic.endswith(".users")]
    assert len(positions) == len(records), "changes lost in the shop.users changelog"
    state: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(table["rows"], key=lambda r: r["__cdc_seq"]):
        if r["__cdc_op"] == "t":
            state.clear()
        elif r["__cdc_op"] == "d":
            state.pop((r["tenant"], r["uid"]), None)
        else:
            state[(r["tenant"], r["uid"])] = r
    return list(state.values())


def _assert_state(tables: dict[str, Any], history: History) -> None:
    """Each table equals the state computed in Python, in whichever mode it was written."""
    rows = _current_orders(tables["shop.orders"])
    orders = {r["id"]: r for r in rows}
    assert len(orders) == len(rows), "duplicate keys in shop.orders"
    want_orders = {k[0]: {c: _norm(v) for c, v in row.items()} for k, row in history.state["orders"].items()}
    assert set(orders) == set(want_orders)
    for key, row in want_orders.items():
        got = {c: orders[key].get(c) for c in row}
        assert got == row, f"orders[{key}]"
    rows = _current_users(tables["shop.users"], history)
    users = {(r["tenant"], r["uid"]): r["name"] for r in rows}
    assert len(users) == len(rows), "duplicate keys in shop.users"
    assert users == {k: v["name"] for k, v in history.state["users"].items()}
    events = sorted((r["msg"], r["n"]) for r in tables["shop.events"]["rows"])
    assert events == sorted((r["msg"], r["n"]) for r in history.appended["events"])


RUNS = sorted({("consumer", TEST_CATALOG), ("classic", "hadoop")})
"""(group protocol, catalog): the consumer protocol (KIP-848) on the tests' catalog (REST in CI),
with a replay, and the hadoop catalog's smoke test with the classic protocol (one pass, no
replay). The classic protocol on REST is ``tests/sink/test_sink_s3.py``'s run: the same history
through the REST catalog, its warehouse on S3.

The tests' catalog's run writes the three modes (``sink.tables``): orders as a history (SCD2),
users as a changelog, events (keyless) as upserts, i.e. appends; the hadoop run writes upserts."""

MODES = {"*.orders": {"mode": "history"}, "*.users": {"mode": "changelog"}}


@pytest.mark.parametrize(("group_protocol", "catalog_kind"), RUNS)
def test_sink_reaches_the_independently_computed_state(broker: LocalBroker, tmp_path: Path, group_protocol: str,
                                                       catalog_kind: str, request: pytest.FixtureRequest) -> None:
    # the consumer protocol (KIP-848) needs Apache Kafka: with CDCNORM_TEST_BROKER=tansu it gets one of its own
    bootstrap = broker.address
    if group_protocol == "consumer" and TEST_BROKER != "kafka":
        bootstrap = request.getfixturevalue("apache_kafka_bootstrap")
    catalog = start_test_catalog(tmp_path / "catalog", catalog_kind)
    request.addfinalizer(catalog.stop)
    history = scripted_history(n_keys=30, n_changes=600, seed=11)
    group, db = f"sink-it-{group_protocol}-{catalog_kind}", f"it_{group_protocol}_{catalog_kind}"
    settings = {"group_protocol": group_protocol}
    modes = MODES if catalog_kind == TEST_CATALOG else {}
    config = _produce_as(bootstrap, history, db, tmp_path, group, max_records=250, catalog=catalog, broker=settings,
                         tables=modes)
    proc = _run(config, "sink", "--once")
    print(proc.stdout[-2000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "batch: read=" in proc.stdout
    assert f"joining consumer group {group} (group.protocol={group_protocol})" in proc.stderr
    tables = {k.replace(f"{db}.", "shop."): v for k, v in _tables(config, meta=True).items()}
    print({k: {x: v[x] for x in ("count", "snapshots", "data_files", "delete_files")} for k, v in tables.items()})
    print(f"records={len(history.records())} orders={tables['shop.orders']['count']} users={tables['shop.users']['count']}")
    assert {name: tables[f"shop.{name}"]["mode"] for name in ("orders", "users", "events")} == (
        {"orders": "history", "users": "changelog", "events": "upsert"} if modes else dict.fromkeys(("orders", "users", "events"), "upsert"))
    _assert_state(tables, history)
    if catalog_kind != TEST_CATALOG:  # the hadoop catalog's smoke test: the replay runs on the tests' catalog
        # and `cdcnorm tables` shows what landed, up to --limit rows of each table
        shown = subprocess.run([sys.executable, "-m", "cdcnorm.cli", "tables", "-c", str(config), "--limit", "2"],
                               cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert shown.returncode == 0, shown.stderr[-3000:]
        heads = sorted(x for x in shown.stdout.splitlines() if re.match(rf"{db}\.\w+: \d+ of \d+ rows$", x))
        counts = {name: tables[name.replace(f"{db}.", "shop.")]["count"] for name in (h.split(":")[0] for h in heads)}
        assert heads == sorted(f"{name}: {min(2, n)} of {n} rows" for name, n in counts.items()), shown.stdout
        assert len(heads) == 3
        return
    # replay: a new consumer group re-reads everything; the tables must not change (it takes
    # them over: a table belongs to one sink's group, README "One sink per table")
    replay = _config(tmp_path, bootstrap, f"{group}-replay", max_records=250, catalog=catalog, broker=settings,
                     take_over_tables_from=group, tables=modes)
    replay.write_text(replay.read_text().replace(r"cdcnorm\.shop\..*", rf"cdcnorm\.{db}\..*"))
    proc = _run(replay, "sink", "--once")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = {k.replace(f"{db}.", "shop."): v for k, v in _tables(config, meta=True).items()}
    for name in ("shop.orders", "shop.users"):
        assert sorted(map(orjson.dumps, again[name]["rows"])) == sorted(map(orjson.dumps, tables[name]["rows"])), name


def _produce_as(bootstrap: str, history: History, db: str, tmp: Path, group: str, max_records: int,
                catalog: TestCatalog, broker: dict[str, Any] | None = None, catalog_section: dict[str, Any] | None = None,
                **sink: Any) -> Path:
    """Produce ``history`` with its tables moved to database ``db`` (topics of this test only) on
    2 partitions; returns a sink config reading them."""
    for e in history.events:
        object.__setattr__(e, "table", e.table.with_name(db, None, e.table.table))
    records = history.records()
    from confluent_kafka import Producer

    create_topics(bootstrap, sorted({r.topic for r in records}), partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        producer.produce(r.topic, key=r.key_bytes(), value=r.value_bytes())
    assert producer.flush(30) == 0
    config = _config(tmp, bootstrap, group, max_records=max_records, catalog=catalog, broker=broker,
                     catalog_section=catalog_section, **sink)
    config.write_text(config.read_text().replace(r"cdcnorm\.shop\..*", rf"cdcnorm\.{db}\..*"))
    return config


def _assert_state_of(config: Path, db: str, history: History) -> None:
    _assert_state({k.replace(f"{db}.", "shop."): v for k, v in _tables(config).items()}, history)


def test_sink_crash_between_iceberg_and_offset_commit(broker: LocalBroker, tmp_path: Path, catalog: TestCatalog) -> None:
    history = scripted_history(n_keys=25, n_changes=500, seed=5)
    # keep this run's topics apart from the other tests'
    config = _produce_as(broker.address, history, "crash", tmp_path, "sink-crash", max_records=200, catalog=catalog)
    crashes = [
        {"CDCNORM_CRASH_POINT": "after-iceberg-commit", "CDCNORM_CRASH_AFTER": "1"},
        {"CDCNORM_CRASH_POINT": "between-table-commits", "CDCNORM_CRASH_AFTER": "2"},
    ]
    for env in crashes:
        proc = _run(config, "sink", "--once", env=env)
        print(f"injected {env}: exit={proc.returncode}")
        assert proc.returncode == -9, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = _run(config, "sink", "--once")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_state_of(config, "crash", history)


def test_sink_with_a_commit_interval_killed_after_a_kafka_commit(broker: LocalBroker, tmp_path: Path,
                                                                 catalog: TestCatalog) -> None:
    """With ``commit_interval_seconds`` a topic's records wait in Kafka between its reads (``--once``
    reads them when nothing else is left); killed after a batch's Kafka commit, a restart reads
    the rest from the committed offsets: the tables equal the history."""
    history = scripted_history(n_keys=25, n_changes=500, seed=8)
    config = _produce_as(broker.address, history, "waiting", tmp_path, "sink-waiting", max_records=120,
                         catalog=catalog, commit_interval_seconds=3600)
    proc = _run(config, "sink", "--once", env={"CDCNORM_CRASH_POINT": "after-kafka-commit", "CDCNORM_CRASH_AFTER": "3"})
    print(proc.stdout[-1500:])
    assert proc.returncode == -9, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = _run(config, "sink", "--once")
    print(proc.stdout[-1500:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_state_of(config, "waiting", history)
