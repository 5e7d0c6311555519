"""The host cache's client moves a batch of pages between its host pool and the service's shared
arena in one native copy per pool buffer, whatever the batch's length (issue 49 item 3): a set of
32 pages that are slices of one pool array is one copy; a get is one copy for the object headers
and one for the bodies, then one for the headers' second reading; the bytes round-trip exactly
through a real host-cache service process."""

from __future__ import annotations

import numpy as np
from host_cache_procs import PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.tiers.host_cache_tier import HostCacheTier
from hicache_mooncake.transport.local import LocalEngine

PAGE = 16 << 10
PAGES = 32


def test_a_batch_of_pool_pages_is_one_native_copy_each_way(host_cache: PrivateHostCache) -> None:
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        [tier] = store.tiers
        assert isinstance(tier, HostCacheTier)
        engine = tier.client.engine
        assert isinstance(engine, LocalEngine)
        pool = np.random.default_rng(7).integers(0, 256, PAGES * PAGE, dtype=np.uint8)  # a host pool buffer
        keys = [f"native-{i}" for i in range(PAGES)]
        pages = [[pool.data[i * PAGE : (i + 1) * PAGE]] for i in range(PAGES)]
        assert store.put_batch(keys, pages) == [True] * PAGES
        assert engine.counters == {"native_copies": 1, "python_copied_parts": 0}

        out = np.zeros_like(pool)
        into = [[out.data[i * PAGE : (i + 1) * PAGE]] for i in reversed(range(PAGES))]
        assert store.get_batch_into(keys, into) == [True] * PAGES
        assert engine.counters == {"native_copies": 1 + 3, "python_copied_parts": 0}
        for i in range(PAGES):
            j = PAGES - 1 - i  # page i was read into row j
            assert np.array_equal(out[j * PAGE : (j + 1) * PAGE], pool[i * PAGE : (i + 1) * PAGE]), i
    finally:
        store.close()
