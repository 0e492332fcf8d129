"""A seeded change stream over several tables, its expected final state, and the checks.

Every row carries ``ver``: a per-key version that goes up by one with each change of that key
(insert, update, delete, re-insert), so a reader of the normalized topics can tell, per key,
whether every change arrived and in which order.

Each table has one source format: ``canal-json`` (the default, every table), ``maxwell-json``
(``position`` orders the changes) or ``qlik-json`` (data messages name the ``schemaId`` of a
metadata message sent first, :func:`qlik_metadata`; ``changeSequence`` orders the changes; an
update that leaves ``qty`` unchanged leaves it out, as Replicate's ``columnMask`` allows). The
random draws do not depend on the formats, so a stream is the same history in any of them, and
a prefix of a longer stream of the same seed.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "CANAL",
    "DB",
    "MAXWELL",
    "QLIK",
    "TABLES",
    "ChangeStream",
    "OrderReport",
    "SteadyProducer",
    "assert_tables_equal_expected",
    "canal_message",
    "check_order",
    "generate",
    "produce",
    "produce_normalized",
    "qlik_data",
    "qlik_metadata",
    "read_all",
]

DB = "shop"
TABLES = ("t0", "t1", "t2")
CANAL, MAXWELL, QLIK = "canal-json", "maxwell-json", "qlik-json"
MYSQL_TYPES = {"id": "int(11)", "ver": "bigint(20)", "name": "varchar(40)", "qty": "int(11)"}
SQL_TYPES = {"id": 4, "ver": -5, "name": 12, "qty": 4}
# Qlik Replicate columns of the workload's rows: name -> (ordinal, type, primary key position)
QLIK_COLUMNS = {"id": (1, "INT4", 1), "ver": (2, "INT8", 0), "name": (3, "STRING", 0), "qty": (4, "INT4", 0)}
BASE_TS = 1_700_000_000_000

Row = dict[str, Any]


@dataclass
class ChangeStream:
    """Source messages in production order and what the tables must hold at the end."""

    messages: list[tuple[bytes, bytes]] = field(default_factory=list)  # (kafka key, value)
    formats: list[str] = field(default_factory=list)  # the source format of each message
    versions: dict[tuple[str, int], int] = field(default_factory=dict)  # (table, id) -> last version
    final: dict[str, dict[int, Row]] = field(default_factory=dict)  # table -> id -> row
    counts: dict[str, int] = field(default_factory=dict)  # INSERT/UPDATE/DELETE
    # messages that go first, per format (qlik-json: one metadata message per table)
    preamble: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    images: dict[tuple[str, int, int], Row] = field(default_factory=dict)  # (table, id, ver) -> row after it
    partial: set[tuple[str, int, int]] = field(default_factory=set)  # qlik updates sent without qty

    @property
    def changes(self) -> int:
        return len(self.messages)

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.final)


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


def _maxwell(table: str, kind: str, row: Row, old: Row | None, ts: int, index: int) -> bytes:
    return orjson.dumps(
        {
            "database": DB,
            "table": table,
            "type": kind.lower(),
            "ts": ts // 1000,
            "xid": index,
            "commit": True,
            "position": f"mysql-bin.000001:{4 + 100 * index}",  # binlog order: the global order
            "primary_key_columns": ["id"],
            "data": row,
            "old": old,
        }
    )


def qlik_metadata(schema_id: str, schema: str, table: str, columns: Mapping[str, tuple[int, str, int]],
                  task: str = "cdcnorm-faults") -> bytes:
    """A Qlik Replicate JSON metadata message (``type: MD``) of ``schema.table``; ``columns``:
    name -> (ordinal, Replicate type, primary key position or 0)."""
    structure = {
        name: {"ordinal": o, "type": t, "length": 40 if t == "STRING" else 0, "precision": 0, "scale": 0,
               "primaryKeyPosition": pk, "nullable": pk == 0}
        for name, (o, t, pk) in columns.items()
    }
    return orjson.dumps({
        "magic": "atMSG", "type": "MD", "headers": None, "messageSchemaId": schema_id, "messageSchema": None,
        "message": {
            "schemaId": schema_id,
            "lineage": {"server": "rep-01", "task": task, "schema": schema, "table": table, "tableVersion": 1,
                        "timestamp": "2026-01-01T00:00:00.000"},
            "tableStructure": {"tableColumns": structure},
            "dataSchema": None,
        },
    })


def qlik_data(schema_id: str, op: str, row: Mapping[str, Any], columns: Iterable[str], mask: str, seq: int) -> bytes:
    """A Qlik Replicate JSON data message (``type: DT``): ``op`` (``INSERT``, ``UPDATE``,
    ``DELETE``) of ``row`` (``columns`` in order, a missing one null), ``changeSequence`` ``seq``."""
    return orjson.dumps({
        "magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": schema_id, "messageSchema": None,
        "message": {
            "data": {name: row.get(name) for name in columns},
            "beforeData": None,
            "headers": {"operation": op, "changeSequence": f"{seq:035d}", "timestamp": "2026-01-01T00:00:01.000",
                        "streamPosition": f"pos-{seq}", "transactionId": "", "changeMask": mask, "columnMask": mask,
                        "transactionEventCounter": None, "transactionLastEvent": None},
        },
    })


def _qlik_schema_id(seed: int, table: str) -> str:
    return hashlib.md5(f"{seed}:{table}".encode()).hexdigest().upper()


def generate(n_changes: int, keys_per_table: int, seed: int, formats: Mapping[str, str] | None = None) -> ChangeStream:
    """``n_changes`` single-row messages: inserts, updates and deletes (and re-inserts after
    deletes) of random keys; each change bumps the key's ``ver``. ``formats`` maps each table to
    its source format (default: :data:`TABLES`, all Canal JSON)."""
    formats = dict(formats or {t: CANAL for t in TABLES})
    tables = tuple(formats)
    rnd = random.Random(seed)
    out = ChangeStream(final={t: {} for t in tables}, counts={"INSERT": 0, "UPDATE": 0, "DELETE": 0})
    schema_ids = {t: _qlik_schema_id(seed, t) for t, f in formats.items() if f == QLIK}
    if schema_ids:
        out.preamble[QLIK] = [(f"md:{t}".encode(), qlik_metadata(s, DB, t, QLIK_COLUMNS)) for t, s in schema_ids.items()]
    live = out.final
    for i in range(n_changes):
        table = tables[rnd.randrange(len(tables))]
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
        fmt = formats[table]
        if fmt == CANAL:
            value = canal_message(table, kind, row, old, BASE_TS + i)
        elif fmt == MAXWELL:
            value = _maxwell(table, kind, row, old, BASE_TS + i, i)
        elif fmt == QLIK:  # an update that leaves qty unchanged leaves it out (its columnMask bit clear)
            partial = kind == "UPDATE" and old is not None and "qty" not in old
            if partial:
                out.partial.add((table, kid, ver))
            sent = {k: v for k, v in row.items() if k != "qty"} if partial else row
            value = qlik_data(schema_ids[table], kind, sent, QLIK_COLUMNS, "07" if partial else "0F", i + 1)
        else:
            raise ValueError(f"no generator for the format {fmt!r} of table {table!r}")
        out.messages.append((f"{table}:{kid}".encode(), value))
        out.formats.append(fmt)
        out.images[(table, kid, ver)] = row
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
        elif msg.offset() is not None:  # None: persisted by an earlier attempt (see SteadyProducer)
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


def produce_normalized(bootstrap: str, prefix: str, messages: Iterable[tuple[bytes, bytes]]) -> dict[tuple[str, int], int]:
    """Produce what the worker would make of Canal ``messages`` (decoded and emitted in this
    process, with the transforms the worker uses) to ``<prefix>.<db>.<table>``, for the sink
    tests that need no worker; returns the end offset per (topic, partition)."""
    from transforms.decoders import Message, create_decoder
    from transforms.envelope import EmitOptions, emit

    decoder = create_decoder("canal-json")
    per_topic: dict[str, list[tuple[bytes, Any]]] = defaultdict(list)  # a tombstone's value is None
    for key, value in messages:
        for record in emit(decoder.decode(Message(value, key)), EmitOptions(prefix=prefix)):
            per_topic[record.topic].append((record.key_bytes() or b"", record.value_bytes()))
    ends: dict[tuple[str, int], int] = {}
    for topic, records in per_topic.items():
        ends.update({(topic, p): end for p, end in produce(bootstrap, topic, records).items()})
    return ends


@dataclass
class SteadyProducer:
    """Produces ``messages`` at ``rate`` per second in a thread until :meth:`finish`, keyed (one
    key stays in one partition, in order), to ``topic`` or, when it is a sequence, to
    ``topic[i]`` for message ``i``; remembers the partition and offset of each message from its
    delivery report. ``conf`` adds librdkafka settings (e.g. ``enable.idempotence``, so that a
    retry under a broker fault can neither duplicate nor reorder the source). An idempotent
    producer reports a message whose retry the broker recognized as a duplicate (an earlier
    attempt was written, its answer lost) as delivered without an offset: its offset is -1 here,
    and :meth:`ends` does not know it (read the topic back to know where it ends)."""

    bootstrap: str
    topic: str | Sequence[str]
    messages: list[tuple[bytes, bytes]]
    rate: float = 250.0
    conf: dict[str, Any] = field(default_factory=dict)  # more producer settings (acks, idempotence ...)
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)  # message index -> (partition, offset)
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def topic_of(self, index: int) -> str:
        return self.topic if isinstance(self.topic, str) else self.topic[index]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **self.conf})

        def report(index: int) -> Callable[[Any, Any], None]:
            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    self.failed.append(str(err))
                else:  # no offset: see the class
                    self.placed[index] = (msg.partition(), -1 if msg.offset() is None else msg.offset())

            return delivered

        tick, per_tick = 0.02, max(1, int(self.rate * 0.02))
        next_at = time.monotonic()
        while not self._stop.is_set() and self.sent < len(self.messages):
            for key, value in self.messages[self.sent:self.sent + per_tick]:
                while True:
                    try:
                        producer.produce(self.topic_of(self.sent), value=value, key=key, on_delivery=report(self.sent))
                        break
                    except BufferError:
                        producer.poll(0.1)
                self.sent += 1
            producer.poll(0)
            next_at += tick
            time.sleep(max(0.0, next_at - time.monotonic()))
        left = producer.flush(60)
        if left:
            self.failed.append(f"{left} messages not delivered")

    @property
    def done(self) -> bool:
        """Every message was handed to the producer (the thread then flushes and ends)."""
        return self.sent >= len(self.messages)

    def finish(self) -> int:
        """Stop producing; returns how many messages were produced (all delivered)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(90)
        assert not self.failed, self.failed[:3]
        assert len(self.placed) == self.sent, f"{self.sent - len(self.placed)} delivery reports missing"
        return self.sent

    def ends(self, topic: str | None = None) -> dict[int, int]:
        """Last delivered offset + 1 per partition (of ``topic``, when given)."""
        ends: dict[int, int] = {}
        for index, (partition, offset) in self.placed.items():
            if offset >= 0 and (topic is None or self.topic_of(index) == topic):
                ends[partition] = max(ends.get(partition, 0), offset + 1)
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
    # cells of the row image (``after``, ``before`` of a delete), duplicates included, that are
    # not the source's value of that version; a left-out cell may instead be marked absent
    wrong: list[str] = field(default_factory=list)
    completed: int = 0  # left-out cells completed with the source's value
    absent: int = 0  # left-out cells marked absent

    def line(self) -> str:
        return (
            f"records={self.records} changes={self.changes} delivered={self.changes - self.duplicates} "
            f"tombstones={self.tombstones} "
            f"duplicates={self.duplicates} missing={self.missing} out_of_order_keys={len(self.out_of_order)} "
            f"keys_in_several_partitions={len(self.split_keys)} wrong_values={len(self.wrong)} "
            f"left_out_cells: completed={self.completed} absent={self.absent}"
        )


def _check_cells(report: OrderReport, payload: dict[str, Any], image: dict[str, Any], slot: tuple[str, int, int],
                 stream: ChangeStream, duplicate: bool) -> None:
    truth = stream.images.get(slot)
    if truth is None:
        report.wrong.append(f"{slot}: no such change")
        return
    for name, want in truth.items():
        got = image.get(name)
        if isinstance(want, int) and isinstance(got, str) and got.lstrip("-").isdigit():
            got = int(got)
        left_out = slot in stream.partial and name == "qty"
        if left_out and got is None and name in (payload["source"].get("unavailable_after") or ()):
            report.absent += 1
        elif got != want:
            report.wrong.append(f"{slot} {name}{' (a duplicate)' if duplicate else ''}: got {got!r}, the source had {want!r}")
        elif left_out:
            report.completed += 1


def check_order(records: list[OutRecord], prefix: str, stream: ChangeStream) -> OrderReport:
    """Per key (in partition/offset order): the subsequence of first occurrences of each
    version must be exactly ``1, 2, ..., last`` (strictly increasing and complete); a version
    seen again later is a replay duplicate and is ignored for the order. Every record's row
    image, duplicates too, must hold the source's values of its version (:attr:`OrderReport.wrong`)."""
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
        _check_cells(report, payload, image, (table, kid, ver), stream, ver in firsts[key])
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


def table_rows(tables: dict[str, Any], names: Iterable[str]) -> dict[str, dict[int, tuple[Any, ...]]]:
    out: dict[str, dict[int, tuple[Any, ...]]] = {}
    for name in names:
        rows = tables.get(name, {"rows": []})["rows"]
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"duplicate keys in {name}: {len(ids) - len(set(ids))}"
        out[name] = {r["id"]: (r["ver"], r["name"], r["qty"]) for r in rows}
    return out


def assert_changelog(rows: list[dict[str, Any]], positions: set[tuple[int, int]], want: dict[int, tuple[Any, ...]],
                     label: str) -> None:
    """A changelog table (``sink.tables`` mode changelog) holds every record of its topic
    (``positions``: partition, offset) exactly once, and folded in source order (the last change
    per key; a delete removes it) gives the expected state ``want``."""
    seen = [(r["__cdc_partition"], r["__cdc_offset"]) for r in rows]
    print(f"{label}: changelog rows={len(seen)} records on its topic={len(positions)}")
    assert len(seen) == len(set(seen)), f"{label}: {len(seen) - len(set(seen))} changes doubled"
    assert set(seen) == positions, f"{label}: {len(positions - set(seen))} changes lost, {len(set(seen) - positions)} unknown"
    last: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["__cdc_seq"]):
        last[r["id"]] = r
    state = {k: (r["ver"], r["name"], r["qty"]) for k, r in last.items() if r["__cdc_op"] != "d"}
    assert state == want, f"{label}: the changelog folded is not the expected state"


def assert_history(rows: list[dict[str, Any]], want: dict[int, tuple[Any, ...]], label: str) -> None:
    """A history table (``sink.tables`` mode history) holds each version once (key and
    ``__cdc_seq``), each key's versions follow one another (one ends where the next begins, a
    delete leaves a gap), and its current versions are the expected state ``want``."""
    ids = [(r["id"], r["__cdc_seq"]) for r in rows]
    print(f"{label}: history versions={len(ids)} keys={len({i for i, _ in ids})}")
    assert len(ids) == len(set(ids)), f"{label}: {len(ids) - len(set(ids))} versions doubled"
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["__cdc_seq"]):
        by_key[r["id"]].append(r)
    for key, versions in by_key.items():
        for a, b in itertools.pairwise(versions):
            assert a["__cdc_end_seq"] is not None and a["__cdc_end_seq"] <= b["__cdc_seq"], f"{label} {key}: {a} {b}"
        assert sum(bool(v["__is_current"]) for v in versions) <= 1, f"{label} {key}: several current versions"
    current = {r["id"]: (r["ver"], r["name"], r["qty"]) for r in rows if r["__is_current"]}
    assert current == want, f"{label}: the current versions are not the expected state"


def assert_tables_equal_expected(tables: dict[str, Any], stream: ChangeStream, label: str,
                                 changelogs: dict[str, set[tuple[int, int]]] | None = None,
                                 histories: Iterable[str] = ()) -> None:
    """Every table equals the stream's expected state; ``changelogs`` (name: the positions of its
    topic's records) are changelog tables, checked by :func:`assert_changelog`; ``histories`` are
    history tables (:func:`assert_history`)."""
    want = expected_rows(stream)
    for name, positions in (changelogs or {}).items():
        assert_changelog(tables.get(name, {"rows": []})["rows"], positions, want.pop(name), f"{label} {name}")
    for name in histories:
        assert_history(tables.get(name, {"rows": []})["rows"], want.pop(name), f"{label} {name}")
    got = table_rows(tables, want)
    for name in want:
        print(f"{label}: {name} rows={len(got[name])} expected={len(want[name])}")
    for name in want:
        wrong = [k for k in set(got[name]) | set(want[name]) if got[name].get(k) != want[name].get(k)]
        assert not wrong, f"{label} {name}: {len(wrong)} keys differ, e.g. " + ", ".join(
            f"{k}: got {got[name].get(k)} want {want[name].get(k)}" for k in sorted(wrong)[:5]
        )
