"""TierPlacement invariants and the reuse policy on hand-made traces with known answers."""

from __future__ import annotations

from hicache_mooncake.replay.reference import lru_hits
from hicache_mooncake.replay.sim import SimTieredStore, drive, get_contexts, set_contexts
from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.policy.placement import DRAM, SSD, TierPlacement
from hicache_mooncake.tiers.policy.reuse import ReusePolicy


def test_placement_dram_is_the_mru_subset_and_one_policy_drops() -> None:
    pl = TierPlacement(make_policy("lru"), capacity=4, dram_capacity=2)
    keys = ["a", "b", "c"]
    assert pl.on_set(keys, set_contexts(keys, [])) == [True, True, True]
    assert pl.victims_to_drop() == []
    assert pl.dram_overflow() == ["a"]  # DRAM holds the 2 most recent
    assert [pl.tier_of(k) for k in "abc"] == [SSD, DRAM, DRAM]
    # An SSD hit promotes; DRAM overflow then demotes the least recent DRAM page.
    assert pl.on_hit("a", get_contexts(["a"])[0]) == SSD
    assert pl.tier_of("a") == DRAM and pl.dram_overflow() == ["b"]
    pl.on_set(["d", "e"], set_contexts(["d", "e"], []))
    # Capacity 4: the policy (LRU) drops the least recent page of the whole system.
    assert pl.victims_to_drop() == [("b", SSD)]
    assert len(pl) == 4 and pl.dram_len <= 2 + 2
    pl.dram_overflow()
    assert pl.dram_len == 2 and all(pl.tier_of(k) is not None for k in "acde")


def test_placement_without_dram_and_without_capacity() -> None:
    pl = TierPlacement(make_policy("reuse"), capacity=2, dram_capacity=0)
    assert pl.on_set(["x"], set_contexts(["x"], [])) == [True]
    assert pl.tier_of("x") == SSD and pl.dram_overflow() == []
    none = TierPlacement(make_policy("lru"), capacity=0, dram_capacity=0)
    assert none.on_set(["x"], set_contexts(["x"], [])) == [False]


def _conversations(n: int) -> list[tuple[int, ...]]:
    # A shared 2-block prompt; each conversation has 2 turns far apart; the last (partial) block
    # of every request is re-hashed, so it never comes back.
    reqs: list[tuple[int, ...]] = []
    nid = 10_000
    pending: list[tuple[int, ...]] = []
    for conv in range(n):
        base = (0, 1, 100 + 3 * conv, 101 + 3 * conv, 102 + 3 * conv)
        reqs.append((*base, nid))
        nid += 1
        pending.append(base)
        if len(pending) > 6:
            reqs.append((*pending.pop(0), nid))
            nid += 1
    return reqs


def test_reuse_learns_cold_tails_and_beats_lru() -> None:
    reqs = _conversations(600)
    cap = 28
    lru = lru_hits(reqs, cap)
    store = SimTieredStore.build("reuse", cap, 1.0)
    got = drive(reqs, store).hits
    assert got > lru  # tails cost nothing once learned: more conversations fit
    p = store.policy
    assert isinstance(p, ReusePolicy) and p.alpha > 0  # the guard chose the predictor


def test_reuse_guard_falls_back_to_lru_when_prediction_does_not_pay() -> None:
    # A cyclic scan that fits: every policy that keeps everything hits all; LRU is optimal.
    reqs = [(0, 1, 2, 3, 4, 5)] * 50 + [(i, i + 1) for i in range(100, 400, 2)]
    for cap in (4, 8, 64):
        got = drive(reqs, SimTieredStore.build("reuse", cap, 1.0)).hits
        assert got >= lru_hits(reqs, cap) - 2


def test_reuse_cuts_chains_from_the_end_and_orphans_go_first() -> None:
    p = make_policy("reuse", guard=False)
    ctxs = set_contexts(["a", "b", "c"], [])
    for k, c in zip("abc", ctxs, strict=True):
        p.on_insert(k, c)
    p.on_insert("x", set_contexts(["x"], [])[0])
    # No statistics yet: LRU order between requests, deepest page first inside one (the head
    # keeps the hits of the rest).
    assert [p.pop_victim() for _ in range(4)] == ["c", "b", "a", "x"]
    assert p.pop_victim() is None
    # A chain whose head left the store (not by eviction) is unreachable: its pages go first.
    for k, c in zip("abc", ctxs, strict=True):
        p.on_insert(k, c)
    p.on_insert("x", set_contexts(["x"], [])[0])
    p.on_insert("y", set_contexts(["y"], [])[0])
    p.on_remove("a")
    assert {p.pop_victim(), p.pop_victim()} == {"b", "c"}
    assert p.pop_victim() == "x"


def test_reuse_read_contexts_carry_the_request_length() -> None:
    store = SimTieredStore.build("reuse", 64, 1.0)
    drive([(1, 2, 3)], store)
    assert store.batch_exists(["1", "2", "3", "4", "5"]) == 3
    ctxs = get_contexts(["1", "2", "3"], request_len=5)
    assert all(c.request_len == 5 and c.batch_len == 3 for c in ctxs)
    assert set_contexts(["4", "5"], ["1", "2", "3"])[0].request_len == 5
