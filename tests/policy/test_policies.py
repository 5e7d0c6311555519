"""Every policy on small hand-made traces where the right answer is known; registry errors."""

from __future__ import annotations

import pytest

from hicache_mooncake.tiers.policy import AccessContext, make_policy, policy_names
from hicache_mooncake.tiers.policy.tinylfu import CountMinSketch
from hicache_mooncake.tools.replay.reference import lru_hits, opt_hits
from hicache_mooncake.tools.replay.sim import SimTieredStore, drive, set_contexts

ALL = ["chain", "lru", "reuse", "s3fifo", "tinylfu"]


def test_registry_lists_builtins_and_rejects_unknown() -> None:
    assert set(ALL) <= set(policy_names())
    with pytest.raises(KeyError, match="known policies"):
        make_policy("nope")
    with pytest.raises(ValueError):
        make_policy("chain", decay=0.0)
    with pytest.raises(ValueError):
        make_policy("tinylfu", window_ratio=2.0)


@pytest.mark.parametrize("name", ALL)
def test_contract(name: str) -> None:
    p = make_policy(name)
    assert p.pop_victim() is None
    for k in "abcde":
        p.on_insert(k)
    assert len(p) == 5 and "a" in p
    p.on_remove("zzz")  # unknown: no-op
    p.on_remove("c")
    assert "c" not in p and len(p) == 4
    seen = set()
    while (v := p.pop_victim()) is not None:
        assert v not in seen and v in set("abde")
        seen.add(v)
    assert seen == set("abde") and len(p) == 0


@pytest.mark.parametrize("name", ALL)
def test_shared_system_prompt_survives_one_off_traffic(name: str) -> None:
    # Every request starts with the same 2-block system prompt, then 3 one-off blocks.
    reqs = [(0, 1, 100 + 3 * i, 101 + 3 * i, 102 + 3 * i) for i in range(300)]
    store = SimTieredStore.build(name, capacity_blocks=8, dram_fraction=1.0)
    out = drive(reqs, store)
    assert out.hits >= 2 * 299 - 4  # the prompt hits on (nearly) every request


def test_lru_is_classic_and_two_lru_tiers_equal_one() -> None:
    reqs = [(1, 2, 3), (4, 5), (1, 2), (6, 7, 8), (1, 2, 3)]
    for df in (1.0, 0.5, 0.25):
        store = SimTieredStore.build("lru", capacity_blocks=4, dram_fraction=df)
        assert drive(reqs, store).hits == lru_hits(reqs, 4)


def test_chain_evicts_the_cold_tail_of_one_off_requests() -> None:
    # Conversations re-send their full blocks next turn; the last (partial) block never returns.
    reqs = []
    nid = 1000
    for conv in range(200):
        base = (0, 10 + 2 * conv, 11 + 2 * conv)
        reqs.append((*base, nid))
        nid += 1
        reqs.append((*base, nid))  # second turn re-uses the base, new tail
        nid += 1
    chain = drive(reqs, SimTieredStore.build("chain", 8, 1.0)).hits
    assert chain >= lru_hits(reqs, 8)


def test_chain_orphans_go_first() -> None:
    p = make_policy("chain")
    ctxs = set_contexts(["a", "b", "c"], [])
    for k, c in zip("abc", ctxs, strict=True):
        p.on_insert(k, c)
    p.on_insert("x", AccessContext())
    first = p.pop_victim()
    assert first == "a"  # oldest, no statistics yet: LRU order
    # Its descendants are unreachable now and must go before "x".
    assert {p.pop_victim(), p.pop_victim()} == {"b", "c"}
    assert p.pop_victim() == "x"


def test_count_min_sketch_counts_and_ages() -> None:
    s = CountMinSketch(width=64, sample=1000)
    for _ in range(5):
        s.increment("hot")
    s.increment("cold")
    assert s.estimate("hot") >= 5 > s.estimate("cold") >= 1
    s.age()
    assert s.estimate("hot") == 2


def test_tinylfu_admission_gate() -> None:
    p = make_policy("tinylfu", admit_min_freq=2)
    assert not p.should_admit("k")
    p.on_miss("k")
    p.on_miss("k")
    assert p.should_admit("k")


def test_tinylfu_admission_refuses_a_scan_and_keeps_the_hot_set() -> None:
    """W-TinyLFU's admission duel works (until issue 14 its main cache stayed empty and it was
    plain LRU): a one-off scan does not flush frequently read pages, and its hits differ from LRU."""
    hot = [(1, 2, 3, 4)] * 3
    reqs: list[tuple[int, ...]] = []
    for i in range(200):
        reqs += hot
        reqs.append(tuple(range(1000 + 20 * i, 1020 + 20 * i)))  # a scan larger than the cache
    got = drive(reqs, SimTieredStore.build("tinylfu", 16, 1.0)).hits
    lru = lru_hits(reqs, 16)
    assert lru == 2 * 4 * 200  # LRU loses the hot set to every scan (hits only within a burst)
    assert got >= 3 * 4 * 200 - 16  # TinyLFU keeps it


def test_references_by_hand() -> None:
    reqs = [(1, 2), (3,), (1, 2), (3,)]
    # capacity 2, LRU: [1,2] -> 3 evicts 1 -> req (1,2): 1 misses (hit run 0) ... -> 0 hits.
    assert lru_hits(reqs, 2) == 0
    # OPT keeps 1 and 2 (3 is inserted then evicted as furthest? next use of 3 is req 3,
    # of 1/2 is req 2): at req 1 it evicts the furthest = 3 itself, so req 2 hits 2 blocks.
    assert opt_hits(reqs, 2) == 2
    assert opt_hits(reqs, 3) == lru_hits(reqs, 3) == 3
    # OPT never loses to LRU.
    reqs2 = [(0, 1, 2), (0, 3), (0, 1, 2, 4), (0, 3, 5), (0, 1)]
    for cap in range(1, 7):
        assert opt_hits(reqs2, cap) >= lru_hits(reqs2, cap)
