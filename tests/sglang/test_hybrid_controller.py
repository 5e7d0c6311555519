"""A hybrid model (KV + Mamba state) through SGLang's own HybridCacheController: its backup thread
writes KV pages (v1) and Mamba states (v2), its prefetch threads query (batch_exists_v2, the
restorable-length reduction), read KV and the trailing state back; runtime attach/detach; the
pages survive detach + re-attach with the same YAML on the SSD tier. No shim at this level."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from sglang_helpers import SMALL, small_extra, threads_started_since

from hicache_mooncake.tools.sglang_harness import (
    fill_random_pages,
    host_pool_for,
    make_device_pool,
    page_snapshot,
)
from hicache_mooncake.tools.sglang_hybrid import (
    cache_controller,
    host_group,
    make_mamba_device_pool,
    mamba_host_pool_for,
)

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size
LAYOUT = "page_first_direct"


@pytest.fixture()
def controller(sglang_runtime):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    dev = make_device_pool(False, SMALL)
    mdev = make_mamba_device_pool()
    group = host_group(
        [
            (PoolName.KV, host_pool_for(dev, LAYOUT, False, SMALL), dev),
            (PoolName.MAMBA, mamba_host_pool_for(mdev, LAYOUT), mdev),
        ]
    )
    ctl = cache_controller(dev, group, SMALL)
    yield ctl, group
    ctl.detach_storage_backend()


def attach(ctl, group, extra=None):
    ctl.attach_storage_backend(
        "dynamic",
        prefetch_threshold=PS,
        model_name="org/tiny-hybrid",
        storage_backend_extra_config=extra or small_extra(),
        host_pools=group.entries,
    )


def chain(n_pages: int, seed: int = 1000) -> tuple[list[int], list[str]]:
    """Tokens and SGLang's own page-hash chain for them."""
    from sglang.srt.mem_cache.utils import get_hash_str

    tokens = list(range(seed, seed + n_pages * PS))
    hashes, prior = [], None
    for i in range(n_pages):
        prior = get_hash_str(tokens[i * PS : (i + 1) * PS], prior)
        hashes.append(prior)
    return tokens, hashes


def mamba_transfer(keys, host_indices=None):
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    return PoolTransfer(
        name=PoolName.MAMBA, host_indices=host_indices, keys=keys, hit_policy=PoolHitPolicy.TRAILING_PAGES
    )


def backup(ctl, group, tokens, hashes, lo, hi, seed):
    """Back up pages [lo, hi) with the Mamba state at the node end (page hi), as the tree does."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    kv, mamba = group.get_pool(PoolName.KV), group.get_pool(PoolName.MAMBA)
    src, slot = kv.alloc((hi - lo) * PS), mamba.alloc(1)
    fill_random_pages(kv, src, seed)
    fill_random_pages(mamba, slot, seed + 1)
    want = (page_snapshot(kv, src), page_snapshot(mamba, slot)[0])
    ctl.write_storage(
        src,
        tokens[lo * PS : hi * PS],
        hash_value=hashes[lo:hi],
        prefix_keys=hashes[:lo],
        extra_pools=[mamba_transfer([hashes[hi - 1]], slot)],
    )
    op = ctl.ack_backup_queue.get(timeout=30)
    assert op.completed_tokens == (hi - lo) * PS
    assert op.pool_storage_result.extra_pool_hit_pages.get(PoolName.MAMBA) == 1
    kv.free(src)
    mamba.free(slot)
    return want


def prefetch(ctl, group, tokens, rid):
    """Query, allocate the hit like the scheduler, read; returns (hit tokens, KV pages, state, acks)."""
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
    from sglang.srt.mem_cache.hicache_storage import PoolName

    ctl.prefetch(CacheRequestHandle(rid=rid, attempt_id=0), tokens, last_hash=None,
                 extra_pools=[mamba_transfer(["__placeholder__"])])  # fmt: skip
    op = ctl.prefetch_hit_queue.get(timeout=30)
    if op.storage_hit_count == 0:
        return 0, [], None, []
    kv, mamba = group.get_pool(PoolName.KV), group.get_pool(PoolName.MAMBA)
    dst = ctl.alloc_prefetch_host_buffers(op, op.storage_hit_count)
    fill_random_pages(kv, dst, seed=999)  # stale bytes that must be overwritten
    op.host_indices = dst
    op.pool_transfers[0].host_indices = mamba.alloc(1)
    ctl.prefetch_buffer.put(op)
    acks, deadline = [], time.monotonic() + 30
    while not acks or not acks[-1].completed_req:
        acks.append(ctl.ack_prefetch_queue.get(timeout=max(0.1, deadline - time.monotonic())))
    state = page_snapshot(mamba, op.pool_transfers[0].host_indices)[0]
    return op.storage_hit_count, page_snapshot(kv, dst), state, acks


def mamba_hits(acks):
    return [a.pool_hits.get("mamba") for a in acks if a.pool_hits]


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_backup_then_prefetch_of_a_hybrid_model_through_the_controller_threads(controller):
    from hicache_mooncake.backend import HiCacheMooncakeBackend

    ctl, group = controller
    attach(ctl, group)
    assert isinstance(ctl.storage_backend, HiCacheMooncakeBackend)
    assert ctl.storage_backend.host_pools.names() == ["kv", "mamba"]
    tokens, hashes = chain(6)
    kv_a, state_a = backup(ctl, group, tokens, hashes, 0, 3, seed=10)
    kv_b, state_b = backup(ctl, group, tokens, hashes, 3, 6, seed=20)

    # 5 pages asked: KV for all 5, states only at 3 and 6 -> the restorable prefix is 3 (a hole at 4, 5)
    hit, kv_pages, state, acks = prefetch(ctl, group, tokens[: 5 * PS] + [1, 2], "req-5")
    assert hit == 3 * PS
    assert same(kv_pages, kv_a) and torch.equal(state, state_a)
    assert mamba_hits(acks) == [1]

    hit, kv_pages, state, acks = prefetch(ctl, group, tokens + [7], "req-6")
    assert hit == 6 * PS
    assert same(kv_pages, kv_a + kv_b) and torch.equal(state, state_b)
    assert mamba_hits(acks) == [1]


def test_runtime_attach_detach_of_a_hybrid_model_and_pages_survive_on_ssd(controller, tmp_path):
    from hicache_mooncake.tiers.policy import ObjectType

    ctl, group = controller
    extra = small_extra(
        dram={"capacity": "8MiB", "slab_size": "1MiB"},
        ssd={
            "enabled": True,
            "path": str(tmp_path),
            "capacity": "16MiB",
            "region_size": "1MiB",
            "min_free": 0,
        },
    )
    attach(ctl, group, extra)
    tokens, hashes = chain(4, seed=5000)
    kv_want, state_want = backup(ctl, group, tokens, hashes, 0, 4, seed=30)
    first = ctl.storage_backend
    ctl.detach_storage_backend()
    assert first._closed and ctl.storage_backend is None and not ctl.enable_storage

    attach(ctl, group, extra)  # same YAML: the SSD tier's index is rebuilt by a scan
    backend = ctl.storage_backend
    assert backend is not first
    assert backend.store.stats()["ssd"]["entries"] == 5  # 4 KV pages + 1 Mamba state
    hit, kv_pages, state, acks = prefetch(ctl, group, tokens + [3], "req-ssd")
    assert hit == 4 * PS
    assert same(kv_pages, kv_want) and torch.equal(state, state_want)
    assert mamba_hits(acks) == [1]
    assert backend.host_pools.get("mamba").obj_type == ObjectType.MAMBA_STATE


def test_repeated_attach_detach_of_a_hybrid_model_leaks_no_threads_or_fds(controller):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    ctl, group = controller
    attach(ctl, group)  # warm-up: lazy imports, first gloo use
    ctl.detach_storage_backend()
    threads_before = set(threading.enumerate())
    fds_before = len(os.listdir("/proc/self/fd"))
    mamba = group.get_pool(PoolName.MAMBA)
    for i in range(3):
        attach(ctl, group)
        slot = mamba.alloc(1)
        ok = ctl.storage_backend.batch_set_v2([mamba_transfer([f"{i:064x}"], slot)])
        assert ok == {PoolName.MAMBA: [True]}
        mamba.free(slot)
        ctl.detach_storage_backend()
    assert threads_started_since(threads_before) == []
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_a_hybrid_request_longer_than_128_pages_is_found_whole(controller):
    """batch_exists_v2 gets the whole request (200 pages here), not 128 at a time."""
    ctl, group = controller
    attach(ctl, group)
    tokens, hashes = chain(200, seed=9000)
    kv_want, state_want = backup(ctl, group, tokens, hashes, 0, 200, seed=40)
    hit, kv_pages, state, acks = prefetch(ctl, group, tokens, "req-long")
    assert hit == 200 * PS
    assert same(kv_pages, kv_want) and torch.equal(state, state_want)
