"""The DRAM tier's native index (``native.SlotIndex``): seeded random sequences of publish, lookup,
read (lookup, pins, copy out of an arena, unpins), pin, lookup-and-pin, unpin, remove, move, clear and the taking of
freed zombies answer as a dict-based reference model does and leave the same rows, keys, pins and
zombies, with fingerprints masked so that collisions happen every few keys; a collision is a miss,
never the other key's row; bad arguments change nothing; a slot removed while pinned is freed with
its last pin, exactly once, and never while a reader copies from it."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from reference_models import RefSlotIndex, ref_fingerprint

from hicache_mooncake.native import SlotIndex

SHIFT = 12
SLOTS = 256


def state(index: SlotIndex) -> tuple[list[tuple[str, int, tuple[int, ...]]], set[int], int]:
    keys, fps, rows = index.rows()
    listed = sorted(
        (key, fp, tuple(row)) for key, fp, row in zip(keys, fps.tolist(), rows.tolist(), strict=True)
    )
    return listed, set(index.pinned_offsets()), index.zombie_count


def ref_state(ref: RefSlotIndex) -> tuple[list[tuple[str, int, tuple[int, ...]]], set[int], int]:
    rows, pins = ref.state()
    return rows, set(pins), len(ref.zombies) + len(ref.freed)


def read(index: SlotIndex, keys: list[str], fps: list[int], arena: np.ndarray, parts: list[list[int]]):
    """``read_into`` with fresh zeroed parts of the given lengths: (answer, the parts)."""
    pages = [[np.zeros(n, np.uint8) for n in lengths] for lengths in parts]
    return index.read_into(keys, np.array(fps, np.uint64), arena, pages), pages


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mask", [0, 0x1F], ids=["real fingerprints", "colliding"])
def test_random_sequences_answer_as_the_reference_model(seed: int, mask: int) -> None:
    rng = random.Random(seed)
    index, ref = SlotIndex(SLOTS, SHIFT), RefSlotIndex(SLOTS, SHIFT)
    arena = np.frombuffer(rng.randbytes(SLOTS << SHIFT), np.uint8)
    universe = [f"model/tenant-{seed}/page-{i:05d}" + ("é" if i % 7 == 0 else "") for i in range(120)]

    def fp(key: str) -> int:
        return ref_fingerprint(key, mask)

    free = list(range(SLOTS))
    rng.shuffle(free)
    placed: dict[str, int] = {}  # key -> offset it was published at (as far as the test knows)
    pinned: list[int] = []
    for _step in range(400):
        op = rng.choice(
            [
                "publish",
                "publish",
                "lookup",
                "read",
                "read",
                "pin",
                "unpin",
                "remove",
                "move",
                "clear",
                "take",
            ]
        )
        keys = rng.sample(universe, rng.randint(0, 12))
        fps = [fp(k) for k in keys]
        if op == "publish" and len(free) >= len(keys):
            offsets = [free.pop() << SHIFT for _ in keys]
            rows = [
                (o, 1000 + len(k) | (3 << 48), rng.randrange(1 << 40))
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
            size = [1000 + len(k) if rng.random() < 0.8 else 1 for k in keys]
            parts = [[n // 3, 0, n - n // 3] if rng.random() < 0.5 else [n] for n in size]
            (hits, hit, freed), pages = read(index, keys, fps, arena, parts)
            want_hits, want_hit, want_freed, want_bytes = ref.read_into(keys, fps, arena.tobytes(), parts)
            assert (hits, hit, freed) == (want_hits, want_hit, want_freed)
            for page, want in zip(pages, want_bytes, strict=True):
                got = [p.tobytes() for p in page]
                assert got == (want if want is not None else [bytes(len(p)) for p in page])
        elif op == "pin_found":
            found, rows, reads = index.pin_found(keys, fps)
            want_found, want_rows, want_reads = ref.pin_found(keys, fps)
            assert (found.tolist(), [tuple(r) for r in rows.tolist()], reads.tolist()) == (
                want_found,
                want_rows,
                want_reads,
            )
            pinned.extend(rows[found, 0].tolist())
        elif op == "take":
            assert sorted(index.take_freed()) == sorted(ref.take_freed())
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
                assert index.unpin(take) == want
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
            old = placed[key]
            if rng.random() < 0.8:  # the relocation's own pin; without it the move is refused
                assert index.pin([old]).tolist() == ref.pin([old])
                pinned.append(old)
            try:
                want_ok = ref.move(fp(key), key, old, new)
            except ValueError:
                with pytest.raises(ValueError, match="is not pinned by the caller"):
                    index.move(fp(key), key, old, new)
                free.append(new >> SHIFT)
            else:
                assert index.move(fp(key), key, old, new) == want_ok
                if want_ok:
                    placed[key] = new  # the old slot is a zombie until its pin goes
                else:
                    free.append(new >> SHIFT)
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
    arena = np.arange(16 << SHIFT, dtype=np.uint64).view(np.uint8)
    (hits, hit, _freed), pages = read(index, ["b", "a"], [7, 7], arena, [[10], [10]])
    assert (hits, hit) == (1, [False, True]) and pages[1][0].tobytes() == arena[:10].tobytes()
    assert not pages[0][0].any()  # never the other key's bytes
    assert index.read_counts["fingerprint_collisions"] == 1
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
    assert index.unpin([0]) == 0 and index.pinned_count == 0
    index.publish(["z"], [5], np.array([[8192, 1, 1]], np.uint64))
    with pytest.raises(ValueError, match="new_offset 0 holds a published key"):
        index.move(5, "z", 8192, 0)
    with pytest.raises(ValueError, match="old_offset 8192 is not pinned by the caller"):
        index.move(5, "z", 8192, 12288)
    assert index.key_at(8192) == "z"
    arena = np.zeros(4 << SHIFT, np.uint8)
    for pages, error, match in (
        ([[np.zeros(1, np.uint8)], [bytes(1)]], BufferError, r"pages\[1\]\[0\]: not one writable"),
        ([[np.zeros(1, np.uint8)], 3], TypeError, r"pages\[1\] must be a sequence of buffers"),
        ([[np.zeros(1, np.uint8)]], ValueError, "pages has 1 elements"),
    ):
        with pytest.raises(error, match=match):
            index.read_into(["a", "z"], np.array([1, 5], np.uint64), arena, pages)
    with pytest.raises(
        ValueError, match=r"pages\[0\]\[0\]: arena offset 0 \+ length 1 outside an arena of 0"
    ):
        index.read_into(["a"], np.array([1], np.uint64), np.zeros(0, np.uint8), [[np.zeros(1, np.uint8)]])
    assert index.pinned_count == 0 and index.read_counts["hits"] == 0  # nothing pinned or counted
    assert state(index) == (before[0] + [("z", 5, (8192, 1, 1))], set(), 0)


def test_keys_pins_and_reads_belong_to_slots() -> None:
    index = SlotIndex(8, SHIFT)
    index.publish(["k"], [11], np.array([[4096, 100, 1]], np.uint64))
    arena = np.zeros(8 << SHIFT, np.uint8)
    (hits, _hit, freed), _pages = read(index, ["k"], [11], arena, [[100]])
    assert (hits, freed, index.pinned_count) == (1, 0, 0)  # copied, and the pin dropped again
    assert index.pin([4096, 4096]).tolist() == [1, 1]  # one read so far
    removed, pinned = index.remove([11], [4096])
    assert removed == 1 and pinned.tolist() == [True]  # a reader still holds the slot: a zombie
    assert index.key_at(4096) is None and len(index) == 0 and index.zombie_count == 1
    with pytest.raises(ValueError, match="holds a removed object a reader still pins"):
        index.publish(["k2"], [12], np.array([[4096, 100, 2]], np.uint64))
    assert index.unpin([4096]) == 0 and index.take_freed() == []  # one pin left
    assert index.unpin([4096]) == 1 and index.take_freed() == [(4096, 100)]  # the last one frees it
    assert index.take_freed() == [] and index.zombie_count == 0
    index.publish(["k2"], [12], np.array([[4096, 100, 2]], np.uint64))
    assert index.pin([4096]).tolist() == [0]  # reads restart with the new object
    assert index.move(12, "k2", 4096, 8192) and index.key_at(8192) == "k2" and index.key_at(4096) is None
    assert index.pinned_offsets() == [4096]  # the pin stays with the old slot, now a zombie
    assert index.unpin([4096]) == 1 and index.take_freed() == [(4096, 100)]
    index.pin([8192])
    index.clear()
    assert index.unpin([8192]) == 1 and index.take_freed() == [(8192, 100)]


def test_readers_without_a_lock_never_copy_a_freed_slot_and_free_each_zombie_once() -> None:
    """Readers call ``read_into`` with no lock (copies of 256 KiB: the GIL released while they copy)
    while a remover, holding the lock the tier holds, removes and republishes keys into the slots
    the freed list gives back: every page a reader gets is its key's bytes, every removed slot is
    freed exactly once, and none while a reader still copies from it."""
    shift, slots, size = 18, 16, 256 << 10
    index = SlotIndex(slots, shift)
    arena = np.zeros(slots << shift, np.uint8)
    lock = threading.Lock()
    free = list(range(slots))
    where: dict[str, int] = {}
    keys = [f"key-{i}" for i in range(6)]
    fps = {k: ref_fingerprint(k) for k in keys}
    stop = threading.Event()
    errors: list[str] = []

    def publish_locked(key: str) -> None:
        slot = free.pop()
        arena[slot << shift : (slot << shift) + size] = keys.index(key) + 1
        status = index.publish([key], [fps[key]], np.array([[slot << shift, size, 1]], np.uint64))
        assert status.tolist() == [1]
        where[key] = slot

    def take_locked() -> None:
        for offset, nbytes in index.take_freed():
            assert nbytes == size and (offset >> shift) not in free  # freed once
            free.append(offset >> shift)
            zombies_freed.append(offset)

    zombies_freed: list[int] = []
    with lock:
        for key in keys:
            publish_locked(key)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            batch = rng.sample(keys, 3)
            pages = [[np.zeros(size, np.uint8)] for _ in batch]
            _hits, hit, freed = index.read_into(
                batch, np.array([fps[k] for k in batch], np.uint64), arena, pages
            )
            for key, ok, page in zip(batch, hit or [True] * 3, pages, strict=True):
                if ok and not (page[0] == keys.index(key) + 1).all():
                    errors.append(key)
            if freed:
                with lock:
                    take_locked()

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    rng = random.Random(9)
    removals = 0
    while removals < 300 or (len(zombies_freed) < 5 and removals < 20_000):
        key = rng.choice(keys)
        with lock:  # the tier's protocol: a slot not pinned is freed by the remover at once
            slot = where.pop(key)
            _removed, pinned = index.remove([fps[key]], [slot << shift])
            if not pinned[0]:
                free.append(slot)
            take_locked()
            publish_locked(key)
        removals += 1
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    with lock:
        take_locked()
    assert zombies_freed  # readers did hold removed slots
    assert not errors
    assert index.pinned_count == 0 and index.zombie_count == 0
    assert sorted(free + list(where.values())) == list(range(slots))


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


def test_a_miss_is_not_borrowed_and_a_key_removed_while_pages_are_borrowed_is_a_miss() -> None:
    """``read_into`` borrows the pages of the keys it found only (a miss's parts are never looked
    at), and looks the keys up again after borrowing: borrowing a page that is not a list runs
    its code (another thread may run meanwhile: here it removes the key and grows the table, which
    frees the segment its row was in), and a key removed then is a miss, never a read through a
    stale row (without the second lookup, the sanitizer build reports a heap use after free)."""
    index = SlotIndex(1 << 15, SHIFT)
    index.publish(["k"], [11], np.array([[4096, 100, 1]], np.uint64))
    arena = np.full(8 << SHIFT, 7, np.uint8)
    out = np.zeros(100, np.uint8)
    fps = np.array([11, 12], np.uint64)
    hits, hit, _freed = index.read_into(["k", "absent"], fps, arena, [[out], ["no buffer"]])
    assert (hits, hit) == (1, [True, False]) and (out == 7).all()

    class RemovingPage:
        """A page whose iteration removes its key and publishes 20000 others (the table grows)."""

        def __init__(self) -> None:
            self.part = np.zeros(100, np.uint8)

        def __iter__(self):  # noqa: ANN204
            index.remove([11], [4096])
            n = 20_000
            rows = np.zeros((n, 3), np.uint64)
            rows[:, 0] = (np.arange(n, dtype=np.uint64) + 2) << np.uint64(SHIFT)
            rows[:, 1] = 100
            index.publish([f"other-{i}" for i in range(n)], np.arange(n, dtype=np.uint64) + 1000, rows)
            return iter([self.part])

    page = RemovingPage()
    hits, hit, _freed = index.read_into(["k"], np.array([11], np.uint64), arena, [page])
    assert (hits, hit) == (0, [False]) and not page.part.any()
    assert index.pinned_count == 0 and index.zombie_count == 0 and index.read_counts["misses"] == 2
