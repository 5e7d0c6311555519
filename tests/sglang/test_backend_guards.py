"""Hardening at the level SGLang meets the backend (factory + interface): host indices SGLang should
never send are refused without touching memory, and metrics samples stay bounded when nobody
polls ``get_stats`` (SGLang polls only with ``--enable-metrics``)."""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest
import torch
from sglang_helpers import SMALL, make_backend

from hicache_mooncake.metrics.rank import MAX_SAMPLES
from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = pytest.mark.sglang
PS = SMALL.page_size


def keys(n: int, tag: str = "g") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(n)]


def refusals(printed_lines) -> list[str]:
    return printed_lines.matching("refused host indices")


def test_out_of_range_host_indices_are_a_miss_with_one_log_line_not_a_crash(printed_lines):
    """On main a get of a stored page into indices 10^8 slots past the pool wrote through a wild
    pointer (SIGSEGV)."""
    backend, host = make_backend()
    idx = host.alloc(PS)
    fill_random_pages(host, idx, seed=1)
    assert backend.batch_set_v1(keys(1), idx) == [True]
    far = torch.arange(10**8, 10**8 + PS)
    negative = torch.arange(-PS, 0)
    # every call below logs its refusal; the user sees one line per kind and reason
    for _ in range(3):
        assert backend.batch_get_v1(keys(1), far) == [False]
        assert backend.batch_set_v1(keys(1, "n"), far) == [False]
        assert backend.batch_set_v1(keys(1, "m"), negative) == [False]
    assert len(refusals(printed_lines)) == 2  # one line per call kind and reason (get, set), not per call
    assert backend.batch_exists(keys(1, "n")) == 0 and backend.batch_exists(keys(1, "m")) == 0
    assert backend.batch_get_v1(keys(1), idx) == [True]  # the backend still works
    backend.close()


def test_a_page_that_runs_past_the_pool_end_is_refused_though_its_first_index_is_inside(printed_lines):
    """SGLang's MHA pools address a page by its first index (the affine path checks those, each
    with the page's slots): a last page starting inside the pool but ending past it is refused."""
    backend, host = make_backend()
    pool = backend._kv_pool()
    assert pool.affine_pages is not None  # the path this test is about
    limit = pool.index_limit
    straddling = torch.arange(limit - PS + 1, limit + 1)
    assert backend.batch_set_v1(keys(1, "s"), straddling) == [False]
    assert backend.batch_get_v1(keys(1, "s"), straddling) == [False]
    assert len(refusals(printed_lines)) == 2
    last = torch.arange(limit - PS, limit)  # the last whole page: served
    fill_random_pages(host, last, seed=6)
    want = page_snapshot(host, last)
    assert backend.batch_set_v1(keys(1, "l"), last) == [True]
    fill_random_pages(host, last, seed=7)
    assert backend.batch_get_v1(keys(1, "l"), last) == [True]
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(host, last), want, strict=True))
    backend.close()


def test_an_index_count_that_is_not_keys_times_page_size_is_refused(printed_lines):
    """On main one page of indices for two keys stored K as one page and V as the other, and three
    pages for two keys stored 1.5 pages each: True, and garbage under both keys."""
    backend, host = make_backend()
    idx = host.alloc(3 * PS)
    fill_random_pages(host, idx, seed=2)
    # every call below logs its refusal; the user sees one line per kind and reason
    assert backend.batch_set_v1(keys(2), idx[:PS]) == [False, False]
    assert backend.batch_set_v1(keys(2), idx) == [False, False]
    assert backend.batch_get_v1(keys(2), idx[:PS]) == [False, False]
    assert len(refusals(printed_lines)) == 2  # one line per call kind and reason (set, get), not per call
    assert backend.batch_exists(keys(2)) == 0  # nothing stored under either key
    want = page_snapshot(host, idx[: 2 * PS])
    assert backend.batch_set_v1(keys(2), idx[: 2 * PS]) == [True, True]
    fill_random_pages(host, idx, seed=3)
    assert backend.batch_get_v1(keys(2), idx[: 2 * PS]) == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(host, idx[: 2 * PS]), want, strict=True))
    backend.close()


def test_strided_and_int32_host_indices_are_served_as_their_values():
    """Host indices are turned into an array with one torch call (``index_array``); a strided
    view (a column of a larger tensor) or another integer dtype still addresses the same pages."""
    backend, host = make_backend()
    idx = host.alloc(2 * PS)
    fill_random_pages(host, idx, seed=8)
    want = page_snapshot(host, idx)
    strided = torch.stack([idx, idx], dim=1)[:, 0]
    assert not strided.is_contiguous() and torch.equal(strided, idx)
    assert backend.batch_set_v1(keys(2, "t"), strided) == [True, True]
    fill_random_pages(host, idx, seed=9)
    assert backend.batch_get_v1(keys(2, "t"), idx.to(torch.int32)) == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(host, idx), want, strict=True))
    fill_random_pages(host, idx, seed=10)
    assert backend.batch_get_v1(keys(2, "t"), strided) == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(page_snapshot(host, idx), want, strict=True))
    assert backend.batch_get_v1(keys(1, "t"), idx[:PS].to(torch.float32)) == [False]  # not integers
    backend.close()


def test_metrics_samples_stay_bounded_when_get_stats_is_never_called():
    """On main every successful call appended two samples forever (9.4 MB after 200,000 calls)."""
    backend, host = make_backend()
    idx = host.alloc(PS)
    fill_random_pages(host, idx, seed=4)
    assert backend.batch_set_v1(keys(1), idx) == [True]
    tracemalloc.start()
    for _ in range(MAX_SAMPLES + 100):  # fill every series up to its bound
        backend.batch_get_v1(keys(1), idx)
    gc.collect()  # what is garbage (cycles not yet collected) is not growth
    before = tracemalloc.take_snapshot()
    for _ in range(3000):
        assert backend.batch_get_v1(keys(1), idx) == [True]
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    import hicache_mooncake.metrics.rank as ours  # our samples only: other libraries' threads may allocate

    grown = sum(
        s.size_diff
        for s in after.compare_to(before, "filename")
        if os.path.realpath(s.traceback[0].filename) == os.path.realpath(ours.__file__)
    )
    assert grown < 16 << 10  # on main: ~3000 x (float + int + list slots) > 100 KiB
    assert backend.metrics.retained_samples() <= 4 * MAX_SAMPLES
    stats = backend.get_stats()
    assert len(stats.prefetch_pgs) == MAX_SAMPLES and stats.prefetch_pgs[-1] == 1  # the newest are kept
    assert backend.metrics.retained_samples() == 0  # drained
    backend.close()
