"""``RegisteredPool``: one SGLang host pool registered on this attach, with everything needed to
move its pages zero-copy: its provider, a bounds-checked map of its buffers, its object type and
(once the key space is final) its keys.

``page_parts`` is the only way from SGLang's host indices to memory, and it refuses, before any
pointer is made, an index count that is not ``pages * page_size`` and an addressed index outside
the pool (with ``AffineRuns`` a page is addressed by its first index, as by SGLang's own method);
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

    def check_indices(self, host_indices: Any, pages: int, firsts_only: bool = False) -> np.ndarray:
        """Refuse host indices SGLang should never send: a count that is not ``pages x
        page_size``, a non-integer tensor, an index outside ``[0, pool.size)``. Returns them as
        an int64 array (``index_array``: no GIL given up on the way). ``firsts_only``: the caller
        addresses each page by its first index alone (``AffineRuns``, as SGLang's own method):
        only those are checked, each with the ``page_size`` slots it addresses."""
        numel = getattr(host_indices, "numel", None)
        if not callable(numel):
            raise HostRangeError("host indices are not a tensor", type(host_indices).__name__)
        count = int(numel())
        if count != pages * self.page_size:
            raise HostRangeError(
                "index count is not keys x page_size",
                f"{count} indices for {pages} pages of {self.page_size}",
            )
        try:
            values = index_array(host_indices)
        except TypeError:
            raise HostRangeError("host indices are not integers", str(host_indices.dtype)) from None
        if count == 0:
            return values
        if firsts_only:
            low, high = bounds(values[:: self.page_size])
            high += self.page_size - 1
        else:
            low, high = bounds(values)
        size = self.index_limit
        if low < 0 or (size is not None and high >= size):
            raise HostRangeError("host index outside the pool", f"[{low}, {high}] in a pool of {size} slots")
        return values

    def page_parts(self, host_indices: Any, pages: int) -> list[list[Any]]:
        """One list of byte views (memoryviews into the pool) per page, zero-copy."""
        affine = self.affine_runs
        values = self.check_indices(host_indices, pages, firsts_only=affine is not None)
        if pages == 0 or not self.holds_bytes:
            return [[] for _ in range(pages)]
        if affine is not None:
            ptrs, sizes = affine.runs(values, pages)
        else:
            ptrs, sizes = self.provider.page_runs(self.pool, host_indices)
        return self.memory.page_parts(ptrs, sizes, pages)

    @cached_property
    def affine_runs(self) -> AffineRuns | None:
        """The runs as one numpy expression where SGLang's are known to be affine (``affine.py``);
        None: the provider's ``page_runs`` (SGLang's method) is the path."""
        if not self.holds_bytes:
            return None
        return AffineRuns.detect(self.provider, self.pool, self.page_size, self.index_limit)

    def close(self) -> None:
        self.memory.close()
        self.pool = None
