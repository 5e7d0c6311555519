"""Every host pool whose own ``get_page_buffer_meta`` describes its pages: SGLang's MHA and MLA KV
pools (every layout), the SWA pools (KV pools of their own), DSA and QSA indexer pools, DeepSeek
V4 paged and state pools, draft pools. SGLang's code computes the runs; we only check them."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from hicache_mooncake.sglang_adapter.host_pools.provider import PoolProvider, register_provider


@register_provider
class GenericProvider(PoolProvider):
    name: ClassVar[str] = "generic"
    priority: ClassVar[int] = 1000

    @classmethod
    def handles(cls, pool: Any) -> bool:
        return callable(getattr(pool, "get_page_buffer_meta", None))

    def page_runs(self, pool: Any, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        meta = pool.get_page_buffer_meta(indices)
        if meta is None:
            raise ValueError(f"{type(pool).__name__} describes no page buffers")
        ptrs, sizes = meta
        return [int(p) for p in ptrs], [int(s) for s in sizes]
