"""The one store over a real DRAM tier and a real SSD tier (region files in a temp dir): one policy
call per key per get/set, every policy places pages the same way, the per-tier options mean the
same whatever the policy, and DRAM that fills up never loses a page silently."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT, make_policy, policy_names
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

PAGE = 64 << 10
MiB = 1 << 20


def page(key: str) -> np.ndarray:
    return np.frombuffer(key.encode().ljust(PAGE, b"."), dtype=np.uint8).copy()


def parts_of(arr: np.ndarray) -> list[memoryview]:
    half = len(arr) // 2
    return [memoryview(arr[:half]), memoryview(arr[half:])]


class CountingPolicy:
    """Wraps a real policy and counts each call the store's placement makes into it."""

    def __init__(self, name: str) -> None:
        self.inner = make_policy(name)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self.inner, attr)
        if callable(value):

            def counted(*args: Any, **kwargs: Any) -> Any:
                if attr.endswith("_batch"):  # one call that answers for each of its keys in turn
                    self.calls[attr.removesuffix("_batch")] += len(args[0])
                else:
                    self.calls[attr] += 1
                return value(*args, **kwargs)

            return counted
        return value

    def __len__(self) -> int:
        self.calls["__len__"] += 1
        return len(self.inner)

    def __contains__(self, key: object) -> bool:
        self.calls["__contains__"] += 1
        return key in self.inner


@pytest.fixture
def make_store(tmp_path: Any) -> Iterator[Any]:
    stores: list[TieredStore] = []

    def make(policy: Any = "lru", dram_mib: int = 2, ssd: bool = True, **opts: Any) -> TieredStore:
        tiers: list[Any] = [DramTier(dram_mib * MiB, MiB, prefault=False)] if dram_mib else []
        if ssd:
            d = tmp_path / f"ssd{len(stores)}"
            d.mkdir()
            engine = SsdEngine(
                SsdOptions(dirs=(str(d),), capacity_bytes=32 * MiB, region_size=MiB, direct_io="off")
            )
            tiers.append(SsdTier(engine))
        factory = (lambda: policy) if not isinstance(policy, str) else (lambda: make_policy(policy))
        store = TieredStore(tiers, factory, StoreOptions(**opts))
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()


def put(store: TieredStore, keys: list[str]) -> list[bool]:
    return store.put_batch(keys, [parts_of(page(k)) for k in keys])


def get(store: TieredStore, keys: list[str]) -> list[bool]:
    bufs = [np.zeros(PAGE, np.uint8) for _ in keys]
    ok = store.get_batch_into(keys, [parts_of(b) for b in bufs])
    for key, buf, hit in zip(keys, bufs, ok, strict=True):
        if hit:
            assert np.array_equal(buf, page(key)), key
    return ok


@pytest.mark.parametrize("name", ["lru", "reuse"])
def test_one_policy_call_per_key_per_get_and_set_through_the_store(make_store: Any, name: str) -> None:
    policy = CountingPolicy(name)
    store = make_store(policy)
    keys = [f"k{i:04d}" for i in range(16)]
    assert all(put(store, keys))
    assert policy.calls["on_set"] == 16 and policy.calls["on_hit"] == 0
    assert policy.calls["__contains__"] == policy.calls["__len__"] == 0
    before = Counter(policy.calls)
    assert all(get(store, keys))
    assert policy.calls["on_hit"] - before["on_hit"] == 16
    assert policy.calls["on_set"] == before["on_set"]
    assert sum(policy.calls.values()) - sum(before.values()) == 16  # nothing else was asked
    store.close()


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_demotes_to_ssd_and_serves_every_page_exact(make_store: Any, name: str) -> None:
    store = make_store(name, dram_mib=1)  # 16 pages of DRAM, 0.9 of it placed
    keys = [f"p{i:04d}" for i in range(80)]
    for i in range(0, len(keys), 8):
        assert all(put(store, keys[i : i + 8]))
        store.flush()
    stats = store.stats()
    assert stats["ssd"]["background"]["demoted"] > 0
    assert stats["placement"]["dram_used"] <= stats["placement"]["dram_capacity"]
    resident = [k for k in keys if store.exists_prefix([k]) == 1]
    assert len(resident) == stats["placement"]["resident"] > 40
    assert all(get(store, resident))


@pytest.mark.parametrize("name", ["lru", "s3fifo", "reuse"])
def test_write_through_gives_every_new_page_an_ssd_copy_under_every_policy(
    make_store: Any, name: str
) -> None:
    store = make_store(name, dram_mib=4, ssd_write_through=True)
    keys = [f"w{i:03d}" for i in range(10)]
    assert all(put(store, keys))
    assert store.flush()
    assert all(store.ssd.contains(k) for k in keys)  # although DRAM holds all of them
    assert all(store.dram.contains(k) for k in keys)


def test_without_write_through_new_pages_stay_in_dram_only(make_store: Any) -> None:
    store = make_store("lru", dram_mib=4)
    keys = [f"d{i:03d}" for i in range(10)]
    assert all(put(store, keys)) and store.flush()
    assert not any(store.ssd.contains(k) for k in keys)


def test_a_set_that_finds_no_free_dram_waits_for_the_mover_then_succeeds(make_store: Any) -> None:
    """foreground_demotion (default): when the mover fell behind, the set runs the moves itself."""
    store = make_store("lru", dram_mib=1, dram_high=1.0, dram_low=0.9)
    store.mover.close()  # a mover that never runs: every demotion is left to the foreground
    keys = [f"f{i:03d}" for i in range(48)]
    for i in range(0, len(keys), 8):
        assert all(put(store, keys[i : i + 8]))
    assert store.mover.counts["demotions_in_foreground"] > 0
    assert all(get(store, [k for k in keys if store.exists_prefix([k])]))


def test_without_foreground_demotion_pages_without_room_are_refused_not_lost(make_store: Any) -> None:
    store = make_store("lru", dram_mib=1, dram_high=1.0, dram_low=0.9, wait_for_room=False)
    store.mover.close()
    keys = [f"r{i:03d}" for i in range(48)]
    results = [ok for i in range(0, len(keys), 8) for ok in put(store, keys[i : i + 8])]
    assert not all(results)  # some pages found no room in time: False, SGLang keeps them
    refused = [k for k, ok in zip(keys, results, strict=True) if not ok]
    assert store.exists_prefix(refused[:1]) == 0
    stored = [k for k, ok in zip(keys, results, strict=True) if ok]
    present = [k for k in stored if store.exists_prefix([k])]
    assert all(get(store, present))
    assert store.stats()["placement"]["local_put_failed"] == len(refused)


def test_dram_only_store_drops_by_policy_and_never_overfills(make_store: Any) -> None:
    store = make_store("lru", dram_mib=1, ssd=False)
    keys = [f"o{i:03d}" for i in range(40)]
    for i in range(0, len(keys), 4):
        assert all(put(store, keys[i : i + 4]))
    stats = store.stats()
    assert stats["placement"]["dropped"] == 40 - 16 and stats["dram"]["entries"] == 16
    assert store.exists_prefix(keys[-16:]) == 16 and store.exists_prefix(keys[:1]) == 0


@pytest.mark.parametrize("name", ["lru", "reuse"])
def test_sets_into_a_full_dram_only_store_are_not_counted_as_refused(make_store: Any, name: str) -> None:
    """The steady state of a DRAM-only cache: every set of new pages evicts older ones. Each page
    is stored (and read back exact), the DRAM tier counts no page it had no slot for (none was
    refused), and each page is copied once."""
    store = make_store(name, dram_mib=2, ssd=False)
    for b in range(12):
        keys = [f"w{b:02d}-{i:02d}" for i in range(16)]  # 1 MiB per set: half the DRAM
        assert all(put(store, keys)), b
        assert all(get(store, keys)), b
    dram = store.stats()["dram"]
    assert dram["rejected_no_space"] == 0
    assert dram["puts"] == 12 * 16 and store.stats()["placement"]["dropped"] == 12 * 16 - dram["entries"]


def test_ssd_only_store_writes_in_the_call(make_store: Any) -> None:
    store = make_store("reuse", dram_mib=0)
    keys = [f"s{i:03d}" for i in range(8)]
    assert all(put(store, keys))
    assert all(store.ssd.contains(k) for k in keys)
    assert all(get(store, keys))


def test_pages_recovered_from_ssd_are_adopted_by_the_placement(make_store: Any, tmp_path: Any) -> None:
    first = make_store("lru", dram_mib=0)
    keys = [f"a{i:03d}" for i in range(8)]
    assert all(put(first, keys))
    first.close()
    engine = SsdEngine(
        SsdOptions(dirs=(str(tmp_path / "ssd0"),), capacity_bytes=32 * MiB, region_size=MiB, direct_io="off")
    )
    again = TieredStore(
        [DramTier(2 * MiB, MiB, prefault=False), SsdTier(engine)], lambda: make_policy("lru"), StoreOptions()
    )
    try:
        assert again.exists_prefix(keys) == 8
        assert all(get(again, keys))
        assert again.stats()["placement"]["resident"] == 8
        assert all(again.dram.contains(k) for k in keys)  # promoted on the SSD hit
    finally:
        again.close()


@pytest.mark.parametrize("ssd", [True, False])
def test_a_page_no_local_tier_can_hold_is_refused_without_moving_the_others(
    make_store: Any, ssd: bool
) -> None:
    """A page larger than DRAM's slab (1 MiB here) and than an SSD region: refused up front
    (False, SGLang keeps it), and no stored page is demoted or dropped to make room for it."""
    store = make_store("lru", dram_mib=1, ssd=ssd, dram_high=1.0, dram_low=0.9)
    keys = [f"h{i:03d}" for i in range(15)]  # 15 of DRAM's 16 page slots
    assert all(put(store, keys)) and store.flush()
    before = store.stats()
    big = np.zeros(2 * MiB, np.uint8)
    assert store.put_batch(["huge"], [parts_of(big)]) == [False]
    assert store.flush()
    assert store.exists_prefix(["huge"]) == 0
    assert store.dram.contains_batch(keys) == [True] * len(keys)  # nobody left DRAM for it
    after = store.stats()
    assert after["placement"]["resident"] == before["placement"]["resident"] == len(keys)
    assert after["placement"].get("dropped", 0) == before["placement"].get("dropped", 0)
    assert after["dram"]["rejected_too_large"] == 1  # each tier that cannot hold it says so
    if ssd:
        assert after["ssd"]["rejected"]["too_large"] == 1
        assert after["ssd"]["background"].get("demoted", 0) == before["ssd"]["background"].get("demoted", 0)
    assert all(get(store, keys))


def test_fits_is_what_each_tier_accepts_at_its_size_limit(make_store: Any) -> None:
    """The store refuses up front by ``fits``; each tier's own put draws the line at the same byte."""
    store = make_store("lru", dram_mib=4)
    dram, ssd = store.dram, store.ssd
    assert dram is not None and ssd is not None
    limit = ssd.engine.options.max_object_bytes
    for n in (limit - 1, limit, limit + 1, limit + 4096):
        obj = np.ones(n, np.uint8)
        assert ssd.put_batch([(f"s{n}", [memoryview(obj)], DEFAULT_CONTEXT)]) == [ssd.fits(n)], n
    edge = next(n for n in range(MiB, MiB // 2, -64) if dram.fits(n))  # the largest DRAM object
    for n in (edge - 64, edge, edge + 1, edge + 64):
        obj = np.ones(n, np.uint8)
        assert dram.put_batch([(f"d{n}", [memoryview(obj)], DEFAULT_CONTEXT)]) == [dram.fits(n)], n
    assert dram.fits(edge) and not dram.fits(edge + 1)
    assert ssd.fits(limit) and not ssd.fits(limit + 1)


def _spy_contains(tier: Any) -> list[list[str]]:
    """Record the keys each ``contains_batch`` call of ``tier`` is asked for."""
    asked: list[list[str]] = []
    inner = tier.contains_batch

    def spy(keys: Any, fps: Any = None) -> list[bool]:
        asked.append(list(keys))
        return inner(keys, fps)

    tier.contains_batch = spy
    return asked


@pytest.mark.parametrize("dram_mib", [1, 8])
def test_existence_asks_the_local_tier_holding_more_first_and_the_other_only_for_the_rest(
    make_store: Any, dram_mib: int
) -> None:
    store = make_store("lru", dram_mib=dram_mib)  # 1 MiB: most pages demoted; 8 MiB: all in DRAM
    keys = [f"e{i:04d}" for i in range(48)]
    for i in range(0, len(keys), 8):
        assert all(put(store, keys[i : i + 8]))
        assert store.flush()
    in_dram = [store.dram.contains(k) for k in keys]
    on_ssd = [store.ssd.contains(k) for k in keys]
    bigger, smaller = (store.ssd, store.dram) if sum(on_ssd) > sum(in_dram) else (store.dram, store.ssd)
    assert (bigger is store.ssd) == (dram_mib == 1)
    asked_big, asked_small = _spy_contains(bigger), _spy_contains(smaller)
    query = [*keys, "absent-1", "absent-2"]
    flags = store.exists_batch(query)
    assert flags == [d or s for d, s in zip(in_dram, on_ssd, strict=True)] + [False, False]
    assert asked_big == [query]
    held_by_big = set(k for k, f in zip(query, bigger.contains_batch(query), strict=True) if f)
    assert asked_small == [[k for k in query if k not in held_by_big]]
    assert store.exists_prefix(query) == flags.index(False)
