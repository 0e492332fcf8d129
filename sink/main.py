"""Entry point of the sink: ``cdcnorm sink --config pipeline.yaml`` (also ``python -m sink``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sink.config import SinkConfig
from transforms.configfile import (
    REFERENCES_RESOLVED,
    BrokerConfig,
    SecretRedactor,
    raise_problems,
    read_yaml,
    resolve_document,
    validation_errors,
)
from transforms.errors import ConfigError
from transforms.extras import require_extras

__all__ = ["SECTIONS", "load_sink_config", "read_sink_config", "run_sink"]

log = logging.getLogger("cdcnorm.sink")


# the sections of pipeline.yaml the sink reads; the worker's (topics, redis, web, ...) are not
# resolved nor validated here (`cdcnorm validate-config` checks the whole file)
SECTIONS = ("broker", "sink")


def read_sink_config(path: str | Path) -> tuple[SinkConfig, BrokerConfig, tuple[str, ...]]:
    """The ``sink:`` and ``broker:`` sections of a pipeline config file, validated, and the
    secrets they hold (what references under secret-looking keys resolved to included).

    Reads only those two sections, through :mod:`transforms.configfile` (the module the worker's
    ``service.config`` builds on too): their ``${ENV}``/``file:`` references are resolved (in
    ``sink:``, ``file:`` only under secret-looking keys) and every problem of both is reported at
    once (:class:`~transforms.configfile.ConfigErrors`, key paths and masked values as
    ``cdcnorm validate-config`` shows them). The worker's sections are not the sink's business:
    ``cdcnorm validate-config`` checks the whole file.
    """
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError("<root>", type(raw).__name__, "expected a mapping at the top level")
    if raw.get("sink") is None:
        raise ConfigError("sink", None, "the pipeline config has no `sink:` section")
    document = resolve_document({key: raw[key] for key in SECTIONS if key in raw})
    context = {REFERENCES_RESOLVED: True}
    problems: list[tuple[tuple[Any, ...], ConfigError]] = []
    broker: BrokerConfig | None = None
    sink: SinkConfig | None = None
    try:
        broker = BrokerConfig.model_validate(document.doc.get("broker", {}), context=context)
    except ValidationError as exc:
        problems += validation_errors(exc, document, ("broker",))
    try:
        sink = SinkConfig.model_validate(document.doc.get("sink"), context=context)
    except ValidationError as exc:
        problems += validation_errors(exc, document, ("sink",))
    raise_problems(raw, document, problems)
    assert broker is not None and sink is not None
    return sink, broker, (*broker.secret_values(), *sink.secret_values(), *document.secrets())


def load_sink_config(path: str | Path) -> tuple[SinkConfig, dict[str, Any]]:
    """The sink section and the librdkafka settings of a pipeline config file
    (:func:`read_sink_config`), ``group.protocol`` included (``broker.group_protocol``: the
    driver's consumer joins its group with it, the read tasks never join one); their secrets are
    redacted from this process's log records from now on
    (:class:`~transforms.configfile.SecretRedactor`)."""
    sink, broker, secrets = read_sink_config(path)
    SecretRedactor(secrets).install()
    return sink, broker.librdkafka_group_member()


def run_sink(config_path: str | Path, once: bool = False, max_batches: int | None = None) -> int:
    """Run the micro-batch sink until stopped (or, with ``once``, until the topics are drained)."""
    require_extras("the Iceberg sink", "sink")
    from sink.iceberg import TableOwnershipError
    from sink.plan import ConsumerGroupError
    from sink.runner import MicroBatchSink, serve_metrics

    sink_config, kafka = load_sink_config(config_path)
    bootstrap = kafka.pop("bootstrap.servers")
    kafka.pop("client.id", None)
    runner = MicroBatchSink(sink_config, bootstrap, consumer_conf=kafka, report=lambda r: print(r.line(), flush=True))
    if sink_config.metrics_port is not None:
        serve_metrics(sink_config.metrics_port, runner.health)
    try:
        summary = runner.run(once=once, max_batches=max_batches)
    except (TableOwnershipError, ConsumerGroupError) as exc:
        log.error("stopping: %s", exc)
        return 1
    finally:
        runner.close()
    print(f"sink finished: {summary.batches} batches, {summary.rows_read} records read", flush=True)
    return 0
