"""The DRAM tier's slab allocator (native ``SlabAllocator``): its promises, and the native
allocator held state for state to its Python reference model (``slab_allocator_reference``, the
product's allocator before it moved into the native core) over seeded random streams of every
call, resizes and resets included."""

from __future__ import annotations

import random

import pytest
from slab_allocator_reference import SlabAllocator as ReferenceAllocator

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
    return alloc.state()


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
    with pytest.raises(ValueError, match="slab 1 holds no slots of 4096 bytes"):
        alloc.free_many([got[0], got[0] + (256 << 10)], 4096)  # the second: a slab never used
    assert _state(alloc) == before


@pytest.mark.parametrize(
    ("offsets", "nbytes", "error"),
    [
        ([4096, 4096], 4096, "not in use"),  # one slot listed twice
        ([12288], 4096, "not in use"),  # a slot never handed out
        ([2048], 4096, "not the start of a slot"),
        ([4096], 8192, "no slots of 8192 bytes were handed out"),
        ([1 << 30], 4096, "outside the arena"),
        ([-1], 4096, "offset must be in"),
    ],
)
def test_a_bad_free_names_what_is_wrong_and_changes_nothing(
    offsets: list[int], nbytes: int, error: str
) -> None:
    """A free the allocator did not hand out (twice, between slots, of another class, outside
    the arena) would hand one slot to two objects later: refused, nothing changed, by one slot
    (``free``) or in a batch (``free_many``)."""
    alloc = SlabAllocator(capacity=1 << 20, slab_size=256 << 10)
    alloc.alloc_many(4096, 3)
    before = _state(alloc)
    with pytest.raises(ValueError, match=error):
        alloc.free_many(offsets, nbytes)
    if len(offsets) == 1:
        with pytest.raises(ValueError, match=error):
            alloc.free(offsets[0], nbytes)
    assert _state(alloc) == before
    alloc.free_many([0, 4096, 8192], 4096)  # the real slots still free normally
    assert alloc.used_bytes == 0 and alloc.free_slab_count == 4


def test_bad_sizes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        SlabAllocator(1 << 20, 256 << 10).alloc(-1)
    huge = SlabAllocator(1 << 20, 256 << 10)  # more than any slab (past 2**64 with a header added)
    assert not huge.fits((1 << 64) + 64) and huge.alloc(1 << 70) is None
    assert huge.alloc_batch([1 << 64, 4096]) == ([None, 0], 1) and huge.alloc_many(1 << 64, 3) == []
    with pytest.raises(TypeError, match="nbytes must be an int"):
        SlabAllocator(1 << 20, 256 << 10).alloc_batch([4096, "4096"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="capacity must be in"):
        SlabAllocator(-1, 4096)
    with pytest.raises(ValueError, match="slab count must be in 1..4"):
        SlabAllocator(1 << 20, 256 << 10).set_slab_limit(5)


def test_alloc_batch_takes_each_run_as_alloc_many_and_counts_the_too_large() -> None:
    batched = SlabAllocator(capacity=1 << 20, slab_size=256 << 10)
    single = ReferenceAllocator(capacity=1 << 20, slab_size=256 << 10)
    sizes = [4096] * 70 + [300_000] * 2 + [65536] * 20 + [4096] * 3
    offsets, too_large = batched.alloc_batch(sizes)
    want: list[int | None] = []
    for size, count in ((4096, 70), (300_000, 2), (65536, 20), (4096, 3)):
        got: list[int | None] = list(single.alloc_many(size, count))
        want += got + [None] * (count - len(got))
    assert offsets == want and too_large == 2
    assert None in offsets[72:92]  # the arena ran out for the 64 KiB run
    assert batched.state() == single.state()


def test_the_native_allocator_matches_its_reference_model() -> None:
    """Seeded random streams of every call (single and batched allocations and frees, resizes
    down and up with slots in retired slabs, released slabs taken, resets) leave the native
    allocator and the reference model in the same state after each step, and answer alike."""
    for seed in range(6):
        rng = random.Random(seed)
        slab = rng.choice((64 << 10, 128 << 10, 256 << 10))
        args = (slab * rng.randint(2, 8), slab, slab * 10)
        native, ref = SlabAllocator(*args), ReferenceAllocator(*args)
        live: list[tuple[int, int]] = []
        sizes = [4096, 5000, 8192, 20000, 65536, slab, slab + 1]
        for step in range(700):
            op = rng.random()
            if op < 0.3:
                size = rng.choice(sizes)
                count = rng.randint(-1, 40)
                got = native.alloc_many(size, count)
                assert got == ref.alloc_many(size, count), (seed, step)
                live += [(o, size) for o in got]
            elif op < 0.4:
                size = rng.choice(sizes)
                got1 = native.alloc(size)
                assert got1 == ref.alloc(size), (seed, step)
                if got1 is not None:
                    live.append((got1, size))
            elif op < 0.5:
                batch = [rng.choice(sizes[:5]) for _ in range(rng.randint(1, 8))]
                batch = [s for s in batch for _ in range(rng.randint(1, 6))]
                offsets, _too_large = native.alloc_batch(batch)
                want = []
                for size in batch:  # each run as alloc_many: the same as one by one here
                    want.append(ref.alloc(size))
                assert offsets == want, (seed, step)
                live += [(o, s) for o, s in zip(offsets, batch, strict=True) if o is not None]
            elif op < 0.75 and live:
                rng.shuffle(live)
                size = live[0][1]
                same = [o for o, s in live if slot_size_for(s) == slot_size_for(size)]
                freed = same[: rng.randint(1, len(same))]
                if len(freed) == 1 and rng.random() < 0.5:
                    native.free(freed[0], size)
                    ref.free(freed[0], size)
                else:
                    native.free_many(freed, size)
                    ref.free_many(freed, size)
                gone = set(freed)
                live = [(o, s) for o, s in live if o not in gone]
            elif op < 0.85:
                limit = rng.randint(1, native.max_slabs)
                assert native.set_slab_limit(limit) == ref.set_slab_limit(limit), (seed, step)
            elif op < 0.92:
                assert native.take_released() == ref.take_released()
            elif op < 0.93:
                native.reset()
                ref.reset()
                live = []
            else:
                assert native.largest_class() == ref.largest_class()
                size = rng.choice(sizes)
                assert native.fits(size) == ref.fits(size)
            assert native.state() == ref.state(), (seed, step)
            assert (native.used_bytes, native.free_slab_count, native.retired_in_use, native.capacity) == (
                ref.used_bytes,
                ref.free_slab_count,
                ref.retired_in_use,
                ref.capacity,
            )
            for offset, _size in live[:5]:
                assert native.is_retired(offset) == ref.is_retired(offset)
