"""Resizing the DRAM tier at runtime: slabs past the new size take no new object, entries move out
of them without a reader ever seeing other bytes, and each emptied slab gives its memory back."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT
from hicache_mooncake.tiers.slab_allocator import SlabAllocator

MiB = 1 << 20
OBJ = 64 << 10


def value(key: str) -> np.ndarray:
    return np.full(OBJ, hash(key) & 0xFF, dtype=np.uint8) ^ np.arange(OBJ, dtype=np.uint8)


def put(tier: DramTier, keys: list[str]) -> list[bool]:
    return tier.put_batch([(k, [memoryview(value(k))], DEFAULT_CONTEXT) for k in keys])


def test_allocator_retires_slabs_past_the_limit_and_revives_them():
    alloc = SlabAllocator(4 * MiB, MiB, max_capacity=8 * MiB)
    assert alloc.max_slabs == 8 and alloc.capacity == 4 * MiB
    offsets = [alloc.alloc(OBJ) for _ in range(4 * 16)]  # every slot of 4 slabs
    assert None not in offsets and alloc.alloc(OBJ) is None
    alloc.set_slab_limit(2)
    assert alloc.capacity == 2 * MiB and alloc.retired_in_use == 2
    retired = [o for o in offsets if o is not None and alloc.is_retired(o)]
    assert len(retired) == 32
    alloc.free(retired[0], OBJ)
    assert alloc.alloc(OBJ) is None  # a freed slot of a retired slab is not handed out again
    for o in retired[1:16]:
        alloc.free(o, OBJ)
    assert alloc.take_released() == [retired[0] // MiB]  # its last slot freed: memory may go
    alloc.set_slab_limit(6)  # grow past the start: the retired slab in use is usable again
    got = {alloc.alloc(OBJ) for _ in range(16 + 32)}
    assert None not in got and all(not alloc.is_retired(o) for o in got if o is not None)
    with pytest.raises(ValueError, match="1..8"):
        alloc.set_slab_limit(9)


def test_relocate_moves_entries_out_of_retired_slabs_with_the_same_bytes():
    tier = DramTier(4 * MiB, MiB, prefault=False, max_capacity=8 * MiB)
    keys = [f"k{i}" for i in range(40)]
    assert all(put(tier, keys))
    tier.remove_batch(keys[:24])  # room below the new size
    assert tier.resize(2 * MiB) == 2 * MiB
    moving = tier.retired_keys()
    assert moving and tier.retired_slabs_in_use > 0
    assert all(tier.relocate(moving))
    assert tier.retired_slabs_in_use == 0 and tier.retired_keys() == []
    for k in keys[24:]:
        out = np.zeros(OBJ, np.uint8)
        assert tier.get_into(k, [memoryview(out)]) and np.array_equal(out, value(k))
    assert tier.stats()["capacity_bytes"] == 2 * MiB and tier.stats()["relocated"] == len(moving)
    tier.close()


def test_readers_during_relocation_never_see_other_bytes():
    tier = DramTier(8 * MiB, MiB, prefault=False)
    keys = [f"r{i}" for i in range(48)]
    assert all(put(tier, keys))
    stop = threading.Event()
    wrong: list[str] = []

    def reader() -> None:
        out = np.zeros(OBJ, np.uint8)
        while not stop.is_set():
            for k in keys:
                if tier.get_into(k, [memoryview(out)]) and not np.array_equal(out, value(k)):
                    wrong.append(k)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for size in (6, 4, 8, 3, 8):
        tier.resize(size * MiB)
        for _ in range(50):
            if not tier.retired_slabs_in_use:
                break
            tier.relocate(tier.retired_keys())
    stop.set()
    for t in threads:
        t.join()
    assert not wrong
    assert all(tier.contains(k) for k in keys)
    tier.close()


def test_growth_past_max_capacity_is_refused():
    tier = DramTier(2 * MiB, MiB, prefault=False)
    with pytest.raises(ValueError, match="1 to 2 slabs"):
        tier.resize(4 * MiB)
    tier.close()
