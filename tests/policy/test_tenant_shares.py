"""Tenants' capacity shares in the placement, for every policy: a tenant over its share gives up its
own pages first (DRAM pages demoted, SSD pages dropped); the other tenants' pages stay; the ledger's
per-tenant bytes always match what is placed."""

from __future__ import annotations

import pytest

from hicache_mooncake.tiers.policy import AccessContext, make_policy, policy_names
from hicache_mooncake.tiers.policy.placement import DRAM, SSD, TierPlacement
from hicache_mooncake.tiers.policy.quotas import TenantLedger, TenantShare

CTX = AccessContext(size=1)


def tenant(key: str) -> str:
    return key.split(":", 1)[0]


def placement(
    policy: str, shares: dict[str, TenantShare], capacity: int = 100, dram: int = 40
) -> TierPlacement:
    ledger = TenantLedger(tenant, shares)
    return TierPlacement(make_policy(policy), capacity, dram, dram, ledger=ledger)


def check_ledger(p: TierPlacement) -> None:
    dram: dict[str, int] = {}
    ssd: dict[str, int] = {}
    for key in p.resident_keys():
        table = dram if p.tier_of(key) == DRAM else ssd
        table[tenant(key)] = table.get(tenant(key), 0) + 1
    for t in set(dram) | set(ssd) | set(p.ledger.dram_used):
        assert p.ledger.dram_used[t] == dram.get(t, 0), t
        assert p.ledger.ssd_used[t] == ssd.get(t, 0), t


@pytest.mark.parametrize("name", policy_names())
def test_a_tenant_over_its_dram_share_demotes_its_own_pages(name: str) -> None:
    p = placement(name, {"a": TenantShare(dram=0.25)})
    for i in range(60):
        for t in ("a", "b"):
            p.set(f"{t}:{i}", CTX)
        _drops, demoted = p.settle()
        assert all(tenant(k) == "a" or p.dram_used > p.dram_capacity * 0.5 for k in demoted)
        assert p.ledger.dram_used["a"] <= 10  # 25% of 40
        check_ledger(p)
    assert p.ledger.demoted["a"] > 0
    assert p.ledger.dram_used["b"] >= 20  # b keeps the rest of DRAM


@pytest.mark.parametrize("name", policy_names())
def test_a_tenant_over_its_ssd_share_drops_its_own_pages_first(name: str) -> None:
    p = placement(name, {"a": TenantShare(ssd=0.2)}, capacity=100, dram=20)
    for i in range(40):
        p.set(f"b:{i}", CTX)
    p.settle()
    b_before = sum(1 for k in p.resident_keys() if tenant(k) == "b")
    for i in range(80):
        p.set(f"a:{i}", CTX)
        drops, _ = p.settle()
        assert all(tenant(k) == "a" for k, _tier in drops), drops  # never b's pages
        assert p.ledger.ssd_used["a"] <= 16  # 20% of the 80 SSD units
        check_ledger(p)
    assert sum(1 for k in p.resident_keys() if tenant(k) == "b") == b_before
    assert p.ledger.evicted["a"] > 0


def test_without_an_ssd_a_tenant_over_its_dram_share_drops_its_own_pages() -> None:
    p = placement("lru", {"a": TenantShare(dram=0.5)}, capacity=20, dram=20)
    for i in range(30):
        p.set(f"a:{i}", CTX)
        drops, demoted = p.settle()
        assert not demoted and all(tier == DRAM for _k, tier in drops)
    assert p.ledger.dram_used["a"] == 10 and len(p) == 10
    check_ledger(p)


def test_resize_and_remove_keep_the_ledger_exact() -> None:
    p = placement("s3fifo", {"a": TenantShare(dram=0.5, ssd=0.5)})
    for i in range(50):
        p.set(f"{'ab'[i % 2]}:{i}", CTX)
        p.settle()
    p.resize(60, 20, 15)
    p.settle()
    check_ledger(p)
    for key in p.resident_keys()[:10]:
        p.remove(key)
    check_ledger(p)
    assert p.tier_of("a:0") in (None, DRAM, SSD)
    stats = p.ledger.stats()
    assert stats["a"]["dram_limit_bytes"] == 10 and stats["a"]["ssd_limit_bytes"] == 20


def test_unlisted_tenants_beyond_the_bound_are_counted_together() -> None:
    ledger = TenantLedger(tenant, {}, max_tenants=2)
    p = TierPlacement(make_policy("lru"), 100, 50, ledger=ledger)
    for t in ("x", "y", "z", "w"):
        p.set(f"{t}:1", CTX)
    assert set(ledger.dram_used) == {"x", "y", "(other)"}
    assert ledger.dram_used["(other)"] == 2


def test_placing_straight_into_dram_books_what_placed_then_to_dram_books() -> None:
    """The placement's one-step booking of a new DRAM page leaves the ledger exactly as the two
    events did: byte counts, the tenants listed, and the share-enforcement order."""
    shares = {"a": TenantShare(dram=0.5, ssd=0.5)}
    one, two = TenantLedger(tenant, shares), TenantLedger(tenant, shares)
    for i, key in enumerate(["a:1", "b:1", "a:2", "c:1"]):
        one.placed_in_dram(key, 10 + i)
        two.placed(key, 10 + i)
        two.to_dram(key, 10 + i)
    assert one.dram_used == two.dram_used and one.ssd_used == two.ssd_used
    assert dict(one.ssd_used) == {"a": 0, "b": 0, "c": 0}
    assert one._dram_order == two._dram_order and one._ssd_order == two._ssd_order


@pytest.mark.parametrize("ssd", [True, False], ids=["ssd", "no-ssd"])
@pytest.mark.parametrize("name", policy_names())
def test_a_physically_full_dram_makes_room_from_the_writing_tenants_own_pages(name: str, ssd: bool) -> None:
    """DRAM slots held by copies in flight: a set of a tenant with a share takes its room from
    that tenant's least recent DRAM pages, never from another tenant's older ones (a host-cache
    service failed this under load: the default tenant's pages were demoted for team-a's set)."""
    p = placement(name, {"a": TenantShare(dram=0.5)}, capacity=100 if ssd else 40, dram=40)
    for i in range(10):
        p.set(f"b:{i}", CTX)  # b's pages are the least recently used
    for i in range(10):
        p.set(f"a:{i}", CTX)
    p.settle()
    drops, demoted = p.free_dram(3, for_key="a:new")
    out = demoted if ssd else [k for k, _tier in drops]
    assert out == ["a:0", "a:1", "a:2"], (drops, demoted)
    assert p.ledger.dram_used["b"] == 10
    check_ledger(p)
    # a tenant without a share takes what it always took: the least recently used DRAM page
    # (with an SSD), the policy's victim (without)
    drops, demoted = p.free_dram(1, for_key="b:new")
    out = demoted if ssd else [k for k, _tier in drops]
    assert len(out) == 1 and (out == ["b:0"] or not ssd)
    check_ledger(p)


@pytest.mark.parametrize("shares", [False, True])
def test_moving_a_batch_between_tiers_counts_as_moving_its_keys_one_by_one(shares: bool) -> None:
    """``moved_batch`` against ``to_dram`` / ``to_ssd`` of each key: the same bytes per tenant and
    tier, and with shares the same recency orders (the pages a tenant gives up first)."""
    import random

    def ledger() -> TenantLedger:
        return TenantLedger(
            lambda key: key.split(":", 1)[0], {"a": TenantShare(dram=0.5, ssd=0.5)} if shares else {}
        )

    one, many = ledger(), ledger()
    for led in (one, many):
        led.set_capacity(1000, 400)
    rng = random.Random(3)
    in_dram: dict[str, int] = {}
    on_ssd: dict[str, int] = {}
    for b in range(300):
        if rng.random() < 0.4 or not (in_dram or on_ssd):
            keys = [f"{rng.choice('abc')}:{b}:{i}" for i in range(rng.randint(1, 5))]
            sizes = [rng.randint(1, 9) for _ in keys]
            for led in (one, many):
                led.placed_batch(keys, sizes, in_dram=True)
            in_dram.update(zip(keys, sizes, strict=True))
            continue
        to_dram = rng.random() < 0.5 and bool(on_ssd)
        source = on_ssd if to_dram else in_dram
        if not source:
            continue
        keys = rng.sample(sorted(source), rng.randint(1, min(6, len(source))))
        sizes = [source.pop(k) for k in keys]
        (in_dram if to_dram else on_ssd).update(zip(keys, sizes, strict=True))
        for key, size in zip(keys, sizes, strict=True):
            (one.to_dram if to_dram else one.to_ssd)(key, size)
        many.moved_batch(keys, sizes, to_dram=to_dram)
        assert many.stats() == one.stats(), b
        if shares:
            assert many.own_dram_pages("a:x", 50) == one.own_dram_pages("a:x", 50), b


def test_a_ledger_naming_whole_batches_counts_as_one_naming_key_by_key() -> None:
    """A ledger whose ``tenant_of`` names a batch at once (``keys.TenantReader.many``) counts the
    same bytes under the same names as one asked key by key, the tenants past ``max_tenants``
    under ``OTHER`` included, for batches of one tenant and of several."""
    import random

    from hicache_mooncake.keys import tenant_of_key, tenant_reader

    by_batch = TenantLedger(tenant_reader(), max_tenants=3)
    by_key = TenantLedger(tenant_of_key, max_tenants=3)
    assert by_batch._tenants_of is not None and by_key._tenants_of is None
    rng = random.Random(7)
    for b in range(200):
        tenants = rng.sample(["", "~a", "~b", "~c", "~d"], rng.randint(1, 2))
        keys = [f"m/d{rng.choice(tenants)}/{b}-{i}" for i in range(rng.randint(1, 6))]
        sizes = [rng.randint(1, 9) for _ in keys]
        in_dram = rng.random() < 0.5
        for ledger in (by_batch, by_key):
            ledger.placed_batch(keys, sizes, in_dram=in_dram)
            if b % 2 == 0:
                ledger.moved_batch(keys[1:], sizes[1:], to_dram=not in_dram)
            if b % 3 == 0:
                ledger.gone_batch(keys[:2], sizes[:2], [in_dram] * len(keys[:2]))
    assert by_batch.stats() == by_key.stats()
    assert "(other)" in by_batch.stats()
