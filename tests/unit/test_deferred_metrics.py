"""``metrics.deferred``: the data path queues its metric updates; what an operator relies on is that
every read of the metrics (a scrape, SGLang's ``get_stats``) sees every call made before it, each
counted once, whatever the threads, and that memory stays bounded when nobody reads."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter

from hicache_mooncake.metrics.deferred import DeferredUpdates
from hicache_mooncake.metrics.rank import BackendMetrics


def _registry(limit: int = 512) -> tuple[CollectorRegistry, DeferredUpdates, Counter]:
    registry = CollectorRegistry(auto_describe=True)
    deferred = DeferredUpdates(limit)
    registry.register(deferred)  # before the series it feeds
    counter = Counter("calls", "calls", registry=registry)
    return registry, deferred, counter


def test_a_queued_update_lands_when_the_registry_is_read_not_before() -> None:
    registry, deferred, counter = _registry()
    deferred.add(counter.inc, (3,))
    assert counter._value.get() == 0 and len(deferred) == 1  # queued, not applied
    assert registry.get_sample_value("calls_total") == 3
    assert len(deferred) == 0
    assert registry.get_sample_value("calls_total") == 3  # applied once


def test_the_queue_applies_itself_at_its_limit_so_memory_stays_bounded_without_reads() -> None:
    _registry_, deferred, counter = _registry(limit=4)
    for _ in range(10):
        deferred.add(counter.inc, (1,))
        assert len(deferred) < 4
    assert counter._value.get() == 8  # two flushes of 4; 2 still queued
    with pytest.raises(ValueError, match="limit"):
        DeferredUpdates(0)


def test_an_update_that_raises_is_logged_and_dropped_and_the_rest_still_apply(caplog) -> None:
    registry, deferred, counter = _registry()

    def broken() -> None:
        raise RuntimeError("bug in a metric")

    deferred.add(counter.inc, (1,))
    deferred.add(broken, ())
    deferred.add(counter.inc, (2,))
    with caplog.at_level(logging.ERROR, logger="hicache_mooncake.metrics.deferred"):
        assert registry.get_sample_value("calls_total") == 3
    assert "metric update failed" in caplog.text


def test_threads_adding_while_others_read_count_every_update_exactly_once() -> None:
    registry, deferred, counter = _registry(limit=64)
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            registry.get_sample_value("calls_total")

    def writer() -> None:
        for _ in range(5000):
            deferred.add(counter.inc, (1,))

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer) for _ in range(4)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert registry.get_sample_value("calls_total") == 20000


def test_a_backend_call_recorded_shows_in_the_scrape_and_in_get_stats_samples() -> None:
    metrics = BackendMetrics(lambda: {"tiers": {}})
    metrics.record("get", 16, 0, 16 << 20, 0.002)
    metrics.record("set", 8, 2, 8 << 20, 0.001)
    base = {"model": "model", "rank": "0"}
    sample = metrics.registry.get_sample_value
    assert sample("hicache_mooncake:pages_total", {**base, "op": "get", "result": "ok"}) == 16
    assert sample("hicache_mooncake:pages_total", {**base, "op": "set", "result": "failed"}) == 2
    assert sample("hicache_mooncake:call_seconds_count", {**base, "op": "get"}) == 1
    metrics.record("get", 4, 0, 4 << 20, 0.001)  # queued; get_stats' drain applies it first
    samples = metrics.drain_samples()
    assert samples["prefetch_pgs"] == [16, 4] and samples["backup_pgs"] == [8]
