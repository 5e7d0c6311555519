"""The SSD index's entries: a ``Location`` packs every field exactly (the widths the disk format
allows), refuses what does not fit instead of corrupting a neighbour field, and read counts
belong to the entry, not to the key: a new entry of the key starts at zero."""

from __future__ import annotations

import random

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
    many = Location.many(7, (2 << 40) | 1, offsets, lengths, seqs)
    one = [Location(7, (2 << 40) | 1, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)]
    assert many == one and all(type(loc) is Location for loc in many)
    assert [(loc.region, loc.offset, loc.length, loc.seq) for loc in many] == [
        (7, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)
    ]
    assert Location.many(7, 1, [], [], []) == []
    for bad in ([0, 1 << 48], [-4096, 0]):
        with pytest.raises(ValueError, match="location out of range"):
            Location.many(7, 1, bad, [1, 1], [1, 2])
    with pytest.raises(ValueError, match="location out of range"):
        Location.many(7, 1, [0, 4096], [1, 1 << 40], [1, 2])
    with pytest.raises(ValueError, match="differ in length"):
        Location.many(7, 1, [0], [1, 2], [1])
