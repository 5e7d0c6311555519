"""Read one exporter's ``/metrics`` back into per-tier figures (``hicache-mooncake stats``, tests).

``scrape(url)`` returns an ``EndpointReport``: the labels of the process (``model``/``rank`` or
``node``), per tier the gauges and counters of ``metrics.tiers``/``metrics.timing`` plus latency
quantiles estimated from the ``tier_op_seconds`` buckets (as Prometheus' ``histogram_quantile``
does: linear within the bucket), and the process-level counters.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "hicache_mooncake:"
_TIER_VALUES = {
    "tier_entries": "entries",
    "tier_used_bytes": "used_bytes",
    "tier_capacity_bytes": "capacity_bytes",
    "tier_hits_total": "hits",
    "tier_misses_total": "misses",
    "tier_read_bytes_total": "read_bytes",
    "tier_written_bytes_total": "written_bytes",
    "tier_write_failures_total": "write_failures",
    "tier_evictions_total": "evictions",
    "tier_checksum_errors_total": "checksum_errors",
    "tier_degraded": "degraded",
    "tier_detached": "detached",
    "tier_recovery_seconds": "recovery_seconds",
    "tier_recovered_entries": "recovered_entries",
}
_PROCESS_VALUES = {
    "promotions_total": "promotions",
    "demotions_total": "demotions",
    "placement_refused_total": "placement_refused",
    "mover_queue_depth": "mover_queue_depth",
    "mover_lost_total": "mover_lost",
    "node_entries": "entries",
    "node_used_bytes": "used_bytes",
    "node_capacity_bytes": "capacity_bytes",
    "node_hits_total": "hits",
    "node_misses_total": "misses",
    "node_evictions_total": "evictions",
    "node_connections": "connections",
    "node_draining": "draining",
}
QUANTILES = (0.5, 0.99)


@dataclass
class EndpointReport:
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    tiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, **self.labels, "tiers": self.tiers, **self.process}


class ScrapeError(Exception):
    """The endpoint cannot be read, or it is not one of ours."""


def fetch(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ScrapeError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None


def scrape(url: str, timeout: float = 3.0) -> EndpointReport:
    return parse(url, fetch(url, timeout))


def parse(url: str, text: str) -> EndpointReport:
    report = EndpointReport(url)
    tiers: dict[str, dict[str, Any]] = defaultdict(dict)
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(PREFIX):
                continue
            seen = True
            name = sample.name.removeprefix(PREFIX)
            labels = dict(sample.labels)
            for key in ("model", "rank", "node"):
                if key in labels:
                    report.labels[key] = labels[key]
            tier = labels.get("tier")
            if name == "tier_op_seconds_bucket" and tier is not None:
                buckets[(tier, labels["op"])].append((float(labels["le"]), sample.value))
            elif name == "tier_op_seconds_count" and tier is not None:
                tiers[tier].setdefault("calls", {})[labels["op"]] = int(sample.value)
            elif name == "tier_refusals_total" and tier is not None:
                tiers[tier].setdefault("refusals", {})[labels["cause"]] = int(sample.value)
            elif name == "tier_info" and tier is not None:
                tiers[tier].update(
                    {k: v for k, v in labels.items() if k not in ("model", "rank", "tier", "node")}
                )
            elif name in _TIER_VALUES and tier is not None:
                tiers[tier][_TIER_VALUES[name]] = _number(sample.value)
            elif name == "pages_total":
                report.process.setdefault("pages", {}).setdefault(labels["op"], {})[labels["result"]] = int(
                    sample.value
                )
            elif name == "node_requests_total":
                report.process.setdefault("requests", {})[labels["op"]] = int(sample.value)
            elif name in _PROCESS_VALUES:
                report.process[_PROCESS_VALUES[name]] = _number(sample.value)
    if not seen:
        raise ScrapeError(
            f"{url} serves no hicache_mooncake metrics (is it a backend's or node's metrics port?)"
        )
    for (tier, op), points in buckets.items():
        latency = tiers[tier].setdefault("latency_s", {}).setdefault(op, {})
        for q in QUANTILES:
            latency[f"p{round(q * 100)}"] = quantile(q, points)
    report.tiers = dict(tiers)
    return report


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram ``[(upper bound, count)]`` (None when empty);
    an answer in the ``+Inf`` bucket is the highest finite bound."""
    points = sorted(buckets)
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in points:
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower
