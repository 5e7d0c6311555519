"""The staging: a fresh engine's puts copy into the native workers' memory faulted in at open, a
short request reuses a larger pooled buffer of the engine's pool instead of faulting in one of its own, and faulting a buffer in does not
hold the GIL (SGLang's scheduler thread keeps running while an engine opens)."""

from __future__ import annotations

import threading
import time

import numpy as np
from ssd_helpers import aligned_array, open_engine, value_for

from hicache_mooncake.native import io_threads, reserve_io_staging
from hicache_mooncake.ssd.buffer import BufferPool
from hicache_mooncake.ssd.io import huge_buffer

MiB = 1 << 20


def test_take_hands_out_the_smallest_pooled_buffer_that_fits() -> None:
    pool = BufferPool()
    assert pool.reserve(10 * MiB, 1) == 1 and pool.reserve(4 * MiB, 1) == 1
    made = pool.allocated
    a = pool.take(3 * MiB)  # class 4 MiB: the 4 MiB buffer, not the 10 MiB one
    b = pool.take(3 * MiB)  # no 4 MiB left: the 10 MiB one rather than a new buffer
    assert (len(a), len(b)) == (4 * MiB, 10 * MiB) and pool.allocated == made
    c = pool.take(2 * MiB)  # nothing pooled is left: made now
    assert len(c) == 2 * MiB and pool.allocated == made + 1
    for buf in (a, b, c):
        pool.give(buf)
    assert len(pool.take(12 * MiB)) == 12 * MiB and pool.allocated == made + 2  # none large enough


def test_reserve_stops_at_the_pool_cap() -> None:
    pool = BufferPool(max_pooled_bytes=25 * MiB)
    assert pool.reserve(10 * MiB, 5) == 2
    big = [pool.take(10 * MiB) for _ in range(3)]
    for buf in big:  # three 10 MiB buffers back into a 25 MiB pool: the third is dropped
        pool.give(buf)
    assert sum(len(pool.take(10 * MiB)) == 10 * MiB for _ in range(2)) == 2
    made = pool.allocated
    pool.take(10 * MiB)
    assert pool.allocated == made + 1


def test_a_fresh_engine_stages_without_making_buffers(ssd_dir: str) -> None:
    """An engine's open makes the native workers' staging for a write run (and a read run), so
    its first puts and gets fault nothing in; neither stages in the engine's own pool."""
    with open_engine(ssd_dir, capacity_bytes=512 * MiB, region_size=64 * MiB, stage_writes="always") as e:
        run = max(e.options.read_run_bytes, e.options.write_chunk_bytes + 2 * 4096)
        assert reserve_io_staging(io_threads(), run) == 0  # made at open already
        pool = e._core.buffers
        page = 1 * MiB
        keys = [f"k{i}" for i in range(40)]
        vals = {k: value_for(k, page) for k in keys}
        for lo in range(0, len(keys), 20):  # batches of 20: runs of 7 entries and a tail of 6
            assert all(e.put_batch([(k, [memoryview(vals[k])]) for k in keys[lo : lo + 20]]))
        pool_mem = aligned_array(len(keys) * page)  # one caller buffer, as SGLang's host pool is
        whole = memoryview(pool_mem)
        outs = {k: pool_mem[i * page : (i + 1) * page] for i, k in enumerate(keys)}
        got = e.get_batch_into(
            [(k, [whole[i * page : (i + 1) * page]]) for i, k in enumerate(keys)],
            deadline=time.monotonic() + 30,
        )
        assert all(got) and all(np.array_equal(outs[k], vals[k]) for k in keys)
        assert e.stats()["batches_staged"] == 2 and e.stats()["writes"] == 6
        assert pool.allocated == 0


def test_faulting_a_huge_buffer_in_lets_other_threads_run() -> None:
    """While the pages are zeroed the other thread never waits a whole call for the GIL (held,
    its longest gap between two steps would be the whole fault-in)."""
    gap = 0.0
    running, stop = threading.Event(), threading.Event()

    def ticker() -> None:
        nonlocal gap
        last = time.perf_counter()
        running.set()
        while not stop.is_set():
            now = time.perf_counter()
            gap = max(gap, now - last)
            last = now

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    running.wait(5)
    try:
        gap = 0.0
        t0 = time.perf_counter()
        view = huge_buffer(512 * MiB)
        call = time.perf_counter() - t0
    finally:
        stop.set()
        t.join(5)
    assert view.nbytes == 512 * MiB
    assert call > 0.02, f"fault-in took {call * 1e3:.1f} ms: too quick to tell"
    assert gap < call / 2, f"the other thread waited {gap * 1e3:.1f} ms of a {call * 1e3:.1f} ms call"
