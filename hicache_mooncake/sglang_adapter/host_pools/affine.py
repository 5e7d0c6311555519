"""Page runs computed from each page's first host index, for the pools whose runs are affine in it.

SGLang's MHA and MLA host pools place run ``j`` of a page at ``base_j + first_index * stride_j``
in every layout (``layer_first``, ``page_first``, ``page_first_direct``, ``page_head``). Their
``get_page_buffer_meta`` computes that in Python from the whole index list (a ``tolist`` of every
index, then a loop per run): about a fifth of a 64 KiB page's time on the zero-copy path. Here the
data path makes a batch's views in one native call (``AffineRuns.native``: ``native.AffinePages``
checks every page's indices and every run's bounds and makes the memoryviews).

``AffineRuns.detect`` decides once, at registration, by asking SGLang's own method: only a pool
whose method is the MHA or MLA one (not an override), whose logical page is its page (no DCP
widening), and whose runs for a few probe pages (the first two, an unaligned one, one in the
middle, the last, and all of them in one call) match the affine form exactly gets it; any other
pool keeps its provider's ``page_runs`` as the one path. The runs made here are bounds-checked
against the registered buffers like SGLang's (``HostPoolViews``), so a wrong form could only
address the pool's own memory, never outside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hicache_mooncake.native import AffinePages
from hicache_mooncake.sglang_adapter.host_pools.index_array import NUMPY_NOGIL_MIN, index_array
from hicache_mooncake.sglang_adapter.host_pools.provider import PoolProvider

AFFINE_METHODS = frozenset(
    {"MHATokenToKVPoolHost.get_page_buffer_meta", "MLATokenToKVPoolHost.get_page_buffer_meta"}
)
"""SGLang methods whose runs depend on the first index of each page only, affinely."""


class AffineRuns:
    """Runs of ``pages`` pages as ``bases + first_index * strides`` (one entry per run of a page)."""

    def __init__(self, page_size: int, bases: list[int], strides: list[int], sizes: list[int]) -> None:
        self.page_size = page_size
        self._bases = np.asarray(bases, dtype=np.int64)
        self._strides = np.asarray(strides, dtype=np.int64)
        self._sizes = list(sizes)

    def native(self, regions: list[memoryview]) -> AffinePages:
        """This form as the data path's native call (``native.AffinePages``): every run it makes
        must lie in one of ``regions`` (the pool's registered buffers; each view a slice of one)."""
        return AffinePages(self.page_size, self._bases.tolist(), self._strides.tolist(), self._sizes, regions)

    def runs(self, host_indices: Any, pages: int) -> tuple[list[int], list[int]]:
        """The (pointers, sizes) SGLang's method returns for ``host_indices`` (``pages`` pages of
        ``page_size`` indices each; a tensor or ``index_array``'s int64 array): how ``detect``
        proves the form against SGLang's own runs (the data path takes ``native``)."""
        firsts = index_array(host_indices)[:: self.page_size]
        rows = max(1, NUMPY_NOGIL_MIN // len(self._strides))  # numpy keeps the GIL (index_array)
        ptrs: list[int] = []
        for start in range(0, len(firsts), rows):
            ptrs += (firsts[start : start + rows, None] * self._strides + self._bases).ravel().tolist()
        return ptrs, self._sizes * pages

    @classmethod
    def detect(
        cls, provider: PoolProvider, pool: Any, page_size: int, index_limit: int | None
    ) -> AffineRuns | None:
        """The affine form of ``pool``'s runs, or None where it is not known to hold (module
        docstring). Never raises: a probe SGLang refuses means None."""
        method = getattr(type(pool), "get_page_buffer_meta", None)
        if getattr(method, "__qualname__", None) not in AFFINE_METHODS:
            return None
        if getattr(pool, "logical_page_size", None) not in (None, getattr(pool, "page_size", None)):
            return None
        if index_limit is None or page_size < 1 or index_limit < 3 * page_size:
            return None
        last = (index_limit // page_size - 1) * page_size
        middle = (index_limit // page_size // 2) * page_size
        firsts = [0, page_size, page_size + 1, middle, last]
        try:
            probes = [_runs(provider, pool, f, page_size) for f in firsts]
            together = provider.page_runs(
                pool, torch.cat([torch.arange(f, f + page_size, dtype=torch.int64) for f in firsts])
            )
        except Exception:
            return None
        (p0, sizes), (p1, _) = probes[0], probes[1]
        if not p0 or len(p0) != len(p1):
            return None
        strides = [(b - a) // page_size for a, b in zip(p0, p1, strict=True)]
        form = cls(page_size, list(p0), strides, sizes)
        for f, (ptrs, run_sizes) in zip(firsts, probes, strict=True):
            want, want_sizes = form.runs(torch.arange(f, f + page_size, dtype=torch.int64), 1)
            if (ptrs, run_sizes) != (want, want_sizes):
                return None
        merged = ([p for ptrs, _ in probes for p in ptrs], [s for _, sz in probes for s in sz])
        if (list(together[0]), list(together[1])) != merged:
            return None
        return form


def _runs(provider: PoolProvider, pool: Any, first: int, page_size: int) -> tuple[list[int], list[int]]:
    ptrs, sizes = provider.page_runs(pool, torch.arange(first, first + page_size, dtype=torch.int64))
    return list(ptrs), list(sizes)
