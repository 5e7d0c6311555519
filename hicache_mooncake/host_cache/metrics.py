"""The host cache service's per-client accounting as Prometheus families (requests, reservations,
commits, lookups and hits per connected client process), read from the server's stats at scrape;
served with the service's tiers by ``metrics_node.serve_node_metrics`` on ``host_cache.metrics_port``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_PER_CLIENT: tuple[str, ...] = (
    "requests",
    "lookups",
    "lookup_hits",
    "lookup_hit_bytes",
    "reserved",
    "reserved_bytes",
    "committed",
    "aborted",
    "released_on_disconnect",
)


class ClientCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._stats()
        clients: dict[str, dict[str, int]] = stats.get("clients", {})
        conns = GaugeMetricFamily(
            "hicache_mooncake_host_cache_client_connections", "open connections per client", labels=["client"]
        )
        families = {
            name: CounterMetricFamily(
                f"hicache_mooncake_host_cache_client_{name}",
                f"{name} per connected client",
                labels=["client"],
            )
            for name in _PER_CLIENT
        }
        for client, counts in clients.items():
            conns.add_metric([client], float(counts.get("connections", 0)))
            for name, family in families.items():
                family.add_metric([client], float(counts.get(name, 0)))
        yield conns
        yield from families.values()
        yield GaugeMetricFamily(
            "hicache_mooncake_host_cache_departed_clients",
            "clients whose last connection closed",
            value=float(stats.get("departed", {}).get("clients", 0)),
        )
