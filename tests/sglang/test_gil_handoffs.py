"""A data call on the DRAM tier gives the GIL up a few times per call, never per page or part.

SGLang calls the backend from its cache controller's threads while its scheduler thread runs
Python most of the time. A thread that gives the GIL up (any torch call, a numpy loop over more
than 500 elements, numpy's copies, a hand-off to a worker thread) waits up to a switch interval
(5 ms by default) to get it back while another thread runs Python. Giving it up per part or per
page took a DRAM get or set of 1 MiB pages next to one busy Python thread from 6-7 GB/s to
0.25 GB/s (261 hand-offs per 64-page batch); a 64 KiB get gave it up 5 times per batch. On the
native data plane (issue 49) a native call releases the GIL only for work worth a switch interval
(a copy or hash of more than 64 KiB, a table batch of more than 1024 keys), once for its whole
batch; fingerprints and index probes of a batch run with it held. So a DRAM set or get of a
batch hands off at most once (its copy), whatever the batch's length, where a release per page
or part would be at least ``PAGES``; an exists hands off none.

The count here is exact, not a timing: with a busy Python thread and a 0.2 s switch interval,
each hand-off costs ~0.2 s, while the call itself takes milliseconds.
"""

from __future__ import annotations

import pytest
import torch
from sglang_helpers import make_backend, small_extra

from hicache_mooncake.tools.bench._busy import busy_python_thread, gil_handoffs
from hicache_mooncake.tools.sglang_harness import PoolShape, fill_random_pages, page_snapshot

pytestmark = pytest.mark.sglang

INTERVAL = 0.2
PAGES = 32
HANDOFFS_PER_CALL = 1
"""The fewest hand-offs of three tries a set or a get may have: its one copy."""
TRIES = 3
"""Another thread of the process waking mid-call (tqdm's monitor thread, left by an earlier test,
wakes every 10 s) costs one interval too: the fewest hand-offs of three tries counts. A call that
gives the GIL up does so every time (7-70 per call before the fix)."""
# 24 KiB pages in 6 parts (layer_first); 512 KiB pages in 2 parts of 256 KiB
SMALL_PAGES = PoolShape(page_size=16, layers=3, heads=2, head_dim=64, device_tokens=2048)
LARGE_PAGES = PoolShape(page_size=64, layers=1, heads=16, head_dim=128, device_tokens=4096)


@pytest.mark.parametrize(
    ("layout", "shape"),
    [("layer_first", SMALL_PAGES), ("page_first", LARGE_PAGES), ("page_first_direct", LARGE_PAGES)],
    ids=["layer_first-24KiB", "page_first-512KiB", "page_first_direct-512KiB"],
)
def test_a_dram_set_and_get_give_the_gil_up_per_call_not_per_page_and_exists_never(
    layout: str, shape: PoolShape
) -> None:
    extra = small_extra(dram={"capacity": "64MiB", "slab_size": "1MiB", "prefault": False})
    backend, host = make_backend(layout, extra=extra, shape=shape)
    try:
        idx = host.alloc(PAGES * shape.page_size)
        assert backend.batch_set_v1(["warm" + "0" * 60], idx[: shape.page_size]) == [True]
        counts: list[tuple[int, int, int]] = []
        for attempt in range(TRIES):
            fill_random_pages(host, idx, seed=attempt)
            want = page_snapshot(host, idx)
            keys = [f"gil{attempt}{i:060x}" for i in range(PAGES)]
            with busy_python_thread(INTERVAL):
                put, stored = gil_handoffs(lambda keys=keys: backend.batch_set_v1(keys, idx))
            # torch calls: outside the busy thread's block, where a hand-off is cheap
            fill_random_pages(host, idx, seed=100 + attempt)
            with busy_python_thread(INTERVAL):
                get, read = gil_handoffs(lambda keys=keys: backend.batch_get_v1(keys, idx))
                exists, found = gil_handoffs(lambda keys=keys: backend.batch_exists(keys))
            assert stored == read == [True] * PAGES and found == PAGES
            assert all(torch.equal(a, b) for a, b in zip(page_snapshot(host, idx), want, strict=True))
            counts.append((put, get, exists))
        assert min(c[0] for c in counts) <= HANDOFFS_PER_CALL, counts
        assert min(c[1] for c in counts) <= HANDOFFS_PER_CALL, counts
        assert min(c[2] for c in counts) == 0, counts
    finally:
        backend.close()
