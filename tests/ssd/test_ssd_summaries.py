"""Attach in seconds: a clean close leaves a summary per region and a reopen reads only those;
regions open at a crash are scanned in the background while the engine already serves."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from ssd_helpers import check_get, open_engine, value_for

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.ssd import rescan as rescan_mod
from hicache_mooncake.ssd.format import parse_region_file_name
from hicache_mooncake.ssd.recover import scan_region
from hicache_mooncake.ssd.summary import SUFFIX

OPTS = {"capacity_bytes": 16 << 20, "region_size": 1 << 20, "direct_io": "off"}
CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")


def _fill(d: str, n: int, tag: str = "k") -> dict[str, int]:
    keys = {f"{tag}{i}": 1000 + 37 * i for i in range(n)}
    with open_engine(d, **OPTS) as e:
        items = list(keys.items())
        for j in range(0, n, 8):
            assert all(e.put_batch([(k, [memoryview(value_for(k, s))]) for k, s in items[j : j + 8]]))
    return keys


def test_a_clean_reopen_reads_summaries_not_regions(ssd_dir: str) -> None:
    keys = _fill(ssd_dir, 300)
    regions = [n for n in os.listdir(ssd_dir) if n.endswith(".bin")]
    assert len([n for n in os.listdir(ssd_dir) if n.endswith(SUFFIX)]) == len(regions) > 3
    with open_engine(ssd_dir, **OPTS) as e:
        st = e.stats()
        assert st["recover_from_summaries"] == len(regions) and st["recovering_regions"] == 0
        assert st["entries"] == len(keys) and st.get("recover_corrupt", 0) == 0
        assert all(check_get(e, k, s) for k, s in keys.items())


def test_a_region_whose_open_is_under_way_at_close_gets_its_summary(ssd_dir: str, monkeypatch: Any) -> None:
    """A standby region's open (its header written on the I/O pool) that ends after close began:
    close waits for it and writes its summary, so the next open scans no region."""
    from hicache_mooncake.ssd.allocator import RegionAllocator

    started, gate = threading.Event(), threading.Event()
    real = RegionAllocator._open_region

    def held_open(self: RegionAllocator, r: Any) -> Any:
        started.set()
        gate.wait(30)  # released once close is waiting
        return real(self, r)

    e = open_engine(ssd_dir, **OPTS)
    assert e.put_batch([(f"k{i}", [memoryview(value_for(f"k{i}", 2000))]) for i in range(4)]) == [True] * 4
    monkeypatch.setattr(RegionAllocator, "_open_region", held_open)
    for i in range(4, 2000):  # until a region fills and its next standby's open is held
        e.put(f"k{i}", [memoryview(value_for(f"k{i}", 2000))])
        if started.is_set():
            break
    assert started.is_set()
    closer = threading.Thread(target=e.close)
    closer.start()
    time.sleep(0.3)
    assert closer.is_alive()  # close waits for the open
    gate.set()
    closer.join(30)
    assert not closer.is_alive()
    monkeypatch.undo()
    with open_engine(ssd_dir, **OPTS) as e2:
        st = e2.stats()
        assert st["recover_from_summaries"] == st["regions_allocated"] and st["recovering_regions"] == 0


def test_after_a_crash_the_engine_serves_while_the_open_regions_are_scanned(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "ssd")
    ack = str(tmp_path / "ack")
    p = subprocess.Popen([sys.executable, CHILD, d, ack, "3", "off", str(400 << 20)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if os.path.exists(ack) and os.path.getsize(ack) > 3_000:
            break
        time.sleep(0.02)
    assert p.poll() is None, "the writer ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    acked: dict[str, int] = {}
    with open(ack) as f:
        for line in f:
            if line.endswith("\n") and not line.startswith("#"):
                k, s = line.split()
                acked[k] = int(s)
    assert len(acked) > 20
    unsummarized: set[str] = set()  # acknowledged keys in regions left without a summary by the kill
    for name in os.listdir(d):
        rid = parse_region_file_name(name)
        if rid is not None and not os.path.exists(os.path.join(d, name[: -len(".bin")] + SUFFIX)):
            scan = scan_region(os.path.join(d, name), rid, 4 << 20, None)
            unsummarized |= {x.key for x in scan.entries} & set(acked)
    gate = threading.Event()
    real = rescan_mod.recover

    def slow_recover(*a, **kw):  # type: ignore[no-untyped-def]
        gate.wait(30)  # hold the background scan: the engine must serve meanwhile
        return real(*a, **kw)

    monkeypatch.setattr(rescan_mod, "recover", slow_recover)
    e = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=512 << 20, region_size=4 << 20, direct_io="off"))
    try:
        st = e.stats()
        assert st["recovering_regions"] >= 1  # the regions open at the kill have no summary
        assert st["recover_from_summaries"] >= 1
        served_early = sum(check_get(e, k, s) for k, s in acked.items())
        assert e.put("during", [memoryview(value_for("during", 3000))]) and check_get(e, "during", 3000)
        gate.set()
        assert e.wait_recovered(60)
        assert e.stats()["recovering_regions"] == 0
        assert all(check_get(e, k, s) for k, s in acked.items()), "an acknowledged page was lost"
        assert served_early == len(acked) - len(unsummarized)
    finally:
        gate.set()
        e.close()
    with open_engine(d, capacity_bytes=512 << 20, region_size=4 << 20, direct_io="off") as e2:
        assert e2.stats()["recovering_regions"] == 0 and all(check_get(e2, k, s) for k, s in acked.items())


def test_a_store_of_the_previous_format_gets_summaries_after_one_scan(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "format_v1_store.tar.gz")
    with tarfile.open(fixture) as t:
        t.extractall(tmp_path, filter="data")
    store = str(tmp_path / "store")
    opts = {"capacity_bytes": 4 * (64 << 10), "region_size": 64 << 10, "direct_io": "off"}
    with open_engine(store, **opts) as e:
        assert e.stats()["recover_from_summaries"] == 0 and e.stats()["entries"] == 10
    with open_engine(store, **opts) as e:
        assert e.stats()["recover_from_summaries"] >= 1 and e.stats()["entries"] == 10
        assert all(check_get(e, f"v1-{i}", 1 + 997 * i) for i in range(10))
    shutil.rmtree(store)


def test_a_summary_that_lists_entries_beyond_its_region_is_not_used(ssd_dir: str) -> None:
    """A summary with a valid checksum whose entry lies past the region's end (a bug, or a file
    from elsewhere) is not this region's index: the region is scanned instead, nothing is lost."""
    from hicache_mooncake.ssd.summary import read_summary, write_summary

    keys = _fill(ssd_dir, 300)
    regions = sorted(n for n in os.listdir(ssd_dir) if n.endswith(".bin"))
    path = os.path.join(ssd_dir, regions[0])
    rid = parse_region_file_name(regions[0])
    assert rid is not None
    with open_engine(ssd_dir, **OPTS) as e:
        epoch = e._core.epoch
    summ = read_summary(path, rid, OPTS["region_size"], epoch)
    assert summ is not None and summ.keys
    entries = list(zip(summ.keys, summ.offsets, summ.lengths, summ.seqs, strict=True))
    entries[0] = (entries[0][0], summ.end_offset + 4096, entries[0][2], entries[0][3])
    write_summary(path, rid, summ.header.gen, epoch, summ.end_offset, entries)
    assert read_summary(path, rid, OPTS["region_size"], epoch) is None
    with open_engine(ssd_dir, **OPTS) as e:
        assert e.wait_recovered(60)
        st = e.stats()
        assert st["recover_from_summaries"] == len(regions) - 1 and st["entries"] == len(keys)
        assert all(check_get(e, k, s) for k, s in keys.items())


# ------------------------------------------------------------------ background scan in slices


def _drop_the_largest_summary(d: str) -> list[str]:
    """Remove the summary of the region holding the most entries (as a crash leaves a region
    without one): the next open scans it in the background. Returns its keys, in file order."""
    best: tuple[list[str], str] | None = None
    for name in os.listdir(d):
        rid = parse_region_file_name(name)
        if rid is None:
            continue
        keys = [x.key for x in scan_region(os.path.join(d, name), rid, OPTS["region_size"], None).entries]
        if best is None or len(keys) > len(best[0]):
            best = (keys, os.path.join(d, name[: -len(".bin")] + SUFFIX))
    assert best is not None and len(best[0]) > 3 * SLICE
    os.unlink(best[1])
    return best[0]


SLICE = 8


def _open_scanning(
    d: str, monkeypatch: Any, between: Callable[[SsdEngine, list[str]], None]
) -> tuple[SsdEngine, list[list[str]]]:
    """Open the store at ``d``, its background scan indexing ``SLICE`` entries per slice, and
    ``between(engine, first_slice)`` called on the scan thread right after the first slice (the
    lock released, the rest of the region not yet indexed). Returns the engine and, once its
    scan is done, every slice indexed."""
    monkeypatch.setattr(rescan_mod, "INDEX_SLICE", SLICE)
    real = rescan_mod.BackgroundScan._index_slice
    slices: list[list[str]] = []
    opened = threading.Event()
    engine: list[SsdEngine] = []

    def observed(self, r, keys, offsets, lengths, seqs):  # type: ignore[no-untyped-def]
        indexed = real(self, r, keys, offsets, lengths, seqs)
        if indexed:
            slices.append(list(keys))
            if len(slices) == 1:
                assert opened.wait(30)
                between(engine[0], list(keys))
        return indexed

    monkeypatch.setattr(rescan_mod.BackgroundScan, "_index_slice", observed)
    engine.append(SsdEngine(SsdOptions(dirs=(d,), **OPTS)))
    opened.set()
    return engine[0], slices


def _on_another_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on another thread; it must return within 10 s (the engine lock held by the scan
    would block it)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "a call waited for the background scan to finish a region"
    return out[0]


def test_a_region_scanned_in_the_background_is_indexed_in_slices_and_served_between_them(
    ssd_dir: str, monkeypatch: Any
) -> None:
    keys = _fill(ssd_dir, 300)
    region_keys = _drop_the_largest_summary(ssd_dir)
    others = {k: s for k, s in keys.items() if k not in set(region_keys)}
    seen: dict[str, Any] = {}

    def between(e: SsdEngine, first: list[str]) -> None:
        seen["first_served"] = _on_another_thread(lambda: all(check_get(e, k, keys[k]) for k in first))
        seen["rest_indexed"] = _on_another_thread(lambda: e.contains_batch(region_keys[len(first) :]))
        seen["others_served"] = _on_another_thread(lambda: all(check_get(e, k, s) for k, s in others.items()))
        seen["recovering"] = _on_another_thread(lambda: e.stats()["recovering_regions"])
        seen["put"] = _on_another_thread(lambda: e.put("during", [memoryview(value_for("during", 3000))]))

    e, slices = _open_scanning(ssd_dir, monkeypatch, between)
    try:
        assert e.wait_recovered(60)
        assert seen == {
            "first_served": True,
            "rest_indexed": [False] * (len(region_keys) - SLICE),
            "others_served": True,
            "recovering": 1,
            "put": True,
        }
        assert [len(x) for x in slices] == [SLICE] * (len(region_keys) // SLICE) + (
            [len(region_keys) % SLICE] if len(region_keys) % SLICE else []
        )
        assert [k for x in slices for k in x] == region_keys
        st = e.stats()
        assert st["recovering_regions"] == 0 and st["entries"] == len(keys) + 1
        assert all(check_get(e, k, s) for k, s in keys.items()) and check_get(e, "during", 3000)
    finally:
        e.close()
    with open_engine(ssd_dir, **OPTS) as e2:  # the scanned region got its summary back
        assert e2.stats()["recover_from_summaries"] == e2.stats()["regions_allocated"]
        assert all(check_get(e2, k, s) for k, s in keys.items())


def test_a_clear_between_two_slices_ends_the_regions_scan_and_nothing_of_it_comes_back(
    ssd_dir: str, monkeypatch: Any
) -> None:
    keys = _fill(ssd_dir, 300)
    region_keys = _drop_the_largest_summary(ssd_dir)
    cleared: list[bool] = []

    def between(e: SsdEngine, _first: list[str]) -> None:
        cleared.append(_on_another_thread(lambda: e.clear(time.monotonic() + 10)))

    e, slices = _open_scanning(ssd_dir, monkeypatch, between)
    try:
        assert e.wait_recovered(60) and cleared == [True]
        assert len(slices) == 1  # no slice after the clear
        st = e.stats()
        assert st["entries"] == 0 and st["bytes"] == 0 and st["recovering_regions"] == 0
        assert not any(e.contains_batch(list(keys)))
        assert e.put("after", [memoryview(value_for("after", 3000))]) and check_get(e, "after", 3000)
    finally:
        e.close()
    with open_engine(ssd_dir, **OPTS) as e2:
        assert not any(e2.contains_batch(region_keys)) and check_get(e2, "after", 3000)


def test_a_scan_failing_between_two_slices_unindexes_what_it_indexed_of_that_region(
    ssd_dir: str, monkeypatch: Any, caplog: Any
) -> None:
    """A failure loses that region's entries only: the slices indexed before it are taken out of
    the index (they point into a region about to be freed and reused), the others stay served."""
    keys = _fill(ssd_dir, 300)
    region_keys = _drop_the_largest_summary(ssd_dir)
    others = {k: s for k, s in keys.items() if k not in set(region_keys)}

    def between(_e: SsdEngine, _first: list[str]) -> None:
        raise OSError("injected: the scan fails between two slices")

    e, slices = _open_scanning(ssd_dir, monkeypatch, between)
    try:
        assert e.wait_recovered(60) and len(slices) == 1
        assert "background scan" in caplog.text and "injected" in caplog.text
        st = e.stats()
        assert st["entries"] == len(others) and st["bytes"] == sum(others.values())
        assert not any(e.contains_batch(region_keys))
        assert all(check_get(e, k, s) for k, s in others.items())
        for i in range(60):  # writes reuse the freed region; no stale entry points into it
            assert e.put(f"new{i}", [memoryview(value_for(f"new{i}", 20_000))])
        assert all(check_get(e, f"new{i}", 20_000) for i in range(60))
        assert not any(e.contains_batch(region_keys))
    finally:
        e.close()


def test_a_region_scan_gives_up_the_gil_per_chunk_not_per_entry(ssd_dir: str, monkeypatch: Any) -> None:
    """Each read and each numpy search of a scan releases the GIL, and taking it back costs up to
    a switch interval (5 ms) while another thread runs Python, as SGLang's do during a background
    scan: scanning a region of back-to-back entries makes a couple of each, not some per entry
    (per entry, a scan of three 64 MiB regions took 60 s under a busy thread instead of 0.6 s)."""
    from hicache_mooncake.ssd import recover as recover_mod

    with open_engine(ssd_dir, **OPTS) as e:
        for j in range(0, 200, 20):
            assert all(
                e.put_batch([(f"s{i}", [memoryview(value_for(f"s{i}", 1000))]) for i in range(j, j + 20)])
            )
    reads = searches = 0
    real_read, real_search = recover_mod.preadv_full, np.flatnonzero

    def counted_read(*a: Any) -> int:
        nonlocal reads
        reads += 1
        return real_read(*a)

    def counted_search(*a: Any) -> Any:
        nonlocal searches
        searches += 1
        return real_search(*a)

    monkeypatch.setattr(recover_mod, "preadv_full", counted_read)
    monkeypatch.setattr(recover_mod.np, "flatnonzero", counted_search)
    name = min(n for n in os.listdir(ssd_dir) if parse_region_file_name(n) is not None)
    rid = parse_region_file_name(name)
    assert rid is not None
    scan = scan_region(os.path.join(ssd_dir, name), rid, OPTS["region_size"], None)
    assert scan.status == "live" and len(scan.entries) > 100
    assert all(x.key.startswith("s") for x in scan.entries)
    assert reads <= 2 and searches <= 2, (reads, searches, len(scan.entries))


def test_a_put_for_an_epoch_a_clear_ended_writes_nothing_a_scan_could_find(
    ssd_dir: str, monkeypatch: Any
) -> None:
    """A demotion takes its bytes in epoch e, a clear runs before its space is reserved, and the
    reservation lands in a region of epoch e + 1: the put is refused (False, nothing indexed) and
    its bytes are never written there, so a scan of that region after a crash (no summary) cannot
    bring back a page written before the clear (the kill -9 race of ``tests/ops/test_clear_race.py``)."""
    from hicache_mooncake.ssd.allocator import RegionAllocator

    e = open_engine(ssd_dir, **OPTS)
    try:
        assert e.put("before", [memoryview(value_for("before", 3000))])
        epoch = e.epoch
        real = RegionAllocator.reserve
        cleared: list[bool] = []

        def clear_first(self: RegionAllocator, *a: Any, **kw: Any) -> Any:
            if not cleared:
                cleared.append(e.clear())  # the clear lands between the put's check and its reservation
            return real(self, *a, **kw)

        monkeypatch.setattr(RegionAllocator, "reserve", clear_first)
        assert e.put_batch([("stale", [memoryview(value_for("stale", 3000))])], epoch=epoch) == [False]
        monkeypatch.undo()
        assert cleared == [True] and e.epoch != epoch
        assert e.stats()["rejected_stale_epoch"] == 1 and not e.contains_batch(["stale"])[0]
        assert e.put("after", [memoryview(value_for("after", 3000))])
        found = set()
        for name in os.listdir(ssd_dir):
            rid = parse_region_file_name(name)
            if rid is not None:
                scan = scan_region(os.path.join(ssd_dir, name), rid, OPTS["region_size"], None)
                found |= {x.key for x in scan.entries}
        assert "stale" not in found and "after" in found
    finally:
        e.close()
