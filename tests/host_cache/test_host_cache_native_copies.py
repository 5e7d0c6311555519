"""The host cache's client moves a batch of pages between SGLang's host pool and the service's
shared arena in one native copy, whatever the batch's length and however many pool buffers its
parts lie in (issue 49 item 3): a set of 32 pages, each a K run and a V run of two pool tensors
(views made by the adapter's ``HostPoolViews``, as for SGLang's pool), is one copy; a get is one
copy for the object headers and the pages together, then one for the headers' second reading; and
the bytes round-trip exactly through a real host-cache service process."""

from __future__ import annotations

import torch
from host_cache_procs import PrivateHostCache

from hicache_mooncake.config import validate_config
from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.tiers.host_cache_tier import HostCacheTier
from hicache_mooncake.transport.local import LocalEngine

HALF = 8 << 10  # bytes of a page's K (and of its V) run
PAGES = 32


def test_a_batch_of_pool_pages_is_one_native_copy_each_way(host_cache: PrivateHostCache) -> None:
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        [tier] = store.tiers
        assert isinstance(tier, HostCacheTier)
        engine = tier.client.engine
        assert isinstance(engine, LocalEngine)
        k = torch.randint(0, 256, (PAGES, HALF), dtype=torch.uint8)  # the pool's K and V buffers
        v = torch.randint(0, 256, (PAGES, HALF), dtype=torch.uint8)
        views = HostPoolViews([k, v])
        keys = [f"native-{i}" for i in range(PAGES)]

        def runs(rows: list[int]) -> list[list[memoryview]]:
            ptrs = [t.data_ptr() + r * HALF for r in rows for t in (k, v)]
            return views.page_parts(ptrs, [HALF] * len(ptrs), len(rows))

        assert store.put_batch(keys, runs(list(range(PAGES)))) == [True] * PAGES
        assert engine.counters == {"native_copies": 1}
        want_k, want_v = k.clone(), v.clone()
        k.zero_()
        v.zero_()
        rows = list(reversed(range(PAGES)))  # page i is read into row PAGES - 1 - i
        assert store.get_batch_into(keys, runs(rows)) == [True] * PAGES
        assert engine.counters == {"native_copies": 1 + 2}
        assert torch.equal(k, want_k.flip(0)) and torch.equal(v, want_v.flip(0))
    finally:
        store.close()


def _resident_kib(address: int) -> int:
    """Rss of this process's mapping that starts at ``address`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and int(head.split("-")[0], 16) == address:
            for field in lines[i + 1 :]:
                if field.startswith("Rss:"):
                    return int(field.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


def test_the_clients_mapping_of_the_arena_is_faulted_in_ahead_of_its_copies(
    host_cache: PrivateHostCache,
) -> None:
    """Once the client maps the service's arena, a background thread faults the whole mapping in
    (page tables only): a page's first copy in this process takes no page fault per 4 KiB."""
    import ctypes

    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        [tier] = store.tiers
        assert isinstance(tier, HostCacheTier)
        engine = tier.client.engine
        assert isinstance(engine, LocalEngine)
        page = torch.randint(0, 256, (HALF,), dtype=torch.uint8)
        assert store.put_batch(["first"], [[memoryview(page.numpy())]]) == [True]  # maps the arena
        [mapping] = engine._maps.values()
        assert mapping.prefault.wait(60) and mapping.prefault.completed
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapping.mm))
        assert _resident_kib(address) * 1024 >= mapping.size - 4096
    finally:
        store.close()
    assert not mapping.prefault._thread.is_alive()
