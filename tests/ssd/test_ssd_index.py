"""The SSD index (a native fingerprint table): a ``Location`` packs every field exactly (the
widths the disk format allows) and refuses what does not fit instead of corrupting a neighbour
field; read counts belong to the entry, not to the key (a new entry of the key starts at zero);
and seeded random sequences of writes, lookups, removes, region reclaims, clears and reopens
(the index rebuilt from region summaries, as after a crash) answer exactly as the former
pure-Python dict index does (``reference_index.py``)."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from reference_index import Index as ReferenceIndex

from hicache_mooncake.ssd.index import MAX_HITS, Index, Location


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
    for _ in range(MAX_HITS + 5):
        index.hit("k")
    assert index.hits("k") == MAX_HITS and index.get("k") == Location(4, 1, 0, 10, 4)  # saturates
    index.recount()
    assert index.bytes == 10 and len(index) == 1


def u64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_a_region_loaded_from_its_summary_is_read_as_its_locations_and_checked_the_same() -> None:
    offsets, lengths, seqs = (
        [4096, 12288, (1 << 48) - 4096],
        [100, 8192, (1 << 40) - 1],
        [(2 << 40) | 5, (2 << 40) | 6, (1 << 64) - 1],
    )
    gen = (1 << 64) - 2
    one = [Location((1 << 32) - 1, gen, o, n, s) for o, n, s in zip(offsets, lengths, seqs, strict=True)]
    index = Index()
    index.hit("a")
    index.load_region(["a", "b", "c"], (1 << 32) - 1, gen, u64(offsets), u64(lengths), u64(seqs))
    index.recount()
    got = [index.get(k) for k in "abc"]
    assert got == one and all(type(loc) is Location for loc in got)  # handed out as Locations
    assert index.hits("a") == 0 and index.bytes == sum(lengths)
    assert index.pop_if("a", (1 << 32) - 1, gen + 1) is None and index.pop_if("a", 8, gen) is None
    assert index.pop_if("a", (1 << 32) - 1, gen) == one[0] and index.pop("b") == one[1]
    assert index.set("c", one[0]) == one[2] and index.bytes == lengths[0]
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
    before = (len(index), index.bytes)
    for bad in ((u64([0]), u64([1 << 40]), u64([1])), (u64([1 << 48]), u64([1]), u64([1]))):
        with pytest.raises(ValueError, match="out of range"):  # the write path's group commit
            index.set_entries(index.fps(["x"]), 7, 1, *bad)
    assert (len(index), index.bytes) == before
    assert "x" not in index and "y" not in index  # a refused region adds nothing


def _reopened(cls: type, summaries: list[tuple[int, int, list[str], list[Location]]]) -> Index:
    """An index rebuilt as a reopen does: every region's summary loaded, oldest first."""
    index = cls()
    for region, gen, keys, locs in sorted(summaries, key=lambda s: s[1]):
        cols = [u64([getattr(loc, f) for loc in locs]) for f in ("offset", "length", "seq")]
        index.load_region(keys, region, gen, *cols)
    index.recount()
    return index


@pytest.mark.parametrize("seed", range(4))
def test_the_native_index_answers_as_the_reference_dict_index(seed: int) -> None:
    """Seeded random writes, lookups (single and batch), read counts, removes, conditional
    removes, whole-region reclaims (batch), clears and reopens from region summaries (what a
    restart after a crash reads): every answer of the native index equals the reference's."""
    rng = random.Random(seed)
    keys = [f"model/tp0/k{i}" for i in range(300)]
    ref, nat = ReferenceIndex(), Index()
    written: dict[int, list[str]] = {}  # region -> keys written into its current generation
    gens: dict[int, int] = {}
    seq = 0

    def check_all() -> None:
        fps = nat.fps(keys)
        assert nat.lookup(fps) == [ref.get(k) for k in keys]
        assert nat.contains_many(keys) == ref.contains_many(keys)
        assert len(nat) == len(ref) and nat.bytes == ref.bytes
        for region in range(8):
            want = [(loc := ref.get(k)) is not None and loc.region == region for k in keys]
            assert nat.in_region(fps, region).tolist() == want
        found, col = nat.columns(fps)  # the batch form (the summarizer's): fields as columns
        locs = [ref.get(k) for k in keys]
        assert found.tolist() == [loc is not None for loc in locs]
        for field in col._fields:
            assert getattr(col, field).tolist() == [getattr(loc, field) if loc else 0 for loc in locs]

    for step in range(2500):
        op = rng.random()
        key = rng.choice(keys)
        if op < 0.35:
            region = rng.randrange(8)
            seq += 1
            gens.setdefault(region, seq)
            loc = Location(
                region, gens[region], 4096 * rng.randrange(1 << 20), rng.randrange(1, 1 << 22), seq
            )
            assert nat.set(key, loc) == ref.set(key, loc)
            written.setdefault(region, []).append(key)
        elif op < 0.4:
            batch = [*rng.sample(keys, 5), key, key]  # a batch insert, a key twice included
            seq += 1
            region = rng.randrange(8)
            gens.setdefault(region, seq)
            locs = [Location(region, gens[region], 4096 * j, 1 + j, seq) for j in range(len(batch))]
            if rng.random() < 0.5:
                nat.set_many(nat.fps(batch), locs)
            else:  # the write path's group commit: one region generation, as columns
                cols = [u64([getattr(loc, f) for loc in locs]) for f in ("offset", "length", "seq")]
                nat.set_entries(nat.fps(batch), region, gens[region], *cols)
            for k, loc in zip(batch, locs, strict=True):
                ref.set(k, loc)
            written.setdefault(region, []).extend(batch)
        elif op < 0.5:
            assert nat.get(key) == ref.get(key) and (key in nat) == (key in ref)
        elif op < 0.6:
            if key in ref:  # (the reference counted reads of absent keys too; the engine never asks)
                nat.hit(key)
                ref.hit(key)
                assert nat.hits(key) == min(ref.hits(key), MAX_HITS)
        elif op < 0.7:
            assert nat.pop(key) == ref.pop(key)
        elif op < 0.8:
            cur = ref.get(key)
            region, gen = (cur.region, cur.gen) if cur is not None and rng.random() < 0.7 else (3, 99)
            assert nat.pop_if(key, region, gen) == ref.pop_if(key, region, gen)
        elif op < 0.9 and written:
            region = rng.choice(sorted(written))  # reclaim: drop what still points into it
            names = written.pop(region)
            gen = gens.pop(region)
            removed = nat.pop_if_many(nat.fps(names), region, gen)
            want = [ref.pop_if(k, region, gen) is not None for k in names]
            assert removed.tolist() == want
        elif op < 0.995:
            # crash and reopen: every region's summary lists its keys still indexed there
            summaries = []
            for region, names in written.items():
                live = list(
                    dict.fromkeys(
                        k for k in names if (loc := ref.get(k)) is not None and loc.region == region
                    )
                )
                summaries.append((region, gens[region], live, [ref.get(k) for k in live]))
            ref, nat = _reopened(ReferenceIndex, summaries), _reopened(Index, summaries)
            written = {r: s[2] for r, s in zip(written, summaries, strict=True)}
        else:
            ref.clear()
            nat.clear()
            written.clear()
            gens.clear()
        if step % 250 == 0:
            check_all()
    check_all()
    fps, locs = nat.items_fp()
    assert dict(zip(fps.tolist(), locs, strict=True)) == {int(nat.fp(k)): loc for k, loc in ref.items()}


def test_indexed_entries_leave_nothing_for_the_garbage_collector_to_visit() -> None:
    """A full collection visits every tracked object with the GIL held; the index keeps no
    Python object per entry at all (the entries live in the native table)."""
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
