"""Committing the files the write tasks wrote for a table (:mod:`sink.tasks`) in one Iceberg
snapshot, from the driver: the fast path's only per-table work there.

Two ways, the same Iceberg calls:

* :class:`CompiledCommits` (the default): ``sink/jvm/CdcnormCommits.java``, compiled once at
  start by Janino (the compiler Spark ships for its generated code: no build step, no JDK), does a
  table's commit in one py4j call, its owner check in another.
* :class:`Py4jCommits`, the fallback when that class cannot be compiled: the same steps, each a
  py4j round trip (:class:`sink.datafiles.FileEntries`): about 30 per table.

Each py4j round trip costs the driver's Python about a tenth of a millisecond of CPU (and a second
one when py4j collects the Java object it returned): over a micro-batch of 100 tables the
fallback spends about half a second of driver CPU where the compiled class spends a few
milliseconds (``bench.sink_tables``, "driver CPU per change"). The tests run both.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any, Protocol

import orjson

from sink.tasks import TableFiles

__all__ = ["Commits", "CompiledCommits", "Py4jCommits", "compiled_class", "in_this_thread", "make_commits", "snapshots_since"]

log = logging.getLogger("cdcnorm.sink")

_SOURCE = "CdcnormCommits.java"


class Commits(Protocol):
    partitions: bool  # whether it commits partitioned data files (TableFiles.parts)

    def commit(self, table: tuple[str, str], jt: Any, files: TableFiles, key_ids: list[int], props: dict[str, str],
               validate_from: int | None) -> int:
        """Commit ``files`` to the Java table ``jt`` in one ``RowDelta`` snapshot carrying
        ``props`` (equality deletes on ``key_ids``); returns the snapshot's id. It fails
        (``ValidationException``) when another writer added data or delete files after the
        snapshot ``validate_from`` (``None``: since the table was created), the one the offsets
        and sequences of ``props`` were read from; a compaction does not conflict."""

    def owner(self, jt: Any, key: str) -> str | None:
        """The table's property ``key``, its metadata read again first."""


class CompiledCommits:
    """The commit in one call to the compiled ``CdcnormCommits`` (see the module)."""

    partitions = True

    def __init__(self, spark: Any) -> None:
        self._helper = _compiled_helper(spark)

    def commit(self, table: tuple[str, str], jt: Any, files: TableFiles, key_ids: list[int], props: dict[str, str],
               validate_from: int | None) -> int:
        deletes = files.deletes
        data = files.data_files()
        snapshot: int = self._helper.commit(
            jt,
            [f.path for f, _ in data], [f.size for f, _ in data], [f.footer for f, _ in data], [p for _, p in data],
            None if deletes is None else deletes.path, 0 if deletes is None else deletes.size,
            None if deletes is None else deletes.footer,
            ",".join(map(str, key_ids)),
            orjson.dumps(props).decode(),
            -1 if validate_from is None else validate_from,
        )
        return snapshot

    def owner(self, jt: Any, key: str) -> str | None:
        value: str | None = self._helper.refreshedProperty(jt, key)
        return value


# One compiled class per JVM (per py4j gateway) and source file. py4j caches the methods it reflects
# by class name, so a second class of the same name (a second sink in one Spark context, compiled
# again in its own class loader) would be called through the first class's methods and fail with
# "object is not an instance of declaring class".
_COMPILED: dict[tuple[int, str], tuple[Any, Any]] = {}


def compiled_class(spark: Any, source: str) -> Any:
    """The Java class of ``sink/jvm/<source>`` (named as the file), compiled by Janino once per
    JVM; its class loader is ``cls.getClassLoader()``. Raises what Janino raises."""
    gateway = spark.sparkContext._gateway
    cached = _COMPILED.get((id(gateway), source))
    if cached is not None and cached[0] is gateway:
        return cached[1]
    jvm = spark.sparkContext._jvm
    text = resources.files("sink.jvm").joinpath(source).read_text(encoding="utf-8")
    compiler = jvm.org.codehaus.janino.SimpleCompiler()
    # the Iceberg runtime is on Spark's class loader (spark.jars), which py4j's threads use
    compiler.setParentClassLoader(jvm.java.lang.Thread.currentThread().getContextClassLoader())
    compiler.cook(source, text)
    cls = compiler.getClassLoader().loadClass(source.removesuffix(".java"))
    _COMPILED[(id(gateway), source)] = (gateway, cls)
    return cls


_HELPERS: dict[int, tuple[Any, Any]] = {}


def _compiled_helper(spark: Any) -> Any:
    gateway = spark.sparkContext._gateway
    cached = _HELPERS.get(id(gateway))
    if cached is not None and cached[0] is gateway:
        return cached[1]
    helper = compiled_class(spark, _SOURCE).newInstance()
    _HELPERS[id(gateway)] = (gateway, helper)
    return helper


class Py4jCommits:
    """The same commit, each step a py4j round trip (the fallback; unpartitioned tables only)."""

    partitions = False

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._gateway = spark.sparkContext._gateway
        self._entries: dict[tuple[str, str], Any] = {}  # per table: its sink.datafiles.FileEntries

    def commit(self, table: tuple[str, str], jt: Any, files: TableFiles, key_ids: list[int], props: dict[str, str],
               validate_from: int | None) -> int:
        from sink.datafiles import FileEntries as Entries

        entries = self._entries.get(table)
        if entries is None or entries.table is not jt:
            entries = self._entries[table] = Entries(self._jvm, jt, gateway=self._gateway)
        if files.parts:
            # the compiled helper builds the partition tuples; without it a partitioned table is
            # MERGEd (IcebergTables.write_plan), so this is a caller's mistake
            raise ValueError(f"table {'.'.join(table)}: partitioned data files need the compiled commit helper")
        write = jt.newRowDelta()
        if files.deletes is not None:
            write = write.addDeletes(entries.equality_delete_file(files.deletes, key_ids))
        if files.data is not None:
            write = write.addRows(entries.data_file(files.data))
        if validate_from is not None:
            write = write.validateFromSnapshot(validate_from)
        always = self._jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue()
        write = write.conflictDetectionFilter(always).validateNoConflictingDataFiles().validateNoConflictingDeleteFiles()
        write = write.scanManifestsWith(in_this_thread(self._jvm))
        for k, v in props.items():
            write = write.set(k, v)
        write.commit()
        snapshot: int = jt.currentSnapshot().snapshotId()
        return snapshot

    def owner(self, jt: Any, key: str) -> str | None:
        jt.refresh()
        value: str | None = jt.properties().get(key)
        return value


def in_this_thread(jvm: Any) -> Any:
    """An executor that runs what it is given in the calling thread, for an Iceberg commit's
    ``scanManifestsWith``: on Iceberg's worker pool the commit waits for its manifest scans in
    steps of 10 ms (``Tasks.waitFor``), most of a small table's commit (see CdcnormCommits.java)."""
    return jvm.org.apache.iceberg.relocated.com.google.common.util.concurrent.MoreExecutors.newDirectExecutorService()


def snapshots_since(jt: Any, base: int | None) -> list[Any] | None:
    """The Java table ``jt``'s snapshots after the snapshot ``base``, newest first (``base``
    ``None``: all of them); ``None`` when ``base`` is no longer in its history."""
    since = []
    snapshot = jt.currentSnapshot()
    while snapshot is not None and snapshot.snapshotId() != base:
        since.append(snapshot)
        parent = snapshot.parentId()
        snapshot = jt.snapshot(parent) if parent is not None else None
    return None if base is not None and snapshot is None else since


def make_commits(spark: Any, compiled: bool = True) -> Commits:
    """:class:`CompiledCommits`, or :class:`Py4jCommits` when ``compiled`` is false or the class
    does not compile here (said in a warning: the sink works, its driver spends more CPU)."""
    if compiled:
        try:
            return CompiledCommits(spark)
        except Exception as exc:  # a Spark without Janino, an Iceberg runtime with other classes
            log.warning("the compiled Iceberg commit helper is not available (%s: %s); committing through "
                        "py4j calls instead (more driver CPU per table)", type(exc).__name__, str(exc).splitlines()[0][:300])
    return Py4jCommits(spark)
