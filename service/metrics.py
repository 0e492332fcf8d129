"""Prometheus metrics of the normalization worker (served on ``/metrics``).

Each :class:`WorkerMetrics` owns its registry, so several workers (tests) can live in one
process. Consumer lag is best effort: it is ``high watermark - next offset`` as the broker
reports it, and some brokers (Tansu) report high watermarks per batch, not per record.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "WorkerMetrics"]


class WorkerMetrics:
    """Counters, histograms and gauges of one worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.messages_in = Counter(
            "cdcnorm_messages_in", "Source messages consumed.", ["topic", "format"], registry=r
        )
        self.records_out = Counter(
            "cdcnorm_records_out", "Normalized records produced (acknowledged by the broker).", ["topic", "format"], registry=r
        )
        self.dlq = Counter(
            "cdcnorm_dlq", "Source messages sent to the dead-letter queue.", ["topic", "format", "error_class"], registry=r
        )
        self.decode_seconds = Histogram(
            "cdcnorm_decode_seconds",
            "Time to decode, transform and serialize one source message.",
            ["format"],
            buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0),
            registry=r,
        )
        self.consumer_lag = Gauge(
            "cdcnorm_consumer_lag",
            "High watermark minus next offset to process (best effort).",
            ["topic", "partition"],
            registry=r,
        )
        self.redis_errors = Counter(
            "cdcnorm_redis_errors", "Failed Redis operations.", ["operation"], registry=r
        )
        self.inflight = Gauge(
            "cdcnorm_inflight_messages", "Source messages processed but not yet acknowledged.", registry=r
        )
        self.ready = Gauge("cdcnorm_ready", "1 when the worker reports ready.", registry=r)

    def redis_error(self, operation: str) -> None:
        self.redis_errors.labels(operation).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
