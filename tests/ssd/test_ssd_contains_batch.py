"""``contains_batch`` (what ``batch_exists`` asks the SSD tier) answers exactly what ``contains``
answers key by key: indexed entries, writes still in flight (staged, not yet indexed), misses,
removed keys; and nothing at all while the tier is not usable (degraded, or a clear outstanding)."""

from __future__ import annotations

import threading
from typing import Any

from ssd_helpers import aligned_array, open_engine, stall_writes, value_for


def _page(key: str) -> memoryview:
    arr = aligned_array(64 << 10)
    arr[:] = value_for(key, arr.size)
    return memoryview(arr)


def test_batch_answer_is_the_per_key_answer_with_a_write_in_flight(ssd_dir: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        assert all(e.put_batch([(f"k{i}", [_page(f"k{i}")]) for i in range(6)]))
        assert e.remove("k2")
        gate, entered = stall_writes(monkeypatch)
        done: list[bool] = []
        writer = threading.Thread(target=lambda: done.append(e.put("flying", [_page("flying")])))
        writer.start()
        assert entered.wait(10)  # "flying" is staged and its write is held: not indexed yet
        keys = ["k0", "never", "flying", "k2", "k5", "k1", "other"]
        assert e.contains_batch(keys) == [True, False, True, False, True, True, False]
        assert e.contains_batch(keys) == [e.contains(k) for k in keys]
        gate.set()
        writer.join(10)
        assert done == [True] and e.contains_batch(["flying"]) == [True]
        assert e.contains_batch([]) == []
    finally:
        monkeypatch.undo()
        e.close()


def test_a_tier_that_is_not_usable_holds_nothing(ssd_dir: str) -> None:
    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    try:
        assert e.put("a", [_page("a")])
        assert e.contains_batch(["a", "b"]) == [True, False]
        e._core.refusing = "clear outstanding"  # as while a clear runs, or the disk is degraded
        assert e.contains_batch(["a", "b"]) == [False, False] == [e.contains("a"), e.contains("b")]
    finally:
        e.close()


def test_an_entry_that_cannot_be_indexed_is_a_failed_put_and_close_does_not_wait(
    ssd_dir: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Fault injection: indexing one written entry raises. That entry's put is False (a miss
    later, never an exception), the rest of the batch is stored, and the region is unpinned, so
    ``close`` returns instead of waiting forever for it."""
    from hicache_mooncake.ssd.index import Index

    e = open_engine(ssd_dir, capacity_bytes=8 << 20, region_size=1 << 20)
    real_set, real_set_entries = Index.set_fp, Index.set_entries
    bad = Index.fp("bad")

    def failing_set(self: Index, fp: int, loc: object) -> object:
        if fp == bad:
            raise RuntimeError("injected")
        return real_set(self, fp, loc)  # type: ignore[arg-type]

    def failing_set_entries(self: Index, fps: Any, *args: Any) -> None:
        if bad in fps.tolist():  # the group's one call fails; its entries are then indexed one by one
            raise RuntimeError("injected")
        real_set_entries(self, fps, *args)

    monkeypatch.setattr(Index, "set_fp", failing_set)
    monkeypatch.setattr(Index, "set_entries", failing_set_entries)
    assert e.put_batch([(k, [_page(k)]) for k in ("a", "bad", "b")]) == [True, False, True]
    assert e.contains_batch(["a", "bad", "b"]) == [True, False, True]
    assert e.stats()["index_failures"] == 1
    done = threading.Event()
    closer = threading.Thread(target=lambda: (e.close(), done.set()), daemon=True)
    closer.start()
    assert done.wait(30)
