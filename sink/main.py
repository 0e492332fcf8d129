"""Entry point of the sink: ``cdcnorm sink --config pipeline.yaml`` (also ``python -m sink``)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.extras import require_extras
from sink.config import SinkConfig
from transforms.errors import ConfigError

__all__ = ["crash_point", "load_sink_config", "run_sink"]

log = logging.getLogger("cdcnorm.sink")


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL this process at a named point.

    Active only when ``CDCNORM_CRASH_POINT`` names the point; ``CDCNORM_CRASH_AFTER=N`` skips
    the first N-1 passes. When the sink leads its own process group (started in a new
    session), the whole group is killed, the Spark JVM included, as a machine crash would.

    Points: ``mid-merge`` (inside the Iceberg commit callback, before the MERGE runs),
    ``between-table-commits``, ``after-iceberg-commit`` (before the Kafka offset commit),
    ``after-kafka-commit``.
    """
    if os.environ.get("CDCNORM_CRASH_POINT") != name:
        return
    remaining = int(os.environ.get("CDCNORM_CRASH_AFTER", "1")) - 1
    if remaining > 0:
        os.environ["CDCNORM_CRASH_AFTER"] = str(remaining)
        return
    log.warning("crash point %s reached: killing the sink (test fault injection)", name)
    _kill_self()


def _kill_self() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def load_sink_config(path: str | Path) -> tuple[SinkConfig, dict[str, Any]]:
    """The sink section and the librdkafka settings of a pipeline config file.

    ``${ENV}``/``file:`` references under secret-looking keys of ``catalog.properties`` and
    ``spark_conf`` are resolved, and every secret of the config is redacted from this
    process's log records from now on (:class:`service.config.SecretRedactor`).
    """
    from service.config import SecretRedactor, load_config, mask_secrets, resolve_sink_secrets

    pipeline = load_config(path, check_formats=False)  # also validates the sink section
    if pipeline.sink is None:
        raise ConfigError("sink", None, "the pipeline config has no `sink:` section")
    SecretRedactor(pipeline.secret_values()).install()
    section = resolve_sink_secrets(pipeline.sink)
    try:
        sink = SinkConfig.model_validate(section)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        key = f"sink.{loc}" if loc else "sink"
        raise ConfigError(key, mask_secrets(key, err.get("input")), err.get("msg", "invalid")) from None
    return sink, pipeline.broker.librdkafka()


def run_sink(config_path: str | Path, once: bool = False, max_batches: int | None = None) -> int:
    """Run the micro-batch sink until stopped (or, with ``once``, until the topics are drained)."""
    require_extras("the Iceberg sink", "sink")
    from sink.runner import MicroBatchSink, serve_metrics

    sink_config, kafka = load_sink_config(config_path)
    if sink_config.metrics_port is not None:
        serve_metrics(sink_config.metrics_port)
    bootstrap = kafka.pop("bootstrap.servers")
    kafka.pop("client.id", None)
    runner = MicroBatchSink(sink_config, bootstrap, consumer_conf=kafka, report=lambda r: print(r.line(), flush=True))
    try:
        summary = runner.run(once=once, max_batches=max_batches)
    finally:
        runner.close()
    print(f"sink finished: {summary.batches} batches, {summary.rows_read} records read", flush=True)
    return 0
