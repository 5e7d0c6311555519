"""DRAM tier behaviour a user relies on: bytes come back exact, pressure evicts by policy, a
reader never sees another object's bytes, demotion sees the victim's bytes, close releases."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hicache_mooncake.tiers.dram_tier import DramTier

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
    tier = DramTier(capacity=8 * MiB, slab_size=MiB, policy="lru")
    assert put(tier, "a", 300_000, split=5)
    got = read(tier, "a", 300_000, split=7)
    assert got is not None and np.array_equal(got, payload("a", 300_000))
    assert read(tier, "missing", 10) is None
    assert read(tier, "a", 299_999) is None  # size mismatch is a miss
    assert tier.stats()["size_mismatch"] == 1
    tier.close()


def test_put_of_existing_key_keeps_first_value():
    tier = DramTier(capacity=4 * MiB, slab_size=MiB, policy="lru")
    assert tier.put("k", [memoryview(np.ones(4096, np.uint8))])
    assert tier.put("k", [memoryview(np.zeros(4096, np.uint8))])
    got = np.zeros(4096, np.uint8)
    assert tier.get_into("k", [memoryview(got)]) and got.all()
    tier.close()


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
def test_pressure_evicts_and_capacity_is_never_exceeded(policy):
    tier = DramTier(capacity=4 * MiB, slab_size=MiB, policy=policy)
    for i in range(100):
        assert put(tier, f"k{i}", 200_000)
        stats = tier.stats()
        assert stats["used_bytes"] <= stats["capacity_bytes"]
    stats = tier.stats()
    assert stats["evictions"] == 100 - stats["entries"] > 0
    for key in tier.keys():
        got = read(tier, key, 200_000)
        assert got is not None and np.array_equal(got, payload(key, 200_000))
    tier.close()


def test_lru_keeps_the_recently_read_key():
    tier = DramTier(capacity=MiB, slab_size=MiB, policy="lru")  # 5 slots of 200 KB
    for i in range(5):
        put(tier, f"k{i}", 200_000)
    assert read(tier, "k0", 200_000) is not None
    put(tier, "k5", 200_000)
    assert tier.contains("k0") and not tier.contains("k1")
    tier.close()


def test_a_new_size_class_steals_slabs_from_the_biggest_class():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB, policy="lru")
    for i in range(64):
        assert put(tier, f"small{i}", 20_000)
    assert tier.stats()["free_slabs"] == 0
    assert put(tier, "big", 900_000)
    assert read(tier, "big", 900_000) is not None
    tier.close()


def test_object_larger_than_a_slab_is_refused_not_raised():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB, policy="lru")
    assert not put(tier, "huge", MiB + 1)
    assert tier.stats()["rejected_too_large"] == 1
    tier.close()


def test_demotion_hook_sees_the_victims_bytes_before_reuse():
    demoted: dict[str, bytes] = {}
    tier = DramTier(capacity=MiB, slab_size=MiB, policy="lru")
    tier.on_evict = lambda key, view: demoted.__setitem__(key, view.tobytes())
    for i in range(8):
        put(tier, f"k{i}", 200_000)
    assert set(demoted) == {"k0", "k1", "k2"}
    for key, data in demoted.items():
        assert data == payload(key, 200_000).tobytes()
    tier.close()


def test_failing_demotion_does_not_fail_the_put():
    tier = DramTier(capacity=MiB, slab_size=MiB, policy="lru")

    def broken(key, view):
        raise OSError("disk gone")

    tier.on_evict = broken
    assert all(put(tier, f"k{i}", 200_000) for i in range(8))
    assert tier.stats()["demotion_errors"] == 3
    tier.close()


def test_clear_remove_and_close_are_safe_and_idempotent():
    tier = DramTier(capacity=2 * MiB, slab_size=MiB, policy="s3fifo")
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
    tier = DramTier(capacity=2 * MiB, slab_size=MiB, policy="s3fifo")
    n = 64 * 1024
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(400):
            key = f"k{rng.integers(0, 80)}"
            op = rng.random()
            if op < 0.45:
                put(tier, key, n, split=2)
            elif op < 0.9:
                got = read(tier, key, n, split=3)
                if got is not None and not np.array_equal(got, payload(key, n)):
                    errors.append(key)
            elif op < 0.97:
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
