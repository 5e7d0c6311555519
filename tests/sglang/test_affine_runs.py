"""Page runs computed from each page's first index (``sglang_adapter/host_pools/affine.py``) against SGLang's own
``get_page_buffer_meta``, on SGLang's real host pools in every layout: the same pointers and
sizes for every page and for shuffled batches; pools it cannot prove affine keep SGLang's path."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from sglang_helpers import SMALL

from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews, pool_tensors
from hicache_mooncake.sglang_adapter.host_pools.affine import AffineRuns
from hicache_mooncake.sglang_adapter.host_pools.index_array import index_array
from hicache_mooncake.sglang_adapter.host_pools.provider import provider_for
from hicache_mooncake.tools.sglang_harness import make_host_pool

CASES = [
    *((layout, False) for layout in ("layer_first", "page_first", "page_first_direct", "page_head")),
    *((layout, True) for layout in ("layer_first", "page_first", "page_first_direct")),
]


def _pages(first_pages: list[int], page_size: int) -> torch.Tensor:
    return torch.cat(
        [torch.arange(p * page_size, (p + 1) * page_size, dtype=torch.int64) for p in first_pages]
    )


@pytest.mark.parametrize(("layout", "mla"), CASES, ids=[f"{'mla' if m else 'mha'}-{x}" for x, m in CASES])
def test_affine_runs_are_sglangs_runs_for_every_page(sglang_runtime: Any, layout: str, mla: bool) -> None:
    pool = make_host_pool(layout, mla, SMALL)
    provider = provider_for(pool)
    form = AffineRuns.detect(provider, pool, pool.page_size, pool.size)
    assert form is not None, f"{type(pool).__name__} {layout} is affine in SGLang's code"
    pages = pool.size // pool.page_size
    every = list(range(pages))
    want = provider.page_runs(pool, _pages(every, pool.page_size))
    assert form.runs(_pages(every, pool.page_size), pages) == want
    rng = random.Random(layout)
    for _ in range(20):
        batch = rng.sample(every, rng.randint(1, min(64, pages)))
        indices = _pages(batch, pool.page_size)
        assert form.runs(indices, len(batch)) == provider.page_runs(pool, indices)
    # an int32 index tensor (what some SGLang paths hand over) gives the same runs
    small = _pages([3, 1, 2], pool.page_size)
    assert form.runs(small.to(torch.int32), 3) == provider.page_runs(pool, small)


@pytest.mark.parametrize(("layout", "mla"), CASES, ids=[f"{'mla' if m else 'mha'}-{x}" for x, m in CASES])
def test_the_native_page_views_lie_on_sglangs_runs(sglang_runtime: Any, layout: str, mla: bool) -> None:
    """The data path's views (one native call per batch) have the addresses and lengths of
    SGLang's own runs, for every page and for shuffled batches, and a page past the pool's end is
    refused."""
    pool = make_host_pool(layout, mla, SMALL)
    provider = provider_for(pool)
    form = AffineRuns.detect(provider, pool, pool.page_size, pool.size)
    assert form is not None
    memory = HostPoolViews(pool_tensors(pool))
    views = form.native(memory.regions())
    pages = pool.size // pool.page_size
    rng = random.Random(f"native-{layout}")
    batches = [list(range(pages))] + [
        rng.sample(range(pages), rng.randint(1, min(64, pages))) for _ in range(20)
    ]
    for batch in batches:
        indices = _pages(batch, pool.page_size)
        got = views.views(index_array(indices), len(batch), pool.size)
        ptrs, sizes = provider.page_runs(pool, indices)
        flat = [v for page in got for v in page]
        assert [np.frombuffer(v, np.uint8).ctypes.data for v in flat] == list(ptrs)
        assert [v.nbytes for v in flat] == list(sizes)
        assert {id(v.obj) for v in flat} <= {
            id(r.obj) for r in memory.regions()
        }  # slices of the pool's buffers
    past = _pages([pages - 1], pool.page_size) + 1
    with pytest.raises(IndexError):
        views.views(index_array(past), 1, pool.size)


def test_a_pool_class_that_overrides_the_method_keeps_sglangs_path(sglang_runtime: Any) -> None:
    pool = make_host_pool("page_first", False, SMALL)

    class Overriding(type(pool)):  # type: ignore[misc]
        def get_page_buffer_meta(self, indices: Any) -> Any:
            return super().get_page_buffer_meta(indices)

    pool.__class__ = Overriding
    assert AffineRuns.detect(provider_for(pool), pool, pool.page_size, pool.size) is None


def test_a_layout_sglangs_method_refuses_is_not_affine(sglang_runtime: Any) -> None:
    pool = make_host_pool("page_unified", True, SMALL)  # MLA's page_unified: no zero-copy meta
    with pytest.raises(ValueError):
        pool.get_page_buffer_meta(torch.arange(pool.page_size))
    assert AffineRuns.detect(provider_for(pool), pool, pool.page_size, pool.size) is None


class MHATokenToKVPoolHost:
    """Named like SGLang's class, but its runs are not affine in the first index: the probes
    must catch it."""

    page_size = 4
    size = 64

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        firsts = indices.tolist()[:: self.page_size]
        return [4096 + f * f for f in firsts], [16] * len(firsts)


def test_runs_that_are_not_affine_are_detected_by_the_probes() -> None:
    pool = MHATokenToKVPoolHost()
    assert AffineRuns.detect(provider_for(pool), pool, pool.page_size, pool.size) is None
    # the same class with an unknown size is not probed at all
    assert AffineRuns.detect(provider_for(pool), pool, pool.page_size, None) is None


def test_the_backend_moves_pages_through_the_affine_form(sglang_runtime: Any) -> None:
    from sglang_helpers import make_backend

    backend, host = make_backend("layer_first")
    try:
        kv = backend.host_pools.kv
        assert kv is not None and kv.affine_pages is not None
    finally:
        backend.close()
