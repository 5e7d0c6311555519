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
