"""Small real stores for tests of the store's paths: a DRAM tier and an SSD tier (its own directory
under the test's ``tmp_path``, buffered I/O) under the ``lru`` policy, closed when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

MiB = 1 << 20


def small_stores(tmp_path: Path) -> Iterator[Any]:
    """A fixture body: yields ``make(dram=True, ssd=True, dram_mib=4) -> TieredStore`` (a 16 MiB
    SSD tier of 1 MiB regions), then closes every store it made."""
    stores: list[TieredStore] = []

    def make(dram: bool = True, ssd: bool = True, dram_mib: int = 4) -> TieredStore:
        tiers: list[Any] = [DramTier(dram_mib * MiB, MiB, prefault=False)] if dram else []
        if ssd:
            d = tmp_path / f"ssd{len(stores)}"
            d.mkdir()
            opts = SsdOptions(dirs=(str(d),), capacity_bytes=16 * MiB, region_size=MiB, direct_io="off")
            tiers.append(SsdTier(SsdEngine(opts)))
        store = TieredStore(tiers, lambda: make_policy("lru"), StoreOptions())
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()
