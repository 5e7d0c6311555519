"""Type-aware eviction: a Mamba state superseded by a later one of its chain goes first, for every
policy, in the placement and in the real store over a real DRAM tier; KV pages and the state at
the end of the chain survive, and turning it off gives the policy its usual victims."""

from __future__ import annotations

import numpy as np
import pytest

from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import ObjectType, make_policy, policy_names
from hicache_mooncake.tiers.policy.contexts import get_contexts, set_contexts
from hicache_mooncake.tiers.policy.placement import DRAM, SSD, TierPlacement
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

MAMBA = ObjectType.MAMBA_STATE
KV = [f"k{i}" for i in range(8)]
STATES = [f"m{i}" for i in range(8)]  # the Mamba state of page i (same chain)


def _set(pl: TierPlacement, keys: list[str], prefix: list[str], size: int = 1, **kw: object) -> None:
    prev = prefix[-1] if prefix else None
    for key, ctx in zip(keys, set_contexts(keys, len(prefix), prev, size, **kw), strict=True):  # type: ignore[arg-type]
        pl.set(key, ctx)
    pl.settle()


def _chain(pl: TierPlacement) -> None:
    """Two turns of one conversation: pages 0-3 with the state at page 3, then pages 4-7 with the
    state at page 7, which supersedes every earlier state of the chain."""
    _set(pl, KV[:4], [])
    _set(pl, ["m3"], KV[:3], size=2, obj_type=MAMBA)
    _set(pl, KV[4:], KV[:4])
    pl.supersede(STATES[:7], by="m7")
    _set(pl, ["m7"], KV[:7], size=2, obj_type=MAMBA)


@pytest.mark.parametrize("policy", policy_names())
def test_superseded_state_is_the_first_victim(policy: str) -> None:
    pl = TierPlacement(make_policy(policy), capacity=12, dram_capacity=12)
    _chain(pl)
    assert len(pl) == 10 and pl.used == 12 and "m3" in pl.superseded
    _set(pl, ["x0"], [])  # one unrelated page over capacity
    assert "m3" not in pl
    assert all(k in pl for k in [*KV, "m7"])
    assert len(pl.superseded) == 0  # pruned as it left


@pytest.mark.parametrize("policy", policy_names())
def test_superseded_state_is_demoted_first(policy: str) -> None:
    pl = TierPlacement(make_policy(policy), capacity=100, dram_capacity=12)
    _chain(pl)
    _set(pl, ["x0"], [])
    assert pl.tier_of("m3") == SSD
    assert all(pl.tier_of(k) == DRAM for k in [*KV, "m7", "x0"])


def test_a_read_or_the_superseder_leaving_makes_a_state_useful_again() -> None:
    pl = TierPlacement(make_policy("lru"), capacity=100, dram_capacity=100)
    _chain(pl)
    assert "m3" in pl.superseded
    pl.hit("m3", get_contexts(["m3"], obj_type=MAMBA)[0])  # a request restored at page 3
    assert "m3" not in pl.superseded
    pl.supersede(["m3"], by="m7")
    pl.remove("m7")  # the end of the chain left: page 3's state may be the end again
    assert len(pl.superseded) == 0
    pl.supersede(["k0", "m3"], by="m9")
    assert "k0" not in pl.superseded and "m3" in pl.superseded  # a KV page is never superseded


def test_kv_pages_are_never_superseded_and_off_means_the_policys_victims() -> None:
    on = TierPlacement(make_policy("lru"), capacity=12, dram_capacity=12)
    off = TierPlacement(make_policy("lru"), capacity=12, dram_capacity=12, type_aware=False)
    for pl in (on, off):
        _chain(pl)
        _set(pl, ["x0"], [])
    assert "m3" not in on and "k0" in on
    assert "m3" in off and "k0" not in off  # LRU alone: the oldest KV page goes
    pl = TierPlacement(make_policy("lru"), capacity=3, dram_capacity=3)
    _set(pl, ["a", "b", "c"], [])
    pl.supersede(["a"], by="c")
    _set(pl, ["d"], [])
    assert "a" not in pl and len(pl.superseded) == 0  # LRU's own victim: nothing to supersede


def _store(policy: str, type_aware: bool = True) -> TieredStore:
    return TieredStore(
        [DramTier(4 << 20, 1 << 20, prefault=False)],
        lambda: make_policy(policy),
        StoreOptions(type_aware_eviction=type_aware),
        capacity=(12 * 4096, 12 * 4096),
    )


def _put(
    store: TieredStore, keys: list[str], prefix: list[str], size: int = 4096, **kw: object
) -> list[bool]:
    data = [np.full(size, i, np.uint8) for i, _ in enumerate(keys)]
    return store.put_batch(keys, [[d.data] for d in data], prefix[-1] if prefix else None, len(prefix), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", policy_names())
def test_store_evicts_the_superseded_state_first(policy: str) -> None:
    """The real store over a real DRAM tier: KV pages of 4 KiB, Mamba states of 8 KiB."""
    store = _store(policy)
    try:
        assert all(_put(store, KV[:4], []))
        assert all(_put(store, ["m3"], KV[:3], 8192, obj_type=MAMBA))
        assert all(_put(store, KV[4:], KV[:4]))
        assert all(_put(store, ["m7"], KV[:7], 8192, obj_type=MAMBA, supersedes=STATES[:7]))
        assert _put(store, ["x0"], []) == [True]
        store.flush()
        assert store.contains_batch(["m3"]) == [False]
        assert all(store.contains_batch([*KV, "m7", "x0"]))
        buf = np.empty(8192, np.uint8)
        assert store.get_batch_into(["m7"], [[buf.data]], obj_type=MAMBA) == [True]
        assert (buf == 0).all()
    finally:
        store.close()


def test_store_without_type_awareness_keeps_the_policys_order() -> None:
    store = _store("lru", type_aware=False)
    try:
        _put(store, KV[:4], [])
        _put(store, ["m3"], KV[:3], 8192, obj_type=MAMBA)
        _put(store, KV[4:], KV[:4])
        _put(store, ["m7"], KV[:7], 8192, obj_type=MAMBA, supersedes=STATES[:7])
        _put(store, ["x0"], [])
        store.flush()
        assert store.contains_batch(["k0", "m3"]) == [False, True]
    finally:
        store.close()
