"""``TierPlacement.set_batch`` makes the decisions ``set`` would make key by key: the same outcomes,
the same drops and demotions, the same residents and ledger, for every policy, under capacity
pressure, with tenants' shares and with trailing sidecar objects in the batches."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hicache_mooncake.tiers.policy import ObjectType, make_policy, policy_names
from hicache_mooncake.tiers.policy.contexts import set_contexts
from hicache_mooncake.tiers.policy.placement import SetOutcome, TierPlacement
from hicache_mooncake.tiers.policy.quotas import TenantLedger, TenantShare


def tenant(key: str) -> str:
    return key.split(":", 1)[0]


def placement(policy: str, shares: bool, dram: int) -> TierPlacement:
    ledger = TenantLedger(tenant, {"a": TenantShare(dram=0.3, ssd=0.4)} if shares else {})
    return TierPlacement(make_policy(policy), 60, dram, dram * 3 // 4, ledger=ledger)


def workload(seed: int) -> list[tuple[list[str], int, ObjectType]]:
    """Batches of keys (fresh ones and rewrites of earlier ones), a size and an object type."""
    rng = random.Random(seed)
    seen: list[str] = []
    out = []
    for b in range(120):
        who = rng.choice("ab")
        keys = []
        for _ in range(rng.randint(1, 9)):
            key = rng.choice(seen) if seen and rng.random() < 0.3 else f"{who}:{b}:{len(keys)}"
            if key not in keys:
                keys.append(key)
        seen.extend(keys)
        kind = ObjectType.MAMBA_STATE if rng.random() < 0.2 else ObjectType.KV_PAGE
        out.append((keys, rng.choice((1, 2, 3)), kind))
    return out


@pytest.mark.parametrize("shares", [False, True], ids=["no-shares", "shares"])
@pytest.mark.parametrize("dram", [0, 20, 60], ids=["ssd-only", "dram+ssd", "dram-only"])
@pytest.mark.parametrize("policy", policy_names())
def test_a_batch_decides_as_its_keys_one_by_one(policy: str, dram: int, shares: bool) -> None:
    one, many = placement(policy, shares, dram), placement(policy, shares, dram)
    for seed in range(3):
        for keys, size, kind in workload(seed):
            ctxs = set_contexts(keys, 0, None, size, obj_type=kind)
            singly = [one.set(key, ctx) for key, ctx in zip(keys, ctxs, strict=True)]
            assert many.set_batch(keys, ctxs) == singly
            assert many.settle() == one.settle()
            assert sorted(many.resident_keys()) == sorted(one.resident_keys())
            assert [many.tier_of(k) for k in keys] == [one.tier_of(k) for k in keys]
            assert (many.used, many.dram_used) == (one.used, one.dram_used)
            assert many.ledger.stats() == one.ledger.stats()
    assert one.used > 0


@pytest.mark.parametrize("dram", [0, 20, 60], ids=["ssd-only", "dram+ssd", "dram-only"])
@pytest.mark.parametrize("policy", policy_names())
def test_a_batch_into_a_full_cache_evicts_as_its_keys_one_by_one(
    policy: str, dram: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady state of a cache: batches of new pages (of two tenants, of several sizes, some
    larger than the whole capacity, so later keys of a batch push out earlier ones) into a cache
    that must make room for each. Per key the policy's set and then its victims, as ``set``
    key by key decides: the same outcomes, drops, residents, counts and ledger, for every
    policy; and the batch path, not the per-key loop, took them."""
    taken = 0
    evicting = TierPlacement._set_new_evicting

    def counted(self: TierPlacement, *args: Any) -> list[SetOutcome]:
        nonlocal taken
        taken += 1
        return evicting(self, *args)

    monkeypatch.setattr(TierPlacement, "_set_new_evicting", counted)
    one, many = placement(policy, False, dram), placement(policy, False, dram)
    rng = random.Random(23)
    for b in range(300):
        width = rng.choice((2, 5, 9, 30, 70))
        keys = [f"{rng.choice('ab') if rng.random() < 0.2 else 'a'}:{b}:{i}" for i in range(width)]
        if rng.random() < 0.1:  # a rewrite of resident pages now and then (the per-key loop)
            keys[0] = rng.choice(sorted(one.resident_keys()) or keys)
        ctxs = set_contexts(keys, rng.randint(0, 3), None, rng.choice((1, 2, 3)))
        singly = [one.set(key, ctx) for key, ctx in zip(keys, ctxs, strict=True)]
        assert many.set_batch(keys, ctxs) == singly, b
        assert many.settle() == one.settle(), b
        assert sorted(many.resident_keys()) == sorted(one.resident_keys()), b
        assert (many.used, many.dram_used) == (one.used, one.dram_used), b
        assert many.ledger.stats() == one.ledger.stats(), b
        assert many.used <= many.capacity
    # LRU takes its own path (the whole batch, then room) for batches that fit the capacity
    assert taken >= (20 if many.policy.evicts_oldest_first else 200)


def test_nothing_is_admitted_without_capacity() -> None:
    p = TierPlacement(make_policy("lru"), 0, 0)
    keys = ["a", "b"]
    assert p.set_batch(keys, set_contexts(keys, 0, None, 1)) == [0, 0]


def test_an_lru_placement_keeps_the_most_recent_keys_of_its_batches() -> None:
    """A model of the outcome, independent of ``set``: with LRU over DRAM only, after any sequence
    of batches the resident keys are the ``capacity`` most recently set distinct keys (a key set
    again moves to the front), and a key is new in DRAM exactly when it was not resident at its
    own set (earlier keys of a long batch may have pushed it out), held otherwise."""
    capacity = 7
    p = TierPlacement(make_policy("lru"), capacity, capacity)
    rng = random.Random(11)
    order: list[str] = []  # the model: distinct keys, least recent first
    for b in range(60):
        keys = list(dict.fromkeys(f"k{rng.randrange(20)}" for _ in range(rng.randint(1, 10))))
        outcomes = p.set_batch(keys, set_contexts(keys, 0, None, 1))
        p.settle()
        want = []
        for key in keys:
            want.append(SetOutcome.HELD if key in order else SetOutcome.NEW_DRAM)
            if key in order:
                order.remove(key)
            order.append(key)
            del order[:-capacity]
        assert outcomes == want, b
        assert sorted(p.resident_keys()) == sorted(order), b


@pytest.mark.parametrize("policy", policy_names())
def test_a_batch_of_dram_hits_leaves_the_state_its_keys_one_by_one_leave(policy: str) -> None:
    """``hit_in_dram_batch`` (the store's path when DRAM served a whole get) against ``hit`` of
    each key: the same answers, then the same victims and demotions under the pressure that
    follows (the policy's and DRAM's orders agree), for every policy; fresh batches of two
    tenants at once (the ledger's grouped count) included."""
    one, many = placement(policy, False, 20), placement(policy, False, 20)
    rng = random.Random(5)
    batched = 0
    for b in range(150):
        if rng.random() < 0.4:
            keys = [f"{rng.choice('ab')}:{b}:{i}" for i in range(rng.randint(2, 6))]
            ctxs = set_contexts(keys, 0, None, rng.choice((1, 2)))
            assert many.set_batch(keys, ctxs) == [one.set(k, c) for k, c in zip(keys, ctxs, strict=True)]
        else:
            held = sorted(one.resident_keys())
            keys = list(dict.fromkeys(rng.choice(held) for _ in range(rng.randint(2, 8)))) if held else []
            ctxs = set_contexts(keys, 0, None, 1)
            singly = [one.hit(k, c, promote=False) for k, c in zip(keys, ctxs, strict=True)]
            if keys and all(t == "dram" for t in singly) and many.hit_in_dram_batch(keys, ctxs):
                batched += 1
            else:
                assert [many.hit(k, c, promote=False) for k, c in zip(keys, ctxs, strict=True)] == singly
        assert many.settle() == one.settle(), b
        assert sorted(many.resident_keys()) == sorted(one.resident_keys()), b
        assert (many.used, many.dram_used, many.ledger.stats()) == (
            one.used,
            one.dram_used,
            one.ledger.stats(),
        )
    assert batched >= 5  # the batch path was taken (the rest compared hit by hit)


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("shares", [False, True])
def test_a_batch_of_hits_in_any_tier_leaves_the_state_its_keys_one_by_one_leave(
    policy: str, shares: bool
) -> None:
    """``hit_batch`` (the store's path when a get was served whole from DRAM and SSD) against
    ``hit`` of each key with the same promotions: the same tiers before, then the same victims,
    demotions and ledger under the pressure that follows, for every policy, with and without
    tenant shares (the ledger's DRAM order)."""
    one, many = placement(policy, shares, 20), placement(policy, shares, 20)
    rng = random.Random(7)
    batched = 0
    for b in range(200):
        if rng.random() < 0.4:
            keys = [f"{rng.choice('ab')}:{b}:{i}" for i in range(rng.randint(2, 6))]
            ctxs = set_contexts(keys, 0, None, rng.choice((1, 2)))
            assert many.set_batch(keys, ctxs) == [one.set(k, c) for k, c in zip(keys, ctxs, strict=True)]
        else:
            held = sorted(one.resident_keys())
            keys = [rng.choice(held) for _ in range(rng.randint(2, 8))] if held else []
            if rng.random() < 0.8:
                keys = list(dict.fromkeys(keys))
            if rng.random() < 0.1:
                keys.append("nobody")
            ctxs = set_contexts(keys, 0, None, 1)
            promote = [rng.random() < 0.5 for _ in keys]
            singly = [one.hit(k, c, p) for k, c, p in zip(keys, ctxs, promote, strict=True)]
            before = many.hit_batch(keys, ctxs, promote)
            if before is None:  # a repeated or unknown key: nothing done, key by key instead
                assert len(set(keys)) < len(keys) or None in singly
                before = [many.hit(k, c, p) for k, c, p in zip(keys, ctxs, promote, strict=True)]
            else:
                batched += "ssd" in singly
            assert before == singly, b
        assert many.settle() == one.settle(), b
        assert sorted(many.resident_keys()) == sorted(one.resident_keys()), b
        assert sorted(many.hottest_cut(100).pages()) == sorted(one.hottest_cut(100).pages()), b
        assert (many.used, many.dram_used, many.ledger.stats()) == (
            one.used,
            one.dram_used,
            one.ledger.stats(),
        )
    assert batched >= 10  # batches with SSD pages took the batch path


def test_a_dram_hit_batch_with_a_key_not_in_dram_changes_nothing() -> None:
    p = placement("lru", False, 20)
    keys = ["a:1", "a:2", "a:3"]
    p.set_batch(keys, set_contexts(keys, 0, None, 1))
    p.settle()
    before = (list(p.hottest_cut(10).pages()), p.used)
    assert not p.hit_in_dram_batch(["a:1", "zz"], set_contexts(["a:1", "zz"], 0, None, 1))
    assert (list(p.hottest_cut(10).pages()), p.used) == before


def test_a_policy_that_hooks_each_set_and_hit_sees_every_key_of_a_batch() -> None:
    """A subclass of a policy with batch shortcuts (LRU) that overrides ``on_set`` / ``on_hit``
    (to record, as a test or a plugin does) gets each key of a batch through its own method."""
    from hicache_mooncake.tiers.policy.lru import LruPolicy

    class Recording(LruPolicy):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, str]] = []

        def on_set(self, key: str, ctx: Any = None) -> bool:
            self.calls.append(("set", key))
            return super().on_set(key)

        def on_hit(self, key: str, ctx: Any = None) -> None:
            self.calls.append(("hit", key))
            super().on_hit(key)

    policy = Recording()
    p = TierPlacement(policy, 60, 20)
    keys = ["a:1", "a:2", "a:3"]
    p.set_batch(keys, set_contexts(keys, 0, None, 1))
    assert p.hit_in_dram_batch(keys[::-1], set_contexts(keys, 0, None, 1))
    assert policy.calls == [("set", k) for k in keys] + [("hit", k) for k in keys[::-1]]
    assert policy.evicts_oldest_first  # its victims are still LRU's


def test_a_policy_that_fails_inside_a_full_cache_batch_leaves_the_placement_consistent() -> None:
    """A full cache's batch enters the placement's maps before its per-key loop: a policy that
    raises in the middle leaves only the keys it answered for resident (and the counts theirs),
    so the next calls see what the policy holds."""
    from hicache_mooncake.tiers.policy.s3fifo import S3FifoPolicy

    class FailingAt(S3FifoPolicy):
        def on_set(self, key: str, ctx: Any = None) -> bool:
            if key == "b:3":
                raise RuntimeError("policy bug")
            return super().on_set(key, ctx) if ctx is not None else super().on_set(key)

    p = TierPlacement(FailingAt(), 10, 10)
    fill = [f"a:{i}" for i in range(10)]
    p.set_batch(fill, set_contexts(fill, 0, None, 1))
    keys = [f"b:{i}" for i in range(6)]
    with pytest.raises(RuntimeError, match="policy bug"):
        p.set_batch(keys, set_contexts(keys, 0, None, 1))
    resident = set(p.resident_keys())
    assert {"b:3", "b:4", "b:5"}.isdisjoint(resident)
    assert resident <= {*fill, "b:0", "b:1", "b:2"}
    assert p.used == len(resident) and p.dram_used == len(resident)
    assert all(key in p.policy for key in resident)
