"""Entry point of the sink: ``cdcnorm sink --config pipeline.yaml`` (also ``python -m sink``)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sink.config import SinkConfig
from transforms.errors import ConfigError

__all__ = ["crash_point", "load_sink_config", "run_sink"]

log = logging.getLogger("cdcnorm.sink")


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL this process at a named point.

    Active only when ``CDCNORM_CRASH_POINT`` names the point; ``CDCNORM_CRASH_AFTER=N`` skips
    the first N-1 passes.
    """
    if os.environ.get("CDCNORM_CRASH_POINT") != name:
        return
    remaining = int(os.environ.get("CDCNORM_CRASH_AFTER", "1")) - 1
    if remaining > 0:
        os.environ["CDCNORM_CRASH_AFTER"] = str(remaining)
        return
    log.warning("crash point %s reached: killing the sink (test fault injection)", name)
    os.kill(os.getpid(), signal.SIGKILL)


def load_sink_config(path: str | Path) -> tuple[SinkConfig, dict[str, Any]]:
    """The sink section and the librdkafka settings of a pipeline config file."""
    from service.config import load_config

    pipeline = load_config(path, check_formats=False)
    if pipeline.sink is None:
        raise ConfigError("sink", None, "the pipeline config has no `sink:` section")
    try:
        sink = SinkConfig.model_validate(pipeline.sink)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise ConfigError(f"sink.{loc}" if loc else "sink", err.get("input"), err.get("msg", "invalid")) from None
    return sink, pipeline.broker.librdkafka()


def run_sink(config_path: str | Path, once: bool = False, max_batches: int | None = None) -> int:
    """Run the micro-batch sink until stopped (or, with ``once``, until the topics are drained)."""
    from sink.runner import MicroBatchSink, serve_metrics

    sink_config, kafka = load_sink_config(config_path)
    if sink_config.metrics_port is not None:
        serve_metrics(sink_config.metrics_port)
    bootstrap = kafka.pop("bootstrap.servers")
    kafka.pop("client.id", None)
    runner = MicroBatchSink(sink_config, bootstrap, consumer_conf=kafka, report=lambda r: print(r.line(), flush=True))
    try:
        reports = runner.run(once=once, max_batches=max_batches)
    finally:
        runner.close()
    total = sum(r.rows_read for r in reports)
    print(f"sink finished: {len(reports)} batches, {total} records read", flush=True)
    return 0
