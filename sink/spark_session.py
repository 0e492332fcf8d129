"""The sink's Spark session: the Iceberg runtime jar, the session's conf (extensions, catalog,
the user's passthrough) and, for a warehouse on a local disk, a local file system that forks no
``chmod`` processes and writes no checksum files."""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
from typing import TYPE_CHECKING

from sink.config import JarSource, SinkConfig
from transforms.errors import MissingExtraError
from transforms.extras import require_extras

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["apply_session_defaults", "build_spark", "iceberg_jar", "local_cores", "session_defaults", "spark_conf"]

log = logging.getLogger("cdcnorm.sink")


def iceberg_jar() -> str:
    """The Iceberg Spark runtime jar shipped in the ``snowpark-connect-deps-iceberg`` wheel."""
    try:
        import snowpark_connect_deps_iceberg as wheel
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            "the Iceberg runtime jar (sink.jar_source: wheel)", ["sink"], ["snowpark_connect_deps_iceberg"]
        ) from exc
    jars = glob.glob(os.path.join(os.path.dirname(wheel.__file__), "jars", "iceberg-spark-runtime-3.5_2.12-*.jar"))
    if not jars:
        raise RuntimeError("no iceberg-spark-runtime-3.5 jar in snowpark-connect-deps-iceberg (pin 1.0.1)")
    return jars[0]


def local_cores(master: str) -> int | None:
    """The task slots of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``).

    >>> local_cores("local[2]"), local_cores("local"), local_cores("spark://h:7077")
    (2, 1, None)
    """
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match[1] == "*" else int(match[1])


def spark_conf(config: SinkConfig) -> dict[str, str]:
    """The Spark conf of the sink session: jar, extensions, catalog, then the user's passthrough."""
    cat = config.catalog
    prefix = f"spark.sql.catalog.{cat.name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # the tables of a micro-batch are written from several driver threads at once
        # (sink.table_parallelism), each in its own pool: FAIR shares the executors between them
        # instead of running one table's jobs to the end before the next table's start
        "spark.scheduler.mode": "FAIR",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    }
    if cat.type == "glue":
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.aws.glue.GlueCatalog"
    elif cat.type != "custom":  # custom: its catalog-impl comes with the properties
        conf[f"{prefix}.type"] = cat.type
    if cat.type == "hadoop":
        conf[f"{prefix}.warehouse"] = config.warehouse_path()
    elif cat.warehouse:  # the catalog's own name for it (a REST catalog's warehouse), as given
        conf[f"{prefix}.warehouse"] = cat.warehouse
    for key, value in cat.properties.items():
        conf[f"{prefix}.{key}"] = value
    if config.jar_source is JarSource.WHEEL:
        conf["spark.jars"] = iceberg_jar()
    elif config.jar_source is JarSource.PACKAGES:
        conf["spark.jars.packages"] = config.jar_packages
    conf.update(config.spark_conf)
    extra = config.spark_conf.get("spark.jars")
    if config.jar_source is JarSource.WHEEL and extra and iceberg_jar() not in extra.split(","):
        # more jars (Iceberg's AWS bundle for S3FileIO, a JDBC driver): beside the runtime's
        conf["spark.jars"] = f"{iceberg_jar()},{extra}"
    return conf


def session_defaults(config: SinkConfig) -> dict[str, str]:
    """The sink's own choices of runtime SQL settings, which yield to a value the Spark conf
    already has (spark-submit's ``--conf``, a SparkApplication's ``sparkConf``, spark-defaults)
    or the user's ``sink.spark_conf``: :func:`apply_session_defaults`."""
    # MERGE joins on a shuffle: one partition per local core (no straggler task in a second
    # wave, fewer files per commit); 4 on a cluster master unless the cluster's conf says
    return {"spark.sql.shuffle.partitions": str(local_cores(config.spark_master) or 4)}


def apply_session_defaults(spark: SparkSession, config: SinkConfig) -> dict[str, str]:
    """Set each of :func:`session_defaults` on the session unless the application's Spark conf
    or ``sink.spark_conf`` has it; returns what was set. On a cluster the driver's Spark conf holds
    what was submitted with it, so the SparkApplication's ``spark.sql.shuffle.partitions`` stands."""
    submitted = spark.sparkContext.getConf()
    applied: dict[str, str] = {}
    for key, value in session_defaults(config).items():
        if key in config.spark_conf or submitted.contains(key):
            continue
        spark.conf.set(key, value)
        applied[key] = value
    return applied


def build_spark(config: SinkConfig) -> SparkSession:
    """A Spark session configured for the sink."""
    require_extras("a Spark session (the Iceberg sink)", "sink")
    from pyspark.sql import SparkSession

    if local_cores(config.spark_master) is not None:
        # the read and write tasks run in Python workers: on a local master, this interpreter
        # (its packages: cdcnorm, confluent-kafka, pyarrow), not whatever python3 is on PATH;
        # a cluster's executors take theirs from PYSPARK_PYTHON (the image's)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(config.spark_master).appName("cdcnorm-sink")
    for key, value in spark_conf(config).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    apply_session_defaults(spark, config)
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per callback (MERGE commit properties)
    if "://" not in config.catalog.warehouse or config.catalog.warehouse.startswith("file:"):
        _no_checksum_files(spark)
        if not any(k.startswith(("spark.hadoop.fs.file.", f"spark.sql.catalog.{config.catalog.name}.hadoop.fs.file."))
                   for k in config.spark_conf):  # the user's own choice of local file system stands
            _local_file_system_without_forks(spark)
    return spark


def _local_file_system_without_forks(spark: SparkSession) -> None:
    """A warehouse on a local disk: ``file:`` paths go through
    ``sink/jvm/CdcnormLocalFileSystem.java``, Hadoop's raw local file system setting permissions
    through ``java.nio``, where Hadoop's own forks a ``chmod`` for every file and directory it
    creates when its native library is absent (as in the pip pyspark): about ten processes per
    Iceberg commit, much of a small table's commit time on the 2-core machines here. Compiled by
    Janino like the commit helper and put in Hadoop's file system cache of this JVM (the driver's;
    local executors share it); if that fails, Hadoop's own stays (said in a warning)."""
    from sink.commits import compiled_class

    jsc = spark._jsc
    assert jsc is not None
    try:
        cls = compiled_class(spark, "CdcnormLocalFileSystem.java")
        installed = cls.newInstance().installAsLocal(jsc.hadoopConfiguration())
        if installed.getClass().getName() != cls.getName():
            raise RuntimeError(f"the cache still gives {installed.getClass().getName()}")
    except Exception as exc:
        log.warning("the local file system without chmod processes is not available (%s: %s); Hadoop's own is used",
                    type(exc).__name__, (str(exc).splitlines() or [""])[0][:300])


def _no_checksum_files(spark: SparkSession) -> None:
    """A warehouse on a local disk: Hadoop's local file system writes a ``.crc`` file beside each
    file, and without Hadoop's native library (the PyPI pyspark has none) it forks a ``chmod``
    process for each file it creates, the ``.crc`` files included (about 10 ms each, measured on
    the 2-core machines here; an Iceberg commit creates five files). Iceberg does not need the
    checksum files (its metadata and Parquet files carry their own checks), so the driver's
    cached local file system stops writing them: half the forks of every commit."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    local = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)
