"""A set that needs a slot of a size class DRAM has no slab for takes out only pages that make
room (issue 48 follow-ups, item 4): a whole slab of another size when one can be emptied, nothing
when none can. Before, the store evicted least recently used pages of any size by bytes, which
freed no slot of the class: the set was refused and the pages were gone for nothing."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT, make_policy
from hicache_mooncake.tiers.policy.dram_room import RoomPlan, choose
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

KiB, MiB = 1 << 10, 1 << 20
SMALL = 64 * KiB
SLAB = 4 * MiB
SMALL_KEYS = [f"p{i:03d}" for i in range(256)]  # 4 slabs of 64 pages: DRAM is full


def parts(nbytes: int, fill: int) -> list[memoryview]:
    return [memoryview(np.full(nbytes, fill, np.uint8))]


@pytest.fixture
def full() -> Iterator[TieredStore]:
    """The reproduction: 16 MiB of DRAM in 4 MiB slabs, every slab holding 64 KiB pages."""
    store = TieredStore(
        [DramTier(16 * MiB, SLAB, prefault=False)], lambda: make_policy("lru"), StoreOptions(timeout_s=2.0)
    )
    for i in range(0, 256, 32):
        assert all(store.put_batch(SMALL_KEYS[i : i + 32], [parts(SMALL, i % 251) for _ in range(32)]))
    assert store.dram is not None and all(store.dram.contains_batch(SMALL_KEYS))
    yield store
    store.close()


def slab_of(dram: DramTier, key: str) -> int:
    (loc,) = dram.locate([key])
    assert loc is not None
    return loc.offset // SLAB


def test_a_larger_page_empties_one_slab_and_is_stored(full: TieredStore) -> None:
    dram = full.dram
    assert dram is not None
    slabs = {k: slab_of(dram, k) for k in SMALL_KEYS}
    assert full.put_batch(["big"], [parts(MiB, 7)]) == [True]
    buf = np.zeros(MiB, np.uint8)
    assert full.get_batch_into(["big"], [[memoryview(buf)]]) == [True] and buf[0] == 7
    gone = [k for k, held in zip(SMALL_KEYS, dram.contains_batch(SMALL_KEYS), strict=True) if not held]
    assert len(gone) == 64  # one slab's worth, and exactly the pages of one slab
    assert len({slabs[k] for k in gone}) == 1
    assert gone == SMALL_KEYS[:64]  # the least recently used slab (the policy's order)


def test_nothing_is_taken_out_by_the_room_step_when_no_slab_can_be_emptied(full: TieredStore) -> None:
    dram = full.dram
    assert dram is not None
    by_slab: dict[int, str] = {}
    for k in reversed(SMALL_KEYS):  # one recent page per slab, pinned by a reader
        by_slab.setdefault(slab_of(dram, k), k)
    pinned = [p for p in dram.pin_entries(list(by_slab.values())) if p is not None]
    assert len(pinned) == 4
    try:
        assert full.put_batch(["big"], [parts(MiB, 7)]) == [False]
    finally:
        dram.release(pinned)
    held = sum(dram.contains_batch(SMALL_KEYS))
    # the placement's byte accounting gave 1 MiB (16 pages) to the new page before its copy was
    # tried; the room step itself took nothing (it took 16 more pages, for nothing, before)
    assert held == 256 - 16
    assert not dram.contains("big")


def test_a_page_of_the_same_class_is_taken_before_a_whole_slab() -> None:
    plan = RoomPlan(lambda n: n == 1, 4, {"a": 0, "b": 0}, {0: ["a", "b"]})
    assert choose(plan, [("x", 2), ("s", 1), ("a", 2), ("b", 2)], 1) == ["s"]
    assert choose(plan, [("x", 2), ("a", 2), ("s", 1), ("b", 2)], 1) == ["a", "b"]
    assert choose(plan, [("x", 2), ("y", 2)], 1) == []  # nothing makes room: nothing is taken
    assert choose(plan, [("s", 1), ("s", 1), ("t", 1)], 2) == ["s", "t"]  # a key counts once


def test_the_usual_full_dram_of_one_page_size_is_not_walked() -> None:
    dram = DramTier(4 * MiB, MiB, prefault=False)
    try:
        assert dram.room_plan(SMALL) is None  # free slabs: any page taken out helps
        ctx = DEFAULT_CONTEXT._replace(size=SMALL)
        assert all(dram.put_batch([(f"k{i}", parts(SMALL, 1), ctx) for i in range(64)]))
        # every slab serves its class: any page taken out makes room, so the placement frees
        # bytes (its policy's victims, or its least recent DRAM pages demoted), nothing is walked
        assert dram.room_plan(SMALL) is None
        big = dram.room_plan(MiB)
        assert big is not None and len(big.slab_keys) == 4 and big.per_slab == 1
        assert big.same_class(MiB) and not big.same_class(SMALL)
        too_large = dram.room_plan(8 * MiB)  # no slot holds it: nothing could make room
        assert too_large is not None and too_large.per_slab == 0 and not too_large.same_class(MiB)
    finally:
        dram.close()
