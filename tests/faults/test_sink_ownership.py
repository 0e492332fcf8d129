"""Two sinks by mistake on the same tables, one consumer group each.

Each table belongs to the sink whose group created or claimed it (the ``cdcnorm.owner`` table
property). Sink A creates the tables; sink B (another group, same warehouse and topics) stops at
its first micro-batch with an error naming the table, the owner and how to take over, having
written nothing and committed no offset. Then sink C (B's group, ``take_over_tables_from: A``)
claims the tables at start; A, still running, stops at its next micro-batch; C goes on from the
offsets A recorded in the tables. The tables equal the independently computed state.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from service.local import create_topics, wait_for
from tests.catalogs import TestCatalog
from tests.faults.procs import (
    committed_offsets,
    kill_group,
    read_warehouses,
    sink_batches,
    sink_config,
    start_sink,
)
from tests.faults.workload import DB, TABLES, assert_tables_equal_expected, generate, produce_normalized

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(480)]

CHANGES = 3000
KEYS_PER_TABLE = 120
PARTITIONS = 2


def _committed(bootstrap: str, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    return {(t, p): o for t in topics for p, o in enumerate(committed_offsets(bootstrap, group, t, PARTITIONS))}


def _error_line(log: Path) -> str:
    return next((line for line in log.read_text(errors="replace").splitlines() if "belongs to another sink" in line), "")


def test_a_second_sink_refuses_tables_another_group_owns_until_it_takes_them_over(
    kafka_bootstrap: str, tmp_path: Path, catalog: TestCatalog
) -> None:
    prefix = f"fo{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{DB}.{t}" for t in TABLES]
    group_a, group_b = f"{prefix}-sink-a", f"{prefix}-sink-b"
    stream = generate(CHANGES, KEYS_PER_TABLE, seed=61)
    create_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    thirds = [stream.messages[i * CHANGES // 3:(i + 1) * CHANGES // 3] for i in range(3)]
    print(f"\nthe sinks write through a {catalog.kind} catalog")
    pattern = rf"{prefix}\.{DB}\..*"
    common: dict[str, Any] = {"trigger_interval_seconds": 1, "maintenance": {"enabled": False}}
    config_a = sink_config(tmp_path / "sink-a.yaml", kafka_bootstrap, pattern, group_a, catalog, **common)
    config_b = sink_config(tmp_path / "sink-b.yaml", kafka_bootstrap, pattern, group_b, catalog, **common)
    config_c = sink_config(tmp_path / "sink-c.yaml", kafka_bootstrap, pattern, group_b, catalog,
                           take_over_tables_from=group_a, **common)
    logs = {name: tmp_path / f"sink-{name}.log" for name in "abc"}
    env = {"PYTHONUNBUFFERED": "1"}
    procs: list[Any] = []

    def committed_up_to(group: str, ends: dict[tuple[str, int], int], running: Any) -> bool:
        assert running.poll() is None, running.args
        got = _committed(kafka_bootstrap, group, topics)
        return all(got[tp] >= end for tp, end in ends.items())

    t0 = time.monotonic()
    try:
        ends = produce_normalized(kafka_bootstrap, prefix, thirds[0])
        sink_a = start_sink(config_a, env=env, log=logs["a"])
        procs.append(sink_a)
        wait_for(lambda: committed_up_to(group_a, ends, sink_a), 180, "sink A committing the first third", 0.5)
        print(f"\nsink A (group {group_a}) created the tables and committed the first third in {time.monotonic() - t0:.0f}s")

        # -- B: another group, same warehouse and topics, by mistake
        sink_b = start_sink(config_b, env=env, log=logs["b"])
        procs.append(sink_b)
        print(f"injected: sink B (group {group_b}) started on the same warehouse and topics")
        b_code = sink_b.wait(180)
        b_error = _error_line(logs["b"])
        b_committed = _committed(kafka_bootstrap, group_b, topics)
        b_batches = sink_batches(logs["b"])
        print(f"counted: sink B exit={b_code} batches={len(b_batches)} committed offsets={sorted(set(b_committed.values()))}")
        print(f"counted: sink B said: {b_error[:700]}")
        ends.update(produce_normalized(kafka_bootstrap, prefix, thirds[1]))
        wait_for(lambda: committed_up_to(group_a, ends, sink_a), 120, "sink A committing the second third", 0.5)
        print("sink A committed the second third")

        # -- C: B's group, told to take over A's tables; A is still running
        sink_c = start_sink(config_c, env=env, log=logs["c"])
        procs.append(sink_c)
        print(f"injected: sink C (group {group_b}, take_over_tables_from: {group_a}) started while A runs")
        wait_for(lambda: sink_c.poll() is None and "took over" in logs["c"].read_text(errors="replace"), 180,
                 "sink C taking the tables over", 0.5)
        took_over = next(line for line in logs["c"].read_text(errors="replace").splitlines() if "took over" in line)
        print(f"counted: sink C said: {took_over}")
        ends.update(produce_normalized(kafka_bootstrap, prefix, thirds[2]))
        a_code = sink_a.wait(120)
        a_error = _error_line(logs["a"])
        print(f"counted: sink A exit={a_code} after the take-over; it said: {a_error[:300]}")
        wait_for(lambda: committed_up_to(group_b, ends, sink_c), 180, "sink C committing everything", 0.5)
        sink_c.send_signal(signal.SIGTERM)
        c_code = sink_c.wait(120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)

    a_committed = _committed(kafka_bootstrap, group_a, topics)
    c_batches = sink_batches(logs["c"])
    print(f"counted: sink A committed {sum(a_committed.values())} offsets (two thirds), sink C read "
          f"{sum(b[0] for b in c_batches)} records in {len(c_batches)} batches and applied "
          f"{sum(b[1] for b in c_batches)} changes (the rest skipped as applied by A); all {sum(ends.values())}; "
          f"{time.monotonic() - t0:.0f}s")

    assert b_code == 1 and not b_batches, logs["b"].read_text(errors="replace")[-3000:]
    assert all(o == -1 for o in b_committed.values()), b_committed
    assert f"names consumer group '{group_a}'" in b_error and f"group_id is '{group_b}'" in b_error
    assert f"take_over_tables_from: '{group_a}'" in b_error and f"`lake`.`{DB}`." in b_error
    assert f"took over {len(TABLES)} tables from group {group_a}" in took_over
    assert a_code == 1 and f"names consumer group '{group_b}'" in a_error, logs["a"].read_text(errors="replace")[-3000:]
    assert c_code == 0, logs["c"].read_text(errors="replace")[-3000:]
    (tables,) = read_warehouses(config_c)
    assert_tables_equal_expected(tables, stream, "tables after two sinks and a take-over")
