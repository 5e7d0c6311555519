"""The DRAM tier's native index (``native.SlotIndex``): seeded random sequences of publish, lookup,
read, pin, unpin, remove, move and clear answer as a dict-based reference model does and leave the
same rows, keys and pins, with fingerprints masked so that collisions happen every few keys; a
collision is a miss, never the other key's row; bad arguments change nothing."""

from __future__ import annotations

import random

import numpy as np
import pytest
from reference_models import RefSlotIndex, ref_fingerprint

from hicache_mooncake.native import SlotIndex

SHIFT = 12
SLOTS = 256


def state(index: SlotIndex) -> tuple[list[tuple[str, int, tuple[int, ...]]], set[int]]:
    keys, fps, rows = index.rows()
    listed = sorted(
        (key, fp, tuple(row)) for key, fp, row in zip(keys, fps.tolist(), rows.tolist(), strict=True)
    )
    return listed, set(index.pinned_offsets())


def ref_state(ref: RefSlotIndex) -> tuple[list[tuple[str, int, tuple[int, ...]]], set[int]]:
    rows, pins = ref.state()
    return rows, set(pins)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mask", [0, 0x1F], ids=["real fingerprints", "colliding"])
def test_random_sequences_answer_as_the_reference_model(seed: int, mask: int) -> None:
    rng = random.Random(seed)
    index, ref = SlotIndex(SLOTS, SHIFT), RefSlotIndex(SLOTS, SHIFT)
    universe = [f"model/tenant-{seed}/page-{i:05d}" + ("é" if i % 7 == 0 else "") for i in range(120)]

    def fp(key: str) -> int:
        return ref_fingerprint(key, mask)

    free = list(range(SLOTS))
    rng.shuffle(free)
    placed: dict[str, int] = {}  # key -> offset it was published at (as far as the test knows)
    pinned: list[int] = []
    for _step in range(400):
        op = rng.choice(["publish", "publish", "lookup", "read", "pin", "unpin", "remove", "move", "clear"])
        keys = rng.sample(universe, rng.randint(0, 12))
        fps = [fp(k) for k in keys]
        if op == "publish" and len(free) >= len(keys):
            offsets = [free.pop() << SHIFT for _ in keys]
            rows = [
                (o, 4096 + len(k) | (3 << 48), rng.randrange(1 << 40))
                for o, k in zip(offsets, keys, strict=True)
            ]
            got = index.publish(keys, fps, np.array(rows, dtype=np.uint64).reshape(-1, 3)).tolist()
            assert got == ref.publish(keys, fps, rows)
            for key, offset, status in zip(keys, offsets, got, strict=True):
                if status == 1:
                    placed[key] = offset
                else:
                    free.append(offset >> SHIFT)  # not published: the slot is the test's again
        elif op == "lookup":
            found, occupied, rows = index.lookup(keys, fps)
            want = ref.lookup(keys, fps)
            assert (found.tolist(), occupied.tolist(), [tuple(r) for r in rows.tolist()]) == want
        elif op == "read":
            sizes = [4096 + len(k) if rng.random() < 0.8 else 1 for k in keys]
            chosen, at, found, collided = index.read_pin(keys, fps, sizes)
            assert (chosen.tolist(), at.tolist(), found, collided) == ref.read_pin(keys, fps, sizes)
            pinned.extend(at.tolist())
        elif op == "pin" and placed:
            offsets = rng.sample(sorted(placed.values()), min(len(placed), 3))
            assert index.pin(offsets).tolist() == ref.pin(offsets)
            pinned.extend(offsets)
        elif op == "unpin" and pinned:
            take = rng.sample(pinned, rng.randint(1, len(pinned)))
            if rng.random() < 0.1:
                take.append(take[0])  # maybe one pin more than the slot has: refused as a whole
            try:
                want = ref.unpin(take)
            except ValueError:
                with pytest.raises(ValueError, match="is not pinned"):
                    index.unpin(take)
            else:
                assert index.unpin(take).tolist() == want
                for offset in take:
                    pinned.remove(offset)
        elif op == "remove" and placed:
            gone = rng.sample(sorted(placed), min(len(placed), rng.randint(1, 6)))
            offsets = [placed[k] for k in gone]
            fps = [fp(k) for k in gone]
            removed, was_pinned = index.remove(fps, offsets)
            assert (removed, was_pinned.tolist()) == ref.remove(fps, offsets)
            for key in gone:
                del placed[key]  # its slot stays the test's: never reused here (a zombie, maybe)
        elif op == "move" and placed and free:
            key = rng.choice(sorted(placed))
            new = free.pop() << SHIFT
            ok = index.move(fp(key), key, placed[key], new)
            assert ok == ref.move(fp(key), key, placed[key], new)
            if ok:
                placed[key] = new
        elif op == "clear" and rng.random() < 0.2:
            index.clear()
            ref.clear()
            placed.clear()
        assert state(index) == ref_state(ref)
        assert len(index) == len(ref.rows)
        for key, offset in list(placed.items())[:5]:
            assert index.key_at(offset) == key == ref.keys[offset >> SHIFT]


def test_a_collision_is_a_miss_never_the_other_keys_row() -> None:
    index = SlotIndex(16, SHIFT)
    status = index.publish(["a", "b"], [7, 7], np.array([[0, 10, 1], [4096, 10, 2]], dtype=np.uint64))
    assert status.tolist() == [1, -1]  # the second key's fingerprint is the first one's
    found, occupied, rows = index.lookup(["b", "a"], [7, 7])
    assert found.tolist() == [False, True] and occupied.tolist() == [True, True]
    chosen, offsets, *counts = index.read_pin(["b", "a"], [7, 7], [10, 10])
    assert (chosen.tolist(), offsets.tolist(), counts) == ([1], [0], [1, 1])
    # the same key again in one batch keeps its first row
    assert index.publish(["c", "c"], [9, 9], np.array([[8192, 1, 1], [12288, 1, 2]], np.uint64)).tolist() == [
        1,
        0,
    ]
    assert index.lookup(["c"], [9])[2].tolist() == [[8192, 1, 1]]


def test_bad_arguments_change_nothing() -> None:
    index = SlotIndex(4, SHIFT)
    assert index.publish(["a"], [1], np.array([[0, 1, 1]], np.uint64)).tolist() == [1]
    before = state(index)
    for rows, match in (
        ([[4096, 1, 1], [0, 1, 1]], r"rows\[1\]: slot offset 0 holds a published key"),
        ([[4096, 1, 1], [4096, 1, 1]], "is given twice"),
        ([[4096, 1, 1], [100, 1, 1]], r"rows\[1\] = 100 is not a slot offset"),
        ([[4096, 1, 1], [4 << SHIFT, 1, 1]], r"rows\[1\] = 16384 is not a slot offset"),
    ):
        with pytest.raises(ValueError, match=match):
            index.publish(["b", "c"], [2, 3], np.array(rows, np.uint64))
        assert state(index) == before
    with pytest.raises(TypeError, match=r"keys\[1\] must be a str"):
        index.publish(["b", b"c"], [2, 3], np.array([[4096, 1, 1], [8192, 1, 1]], np.uint64))  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"fps\[0\] is 0"):
        index.publish(["b"], [0], np.array([[4096, 1, 1]], np.uint64))
    with pytest.raises(ValueError, match="keys has 1 items, expected 2"):
        index.lookup(["a"], [1, 2])
    assert state(index) == before
    index.pin([0])
    with pytest.raises(ValueError, match=r"offsets\[1\] = 0 is not pinned"):
        index.unpin([0, 0])
    assert index.pinned([0]).tolist() == [True]  # the first unpin was put back
    assert index.unpin([0]).tolist() == [True] and index.pinned_count == 0
    index.publish(["z"], [5], np.array([[8192, 1, 1]], np.uint64))
    with pytest.raises(ValueError, match="new_offset 0 holds a published key"):
        index.move(5, "z", 8192, 0)
    assert index.key_at(8192) == "z"


def test_keys_pins_and_reads_belong_to_slots() -> None:
    index = SlotIndex(8, SHIFT)
    index.publish(["k"], [11], np.array([[4096, 100, 1]], np.uint64))
    chosen, offsets, *counts = index.read_pin(["k"], [11], [100])
    assert (chosen.tolist(), offsets.tolist(), counts) == ([0], [4096], [1, 0])
    assert index.pin([4096]).tolist() == [1]  # one read so far
    removed, pinned = index.remove([11], [4096])
    assert removed == 1 and pinned.tolist() == [True]  # a reader still holds the slot
    assert index.key_at(4096) is None and len(index) == 0
    assert index.unpin([4096, 4096]).tolist() == [False, True]
    index.publish(["k2"], [12], np.array([[4096, 100, 2]], np.uint64))
    assert index.pin([4096]).tolist() == [0]  # reads restart with the new object
    assert index.move(12, "k2", 4096, 8192) and index.key_at(8192) == "k2" and index.key_at(4096) is None
    assert index.pinned_offsets() == [4096]  # the pin stays with the old slot


def test_memory_follows_the_rows() -> None:
    index = SlotIndex(1 << 16, SHIFT)
    empty = index.nbytes
    n = 50_000
    keys = [f"{i:064x}" for i in range(n)]
    fps = [ref_fingerprint(k) for k in keys]
    rows = np.zeros((n, 3), np.uint64)
    rows[:, 0] = np.arange(n, dtype=np.uint64) << np.uint64(SHIFT)
    assert (index.publish(keys, fps, rows) == 1).all()
    assert index.lookup(keys[::1000], fps[::1000])[0].all()
    assert index.nbytes > empty + n * 68  # each key's 64 bytes and length kept
    index.clear()
    assert len(index) == 0 and index.nbytes <= empty + (1 << 20)
    assert not index.lookup(keys[:10], fps[:10])[1].any()
