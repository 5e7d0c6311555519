"""Tenant shares from the YAML on the real store, under load: a tenant with a quarter of DRAM never
holds more of it (its own pages move to SSD first), the other tenant uses the rest, and the
per-tenant counters in the store's stats say so."""

from __future__ import annotations

import threading

from ops_helpers import small_config
from store_load import PAGE, StoreLoad

MiB = 1 << 20


def test_a_tenant_stays_within_its_dram_share_under_load(tmp_path, stores):
    config = small_config(tmp_path, tenants={"shares": {"small": {"dram": 0.25}}})
    store = stores(config)
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], store.stats()["tenants"].get("small", {}).get("dram_bytes", 0))
            stop.wait(0.01)

    watcher = threading.Thread(target=watch)
    small = StoreLoad(store, threads=2, requests=80, key_of=lambda r, p: f"m/d~small/r{r}p{p}", seed=1)
    big = StoreLoad(store, threads=2, requests=80, key_of=lambda r, p: f"m/d~big/r{r}p{p}", seed=2)
    watcher.start()
    with small, big:
        small.wait_ops(900)
        big.wait_ops(900)
    stop.set()
    watcher.join()
    small.assert_clean()
    big.assert_clean()
    tenants = store.stats()["tenants"]
    limit = tenants["small"]["dram_limit_bytes"]
    assert 0 < limit <= store.stats()["placement"]["dram_capacity"] // 4
    # at every moment the watcher looked, give or take the pages of the calls in flight (the share
    # is enforced when a call settles, like DRAM's own capacity): 2 threads, 8 pages each
    assert peak[0] <= limit + 2 * 8 * PAGE
    assert tenants["small"]["over_share_demoted"] > 0  # it evicted its own pages to stay there
    assert tenants["big"]["dram_bytes"] > limit
    for name in ("small", "big"):
        t = tenants[name]
        assert t["get_pages"] >= t["get_hit_pages"] > 0 and t["set_stored_pages"] > 0
        assert t["ssd_bytes"] > 0 and t["dram_bytes"] % PAGE == 0
