"""Entry point of the sink: ``cdcnorm sink --config pipeline.yaml`` (also ``python -m sink``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.extras import require_extras
from sink.config import SinkConfig
from transforms.errors import ConfigError

__all__ = ["load_sink_config", "run_sink"]

log = logging.getLogger("cdcnorm.sink")


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
