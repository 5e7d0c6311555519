"""Metrics of one backend instance: Prometheus series (own registry, optional HTTP endpoint) and
the per-operation samples SGLang's ``get_stats`` polling expects (drained on every call).

SGLang polls ``get_stats`` only when it runs with ``--enable-metrics``; otherwise nobody drains the
samples. Each series therefore keeps at most ``MAX_SAMPLES`` (the newest; older ones are dropped
and counted in ``hicache_mooncake_samples_dropped``), so memory stays bounded whatever SGLang does.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MAX_SAMPLES = 4096
"""Samples kept per series between two ``get_stats`` calls (SGLang polls every few seconds)."""
_SERIES = ("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth")


class TierCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        entries = GaugeMetricFamily("hicache_mooncake_tier_entries", "objects held per tier", labels=["tier"])
        used = GaugeMetricFamily("hicache_mooncake_tier_used_bytes", "bytes held per tier", labels=["tier"])
        cap = GaugeMetricFamily("hicache_mooncake_tier_capacity_bytes", "capacity per tier", labels=["tier"])
        for name, tier in self._stats().items():
            if not isinstance(tier, dict):
                continue
            entries.add_metric([name], float(tier.get("entries", 0)))
            used.add_metric([name], float(tier.get("used_bytes", 0)))
            cap.add_metric([name], float(tier.get("capacity_bytes", 0)))
        yield from (entries, used, cap)


class BackendMetrics:
    def __init__(self, tier_stats: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pages = Counter(
            "hicache_mooncake_pages",
            "pages per operation and result",
            ["op", "result"],
            registry=self.registry,
        )
        self.bytes = Counter("hicache_mooncake_bytes", "payload bytes moved", ["op"], registry=self.registry)
        self.failures = Counter(
            "hicache_mooncake_failures", "failed calls by cause", ["cause"], registry=self.registry
        )
        self.samples_dropped = Counter(
            "hicache_mooncake_samples_dropped",
            "get_stats samples dropped because nobody polled get_stats",
            registry=self.registry,
        )
        self.registry.register(TierCollector(tier_stats))
        self._lock = threading.Lock()
        self._samples: dict[str, deque[float]] = {name: deque(maxlen=MAX_SAMPLES) for name in _SERIES}
        self._server: Any = None

    def record(self, op: str, ok: int, failed: int, nbytes: int, seconds: float) -> None:
        self.pages.labels(op, "ok").inc(ok)
        if failed:
            self.pages.labels(op, "failed").inc(failed)
        self.bytes.labels(op).inc(nbytes)
        kind = {"get": "prefetch", "set": "backup"}.get(op)
        if kind is None or not ok:
            return
        with self._lock:
            pages = self._samples[f"{kind}_pgs"]
            if len(pages) == MAX_SAMPLES:
                self.samples_dropped.inc()
            pages.append(ok)
            self._samples[f"{kind}_bandwidth"].append(nbytes / max(seconds, 1e-9) / 1e9)

    def retained_samples(self) -> int:
        """Samples held now, all series together (at most ``4 * MAX_SAMPLES``)."""
        with self._lock:
            return sum(len(series) for series in self._samples.values())

    def drain_samples(self) -> dict[str, list[float]]:
        with self._lock:
            out = {name: list(series) for name, series in self._samples.items()}
            for series in self._samples.values():
                series.clear()
        return out

    def serve(self, host: str, port: int) -> int:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
