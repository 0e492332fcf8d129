"""``cdcnorm_sink_commit_seconds`` has buckets up to 10 minutes, so the alert on slow commits
(``CdcnormSinkSlowCommits``: a quantile above a threshold, in the monitoring component's
PrometheusRule) can fire: ``histogram_quantile`` never reports more than the largest finite bucket
bound, and the client's default buckets end at 10 s."""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from sink.runner import COMMIT_SECONDS

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "k8s" / "components" / "monitoring" / "prometheusrule.yaml"
NAME = "cdcnorm_sink_commit_seconds"


def buckets() -> dict[float, float]:
    """The histogram's cumulative bucket counts, by upper bound, from the registry's exposition."""
    out: dict[float, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == f"{NAME}_bucket":
                out[float(sample.labels["le"])] = sample.value
    assert out, f"{NAME} is not registered"
    return out


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative bucket counts: linear within the bucket
    that holds the rank; in the +Inf bucket, the largest finite bound."""
    bounds = sorted(cumulative)
    rank = q * cumulative[math.inf]
    below, lower = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return bounds[-2]
            return lower + (bound - lower) * (rank - below) / (count - below)
        below, lower = count, bound
    raise AssertionError("no bucket holds the rank")


def slow_commit_alert() -> tuple[float, float]:
    """(quantile, threshold) of the alert CdcnormSinkSlowCommits."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    (expr,) = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"] if r.get("alert") == "CdcnormSinkSlowCommits"]
    match = re.search(rf"histogram_quantile\(\s*([\d.]+)\s*,.*{NAME}_bucket.*\)\s*>\s*([\d.]+)\s*$", expr, re.S)
    assert match, f"unexpected expression: {expr}"
    return float(match.group(1)), float(match.group(2))


def test_commit_buckets_reach_ten_minutes() -> None:
    bounds = set(buckets())
    assert {60.0, 120.0, 300.0, 600.0, math.inf} <= bounds
    assert {0.1, 1.0, 10.0} <= bounds  # fast commits keep their resolution


def test_slow_commits_make_the_alert_quantile_exceed_its_threshold_and_fast_ones_do_not() -> None:
    q, threshold = slow_commit_alert()
    assert threshold < max(b for b in buckets() if not math.isinf(b)), "the alert could never fire"

    def quantile_of(seconds: float) -> float:
        before = buckets()
        for _ in range(20):
            COMMIT_SECONDS.observe(seconds)
        after = buckets()
        return histogram_quantile(q, {b: after[b] - before[b] for b in after})

    assert quantile_of(1.5 * threshold) > threshold  # e.g. 90 s commits: p95 above 60 s
    assert quantile_of(5 * threshold) > threshold  # far above: still counted above the threshold
    assert quantile_of(0.5 * threshold) < threshold
