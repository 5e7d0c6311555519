"""The host cache's client moves a batch of pages between SGLang's host pool and the service's
shared arena in one native copy, whatever the batch's length and however many pool buffers its
parts lie in (issue 49 item 3): a set of 32 pages, each a K run and a V run of two pool tensors
(views made by the adapter's ``HostPoolViews``, as for SGLang's pool), is one copy; a get is one
copy for the object headers and the pages together, then one for the headers' second reading; and
the bytes round-trip exactly through a real host-cache service process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from host_cache_procs import PrivateHostCache
from smaps import address_of, resident_kib

from hicache_mooncake.config import validate_config
from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.tiers.host_cache_tier import HostCacheTier
from hicache_mooncake.tiers.tiered_store import TieredStore
from hicache_mooncake.transport.local import LocalEngine

HALF = 8 << 10  # bytes of a page's K (and of its V) run
PAGES = 32


@contextlib.contextmanager
def client_store(host_cache: PrivateHostCache) -> Iterator[tuple[TieredStore, LocalEngine]]:
    """A rank's store whose one tier is the host cache, and its client's shared-memory engine."""
    store = build_client_store(validate_config(host_cache.extra(host_cache="on")), "rank0", True)
    try:
        host_cache.wait_pid()
        [tier] = store.tiers
        assert isinstance(tier, HostCacheTier)
        engine = tier.client.engine
        assert isinstance(engine, LocalEngine)
        yield store, engine
    finally:
        store.close()


def test_a_batch_of_pool_pages_is_one_native_copy_each_way(host_cache: PrivateHostCache) -> None:
    with client_store(host_cache) as (store, engine):
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


def test_the_clients_mapping_of_the_arena_is_faulted_in_ahead_of_its_copies(
    host_cache: PrivateHostCache,
) -> None:
    """Once the client maps the service's arena, a background thread faults the whole mapping in
    (page tables only): a page's first copy in this process takes no page fault per 4 KiB."""
    with client_store(host_cache) as (store, engine):
        page = torch.randint(0, 256, (HALF,), dtype=torch.uint8)
        assert store.put_batch(["first"], [[memoryview(page.numpy())]]) == [True]  # maps the arena
        [mapping] = engine._maps.values()
        assert mapping.prefault.wait(60) and mapping.prefault.completed
        assert resident_kib(address_of(mapping.mm)) * 1024 >= mapping.size - 4096
    assert not mapping.prefault._thread.is_alive()
