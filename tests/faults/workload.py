"""A seeded Canal JSON change stream over 3 tables, its expected final state, and the checks.

Every row carries ``ver``: a per-key version that goes up by one with each change of that key
(insert, update, delete, re-insert), so a reader of the normalized topics can tell, per key,
whether every change arrived and in which order.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "DB",
    "TABLES",
    "ChangeStream",
    "OrderReport",
    "assert_tables_equal_expected",
    "canal_message",
    "check_order",
    "generate",
    "produce",
    "read_all",
]

DB = "shop"
TABLES = ("t0", "t1", "t2")
MYSQL_TYPES = {"id": "int(11)", "ver": "bigint(20)", "name": "varchar(40)", "qty": "int(11)"}
SQL_TYPES = {"id": 4, "ver": -5, "name": 12, "qty": 4}
BASE_TS = 1_700_000_000_000

Row = dict[str, Any]


@dataclass
class ChangeStream:
    """Source messages in production order and what the tables must hold at the end."""

    messages: list[tuple[bytes, bytes]] = field(default_factory=list)  # (kafka key, canal value)
    versions: dict[tuple[str, int], int] = field(default_factory=dict)  # (table, id) -> last version
    final: dict[str, dict[int, Row]] = field(default_factory=dict)  # table -> id -> row
    counts: dict[str, int] = field(default_factory=dict)  # INSERT/UPDATE/DELETE

    @property
    def changes(self) -> int:
        return len(self.messages)


def canal_message(table: str, kind: str, row: Row, old: Row | None, ts: int) -> bytes:
    """One single-row Canal JSON change of ``DB.table`` (the stream's column types)."""
    return orjson.dumps(
        {
            "data": [{k: str(v) for k, v in row.items()}],
            "old": None if old is None else [{k: str(v) for k, v in old.items()}],
            "database": DB,
            "table": table,
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": ts,
            "ts": ts,
            "mysqlType": MYSQL_TYPES,
            "sqlType": SQL_TYPES,
        }
    )


def generate(n_changes: int, keys_per_table: int, seed: int) -> ChangeStream:
    """``n_changes`` single-row Canal messages: inserts, updates and deletes (and re-inserts
    after deletes) of random keys; each change bumps the key's ``ver``."""
    rnd = random.Random(seed)
    out = ChangeStream(final={t: {} for t in TABLES}, counts={"INSERT": 0, "UPDATE": 0, "DELETE": 0})
    live = out.final
    for i in range(n_changes):
        table = TABLES[rnd.randrange(len(TABLES))]
        kid = rnd.randrange(1, keys_per_table + 1)
        ver = out.versions.get((table, kid), 0) + 1
        out.versions[(table, kid)] = ver
        current = live[table].get(kid)
        if current is None:
            kind, row, old = "INSERT", {"id": kid, "ver": ver, "name": f"{table}-{kid}-v{ver}", "qty": rnd.randrange(1000)}, None
            live[table][kid] = row
        elif rnd.random() < 0.85:
            row = {**current, "ver": ver, "name": f"{table}-{kid}-v{ver}"}
            old = {"ver": current["ver"], "name": current["name"]}
            if rnd.random() < 0.5:
                row["qty"] = rnd.randrange(1000)
                old["qty"] = current["qty"]
            kind = "UPDATE"
            live[table][kid] = row
        else:
            # the delete's row image carries the new version, so the delete itself is visible
            kind, row, old = "DELETE", {**current, "ver": ver}, None
            del live[table][kid]
        out.counts[kind] += 1
        out.messages.append((f"{table}:{kid}".encode(), canal_message(table, kind, row, old, BASE_TS + i)))
    return out


def produce(bootstrap: str, topic: str, messages: Iterable[tuple[bytes, bytes]], **conf: Any) -> dict[int, int]:
    """Produce ``messages`` keyed (one key stays in one partition, in order); returns the end
    offset (last delivered offset + 1) per partition, from the delivery reports."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
    ends: dict[int, int] = {}
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    for n, (key, value) in enumerate(messages, 1):
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    assert left == 0 and not failed, f"{left} source messages not delivered; errors: {failed[:3]}"
    return ends


@dataclass
class OutRecord:
    """One normalized record, reduced to what the checks need."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_all(bootstrap: str, topics: list[str], idle_s: float = 3.0, timeout_s: float = 120.0) -> list[OutRecord]:
    """Every record of ``topics`` from the beginning, in (topic, partition, offset) order.

    Done when no record arrived for ``idle_s`` (high watermarks are not trusted).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cdcnorm-fault-reader", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(timeout=10).topics
        consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in metadata for p in sorted(metadata[t].partitions)]
        )
        out: list[OutRecord] = []
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            assert time.monotonic() < deadline, f"reading {topics} took longer than {timeout_s}s"
            batch = consumer.consume(10_000, 0.5)
            for msg in batch:
                if msg.error():
                    continue
                out.append(OutRecord(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()))
            if batch:
                last = time.monotonic()
        out.sort(key=lambda r: (r.topic, r.partition, r.offset))
        return out
    finally:
        consumer.close()


@dataclass
class OrderReport:
    """What the normalized topics held, per key, against the source stream."""

    records: int = 0
    tombstones: int = 0
    changes: int = 0
    duplicates: int = 0
    missing: int = 0
    out_of_order: list[str] = field(default_factory=list)
    split_keys: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"records={self.records} changes={self.changes} delivered={self.changes - self.duplicates} "
            f"tombstones={self.tombstones} "
            f"duplicates={self.duplicates} missing={self.missing} out_of_order_keys={len(self.out_of_order)} "
            f"keys_in_several_partitions={len(self.split_keys)}"
        )


def check_order(records: list[OutRecord], prefix: str, stream: ChangeStream) -> OrderReport:
    """Per key (in partition/offset order): the subsequence of first occurrences of each
    version must be exactly ``1, 2, ..., last`` (strictly increasing and complete); a version
    seen again later is a replay duplicate and is ignored."""
    report = OrderReport(records=len(records))
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    firsts: dict[tuple[str, int], set[int]] = defaultdict(set)
    partitions: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in records:  # sorted by (topic, partition, offset)
        if r.value is None:
            report.tombstones += 1
            continue
        payload = orjson.loads(r.value)["payload"]
        table = r.topic.removeprefix(f"{prefix}.{DB}.")
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        kid, ver = int(image["id"]), int(image["ver"])
        report.changes += 1
        key = (table, kid)
        partitions[key].add(r.partition)
        if ver in firsts[key]:
            report.duplicates += 1
            continue
        firsts[key].add(ver)
        seen[key].append(ver)
    for key, last in stream.versions.items():
        got = seen.get(key, [])
        if got != list(range(1, len(got) + 1)) or (got and got[-1] > last):
            report.out_of_order.append(f"{key}: {got[:20]}")
        report.missing += last - len(got) if len(got) <= last else 0
    report.split_keys = [f"{k}: {sorted(p)}" for k, p in partitions.items() if len(p) > 1]
    return report


def expected_rows(stream: ChangeStream) -> dict[str, dict[int, tuple[Any, ...]]]:
    return {f"{DB}.{t}": {k: (r["ver"], r["name"], r["qty"]) for k, r in rows.items()} for t, rows in stream.final.items()}


def table_rows(tables: dict[str, Any]) -> dict[str, dict[int, tuple[Any, ...]]]:
    out: dict[str, dict[int, tuple[Any, ...]]] = {}
    for name in (f"{DB}.{t}" for t in TABLES):
        rows = tables.get(name, {"rows": []})["rows"]
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"duplicate keys in {name}: {len(ids) - len(set(ids))}"
        out[name] = {r["id"]: (r["ver"], r["name"], r["qty"]) for r in rows}
    return out


def assert_tables_equal_expected(tables: dict[str, Any], stream: ChangeStream, label: str) -> None:
    got, want = table_rows(tables), expected_rows(stream)
    for name in want:
        print(f"{label}: {name} rows={len(got[name])} expected={len(want[name])}")
    for name in want:
        wrong = [k for k in set(got[name]) | set(want[name]) if got[name].get(k) != want[name].get(k)]
        assert not wrong, f"{label} {name}: {len(wrong)} keys differ, e.g. " + ", ".join(
            f"{k}: got {got[name].get(k)} want {want[name].get(k)}" for k in sorted(wrong)[:5]
        )
