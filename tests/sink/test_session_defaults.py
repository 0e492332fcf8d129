"""The sink's own Spark settings yield to the application's conf (issue 30): on a cluster the
SparkApplication's ``sparkConf`` (spark-submit's ``--conf``) is in the driver's Spark conf before
the sink builds its session, and ``spark.sql.shuffle.partitions`` from there must stand."""

from __future__ import annotations

from typing import Any

from sink.config import SinkConfig
from sink.spark_session import apply_session_defaults, session_defaults, spark_conf


class FakeConf:
    """What the session builder saw: the context's SparkConf (``contains``) and the session's
    runtime conf (``set``)."""

    def __init__(self, submitted: dict[str, str]) -> None:
        self.submitted = submitted
        self.session: dict[str, str] = {}

    def contains(self, key: str) -> bool:
        return key in self.submitted

    def set(self, key: str, value: str) -> None:
        self.session[key] = value


class FakeSpark:
    def __init__(self, submitted: dict[str, str]) -> None:
        self._conf = FakeConf(submitted)
        self.conf = self._conf
        self.sparkContext = self

    def getConf(self) -> FakeConf:
        return self._conf


def config(**more: Any) -> SinkConfig:
    return SinkConfig.model_validate({"topic_pattern": "cdcnorm\\..*", **more})


def test_shuffle_partitions_follow_the_local_cores_when_nothing_else_says() -> None:
    spark = FakeSpark({})
    assert apply_session_defaults(spark, config(spark_master="local[3]")) == {"spark.sql.shuffle.partitions": "3"}  # type: ignore[arg-type]
    assert spark.conf.session == {"spark.sql.shuffle.partitions": "3"}
    cluster = FakeSpark({})
    apply_session_defaults(cluster, config(spark_master="k8s://https://kubernetes.default.svc:443"))  # type: ignore[arg-type]
    assert cluster.conf.session == {"spark.sql.shuffle.partitions": "4"}


def test_the_submitted_conf_wins_over_the_sinks_default() -> None:
    """A SparkApplication's sparkConf (here 16) is in the driver's conf: the sink sets nothing."""
    spark = FakeSpark({"spark.sql.shuffle.partitions": "16"})
    applied = apply_session_defaults(spark, config(spark_master="k8s://https://kubernetes.default.svc:443"))  # type: ignore[arg-type]
    assert applied == {} and spark.conf.session == {}


def test_the_users_sink_spark_conf_wins_too() -> None:
    """sink.spark_conf goes to the builder (so into the conf of a new context); even where the
    context existed before, the sink does not overwrite it with its default."""
    cfg = config(spark_master="local[2]", spark_conf={"spark.sql.shuffle.partitions": "64"})
    assert spark_conf(cfg)["spark.sql.shuffle.partitions"] == "64"
    spark = FakeSpark({})
    assert apply_session_defaults(spark, cfg) == {} and spark.conf.session == {}  # type: ignore[arg-type]


def test_the_default_is_not_part_of_the_builder_conf() -> None:
    """Given to the builder, the default would override the submitted value."""
    cfg = config(spark_master="local[2]")
    assert set(session_defaults(cfg)).isdisjoint(spark_conf(cfg))
