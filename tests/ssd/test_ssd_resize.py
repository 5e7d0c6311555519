"""Resizing the SSD engine while it serves: growing opens more regions, shrinking empties the
regions past the new size (entries the owner keeps are rewritten below it, the rest dropped and
reported) and gives their disk space back; readers never see other bytes."""

from __future__ import annotations

import os
import threading
import time

import pytest
from ssd_helpers import check_get, open_engine, value_for

from hicache_mooncake.ssd.format import parse_region_file_name

MiB = 1 << 20
SIZE = 60_000


def region_files(directory: str) -> int:
    return sum(1 for n in os.listdir(directory) if parse_region_file_name(n) is not None)


def fill(engine, prefix: str, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    keys = [f"{prefix}{i}" for i in range(n)]
    for i in range(0, n, 8):
        batch = keys[i : i + 8]
        assert all(engine.put_batch([(k, [memoryview(value_for(k, SIZE))]) for k in batch]))
    return keys


def test_shrink_keeps_what_the_owner_keeps_and_gives_disk_space_back(ssd_dir):
    engine = open_engine(ssd_dir, capacity_bytes=8 * MiB, max_capacity_bytes=16 * MiB, direct_io="off")
    keys = fill(engine, "k", 100)  # about 7 of 8 regions
    assert region_files(ssd_dir) >= 6
    kept = set(keys[-10:])
    engine.keep = kept.__contains__
    evicted: list[str] = []
    engine.on_evict = evicted.append
    progress = engine.resize(4 * MiB, time.monotonic() + 30)
    assert progress.done and progress.total > 0
    assert engine.capacity_bytes == 4 * MiB and engine.stats()["capacity"] == 4 * MiB
    assert region_files(ssd_dir) <= 4
    for k in kept:  # rewritten below the new size
        assert check_get(engine, k, SIZE)
    assert evicted and not kept & set(evicted)
    for k in keys:  # every other key is a clean miss or its own bytes
        check_get(engine, k, SIZE)
    fill(engine, "after", 40)  # new writes stay below the new size
    assert region_files(ssd_dir) <= 4
    engine.close()


def test_grow_up_to_max_capacity_and_no_further(ssd_dir):
    engine = open_engine(ssd_dir, capacity_bytes=4 * MiB, max_capacity_bytes=8 * MiB, direct_io="off")
    assert engine.resize(8 * MiB, time.monotonic() + 5).done
    fill(engine, "g", 110)
    assert region_files(ssd_dir) > 4
    with pytest.raises(ValueError, match="2 to 8 regions"):
        engine.resize(16 * MiB, time.monotonic() + 5)
    with pytest.raises(ValueError):
        engine.resize(1 * MiB, time.monotonic() + 5)
    engine.close()
    reopened = open_engine(ssd_dir, capacity_bytes=8 * MiB, direct_io="off")
    assert reopened.stats()["entries"] > 0  # the grown regions are found again
    reopened.close()


def test_readers_and_writers_during_a_shrink_see_only_right_bytes(ssd_dir):
    engine = open_engine(ssd_dir, capacity_bytes=12 * MiB, max_capacity_bytes=12 * MiB, direct_io="off")
    keys = fill(engine, "c", 150)
    engine.keep = lambda k: k.endswith("7")
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                for k in keys[::3]:
                    check_get(engine, k, SIZE)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def writer() -> None:
        i = 0
        while not stop.is_set():
            k = f"w{i}"
            engine.put_batch([(k, [memoryview(value_for(k, SIZE))])])
            i += 1

    threads = [
        threading.Thread(target=reader),
        threading.Thread(target=reader),
        threading.Thread(target=writer),
    ]
    for t in threads:
        t.start()
    try:
        progress = engine.resize(4 * MiB, time.monotonic() + 60)
        assert progress.done
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert region_files(ssd_dir) <= 4
    engine.close()
