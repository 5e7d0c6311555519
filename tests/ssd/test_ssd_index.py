"""The SSD index's entries: a ``Location`` packs every field exactly (the widths the disk format
allows), refuses what does not fit instead of corrupting a neighbour field, and read counts
belong to the entry, not to the key: a new entry of the key starts at zero."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hicache_mooncake.ssd.index import Index, Location


def test_every_field_round_trips_at_its_limits() -> None:
    rng = random.Random(7)
    cases = [(0, 0, 0, 0, 0), ((1 << 32) - 1, (1 << 64) - 1, (1 << 48) - 1, (1 << 40) - 1, (1 << 64) - 1)]
    cases += [
        (rng.randrange(1 << 32), rng.randrange(1 << 64), rng.randrange(1 << 48), rng.randrange(1 << 40), rng.randrange(1 << 64))
        for _ in range(2000)
    ]  # fmt: skip
    for region, gen, offset, length, seq in cases:
        loc = Location(region, gen, offset, length, seq)
        assert (loc.region, loc.gen, loc.offset, loc.length, loc.seq) == (region, gen, offset, length, seq)
        assert loc  # even the all-zero location is a location
    assert "r=3" in repr(Location(3, 1, 4096, 100, 9))


@pytest.mark.parametrize(
    "fields",
    [(1 << 32, 0, 0, 0, 0), (0, 1 << 64, 0, 0, 0), (0, 0, 1 << 48, 0, 0), (0, 0, 0, 1 << 40, 0), (-1, 0, 0, 0, 0), (0, 0, 0, 0, -1)],
)  # fmt: skip
def test_a_field_that_does_not_fit_is_refused(fields: tuple[int, int, int, int, int]) -> None:
    with pytest.raises(ValueError, match="location out of range"):
        Location(*fields)


def test_read_counts_belong_to_the_entry() -> None:
    index = Index()
    index.set("k", Location(1, 1, 0, 10, 1))
    index.hit("k")
    index.hit("k")
    assert index.hits("k") == 2 and index.hits("other") == 0
    index.set("k", Location(2, 1, 0, 10, 2))  # rewritten (or reinserted): a new entry
    assert index.hits("k") == 0
    index.hit("k")
    index.pop("k")
    index.set("k", Location(3, 1, 0, 10, 3))
    assert index.hits("k") == 0
    index.hit("k")
    index.load(["k"], [Location(4, 1, 0, 10, 4)])
    assert index.hits("k") == 0 and index.get("k") == Location(4, 1, 0, 10, 4)
    index.recount()
    assert index.bytes == 10 and len(index) == 1


def test_a_region_of_locations_is_packed_as_one_at_a_time_and_checked_the_same() -> None:
    offsets, lengths, seqs = (
        [4096, 12288, 1 << 30],
        [100, 8192, 4096],
        [(2 << 40) | 5, (2 << 40) | 6, (2 << 40) | 9],
    )

    def u64(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.uint64)

    packed = Location.pack_many(7, (2 << 40) | 1, u64(offsets), u64(lengths), u64(seqs))
    one = [Location(7, (2 << 40) | 1, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)]
    assert packed == one
    index = Index()
    index.load(["a", "b", "c"], packed)
    index.recount()
    got = [index.get(k) for k in "abc"]
    assert got == one and all(type(loc) is Location for loc in got)  # handed out as Locations
    assert [(loc.region, loc.offset, loc.length, loc.seq) for loc in got if loc] == [
        (7, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)
    ]
    assert index.bytes == sum(lengths) and dict(index.items()) == dict(zip("abc", one, strict=True))
    assert index.pop_if("a", 7, (2 << 40) | 1) == one[0] and index.pop("b") == one[1]
    assert index.set("c", one[0]) == one[2] and index.bytes == lengths[0]
    assert Location.pack_many(7, 1, u64([]), u64([]), u64([])) == []
    with pytest.raises(ValueError, match="location out of range"):
        Location.pack_many(7, 1, u64([0, 1 << 48]), u64([1, 1]), u64([1, 2]))
    with pytest.raises(ValueError, match="location out of range"):
        Location.pack_many(7, 1, u64([0, 4096]), u64([1, 1 << 40]), u64([1, 2]))
    with pytest.raises(ValueError, match="location out of range"):
        Location.pack_many(1 << 32, 1, u64([0]), u64([1]), u64([1]))
    with pytest.raises(ValueError, match="differ in length"):
        Location.pack_many(7, 1, u64([0]), u64([1, 2]), u64([1]))
