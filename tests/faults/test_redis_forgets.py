"""Redis forgets (issue 18 item 2): ``FLUSHALL`` mid-run, and a Redis restart without persistence.

Decoder metadata has its source of truth in the metadata log (a compacted Kafka topic,
``service.metadata_log``); Redis is only its shared cache. The workload needs that metadata:

* ``qlik-json``: one metadata message per table first, then data messages that name its
  ``schemaId`` and never repeat the structure; partial updates (a clear ``columnMask`` bit:
  the column is not in the message) are completed from the row state (``complete_partial_images``);
* ``arcion-csv``: one header line (the column names), then realtime rows that carry none.

Scenario: a worker reads the metadata and a first part of the data; Redis then forgets (FLUSHALL,
or its server is stopped and a new empty one started on the same port); the same worker goes
on with the next part, a second replica joins after that and the group shares the rest. Then:

* no dead letter (DLQ topic empty, ``cdcnorm_dlq_total`` 0 on both workers), every data change
  delivered, and the second replica decoded data of both formats;
* row-state completion degraded to placeholders, never to wrong values: every cell of every
  ``after`` image is the source's value or the absent mark (Debezium's placeholder for strings,
  null named in ``source.unavailable_after`` otherwise);
* Redis holds the metadata again (rebuilt from the log).

``redis.metadata_cache_ttl_s`` is 0, so no in-process copy of Redis hides the flush: the
metadata comes from the log. Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import csv
import io
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from service.local import LocalProcess, create_topics, start_redis, wait_for
from tests.faults.procs import committed_offsets, worker_config
from tests.faults.workload import produce, qlik_data, qlik_metadata, read_all
from tests.service.harness import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

PLACEHOLDER = "__debezium_unavailable_value"
SCHEMA = "SHOP"
QLIK_TABLES = ("T0", "T1", "T2")
ARCION_TABLE = "shop.items"
KEYS = 120
# data changes per phase: before Redis forgets / after, one worker / after, two workers
PHASES = (600, 200, 600)

# ordinal, Replicate type, primary key position
QLIK_COLUMNS = {"ID": (1, "INT4", 1), "VER": (2, "INT8", 0), "NAME": (3, "STRING", 0), "QTY": (4, "INT4", 0),
                "NOTE": (5, "STRING", 0)}
FULL_MASK = "1F"


# ----------------------------------------------------------------------------- the workload


@dataclass
class Workload:
    """Source messages per topic and phase, and the truth to check the output against."""

    qlik_metadata: list[tuple[bytes, bytes]] = field(default_factory=list)
    arcion_header: list[tuple[bytes, bytes]] = field(default_factory=list)
    qlik: list[list[tuple[bytes, bytes]]] = field(default_factory=list)  # per phase
    arcion: list[list[tuple[bytes, bytes]]] = field(default_factory=list)
    # (output topic, id, ver) -> every column of the row after that change (before, for a delete)
    truth: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)
    partial: set[tuple[str, int, int]] = field(default_factory=set)  # qlik updates leaving QTY, NOTE out
    _live: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    _last: dict[tuple[str, int], int] = field(default_factory=dict)  # versions go on after a delete

    def changes(self, fmt: str) -> int:
        return sum(len(p) for p in (self.qlik if fmt == "qlik" else self.arcion))

    def next_version(self, topic: str, kid: int) -> int:
        ver = self._last.get((topic, kid), 0) + 1
        self._last[(topic, kid)] = ver
        return ver


def _csv(fields: list[str]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue().encode()


def _arcion_row(op: str, new: dict[str, Any] | None, old: dict[str, Any] | None, seq: int) -> bytes:
    fields: list[str] = []
    for name in ("id", "ver", "name"):
        fields += [str(new[name]) if new is not None else "NULL", str(old[name]) if old is not None else "NULL",
                   str((1 if new is not None else 0) + (2 if old is not None else 0))]
    cursor = {"extractorId": 0, "timestamp": 1767225600000 + seq, "extractionTimestamp": 1767225600000 + seq,
              "dscId": 1, "mutId": seq, "v": 2}
    counts = {"insertCount": 0, "updateCount": 0, "deleteCount": 0, "replaceCount": 0}
    return _csv([*fields, op, orjson.dumps(cursor).decode(), orjson.dumps(counts).decode()])


def _qlik_change(w: Workload, rnd: random.Random, prefix: str, schema_ids: dict[str, str], kid: int,
                 seq: int) -> tuple[bytes, bytes]:
    table = QLIK_TABLES[rnd.randrange(len(QLIK_TABLES))]
    topic = f"{prefix}.{SCHEMA}.{table}"
    current = w._live.get((topic, kid))
    ver = w.next_version(topic, kid)
    mask = FULL_MASK
    if current is None:
        op = "INSERT"
        row = {"ID": kid, "VER": ver, "NAME": f"{table}-{kid}-v{ver}", "QTY": rnd.randrange(1000),
               "NOTE": f"note-{kid}-{ver}"}
    elif rnd.random() < 0.85:
        op = "UPDATE"
        row = {**current, "VER": ver, "NAME": f"{table}-{kid}-v{ver}"}
        if rnd.random() < 0.4:  # QTY and NOTE change too: every column in the message
            row["QTY"], row["NOTE"] = rnd.randrange(1000), f"note-{kid}-{ver}"
        else:  # QTY and NOTE unchanged and left out: their columnMask bits are clear
            mask = "07"
            w.partial.add((topic, kid, ver))
    else:
        op, row = "DELETE", {**current, "VER": ver}
    w.truth[(topic, kid, ver)] = row
    if op == "DELETE":
        del w._live[(topic, kid)]
    else:
        w._live[(topic, kid)] = row
    sent = row if mask == FULL_MASK else {k: row[k] for k in ("ID", "VER", "NAME")}
    return f"{table}:{kid}".encode(), qlik_data(schema_ids[table], op, sent, QLIK_COLUMNS, mask, seq)


def _arcion_change(w: Workload, rnd: random.Random, prefix: str, kid: int, seq: int) -> tuple[bytes, bytes]:
    topic = f"{prefix}.{ARCION_TABLE}"
    current = w._live.get((topic, kid))
    ver = w.next_version(topic, kid)
    if current is None:
        row = {"id": kid, "ver": ver, "name": f"item-{kid}-v{ver}"}
        value = _arcion_row("I", row, None, seq)
        w._live[(topic, kid)] = row
    elif rnd.random() < 0.85:
        row = {**current, "ver": ver, "name": f"item-{kid}-v{ver}"}
        value = _arcion_row("U", row, current, seq)
        w._live[(topic, kid)] = row
    else:
        row = {**current, "ver": ver}
        value = _arcion_row("D", None, row, seq)
        del w._live[(topic, kid)]
    w.truth[(topic, kid, ver)] = row
    return f"item:{kid}".encode(), value


def generate(seed: int, schema_ids: dict[str, str], prefix: str) -> Workload:
    """The metadata messages and header, then :data:`PHASES` data changes of random keys,
    three in four Qlik; each change bumps its key's version (``VER``/``ver``)."""
    rnd = random.Random(seed)
    w = Workload()
    w.qlik_metadata = [(f"md:{t}".encode(), qlik_metadata(schema_ids[t], SCHEMA, t, QLIK_COLUMNS, "forgets"))
                      for t in QLIK_TABLES]
    w.arcion_header = [(b"header", _csv(["id", "ver", "name"]))]
    seq = 0
    for n in PHASES:
        qlik: list[tuple[bytes, bytes]] = []
        arcion: list[tuple[bytes, bytes]] = []
        for _ in range(n):
            seq += 1
            kid = rnd.randrange(1, KEYS + 1)
            if rnd.random() < 0.75:
                qlik.append(_qlik_change(w, rnd, prefix, schema_ids, kid, seq))
            else:
                arcion.append(_arcion_change(w, rnd, prefix, kid, seq))
        w.qlik.append(qlik)
        w.arcion.append(arcion)
    return w


# ----------------------------------------------------------------------------- the checks


@dataclass
class Report:
    records: int = 0
    tombstones: int = 0
    changes: int = 0
    duplicates: int = 0
    missing: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    completed: int = 0  # left-out cells the row state filled (with the source's value)
    placeholders: int = 0  # left-out cells marked absent (the row state had forgotten the row)

    def line(self) -> str:
        return (f"records={self.records} changes={self.changes} duplicates={self.duplicates} "
                f"tombstones={self.tombstones} missing={len(self.missing)} wrong_values={len(self.wrong)} "
                f"left_out_cells: completed={self.completed} placeholders={self.placeholders}")


def _absent(payload: dict[str, Any], name: str) -> bool:
    value = payload["after"].get(name)
    return value == PLACEHOLDER or (value is None and name in (payload["source"].get("unavailable_after") or ()))


def check(records: list[Any], w: Workload) -> Report:
    """Every change once at least, each cell the source's value, or for a left-out cell of a
    partial update the absent mark; the first delivery of a change counts (a replay may follow)."""
    report = Report(records=len(records))
    seen: set[tuple[str, int, int]] = set()
    for r in records:  # (topic, partition, offset) order
        if r.value is None:
            report.tombstones += 1
            continue
        payload = orjson.loads(r.value)["payload"]
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        id_col, ver_col = ("ID", "VER") if "ID" in image else ("id", "ver")
        slot = (r.topic, int(image[id_col]), int(image[ver_col]))
        report.changes += 1
        if slot in seen:
            report.duplicates += 1
            continue
        seen.add(slot)
        truth = w.truth.get(slot)
        if truth is None:
            report.wrong.append(f"{slot}: no such change")
            continue
        for name, want in truth.items():
            got = image.get(name)
            if isinstance(want, int) and isinstance(got, str) and got.lstrip("-").isdigit():
                got = int(got)
            left_out = slot in w.partial and name in ("QTY", "NOTE")
            if left_out and _absent(payload, name):
                report.placeholders += 1
            elif got != want:
                report.wrong.append(f"{slot} {name}: got {got!r}, the source had {want!r}")
            elif left_out:
                report.completed += 1
    missing = [s for s in w.truth if s not in seen]
    report.missing = [str(s) for s in missing[:20]] + ([f"... {len(missing) - 20} more"] if len(missing) > 20 else [])
    return report


# ----------------------------------------------------------------------------- the run


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[list[LocalProcess]]:
    """A redis-server of this test only (no persistence), so it can be flushed and restarted;
    the list holds the one that runs (a restart appends the new one)."""
    try:
        servers = [start_redis(log_dir=tmp_path / "redis")]
    except Exception as exc:  # pragma: no cover - no redis-server binary
        pytest.skip(f"cannot start redis-server: {exc}")
    try:
        yield servers
    finally:
        for server in servers:
            server.process.send_signal(signal.SIGCONT)
            server.stop()


def run_scenario(kafka_bootstrap: str, servers: list[LocalProcess], tmp_path: Path, what: str,
                 forget: Callable[[Callable[[], None]], str]) -> None:
    """The scenario of the module documentation; ``forget(next_part)`` makes Redis forget and
    calls ``next_part`` to produce the data that follows (while Redis is down, for a restart)."""
    prefix = f"rf{uuid.uuid4().hex[:8]}"
    qlik_topic, arcion_topic = f"{prefix}-qlik", f"{prefix}-arcion"
    schema_ids = {t: uuid.uuid4().hex.upper() for t in QLIK_TABLES}
    w = generate(18, schema_ids, prefix)
    partitions = {qlik_topic: 4, arcion_topic: 2}
    create_topics(kafka_bootstrap, [qlik_topic], partitions=partitions[qlik_topic])
    create_topics(kafka_bootstrap, [arcion_topic], partitions=partitions[arcion_topic])
    outputs = [f"{prefix}.{SCHEMA}.{t}" for t in QLIK_TABLES] + [f"{prefix}.{ARCION_TABLE}"]
    create_topics(kafka_bootstrap, outputs, partitions=2)
    entries: list[dict[str, Any]] = [
        {"name": qlik_topic, "format": "qlik-json", "complete_partial_images": True},
        {"name": arcion_topic, "format": "arcion-csv",
         "options": {"table": ARCION_TABLE, "key.columns": "id", "column.types": "id:int64,ver:int64"}},
    ]
    address = servers[-1].address
    config = worker_config(kafka_bootstrap, address, f"{prefix}:", prefix, entries,
                           retry_initial_s=0.2, retry_max_s=1.0)
    config["redis"].update({"socket_timeout_s": 1.0, "metadata_cache_ttl_s": 0})
    group = config["worker"]["app_id"]
    ends: dict[str, dict[int, int]] = {qlik_topic: {}, arcion_topic: {}}

    def send(topic: str, messages: list[tuple[bytes, bytes]]) -> None:
        for p, end in produce(kafka_bootstrap, topic, messages).items():
            ends[topic][p] = max(ends[topic].get(p, 0), end)

    def committed(worker: WorkerProcess, timeout_s: float = 120.0) -> None:
        """Until the group committed every message produced so far (so all were processed)."""

        def done() -> bool:
            if not worker.process.running:
                raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
            return all(
                committed_offsets(kafka_bootstrap, group, topic, partitions[topic])[p] >= end
                for topic in ends for p, end in ends[topic].items()
            )

        wait_for(done, timeout_s, f"group {group} committing {ends}", 0.3)

    first = WorkerProcess(config, tmp_path, "worker-1")
    second: WorkerProcess | None = None
    try:
        first.wait_ready(90)
        send(qlik_topic, w.qlik_metadata)  # the metadata first, as Replicate sends it
        send(arcion_topic, w.arcion_header)
        committed(first)
        send(qlik_topic, w.qlik[0])
        send(arcion_topic, w.arcion[0])
        committed(first)
        client = redis.Redis.from_url(servers[-1].address)
        meta_keys = len(list(client.scan_iter(match=f"{prefix}:meta:*")))
        client.close()

        def next_part() -> None:
            send(qlik_topic, w.qlik[1])
            send(arcion_topic, w.arcion[1])

        injected = forget(next_part)
        print(f"\ninjected: {injected}; before it: {len(w.qlik_metadata)} qlik metadata messages, 1 arcion header, "
              f"{len(w.qlik[0]) + len(w.arcion[0])} data messages (redis held {meta_keys} metadata keys); "
              f"{len(w.qlik[1]) + len(w.arcion[1])} more produced after it")
        committed(first)

        second = WorkerProcess(config, tmp_path, "worker-2")  # a replica started after Redis forgot
        second.wait_ready(90)
        wait_for(lambda: first.readiness().get("ready") is True and second.readiness().get("ready") is True
                 and len(first.readiness().get("assigned_partitions", []))
                 + len(second.readiness().get("assigned_partitions", [])) == 6, 60, "the group of two", 0.3)
        send(qlik_topic, w.qlik[2])
        send(arcion_topic, w.arcion[2])
        committed(first)

        workers = {"worker-1": first, "worker-2": second}
        consumed = {name: {t: wk.total("cdcnorm_messages_in_total", topic=t) for t in (qlik_topic, arcion_topic)}
                    for name, wk in workers.items()}
        dlq_metric = sum(wk.total("cdcnorm_dlq_total") for wk in workers.values())
        readiness = second.readiness()
        redis_errors = first.total("cdcnorm_redis_errors_total")
        assert second.process.log_path is not None
        loaded = [line.split("cdcnorm.metadata_log ", 1)[1] for line in
                  second.process.log_path.read_text().splitlines() if "metadata log loaded" in line]
        client = redis.Redis.from_url(servers[-1].address)
        # each topic entry's documents are under its scope: ["<entry>", "<schema id>"]
        wait_for(lambda: all(any(client.scan_iter(match=f"{prefix}:meta:qlik.schema:*\"{s}\"]"))
                             for s in schema_ids.values()),
                 10, "redis rebuilt from the log", 0.2)
        rebuilt = len(list(client.scan_iter(match=f"{prefix}:meta:*")))
        client.close()
    finally:
        for wk in (second, first):
            if wk is not None:
                wk.stop()

    records = read_all(kafka_bootstrap, outputs, idle_s=2.0)
    dlq = read_all(kafka_bootstrap, [f"{prefix}.dlq"], idle_s=1.0)
    report = check(records, w)
    print(f"counted ({what}): produced qlik data={w.changes('qlik')} (partial updates={len(w.partial)}) "
          f"arcion rows={w.changes('arcion')}; consumed per worker {consumed}")
    print(f"counted ({what}): {report.line()}")
    print(f"counted ({what}): dlq topic={len(dlq)} dlq metric={dlq_metric:.0f}; worker-1 redis errors="
          f"{redis_errors:.0f}; redis metadata keys rebuilt={rebuilt}; worker-2: {loaded[:1]}, "
          f"ready with metadata_log={readiness.get('metadata_log')}")
    assert not dlq and dlq_metric == 0, [d.key for d in dlq[:5]]
    assert not report.missing, report.missing
    assert not report.wrong, report.wrong[:10]
    assert report.changes - report.duplicates == len(w.truth)
    assert consumed["worker-2"][qlik_topic] > 0 and consumed["worker-2"][arcion_topic] > 0, consumed
    assert report.placeholders > 0, "no left-out cell met a forgotten row image: the degradation was not exercised"
    assert rebuilt >= 2 * len(schema_ids) + 1  # the qlik schemas, the tables' versions, the arcion columns


def test_flushall_mid_run_loses_no_metadata(kafka_bootstrap: str, own_redis: list[LocalProcess],
                                            tmp_path: Path) -> None:
    def flush(next_part: Callable[[], None]) -> str:
        client = redis.Redis.from_url(own_redis[-1].address)
        keys = client.dbsize()
        client.flushall()
        client.close()
        next_part()
        return f"FLUSHALL on redis-server pid={own_redis[-1].process.pid} ({keys} keys dropped)"

    run_scenario(kafka_bootstrap, own_redis, tmp_path, "flushall", flush)


def test_redis_restart_without_persistence_loses_no_metadata(kafka_bootstrap: str, own_redis: list[LocalProcess],
                                                             tmp_path: Path) -> None:
    def restart(next_part: Callable[[], None]) -> str:
        old = own_redis[-1]
        port = int(old.address.rsplit(":", 1)[1].split("/")[0])
        client = redis.Redis.from_url(old.address)
        keys = client.dbsize()
        client.close()
        old.stop()
        down = time.monotonic()
        next_part()  # the worker pauses: the row state needs Redis
        time.sleep(max(0.0, 3.0 - (time.monotonic() - down)))
        own_redis.append(start_redis(port=port, log_dir=old.log_path.parent if old.log_path else None))
        return (f"redis-server pid={old.process.pid} stopped ({keys} keys; --save '' --appendonly no), a new "
                f"empty one pid={own_redis[-1].process.pid} on the same port {time.monotonic() - down:.1f}s later")

    run_scenario(kafka_bootstrap, own_redis, tmp_path, "restart", restart)
