"""Prometheus metrics of the host cache service (``host_cache.metrics_port``): its tiers (entries,
bytes, capacity, as a backend exports them) and its per-client accounting (requests, reservations,
commits, lookups and hits per connected client process), read from the server's stats at scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from hicache_mooncake.metrics import TierCollector

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


def serve_metrics(server_stats: Callable[[], dict[str, Any]], port: int, host: str = "127.0.0.1") -> int:
    """Serve the service's metrics; returns the port (0 picks a free one)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ClientCollector(server_stats))
    registry.register(TierCollector(lambda: server_stats().get("store", {}).get("tiers", {})))
    http, _thread = start_http_server(port, addr=host, registry=registry)
    return int(http.server_address[1])
