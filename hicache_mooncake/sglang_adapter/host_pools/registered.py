"""``RegisteredPool``: one SGLang host pool registered on this attach, with everything needed to
move its pages zero-copy: its provider, a bounds-checked map of its buffers, its object type and
(once the key space is final) its keys.

``page_parts`` is the only way from SGLang's host indices to memory, and it refuses, before any
pointer is made, an index count that is not ``pages * page_size`` and an addressed index outside
the pool (an affine pool's page is addressed by its first index, as by SGLang's own method);
then every run SGLang's pool class computes must lie inside the pool's registered buffers.
A refusal raises ``HostRangeError``; callers turn it into a miss / False.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from hicache_mooncake.keys import KeySpace
from hicache_mooncake.native import AffinePages
from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews, HostRangeError
from hicache_mooncake.sglang_adapter.host_pools.affine import AffineRuns
from hicache_mooncake.sglang_adapter.host_pools.index_array import bounds, index_array
from hicache_mooncake.sglang_adapter.host_pools.provider import PoolProvider
from hicache_mooncake.tiers.policy import ObjectType


@dataclass
class RegisteredPool:
    name: str
    pool: Any
    provider: PoolProvider
    memory: HostPoolViews
    obj_type: ObjectType
    rank_sharded: bool
    """Keys carry the TP rank even when the model's KV is replicated (see ``names.rank_sharded``)."""
    keys: KeySpace | None = field(default=None)

    @property
    def page_size(self) -> int:
        """Host indices per page in the calls SGLang makes: the logical (DCP-widened) page where
        the pool has one, else its page size."""
        logical = getattr(self.pool, "logical_page_size", None)
        return int(logical if isinstance(logical, int) else getattr(self.pool, "page_size", 1) or 1)

    @property
    def index_limit(self) -> int | None:
        """Host indices are below this (the logical size under DCP); None when unknown."""
        for name in ("logical_size", "size"):
            value = getattr(self.pool, name, None)
            if isinstance(value, int):
                return value
        return None

    @property
    def holds_bytes(self) -> bool:
        return self.provider.holds_bytes(self.pool)

    @cached_property
    def page_nbytes(self) -> int:
        """Bytes of one page (every page of a pool has the same size); 0 for a logical pool."""
        if not self.holds_bytes:
            return 0
        _ptrs, sizes = self.provider.page_runs(self.pool, torch.arange(self.page_size, dtype=torch.int64))
        return sum(sizes)

    def check_indices(self, host_indices: Any, pages: int) -> np.ndarray:
        """Refuse host indices SGLang should never send: a count that is not ``pages x
        page_size``, a non-integer tensor, an index outside ``[0, pool.size)``. Returns them as
        an int64 array (``index_array``: no GIL given up on the way). (An affine pool's page
        views check each page's first index with the ``page_size`` slots it addresses, natively.)"""
        values = self._index_values(host_indices, pages)
        if len(values) == 0:
            return values
        low, high = bounds(values)
        size = self.index_limit
        if low < 0 or (size is not None and high >= size):
            raise HostRangeError("host index outside the pool", f"[{low}, {high}] in a pool of {size} slots")
        return values

    def _index_values(self, host_indices: Any, pages: int) -> np.ndarray:
        """``host_indices`` as int64, refused unless a tensor of ``pages x page_size`` integers."""
        if not isinstance(host_indices, torch.Tensor):
            raise HostRangeError("host indices are not a tensor", type(host_indices).__name__)
        try:
            values = index_array(host_indices)
        except TypeError:
            raise HostRangeError("host indices are not integers", str(host_indices.dtype)) from None
        if len(values) != pages * self.page_size:
            raise HostRangeError(
                "index count is not keys x page_size",
                f"{len(values)} indices for {pages} pages of {self.page_size}",
            )
        return values

    def page_parts(self, host_indices: Any, pages: int) -> list[list[Any]]:
        """One list of byte views (memoryviews into the pool) per page, zero-copy. Affine pools:
        one native call checks the indices and the runs and makes the views (``AffinePages``)."""
        affine = self.affine_pages
        if affine is not None and self.index_limit is not None:
            values = self._index_values(host_indices, pages)
            try:
                return affine.views(values, pages, self.index_limit)
            except IndexError as exc:
                raise HostRangeError("host index outside the pool", str(exc)) from None
            except ValueError as exc:
                raise HostRangeError("a page run outside the pool's buffers", str(exc)) from None
        self.check_indices(host_indices, pages)
        if pages == 0 or not self.holds_bytes:
            return [[] for _ in range(pages)]
        ptrs, sizes = self.provider.page_runs(self.pool, host_indices)
        return self.memory.page_parts(ptrs, sizes, pages)

    @cached_property
    def affine_runs(self) -> AffineRuns | None:
        """The runs' affine form where SGLang's are known to be affine (``affine.py``); None:
        the provider's ``page_runs`` (SGLang's method) is the path."""
        if not self.holds_bytes:
            return None
        return AffineRuns.detect(self.provider, self.pool, self.page_size, self.index_limit)

    @cached_property
    def affine_pages(self) -> AffinePages | None:
        """``affine_runs`` made ready for the native call, bounded by the pool's buffers."""
        form = self.affine_runs
        return None if form is None else form.native(self.memory.regions())

    def close(self) -> None:
        self.memory.close()
        self.pool = None
