"""A logical host pool (DeepSeek V4's KV anchor, ``LogicalHostPool``; a dummy indexer pool):
allocation slots with no tensor behind them. Nothing is stored for it: its sidecar pools carry
the bytes, and a transfer of it moves nothing (it succeeds)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from hicache_mooncake.sglang_adapter.host_pool_views import pool_tensors
from hicache_mooncake.sglang_adapter.host_pools.provider import PoolProvider, class_names, register_provider


@register_provider
class LogicalProvider(PoolProvider):
    name: ClassVar[str] = "logical"
    priority: ClassVar[int] = 10

    @classmethod
    def handles(cls, pool: Any) -> bool:
        if "LogicalHostPool" in class_names(pool):
            return True
        return hasattr(pool, "kv_buffer") and pool.kv_buffer is None and not pool_tensors(pool)

    def holds_bytes(self, pool: Any) -> bool:
        return False

    def page_runs(self, pool: Any, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        return [], []
