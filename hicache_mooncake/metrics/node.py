"""A memory node's metrics, read at scrape time from ``NodeServer.stats()``, labelled ``node``.

Families (``hicache_mooncake:`` prefix): ``node_requests_total{op}``, ``node_errors_total{cause}``,
``node_connections``, ``node_handshakes_pending``, ``node_draining``, and what its store holds and
did: ``node_entries``, ``node_used_bytes``, ``node_capacity_bytes``, ``node_hits_total``,
``node_misses_total``, ``node_stored_total``, ``node_evictions_total``, ``node_refusals_total{cause}``.
A store that reports per-tier figures (a node serving a ``TieredStore``) is exported with the
backend's ``tier_*`` families instead (``metrics.tiers``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from hicache_mooncake.config.metrics import ExporterConfig
from hicache_mooncake.metrics.exporter import MetricsExporter
from hicache_mooncake.metrics.tiers import Families, TierStatsCollector, stat_value

log = logging.getLogger(__name__)

_STORE_GAUGES = (
    (("objects", "entries"), "node_entries", "Objects the node holds"),
    (("used", "used_bytes"), "node_used_bytes", "Bytes the node holds"),
    (("capacity", "capacity_bytes"), "node_capacity_bytes", "Capacity of the node's arena"),
)
_STORE_COUNTERS = (
    ("hits", "node_hits", "Reads the node served"),
    ("misses", "node_misses", "Reads of keys the node does not hold"),
    ("stored", "node_stored", "Objects stored"),
    ("evicted", "node_evictions", "Objects evicted for room"),
)


class NodeStatsCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]], node_id: str) -> None:
        self._stats = stats
        self._base = {"node": node_id}

    def collect(self) -> Iterator[Metric]:
        out = Families(self._base)
        stats = self._stats()
        for op, n in _items(stats.get("requests")):
            out.add("counter", "node_requests", "Requests served, by op", {"op": op}, n)
        for cause, n in _items(stats.get("errors")):
            out.add("counter", "node_errors", "Errors, by cause", {"cause": cause}, n)
        for key, name, doc in (
            ("connections", "node_connections", "Authenticated connections open"),
            ("handshakes", "node_handshakes_pending", "Sockets still authenticating"),
        ):
            if (value := stat_value(stats, key)) is not None:
                out.add("gauge", name, doc, {}, value)
        if isinstance(stats.get("draining"), bool):
            out.add("gauge", "node_draining", "1 while the node drains (SIGTERM)", {}, stats["draining"])
        raw = stats.get("store")
        store: dict[str, Any] = raw if isinstance(raw, dict) else {}
        # a node serving the one store (``ArenaStore``) reports its per-tier figures under "tiers"
        nested = store.get("tiers")
        tiers: dict[str, Any] = nested if isinstance(nested, dict) else store
        tiered = any(isinstance(v, dict) and "tier" in v for v in (tiers or {}).values())
        if store:
            _flat_store(out, store)
        yield from out
        if tiered:
            yield from TierStatsCollector(lambda: tiers, self._base).collect()


def _items(value: Any) -> list[tuple[str, float]]:
    if not isinstance(value, dict):
        return []
    return [(str(k), float(v)) for k, v in value.items() if isinstance(v, int | float)]


def _flat_store(out: Families, store: Mapping[str, Any]) -> None:
    for keys, name, doc in _STORE_GAUGES:
        value = next((v for k in keys if (v := stat_value(store, k)) is not None), None)
        if value is not None:
            out.add("gauge", name, doc, {}, value)
    for key, name, doc in _STORE_COUNTERS:
        if (value := stat_value(store, key)) is not None:
            out.add("counter", name, doc, {}, value)
    if (value := stat_value(store, "no_space")) is not None:
        out.add("counter", "node_refusals", "Objects refused, by cause", {"cause": "no_space"}, value)


def node_registry(
    stats: Callable[[], dict[str, Any]], node_id: str, extra: Collector | None = None
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(NodeStatsCollector(stats, node_id))
    if extra is not None:
        registry.register(extra)
    return registry


class Served(Protocol):
    """What the endpoint reads of a ``transport.NodeServer`` (a memory node, or the host cache)."""

    node_id: str

    def stats(self) -> dict[str, Any]: ...


def _health(server: Served) -> tuple[bool, dict[str, Any]]:
    stats = server.stats()
    draining = bool(stats.get("draining"))
    return not draining, {
        "node": server.node_id,
        "draining": draining,
        "connections": stats.get("connections"),
    }


def serve_node_metrics(
    server: Served, cfg: ExporterConfig, role: str = "node", extra: Collector | None = None
) -> MetricsExporter | None:
    """``/metrics`` and ``/healthz`` of a served store (``cfg.port``; None: not served). A port
    that cannot be bound is logged and the server runs without it (its data path matters more)."""
    if cfg.port is None:
        return None
    exporter = MetricsExporter(
        node_registry(server.stats, server.node_id, extra),
        lambda: _health(server),
        role,
        {"node": server.node_id},
    )
    try:
        bound = exporter.start(cfg.host, cfg.port, cfg.discovery_dir)
    except OSError as exc:
        log.error("%s metrics port %d on %s: %s; serving without metrics", role, cfg.port, cfg.host, exc)
        return None
    log.info("%s %s metrics: http://%s:%d/metrics (and /healthz)", role, server.node_id, cfg.host, bound)
    return exporter
