"""MHA pages cross TP sizes (``tp_lcm_size``, ``sglang_adapter/cross_tp.py``): ranks of different TP sizes,
each a backend made by SGLang's factory over SGLang's own MHA host pool, share one host cache
(a real service process). A rank reads exactly its heads of a page another TP size wrote."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from host_cache_procs import PrivateHostCache
from sglang_helpers import small_extra

from hicache_mooncake.config import ConfigError
from hicache_mooncake.tools.sglang_harness import (
    PoolShape,
    fill_random_pages,
    make_host_pool,
    make_storage_config,
)

pytestmark = pytest.mark.sglang
HEADS = 4  # the model's KV heads: 4 per rank at TP=1, 2 at TP=2, 1 at TP=4
LCM = 4
PS = 16
LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]


def make_backend(
    layout: str = "page_first",
    mla: bool = False,
    extra: dict[str, Any] | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    shape: PoolShape | None = None,
    tp_lcm_size: int | None = None,
) -> tuple[Any, Any]:
    """A rank made by SGLang's factory, with its host pool registered (as SGLang's controller does)."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool(layout, mla, shape or PoolShape(page_size=PS, layers=3, heads=2, head_dim=32))
    cfg = make_storage_config(
        extra if extra is not None else small_extra(),
        is_mla=mla, layout=layout, tp_rank=tp_rank, tp_size=tp_size, tp_lcm_size=tp_lcm_size,
    )  # fmt: skip
    backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
    try:
        backend.register_mem_pool_host(host)
    except Exception:
        backend.close()
        raise
    return backend, host


def shape(tp_size: int) -> PoolShape:
    return PoolShape(page_size=PS, layers=3, heads=HEADS // tp_size, head_dim=32, device_tokens=512)


def by_heads(host: Any, first_index: int) -> torch.Tensor:
    """One page as ``[K/V, layer, token, head, dim]`` (raw 16-bit words: random bits hold NaNs),
    whatever the host layout: the reference a rank's heads are compared on."""
    page = host.get_data_page(first_index, flat=False)
    if host.layout == "page_first":
        page = page.permute(0, 2, 1, 3, 4)
    elif host.layout == "page_first_direct":
        page = page[:, 0]
    elif host.layout == "page_head":
        page = page[:, 0].permute(0, 3, 2, 1, 4)
    return page.contiguous().view(torch.int16)


def ranks(extra: dict[str, Any], layout: str, tp_size: int, lcm: int | None = LCM) -> list[tuple[Any, Any]]:
    return [
        make_backend(layout, extra=extra, tp_rank=r, tp_size=tp_size, shape=shape(tp_size), tp_lcm_size=lcm)
        for r in range(tp_size)
    ]


def pages_of(tp: list[tuple[Any, Any]], n: int, seed: int) -> list[torch.Tensor]:
    """``n`` pages of random bytes in each rank's host pool; their host indices per rank."""
    out = []
    for r, (_backend, host) in enumerate(tp):
        idx = host.alloc(n * PS)
        fill_random_pages(host, idx, seed=seed + r)
        out.append(idx)
    return out


def close(*groups: list[tuple[Any, Any]]) -> None:
    for group in groups:
        for backend, _host in group:
            backend.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mha_pages_cross_tp_sizes_both_ways_byte_exact(host_cache: PrivateHostCache, layout: str) -> None:
    """With ``tp_lcm_size=4``: TP=1 writes; TP=2 ranks 0/1 and TP=4 ranks 0..3 each find every
    page and read exactly their heads of it. TP=4 writes (each rank its heads); TP=1 and TP=2 read the whole heads."""
    extra = host_cache.extra(host_cache="on")
    tp1, tp2, tp4 = ranks(extra, layout, 1), ranks(extra, layout, 2), ranks(extra, layout, 4)
    try:
        n = 4
        keys = [f"one{i:060x}" for i in range(n)]
        (src,) = pages_of(tp1, n, seed=1)
        writer, whost = tp1[0]
        assert writer.batch_set_v1(keys, src) == [True] * n
        want = [by_heads(whost, int(src[p * PS])) for p in range(n)]
        for tp in (tp2, tp4):
            per = HEADS // len(tp)
            for r, (backend, host) in enumerate(tp):
                assert backend.batch_exists(keys) == n
                dst = host.alloc(n * PS)
                assert backend.batch_get_v1(keys, dst) == [True] * n
                for p in range(n):
                    got = by_heads(host, int(dst[p * PS]))
                    assert torch.equal(got, want[p][:, :, :, r * per : (r + 1) * per]), (len(tp), r, p)

        keys = [f"four{i:060x}" for i in range(n)]
        srcs = pages_of(tp4, n, seed=10)
        for (backend, _host), idx in zip(tp4, srcs[:-1], strict=False):  # ranks 0..2 only first
            assert backend.batch_set_v1(keys, idx) == [True] * n
        assert tp1[0][0].batch_exists(keys) == 0  # a page counts only with all its head groups
        assert tp2[0][0].batch_exists(keys) == n and tp2[1][0].batch_exists(keys) == 0
        assert tp4[3][0].batch_set_v1(keys, srcs[3]) == [True] * n
        parts = [
            [by_heads(h, int(idx[p * PS])) for p in range(n)] for (_b, h), idx in zip(tp4, srcs, strict=True)
        ]
        for tp in (tp1, tp2):
            per = len(tp4) // len(tp)
            for r, (backend, host) in enumerate(tp):
                assert backend.batch_exists(keys) == n
                dst = host.alloc(n * PS)
                assert backend.batch_get_v1(keys, dst) == [True] * n
                for p in range(n):
                    want4 = torch.cat([parts[w][p] for w in range(r * per, (r + 1) * per)], dim=3)
                    assert torch.equal(by_heads(host, int(dst[p * PS])), want4), (len(tp), r, p)
    finally:
        close(tp1, tp2, tp4)


def test_without_tp_lcm_size_tp_sizes_keep_separate_pages(host_cache: PrivateHostCache) -> None:
    """The default (no ``tp_lcm_size``) is unchanged: per-rank objects, not found across TP sizes."""
    extra = host_cache.extra(host_cache="on")
    tp1, tp2 = ranks(extra, "page_first", 1, lcm=None), ranks(extra, "page_first", 2, lcm=None)
    try:
        keys = [f"plain{i:059x}" for i in range(2)]
        (src,) = pages_of(tp1, 2, seed=3)
        assert tp1[0][0].batch_set_v1(keys, src) == [True, True]
        assert "@tp0of1" in tp1[0][0]._store_keys(keys[:1])[0]
        assert [b.batch_exists(keys) for b, _h in tp2] == [0, 0]
    finally:
        close(tp1, tp2)


def test_a_page_is_one_store_call_of_all_its_head_groups() -> None:
    """A batch's head-group objects of every page go to the store in one call (and its keys name
    the group, not the TP rank); one object per group in the tier."""
    backend, host = make_backend(
        "page_first", extra=small_extra(), tp_size=1, shape=shape(1), tp_lcm_size=LCM
    )
    calls: list[int] = []
    put = backend.store.put_batch

    def counting(keys: list[str], *args: Any, **kwargs: Any) -> list[bool]:
        calls.append(len(keys))
        return put(keys, *args, **kwargs)

    backend.store.put_batch = counting  # type: ignore[method-assign]
    try:
        keys = [f"b{i:063x}" for i in range(8)]
        idx = host.alloc(8 * PS)
        fill_random_pages(host, idx, seed=5)
        assert backend.batch_set_v1(keys, idx) == [True] * 8
        assert calls == [8 * LCM]
        assert backend.tier_stats()["tiers"]["dram"]["entries"] == 8 * LCM
        assert [k.rsplit("/", 1)[1] for k in backend._store_keys(keys[:1])] == [
            f"{keys[0]}@hg{g}of{LCM}" for g in range(LCM)
        ]
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("tp_size", "lcm", "why"),
    [
        (4, 2, "not a multiple of tp_size=4"),
        (2, 3, "not a multiple of tp_size=2"),
        (1, -2, "positive integer"),
    ],
)
def test_a_tp_size_that_does_not_fit_tp_lcm_size_is_refused_at_attach(
    tp_size: int, lcm: int, why: str
) -> None:
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool("page_first", False, shape(tp_size))
    cfg = make_storage_config(small_extra(), tp_size=tp_size, tp_lcm_size=lcm)
    with pytest.raises(ConfigError, match=f"tp_lcm_size.*{why}"):
        StorageBackendFactory.create_backend("dynamic", cfg, host)


def test_heads_that_do_not_split_into_groups_are_refused_at_registration() -> None:
    """TP=1 with 4 heads and ``tp_lcm_size=8``: 8 groups of half a head do not exist."""
    with pytest.raises(ConfigError, match="tp_lcm_size=8: this rank's 4 KV heads do not split into 8 groups"):
        make_backend("page_first", extra=small_extra(), shape=shape(1), tp_lcm_size=8)


def test_legacy_copy_path_with_tp_lcm_size_is_refused() -> None:
    extra = small_extra()
    extra["interface_v1"] = 0
    with pytest.raises(ConfigError, match="tp_lcm_size=2 needs interface_v1: 1"):
        make_backend("page_first", extra=extra, shape=shape(1), tp_lcm_size=2)


def test_mla_with_tp_lcm_size_keeps_one_copy_for_every_tp_size() -> None:
    """MLA pages are replicated: ``tp_lcm_size`` changes neither their keys nor their bytes."""
    plain, _ = make_backend("page_first", mla=True, tp_size=1)
    tp2 = [make_backend("page_first", mla=True, tp_rank=r, tp_size=2, tp_lcm_size=2) for r in range(2)]
    try:
        want = plain._keys.key("h")
        assert "@" not in want.rsplit("/", 1)[1]
        assert [b._keys.key("h") for b, _h in tp2] == [want, want]
        assert [b._kv_cut().per_page for b, _h in tp2] == [1, 1]
    finally:
        for b in (plain, *(b for b, _h in tp2)):
            b.close()


@pytest.mark.parametrize("layout", ["layer_first", "page_head"])
def test_a_head_group_larger_than_a_slab_is_stored_in_chunks(layout: str) -> None:
    """A group object (24 KiB here) over the DRAM slab (16 KiB) is cut like a page: its chunk
    count depends on the group's size only, the same at every TP size; reads stay byte-exact."""
    from hicache_mooncake.tools.sglang_harness import page_snapshot

    big = PoolShape(page_size=PS, layers=3, heads=HEADS, head_dim=64, device_tokens=512)
    extra = small_extra(dram={"slab_size": "16KiB"})
    backend, host = make_backend(layout, extra=extra, shape=big, tp_lcm_size=2)
    try:
        keys = [f"c{i:063x}" for i in range(3)]
        src = host.alloc(3 * PS)
        fill_random_pages(host, src, seed=7)
        assert backend.batch_set_v1(keys, src) == [True] * 3
        assert backend.tier_stats()["tiers"]["dram"]["entries"] == 3 * 2 * 2
        assert backend._store_keys(keys[:1])[-1].endswith("@hg1of2#1of2")
        dst = host.alloc(3 * PS)
        assert backend.batch_get_v1(keys, dst) == [True] * 3
        got, want = page_snapshot(host, dst), page_snapshot(host, src)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    finally:
        backend.close()
