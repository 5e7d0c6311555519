"""A batch of pages' byte views from their first indices in one native call (the zero-copy path of
SGLang's affine host pools): the views lie where a Python reference model computes them, write
through to the pool's memory, and a page whose indices leave the pool or whose run leaves the
registered regions fails the whole call, overflow included."""

from __future__ import annotations

import random

import numpy as np
import pytest
from reference_models import RefPageViewError, ref_page_views

from hicache_mooncake import native
from hicache_mooncake.native import _core

I64, U64 = np.int64, np.uint64


def address(view: memoryview) -> int:
    return int(np.frombuffer(view, np.uint8).ctypes.data)


class Pool:
    """Two separate buffers standing for a pool's K and V regions (a gap between them)."""

    def __init__(self, slots: int, page_size: int, k_bytes: int, v_bytes: int) -> None:
        self.slots, self.page_size = slots, page_size
        self.k = np.zeros(slots * k_bytes, np.uint8)
        self.v = np.zeros(slots * v_bytes, np.uint8)
        self.bases = [self.k.ctypes.data, self.v.ctypes.data]
        self.strides = [k_bytes, v_bytes]
        self.sizes = [page_size * k_bytes, page_size * v_bytes]
        self.regions = [self.k.data, self.v.data]

    def native(self) -> native.AffinePages:
        return native.AffinePages(self.page_size, self.bases, self.strides, self.sizes, self.regions)

    def reference(self, indices: np.ndarray, pages: int) -> list[list[tuple[int, int]]]:
        spans = [(self.k.ctypes.data, self.k.nbytes), (self.v.ctypes.data, self.v.nbytes)]
        return ref_page_views(
            indices.tolist(), self.page_size, pages, self.slots, self.bases, self.strides, self.sizes, spans
        )


def page_indices(firsts: list[int], page_size: int) -> np.ndarray:
    return (
        np.concatenate([np.arange(f, f + page_size, dtype=I64) for f in firsts])
        if firsts
        else np.zeros(0, I64)
    )


def test_views_lie_where_the_reference_model_puts_them_for_random_batches() -> None:
    pool = Pool(slots=256, page_size=4, k_bytes=64, v_bytes=96)
    form = pool.native()
    rng = random.Random(7)
    for _ in range(50):
        firsts = [rng.randrange(0, pool.slots - pool.page_size + 1) for _ in range(rng.randint(0, 40))]
        idx = page_indices(firsts, pool.page_size)
        got = form.views(idx, len(firsts), pool.slots)
        want = pool.reference(idx, len(firsts))
        assert [[(address(v), v.nbytes) for v in page] for page in got] == want
        assert all(not v.readonly and v.format == "B" for page in got for v in page)
        # slices of the regions: each names (and keeps alive) its region's exporter
        assert all(page[0].obj is pool.k and page[1].obj is pool.v for page in got)


def test_a_view_writes_through_to_the_pool_and_copy_slots_takes_it() -> None:
    pool = Pool(slots=64, page_size=2, k_bytes=32, v_bytes=32)
    views = pool.native().views(page_indices([10, 4], 2), 2, pool.slots)
    views[0][0][:] = b"\x07" * 64
    assert pool.k[10 * 32 : 12 * 32].tolist() == [7] * 64 and pool.k[: 10 * 32].sum() == 0
    arena = np.zeros(4096, np.uint8)
    views[1][1][:] = bytes(range(64))
    native.copy_slots(arena, [0, 1024], views, True)
    assert arena[1024 + 64 : 1024 + 128].tolist() == list(range(64))
    assert arena[:64].tolist() == [7] * 64


def test_only_the_first_index_of_each_page_addresses_it() -> None:
    """As SGLang's own method for affine pools: the other indices of a page are not read."""
    pool = Pool(slots=64, page_size=4, k_bytes=16, v_bytes=16)
    idx = page_indices([8, 20], 4)
    idx[1:4] = -5  # never read
    got = pool.native().views(idx, 2, pool.slots)
    assert [address(p[0]) for p in got] == [pool.k.ctypes.data + 8 * 16, pool.k.ctypes.data + 20 * 16]


@pytest.mark.parametrize(
    ("firsts", "bad_page"),
    [([0, -1], 1), ([61, 0], 0), ([60, 64], 1), ([0, 1 << 62], 1)],
    ids=["negative", "page straddles the end", "past the end", "huge"],
)
def test_a_page_whose_indices_leave_the_pool_fails_the_call(firsts: list[int], bad_page: int) -> None:
    pool = Pool(slots=64, page_size=4, k_bytes=16, v_bytes=16)
    idx = page_indices(firsts, 4)
    with pytest.raises(IndexError, match=f"page {bad_page}: host index"):
        pool.native().views(idx, len(firsts), pool.slots)
    with pytest.raises(RefPageViewError) as ref:
        pool.reference(idx, len(firsts))
    assert (ref.value.kind, ref.value.page) == ("index", bad_page)


def test_a_run_outside_every_region_fails_the_call() -> None:
    pool = Pool(slots=64, page_size=4, k_bytes=16, v_bytes=16)
    # the V region is registered one page short: the last page's V run leaves it
    short = [pool.regions[0], pool.regions[1][: -4 * 16]]
    form = native.AffinePages(4, pool.bases, pool.strides, pool.sizes, short)
    idx = page_indices([0, 60], 4)
    with pytest.raises(ValueError, match="page 1 run 1: .* outside the registered regions"):
        form.views(idx, 2, pool.slots)
    assert form.views(page_indices([0, 56], 4), 2, pool.slots)[1][1].nbytes == 64
    # a stride that overflows int64, a base that makes an address negative
    for bases, strides in (
        ([pool.bases[0], pool.bases[1]], [1 << 61, 16]),
        ([-(1 << 40), pool.bases[1]], [16, 16]),
    ):
        bad = native.AffinePages(4, bases, strides, pool.sizes, pool.regions)
        with pytest.raises(ValueError, match="page 0 run 0"):
            bad.views(page_indices([8], 4), 1, pool.slots)


def test_bad_arguments_are_refused_with_their_names() -> None:
    mem = np.zeros(4096, np.uint8)
    region = [mem.data]
    idx = page_indices([0], 4)
    starts, ends = np.array([mem.ctypes.data], U64), np.array([mem.ctypes.data + 4096], U64)
    one, base = np.array([16], I64), np.array([mem.ctypes.data], I64)
    assert _core.page_views(idx, 4, 1, 64, base, one, one, starts, ends, region)[0][0].nbytes == 16
    with pytest.raises(ValueError, match="3 indices for 1 pages of 4"):
        _core.page_views(idx[:3], 4, 1, 64, base, one, one, starts, ends, region)
    with pytest.raises(ValueError, match="page_size must be at least 1"):
        _core.page_views(idx, 0, 1, 64, base, one, one, starts, ends, region)
    with pytest.raises(ValueError, match="sizes has 2 elements"):
        _core.page_views(idx, 4, 1, 64, base, one, np.array([1, 2], I64), starts, ends, region)
    with pytest.raises(ValueError, match=r"sizes\[0\] is negative"):
        _core.page_views(idx, 4, 1, 64, base, one, np.array([-1], I64), starts, ends, region)
    with pytest.raises(TypeError, match="indices"):
        _core.page_views(idx.astype(np.float64), 4, 1, 64, base, one, one, starts, ends, region)
    two = (np.array([8192, 4096], U64), np.array([9000, 8192], U64))
    with pytest.raises(ValueError, match="region_starts"):
        _core.page_views(idx, 4, 1, 64, base, one, one, *two, region * 2)
    with pytest.raises(ValueError, match="regions has 2 elements but region_starts has 1"):
        _core.page_views(idx, 4, 1, 64, base, one, one, starts, ends, region * 2)
    # a region that is not where it was registered, not a memoryview, or read-only
    with pytest.raises(ValueError, match=r"regions\[0\] is not the 4096 bytes registered"):
        _core.page_views(idx, 4, 1, 64, base, one, one, starts, ends, [np.zeros(4096, np.uint8).data])
    with pytest.raises(TypeError, match=r"regions\[0\] must be a memoryview"):
        _core.page_views(idx, 4, 1, 64, base, one, one, starts, ends, [mem])
    with pytest.raises(BufferError):
        _core.page_views(idx, 4, 1, 64, base, one, one, starts, ends, [memoryview(bytes(4096))])
    with pytest.raises(ValueError, match="bases, strides and sizes differ"):
        native.AffinePages(4, [1], [1, 2], [1], region)


def test_no_pages_give_no_views() -> None:
    pool = Pool(slots=16, page_size=4, k_bytes=16, v_bytes=16)
    assert pool.native().views(np.zeros(0, I64), 0, pool.slots) == []
