"""Key strings live on disk, not in memory: once a region's summary is written its keys leave
memory (the index holds fingerprints), yet every consumer of key strings still gets exactly the
right ones: ``on_evict`` is told exactly the keys that left (by a reclaim, and by a synchronous
eviction when no region was reclaimed ahead, told when the region is reopened), and ``keys()``
lists exactly the stored keys, before and after a reopen."""

from __future__ import annotations

import time

from ssd_helpers import aligned_array, open_engine, value_for

from hicache_mooncake.ssd import SsdEngine
from hicache_mooncake.ssd.region import RegionState

SIZE = 60 << 10


def _put_all(e: SsdEngine, keys: list[str]) -> None:
    for i in range(0, len(keys), 8):
        batch = []
        for k in keys[i : i + 8]:
            arr = aligned_array(SIZE)
            arr[:] = value_for(k, SIZE)
            batch.append((k, [memoryview(arr)]))
        assert all(e.put_batch(batch))


def _summaries_written(e: SsdEngine) -> None:
    """Wait until every sealed region's summary is on disk (its keys left memory)."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with e._core.lock:
            sealed = [r for r in e._core.regions if r.state is RegionState.SEALED]
            if sealed and all(r.names is None for r in sealed):
                return
        time.sleep(0.01)
    raise AssertionError("summaries not written")


def _check(e: SsdEngine, put: list[str], evicted: list[str]) -> None:
    stored = [k for k in put if e.contains(k)]
    assert len(evicted) == len(set(evicted))  # each told once
    assert set(evicted) == set(put) - set(stored)  # exactly the keys that left
    assert sorted(e.keys()) == sorted(stored)


def test_keys_leave_memory_and_on_evict_and_keys_still_name_them(ssd_dir: str) -> None:
    e = open_engine(ssd_dir, capacity_bytes=6 << 20, region_size=1 << 20, reinsertion_hits=0)
    evicted: list[str] = []
    e.on_evict = evicted.append
    put = [f"model/tp0/page-{i:05d}" for i in range(150)]
    try:
        _put_all(e, put[:45])
        _summaries_written(e)
        assert e._core.index.nbytes > 0 and not evicted
        _check(e, put[:45], evicted)
        _put_all(e, put[45:])  # the first regions are reclaimed: keys read from their summaries
        assert evicted
        _check(e, put, evicted)
    finally:
        e.close()
    e = open_engine(ssd_dir, capacity_bytes=6 << 20, region_size=1 << 20, reinsertion_hits=0)
    try:
        with e._core.lock:
            assert all(r.names is None for r in e._core.regions if r.state is RegionState.SEALED)
        # (a reclaimed region not reused since keeps its summary: its entries may come back)
        assert sorted(e.keys()) == sorted(k for k in put if e.contains(k))
    finally:
        e.close()


def test_a_synchronous_eviction_tells_the_keys_when_the_region_is_reopened(ssd_dir: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No reclaim ahead of the writes (as when the reclaimer is busy): the allocator evicts the
    oldest region under its lock, where no file can be read; the keys are told by the region's
    reopen, from its summary, before the summary goes."""
    from hicache_mooncake.ssd.reclaimer import Reclaimer

    monkeypatch.setattr(Reclaimer, "maybe_reclaim", lambda self, di, deadline=None: None)
    e = open_engine(ssd_dir, capacity_bytes=6 << 20, region_size=1 << 20, reinsertion_hits=0)
    evicted: list[str] = []
    e.on_evict = evicted.append
    put = [f"model/tp0/page-{i:05d}" for i in range(150)]
    try:
        _put_all(e, put[:45])
        _summaries_written(e)
        _put_all(e, put[45:])
        end = time.monotonic() + 10
        while time.monotonic() < end and len(evicted) < len([k for k in put if not e.contains(k)]):
            time.sleep(0.01)  # told on the I/O pool, by the reopen
        assert evicted
        _check(e, put, evicted)
    finally:
        e.close()


def test_regions_scanned_at_a_strict_open_are_summarized_and_their_keys_leave_memory(ssd_dir: str) -> None:
    put = [f"model/tp0/page-{i:05d}" for i in range(40)]
    e = open_engine(ssd_dir, capacity_bytes=6 << 20, region_size=1 << 20)
    try:
        _put_all(e, put)
    finally:
        e.close()
    e = open_engine(ssd_dir, capacity_bytes=6 << 20, region_size=1 << 20, strict=True)
    try:
        assert e.stats()["recover_from_summaries"] == 0  # strict: every region scanned
        _summaries_written(e)
        assert sorted(e.keys()) == sorted(put)
    finally:
        e.close()
