"""Iceberg file entries (``DataFile``, equality ``DeleteFile``) for the Parquet files that
:mod:`sink.arrow` wrote, built on the driver with Iceberg's Java API over py4j, ready for a
``RowDelta`` (or an append) to commit.

The column metrics (counts, null counts, lower and upper bounds) are Iceberg's own:
``ParquetUtil.footerMetrics`` on the footer the writer sent back (:attr:`WrittenFile.footer`),
parsed in the JVM by the Parquet converter shaded into the Iceberg runtime. The file is not
opened again, and no Hadoop ``Configuration`` is made per file, which is what makes
``ParquetUtil.fileMetrics(InputFile, ...)`` cost about 25 ms a file.

Every py4j call is a round trip (about 0.3 ms): the Java classes and static members are looked
up once per JVM, a table's spec and ``MetricsConfig`` once per :class:`FileEntries`, so an entry
costs the calls that build it and no more.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sink.arrow import WrittenFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FileEntries", "data_file", "equality_delete_file", "load_table", "schema_json"]

@dataclass(frozen=True)
class _JavaApi:
    """The Java classes and static members the entries need, resolved once per JVM (resolving
    ``jvm.a.b.C.m`` costs a round trip per dot)."""

    input_stream: Any  # java.io.ByteArrayInputStream
    converter: Any  # a ParquetMetadataConverter (stateless)
    no_filter: Any  # ParquetMetadataConverter.NO_FILTER
    no_field_metrics: Any  # java.util.stream.Stream.empty (a Stream is used once: one per file)
    footer_metrics: Any  # ParquetUtil.footerMetrics
    data_files: Any  # DataFiles.builder
    delete_files: Any  # FileMetadata.deleteFileBuilder
    metrics_config: Any  # MetricsConfig.forTable
    parquet: Any  # FileFormat.PARQUET


@lru_cache(maxsize=4)
def _java_api(jvm: Any) -> _JavaApi:
    iceberg = jvm.org.apache.iceberg
    converter = iceberg.shaded.org.apache.parquet.format.converter.ParquetMetadataConverter
    return _JavaApi(
        input_stream=jvm.java.io.ByteArrayInputStream,
        converter=converter(),
        no_filter=converter.NO_FILTER,
        no_field_metrics=jvm.java.util.stream.Stream.empty,
        footer_metrics=iceberg.parquet.ParquetUtil.footerMetrics,
        data_files=iceberg.DataFiles.builder,
        delete_files=iceberg.FileMetadata.deleteFileBuilder,
        metrics_config=iceberg.MetricsConfig.forTable,
        parquet=iceberg.FileFormat.PARQUET,
    )


class FileEntries:
    """Builds the ``DataFile`` and equality ``DeleteFile`` entries of one unpartitioned table's
    Parquet files. Holds the table's spec and ``MetricsConfig`` (pass them when already known)
    and the ``int[]`` of each set of equality ids, so an entry costs about ten py4j calls.

    ``gateway`` (``SparkContext._gateway``) makes the ``int[]`` of equality ids: only
    :meth:`equality_delete_file` needs it. Keep one per table and batch: a schema or property
    change (``ALTER TABLE``) is seen by the next one made from the reloaded table.
    """

    def __init__(self, jvm: Any, table: Any, *, gateway: Any = None, spec: Any = None, metrics_config: Any = None) -> None:
        self._api = _java_api(jvm)
        self._gateway = gateway
        self.table = table
        self.spec = spec if spec is not None else table.spec()
        if not self.spec.isUnpartitioned():
            raise ValueError(f"table {table.name()} is partitioned: the fast path writes unpartitioned tables only")
        # data and equality-delete files: the table's metrics modes, as Iceberg's own writers
        # (BaseFileWriterFactory); position deletes would take MetricsConfig.forPositionDelete
        self.metrics_config = metrics_config if metrics_config is not None else self._api.metrics_config(table)
        self._equality_ids: dict[tuple[int, ...], Any] = {}

    def metrics(self, written: WrittenFile) -> Any:
        """Iceberg's ``Metrics`` of a written file, from its footer (4 py4j calls)."""
        api = self._api
        footer = api.converter.readParquetMetadata(api.input_stream(written.footer), api.no_filter)
        return api.footer_metrics(footer, api.no_field_metrics(), self.metrics_config)

    def data_file(self, written: WrittenFile) -> Any:
        """The ``DataFile`` of a file of rows (its record count from the metrics)."""
        api = self._api
        return (
            api.data_files(self.spec)
            .withPath(written.path)
            .withFormat(api.parquet)
            .withFileSizeInBytes(written.size)
            .withMetrics(self.metrics(written))
            .build()
        )

    def equality_delete_file(self, written: WrittenFile, field_ids: list[int]) -> Any:
        """The ``DeleteFile`` of a file of keys: it deletes the rows of earlier snapshots whose
        ``field_ids`` columns equal one of its rows (the file holds exactly those columns);
        rows added in the same commit stay."""
        api = self._api
        return (
            api.delete_files(self.spec)
            .ofEqualityDeletes(self._ids(field_ids))
            .withPath(written.path)
            .withFormat(api.parquet)
            .withFileSizeInBytes(written.size)
            .withMetrics(self.metrics(written))
            .build()
        )

    def _ids(self, field_ids: list[int]) -> Any:
        """The Java ``int[]`` of ``field_ids``, made once per set (never written to after)."""
        key = tuple(field_ids)
        ids = self._equality_ids.get(key)
        if ids is None:
            if not key:
                raise ValueError("an equality-delete file needs at least one equality field id")
            if self._gateway is None:
                raise ValueError("equality-delete entries need the py4j gateway (FileEntries(gateway=...))")
            ids = self._gateway.new_array(self._gateway.jvm.int, len(key))
            for i, field_id in enumerate(key):
                ids[i] = field_id
            self._equality_ids[key] = ids
        return ids


def data_file(jvm: Any, table: Any, written: WrittenFile, metrics_config: Any = None) -> Any:
    """The Java ``DataFile`` of a Parquet file of rows of the unpartitioned ``table``. For many
    files of one table keep a :class:`FileEntries` (it looks the spec up once)."""
    return FileEntries(jvm, table, metrics_config=metrics_config).data_file(written)


def equality_delete_file(
    jvm: Any, gateway: Any, table: Any, written: WrittenFile, field_ids: list[int], metrics_config: Any = None
) -> Any:
    """The Java equality ``DeleteFile`` of a Parquet file of key rows of the unpartitioned
    ``table`` (see :meth:`FileEntries.equality_delete_file`)."""
    files = FileEntries(jvm, table, gateway=gateway, metrics_config=metrics_config)
    return files.equality_delete_file(written, field_ids)


def load_table(spark: SparkSession, catalog: str, namespace: str, name: str) -> Any:
    """The Java Iceberg ``Table`` behind a Spark catalog's table: the instance Spark's own
    queries use (the catalog caches tables), so a commit through it is seen by the next query."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    assert jvm is not None and gateway is not None
    levels = gateway.new_array(jvm.java.lang.String, 1)
    levels[0] = namespace
    ident = jvm.org.apache.iceberg.catalog.TableIdentifier.of(jvm.org.apache.iceberg.catalog.Namespace.of(levels), name)
    spark_catalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
    return spark_catalog.icebergCatalog().loadTable(ident)


def schema_json(jvm: Any, table: Any) -> str:
    """The table's current schema as Iceberg's JSON (what :func:`sink.arrow.arrow_schema` reads)."""
    text: str = jvm.org.apache.iceberg.SchemaParser.toJson(table.schema())
    return text
