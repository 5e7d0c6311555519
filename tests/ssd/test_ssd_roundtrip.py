from __future__ import annotations

import numpy as np
import pytest
from ssd_helpers import aligned_array, check_get, open_engine, split_parts, value_for

from hicache_mooncake.ssd import SsdEngine, SsdInUseError

SIZES = [0, 1, 7, 4095, 4096, 4097, 12345, 65536, 100_000, 262_144 + 3]


@pytest.mark.parametrize("mode", ["on", "off"])
def test_round_trip_sizes_and_parts(ssd_dir: str, mode: str) -> None:
    with open_engine(ssd_dir, direct_io=mode, capacity_bytes=32 << 20) as e:
        assert e.stats()["io_mode"] == ("direct" if mode == "on" else "buffered")
        keys = []
        for size in SIZES:
            for nparts in (1, 2, 3):
                key = f"k/{size}/{nparts}"
                keys.append((key, size, nparts))
                assert e.put(key, split_parts(value_for(key, size), nparts))
        for key, size, nparts in keys:
            assert e.contains(key)
            assert e.object_size(key) == size
            assert check_get(e, key, size, nparts=4 - nparts)
        # batch gets coalesce adjacent entries; also mixed with misses
        outs = [np.zeros(s, np.uint8) for _, s, _ in keys]
        items = [(k, split_parts(o, n)) for (k, _, n), o in zip(keys, outs, strict=True)]
        items.append(("missing", [memoryview(np.zeros(10, np.uint8))]))
        res = e.get_batch_into(items)
        assert res == [True] * len(keys) + [False]
        for (k, s, _), o in zip(keys, outs, strict=True):
            assert np.array_equal(o, value_for(k, s))
        st = e.stats()
        assert st["entries"] == len(keys) and st["hits"] >= len(keys) and st["misses"] >= 1


def test_batch_put_and_aligned_direct_reads(ssd_dir: str) -> None:
    with open_engine(ssd_dir, direct_io="on", capacity_bytes=64 << 20, region_size=4 << 20) as e:
        items = [(f"p{i}", value_for(f"p{i}", 64 << 10)) for i in range(40)]
        assert e.put_batch([(k, [memoryview(v)]) for k, v in items]) == [True] * 40
        # page-aligned destination memory: read straight into it (no bounce), split in 2 parts
        outs = [aligned_array(64 << 10) for _ in items]
        res = e.get_batch_into(
            [
                (k, [memoryview(o[: 32 << 10]), memoryview(o[32 << 10 :])])
                for (k, _), o in zip(items, outs, strict=True)
            ]
        )
        assert all(res)
        for (_, v), o in zip(items, outs, strict=True):
            assert np.array_equal(v, o)
        # unaligned destinations go through a bounce buffer and still round-trip
        outs2 = [np.zeros((64 << 10) + 1, np.uint8)[1:] for _ in items]
        assert all(e.get_batch_into([(k, [memoryview(o)]) for (k, _), o in zip(items, outs2, strict=True)]))
        assert all(np.array_equal(v, o) for (_, v), o in zip(items, outs2, strict=True))


def test_immutable_size_mismatch_remove_keys(ssd_dir: str) -> None:
    with open_engine(ssd_dir) as e:
        v = value_for("a", 5000)
        assert e.put("a", [memoryview(v)])
        assert e.put("a", [memoryview(np.zeros(10, np.uint8))])  # existing: True, not rewritten
        assert e.object_size("a") == 5000
        assert check_get(e, "a", 5000)
        assert not e.get_into("a", [memoryview(np.zeros(4999, np.uint8))])  # size mismatch
        assert e.stats()["get_size_mismatch"] == 1
        assert sorted(e.keys()) == ["a"]
        assert e.remove("a") and not e.remove("a")
        assert not e.contains("a") and e.object_size("a") is None
        assert not check_get(e, "a", 5000)
        # too large and bad keys are refused, counted
        assert not e.put("big", [memoryview(np.zeros(2 << 20, np.uint8))])
        assert not e.put("x" * 2000, [memoryview(v)])
        assert e.stats()["rejected"]["too_large"] == 1
        assert e.stats()["rejected"]["bad_key"] == 1
        # duplicate keys within one batch are written once
        assert e.put_batch([("d", [memoryview(v)]), ("d", [memoryview(v)])]) == [True, True]
        assert e.stats()["entries"] == 1


@pytest.mark.parametrize("mode", ["on", "off"])
def test_reopen_finds_every_committed_page(ssd_dir: str, mode: str) -> None:
    keys = [(f"r{i}", 1000 + 997 * i) for i in range(120)]
    with open_engine(ssd_dir, direct_io=mode, capacity_bytes=32 << 20) as e:
        for j in range(0, len(keys), 10):
            chunk = keys[j : j + 10]
            assert all(e.put_batch([(k, split_parts(value_for(k, s), 2)) for k, s in chunk]))
    with open_engine(ssd_dir, direct_io=mode, capacity_bytes=32 << 20) as e:
        st = e.stats()
        assert st["entries"] == len(keys) and st["recovered_entries"] == len(keys)
        assert st["recover_corrupt"] == 0 and st["recover_torn"] == 0
        for k, s in keys:
            assert check_get(e, k, s)
        # and new writes after reopen go on working, with seqs above the old ones
        assert e.put("after", [memoryview(value_for("after", 100))])
    with open_engine(ssd_dir, direct_io=mode, capacity_bytes=32 << 20) as e:
        assert check_get(e, "after", 100) and e.stats()["entries"] == len(keys) + 1


def test_directory_lock_and_idempotent_close(ssd_dir: str) -> None:
    e = open_engine(ssd_dir)
    with pytest.raises(SsdInUseError):
        open_engine(ssd_dir)
    e.close()
    e.close()
    assert e.put_batch([("z", [memoryview(b"x")])]) == [False]
    assert e.get_batch_into([("z", [memoryview(bytearray(1))])]) == [False]
    e2 = open_engine(ssd_dir)
    assert isinstance(e2, SsdEngine)
    e2.close()


def test_multiple_dirs_spread_regions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    with open_engine(dirs[0], dirs=dirs, capacity_bytes=16 << 20) as e:
        for i in range(30):
            assert e.put(f"m{i}", [memoryview(value_for(f"m{i}", 200_000))])
    import os

    assert any(n.startswith("region-") for n in os.listdir(dirs[0]))
    assert any(n.startswith("region-") for n in os.listdir(dirs[1]))
    with open_engine(dirs[0], dirs=dirs, capacity_bytes=16 << 20) as e:
        assert all(check_get(e, f"m{i}", 200_000) for i in range(30))
