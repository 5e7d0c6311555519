"""The host cache service's per-client accounting as Prometheus families (requests, reservations,
commits, lookups and hits per connected client process), read from the server's stats at scrape;
served with the service's tiers by ``metrics.node.serve_node_metrics`` on ``host_cache.metrics_port``
(by default any free port, registered for discovery with the role ``host-cache``). ``parse_clients``
reads them back from the text (``hicache-mooncake stats``)."""

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


_CLIENT_PREFIX = "hicache_mooncake_host_cache_client_"
_MARKER = "hicache_mooncake_host_cache_departed_clients"


def is_host_cache(text: str) -> bool:
    """Whether a ``/metrics`` text is a host cache service's (it always exports the departed count)."""
    return _MARKER in text


def parse_clients(text: str) -> dict[str, dict[str, int]]:
    """The per-client figures of a host cache's ``/metrics`` text: ``{client: {name: value}}``
    (``connections`` and the ``_PER_CLIENT`` counters), clients as the service names them (``pid:N``)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(_CLIENT_PREFIX) or "client" not in sample.labels:
                continue
            name = sample.name.removeprefix(_CLIENT_PREFIX).removesuffix("_total")
            if name.endswith("_created"):
                continue
            out.setdefault(sample.labels["client"], {})[name] = int(sample.value)
    return out
