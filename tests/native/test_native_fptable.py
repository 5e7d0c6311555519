"""FpTable against its reference model (a dict): seeded random sequences at small capacities (long
probe chains, wraparound, growth, backward-shift deletion), compared after every step; threads;
bad input."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from gil_probe import progress_during
from reference_models import RefFpTable

from hicache_mooncake.native import FpTable


def assert_same_state(table: FpTable, model: RefFpTable, universe: list[int]) -> None:
    fps, values = table.items()
    got = {int(fp): tuple(int(v) for v in row) for fp, row in zip(fps, values, strict=True)}
    assert got == model.items()
    assert len(table) == len(model) == len(fps)
    assert table.contains(universe).tolist() == model.contains(universe)
    cap = table.capacity  # every segment's load stays <= 3/4, so the whole table's does too
    assert len(table) * 4 <= cap * 3
    assert table.nbytes >= cap * 8 * (1 + table.value_words)


def random_step(rng: random.Random, table: FpTable, model: RefFpTable, universe: list[int]) -> None:
    w = model.value_words
    n = rng.randint(0, 6)
    fps = [rng.choice(universe) for _ in range(n)]
    op = rng.choices(
        [
            "put",
            "get",
            "contains",
            "prefix",
            "remove",
            "remove_if",
            "items",
            "clear",
        ],
        weights=[40, 10, 8, 8, 20, 10, 3, 1],
    )[0]
    if op == "put":
        values = [[rng.randrange(1 << 64) for _ in range(w)] for _ in fps]
        assert table.put(
            np.array(fps, dtype=np.uint64), np.array(values, dtype=np.uint64).reshape(n, w)
        ).tolist() == model.put(fps, values)
    elif op == "get":
        found, values = table.get(fps)
        want_found, want_values = model.get(fps)
        assert found.tolist() == want_found
        assert [tuple(int(v) for v in row) for row in values] == want_values
        assert values.shape == (n, w)
    elif op == "contains":
        assert table.contains(fps).tolist() == model.contains(fps)
    elif op == "prefix":
        # Mostly present keys first, so the prefix is often longer than 0.
        present = list(model.entries)
        head = [rng.choice(present) for _ in range(rng.randint(0, 4))] if present else []
        assert table.prefix_len(head + fps) == model.prefix_len(head + fps)
    elif op == "remove":
        assert table.remove(fps).tolist() == model.remove(fps)
    elif op == "remove_if":
        expected = [
            model.entries[fp][0] if fp in model.entries and rng.random() < 0.6 else rng.randrange(1 << 64)
            for fp in fps
        ]
        assert table.remove_if(fps, expected).tolist() == model.remove_if(fps, expected)
    elif op == "items":
        pass  # compared below
    else:
        table.clear()
        model.clear()


@pytest.mark.parametrize("segment_slots", [8, 16, 1 << 16])
@pytest.mark.parametrize("value_words", [1, 2, 4])
def test_random_sequences_match_the_dict_model_after_every_step(value_words: int, segment_slots: int) -> None:
    for seed in range(12):
        rng = random.Random(seed * 10 + value_words)
        # A small universe on a tiny table: every probe chain is long and wraps around the end;
        # with tiny segments, splits and directory doublings happen all along.
        universe = [rng.randrange(1, 1 << 64) for _ in range(rng.choice([5, 12, 40]))]
        universe += list(range(1, 9))  # sequential keys too
        table = FpTable(
            value_words=value_words, capacity=rng.choice([1, 8, 16, 64]), segment_slots=segment_slots
        )
        model = RefFpTable(value_words)
        for _ in range(250):
            random_step(rng, table, model, universe)
            assert_same_state(table, model, universe)


def test_growth_to_many_entries_and_removal_of_half_keep_every_entry_reachable() -> None:
    rng = np.random.default_rng(7)
    fps = np.unique(rng.integers(1, 1 << 63, size=60_000, dtype=np.uint64))
    values = fps * np.uint64(3)
    table = FpTable(capacity=8)
    for start in range(0, fps.size, 4096):  # growth happens inside the batches
        assert not table.put(fps[start : start + 4096], values[start : start + 4096]).any()
    assert len(table) == fps.size and table.capacity == 1 << 17
    removed, kept = fps[::2], fps[1::2]
    assert table.remove(removed).all()
    assert not table.contains(removed).any()
    found, got = table.get(kept)
    assert found.all() and (got[:, 0] == kept * np.uint64(3)).all()
    assert table.prefix_len(kept) == kept.size
    assert table.prefix_len(np.concatenate([kept[:10], removed[:1], kept[10:]])) == 10
    table.clear()
    assert len(table) == 0 and table.capacity == 8 and not table.contains(kept[:100]).any()


def test_growth_moves_at_most_one_segment_per_insert() -> None:
    """The table grows a segment at a time: one insert adds at most one segment's slots (a
    doubling below the segment size, a split at it), so no call rehashes the whole table (a flat
    table of 6M entries stalled its caller 266 ms per doubling)."""
    seg = 64
    table = FpTable(capacity=8, segment_slots=seg)
    rng = np.random.default_rng(3)
    fps = np.unique(rng.integers(1, 1 << 64, size=20_000, dtype=np.uint64))
    before = table.capacity
    for fp in fps:
        table.put([fp], [fp])
        assert table.capacity - before <= seg
        before = table.capacity
    assert len(table) == fps.size and table.capacity >= fps.size * 4 // 3
    assert table.capacity <= 2 * seg * (fps.size * 8 // (3 * seg) + 1)  # segments at least 3/8 full
    found, values = table.get(fps)
    assert found.all() and (values[:, 0] == fps).all()
    assert table.remove(fps[::2]).all() and table.contains(fps[1::2]).all()
    table.clear()
    assert len(table) == 0 and table.capacity == 8


def test_a_capacity_above_the_segment_size_starts_in_full_segments() -> None:
    table = FpTable(value_words=2, capacity=1000, segment_slots=64)
    assert table.capacity == 1024
    fps = np.arange(1, 701, dtype=np.uint64)
    assert not table.put(fps, np.stack([fps, fps + np.uint64(1)], axis=1)).any()
    found, values = table.get(fps)
    assert found.all() and (values[:, 1] == fps + np.uint64(1)).all()
    table.clear()
    assert table.capacity == 1024 and len(table) == 0


_MASK64 = (1 << 64) - 1


def _unmix(z: int) -> int:
    """The inverse of the directory's finalizer (splitmix64's): a key whose mix is ``z``."""
    z ^= (z >> 31) ^ (z >> 62)
    z = (z * pow(0x94D049BB133111EB, -1, 1 << 64)) & _MASK64
    z ^= (z >> 27) ^ (z >> 54)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & _MASK64
    z ^= (z >> 30) ^ (z >> 60)
    return z


def test_keys_no_split_separates_still_fit_in_one_growing_segment() -> None:
    """Keys whose directory bits agree on the whole depth limit (not a hash's fingerprints, but
    possible input) split the segment down to the limit, then it doubles in place: every key
    stays reachable."""
    keys = [_unmix((0xABCDE << 44) | (i + 1)) for i in range(300)]
    assert 0 not in keys
    table = FpTable(capacity=8, segment_slots=8)
    assert not table.put(keys, keys).any()
    found, values = table.get(keys)
    assert found.all() and values[:, 0].tolist() == keys
    assert table.nbytes >= 8 << 20  # the directory reached its depth limit (2**20 entries)
    assert table.capacity == 512 + 20 * 8  # one segment doubled in place, 20 split-off empty ones
    assert table.remove(keys).all() and len(table) == 0


def test_remove_if_keeps_an_entry_replaced_meanwhile() -> None:
    table = FpTable(value_words=2)
    table.put([11, 12], [[100, 1], [200, 2]])
    table.put([11], [[101, 1]])  # replaced since the caller read word0 = 100
    assert table.remove_if([11, 12], [100, 200]).tolist() == [False, True]
    found, values = table.get([11, 12])
    assert found.tolist() == [True, False] and values.tolist() == [[101, 1], [0, 0]]


def test_four_threads_on_one_table_end_in_the_models_state() -> None:
    table = FpTable(capacity=8)
    stable = np.arange(1_000_001, 1_000_201, dtype=np.uint64)  # never removed: readers always see it
    table.put(stable, stable)
    models = [RefFpTable() for _ in range(4)]
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            rng = random.Random(t)
            universe = [t * 100_000 + i + 1 for i in range(3000)]
            for _ in range(400):
                fps = rng.sample(universe, 16)
                if rng.random() < 0.6:
                    vals = [[rng.randrange(1 << 64)] for _ in fps]
                    assert table.put(fps, vals).tolist() == models[t].put(fps, vals)
                else:
                    assert table.remove(fps).tolist() == models[t].remove(fps)
                # Growth and shifts elsewhere never hide a present key from a reader.
                assert table.prefix_len(stable) == stable.size
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    want = {int(fp): (int(fp),) for fp in stable}
    for model in models:
        want.update(model.entries)
    fps, values = table.items()
    assert {int(f): (int(v[0]),) for f, v in zip(fps, values, strict=True)} == want


def test_bad_input_is_refused_naming_the_item_and_changes_nothing() -> None:
    table = FpTable(value_words=2, capacity=8)
    table.put([5], [[1, 2]])
    with pytest.raises(ValueError, match=r"fps\[1\] is 0"):
        table.put([7, 0], [[1, 1], [2, 2]])
    with pytest.raises(ValueError, match=r"fps\[0\] is negative: -3"):
        table.contains([-3])
    with pytest.raises(ValueError, match="values has 3 words, expected 2 keys x 2 value words"):
        table.put([7, 8], [1, 2, 3])
    with pytest.raises(TypeError, match="fps must be an array of non-negative integers, got dtype float64"):
        table.remove(np.array([1.5]))
    with pytest.raises(ValueError, match="expected_word0 has 1 elements but fps has 2"):
        table.remove_if([5, 6], [1])
    with pytest.raises(ValueError, match="value_words must be in 1..4, got 5"):
        FpTable(value_words=5)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        FpTable(capacity=0)
    with pytest.raises(ValueError, match="segment_slots must be >= 8, got 4"):
        FpTable(segment_slots=4)
    assert {int(k) for k in table.items()[0]} == {5} and len(table) == 1


def test_empty_batches_answer_empty_arrays() -> None:
    table = FpTable()
    assert table.put([], np.zeros((0, 1), dtype=np.uint64)).shape == (0,)
    assert table.contains([]).shape == (0,) and table.prefix_len([]) == 0
    found, values = table.get([])
    assert found.shape == (0,) and values.shape == (0, 1)
    fps, vals = table.items()
    assert fps.shape == (0,) and vals.shape == (0, 1)


def test_table_batches_release_the_gil() -> None:
    """A big put, contains and remove let another Python thread run (gil_probe); so does a
    one-key put that must grow the table (a segment doubled or split)."""
    full = np.arange(1, 49_153, dtype=np.uint64)  # 3/4 of one segment of 65536 slots: the next key splits it
    tables = []
    for _ in range(20):  # one full table per attempt: every call below must grow
        tables.append(FpTable(capacity=1 << 16))
        tables[-1].put(full, full)
    one = np.array([1 << 40], dtype=np.uint64)
    assert progress_during(lambda: tables.pop().put(one, one.reshape(1, 1))) > 0
    fps = np.arange(1, 2_000_001, dtype=np.uint64)
    table = FpTable(capacity=8)
    assert progress_during(lambda: table.put(fps, fps)) > 0  # grows inside the call too
    assert progress_during(lambda: table.contains(fps)) > 0
    assert progress_during(lambda: table.remove(fps)) > 0
    assert len(table) == 0


def test_short_batches_keep_the_gil() -> None:
    """A batch of at most 1024 keys (no growth) runs with the GIL held: handing it away would
    cost the caller a switch interval to get back for microseconds of probing (a put that must
    grow the table releases it: test_table_batches_release_the_gil)."""
    fps = np.arange(1, 129, dtype=np.uint64)
    table = FpTable(capacity=4096)
    assert progress_during(lambda: table.put(fps, fps), attempts=5) == 0
    assert progress_during(lambda: table.get(fps), attempts=5) == 0
    assert progress_during(lambda: table.contains(fps), attempts=5) == 0
    assert progress_during(lambda: table.prefix_len(fps), attempts=5) == 0
    assert progress_during(lambda: table.remove(fps), attempts=5) == 0
