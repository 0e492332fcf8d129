"""A topic's ``max.message.bytes``, enforced by Apache Kafka itself, met end to end.

Kafka refuses a record batch larger than its topic's ``max.message.bytes``
(``RecordTooLargeException``, ``MSG_SIZE_TOO_LARGE`` in librdkafka's delivery report). librdkafka,
unlike the Java producer, does not split a refused batch: every record in it is refused. So the
worker sizes its producer's batches to the smallest limit of the topics it writes to, read from
the broker (:class:`service.limits.TopicLimits`), and only the record that is too large on its own
is refused. The worker's own limits stay above the topics' in these tests (``worker.max_record_bytes``
unset: the producer's 2 MiB; librdkafka's ``message.max.bytes`` 2 MiB), so every refusal here is
the broker's.

* ``test_a_record_the_broker_refuses_is_dead_lettered_and_the_stream_goes_on``: the normalized
  topics are created with ``max.message.bytes=150000``; in the middle of a 2000-change Canal stream
  come two UPDATEs of a wide row of table ``t0`` (the stream's own topic): one whose record fits
  (about 112 kB) and one whose record does not (about 202 kB, from a 100 kB message). Checked: the
  second message is a dead letter with its original bytes, the source coordinates and the reason
  (output topic, record size, the broker's error, the topic's limit); the first record is
  delivered; every other change is delivered in per-key order (none was refused with the wide
  record, though the records of a fetch are far more than 150 kB per partition); the group commits
  the ends of both partitions; the worker never exits.
* ``test_a_limit_lowered_while_the_worker_runs_loses_nothing``: the normalized topics lowered from
  Kafka's default to 150000 bytes while the worker runs, then the second half of a 2000-change
  stream, a wide UPDATE among it, arrives in one burst. The worker's batches were sized to the old
  limit, so the broker refuses records that fit the new one, with their batch. Dead-lettering them
  would take good changes out of the stream (and a replay puts them after newer changes of their
  rows, which the sink applies over the newer ones for formats without a source sequence), so the
  worker stops without committing them (exit 3, once); restarted, as an orchestrator does, it sizes
  its batches to the new limit and produces them again. Checked: the first worker's exit code and
  reason; every change delivered (at least once), the last record of each version in version order
  per key, so each key's last record is its newest version; only the wide message is a dead letter,
  whole; the group commits the ends; the second worker never exits.
* ``test_a_dlq_topic_smaller_than_a_dead_letter_gets_a_smaller_one_and_the_worker_goes_on``: three
  source topics, three DLQ topics of decreasing ``max.message.bytes``. A DLQ topic whose limit the
  worker read at start (30000) gets an undecodable 40 kB message's dead letter as its prefix, sizes
  and sha256, with the decoder's error. A DLQ topic lowered to 30000 while the worker runs (after it
  read the limit) refuses the dead letter of a message whose record the broker refused: the worker
  then sends the smaller form, which the DLQ takes. A DLQ topic of 400 bytes cannot take even the
  smallest dead letter: the worker logs the message's coordinates at ERROR, counts it
  (``cdcnorm_dlq_refused_total``) and goes on (as Kafka Connect's dead-letter reporter does), the
  message staying in its source topic. Before, a refused dead letter stopped the worker (exit 3)
  without committing: restarted, it met the same message and stopped again, for good.

Run with ``-s`` to see what was injected and counted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from service.local import wait_for
from tests.faults.procs import (
    alter_topic,
    committed_offsets,
    create_configured_topics,
    dead_letter_line,
    produce_mid_stream,
    run_until_committed,
    topic_config,
    wait_committed,
    worker_config,
)
from tests.faults.workload import (
    BASE_TS,
    DB,
    OutRecord,
    canal_message,
    check_order,
    generate,
    produce,
    read_all,
)
from tests.service.harness import WorkerProcess, read_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

TOPIC_LIMIT = 150_000
CHANGES = 2000
WIDE_IDS = 1_000_000  # ids of the injected wide rows start above the stream's


def wide_update(kid: int, width: int, table: str = "t0") -> bytes:
    """A Canal UPDATE of ``table`` whose row has a ``width``-character ``name``; only ``qty``
    changed, so the normalized record holds the wide row twice (before and after)."""
    row = {"id": kid, "ver": 2, "name": "w" * width, "qty": 2}
    return canal_message(table, "UPDATE", row, {"ver": 1, "qty": 1}, BASE_TS)


def _headers(letter: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in letter.headers.items()}


def _row_id(record: OutRecord) -> int:
    payload = orjson.loads(record.value or b"{}").get("payload") or {}
    image = payload.get("after") or payload.get("before") or {}
    return int(image.get("id", 0))


def _worker_log(workdir: Path) -> str:
    return (workdir / "worker.log").read_text(errors="replace")


def test_a_record_the_broker_refuses_is_dead_lettered_and_the_stream_goes_on(
    apache_kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = apache_kafka_bootstrap
    stream = generate(CHANGES, 200, seed=71)
    fits, too_wide = wide_update(WIDE_IDS + 1, 55_000), wide_update(WIDE_IDS + 2, 100_000)
    run = produce_mid_stream(bootstrap, "tl", stream, [(b"wide", fits), (b"wider", too_wide)],
                             output_config={"max.message.bytes": str(TOPIC_LIMIT)})
    prefix, source, dlq_topic, ends, at = run.prefix, run.source, run.dlq_topic, run.ends, run.at
    t0 = f"{prefix}.{DB}.t0"
    assert topic_config(bootstrap, t0, "max.message.bytes") == str(TOPIC_LIMIT)
    print(f"\ninjected: {CHANGES} changes over 2 partitions; after the first {CHANGES // 2}, two Canal UPDATEs of a "
          f"wide row of t0: {len(fits)} bytes at {source}[{at[b'wide'][0]}]@{at[b'wide'][1]} and {len(too_wide)} "
          f"bytes at {source}[{at[b'wider'][0]}]@{at[b'wider'][1]}; normalized topics max.message.bytes={TOPIC_LIMIT}, "
          f"worker limits the defaults (2 MiB)")

    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    seen = run_until_committed(config, tmp_path, run, "RecordTooLargeError")

    committed = committed_offsets(bootstrap, config["worker"]["app_id"], source, 2)
    records = read_all(bootstrap, run.outputs)
    wide = [r for r in records if _row_id(r) > WIDE_IDS]
    report = check_order([r for r in records if _row_id(r) <= WIDE_IDS], prefix, stream)
    letters = {r.key or b"": r for r in read_topics(bootstrap, [dlq_topic], idle_s=2.0)}
    log = _worker_log(tmp_path)
    sized = [line for line in log.splitlines() if "output batches of at most" in line]
    print(f"counted: consumed={seen.consumed:.0f} (of {CHANGES + 2}) committed={committed} (ends {ends}) "
          f"{seen.seconds:.1f}s after ready; worker running={seen.running}; wide records delivered="
          f"{[(r.topic, len(r.value or b'')) for r in wide]}; {report.line()}")
    print("counted: " + "; ".join(line.split("cdcnorm", 1)[-1] for line in sized))
    for letter in letters.values():
        print(f"counted: dead letter {dead_letter_line(letter)}")
    assert seen.running and seen.consumed == CHANGES + 2
    assert report.missing == 0 and not report.out_of_order and report.changes - report.duplicates == CHANGES
    assert not report.wrong
    assert [committed[p] for p in sorted(ends)] == [ends[p] for p in sorted(ends)]
    # the record that fits the topic went through; the broker refused the other one, and only it
    assert [(r.topic, _row_id(r)) for r in wide] == [(t0, WIDE_IDS + 1)]
    assert TOPIC_LIMIT - 50_000 < len(wide[0].value or b"") < TOPIC_LIMIT
    assert set(letters) == {b"wider"} and seen.dead_letters == 1
    assert sized and f"max.message.bytes={TOPIC_LIMIT}" in sized[0]
    letter = letters[b"wider"]
    h = _headers(letter)
    assert letter.value == too_wide  # the original message, byte for byte
    assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == (
        source, str(at[b"wider"][0]), str(at[b"wider"][1]))
    assert h["__connect.errors.stage"] == "KAFKA_PRODUCE"
    assert h["__connect.errors.exception.class.name"] == "service.dlq.RecordTooLargeError"
    assert h["__cdcnorm.too_large.topic"] == t0 and "__cdcnorm.too_large.limit" not in h  # not the worker's check
    size = int(h["__cdcnorm.too_large.bytes"])
    assert 2 * len(too_wide) - 1000 < size and size > TOPIC_LIMIT
    reason = h["__connect.errors.exception.message"]
    assert reason.startswith(f"output record of {size} bytes for topic {t0} refused: ")
    assert "MSG_SIZE_TOO_LARGE: Broker: Message size too large" in reason and "librdkafka's check" not in reason
    assert f"the topic's max.message.bytes is {TOPIC_LIMIT}" in reason
    assert "record batch" not in reason  # refused for itself, not for the batch it was sent in


def test_a_dlq_topic_smaller_than_a_dead_letter_gets_a_smaller_one_and_the_worker_goes_on(
    apache_kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = apache_kafka_bootstrap
    stream = generate(1200, 100, seed=73)
    too_wide = wide_update(WIDE_IDS + 2, 100_000)  # its record (~202 kB) is refused by t0, the dead letter by its DLQ
    bad = b'{"data": [{"id": "' + b"z" * 40_000 + b'"'  # undecodable, 40 kB
    half = len(stream.messages) // 2
    first_half = SimpleNamespace(messages=stream.messages[:half])
    run = produce_mid_stream(bootstrap, "td", first_half, [], output_config={"max.message.bytes": str(TOPIC_LIMIT)})
    prefix, source = run.prefix, run.source
    lowered, known, tiny = run.dlq_topic, f"{prefix}.dlq-known", f"{prefix}.dlq-tiny"
    src_known, src_tiny = f"{prefix}-src-known", f"{prefix}-src-tiny"
    create_configured_topics(bootstrap, {known: {"max.message.bytes": "30000"}, tiny: {"max.message.bytes": "400"},
                                         src_known: {}, src_tiny: {}}, partitions=1)
    topics = [{"name": source, "format": "canal-json", "dlq_topic": lowered},
              {"name": src_known, "format": "canal-json", "dlq_topic": known},
              {"name": src_tiny, "format": "canal-json", "dlq_topic": tiny}]
    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, topics)
    group = config["worker"]["app_id"]
    print(f"\ninjected: the first {half} of {len(stream.messages)} changes; the worker reads the topics' limits "
          f"(normalized topics {TOPIC_LIMIT}; DLQs: {lowered} 1048588, {known} 30000, {tiny} 400)")

    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready(90)
        wait_committed(bootstrap, group, source, run.ends, 120, worker)
        alter_topic(bootstrap, lowered, {"max.message.bytes": "30000"})
        (wider_at,) = produce(bootstrap, source, [(b"wider", too_wide)]).items()
        known_at = produce(bootstrap, src_known, [(b"bad", bad)])
        tiny_at = produce(bootstrap, src_tiny, [(b"bad", bad)])
        for p, end in produce(bootstrap, source, stream.messages[half:]).items():
            run.ends[p] = max(run.ends.get(p, 0), end)
        print(f"injected: {lowered} lowered to max.message.bytes=30000 while the worker runs; then {len(too_wide)} "
              f"bytes (a wide UPDATE of t0) at {source}[{wider_at[0]}]@{wider_at[1] - 1}, an undecodable "
              f"{len(bad)}-byte message to {src_known} and to {src_tiny}, and the other {len(stream.messages) - half} "
              f"changes")
        wait_committed(bootstrap, group, source, run.ends, 120, worker)
        wait_committed(bootstrap, group, src_known, known_at, 60, worker)
        wait_committed(bootstrap, group, src_tiny, tiny_at, 60, worker)
        running = worker.process.running
        refused_metric = worker.total("cdcnorm_dlq_refused_total", topic=src_tiny)
    finally:
        worker.stop()

    records = read_all(bootstrap, run.outputs)
    report = check_order(records, prefix, stream)
    got = {t: read_topics(bootstrap, [t], idle_s=1.0) for t in (lowered, known, tiny)}
    errors = [line for line in _worker_log(tmp_path).splitlines() if "dead letter refused" in line]
    print(f"counted: worker running={running}; {report.line()}; cdcnorm_dlq_refused_total={refused_metric:.0f}")
    for topic, letters in got.items():
        for letter in letters:
            print(f"counted: {topic}: {len(letter.value or b'')}-byte dead letter {dead_letter_line(letter)}")
    for line in errors:
        print(f"counted: logged {line.split('cdcnorm', 1)[-1]}")
    assert running
    assert report.missing == 0 and not report.out_of_order and report.changes == len(stream.messages)
    assert not report.wrong and report.duplicates == 0
    assert [len(got[lowered]), len(got[known]), len(got[tiny])] == [1, 1, 0]

    # lowered at run time: the full dead letter was refused, the smaller form taken
    assert any("sending a smaller one" in line and f"dlq={lowered} " in line for line in errors)
    (letter,) = got[lowered]
    h = _headers(letter)
    assert letter.key == b"wider" and letter.value == too_wide[:1024]
    assert h["__cdcnorm.oversized.value.bytes"] == str(len(too_wide))
    assert h["__cdcnorm.oversized.value.sha256"] == hashlib.sha256(too_wide).hexdigest()
    assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == (
        source, str(wider_at[0]), str(wider_at[1] - 1))
    assert h["__connect.errors.exception.class.name"] == "service.dlq.RecordTooLargeError"
    assert h["__cdcnorm.too_large.topic"] == f"{prefix}.{DB}.t0"
    assert "MSG_SIZE_TOO_LARGE: Broker: Message size too large" in h["__connect.errors.exception.message"]

    # known at start: the dead letter was made to fit, with the decoder's error
    (letter,) = got[known]
    h = _headers(letter)
    assert letter.key == b"bad" and letter.value == bad[:1024] and len(letter.value or b"") < 30_000
    assert h["__cdcnorm.oversized.value.sha256"] == hashlib.sha256(bad).hexdigest()
    assert int(h["__cdcnorm.oversized.limit"]) <= 30_000
    assert h["__connect.errors.stage"] == "VALUE_CONVERTER"
    assert h["__connect.errors.exception.class.name"].startswith("transforms.")
    assert (h["__connect.errors.topic"], h["__connect.errors.offset"]) == (src_known, "0")

    # smaller than any dead letter: logged with the coordinates, counted, and the worker went on
    assert refused_metric == 1
    assert any(f"topic={src_tiny} partition=0 offset=0" in line and f"dlq={tiny}" in line for line in errors)
    assert committed_offsets(bootstrap, group, src_tiny, 1) == [1]


def _change(value: bytes | None) -> tuple[str, int, int]:
    """(table, id, ver) of a Canal source message or of a normalized record's value."""
    doc = orjson.loads(value or b"{}")
    if "payload" in doc:
        payload = doc["payload"]
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        return payload["source"]["table"], int(image["id"]), int(image["ver"])
    row = doc["data"][0]
    return doc["table"], int(row["id"]), int(row["ver"])


def test_a_limit_lowered_while_the_worker_runs_loses_nothing(
    apache_kafka_bootstrap: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = apache_kafka_bootstrap
    stream = generate(CHANGES, 200, seed=79)
    too_wide = wide_update(WIDE_IDS + 2, 100_000)
    half = len(stream.messages) // 2
    run = produce_mid_stream(bootstrap, "tw", SimpleNamespace(messages=stream.messages[:half]), [])
    prefix, source, dlq_topic = run.prefix, run.source, run.dlq_topic
    config = worker_config(bootstrap, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}])
    group = config["worker"]["app_id"]

    first = WorkerProcess(config, tmp_path / "first")
    try:
        first.wait_ready(90)
        wait_committed(bootstrap, group, source, run.ends, 120, first)
        for topic in run.outputs:
            alter_topic(bootstrap, topic, {"max.message.bytes": str(TOPIC_LIMIT)})
        # the rest in one produce request (one record batch per partition) while the worker is frozen
        # for a moment: its first fetch afterwards takes it all, as after a burst
        rest = [*stream.messages[half:half + 100], (b"wider", too_wide), *stream.messages[half + 100:]]
        first.process.freeze()
        try:
            for p, end in produce(bootstrap, source, rest, **{"linger.ms": 1500, "batch.size": 4_000_000,
                                                               "message.max.bytes": 4_000_000}).items():
                run.ends[p] = max(run.ends.get(p, 0), end)
        finally:
            first.process.resume()
        print(f"\ninjected: the first {half} changes; the worker read the normalized topics' limits (Kafka's "
              f"default); then they were lowered to {TOPIC_LIMIT}, and the other {len(stream.messages) - half} "
              f"changes with {len(too_wide)} bytes (a wide UPDATE of t0) among them came in one burst")
        wait_for(lambda: not first.process.running, 60, "the first worker stopping", 0.2)
        exit_code = first.process.process.returncode
    finally:
        first.stop()
    first_log = (tmp_path / "first" / "worker.log").read_text(errors="replace")
    stopped = [line for line in first_log.splitlines() if "were refused with the record batch" in line]

    second = WorkerProcess(config, tmp_path / "second")  # as an orchestrator restarts it
    try:
        second.wait_ready(90)
        wait_committed(bootstrap, group, source, run.ends, 120, second)
        running = second.process.running
    finally:
        second.stop()
    second_log = (tmp_path / "second" / "worker.log").read_text(errors="replace")

    records = read_all(bootstrap, run.outputs)
    letters = read_topics(bootstrap, [dlq_topic], idle_s=2.0)
    sized = [line for line in second_log.splitlines() if "output batches of at most" in line]
    delivered = [_change(r.value) for r in records if r.value is not None]
    print(f"counted: first worker exit code {exit_code}: {stopped[0].split('error=', 1)[-1] if stopped else '-'}")
    print(f"counted: second worker running={running}; {len(delivered)} changes delivered "
          f"({len(delivered) - len(set(delivered))} again), {len(letters)} dead letter(s); "
          + "; ".join(line.split("INFO", 1)[-1] for line in sized))
    for letter in letters:
        print(f"counted: dead letter {dead_letter_line(letter)}")
    # the first worker stopped at the refused batch, without committing it; the second went on
    assert exit_code == 3 and stopped and f"max.message.bytes={TOPIC_LIMIT}" in stopped[0]
    assert running and "were refused with the record batch" not in second_log
    assert any(f"max.message.bytes={TOPIC_LIMIT}" in line for line in sized)
    assert committed_offsets(bootstrap, group, source, 2) == [run.ends[0], run.ends[1]]
    # nothing lost: every change delivered (some twice: produced again after the restart); the
    # last record of each version comes in version order per key (what the sink's merge by
    # partition and offset keeps), so the last record of each key is its newest version
    expected = {_change(value) for _, value in stream.messages}
    assert set(delivered) == expected
    last: dict[tuple[str, int, int], int] = {change: at for at, change in enumerate(delivered)}
    by_key: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for (table, kid, ver), at in last.items():
        by_key.setdefault((table, kid), []).append((at, ver))
    assert all([v for _, v in sorted(pairs)] == sorted(v for _, v in pairs) for pairs in by_key.values())
    # the wide message, and only it, is a dead letter, whole
    assert {letter.key for letter in letters} == {b"wider"} and all(letter.value == too_wide for letter in letters)
    assert "record batch" not in _headers(letters[-1])["__connect.errors.exception.message"]
