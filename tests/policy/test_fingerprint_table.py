"""FingerprintTable against a dict, on random operations and on the cases its layout makes hard:
keys sharing a home slot, runs reaching the end of the pad, the int64 bounds, the empty marker
as a key, removals inside long runs."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from hicache_mooncake.tiers.policy import fingerprint_table
from hicache_mooncake.tiers.policy.fingerprint_table import (
    _EMPTY,
    _MAX_LOAD,
    _MIN_BITS,
    _PAD,
    _SEG_BITS,
    FingerprintTable,
    _build,
)

INT64 = (-(1 << 63), (1 << 63) - 1)


def _check(table: FingerprintTable, model: dict[int, int], probes: list[int]) -> None:
    assert len(table) == table.entries == len(model)
    for fp in probes:
        assert table.get(fp) == model.get(fp), fp
        assert (fp in table) == (fp in model), fp
    batch = np.array(probes, dtype=np.int64)
    assert table.lookup_many(batch, -7).tolist() == [model.get(fp, -7) for fp in probes]


def _keyspace(rng: random.Random, kind: str) -> list[int]:
    if kind == "wide":
        return [rng.randint(*INT64) for _ in range(3000)] + [*INT64, _EMPTY, 0, -1, 1]
    if kind == "one_home":  # every key has home slot 5 at every table size up to 2**20
        return [(rng.randrange(1 << 40) << 20) | 5 for _ in range(600)] + [_EMPTY]
    # keys whose home slots crowd the end of the table (runs into the pad at the smallest size)
    top = (1 << _MIN_BITS) - 1
    return [(rng.randrange(1 << 40) << _MIN_BITS) | (top - rng.randrange(8)) for _ in range(900)]


@pytest.mark.parametrize("seg_bits", [_SEG_BITS, _MIN_BITS + 1])
@pytest.mark.parametrize("kind", ["wide", "one_home", "crowded_end"])
@pytest.mark.parametrize("seed", range(4))
def test_the_table_answers_as_a_dict(
    kind: str, seed: int, seg_bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With small segments (``seg_bits`` 11) the wide key space splits them: removals and
    lookups then cross segments of different depths."""
    monkeypatch.setattr(fingerprint_table, "_SEG_BITS", seg_bits)
    rng = random.Random(seed)
    keys = _keyspace(rng, kind)
    table, model = FingerprintTable(), {}
    for step in range(20_000):
        fp = rng.choice(keys)
        op = rng.random()
        value = rng.randint(*INT64)
        if op < 0.3:
            assert table.swap(fp, value) == model.get(fp)
            model[fp] = value
        elif op < 0.45:  # the value to store depends on whether the key was there (one probe)
            present = rng.randint(*INT64)
            assert table.swap(fp, value, present) == model.get(fp)
            model[fp] = present if fp in model else value
        elif op < 0.7:
            assert table.pop(fp) == model.pop(fp, None)
        elif op < 0.85:
            current = model.get(fp)
            high = current >> 3 if current is not None and rng.random() < 0.5 else rng.randrange(1 << 20)
            expect = current if current is not None and current >> 3 == high else None
            assert table.pop_if(fp, high, 3) == expect
            if expect is not None:
                del model[fp]
        else:
            assert table.get(fp) == model.get(fp)
        if step % 2500 == 0:
            _check(table, model, keys[:200] + [rng.randint(*INT64) for _ in range(20)])
    _check(table, model, keys)


def test_a_table_grows_and_keeps_every_entry() -> None:
    rng = random.Random(7)
    table, model = FingerprintTable(), {}
    for _ in range(200_000):
        fp = rng.randint(*INT64)
        table.swap(fp, fp // 3)
        model[fp] = fp // 3
    assert len(table) == len(model)
    probes = list(model)[::97]
    assert [table.get(fp) for fp in probes] == [model[fp] for fp in probes]
    assert table.lookup_many(np.array(list(model), dtype=np.int64), 0).tolist() == list(model.values())
    # the load stays under 0.6 of the home slots, about 0.3 or more after the last growth
    segments = table.segments()
    assert len(segments) > 2 and table.depth >= 2
    assert all(s.entries <= _MAX_LOAD * (1 << s.bits) for s in segments)
    assert 0.28 * sum(1 << s.bits for s in segments) <= len(table) == sum(s.entries for s in segments)


def test_no_growth_moves_more_than_one_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the segments: a table of millions of entries must not stall its caller while
    it moves them all. Every growth builds at most the entries of one full segment, and the
    segments' sizes stay below the largest one (fingerprints split evenly)."""
    built: list[int] = []

    def spy(fps: np.ndarray, *args: int) -> fingerprint_table._Segment:
        built.append(len(fps))
        return _build(fps, *args)

    monkeypatch.setattr(fingerprint_table, "_build", spy)
    rng = np.random.default_rng(3)
    keys = rng.integers(-(1 << 63), (1 << 63) - 1, size=400_000, dtype=np.int64).tolist()
    table = FingerprintTable()
    for i, fp in enumerate(keys):
        table.swap(fp, i)
    assert len(built) > 20
    assert max(built) <= _MAX_LOAD * (1 << _SEG_BITS) + 1
    assert all(s.bits <= _SEG_BITS for s in table.segments())
    assert len(table.segments()) >= 400_000 / (_MAX_LOAD * (1 << _SEG_BITS))
    assert table.lookup_many(np.array(keys, dtype=np.int64), -1).tolist() == list(range(len(keys)))
    for fp in keys[::3]:
        table.pop(fp)
    expect = [-1 if i % 3 == 0 else i for i in range(len(keys))]
    assert table.lookup_many(np.array(keys, dtype=np.int64), -1).tolist() == expect
    assert [table.get(fp, -1) for fp in keys[:3000]] == expect[:3000]


def test_keys_a_split_cannot_separate_grow_their_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys that agree on their low bits (a fingerprint's do not) all fall in one directory
    index: splitting by those bits would leave one half empty, so the segment grows instead and
    the directory stays as it is."""
    monkeypatch.setattr(fingerprint_table, "_SEG_BITS", _MIN_BITS + 1)
    keys = [(i << 24) | 0x5A5A5 for i in range(1, 6000)]
    table = FingerprintTable()
    for i, fp in enumerate(keys):
        table.swap(fp, i)
    assert table.depth == 0 and len(table.segments()) == 1
    assert table.segments()[0].bits > _MIN_BITS + 1
    assert [table.get(fp) for fp in keys] == list(range(len(keys)))


def test_a_run_that_would_pass_the_pad_grows_the_table() -> None:
    """More keys with one home slot than the pad holds, the last slot at every size up to 2**13
    home slots: the table grows (in one rebuild, several doublings) until their run fits, and the
    last pad slot stays empty (every lookup's probe ends there)."""
    keys = [(i << 30) | ((1 << 13) - 1) for i in range(1, 2 * _PAD)]
    table = FingerprintTable()
    for i, fp in enumerate(keys):
        table.swap(fp, i)
    (segment,) = table.segments()
    assert segment.bits == 14 and segment.keys[-1] == _EMPTY
    fps, values = segment.live()
    # asked for a size their run does not fit in: it doubles until it does
    rebuilt = _build(fps, values, 11, 0, 0)
    assert rebuilt.bits == 14 and rebuilt.keys[-1] == _EMPTY and rebuilt.entries == len(keys)
    assert [table.get(fp) for fp in keys] == list(range(len(keys)))
    for fp in keys[::2]:
        table.pop(fp)
    assert [table.get(fp) for fp in keys] == [None if i % 2 == 0 else i for i in range(len(keys))]


def test_an_entry_costs_at_most_about_fifty_bytes() -> None:
    """The point of the table: a dict[int, int] entry costs ~114 bytes (its slot, an int key, an
    int value); here 16 bytes of array at a load of 0.3-0.6."""
    n = 100_000
    keys = [hash(f"model/abcd/{i:064x}@tp0of1") for i in range(n)]
    tracemalloc.start()
    try:
        table = FingerprintTable()
        before = tracemalloc.get_traced_memory()[0]
        for i, fp in enumerate(keys):
            table.swap(fp, i << 3)
        per_entry = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert per_entry <= 16 / 0.3 + 1, per_entry
    assert len(table) == n


def test_a_key_outside_int64_is_refused() -> None:
    table = FingerprintTable()
    with pytest.raises(OverflowError):
        table.swap(1 << 63, 1)
    with pytest.raises(OverflowError):
        table.swap(2, 1 << 63)
    assert len(table) == 0 and 2 not in table and table.get(1 << 62) is None


def test_a_batch_lookup_of_nothing_or_of_the_empty_marker_alone() -> None:
    table = FingerprintTable()
    assert table.lookup_many(np.array([], dtype=np.int64), -1).tolist() == []
    assert table.lookup_many(np.array([_EMPTY], dtype=np.int64), -1).tolist() == [-1]
    table.swap(_EMPTY, 5)
    assert table.lookup_many(np.array([_EMPTY, 3], dtype=np.int64), -1).tolist() == [5, -1]
