"""Keys of ``tiers`` that had no test of their own: the real store (``build_store``) built with the key
at two values, and the difference observed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ops_helpers import small_config
from store_load import StoreLoad

from hicache_mooncake import native
from hicache_mooncake.ssd.options import FILE_THREADS
from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.tiered_store import TieredStore

MiB = 1 << 20
PAGE = 64 << 10


def page(key: str, size: int = PAGE) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(size, b"."), dtype=np.uint8).copy()


def parts(arr: np.ndarray) -> list[memoryview]:
    return [memoryview(arr)]


def put(store: TieredStore, keys: list[str], size: int = PAGE) -> list[bool]:
    return store.put_batch(keys, [parts(page(k, size)) for k in keys])


def get(store: TieredStore, keys: list[str]) -> list[bool]:
    bufs = [np.zeros(PAGE, np.uint8) for _ in keys]
    ok = store.get_batch_into(keys, [parts(b) for b in bufs])
    for key, buf, hit in zip(keys, bufs, ok, strict=True):
        if hit:
            assert np.array_equal(buf, page(key)), key
    return ok


def test_policy_options_reach_the_policy(tmp_path: Path) -> None:
    """``tiers.policy_options`` are the policy's keyword options: a bad one refuses the store naming
    the key, a good one is what the policy placing the pages runs with."""
    bad = small_config(tmp_path, ssd=False, tiers={"policy": "s3fifo", "policy_options": {"small_ratio": 2}})
    with pytest.raises(ValueError, match=r"tiers\.policy_options: .*small_ratio"):
        build_store(bad)
    for ratio in (0.1, 0.5):
        cfg = small_config(
            tmp_path, ssd=False, tiers={"policy": "s3fifo", "policy_options": {"small_ratio": ratio}}
        )
        store = build_store(cfg)
        try:
            assert all(put(store, ["a", "b"]))
            assert store.placement.policy.small_ratio == ratio  # type: ignore[union-attr]
        finally:
            store.close()


def test_dram_capacity_and_slab_size_shape_the_arena(tmp_path: Path) -> None:
    def dram_only(capacity: str, slab_size: str) -> TieredStore:
        tiers = {"dram": {"capacity": capacity, "slab_size": slab_size, "max_capacity": None}}
        return build_store(small_config(tmp_path, ssd=False, tiers=tiers))

    small, big = dram_only("2MiB", "1MiB"), dram_only("4MiB", "1MiB")
    try:
        keys = [f"k{i:03d}" for i in range(64)]  # 4 MiB of pages
        for store in (small, big):
            for i in range(0, len(keys), 8):
                put(store, keys[i : i + 8])
        assert len(small.dram.keys()) < len(big.dram.keys())
        assert len(small.dram.keys()) <= 2 * MiB // PAGE
    finally:
        small.close()
        big.close()
    coarse, fine = dram_only("4MiB", "1MiB"), dram_only("4MiB", "256KiB")
    try:  # a 512 KiB object is one entry in a 1 MiB slab; 256 KiB slabs cannot hold it
        assert (coarse.dram.stats()["free_slabs"], fine.dram.stats()["free_slabs"]) == (4, 16)
        assert put(coarse, ["large"], 512 << 10) == [True]
        assert coarse.exists_prefix(["large"]) == 1
        assert put(fine, ["large"], 512 << 10) == [False]  # not stored, so not claimed (SGLang keeps it)
        assert fine.exists_prefix(["large"]) == 0
        assert (coarse.dram.stats()["rejected_too_large"], fine.dram.stats()["rejected_too_large"]) == (0, 1)
    finally:
        coarse.close()
        fine.close()


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("prefault", [True, False])
def test_prefault_touches_the_arena_at_attach(tmp_path: Path, prefault: bool) -> None:
    tiers = {"dram": {"capacity": "64MiB", "slab_size": "1MiB", "max_capacity": None, "prefault": prefault}}
    before = _rss()
    store = build_store(small_config(tmp_path, ssd=False, tiers=tiers))
    try:
        assert store.dram is not None and store.dram.wait_prefaulted(30)
        grown = _rss() - before
        if prefault:
            assert grown >= 48 * MiB, grown
        else:
            assert grown < 16 * MiB, grown
    finally:
        store.close()


def _file_threads() -> int:
    return sum(t.name.startswith("hicache-ssd-io-") for t in threading.enumerate())


@pytest.mark.parametrize("io_threads", [1, 3, 16])
def test_io_threads_is_the_ssd_io_depth(tmp_path: Path, io_threads: int) -> None:
    """The key sizes the native I/O pool (one request in flight per worker: the depth); the
    engine's own file work takes at most ``FILE_THREADS`` Python threads whatever the depth."""
    before = _file_threads()
    store = build_store(small_config(tmp_path, tiers={"ssd": {"io_threads": io_threads}}))
    try:
        assert all(put(store, ["a", "b"]))
        assert native.io_threads() >= io_threads
        assert _file_threads() - before == min(io_threads, FILE_THREADS)
    finally:
        store.close()
    assert _file_threads() == before


@pytest.mark.parametrize("promote_min_hits", [0, 1, 2])
def test_promote_min_hits_decides_when_an_ssd_hit_returns_to_dram(
    tmp_path: Path, promote_min_hits: int
) -> None:
    cfg = small_config(tmp_path, tiers={"ssd": {"promote_min_hits": promote_min_hits}})
    store = build_store(cfg)
    try:
        keys = [f"p{i:04d}" for i in range(160)]  # 10 MiB through 4 MiB of DRAM
        for i in range(0, len(keys), 8):
            assert all(put(store, keys[i : i + 8]))
            store.flush()
        cold = [k for k in keys if k not in set(store.dram.keys())][:4]
        assert len(cold) == 4
        for read in range(1, 3):
            assert get(store, cold) == [True] * 4
            store.flush()
            in_dram = set(store.dram.keys()) & set(cold)
            promoted = promote_min_hits > 0 and read >= promote_min_hits
            assert (in_dram == set(cold)) if promoted else not in_dram, (read, in_dram)
    finally:
        store.close()


def _restart_and_rewarm(tmp_path: Path, warm: dict[str, Any]) -> dict[str, Any]:
    config = small_config(tmp_path, tiers={"warm": warm})
    store = build_store(config)
    load = StoreLoad(store, threads=2, requests=40)
    with load:
        load.wait_ops(900)
    load.assert_clean()
    store.close(flush_timeout_s=10)
    again = build_store(config)
    try:
        assert again.warm is not None and again.warm.rewarm_done(60)
        return again.warm.stats()
    finally:
        again.close()


def test_rewarm_keys_reach_the_rewarm(tmp_path: Path) -> None:
    """``rewarm_mbps`` caps how fast pages come back from SSD, ``rewarm_budget_s`` how long it tries."""
    fast = _restart_and_rewarm(tmp_path / "fast", {"interval_s": 0})
    assert fast["rewarmed_pages"] > 8 and fast["rewarm_stopped"] != "time budget"
    t0 = time.monotonic()
    slow = _restart_and_rewarm(
        tmp_path / "slow", {"interval_s": 0, "rewarm_mbps": 0.05, "rewarm_budget_s": 1.0}
    )
    assert slow["rewarm_stopped"] == "time budget", slow
    assert slow["rewarmed_pages"] < fast["rewarmed_pages"]
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("type_aware_eviction", [True, False])
def test_type_aware_eviction_drops_a_superseded_state_before_the_oldest_page(
    tmp_path: Path, type_aware_eviction: bool
) -> None:
    """``tiers.type_aware_eviction``: a Mamba state in the middle of a chain that a later state of
    the same chain superseded is the first page to go (on), or the policy's own LRU victim (off)."""
    from hicache_mooncake.tiers.policy import ObjectType

    cfg = small_config(tmp_path, ssd=False, tiers={"type_aware_eviction": type_aware_eviction})
    store = build_store(cfg)
    try:
        kv = [f"k{i}" for i in range(60)]  # 60 of the 64 pages DRAM holds
        for i in range(0, 60, 10):
            got = store.put_batch(
                kv[i : i + 10], [parts(page(k)) for k in kv[i : i + 10]], kv[i - 1] if i else None, i
            )
            assert all(got)
        mamba = ObjectType.MAMBA_STATE
        assert store.put_batch(["m29"], [parts(page("m29"))], kv[29], 30, obj_type=mamba) == [True]
        assert store.put_batch(
            ["m59"], [parts(page("m59"))], kv[59], 60, obj_type=mamba, supersedes=["m29"]
        ) == [True]
        assert all(put(store, [f"x{i}" for i in range(3)]))  # one page past the capacity
        store.flush()
        gone = [
            k for k, held in zip(["m29", "k0"], store.contains_batch(["m29", "k0"]), strict=True) if not held
        ]
        assert gone == (["m29"] if type_aware_eviction else ["k0"])
        assert store.contains_batch(["m59"]) == [True]
    finally:
        store.close()
