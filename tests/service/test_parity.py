"""One truth: the worker over a real broker writes exactly what ``cdcnorm transform --config`` prints,
for every data file of ``tests/data`` (which holds a copy of every message file of the shared
vendor vectors, checked here), run after run, and across a restart in the middle.

Each file is one source topic (one partition, its messages in file order) and one ``topics[]``
entry of one pipeline config (its format and options); the entry's ``topic_template`` and
``dlq_topic`` give it output topics of its own, so the order of every key's records is compared.
Schema-change and transaction records (the prefix's own topics, shared by every entry) and
records without a key (spread over their topic's partitions) are compared as multisets.

1. ``cdcnorm transform --config C --topic T --key-lines`` (the command itself, in this process)
   runs every file.
2. Worker run B starts on the first half of every topic and stops; its Redis keys are deleted
   (but those of the namespaces Redis alone keeps), so the restarted worker rebuilds the
   decoders' state (table definitions, schemas, inferred types ...) from the metadata log.
3. The second halves are produced; worker run A (a fresh app id, prefix and Redis prefix) runs
   everything in one go; then B runs again, from its committed offsets.
4. A's records equal the CLI's (topic, key, value, headers), each entry's dead letters number the
   CLI's failures, and B's records are byte-identical to A's (but for the prefix).
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import yaml

from service.local import create_topics
from service.state import CACHE_ONLY_NAMESPACES
from tests.goldens import DATA, SHARED, Case, cases, iter_messages
from tests.service.harness import Record, WorkerProcess, read_topics
from tests.service.test_integration import produce
from transforms.decoders import decoder_class

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

Message = tuple[bytes | None, bytes | None]

def _messages(case: Case) -> list[Message]:
    binary = decoder_class(case.format_id).binary
    out: list[Message] = []
    key_lines = bool(case.options.get("__key_lines"))
    for _, key, value in iter_messages(case, binary):
        if not binary and b"\n" in value:  # a pretty-printed document: one line, as the CLI reads it
            value = orjson.dumps(orjson.loads(value))
        out.append((key, None if key_lines and value.strip() == b"null" else value))
    return out


def _cli_input(messages: list[Message], binary: bool) -> bytes:
    lines = []
    for key, value in messages:
        lines.append(b"null" if key is None else key)
        if value is None:
            lines.append(b"null")
        else:
            lines.append(base64.b64encode(value) if binary else value)
    return b"\n".join(lines) + b"\n"


def test_vector_files_have_their_copy_in_tests_data() -> None:
    vectors = SHARED / "vectors"
    if not vectors.exists():
        pytest.skip(f"{vectors} is absent")
    stems = {p.name[: -len(".txt")] for p in DATA.glob("*/*.txt")}
    missing = [
        str(p.relative_to(vectors))
        for p in sorted(vectors.glob("*/*"))
        if p.suffix in (".txt", ".json") and not any(p.stem in s for s in stems)
    ]
    assert not missing, f"vector files without a tests/data case (the parity test would miss them): {missing}"


def _config(bootstrap: str, redis_url: str, redis_prefix: str, prefix: str, app_id: str,
            entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "topic_prefix": prefix,
        "broker": {"bootstrap_servers": bootstrap, "session_timeout_s": 6},
        "redis": {"url": redis_url, "key_prefix": redis_prefix},
        "worker": {"app_id": app_id, "commit_interval_s": 0.5},
        "topics": entries,
    }


def _entries(run: str, all_cases: list[Case]) -> tuple[list[dict[str, Any]], list[str]]:
    entries, sources = [], []
    for i, case in enumerate(all_cases):
        source = f"{run}-src-{i:03d}-" + re.sub(r"[^A-Za-z0-9._-]", "_", f"{case.format_id}.{case.name}")[:150]
        options = {k: v for k, v in case.options.items() if not k.startswith("__")}
        entries.append({
            "name": source,
            "format": case.format_id,
            "options": options,
            "topic_template": f"{{prefix}}.c{i:03d}.{{db}}.{{table}}",
            "dlq_topic": f"{{prefix}}.c{i:03d}.dlq",
        })
        sources.append(source)
    return entries, sources


def _with_prefix(entries: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [{**e, "dlq_topic": e["dlq_topic"].replace("{prefix}", prefix)} for e in entries]


def _run_cli(config_path: Path, source: str, data: bytes, tmp: Path) -> tuple[list[dict[str, Any]], int]:
    from typer.testing import CliRunner

    from cdcnorm.cli import app

    path = tmp / f"{source}.txt"
    path.write_bytes(data)
    result = CliRunner().invoke(
        app, ["transform", "--config", str(config_path), "--topic", source, "--key-lines", str(path)]
    )
    assert result.exit_code in (0, 2), f"{source}: {result.output}\n{result.exception!r}"
    records = [orjson.loads(line) for line in result.stdout_bytes.splitlines() if line.strip()]
    failures = sum(1 for line in result.stderr_bytes.splitlines() if b'"error"' in line)
    return records, failures


def _wait_all(worker: WorkerProcess, count: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not worker.process.running:
            raise RuntimeError(f"worker exited:\n{worker.process.log_tail()}")
        try:
            if worker.total("cdcnorm_messages_in_total") >= count and worker.total("cdcnorm_inflight_messages") == 0:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"worker processed {worker.total('cdcnorm_messages_in_total')} of {count} messages")
        time.sleep(0.3)


def _run_worker(config: dict[str, Any], workdir: Path, name: str, count: int) -> None:
    worker = WorkerProcess(config, workdir, name)
    try:
        worker.wait_ready(timeout_s=90)
        _wait_all(worker, count)
    finally:
        worker.stop()


def _output_topics(bootstrap: str, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return sorted(t for t in topics if t == prefix or t.startswith(prefix + "."))


Keyed = dict[tuple[str, bytes], list[tuple[Any, ...]]]


def _group(records: list[tuple[str, bytes | None, bytes | None, tuple[tuple[str, str], ...]]],
           prefix: str) -> tuple[Keyed, Counter[Any]]:
    """Per (topic, key) the values and headers in order, for an entry's own topics; the shared
    prefix topics (schema changes, transactions) and records without a key (the producer spreads
    those over the topic's partitions) as a multiset."""
    keyed: Keyed = {}
    shared: Counter[Any] = Counter()
    for topic, key, value, headers in records:
        if key is None or topic in (prefix, f"{prefix}.transaction"):
            shared[(topic, key, value, headers)] += 1
        else:
            keyed.setdefault((topic, key), []).append((value, headers))
    return keyed, shared


def _broker_records(got: list[Record], prefix: str, as_prefix: str | None = None) -> list[Any]:
    """(topic, key, value, headers) of every record but the dead letters; with ``as_prefix``, the
    run's prefix replaced by the other run's in every part (for a byte-for-byte comparison)."""
    old, new = prefix.encode(), (as_prefix or prefix).encode()
    out = []
    for r in got:
        if r.topic.endswith(".dlq"):
            continue
        out.append((
            r.topic.replace(prefix, as_prefix or prefix),
            None if r.key is None else r.key.replace(old, new),
            None if r.value is None else r.value.replace(old, new),
            tuple((k, v.replace(old, new).decode("utf-8", "backslashreplace")) for k, v in r.headers.items()),
        ))
    return out


def _canonical(value: bytes | None) -> bytes | None:
    return None if value is None else orjson.dumps(orjson.loads(value), option=orjson.OPT_SORT_KEYS)


def _canonical_json(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def test_worker_equals_cdcnorm_transform_run_after_run_and_across_a_restart(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    all_cases = cases()
    run = f"par{uuid.uuid4().hex[:6]}"
    entries, sources = _entries(run, all_cases)
    messages = {s: _messages(c) for s, c in zip(sources, all_cases, strict=True)}
    total = sum(len(m) for m in messages.values())
    create_topics(kafka_bootstrap, sources, partitions=1)
    for source in sources:
        msgs = messages[source]
        produce(kafka_bootstrap, source, msgs[: len(msgs) // 2], partition=0)

    pa, pb = f"{run}a", f"{run}b"
    config_a = _config(kafka_bootstrap, redis_url, f"{pa}:", pa, f"{pa}-group", _with_prefix(entries, pa))
    config_b = _config(kafka_bootstrap, redis_url, f"{pb}:", pb, f"{pb}-group", _with_prefix(entries, pb))

    # B, first half; then it forgets what Redis caches: the restart rebuilds the decoders' state
    # from the metadata log. What Redis alone holds by design (CACHE_ONLY_NAMESPACES: a SharePlex
    # UPDATE BEFORE waiting for its UPDATE AFTER) it keeps, as a restarted pod finds it.
    half = sum(len(m) // 2 for m in messages.values())
    _run_worker(config_b, tmp_path / "b", "b1", half)
    client = redis.Redis.from_url(redis_url)
    kept = tuple(f"{pb}:meta:{namespace}:".encode() for namespace in CACHE_ONLY_NAMESPACES)
    keys = [k for k in client.scan_iter(match=f"{pb}:*", count=1000) if not k.startswith(kept)]
    assert keys, "run B wrote no state to Redis"
    client.delete(*keys)
    for source in sources:
        msgs = messages[source]
        produce(kafka_bootstrap, source, msgs[len(msgs) // 2 :], partition=0)
    first_half = time.monotonic()

    # the CLI, with A's config
    config_path = tmp_path / "a.yaml"
    config_path.write_text(yaml.safe_dump(config_a, sort_keys=False))
    cli_records: list[Any] = []
    cli_failures: dict[str, int] = {}
    for source, case, entry in zip(sources, all_cases, entries, strict=True):
        recs, failed = _run_cli(config_path, source, _cli_input(messages[source], decoder_class(case.format_id).binary),
                                tmp_path)
        cli_failures[entry["dlq_topic"].replace("{prefix}", pa)] = failed
        cli_records += [(r["topic"], _canonical_json(r["key"]), _canonical_json(r["value"]),
                         tuple(tuple(h) for h in r.get("headers", ()))) for r in recs]
    cli_done = time.monotonic()

    _run_worker(config_a, tmp_path / "a", "a", total)
    _run_worker(config_b, tmp_path / "b", "b2", total - half)  # from its committed offsets
    workers_done = time.monotonic()

    got_a = read_topics(kafka_bootstrap, _output_topics(kafka_bootstrap, pa), timeout_s=90)
    got_b = read_topics(kafka_bootstrap, _output_topics(kafka_bootstrap, pb), timeout_s=90)
    try:
        # the dead letters: as many per entry as the CLI's failures
        dlq = Counter(r.topic for r in got_a if r.topic.endswith(".dlq"))
        assert {t: n for t, n in dlq.items() if n} == {t: n for t, n in cli_failures.items() if n}

        # A equals the CLI
        a_records = _broker_records(got_a, pa)
        a_json = [(t, _canonical(k), _canonical(v), h) for t, k, v, h in a_records]
        want_keyed, want_shared = _group(cli_records, pa)
        got_keyed, got_shared = _group(a_json, pa)
        diffs = [k for k in want_keyed.keys() | got_keyed.keys() if want_keyed.get(k) != got_keyed.get(k)]
        detail = [
            f"{k[0]} key {k[1][:200]!r}:\n  cli    {str(want_keyed.get(k))[:1500]}\n  worker {str(got_keyed.get(k))[:1500]}"
            for k in sorted(diffs)[:3]
        ]
        assert not diffs, f"{len(diffs)} (topic, key)s differ between the CLI and the worker:\n" + "\n".join(detail)
        assert want_shared == got_shared, (want_shared - got_shared, got_shared - want_shared)

        # B (restarted halfway, state from the metadata log) equals A byte for byte
        b_keyed, b_shared = _group(_broker_records(got_b, pb, as_prefix=pa), pa)
        a_keyed, a_shared = _group(a_records, pa)
        diffs = [k for k in a_keyed.keys() | b_keyed.keys() if a_keyed.get(k) != b_keyed.get(k)]
        detail = [
            f"{k[0]} key {k[1][:200]!r}:\n  run A {str(a_keyed.get(k))[:1500]}\n  run B {str(b_keyed.get(k))[:1500]}"
            for k in sorted(diffs)[:3]
        ]
        assert Counter(r.topic for r in got_b if r.topic.endswith(".dlq")) == Counter(
            r.topic.replace(pa, pb, 1) for r in got_a if r.topic.endswith(".dlq")
        )
        odd = (a_shared - b_shared) + (b_shared - a_shared)
        assert all(t not in (pa, f"{pa}.transaction") for t, *_ in odd), odd  # schema changes, transactions
        topics = {k[0] for k in diffs} | {t for t, *_ in odd}
        diverging = sorted({str(all_cases[int(t[len(pa) + 2 : len(pa) + 5])]) for t in topics})
        assert not diverging, (
            f"{len(diffs)} (topic, key)s differ between the two worker runs, of {diverging}:\n" + "\n".join(detail)
        )
    finally:
        client.delete(*(list(client.scan_iter(match=f"{pa}:*", count=1000))
                        + list(client.scan_iter(match=f"{pb}:*", count=1000))) or ["-"])
        client.close()
        print(f"\nparity: {len(all_cases)} files, {total} messages, {len(got_a)} records of run A; B first half {first_half - started:.1f}s, CLI {cli_done - first_half:.1f}s, "
              f"workers {workers_done - cli_done:.1f}s, total {time.monotonic() - started:.1f}s")
