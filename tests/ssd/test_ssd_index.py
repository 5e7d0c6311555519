"""The SSD index's entries: a ``Location`` packs every field exactly (the widths the disk format
allows), refuses what does not fit instead of corrupting a neighbour field, and read counts
belong to the entry, not to the key: a new entry of the key starts at zero."""

from __future__ import annotations

import gc
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


def u64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_a_region_loaded_from_its_summary_is_read_as_its_locations_and_checked_the_same() -> None:
    offsets, lengths, seqs = (
        [4096, 12288, 1 << 30],
        [100, 8192, 4096],
        [(2 << 40) | 5, (2 << 40) | 6, (2 << 40) | 9],
    )
    gen = (2 << 40) | 1
    one = [Location(7, gen, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)]
    index = Index()
    index.hit("a")
    index.load_region(["a", "b", "c"], 7, gen, u64(offsets), u64(lengths), u64(seqs))
    index.recount()
    got = [index.get(k) for k in "abc"]
    assert got == one and all(type(loc) is Location for loc in got)  # handed out as Locations
    assert index.hits("a") == 0 and index.bytes == sum(lengths)
    assert dict(index.items()) == dict(zip("abc", one, strict=True))
    assert index.pop_if("a", 7, gen + 1) is None and index.pop_if("a", 8, gen) is None
    assert index.pop_if("a", 7, gen) == one[0] and index.pop("b") == one[1]
    assert index.set("c", one[0]) == one[2] and index.bytes == lengths[0]
    assert index._loads == [None]  # no entry refers to the region's columns: they are dropped
    index.load_region([], 7, gen, u64([]), u64([]), u64([]))
    for bad in (
        (u64([0, 1 << 48]), u64([1, 1]), u64([1, 2])),
        (u64([0, 4096]), u64([1, 1 << 40]), u64([1, 2])),
    ):
        with pytest.raises(ValueError, match="location out of range"):
            index.load_region(["x", "y"], 7, 1, *bad)
    with pytest.raises(ValueError, match="location out of range"):
        index.load_region(["x"], 1 << 32, 1, u64([0]), u64([1]), u64([1]))
    with pytest.raises(ValueError, match="differ in length"):
        index.load_region(["x"], 7, 1, u64([0]), u64([1, 2]), u64([1]))
    assert "x" not in index and "y" not in index  # a refused region adds nothing


@pytest.mark.parametrize("seed", range(4))
def test_loaded_written_and_removed_entries_answer_as_a_plain_dict_of_locations(seed: int) -> None:
    """Regions loaded at open (keys shared between regions included), then writes, pops and
    reclaims in any order: every answer equals a dict of Locations, and a region's columns are
    dropped only once nothing refers to them (a lookup through a dropped load would fail)."""
    rng = random.Random(seed)
    index, model = Index(), {}
    keys = [f"k{i}" for i in range(400)]
    for region in range(12):
        chosen = rng.sample(keys, rng.randrange(0, 80))
        cols = (
            [rng.randrange(1 << 30) for _ in chosen],
            [rng.randrange(1, 1 << 20) for _ in chosen],
            [rng.randrange(1 << 50) for _ in chosen],
        )
        index.load_region(chosen, region, 100 + region, *map(u64, cols))
        model.update(
            {k: Location(region, 100 + region, o, n, s) for k, o, n, s in zip(chosen, *cols, strict=True)}
        )
    for step in range(3000):
        key, op = rng.choice(keys), rng.random()
        if op < 0.3:
            loc = Location(50 + step % 7, 1, rng.randrange(1 << 30), rng.randrange(1, 1 << 20), step)
            assert index.set(key, loc) == model.get(key)
            model[key] = loc
        elif op < 0.5:
            assert index.pop(key) == model.pop(key, None)
        elif op < 0.7 and key in model:
            cur = model[key]
            region, gen = (cur.region, cur.gen) if rng.random() < 0.7 else (cur.region, cur.gen + 1)
            got = index.pop_if(key, region, gen)
            assert got == (model.pop(key) if gen == cur.gen else None)
        else:
            assert index.get(key) == model.get(key) and (key in index) == (key in model)
    assert dict(index.items()) == model
    index.recount()
    assert index.bytes == sum(loc.length for loc in model.values()) and len(index) == len(model)
    live = {~v >> 32 for v in index._map.values() if v < 0}  # references (module docstring)
    assert all(index._loads[slot] is not None for slot in live)
    index.clear()
    assert not len(index) and index._loads == []


def test_indexed_entries_leave_nothing_for_the_garbage_collector_to_visit() -> None:
    """A full collection visits every tracked object with the GIL held; an index of millions of
    entries must not add one per entry (an ``int`` subclass instance is tracked, a plain int not)."""
    index = Index()
    gc.collect()
    before = len(gc.get_objects())
    for i in range(10_000):
        index.set(f"k{i}", Location(3, 7, i * 8192, 4096, i + 1))
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    got = index.get("k1234")
    assert type(got) is Location and (got.region, got.gen, got.offset, got.length, got.seq) == (
        3, 7, 1234 * 8192, 4096, 1235,
    )  # fmt: skip
    assert index.bytes == 10_000 * 4096
    index.recount()
    assert index.bytes == 10_000 * 4096
