"""Metrics of one backend instance (one SGLang rank): Prometheus series in its own registry, served
per rank (``metrics.port`` + rank index), and the per-operation samples SGLang's ``get_stats``
polling expects (drained on every call). SGLang polls ``get_stats`` only with ``--enable-metrics``;
otherwise nobody drains the samples, so each series keeps at most ``MAX_SAMPLES`` (the newest; older
ones are dropped and counted in ``hicache_mooncake:samples_dropped_total``): memory stays bounded
whatever SGLang does.

Every series carries ``model`` (SGLang's served model name, or ``namespace.model``) and ``rank``
(``rank_index``: unique per scheduler process of one server), so the ranks of a host can be
scraped and summed side by side. The parts:

- this module: the backend's own calls: ``hicache_mooncake:pages_total{op,result}``,
  ``bytes_total{op}``, ``call_failures_total{op}``, ``call_seconds{op}`` and ``backend_info``;
- ``metrics.timing``: per-tier latency histograms and hit/miss/byte counters (the timing layer);
- ``metrics.tiers``: per-tier figures the store already counts, read at scrape time;
- ``metrics.exporter``: the HTTP endpoint (``/metrics``, ``/healthz``) and discovery file.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hicache_mooncake.config.metrics import ExporterConfig
from hicache_mooncake.keys import RankInfo
from hicache_mooncake.metrics.deferred import DeferredUpdates
from hicache_mooncake.metrics.exporter import Health, MetricsExporter
from hicache_mooncake.metrics.tiers import TierStatsCollector
from hicache_mooncake.metrics.timing import LATENCY_BUCKETS, PREFIX, TierTiming
from hicache_mooncake.tiers.tier import Tier

MAX_SAMPLES = 4096
"""get_stats samples kept per series while nobody polls (the newest; SGLang polls with --enable-metrics)."""


@dataclass(frozen=True)
class RankLabels:
    """Who exports: the labels every series of one backend carries."""

    model: str = "model"
    rank: int = 0
    info: tuple[tuple[str, str], ...] = ()
    """Extra ``backend_info`` labels (parallel sizes and ranks, versions)."""

    def base(self) -> dict[str, str]:
        return {"model": self.model, "rank": str(self.rank)}


def rank_index(tp_rank: int, tp_size: int, pp_rank: int = 0, pp_size: int = 1, dp_rank: int = 0) -> int:
    """The rank's place among the scheduler processes of one server: ``tp_rank + tp_size * (pp_rank +
    pp_size * dp_rank)`` (with dp-attention SGLang hands attention-TP values and the attention-DP
    rank, which this keeps apart). Several servers on one host (or DP replicas without
    dp-attention, which all count from 0) need their own ``metrics.port`` base, or ``port: 0``."""
    return tp_rank + tp_size * (pp_rank + pp_size * dp_rank)


def backend_labels(model: str, ranks: RankInfo, dp_rank: int, sglang_version: str) -> RankLabels:
    """The labels of one backend: its model, its rank index and, in ``backend_info``, the parallel
    ranks and sizes behind that index plus the versions."""
    index = rank_index(ranks.tp_rank, ranks.tp_size, ranks.pp_rank, ranks.pp_size, dp_rank)
    info = (
        ("tp_rank", str(ranks.tp_rank)),
        ("tp_size", str(ranks.tp_size)),
        ("pp_rank", str(ranks.pp_rank)),
        ("pp_size", str(ranks.pp_size)),
        ("dp_rank", str(dp_rank)),
        ("version", package_version()),
        ("sglang_version", sglang_version),
    )
    return RankLabels(model, index, info)


def package_version() -> str:
    try:
        return metadata.version("hicache-mooncake")
    except metadata.PackageNotFoundError:
        return "unknown"


class _Bound:
    """A labelled family with the base labels already applied: ``.labels(op)``. Each child is
    looked up once (prometheus_client's ``labels`` takes a lock and builds the label tuple: a few
    microseconds, four times per backend call, on the caller's thread with the GIL held)."""

    def __init__(self, family: Counter | Histogram, base: Sequence[str]) -> None:
        self._family = family
        self._base = tuple(base)
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children.setdefault(values, self._family.labels(*self._base, *values))
        return child


class BackendMetrics:
    def __init__(self, tier_stats: Callable[[], dict[str, Any]], labels: RankLabels | None = None) -> None:
        self.labels = labels or RankLabels()
        base = self.labels.base()
        names, values = list(base), list(base.values())
        self.registry = CollectorRegistry(auto_describe=True)
        # first: a read of the registry applies the queued updates before it reads a series
        self.deferred = DeferredUpdates()
        self.registry.register(self.deferred)
        self.pages = _Bound(
            Counter(f"{PREFIX}pages", "Pages per backend call, by op and result", [*names, "op", "result"],
                    registry=self.registry),
            values,
        )  # fmt: skip
        self.bytes = _Bound(
            Counter(
                f"{PREFIX}bytes", "Payload bytes moved by the backend", [*names, "op"], registry=self.registry
            ),
            values,
        )
        self.failures = _Bound(
            Counter(f"{PREFIX}call_failures", "Backend calls that failed as a whole (all keys a miss / False)",
                    [*names, "op"], registry=self.registry),
            values,
        )  # fmt: skip
        self.seconds = _Bound(
            Histogram(f"{PREFIX}call_seconds", "Wall time of one backend get/set call", [*names, "op"],
                      buckets=LATENCY_BUCKETS, registry=self.registry),
            values,
        )  # fmt: skip
        info = Gauge(f"{PREFIX}backend_info", "This backend (value 1)", [*names, *(k for k, _ in self.labels.info)],
                     registry=self.registry)  # fmt: skip
        info.labels(*values, *(v for _, v in self.labels.info)).set(1)
        self.timing = TierTiming(self.registry, base, self.deferred)
        self.registry.register(TierStatsCollector(tier_stats, base))
        self._lock = threading.Lock()
        self.samples_dropped = _Bound(
            Counter(f"{PREFIX}samples_dropped", "get_stats samples dropped because nobody polled get_stats",
                    names, registry=self.registry),
            values,
        )  # fmt: skip
        self._samples: dict[str, deque[float]] = {
            name: deque(maxlen=MAX_SAMPLES)
            for name in ("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth")
        }
        self._exporter: MetricsExporter | None = None

    def instrument(self, tiers: Iterable[Tier]) -> None:
        """Time every batched call of ``tiers`` (``metrics.timing``)."""
        for tier in tiers:
            self.timing.instrument(tier)

    def record(self, op: str, ok: int, failed: int, nbytes: int, seconds: float) -> None:
        """One call's figures, queued (``metrics.deferred``: applied when the registry or the
        samples are read)."""
        self.deferred.add(self._apply_record, (op, ok, failed, nbytes, seconds))

    def _apply_record(self, op: str, ok: int, failed: int, nbytes: int, seconds: float) -> None:
        self.pages.labels(op, "ok").inc(ok)
        if failed:
            self.pages.labels(op, "failed").inc(failed)
        self.bytes.labels(op).inc(nbytes)
        self.seconds.labels(op).observe(seconds)
        kind = {"get": "prefetch", "set": "backup"}.get(op)
        if kind is None or not ok:
            return
        with self._lock:
            pages = self._samples[f"{kind}_pgs"]
            if len(pages) == MAX_SAMPLES:
                self.samples_dropped.labels().inc()
            pages.append(ok)
            self._samples[f"{kind}_bandwidth"].append(nbytes / max(seconds, 1e-9) / 1e9)

    def retained_samples(self) -> int:
        """Samples held now, all series together (at most ``4 * MAX_SAMPLES``)."""
        self.deferred.flush()
        with self._lock:
            return sum(len(series) for series in self._samples.values())

    def drain_samples(self) -> dict[str, list[float]]:
        self.deferred.flush()
        with self._lock:
            out = {name: list(series) for name, series in self._samples.items()}
            for series in self._samples.values():
                series.clear()
        return out

    # ------------------------------------------------------------------ the endpoint
    def serve(self, config: ExporterConfig, health: Health) -> int:
        """Serve this rank's endpoint on ``config.port + rank`` (``config.port`` 0: any free port);
        returns the port. OSError (naming the key and the rank) when it cannot be bound."""
        assert config.port is not None
        port = config.port + self.labels.rank if config.port else 0
        if port > 65535:
            raise OSError(f"metrics.port {config.port} + rank {self.labels.rank} is past 65535")
        exporter = MetricsExporter(self.registry, health, "backend", self.labels.base())
        try:
            bound = exporter.start(config.host, port, config.discovery_dir)
        except OSError as exc:
            what = (
                f"metrics.port {config.port} + rank {self.labels.rank} = {port}"
                if config.port
                else "metrics.port 0"
            )
            raise OSError(
                f"{what} on {config.host}: {exc.strerror or exc} (another server or DP replica on this "
                "host? give each its own metrics.port base, or use port: 0)"
            ) from exc
        self._exporter = exporter
        return bound

    def close(self) -> None:
        exporter, self._exporter = self._exporter, None
        if exporter is not None:
            exporter.close()
