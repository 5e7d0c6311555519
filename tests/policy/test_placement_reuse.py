"""TierPlacement invariants and the reuse policy on hand-made traces with known answers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from hicache_mooncake.tiers.policy import make_policy
from hicache_mooncake.tiers.policy.placement import DRAM, SSD, SetOutcome, TierPlacement
from hicache_mooncake.tiers.policy.reuse import ReusePolicy
from hicache_mooncake.tools.replay.reference import lru_hits
from hicache_mooncake.tools.replay.sim import SimTieredStore, drive, get_contexts, set_contexts


def _set(pl: TierPlacement, keys: list[str]) -> list[SetOutcome]:
    return [pl.set(k, c) for k, c in zip(keys, set_contexts(keys, []), strict=True)]


def test_placement_dram_is_the_mru_subset_and_one_policy_drops() -> None:
    pl = TierPlacement(make_policy("lru"), capacity=4, dram_capacity=2)
    assert _set(pl, ["a", "b", "c"]) == [SetOutcome.NEW_DRAM] * 3
    assert pl.settle() == ([], ["a"])  # DRAM holds the 2 most recent
    assert [pl.tier_of(k) for k in "abc"] == [SSD, DRAM, DRAM]
    # An SSD hit promotes; DRAM overflow then demotes the least recent DRAM page.
    assert pl.hit("a", get_contexts(["a"])[0]) == SSD
    assert pl.tier_of("a") == DRAM and pl.settle() == ([], ["b"])
    # A hit without promotion leaves the page on SSD; a set of an SSD page moves it up.
    assert pl.hit("b", get_contexts(["b"])[0], promote=False) == SSD and pl.tier_of("b") == SSD
    assert _set(pl, ["b"]) == [SetOutcome.UP] and pl.settle() == ([], ["c"])
    _set(pl, ["d", "e"])
    # Capacity 4: the policy (LRU) drops the least recent page of the whole system.
    drops, demoted = pl.settle()
    assert drops == [("c", SSD)] and len(pl) == 4
    assert pl.dram_len == 2 and all(pl.tier_of(k) is not None for k in "abde")
    assert pl.used == 4 and pl.dram_used == 2


def test_placement_charges_sizes_and_demotes_to_the_low_watermark() -> None:
    pl = TierPlacement(make_policy("lru"), capacity=100, dram_capacity=40, dram_low=20)
    ctxs = [c._replace(size=10) for c in set_contexts(["a", "b", "c", "d"], [])]
    assert [pl.set(k, c) for k, c in zip("abcd", ctxs, strict=True)] == [SetOutcome.NEW_DRAM] * 4
    assert pl.settle() == ([], [])  # 40 of 40: not over the high watermark
    big = set_contexts(["e"], [])[0]._replace(size=15)
    assert pl.set("e", big) == SetOutcome.NEW_DRAM
    # 55 > 40: the least recent pages go until DRAM is at or below 20
    assert pl.settle() == ([], ["a", "b", "c", "d"]) and pl.dram_used == 15
    assert [pl.tier_of(k) for k in "ade"] == [SSD, SSD, DRAM] and pl.used == 55
    # DRAM physically full although the count has room: the least recent DRAM pages move out
    assert pl.free_dram(11) == ([], ["e"]) and pl.dram_used == 0


@pytest.mark.parametrize("policy", ["s3fifo", "reuse", "lru"])
def test_free_dram_without_an_ssd_drops_the_policys_victims_in_order(policy: str) -> None:
    """Short of DRAM slots with no SSD below: the policy's next victims leave (in one pass when
    only the policy keeps per-page state), as many as free the bytes asked for, and the counts
    stay those of the pages still resident."""
    pl = TierPlacement(make_policy(policy), capacity=100, dram_capacity=100)
    twin = make_policy(policy)
    keys = [f"k{i}" for i in range(10)]
    ctxs = [c._replace(size=10) for c in set_contexts(keys, [])]
    for key, ctx in zip(keys, ctxs, strict=True):
        pl.set(key, ctx)
        twin.on_set(key, ctx)
    for key in ("k0", "k1", "k0"):
        pl.hit(key, ctxs[0])
        twin.on_hit(key, ctxs[0])
    expected = [twin.pop_victim() for _ in range(3)]
    drops, demoted = pl.free_dram(25)  # three pages of 10 free 25 bytes
    assert demoted == [] and drops == [(k, DRAM) for k in expected]
    assert pl.used == pl.dram_used == 70 and len(pl) == pl.dram_len == 7
    assert all(k not in pl for k in expected) and pl.ledger.dram_used[""] == 70


def test_placement_without_dram_and_without_capacity() -> None:
    pl = TierPlacement(make_policy("reuse"), capacity=2, dram_capacity=0)
    assert _set(pl, ["x"]) == [SetOutcome.NEW_SSD]
    assert pl.tier_of("x") == SSD and pl.settle() == ([], [])
    assert _set(pl, ["x"]) == [SetOutcome.HELD]
    none = TierPlacement(make_policy("lru"), capacity=0, dram_capacity=0)
    assert _set(none, ["x"]) == [SetOutcome.REFUSED]


@pytest.mark.parametrize("name", ["lru", "s3fifo", "tinylfu", "chain", "reuse"])
def test_one_policy_call_per_key_per_get_and_set(name: str) -> None:
    """The placement asks the policy once per key of a set (``on_set``) and once per key of a get
    (``on_hit``); ``pop_victim`` runs once per page that leaves. Nothing else (no membership or
    length questions: the placement keeps its own)."""
    policy = make_policy(name)
    calls: Counter[str] = Counter()
    for method in ("on_set", "on_insert", "on_hit", "on_remove", "pop_victim", "should_admit", "on_miss"):
        original = getattr(policy, method)

        def counted(*args: Any, _m: str = method, _f: Any = original) -> Any:
            calls[_m] += 1
            out = _f(*args)
            if _m == "on_set" and not out:
                calls["not_admitted"] += 1
            return out

        setattr(policy, method, counted)
    pl = TierPlacement(policy, capacity=64, dram_capacity=16)
    keys = [f"k{i}" for i in range(200)]
    for k, c in zip(keys, set_contexts(keys, []), strict=True):
        pl.set(k, c)
    pl.settle()
    assert calls["on_set"] == len(keys)
    assert calls["pop_victim"] == len(keys) - len(pl) - calls["not_admitted"]
    assert calls["on_hit"] == 0 and calls["on_remove"] == 0
    resident = [k for k in keys if k in pl]
    before = dict(calls)
    for k, c in zip(resident, get_contexts(resident), strict=True):
        pl.hit(k, c)
    pl.settle()
    assert calls["on_hit"] - before.get("on_hit", 0) == len(resident)
    assert calls["on_set"] == before["on_set"] and calls["pop_victim"] == before["pop_victim"]


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


def test_reuse_cuts_chains_from_the_end() -> None:
    p = make_policy("reuse", guard=False)
    ctxs = set_contexts(["a", "b", "c"], [])
    for k, c in zip("abc", ctxs, strict=True):
        p.on_set(k, c)
    p.on_set("x", set_contexts(["x"], [])[0])
    # No statistics yet: LRU order between requests, deepest page first inside one (the head
    # keeps the hits of the rest).
    assert [p.pop_victim() for _ in range(4)] == ["c", "b", "a", "x"]
    assert p.pop_victim() is None
    # A page read again leaves its old place: the rest of its chain goes first.
    for k, c in zip("abc", ctxs, strict=True):
        p.on_set(k, c)
    p.on_hit("a", get_contexts(["a"])[0])
    p.on_remove("b")
    assert [p.pop_victim() for _ in range(2)] == ["c", "a"] and len(p) == 0


def test_reuse_read_contexts_carry_the_request_length() -> None:
    store = SimTieredStore.build("reuse", 64, 1.0)
    drive([(1, 2, 3)], store)
    assert store.batch_exists(["1", "2", "3", "4", "5"]) == 3
    ctxs = get_contexts(["1", "2", "3"], request_len=5)
    assert all(c.request_len == 5 and c.batch_len == 3 for c in ctxs)
    assert set_contexts(["4", "5"], ["1", "2", "3"])[0].request_len == 5


def test_hottest_is_dram_most_recent_first_then_ssd_latest_placed_first() -> None:
    """What the warm snapshot writes; ``hottest_cut`` is taken under the store lock, ``pages``
    after it, and the two together give the same answer at every limit."""
    pl = TierPlacement(make_policy("lru"), capacity=6, dram_capacity=2)
    _set(pl, ["a", "b", "c", "d", "e"])
    pl.settle()  # DRAM: d, e (e most recent); SSD: a, b, c
    assert pl.hit("b", get_contexts(["b"])[0]) == SSD  # b moves up, d is demoted
    pl.settle()
    full = [("b", 1, True), ("e", 1, True), ("d", 1, False), ("c", 1, False), ("a", 1, False)]
    assert pl.hottest(10) == full
    for limit in range(6):
        assert pl.hottest(limit) == full[:limit]
        assert pl.hottest_cut(limit).pages() == full[:limit]
