"""Space: disk full on a real size-limited tmpfs, the free-space floor, FIFO reclaim and reinsertion."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from ssd_helpers import check_get, open_engine, value_for

from hicache_mooncake.ssd.space import free_bytes

MB = 1 << 20


def _fill(path: str, nbytes: int) -> None:
    """Write up to ``nbytes`` (stops quietly at ENOSPC), like another program filling the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    chunk = b"\xab" * (64 << 10)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[: min(left, len(chunk))])
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_disk_full_on_tmpfs_returns_false_then_recovers(small_tmpfs: str) -> None:
    d = os.path.join(small_tmpfs, "ssd")
    hog = os.path.join(small_tmpfs, "hog")
    _fill(hog, 64 * MB)  # fills the 8 MiB filesystem
    with open_engine(d, capacity_bytes=32 * MB, region_size=MB, direct_io="off") as e:
        v = value_for("a", 300_000)
        assert e.put("a", [memoryview(v)]) is False
        assert e.stats()["rejected"]["no_space"] >= 1
        assert e.get_into("a", [memoryview(np.zeros(300_000, np.uint8))]) is False
        os.unlink(hog)
        assert e.put("a", [memoryview(v)]) is True  # retried after the 1 s back-off or another region
        # engine capacity (32 MiB) > filesystem (8 MiB): regions stop being allocated at disk full
        # and old ones are reclaimed instead; nothing crashes, every hit is right.
        results = []
        for i in range(120):
            k = f"f{i}"
            results.append(e.put(k, [memoryview(value_for(k, 250_000))]))
        st = e.stats()
        assert st["regions_allocated"] < 9 and st["reclaimed_regions"] > 0
        assert sum(results) > 100
        hits = sum(check_get(e, f"f{i}", 250_000) for i in range(120))
        assert 0 < hits < 120


def test_enospc_on_write_with_sparse_fallback(small_tmpfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No fallocate (sparse region files): ENOSPC surfaces at pwritev; put returns False, counted."""

    def no_fallocate(fd: int, off: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "fallocate unsupported (test)")

    monkeypatch.setattr(os, "posix_fallocate", no_fallocate)
    d = os.path.join(small_tmpfs, "ssd")
    with open_engine(d, capacity_bytes=32 * MB, region_size=MB, direct_io="off") as e:
        assert e.put("first", [memoryview(value_for("first", 1000))])  # opens a (sparse) region
        _fill(os.path.join(small_tmpfs, "hog"), 64 * MB)
        res = [e.put(f"s{i}", [memoryview(value_for(f"s{i}", 200_000))]) for i in range(6)]
        assert res.count(False) >= 1
        assert e.stats()["rejected"]["no_space"] >= 1
        for i, ok in enumerate(res):
            if ok:
                assert check_get(e, f"s{i}", 200_000)


def test_free_space_floor_rejects_and_releases(small_tmpfs: str) -> None:
    d = os.path.join(small_tmpfs, "ssd")
    os.makedirs(d)
    floor = free_bytes(small_tmpfs) - 4 * MB  # room for about 4 regions of ours
    with open_engine(d, capacity_bytes=16 * MB, region_size=MB, direct_io="off", min_free_bytes=floor) as e:
        for i in range(30):
            assert e.put(f"g{i}", [memoryview(value_for(f"g{i}", 300_000))])
        st = e.stats()
        assert st["regions_allocated"] <= 4 and st["reclaimed_regions"] > 0
        before = free_bytes(small_tmpfs)
        _fill(os.path.join(small_tmpfs, "other-program"), 2 * MB)  # a foreign writer eats the headroom
        assert free_bytes(small_tmpfs) < floor
        e._alloc.floors[0].invalidate()
        assert e.put("x", [memoryview(value_for("x", 1000))]) is False
        st = e.stats()
        assert st["rejected"]["floor"] >= 1 and st["released_regions"] >= 1
        assert free_bytes(small_tmpfs) > before - 2 * MB  # our region files gave space back


def test_fifo_reclaim_reinsertion_and_on_evict(ssd_dir: str) -> None:
    evicted: list[str] = []
    with open_engine(ssd_dir, capacity_bytes=4 * MB, region_size=MB, reinsertion_hits=1) as e:
        e.on_evict = evicted.append
        size = 200_000
        assert e.put("hot", [memoryview(value_for("hot", size))])
        for i in range(60):
            assert e.put(f"c{i}", [memoryview(value_for(f"c{i}", size))])
            assert check_get(e, "hot", size), f"hot entry lost after {i} puts"
        st = e.stats()
        assert st["reclaimed_regions"] > 0 and st["reinserted_entries"] > 0
        assert "c0" in evicted and not e.contains("c0")
        assert "hot" not in evicted
        assert all(not e.contains(k) for k in evicted if k != "hot")
        assert st["entries"] <= 4 * 4  # at most ~4 entries of 200 KB per 1 MiB region
    # reinsertion disabled: the hot key ages out like the others
    with open_engine(ssd_dir + "-b", capacity_bytes=4 * MB, region_size=MB, reinsertion_hits=0) as e:
        assert e.put("hot", [memoryview(value_for("hot", 200_000))])
        for i in range(60):
            e.put(f"c{i}", [memoryview(value_for(f"c{i}", 200_000))])
            check_get(e, "hot", 200_000)
        assert not e.contains("hot") and e.stats()["reinserted_entries"] == 0


def test_reclaim_keeps_entries_its_owner_still_wants(ssd_dir: str) -> None:
    """``keep`` (a placement deciding residency) saves entries that were never hit."""
    wanted = {"k0", "k1"}
    with open_engine(ssd_dir, capacity_bytes=4 * MB, region_size=MB, reinsertion_hits=0) as e:
        e.keep = wanted.__contains__
        for key in sorted(wanted):
            assert e.put(key, [memoryview(value_for(key, 200_000))])
        for i in range(60):
            assert e.put(f"c{i}", [memoryview(value_for(f"c{i}", 200_000))])
        assert e.stats()["reclaimed_regions"] > 0
        assert all(check_get(e, key, 200_000) for key in wanted)
        assert not e.contains("c0")
