"""Hybrid models through SGLang's v2 interface: every sidecar host pool SGLang builds (Mamba state,
sliding window, DSA indexer, DeepSeek V4 compressed pools) round-trips byte-exact through our
backend, zero copy, with SGLang's own pool classes, HostPoolGroup, factory and registration order."""

from __future__ import annotations

import pytest
import torch
from hybrid_helpers import PS, hybrid_backend, kv_mamba_group, page_hashes, transfer
from sglang_helpers import SMALL, small_extra

from hicache_mooncake.tiers.policy import ObjectType
from hicache_mooncake.tools.sglang_harness import (
    PoolShape,
    fill_random_pages,
    host_pool_for,
    make_device_pool,
    page_snapshot,
)
from hicache_mooncake.tools.sglang_hybrid import (
    MambaShape,
    host_group,
    make_dsa_pools,
    make_dsv4_pools,
    make_swa_pools,
)

pytestmark = pytest.mark.sglang
DSA = PoolShape(page_size=64, layers=2, kv_lora_rank=64, qk_rope_head_dim=16, device_tokens=1024)


def pool(group, name):
    return group.get_pool(name)


def write_kv(backend, host, hashes, seed):
    idx = host.alloc(len(hashes) * PS)
    fill_random_pages(host, idx, seed)
    assert all(backend.batch_set_v1(hashes, idx))
    return idx, page_snapshot(host, idx)


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_mamba_state_round_trips_byte_exact_next_to_kv(sglang_runtime, layout):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    group = kv_mamba_group(layout)
    backend = hybrid_backend(group)
    kv, mamba = pool(group, PoolName.KV), pool(group, PoolName.MAMBA)
    hashes = page_hashes(4)
    write_kv(backend, kv, hashes, seed=1)
    slot = mamba.alloc(1)
    fill_random_pages(mamba, slot, seed=2)
    want = page_snapshot(mamba, slot)
    result = backend.batch_set_v2([transfer(PoolName.MAMBA, hashes[-1:], slot)])
    assert result == {PoolName.MAMBA: [True]}
    assert backend.store.stats()["dram"]["entries"] == 5  # 4 KV pages + 1 state, each one object

    hit = backend.batch_exists_v2(hashes, [transfer(PoolName.MAMBA, ["__placeholder__"])])
    assert (hit.kv_hit_pages, hit.restorable_prefix_pages) == (4, [4])
    assert hit.extra_pool_hit_pages == {PoolName.KV: 4, PoolName.MAMBA: 4}

    dst = mamba.alloc(1)
    fill_random_pages(mamba, dst, seed=3)
    assert backend.batch_get_v2([transfer(PoolName.MAMBA, hashes[-1:], dst)]) == {PoolName.MAMBA: [True]}
    assert torch.equal(page_snapshot(mamba, dst)[0], want[0])
    backend.close()


def test_mamba_state_with_slot_side_states_round_trips_zero_copy(sglang_runtime):
    """A Mamba pool with a registered side state (SGLang's ShortConvPool): SGLang's own zero-copy
    meta refuses such a pool; we address all of the slot's rows and store every byte."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    group = kv_mamba_group(mamba=MambaShape(side_state=(24, 3)))
    mamba = group.get_pool(PoolName.MAMBA)
    assert mamba.slot_state_buffers  # the side state reached the host pool
    with pytest.raises(NotImplementedError):
        mamba.get_page_buffer_meta(torch.tensor([0]))
    backend = hybrid_backend(group)
    assert backend.host_pools.get("mamba").page_nbytes == mamba.get_size_per_token()  # every byte of the slot
    slot, dst = mamba.alloc(1), mamba.alloc(1)
    fill_random_pages(mamba, slot, seed=6)
    assert backend.batch_set_v2([transfer(PoolName.MAMBA, ["s" * 64], slot)]) == {PoolName.MAMBA: [True]}
    assert backend.batch_get_v2([transfer(PoolName.MAMBA, ["s" * 64], dst)]) == {PoolName.MAMBA: [True]}
    assert torch.equal(page_snapshot(mamba, dst)[0], page_snapshot(mamba, slot)[0])
    backend.close()


def test_swa_window_pages_round_trip_and_the_window_defines_the_stop_points(sglang_runtime):
    """gpt-oss / Gemma style: full-attention KV + a sliding-window pool, TRAILING_PAGES window 2."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    full_dev, full_host, swa_dev, swa_host = make_swa_pools(SMALL)
    group = host_group([(PoolName.KV, full_host, full_dev), (PoolName.SWA, swa_host, swa_dev)])
    backend = hybrid_backend(group)
    hashes = page_hashes(6)
    write_kv(backend, full_host, hashes, seed=1)
    # windows stored at two node ends: pages 0-1 and 3-4 (page 2 and 5 have none)
    wants = {}
    for lo, hi in ((0, 2), (3, 5)):
        idx = swa_host.alloc((hi - lo) * PS)
        fill_random_pages(swa_host, idx, seed=10 + lo)
        wants[lo] = page_snapshot(swa_host, idx)
        assert backend.batch_set_v2([transfer(PoolName.SWA, hashes[lo:hi], idx)]) == {
            PoolName.SWA: [True, True]
        }

    hit = backend.batch_exists_v2(hashes, [transfer(PoolName.SWA, ["__placeholder__"] * 2)])
    assert hit.restorable_prefix_pages == [1, 2, 5]  # 3, 4 and 6 lack a complete window
    assert hit.kv_hit_pages == 5 and hit.extra_pool_hit_pages[PoolName.SWA] == 5

    dst = swa_host.alloc(2 * PS)
    assert backend.batch_get_v2([transfer(PoolName.SWA, hashes[3:5], dst)]) == {PoolName.SWA: [True, True]}
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(swa_host, dst), wants[3], strict=True))
    backend.close()


def test_dsa_indexer_pages_ride_on_kv_indices_and_gate_all_pages(sglang_runtime):
    """DeepSeek V3.2: MLA KV + the sparse-attention indexer (ALL_PAGES, KV-derived host indices)."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    dev, kv_host, indexer = make_dsa_pools(DSA)  # SGLang's DSA needs 64-token pages
    ps = DSA.page_size
    group = host_group([(PoolName.KV, kv_host, dev), (PoolName.INDEXER, indexer, dev)])
    backend = hybrid_backend(group, is_mla=True)
    hashes = page_hashes(6)
    idx = kv_host.alloc(6 * ps)
    fill_random_pages(kv_host, idx, seed=1)
    kv_want = page_snapshot(kv_host, idx)
    assert all(backend.batch_set_v1(hashes, idx))
    fill_random_pages(indexer, idx, seed=5)
    index_want = page_snapshot(indexer, idx)
    ok = backend.batch_set_v2([transfer(PoolName.INDEXER, hashes[:4], idx[: 4 * ps], "all_pages")])
    assert ok == {PoolName.INDEXER: [True] * 4}

    hit = backend.batch_exists_v2(hashes, [transfer(PoolName.INDEXER, None, policy="all_pages")])
    assert hit.kv_hit_pages == 4 and hit.restorable_prefix_pages == [1, 2, 3, 4]
    assert hit.extra_pool_hit_pages == {PoolName.KV: 6, PoolName.INDEXER: 4}

    fill_random_pages(kv_host, idx, seed=7)
    fill_random_pages(indexer, idx, seed=8)
    assert backend.batch_get_v1(hashes[:4], idx[: 4 * ps]) == [True] * 4
    got = backend.batch_get_v2([transfer(PoolName.INDEXER, hashes, idx, "all_pages")])
    assert got == {PoolName.INDEXER: [True] * 4 + [False] * 2}  # leading run only
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(kv_host, idx)[:4], kv_want[:4], strict=True))
    assert all(
        torch.equal(a, b) for a, b in zip(page_snapshot(indexer, idx)[:4], index_want[:4], strict=True)
    )
    backend.close()


def test_deepseek_v4_logical_anchor_compressed_pools_and_compressor_state(sglang_runtime):
    """DeepSeek V4: the KV anchor is logical (no bytes); the sliding window, the compressed pools
    and the compressor state carry them (ALL_PAGES for C4, BLOCK_GROUPS for C128 here, the state
    TRAILING on SWA indices)."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    pools = make_dsv4_pools(PS, host_pages=16)
    names = {
        PoolName.KV: "kv",
        PoolName.SWA: "swa",
        PoolName.DEEPSEEK_V4_C4: "deepseek_v4_c4",
        PoolName.DEEPSEEK_V4_C128: "deepseek_v4_c128",
        PoolName.DEEPSEEK_V4_C4_STATE: "deepseek_v4_c4_state",
    }
    group = host_group([(name, pools[key], None) for name, key in names.items()])
    backend = hybrid_backend(group, is_mla=True)
    c4, c128, swa, state = (
        pools[k] for k in ("deepseek_v4_c4", "deepseek_v4_c128", "swa", "deepseek_v4_c4_state")
    )
    hashes = page_hashes(4)
    idx = pools["kv"].alloc(4 * PS)
    assert backend.batch_set_v1(hashes, idx) == [True] * 4  # nothing to store for a logical anchor
    assert backend.store.stats()["dram"]["entries"] == 0
    fill_random_pages(c4, idx, seed=1)
    want = page_snapshot(c4, idx)
    ok = backend.batch_set_v2([transfer(PoolName.DEEPSEEK_V4_C4, hashes[:3], idx[: 3 * PS], "all_pages")])
    assert ok == {PoolName.DEEPSEEK_V4_C4: [True] * 3}
    # C128 as block groups: blocks of 2 pages, each keyed by the page that ends it
    fill_random_pages(c128, idx, seed=2)
    ok = backend.batch_set_v2([transfer(PoolName.DEEPSEEK_V4_C128, [hashes[1]], idx[PS : 2 * PS])])
    assert ok == {PoolName.DEEPSEEK_V4_C128: [True]}
    # the compressor state at the end of page 3, on the sliding window's indices
    swa_idx = swa.alloc(PS)
    fill_random_pages(state, swa_idx, seed=3)
    state_want = page_snapshot(state, swa_idx)
    ok = backend.batch_set_v2([transfer(PoolName.DEEPSEEK_V4_C4_STATE, [hashes[2]], swa_idx)])
    assert ok == {PoolName.DEEPSEEK_V4_C4_STATE: [True]}

    hit = backend.batch_exists_v2(
        hashes,
        [
            transfer(PoolName.DEEPSEEK_V4_C4, None, policy="all_pages"),
            transfer(PoolName.DEEPSEEK_V4_C128, None, policy="block_groups", block_pages=2, group_pages=1),
            transfer(PoolName.DEEPSEEK_V4_C4_STATE, ["x"]),
        ],
    )
    assert hit.kv_hit_pages == 3 and hit.restorable_prefix_pages == [3]  # block groups never gate
    assert hit.extra_pool_hit_pages == {
        PoolName.KV: 4,
        PoolName.DEEPSEEK_V4_C4: 3,
        PoolName.DEEPSEEK_V4_C128: 2,
        PoolName.DEEPSEEK_V4_C4_STATE: 3,
    }

    fill_random_pages(c4, idx, seed=9)
    fill_random_pages(state, swa_idx, seed=10)
    ok = backend.batch_get_v2(
        [
            transfer(PoolName.DEEPSEEK_V4_C4, hashes[:3], idx[: 3 * PS], "all_pages"),
            transfer(PoolName.DEEPSEEK_V4_C4_STATE, [hashes[2]], swa_idx),
        ]
    )
    assert ok == {PoolName.DEEPSEEK_V4_C4: [True] * 3, PoolName.DEEPSEEK_V4_C4_STATE: [True]}
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(c4, idx)[:3], want[:3], strict=True))
    assert torch.equal(page_snapshot(state, swa_idx)[0], state_want[0])
    assert backend.host_pools.get("deepseek_v4_c4_state").obj_type == ObjectType.COMPRESS_STATE
    assert backend.host_pools.get("deepseek_v4_c4").obj_type == ObjectType.COMPRESSED_KV
    backend.close()


def test_hit_policies_intersect_across_pools_with_holes_and_partial_kv(sglang_runtime):
    """Qwen3.5 style: KV + sliding window + Mamba state. Each pool cuts the restorable lengths; the
    usable prefix is the longest length every pool can serve, holes included."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    full_dev, full_host, swa_dev, swa_host = make_swa_pools(SMALL)
    group = kv_mamba_group()
    mdev = group.get_entry(PoolName.MAMBA).device_pool
    mamba = group.get_pool(PoolName.MAMBA)
    group = host_group(
        [(PoolName.KV, full_host, full_dev), (PoolName.SWA, swa_host, swa_dev), (PoolName.MAMBA, mamba, mdev)]
    )
    backend = hybrid_backend(group)
    hashes = page_hashes(8)
    write_kv(backend, full_host, hashes[:7], seed=1)  # page 8's KV is missing: a partial KV hit
    slot = mamba.alloc(1)
    for end in (3, 5, 7, 8):  # states at node ends 3, 5, 7, 8
        assert backend.batch_set_v2([transfer(PoolName.MAMBA, [hashes[end - 1]], slot)])[PoolName.MAMBA] == [
            True
        ]
    swa = swa_host.alloc(PS)
    for page in (1, 2, 4, 6, 7):  # window pages (0-based)
        assert backend.batch_set_v2([transfer(PoolName.SWA, [hashes[page]], swa)])[PoolName.SWA] == [True]
    queries = [transfer(PoolName.SWA, ["__placeholder__"] * 2), transfer(PoolName.MAMBA, ["__placeholder__"])]
    hit = backend.batch_exists_v2(hashes, queries)
    # KV allows lengths 1..7. A window of 2 ending at length p needs pages p-2 and p-1: SWA allows 3
    # (pages 1, 2) and 8 (6, 7), so {3} within the KV. Mamba allows {3, 5, 7}. Intersection: [3].
    assert hit.restorable_prefix_pages == [3]
    assert hit.kv_hit_pages == 3
    assert hit.extra_pool_hit_pages == {PoolName.KV: 7, PoolName.SWA: 3, PoolName.MAMBA: 7}
    backend.close()


def test_sidecar_objects_carry_their_type_and_are_scoped_per_pool_and_rank(sglang_runtime):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    group = kv_mamba_group()
    r0 = hybrid_backend(group, is_mla=True, tp_rank=0, tp_size=2)
    r1 = hybrid_backend(group, is_mla=True, tp_rank=1, tp_size=2)
    kv0, kv1 = r0.host_pools.kv.keys, r1.host_pools.kv.keys
    m0, m1 = r0.host_pools.get("mamba").keys, r1.host_pools.get("mamba").keys
    assert kv0.key("h") == kv1.key("h")  # MLA KV: one copy for all ranks
    assert m0.key("h") != m1.key("h") and m0.key("h").endswith("@tp0of2")  # Mamba state is TP-sharded
    assert ".mamba~" in m0.key("h") and m0.key("h") != kv0.key("h")
    assert r0.host_pools.get("mamba").obj_type == ObjectType.MAMBA_STATE
    # a non-writer rank still stores its own (sharded) Mamba state
    mamba = group.get_pool(PoolName.MAMBA)
    slot = mamba.alloc(1)
    assert r1.batch_set_v2([transfer(PoolName.MAMBA, ["h" * 64], slot)])[PoolName.MAMBA] == [True]
    assert r1.store.stats()["dram"]["entries"] == 1
    seen = []
    original = r1.store.put_batch

    def spy(keys, parts, prev_key=None, prefix_len=None, obj_type=ObjectType.KV_PAGE, **kw):
        seen.append(obj_type)
        return original(keys, parts, prev_key, prefix_len, obj_type=obj_type, **kw)

    r1.store.put_batch = spy
    assert r1.batch_set_v2([transfer(PoolName.MAMBA, ["g" * 64], slot)])[PoolName.MAMBA] == [True]
    assert seen == [ObjectType.MAMBA_STATE]
    r0.close()
    r1.close()


def test_a_changed_sidecar_geometry_changes_every_key_of_the_model(sglang_runtime):
    """Same model name, same KV geometry, another Mamba state shape: neither its states nor its KV
    pages are those of the old model (the digest covers the sidecars)."""
    a = hybrid_backend(kv_mamba_group())
    b = hybrid_backend(kv_mamba_group(mamba=MambaShape(num_heads=4)))
    same = hybrid_backend(kv_mamba_group())
    kv_only_dev = make_device_pool(False, SMALL)
    from sglang.srt.mem_cache.hicache_storage import PoolName

    kv_only = hybrid_backend(
        host_group([(PoolName.KV, host_pool_for(kv_only_dev, "page_first", False, SMALL), kv_only_dev)])
    )
    assert a.host_pools.kv.keys.key("h") != b.host_pools.kv.keys.key("h")
    assert a.host_pools.get("mamba").keys.key("h") != b.host_pools.get("mamba").keys.key("h")
    assert a.host_pools.kv.keys.key("h") != kv_only.host_pools.kv.keys.key("h")
    assert a.host_pools.kv.keys.key("h") == same.host_pools.kv.keys.key(
        "h"
    )  # deterministic: re-attach finds them
    assert a.host_pools.get("mamba").keys.key("h") == same.host_pools.get("mamba").keys.key("h")
    for backend in (a, b, same, kv_only):
        backend.close()


def test_a_state_larger_than_a_slab_is_stored_in_chunks_and_read_back_whole(sglang_runtime):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    extra = small_extra(dram={"slab_size": "32KiB"})  # a KV page (24 KiB) fits, the state does not
    group = kv_mamba_group(mamba=MambaShape(num_heads=8, head_dim=32, state_size=32))
    backend = hybrid_backend(group, extra=extra)
    mamba = group.get_pool(PoolName.MAMBA)
    assert 32 << 10 < backend.host_pools.get("mamba").page_nbytes <= 64 << 10
    hashes = page_hashes(2)
    write_kv(backend, group.get_pool(PoolName.KV), hashes, seed=1)
    slot, dst = mamba.alloc(1), mamba.alloc(1)
    fill_random_pages(mamba, slot, seed=4)
    assert backend.batch_set_v2([transfer(PoolName.MAMBA, hashes[-1:], slot)])[PoolName.MAMBA] == [True]
    entries = backend.store.stats()["dram"]["entries"]
    assert entries == 2 + 2  # the 54 KiB state in two chunks
    assert backend.batch_exists_v2(hashes, [transfer(PoolName.MAMBA, ["x"])]).kv_hit_pages == 2
    assert backend.batch_get_v2([transfer(PoolName.MAMBA, hashes[-1:], dst)])[PoolName.MAMBA] == [True]
    assert torch.equal(page_snapshot(mamba, dst)[0], page_snapshot(mamba, slot)[0])
    backend.store.remove(backend.host_pools.get("mamba").keys.key(hashes[-1]) + "#1of2")
    assert backend.batch_exists_v2(hashes, [transfer(PoolName.MAMBA, ["x"])]).kv_hit_pages == 0
    assert backend.batch_get_v2([transfer(PoolName.MAMBA, hashes[-1:], dst)])[PoolName.MAMBA] == [False]
    backend.close()


def test_a_bad_transfer_fails_alone_with_one_log_line(sglang_runtime, printed_lines):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    group = kv_mamba_group()
    backend = hybrid_backend(group)
    mamba = group.get_pool(PoolName.MAMBA)
    slot = mamba.alloc(1)
    good = transfer(PoolName.MAMBA, ["a" * 64], slot)
    unregistered = transfer(PoolName.SWA, ["b" * 64], slot)
    out = backend.batch_set_v2([good, unregistered])
    assert out == {PoolName.MAMBA: [True], PoolName.SWA: [False]}
    too_many = transfer(PoolName.MAMBA, ["c" * 64], mamba.alloc(2))
    outside = transfer(PoolName.MAMBA, ["d" * 64], torch.tensor([10**9]))
    for _ in range(3):
        assert backend.batch_set_v2([too_many])[PoolName.MAMBA] == [False]
        assert backend.batch_get_v2([outside])[PoolName.MAMBA] == [False]
    refused = printed_lines.matching("refused host indices")
    assert len(refused) == 2  # one line per cause that the user sees, not per call
    backend.close()
