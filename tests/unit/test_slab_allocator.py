import random

import pytest

from hicache_mooncake.tiers.slab_allocator import SlabAllocator, slot_size_for


def test_slots_are_page_aligned_and_unique():
    alloc = SlabAllocator(capacity=1 << 20, slab_size=256 << 10)
    offsets = [alloc.alloc(5000) for _ in range(200)]
    got = [o for o in offsets if o is not None]
    assert len(got) == (1 << 20) // 8192
    assert len(set(got)) == len(got)
    assert all(o % 4096 == 0 for o in got)
    assert alloc.used_bytes == len(got) * 8192


def test_empty_slab_returns_to_pool_for_another_size_class():
    alloc = SlabAllocator(capacity=512 << 10, slab_size=256 << 10)
    small = [alloc.alloc(4096) for _ in range(128)]
    assert None not in small and alloc.alloc(4096) is None
    assert alloc.alloc(200_000) is None  # no slab left for the big class
    for off in small[:64]:  # one whole slab's worth (allocated in order)
        alloc.free(off, 4096)
    assert alloc.free_slab_count == 1
    assert alloc.alloc(200_000) is not None


def test_objects_larger_than_a_slab_are_refused():
    alloc = SlabAllocator(capacity=1 << 20, slab_size=256 << 10)
    assert not alloc.fits((256 << 10) + 1)
    assert alloc.alloc((256 << 10) + 1) is None


def test_random_alloc_free_keeps_accounting_exact():
    rng = random.Random(7)
    alloc = SlabAllocator(capacity=8 << 20, slab_size=1 << 20)
    live: dict[int, int] = {}
    for _ in range(5000):
        if live and rng.random() < 0.5:
            off = rng.choice(list(live))
            alloc.free(off, live.pop(off))
        else:
            size = rng.choice([4096, 9000, 65536, 300_000])
            off = alloc.alloc(size)
            if off is not None:
                assert off not in live
                live[off] = size
    assert alloc.used_bytes == sum(slot_size_for(s) for s in live.values())


def test_bad_geometry_is_refused():
    with pytest.raises(ValueError, match="multiple of 4096"):
        SlabAllocator(1 << 20, 1000)
    with pytest.raises(ValueError, match="holds no slab"):
        SlabAllocator(4096, 8192)


def test_alloc_many_hands_out_what_one_by_one_allocs_would():
    """Fuzz: two allocators, one allocating in batches, one slot at a time, with the same frees
    in between, stay identical (offsets, order, accounting), through slab exhaustion."""
    rng = random.Random(11)
    batched = SlabAllocator(capacity=4 << 20, slab_size=256 << 10)
    single = SlabAllocator(capacity=4 << 20, slab_size=256 << 10)
    live: list[tuple[int, int]] = []
    for _ in range(400):
        if live and rng.random() < 0.4:
            for _ in range(rng.randint(1, len(live))):
                off, size = live.pop(rng.randrange(len(live)))
                batched.free(off, size)
                single.free(off, size)
            continue
        size = rng.choice([4096, 5000, 65536, 200_000])
        count = rng.randint(0, 40)
        got = batched.alloc_many(size, count)
        want = [o for o in (single.alloc(size) for _ in range(count)) if o is not None]
        assert got == want
        live.extend((o, size) for o in got)
        assert batched.used_bytes == single.used_bytes
        assert batched.free_slab_count == single.free_slab_count
    assert batched.alloc_many((256 << 10) + 1, 3) == []  # larger than a slab: none


def _state(alloc: SlabAllocator) -> tuple[object, ...]:
    classes = {
        size: (list(c.free_by_slab.items()), list(c.used_by_slab.items()))
        for size, c in alloc.classes.items()
    }
    retired = {slab: (size, list(free)) for slab, (size, free) in alloc._retired_free.items()}
    return classes, list(alloc._free_slabs), retired, list(alloc.released), alloc.used_bytes


def test_free_many_leaves_what_one_by_one_frees_leave():
    """Fuzz: frees of one size class in batches (the DRAM tier dropping a call's victims) and the
    same frees one at a time leave identical allocators: free lists and their order, slabs
    given back in the order they emptied, retired slabs (the arena shrunk meanwhile) listed as
    released; and what both hand out next is the same."""
    rng = random.Random(3)
    batched = SlabAllocator(capacity=2 << 20, slab_size=128 << 10, max_capacity=4 << 20)
    single = SlabAllocator(capacity=2 << 20, slab_size=128 << 10, max_capacity=4 << 20)
    live: dict[int, list[int]] = {}
    for step in range(600):
        if step % 150 == 75:  # shrink, later grow back: slots in retired slabs are freed too
            limit = rng.choice((8, 12, 16))
            assert batched.set_slab_limit(limit) == single.set_slab_limit(limit)
        size = rng.choice([4096, 9000, 65536])
        if live.get(size) and rng.random() < 0.45:
            slots = live[size]
            rng.shuffle(slots)
            n = rng.randint(1, len(slots))
            freed, live[size] = slots[:n], slots[n:]
            batched.free_many(freed, size)
            for off in freed:
                single.free(off, size)
        else:
            count = rng.randint(1, 30)
            got = batched.alloc_many(size, count)
            assert got == single.alloc_many(size, count)
            live.setdefault(size, []).extend(got)
        assert _state(batched) == _state(single), step


def test_free_many_refuses_a_slot_not_in_use_and_changes_nothing():
    alloc = SlabAllocator(capacity=1 << 20, slab_size=256 << 10)
    got = alloc.alloc_many(4096, 3)
    before = _state(alloc)
    with pytest.raises(ValueError, match="slots freed"):
        alloc.free_many([got[0], got[0] + (256 << 10)], 4096)  # the second: a slab never used
    assert _state(alloc) == before
