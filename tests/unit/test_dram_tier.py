"""DRAM tier behaviour a user relies on: bytes come back exact, a full arena refuses instead of
evicting (the placement decides), a reader never sees another object's bytes, close releases."""

from __future__ import annotations

import threading

import numpy as np

from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

MiB = 1 << 20


def payload(key: str, n: int) -> np.ndarray:
    seed = abs(hash(key)) % (2**32)
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def put(tier: DramTier, key: str, n: int, split: int = 3) -> bool:
    data = payload(key, n)
    parts = [memoryview(c) for c in np.array_split(data, split)]
    return tier.put(key, parts)


def read(tier: DramTier, key: str, n: int, split: int = 2) -> np.ndarray | None:
    out = np.zeros(n, np.uint8)
    parts = [memoryview(c) for c in np.array_split(out, split)]
    return out if tier.get_into(key, parts) else None


def test_round_trip_with_different_part_splits():
    tier = DramTier(capacity=8 * MiB, slab_size=MiB)
    assert put(tier, "a", 300_000, split=5)
    got = read(tier, "a", 300_000, split=7)
    assert got is not None and np.array_equal(got, payload("a", 300_000))
    assert read(tier, "missing", 10) is None
    assert read(tier, "a", 299_999) is None  # size mismatch is a miss
    assert tier.stats()["size_mismatch"] == 1
    tier.close()


def test_put_of_existing_key_keeps_first_value():
    tier = DramTier(capacity=4 * MiB, slab_size=MiB)
    assert tier.put("k", [memoryview(np.ones(4096, np.uint8))])
    assert tier.put("k", [memoryview(np.zeros(4096, np.uint8))])
    got = np.zeros(4096, np.uint8)
    assert tier.get_into("k", [memoryview(got)]) and got.all()
    tier.close()


def test_a_present_key_answers_true_whether_or_not_a_slot_is_free_and_keeps_no_second_slot():
    """``put_batch`` does not probe the index before its copy: a key present already is copied
    into a free slot and answered by the publish (True, first value kept, the slot freed
    again); with no free slot it is looked up (True) while a new key is refused (False)."""
    tier = DramTier(capacity=2 * MiB, slab_size=MiB)
    first = np.full(200_000, 7, np.uint8)
    assert tier.put_batch([("old", [memoryview(first)], DEFAULT_CONTEXT)]) == [True]
    used = tier.stats()["used_bytes"]
    again = [("old", [memoryview(np.zeros(200_000, np.uint8))], DEFAULT_CONTEXT)]
    assert tier.put_batch(again) == [True]
    assert tier.stats()["used_bytes"] == used and tier.stats()["puts"] == 1
    filled = [i for i in range(20) if put(tier, f"f{i}", 200_000)]
    assert len(filled) == 9 and tier.free_objects(200_000) == 0  # 10 slots: "old" + 9
    new = ("new", [memoryview(np.ones(200_000, np.uint8))], DEFAULT_CONTEXT)
    assert tier.put_batch([*again, new, *again]) == [True, False, True]
    got = np.zeros(200_000, np.uint8)
    assert tier.get_into("old", [memoryview(got)]) and (got == 7).all()
    assert tier.stats()["used_bytes"] == used * 10
    tier.close()


def test_a_full_arena_refuses_without_evicting_anything():
    """The DRAM tier has no policy of its own: when no slot is free the put is refused (the
    store's placement decides what moves out), and every stored page stays exact."""
    tier = DramTier(capacity=4 * MiB, slab_size=MiB)
    stored = [i for i in range(100) if put(tier, f"k{i}", 200_000)]
    stats = tier.stats()
    assert stored == list(range(20))  # 5 slots of 200 KB per 1 MiB slab
    assert stats["rejected_no_space"] == 80 and stats["used_bytes"] <= stats["capacity_bytes"]
    for key in tier.keys():
        got = read(tier, key, 200_000)
        assert got is not None and np.array_equal(got, payload(key, 200_000))
    assert tier.remove_batch(["k0", "k1", "nope"]) == 2
    assert put(tier, "again", 200_000) and tier.free_objects(200_000) == 1
    tier.close()


def test_a_slab_freed_by_one_size_class_serves_another():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB)
    for i in range(64):
        assert put(tier, f"small{i}", 20_000)
    assert tier.stats()["free_slabs"] == 0 and not put(tier, "big", 900_000)
    assert tier.remove_batch([f"small{i}" for i in range(51)]) == 51  # one whole slab's worth
    assert put(tier, "big", 900_000)
    assert read(tier, "big", 900_000) is not None
    tier.close()


def test_a_slot_removed_while_pinned_is_freed_by_its_reader():
    tier = DramTier(capacity=MiB, slab_size=MiB)
    for i in range(5):
        assert put(tier, f"k{i}", 200_000)
    (pinned,) = tier.pin_entries(["k0"])
    assert pinned is not None and tier.remove("k0")
    assert not put(tier, "new", 200_000)  # the pinned slot is not reused under its reader
    assert bytes(pinned.data) == payload("k0", 200_000).tobytes()
    tier.release([pinned])
    assert put(tier, "new", 200_000)
    tier.close()


def test_a_batch_remove_frees_as_removes_one_by_one_and_spares_a_pinned_slot():
    """``remove_batch`` of a call's victims (unknown keys, one key twice, a slot a reader holds
    among them) leaves the tier as ``remove`` of each would: the same entries, the same slots
    handed out next, the pinned slot kept for its reader until released."""
    tiers = [DramTier(capacity=2 * MiB, slab_size=256 << 10) for _ in range(2)]
    for tier in tiers:
        for i in range(40):
            assert put(tier, f"k{i}", 30_000)
    victims = [f"k{i}" for i in range(0, 40, 3)]
    batches = [victims, [*victims[:2], "nope", "k1", "k1"], [f"k{i}" for i in range(2, 40, 3)]]
    pins = [tier.pin_entries(["k5"])[0] for tier in tiers]
    for batch in batches:
        assert tiers[0].remove_batch(batch) == sum(tiers[1].remove(key) for key in batch)
    assert tiers[0].keys() == tiers[1].keys() and "k5" not in tiers[0].keys()
    fresh = [[put(tier, f"n{i}", 30_000) for i in range(30)] for tier in tiers]
    assert fresh[0] == fresh[1]
    slots = [tier.slot_offsets() for tier in tiers]
    assert slots[0] == slots[1]  # the same slots handed out again, in the same order
    assert [tier.stats()["used_bytes"] for tier in tiers] == [tiers[1].stats()["used_bytes"]] * 2
    for tier, pinned in zip(tiers, pins, strict=True):
        assert pinned is not None and bytes(pinned.data) == payload("k5", 30_000).tobytes()
        tier.release([pinned])
    for tier in tiers:
        for key in tier.keys():
            got = read(tier, key, 30_000)
            assert got is not None and np.array_equal(got, payload(key, 30_000))
        tier.close()


def test_object_larger_than_a_slab_is_refused_not_raised():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB)
    assert not put(tier, "huge", MiB + 1)
    assert tier.stats()["rejected_too_large"] == 1
    tier.close()


def test_clear_remove_and_close_are_safe_and_idempotent():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB)
    put(tier, "a", 5000)
    put(tier, "b", 5000)
    assert tier.remove("a") and not tier.remove("a")
    tier.clear()
    assert tier.stats()["entries"] == 0 and tier.stats()["used_bytes"] == 0
    assert put(tier, "c", 5000)
    tier.close()
    tier.close()
    assert not put(tier, "d", 5000)
    assert read(tier, "c", 5000) is None


def test_four_threads_mixed_ops_never_read_wrong_bytes():
    """Readers race writers, evictions and removes; any byte that is not the key's own fails."""
    tier = DramTier(capacity=2 * MiB, slab_size=MiB)
    n = 64 * 1024
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(400):
            key = f"k{rng.integers(0, 80)}"
            op = rng.random()
            if op < 0.45:
                put(tier, key, n, split=2)
            elif op < 0.85:
                got = read(tier, key, n, split=3)
                if got is not None and not np.array_equal(got, payload(key, n)):
                    errors.append(key)
            elif op < 0.98:
                tier.remove(key)
            else:
                tier.clear()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    stats = tier.stats()
    assert stats["used_bytes"] == stats["entries"] * 65536
    tier.close()


def test_readers_copying_without_the_lock_race_removes_clears_and_relocations_safely():
    """Gets of 256 KiB pages (the GIL released while they copy, no tier lock held) and pinned
    reads (``pin_entries``/``release``, no lock either) race puts, removes, clears and
    shrink-and-relocate: no reader gets another key's bytes, and afterwards
    every slot is accounted for (no zombie left, used bytes are exactly the entries')."""
    n = 256 << 10
    tier = DramTier(capacity=8 * MiB, slab_size=MiB, max_capacity=8 * MiB)
    errors: list[str] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            key = f"k{rng.integers(0, 24)}"
            got = read(tier, key, n, split=2)
            if got is not None and not np.array_equal(got, payload(key, n)):
                errors.append(key)

    def pinner(seed: int) -> None:  # the mover's and the served arenas' reads: pin, read, release
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            keys = [f"k{k}" for k in rng.integers(0, 24, 3)]
            held = [p for p in tier.pin_entries(keys) if p is not None]
            for p in held:
                if not np.array_equal(p.data, payload(p.key, n)):
                    errors.append(p.key)
            tier.release(held)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)]
    threads.append(threading.Thread(target=pinner, args=(5,)))
    for t in threads:
        t.start()
    rng = np.random.default_rng(7)
    try:
        for step in range(1500):
            key = f"k{rng.integers(0, 24)}"
            op = rng.random()
            if op < 0.5:
                put(tier, key, n)
            elif op < 0.9:
                tier.remove(key)
            elif op < 0.97:
                tier.resize(4 * MiB if step % 2 else 8 * MiB)
                tier.relocate(tier.retired_keys())
            else:
                tier.clear()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors
    stats = tier.stats()
    assert stats["zombies"] == 0 and stats["used_bytes"] == stats["entries"] * n
    assert stats["hits"] > 0
    tier.close()


def test_a_page_whose_part_the_copy_refuses_fails_alone_and_leaks_no_slot():
    """A batch copy is all or nothing: a strided source part fails the put of the batch (no key
    published, every slot free again); a read-only destination fails the get (a miss, the pin
    dropped: the entry can be removed and its slot reused)."""
    from hicache_mooncake.tiers.policy import AccessContext

    tier = DramTier(capacity=4 * MiB, slab_size=MiB)
    good = [memoryview(payload("g", 8192))]
    strided = [memoryview(np.zeros(16384, np.uint8)[::2])]
    ctx = AccessContext(size=8192)
    assert tier.put_batch([("g", good, ctx), ("s", strided, ctx)]) == [False, False]
    assert tier.entry_count() == 0 and tier.stats()["used_bytes"] == 0
    assert put(tier, "a", 8192)
    assert tier.get_batch_into([("a", [memoryview(bytes(8192))], ctx)]) == [False]
    assert tier.remove_batch(["a"]) == 1 and tier.stats()["used_bytes"] == 0
    assert put(tier, "b", 8192) and np.array_equal(read(tier, "b", 8192), payload("b", 8192))
    tier.close()
