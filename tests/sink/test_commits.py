"""The two ways a row delta is committed (sink.commits): the compiled helper and its py4j
fallback give the same tables, snapshot for snapshot, on the same scripted history."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import sink.commits as commits
from tests.sink.history import resurrection_history, scripted_history
from tests.sink.scripted import (  # noqa: F401 (the spark and broker fixtures)
    ScriptedBroker,
    scripted_broker,
    scripted_config,
    scripted_sink,
    scripted_spark,
    stored_id,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _rows(spark: Any, tid: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.table(tid).collect())


def _summaries(spark: Any, tid: str) -> list[dict[str, str]]:
    """The cdcnorm properties and the file counts of each snapshot, oldest first."""
    keys = ("operation", "cdcnorm.offsets", "cdcnorm.newest", "added-data-files", "added-delete-files",
            "added-records", "added-equality-deletes")
    rows = spark.sql(f"SELECT operation, summary FROM {tid}.snapshots ORDER BY committed_at").collect()
    return [{k: (r["operation"] if k == "operation" else r["summary"].get(k)) for k in keys} for r in rows]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "py4j"])
def test_both_commit_paths_write_the_same_tables(
    spark: Any, broker: ScriptedBroker, tmp_path: Path, compiled: bool, caplog: pytest.LogCaptureFixture
) -> None:
    history = resurrection_history()
    namespace = "compiled" if compiled else "stepwise"
    config = scripted_config(namespace=namespace, deleted_keys_table=f"{namespace}_meta.deleted_keys")
    sink = scripted_sink(spark, config, broker, compiled=compiled)
    assert sink.tables is not None
    for i in range(len(history.batches)):
        broker.feed(history, i)
        sink.run_batch()
    kind = type(sink.tables.commits).__name__
    assert kind == ("CompiledCommits" if compiled else "Py4jCommits")
    assert "not available" not in caplog.text
    tid = stored_id(sink, "orders")
    got = (_rows(spark, tid), _summaries(spark, tid))
    assert {r[0] for r in got[0]} == {k[0] for k in history.state["orders"]}
    # the other path's tables, when its test has run (parametrized: compiled first)
    other = stored_id(sink, "orders").replace(f"`{namespace}`", "`compiled`")
    if not compiled:
        want = (_rows(spark, other), _summaries(spark, other))
        assert got[0] == want[0]
        assert [{k: v for k, v in s.items() if k != "cdcnorm.offsets"} for s in got[1]] == [
            {k: v for k, v in s.items() if k != "cdcnorm.offsets"} for s in want[1]
        ]
    print(f"{kind}: {len(got[1])} snapshots: {got[1]}")


def test_a_helper_that_does_not_compile_falls_back_to_py4j(spark: Any, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(commits, "_SOURCE", "NoSuch.java")
    monkeypatch.setattr(commits, "_HELPERS", {})  # not the helper another test compiled
    with caplog.at_level(logging.WARNING, logger="cdcnorm.sink"):
        made = commits.make_commits(spark)
    assert isinstance(made, commits.Py4jCommits)
    assert "committing through py4j calls instead" in caplog.text


def test_the_helper_compiles_against_this_iceberg_runtime(spark: Any) -> None:
    assert isinstance(commits.make_commits(spark), commits.CompiledCommits)


def test_a_longer_history_equals_its_state_on_the_py4j_path(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    """The fallback carries a whole history (inserts, partial updates, deletes, a truncate,
    duplicates) to the state computed in plain Python, as the default path does in
    test_sink_integration."""
    history = scripted_history(n_keys=12, n_changes=120, seed=3)
    history.batches = [history.events[i:i + 40] for i in range(0, len(history.events), 40)]
    config = scripted_config(namespace="stepwise_long", deleted_keys_table="stepwise_long_meta.deleted_keys")
    sink = scripted_sink(spark, config, broker, compiled=False)
    assert sink.tables is not None
    for i in range(len(history.batches)):
        broker.feed(history, i)
        sink.run_batch()
    orders = {r["id"]: r["customer"] for r in spark.table(stored_id(sink, "orders")).collect()}
    assert orders == {k[0]: row["customer"] for k, row in history.state["orders"].items()}


def test_sinks_sharing_a_spark_context_share_one_compiled_helper(spark: Any, broker: ScriptedBroker, tmp_path: Path) -> None:
    """A second sink in the same JVM reuses the compiled class: py4j caches reflected methods by
    class name, so a second class of that name would be called through the first one's methods
    ("object is not an instance of declaring class", seen in CI when several sinks ran in one
    context)."""
    first, second = commits.make_commits(spark), commits.make_commits(spark)
    assert isinstance(first, commits.CompiledCommits) and isinstance(second, commits.CompiledCommits)
    assert first._helper is second._helper
    history = resurrection_history()
    for n in ("shared_a", "shared_b"):
        config = scripted_config(namespace=n, deleted_keys_table=f"{n}_meta.deleted_keys")
        sink = scripted_sink(spark, config, broker)
        assert sink.tables is not None
        for i in range(len(history.batches)):
            broker.feed(history, i)
            sink.run_batch()
        rows = spark.table(stored_id(sink, "orders")).collect()
        assert {r["id"] for r in rows} == {k[0] for k in history.state["orders"]}


def test_a_local_warehouse_is_written_without_chmod_processes(spark: Any, tmp_path: Path) -> None:
    """build_spark puts sink/jvm/CdcnormLocalFileSystem.java in Hadoop's file system cache for
    file: URIs: the permissions Hadoop sets on what it creates are the same, set through java.nio
    instead of a forked chmod (Hadoop's native library is absent from the pip pyspark)."""
    import stat

    jvm = spark.sparkContext._jvm
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == "CdcnormLocalFileSystem" and fs.getScheme() == "file"
    made = tmp_path / "made" / "deeper"
    out = fs.create(jvm.org.apache.hadoop.fs.Path(f"file://{made}/f.txt"), True)
    out.write(b"x")
    out.close()
    umask = jvm.org.apache.hadoop.fs.permission.FsPermission.getUMask(conf).toShort()  # fs.permissions.umask-mode
    assert stat.S_IMODE((made / "f.txt").stat().st_mode) == 0o666 & ~umask  # Hadoop's file default
    assert stat.S_IMODE(made.stat().st_mode) == 0o777 & ~umask  # and its directory default
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640)
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(f"file://{made}/f.txt"), perm)
    assert stat.S_IMODE((made / "f.txt").stat().st_mode) == 0o640
    assert fs.getFileStatus(jvm.org.apache.hadoop.fs.Path(f"file://{made}/f.txt")).getLen() == 1
