"""Issue 48, item 7 (long keys): a page key over 512 characters is a miss / a refused set of its
own, never a failure of the other keys of its batch. Through our backend made by SGLang's factory
with SGLang's own host pools: ``batch_set_v1`` / ``batch_get_v1`` / ``batch_exists`` /
``batch_exists_v2`` / ``batch_set_v2`` / ``batch_get_v2``, and through the remote tier (pages a
second instance finds in a real memory node). Before the fix the key space raised for the whole
batch: every page was a miss / not stored."""

from __future__ import annotations

import time

import pytest
import torch
from sglang_helpers import SMALL, make_backend, small_extra
from test_remote_cluster import cluster_extra
from transport_procs import SECRET

from hicache_mooncake.keys import MAX_PAGE_KEY_CHARS
from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = pytest.mark.sglang
PS = SMALL.page_size
LONG = "L" * (MAX_PAGE_KEY_CHARS + 1)
LONGEST = "x" * MAX_PAGE_KEY_CHARS  # exactly at the limit: an ordinary key


def keys(tag: str, n: int = 4) -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


def long_key_failures(backend) -> int:
    return sum(n for cause, n in backend.tier_stats()["failures"].items() if "512 characters" in cause)


def test_v1_set_get_and_exists_serve_every_key_but_the_long_one():
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

    backend, host = make_backend()
    try:
        ks = keys("v1")
        batch = [ks[0], ks[1], LONG, ks[2], LONGEST]
        src = host.alloc(len(batch) * PS)
        fill_random_pages(host, src, seed=5)
        want = page_snapshot(host, src)
        # a long key among the prefix keys (SGLang's chain before this batch) costs nothing either
        info = HiCacheStorageExtraInfo(prefix_keys=[ks[3], LONG])
        assert backend.batch_set_v1(batch, src, info) == [True, True, False, True, True]
        assert backend.batch_exists(batch) == 2  # the leading run: the pages before the long key
        assert backend.batch_exists([k for k in batch if k != LONG]) == 4
        dst = host.alloc(len(batch) * PS)
        assert backend.batch_get_v1(batch, dst) == [True, True, False, True, True]
        got = page_snapshot(host, dst)
        assert all(torch.equal(want[i], got[i]) for i in (0, 1, 3, 4))
        assert backend.batch_exists([LONG, ks[0]]) == 0
        assert long_key_failures(backend) == 4  # one per long key in a batch: counted
    finally:
        backend.close()


def test_v2_transfers_serve_every_key_but_the_long_one(sglang_runtime):
    from sglang.srt.mem_cache.hicache_storage import (
        HiCacheStorageExtraInfo,
        PoolHitPolicy,
        PoolName,
        PoolTransfer,
    )

    backend, host = make_backend()
    try:
        ks = keys("v2", 3)
        batch = [ks[0], LONG, ks[1], ks[2]]
        src = host.alloc(len(batch) * PS)
        fill_random_pages(host, src, seed=6)
        want = page_snapshot(host, src)

        def kv(indices: torch.Tensor) -> PoolTransfer:
            return PoolTransfer(
                name=PoolName.KV, host_indices=indices, keys=batch, hit_policy=PoolHitPolicy.ALL_PAGES
            )

        assert backend.batch_set_v2([kv(src)]) == {PoolName.KV: [True, False, True, True]}
        dst = host.alloc(len(batch) * PS)
        assert backend.batch_get_v2([kv(dst)]) == {PoolName.KV: [True, False, True, True]}
        got = page_snapshot(host, dst)
        assert all(torch.equal(want[i], got[i]) for i in (0, 2, 3))
        hit = backend.batch_exists_v2(batch, [])
        assert hit.kv_hit_pages == 1  # the leading run before the long key
        assert backend.batch_exists_v2(ks, []).kv_hit_pages == 3
        # a long key in the chain before the call (prefix_keys) fails no transfer either
        more = keys("v2more", 2)
        idx = host.alloc(2 * PS)
        info = HiCacheStorageExtraInfo(prefix_keys=[*ks, LONG])
        transfer = PoolTransfer(
            name=PoolName.KV, host_indices=idx, keys=more, hit_policy=PoolHitPolicy.ALL_PAGES
        )
        assert backend.batch_set_v2([transfer], info) == {PoolName.KV: [True, True]}
        assert backend.batch_exists(more) == 2
    finally:
        backend.close()


def test_legacy_copy_path_serves_every_key_but_the_long_one():
    extra = small_extra()
    extra["interface_v1"] = 0
    backend, host = make_backend(extra=extra)
    try:
        ks = keys("legacy", 2)
        batch = [ks[0], LONG, ks[1]]
        src = host.alloc(len(batch) * PS)
        fill_random_pages(host, src, seed=8)
        want = page_snapshot(host, src)
        values = [host.get_data_page(int(src[i * PS]), flat=True) for i in range(len(batch))]
        assert backend.batch_set(batch, values) is False  # not every page was stored ...
        assert backend.batch_exists(ks) == 2  # ... but every other one was
        got = backend.batch_get(batch, [host.get_dummy_flat_data_page() for _ in batch])
        assert got[1] is None and got[0] is not None and got[2] is not None
        assert torch.equal(got[0].contiguous().view(torch.uint8), want[0])
        assert torch.equal(got[2].contiguous().view(torch.uint8), want[2])
    finally:
        backend.close()


def test_one_log_line_for_many_long_keys(printed_lines):
    backend, host = make_backend()
    try:
        for n in range(3):
            idx = host.alloc(2 * PS)
            assert backend.batch_set_v1([f"ok{n}", LONG + str(n)], idx) == [True, False]
            host.free(idx)
        lines = printed_lines.matching("512 characters")
        assert len(lines) == 1, lines
    finally:
        backend.close()


@pytest.mark.integration
def test_remote_tier_serves_every_key_but_the_long_one(redis_server, node_factory, monkeypatch):
    """A second instance finds the pages in the memory node (not in its own DRAM)."""
    monkeypatch.setenv("HICACHE_NODE_SECRET", SECRET)
    node_factory("lk0", redis_server.url, namespace="lk")
    extra = cluster_extra(redis_server.url, "lk")
    a, host_a = make_backend(extra=extra)
    b, host_b = make_backend(extra=extra)
    try:
        deadline = time.monotonic() + 10
        while any(not be.store.tier("remote").provider.client.nodes() for be in (a, b)):
            assert time.monotonic() < deadline, "the clients did not see the node"
            time.sleep(0.05)
        ks = keys("rm", 2)
        batch = [ks[0], LONG, LONGEST, ks[1]]
        src = host_a.alloc(len(batch) * PS)
        fill_random_pages(host_a, src, seed=7)
        want = page_snapshot(host_a, src)
        assert a.batch_set_v1(batch, src) == [True, False, True, True]
        assert b.batch_exists([ks[0], LONGEST, ks[1]]) == 3  # from the pool
        dst = host_b.alloc(len(batch) * PS)
        assert b.batch_get_v1(batch, dst) == [True, False, True, True]
        got = page_snapshot(host_b, dst)
        assert all(torch.equal(want[i], got[i]) for i in (0, 2, 3))
        assert b.tier_stats()["tiers"]["remote"]["entries"] == 3
    finally:
        a.close()
        b.close()
