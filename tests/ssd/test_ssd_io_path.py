"""The I/O path at the disk's pace: I/O pool priorities, the standby region, the region map written
in the background, write jobs of whole entries (staged or in place), staged reads in runs, and the
check of which memory is on huge pages."""

from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ssd_helpers import aligned_array, open_engine, value_for

from hicache_mooncake.native import view_spans
from hicache_mooncake.ssd import SsdOptions
from hicache_mooncake.ssd.allocator import RegionAllocator
from hicache_mooncake.ssd.format import parse_region_file_name
from hicache_mooncake.ssd.hugemem import HugeRanges, huge_fraction, huge_fractions, scanned_huge_fractions
from hicache_mooncake.ssd.io import URGENT, WRITE, IoPool, address_of, huge_buffer
from hicache_mooncake.ssd.state import STATE_NAME, StateFile, load_dir

MiB = 1 << 20


def test_io_pool_runs_urgent_jobs_before_writes() -> None:
    pool = IoPool(1)
    try:
        hold = threading.Event()
        started = threading.Event()
        order: list[str] = []

        def blocker() -> None:
            started.set()
            hold.wait(10)

        pool.submit([blocker], priority=WRITE)
        assert started.wait(10)  # the only thread is busy: what follows queues
        batches = [
            pool.submit([lambda: order.append("write")], priority=WRITE),
            pool.submit([lambda: order.append("open")], priority=URGENT),
        ]
        hold.set()
        assert all(b.wait(time.monotonic() + 10) for b in batches)
        assert order == ["open", "write"]
    finally:
        pool.shutdown()


def test_shutdown_runs_the_jobs_already_queued() -> None:
    pool = IoPool(1)
    ran: list[int] = []
    batch = pool.submit([lambda: time.sleep(0.05), lambda: ran.append(1)], priority=WRITE)
    pool.shutdown(timeout_s=5)
    assert batch.done and ran == [1]


def _wait_active(e: object, n: int) -> None:
    deadline = time.monotonic() + 10
    while e.stats()["regions_by_state"].get("active", 0) < n:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"fewer than {n} regions open (active + standbys)"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("standbys", "entries"),
    [
        (1, 5),  # 5 entries of 512 KiB + headers: more than the 2 MiB active region holds
        (2, 9),  # 9: the rest of the active region and both standbys
    ],
)
def test_a_put_moves_on_to_the_standby_regions_without_waiting_for_an_open(
    ssd_dir: str, monkeypatch: pytest.MonkeyPatch, standbys: int, entries: int
) -> None:
    """With room on disk, STANDBY_DEPTH (2) regions are opened ahead, so a put that fills the
    active region and up to that many standbys goes on at once while every further open is
    stuck; every page reads back."""
    e = open_engine(ssd_dir, capacity_bytes=32 * MiB, region_size=2 * MiB)
    assert e.put("first", [memoryview(value_for("first", 4096))])
    _wait_active(e, 1 + standbys)
    stuck = threading.Event()
    orig = RegionAllocator._open_region

    def slow_open(self: RegionAllocator, r: object) -> tuple[bool, str]:
        stuck.wait(10)
        return orig(self, r)  # type: ignore[arg-type]

    monkeypatch.setattr(RegionAllocator, "_open_region", slow_open)
    try:
        t0 = time.monotonic()
        items = [(f"k{i}", [memoryview(value_for(f"k{i}", 512 << 10))]) for i in range(entries)]
        assert all(e.put_batch(items, time.monotonic() + 5))
        assert time.monotonic() - t0 < 3.0
    finally:
        stuck.set()
    for key, _ in items:
        out = np.zeros(512 << 10, np.uint8)
        assert e.get_into(key, [memoryview(out)]) and np.array_equal(out, value_for(key, 512 << 10))
    e.close()


def test_a_full_cache_holds_one_empty_region_open_not_two(ssd_dir: str) -> None:
    """A standby beyond the first never takes the last free region: a cache of 4 regions that
    has turned over keeps its data in all but one open empty region (the standby reclaim
    expects), as it did with a single standby."""
    e = open_engine(ssd_dir, capacity_bytes=4 * MiB, region_size=1 * MiB)
    size = 300_000
    for i in range(40):
        assert e.put(f"g{i}", [memoryview(value_for(f"g{i}", size))])
    time.sleep(0.2)  # opens started by the last put land
    st = e.stats()
    assert st["reclaimed_regions"] > 0
    by_state = st["regions_by_state"]
    assert by_state.get("active", 0) <= 2, by_state  # the one being written + one standby
    assert sum(by_state.values()) == 4
    e.close()


def test_region_files_are_mapped_in_the_background(ssd_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new region file is recorded in the state file's region map without the put waiting for
    that write (a synced write, slow on a busy disk); after close the map lists every file."""
    e = open_engine(ssd_dir, capacity_bytes=16 * MiB, region_size=1 * MiB)
    held = threading.Event()
    orig = StateFile.write

    def slow_write(self: StateFile, state: object, durable: bool = True) -> None:
        held.wait(10)
        orig(self, state, durable)  # type: ignore[arg-type]

    monkeypatch.setattr(StateFile, "write", slow_write)
    try:
        t0 = time.monotonic()
        items = [(f"k{i}", [memoryview(value_for(f"k{i}", 300 << 10))]) for i in range(8)]
        assert all(e.put_batch(items, time.monotonic() + 5))
        assert time.monotonic() - t0 < 3.0
    finally:
        held.set()
    e.close()
    files = {r for r in (parse_region_file_name(p.name) for p in Path(ssd_dir).iterdir()) if r is not None}
    mapped = load_dir(ssd_dir).mapped
    assert files and mapped is not None and files <= mapped


def test_region_map_updates_do_not_flush_the_device(ssd_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """New region files are mapped without an fdatasync of the state file (a device flush stalls
    every write in flight; once per new region it cost a cold fill 0.1-0.2 s per region). The
    kernel has the map at once (a killed process loses nothing); ``sync`` makes it durable, and
    so does close. Epoch records (clear) are still flushed before they count."""
    flushed: list[str] = []
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    e = open_engine(ssd_dir, capacity_bytes=16 * MiB, region_size=1 * MiB)
    flushed.clear()  # opening wrote this boot's record, flushed
    items = [(f"k{i}", [memoryview(value_for(f"k{i}", 300 << 10))]) for i in range(12)]
    assert all(e.put_batch(items, time.monotonic() + 10))
    files = {r for r in (parse_region_file_name(p.name) for p in Path(ssd_dir).iterdir()) if r is not None}
    assert len(files) >= 3
    deadline = time.monotonic() + 10
    while not files <= (load_dir(ssd_dir).mapped or set()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert files <= (load_dir(ssd_dir).mapped or set())  # readable by any process now
    assert not [p for p in flushed if p.endswith(STATE_NAME)]
    assert e.sync(time.monotonic() + 10)
    assert [p for p in flushed if p.endswith(STATE_NAME)]
    flushed.clear()
    assert e.clear(time.monotonic() + 10)
    assert [p for p in flushed if p.endswith(STATE_NAME)]  # the new epoch is on the device
    e.close()


@pytest.mark.parametrize("stage", ["always", "never"])
def test_write_jobs_of_whole_entries_round_trip(ssd_dir: str, stage: str) -> None:
    """Batches over several regions, entries larger and smaller than a write job, two parts
    each (one of them unaligned when staged): every byte comes back, after a reopen too."""
    sizes = [3 * MiB, 100_000, 700 << 10, 64 << 10, 2 * MiB + 4096, 5000]
    opts = {
        "capacity_bytes": 64 * MiB,
        "region_size": 8 * MiB,
        "write_chunk_bytes": MiB,
        "stage_writes": stage,
    }
    vals = {f"k{i}-{n}": value_for(f"k{i}-{n}", n) for i in range(4) for n in sizes}
    if stage == "never":  # in place needs aligned parts
        vals = {k: _aligned(v) for k, v in vals.items() if v.size % 8192 == 0}
    with open_engine(ssd_dir, **opts) as e:
        items = [(k, [memoryview(v[: v.size // 2]), memoryview(v[v.size // 2 :])]) for k, v in vals.items()]
        assert all(e.put_batch(items, time.monotonic() + 30))
        st = e.stats()
        if st["io_mode"] == "direct":
            assert st["batches_staged" if stage == "always" else "batches_zero_copy"] >= 1
        _check(e, vals, deadline=True)
    with open_engine(ssd_dir, **opts) as e2:
        _check(e2, vals, deadline=False)


def test_staged_reads_in_runs_smaller_than_an_entry(ssd_dir: str) -> None:
    with open_engine(ssd_dir, capacity_bytes=32 * MiB, region_size=8 * MiB, read_run_bytes=64 << 10) as e:
        vals = {f"k{i}": value_for(f"k{i}", (i + 1) * 100_000) for i in range(10)}
        assert all(e.put_batch([(k, [memoryview(v)]) for k, v in vals.items()]))
        _check(e, vals, deadline=True)


def test_stage_writes_must_be_a_known_mode() -> None:
    with pytest.raises(ValueError, match="stage_writes"):
        SsdOptions(dirs=("/nonexistent",), capacity_bytes=4 * MiB, region_size=MiB, stage_writes="sometimes")


def test_huge_fraction_reads_the_mappings_of_the_range(tmp_path: Path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\n"
        "Size:               4096 kB\nAnonHugePages:      2048 kB\nVmFlags: rd wr mr mw me ac hg\n"
        "7f0000400000-7f0000600000 rw-p 00000000 00:00 0\n"
        "Size:               2048 kB\nAnonHugePages:         0 kB\n"
    )
    base = 0x7F0000000000
    assert huge_fraction(base, 4 * MiB, str(smaps)) == pytest.approx(0.5)
    assert huge_fraction(base + 4 * MiB, 2 * MiB, str(smaps)) == 0.0
    assert huge_fraction(base, 6 * MiB, str(smaps)) == pytest.approx(2 / 6)
    assert huge_fraction(base, 4 * MiB, str(tmp_path / "missing")) == 0.0


def test_huge_ranges_cover_only_registered_huge_memory() -> None:
    ranges = HugeRanges()
    # plain memory that cannot be huge: numpy madvises large arrays MADV_HUGEPAGE, and under THP
    # "always" any anonymous mapping may be, so the mapping opts out itself
    plain = mmap.mmap(-1, 4 * MiB)
    plain.madvise(mmap.MADV_NOHUGEPAGE)
    np.frombuffer(plain, dtype=np.uint8)[::4096] = 1
    assert ranges.register(memoryview(plain)) < 0.9
    assert not ranges.covers(memoryview(plain))
    huge = huge_buffer(8 * MiB)
    if ranges.register(huge) >= 0.9:  # THP gave huge pages (the kernel may refuse under pressure)
        assert ranges.covers(huge[MiB : 2 * MiB]) and ranges.covers(huge)
    assert address_of(huge) % (2 * MiB) == 0
    # the batch form the write path asks (one native call for the views' addresses) answers as
    # the view-by-view form does, a batch being covered only when each of its views is
    views = [huge[MiB : 2 * MiB], huge, memoryview(plain)[:4096], huge[7 * MiB :]]
    for batch in ([0], [1], [2], [0, 1, 3], [0, 2], [2, 3]):
        picked = [views[i] for i in batch]
        spans = view_spans(picked)
        assert spans is not None
        assert ranges.covers_spans(spans) == all(ranges.covers(v) for v in picked)
    assert not HugeRanges().covers_spans(view_spans([huge]))  # type: ignore[arg-type]


def test_the_kernel_scan_of_the_ranges_agrees_with_smaps() -> None:
    """Where the kernel has PAGEMAP_SCAN (Linux >= 6.7, CI's included) the huge-page check walks
    only the registered ranges (not every mapping of the process, as reading smaps does) and
    finds what smaps says; elsewhere it says it cannot and smaps is read."""
    import os
    import platform

    plain = mmap.mmap(-1, 4 * MiB)
    plain.madvise(mmap.MADV_NOHUGEPAGE)
    np.frombuffer(plain, dtype=np.uint8)[::4096] = 1
    # 16 MiB of huge pages followed by a mapping of ours that holds no page (given back): what
    # lies past the buffer stays as it is while the test reads it (whatever mapping of the
    # process came next could be faulted in by another thread between two scans)
    whole = huge_buffer(32 * MiB)
    huge = whole[: 16 * MiB]
    np.frombuffer(huge, dtype=np.uint8)[::4096] = 1
    raw = whole.obj
    assert isinstance(raw, mmap.mmap)
    tail = address_of(whole) - address_of(memoryview(raw)) + 16 * MiB
    raw.madvise(mmap.MADV_NOHUGEPAGE, tail, 16 * MiB)  # a mapping of its own (smaps reads per mapping)
    raw.madvise(mmap.MADV_DONTNEED, tail, 16 * MiB)
    ranges = [
        (address_of(memoryview(plain)), len(plain)),
        (address_of(huge), huge.nbytes),
        (address_of(huge) + 12345, 3 * MiB),  # unaligned, inside
        (address_of(huge) + 15 * MiB, 4 * MiB),  # past the end of the buffer: 1 MiB of it huge
        (address_of(huge), 0),
    ]
    kernel = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    scanned = scanned_huge_fractions(ranges)
    if os.uname().sysname == "Linux" and kernel >= (6, 7):
        assert scanned is not None
        from_smaps = huge_fractions(ranges, "/proc/self/../self/smaps")  # the same file, parsed
        assert scanned == pytest.approx(from_smaps, abs=0.02)
        assert scanned[0] == 0.0 and scanned[4] == 0.0
        assert scanned[3] in (0.0, 0.25)  # (0 where the kernel gave no huge pages at all)
        assert huge_fractions(ranges) == scanned  # this process: the scan answers
    else:
        assert scanned is None


def _aligned(v: np.ndarray) -> np.ndarray:
    out = aligned_array(v.size)
    out[:] = v
    return out


def _check(e: object, vals: dict[str, np.ndarray], deadline: bool) -> None:
    keys = list(vals)
    outs = [np.zeros(vals[k].size, np.uint8) for k in keys]
    items = [
        (k, [memoryview(o[: o.size // 3]), memoryview(o[o.size // 3 :])])
        for k, o in zip(keys, outs, strict=True)
    ]
    res = e.get_batch_into(items, time.monotonic() + 30 if deadline else None)  # type: ignore[attr-defined]
    assert all(res)
    for k, o in zip(keys, outs, strict=True):
        assert np.array_equal(o, vals[k]), k


def test_huge_fractions_reads_several_ranges_at_once(tmp_path: Path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\n"
        "Size:               4096 kB\nAnonHugePages:      4096 kB\n"
        "7f0000400000-7f0000600000 rw-p 00000000 00:00 0\n"
        "Size:               2048 kB\nAnonHugePages:         0 kB\n"
    )
    base = 0x7F0000000000
    ranges = [(base, 4 * MiB), (base + 4 * MiB, 2 * MiB), (base + 3 * MiB, 2 * MiB), (base, 0)]
    assert huge_fractions(ranges, str(smaps)) == pytest.approx([1.0, 0.0, 0.5, 0.0])
    assert [huge_fraction(s, n, str(smaps)) for s, n in ranges] == huge_fractions(ranges, str(smaps))


def test_memory_registered_later_is_staged_until_its_check_is_done(
    ssd_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attach does not wait for the page-table walk behind the huge-page check: the check runs on
    a thread, puts from that memory are staged meanwhile, and written in place once it is done."""
    from hicache_mooncake.ssd import hugemem

    checking, release = threading.Event(), threading.Event()

    def slow_check(ranges: list[tuple[int, int]], smaps: str = "") -> list[float]:
        checking.set()
        assert release.wait(30)
        return [1.0] * len(ranges)  # as the kernel reports memory on huge pages

    monkeypatch.setattr(hugemem, "huge_fractions", slow_check)
    buf = huge_buffer(4 * MiB)
    with open_engine(ssd_dir, stage_writes="auto") as e:
        t0 = time.monotonic()
        e.register_memory_later([buf])
        assert time.monotonic() - t0 < 1.0 and checking.wait(10)
        assert not e.memory_checked(0.05)
        assert not e._core.huge_memory.covers(buf[:MiB])  # staged meanwhile
        release.set()
        assert e.memory_checked(10)
        assert e._core.huge_memory.covers(buf[:MiB]) and e._core.huge_memory.covers(buf)


def test_a_far_deadline_means_no_limit_not_an_overflow(ssd_dir: str) -> None:
    """Callers pass a far deadline for 'no limit' (1e18): the wait is capped where the platform
    can take it instead of raising OverflowError out of every put that has to wait."""
    pool = IoPool(1)
    try:
        batch = pool.submit([lambda: time.sleep(0.2)], priority=WRITE)
        assert batch.wait(1e18) and batch.done
    finally:
        pool.shutdown(timeout_s=5)
    with open_engine(ssd_dir, stage_writes="always") as e:
        vals = {f"far{i}": value_for(f"far{i}", 768 << 10) for i in range(12)}
        assert all(e.put_batch([(k, [memoryview(v)]) for k, v in vals.items()], 1e18))
        _check(e, vals, deadline=True)


def test_copies_between_engine_memory_and_the_callers_keep_the_gil() -> None:
    """A copy that gives the GIL up waits up to a switch interval to get it back while another
    thread runs Python (SGLang's scheduler does): per part of a page, that made SSD sets and gets
    next to one busy thread several times slower."""
    from hicache_mooncake.ssd.io import copy_into
    from hicache_mooncake.tools.bench._busy import busy_python_thread, gil_handoffs

    src = [np.full(1 << 20, i, dtype=np.uint8) for i in range(16)]
    dst = [np.zeros(1 << 20, dtype=np.uint8) for _ in range(16)]
    with busy_python_thread(0.2):
        # the fewest of three tries: a thread the test does not own (tqdm's monitor) may wake once
        tries = [
            gil_handoffs(
                lambda: [copy_into(memoryview(d), memoryview(s)) for d, s in zip(dst, src, strict=True)]
            )
            for _ in range(3)
        ]
    assert min(count for count, _ in tries) == 0
    assert all(np.array_equal(d, s) for d, s in zip(dst, src, strict=True))


def test_a_payload_in_parts_keeps_the_gil_and_equals_the_one_shot_digest() -> None:
    """python-xxhash gives the GIL up around every update: recovery and fsck hash a payload in
    parts (K and V in two buffers) in slices short enough to keep it (the race the module
    docstring measures; here at most one hand-off for 16 pages, where hashing them whole gave it
    up once per page). The digest is the one entries on disk already carry."""
    import xxhash

    from hicache_mooncake.ssd.checksum import payload_hash
    from hicache_mooncake.tools.bench._busy import busy_python_thread, gil_handoffs

    rng = np.random.default_rng(5)
    sizes = [1 << 20] * 16 + [100_001, 32 << 10, 1, 0]
    pool = rng.integers(0, 256, sum(sizes), dtype=np.uint8)  # the pages back to back, as in a host pool
    bounds = np.cumsum([0, *sizes]).tolist()
    pages = [memoryview(pool)[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    want = [xxhash.xxh3_64_intdigest(p) for p in pages]
    k_pool, v_pool = memoryview(pool.copy()), memoryview(pool.copy())  # K and V: two buffers
    two_parts = [
        [k_pool[a : a + (b - a) // 2], v_pool[a + (b - a) // 2 : b]]
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    with busy_python_thread(0.2):
        # the fewest of three tries: a thread the test does not own (tqdm's monitor) may wake once
        sliced = [gil_handoffs(lambda: [payload_hash(parts) for parts in two_parts]) for _ in range(3)]
    assert (
        min(count for count, _ in sliced) <= 1 and sliced[0][1] == want
    )  # parts hash as their concatenation
    assert [payload_hash([p]) for p in pages] == want


def test_a_payload_is_hashed_in_slices_no_longer_than_hash_slice() -> None:
    """The property the GIL depends on, checked without timing: every update the hasher gets is
    at most ``HASH_SLICE`` bytes (whether another thread wins the GIL on a longer one depends on
    the machine's scheduling), and the slices are the payload, in order."""
    from hicache_mooncake.ssd import checksum

    class Recorder:
        def __init__(self) -> None:
            self.seen: list[bytes] = []

        def update(self, data: memoryview) -> None:
            self.seen.append(bytes(data))

    payload = np.random.default_rng(6).integers(0, 256, (3 << 20) + 77, dtype=np.uint8)
    for view in (memoryview(payload), memoryview(payload.reshape(-1, 1)), memoryview(payload[:5])):
        rec = Recorder()
        checksum.update(rec, view)  # type: ignore[arg-type]
        # slices of up to 64 KiB kept the GIL next to a busy thread here, 96 KiB and more did not
        assert max(len(b) for b in rec.seen) <= min(checksum.HASH_SLICE, 64 << 10)
        assert b"".join(rec.seen) == view.tobytes()


def test_a_put_that_fails_between_its_sub_batches_leaves_nothing_pending(
    ssd_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put larger than a region reserves region by region; when the second of three
    reservations raises, the first is unpinned and no key of the put stays pending (a later put of them writes them,
    a get does not wait for them)."""
    from hicache_mooncake.ssd.allocator import RegionAllocator

    real = RegionAllocator.reserve
    calls = {"n": 0}

    def second_fails(self: RegionAllocator, *args: object, **kw: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected: the second reservation fails")
        return real(self, *args, **kw)  # type: ignore[arg-type]

    with open_engine(ssd_dir, capacity_bytes=64 * MiB, region_size=4 * MiB) as e:
        vals = {f"s{i}": value_for(f"s{i}", MiB) for i in range(9)}  # three regions' worth
        items = [(k, [memoryview(v)]) for k, v in vals.items()]
        monkeypatch.setattr(RegionAllocator, "reserve", second_fails)
        assert not any(e.put_batch(items, time.monotonic() + 10))
        assert calls["n"] == 2 and not any(e.contains(k) for k in vals)
        assert not e._writer.pending
        monkeypatch.setattr(RegionAllocator, "reserve", real)
        assert all(e.put_batch(items, time.monotonic() + 10))
        _check(e, vals, deadline=True)
