"""The sink's configuration: the ``sink:`` section of ``pipeline.yaml`` (validated, typed)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from cdcnorm_common.registry import SchemaRegistrySettings
from sink.table_settings import TablePattern, TableSettings
from transforms.configfile import is_secret_key

__all__ = ["CatalogConfig", "JarSource", "MaintenanceConfig", "SinkConfig", "UpsertMode", "WriteMode", "WriteRetryConfig"]


# a Perl class escape (\d, \w, ...) not itself escaped; POSIX replacements for the error message
_PERL_CLASS = re.compile(r"(?<!\\)(?:\\\\)*\\([dDwWsSbB])")
_POSIX = {"d": "[0-9]", "D": "[^0-9]", "w": "[[:alnum:]_]", "W": "[^[:alnum:]_]", "s": "[[:space:]]",
          "S": "[^[:space:]]", "b": "(no word boundary in POSIX ERE)", "B": "(no word boundary in POSIX ERE)"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WriteMode(StrEnum):
    """Iceberg row-level write mode for MERGE/DELETE."""

    MERGE_ON_READ = "merge-on-read"
    COPY_ON_WRITE = "copy-on-write"


class UpsertMode(StrEnum):
    """How a micro-batch's changes of a keyed table are applied."""

    # equality deletes plus the new rows, one RowDelta per table, when every change of the batch
    # is newer than the table's newest (an ordered stream); a MERGE otherwise
    ROW_DELTA = "row-delta"
    # always a Spark MERGE (position deletes or rewritten files, per write_mode): for readers
    # that cannot apply equality deletes
    MERGE = "merge"


class JarSource(StrEnum):
    """Where the Iceberg Spark runtime comes from."""

    WHEEL = "wheel"  # the jar inside snowpark-connect-deps-iceberg==1.0.1 (no Maven needed)
    PACKAGES = "packages"  # spark.jars.packages (needs Maven access)
    NONE = "none"  # already on the classpath (e.g. a cluster image)


CatalogType = Literal["hadoop", "rest", "hive", "glue", "jdbc", "nessie", "custom"]
"""Iceberg's catalog types (``CatalogUtil``; ``glue`` through its ``catalog-impl``), or ``custom``."""


class CatalogConfig(_Strict):
    """The Iceberg catalog. ``hadoop`` on a local folder by default; others via Spark conf.

    ``warehouse`` is a folder or URI for ``hadoop`` (a relative path is under the working
    directory; default ``var/warehouse``). For the other types it is passed to the catalog as it
    is (a REST catalog's warehouse: Polaris's catalog name, Glue's account id), and unset by
    default: many REST catalogs need none.

    >>> CatalogConfig(type="rest").warehouse, CatalogConfig().warehouse
    ('', 'var/warehouse')
    """

    name: str = Field("lake", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: CatalogType = Field(
        "hadoop",
        description="hadoop | rest | hive | glue | jdbc | nessie (Iceberg's catalog types) | custom (a catalog-impl "
        "class in properties)",
    )
    warehouse: str = "var/warehouse"
    properties: dict[str, str] = Field(default_factory=dict, description="spark.sql.catalog.<name>.<key> values")
    table_location: str = Field(
        "",
        description=(
            "Where the sink creates its tables, as a URI (s3://bucket/lake, file:/data/lake): each new table at "
            "<table_location>/<namespace>/<table>, sent to the catalog with the CREATE. For a catalog that "
            "assigns no location itself (a REST catalog without a warehouse location, Glue without a default). "
            "Empty: the catalog's default location."
        ),
    )

    @model_validator(mode="after")
    def _custom_names_its_class(self) -> CatalogConfig:
        if self.type == "custom" and not self.properties.get("catalog-impl"):
            raise ValueError("type custom needs properties.catalog-impl: the Iceberg Catalog class to load")
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_default_warehouse_but_hadoop(cls, data: Any) -> Any:
        if isinstance(data, dict) and "warehouse" not in data and data.get("type", "hadoop") != "hadoop":
            return {**data, "warehouse": ""}
        return data


class MaintenanceConfig(_Strict):
    """Table maintenance cadence and targets."""

    enabled: bool = True
    every_batches: int = Field(
        100,
        gt=0,
        description=(
            "Maintain a table every N commits to it (in the background, staggered over the tables). A "
            "table's maintenance costs seconds of Spark work, its row delta tens of milliseconds: with "
            "hundreds of tables at a short trigger, a small N spends the cluster on maintenance."
        ),
    )
    expire_older_than_seconds: int = Field(3600, ge=0)
    retain_last: int = Field(5, ge=3, description="Keep at least this many snapshots (>= 3 keeps the offsets-tagged one).")
    min_input_files: int = Field(5, ge=2, description="rewrite_data_files min-input-files")


class WriteRetryConfig(_Strict):
    """How a micro-batch whose Iceberg writes or Kafka offset commit failed is tried again.

    The attempts are spaced by a capped exponential back-off: ``initial_backoff_seconds``,
    doubling up to ``max_backoff_seconds`` (each delay shortened by up to 20% at random, so
    sinks failing together do not retry in step). The Kafka offsets of the batch are not
    committed until an attempt succeeds.
    """

    initial_backoff_seconds: float = Field(1.0, gt=0, description="The delay before the first retry.")
    max_backoff_seconds: float = Field(
        60.0,
        gt=0,
        le=240,
        description=(
            "The longest delay between two attempts. At most 240: the consumer is polled only by an "
            "attempt, and must be polled within its max.poll.interval.ms (librdkafka default 300 s)."
        ),
    )
    give_up_after_seconds: float | None = Field(
        None,
        gt=0,
        description="Stop the sink (exit status 1) when a batch still fails this long after its first failure. None: retry until it succeeds.",
    )

    @field_validator("max_backoff_seconds")
    @classmethod
    def _not_below_initial(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("initial_backoff_seconds")
        if initial is not None and value < initial:
            raise ValueError(f"{value:g} is below initial_backoff_seconds ({initial:g})")
        return value


class SinkConfig(_Strict):
    """How normalized topics are merged into Iceberg tables."""

    topics: list[str] = Field(default_factory=list, description="Normalized topics to read.")
    topic_pattern: str | None = Field(None, description="Regex of normalized topics (instead of `topics`).")
    group_id: str = "cdcnorm-sink"
    trigger_interval_seconds: float = Field(5.0, gt=0)
    max_records_per_batch: int = Field(200_000, gt=0)
    poll_timeout_seconds: float = Field(1.0, gt=0)
    namespace: str | None = Field(None, description="Iceberg namespace of the tables (default: source db; a sink.tables name template may name its own).")
    write_mode: WriteMode = WriteMode.MERGE_ON_READ
    table_properties: dict[str, str] = Field(default_factory=dict)
    history_cache_rows: int = Field(
        500_000, ge=0,
        description="How many current versions of history tables (sink.tables mode history) the sink keeps in "
                    "memory, across its tables, to close them without reading the table: an ordered batch is then "
                    "a row delta. A table whose current versions do not fit has them read per batch. 0: always read.",
    )
    tables: dict[TablePattern, TableSettings] = Field(
        default_factory=dict,
        description=(
            "Per-table settings by glob over the source's <db>.<table> (shop.orders, shop.*, *; the most "
            "specific pattern wins): name, mode, partition_by, sort_by, properties. See docs/sink.md, \"Table shapes\"."
        ),
    )
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    jar_source: JarSource = JarSource.WHEEL
    jar_packages: str = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"
    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark conf, passed through; spark.jars adds jars to the Iceberg runtime's (jar_source: wheel).",
    )
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    deleted_keys_retention_seconds: int = Field(
        7 * 24 * 3600,
        ge=0,
        description=(
            "How long a deleted row's key and sequence are remembered (in deleted_keys_table), so that "
            "a stale change to it arriving later is ignored instead "
            "of re-creating the row; expired by maintenance. 0: not remembered. Default: 7 days, "
            "Kafka's default topic retention."
        ),
    )
    table_parallelism: int = Field(
        4,
        ge=1,
        le=64,
        description=(
            "How many tables of one micro-batch are committed (a RowDelta, or a MERGE) at the same "
            "time, from a thread pool of the driver; each thread's Spark jobs run in their own FAIR "
            "scheduler pool. 1: one table after the other."
        ),
    )
    commit_interval_seconds: float = Field(
        0.0,
        ge=0,
        description=(
            "How often a topic is read and its tables written. 0 (the default): every micro-batch reads "
            "every topic with new records and writes every table they change. Above 0: a topic is read "
            "once this long has passed since it was last read, so each of its tables costs one Iceberg "
            "commit per interval, not per trigger (like the Iceberg Kafka Connect sink's commit "
            "interval); its records wait in Kafka meanwhile, nothing is held in the sink. Freshness is "
            "then about this plus one trigger."
        ),
    )
    upsert_mode: UpsertMode = Field(
        UpsertMode.ROW_DELTA,
        description=(
            "row-delta (the default): a keyed table whose micro-batch changes are all newer than what it "
            "holds gets one Iceberg RowDelta of the new rows and an equality-delete file of their keys "
            "(as Flink's and Kafka Connect's Iceberg sinks write upserts), written by the Spark tasks and "
            "committed without a Spark job; late or replayed changes, partial rows and truncates still "
            "take a MERGE. merge: always a Spark MERGE, for readers that cannot apply equality deletes "
            "(maintenance folds them into the data files either way)."
        ),
    )
    tasks: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=(
            "Spark tasks per micro-batch job (reading Kafka ranges, writing table files). Default: the "
            "local master's cores, else the cluster's default parallelism."
        ),
    )
    metrics_port: int | None = Field(None, ge=0, le=65535)
    liveness_stall_seconds: float = Field(
        600.0,
        gt=0,
        description=(
            "/healthz fails when the sink has had records to read (or a micro-batch in flight) for this "
            "long without committing one. A sink idle because nothing arrives stays alive."
        ),
    )
    write_retry: WriteRetryConfig = Field(default_factory=WriteRetryConfig)
    take_over_tables_from: str | None = Field(
        None,
        min_length=1,
        description=(
            "The group_id of a sink this one replaces. Each table belongs to the sink that created or "
            "claimed it (its cdcnorm.owner table property: that sink's group_id), and a sink stops with an "
            "error before writing a table another group owns. With this set, the sink claims at start "
            "every table of the catalog owned by that group; the old sink, if still running, stops at its "
            "next micro-batch. Unset (the default): no take-over."
        ),
    )
    schema_registry: SchemaRegistrySettings | None = Field(None, description="Where Avro records' schemas are (sink.changes.RecordParser).")
    deleted_keys_table: str = Field(
        "cdcnorm.deleted_keys",
        pattern=r"^[^.`]+\.[^.`]+$",
        description=(
            "namespace.table of the table (in the sink's catalog) that remembers deleted keys for "
            "deleted_keys_retention_seconds, for every table the sink writes."
        ),
    )

    @field_validator("topic_pattern")
    @classmethod
    def _posix_pattern(cls, value: str | None) -> str | None:
        """librdkafka matches a subscription pattern with POSIX extended regular expressions
        (``regcomp(REG_EXTENDED)``): Perl classes such as ``\\d`` match a literal letter there,
        so such a pattern would silently subscribe to nothing."""
        if value is None:
            return value
        perl = sorted(set(_PERL_CLASS.findall(value)))
        if perl:
            hints = ", ".join(f"\\{c} -> {_POSIX[c]}" for c in perl)
            raise ValueError(
                f"{value!r}: Kafka clients (librdkafka) match topic patterns as POSIX extended regular "
                f"expressions, where a backslash class ({', '.join(perl)}) is a literal letter; use {hints}"
            )
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _one_topic_source(self) -> SinkConfig:
        if not self.topics and not self.topic_pattern:
            raise ValueError("set `topics` or `topic_pattern`")
        return self

    @field_validator("take_over_tables_from")
    @classmethod
    def _not_own_group(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and value == info.data.get("group_id"):
            raise ValueError("is this sink's own group_id: name the group of the sink whose tables it takes over")
        return value

    @field_validator("write_retry")
    @classmethod
    def _backoff_within_liveness(cls, value: WriteRetryConfig, info: ValidationInfo) -> WriteRetryConfig:
        # a sink backing off is alive as long as its attempts come back (sink.health): the
        # longest wait between two attempts must leave room for an attempt before the probe fails
        stall = info.data.get("liveness_stall_seconds")
        if stall is not None and value.max_backoff_seconds >= stall:
            raise ValueError(
                f"max_backoff_seconds {value.max_backoff_seconds:g} is not below liveness_stall_seconds "
                f"({stall:g}): a sink waiting that long between attempts would be restarted by its liveness probe"
            )
        return value

    def secret_values(self) -> Iterator[str]:
        """The values under secret-looking keys of the passthrough maps (``catalog.properties``,
        ``spark_conf``) and the schema registry's secrets: what the sink's log redaction hides."""
        for mapping in (self.catalog.properties, self.spark_conf):
            yield from (v for k, v in mapping.items() if is_secret_key(k) and v)
        if self.schema_registry is not None:
            yield from self.schema_registry.secret_values()

    def warehouse_path(self, base: Path | None = None) -> str:
        wh = self.catalog.warehouse
        if "://" in wh:
            return wh
        path = Path(wh)
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return str(path)

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> SinkConfig:
        return cls.model_validate(section)
