"""Builders shared by the hybrid-model tests: real SGLang hybrid host pools in a ``HostPoolGroup``,
our backend made by SGLang's factory and registered the way ``HybridCacheController`` does."""

from __future__ import annotations

from typing import Any

import torch
from sglang_helpers import SMALL, small_extra

from hicache_mooncake.tools.sglang_harness import host_pool_for, make_device_pool, make_storage_config
from hicache_mooncake.tools.sglang_hybrid import (
    MambaShape,
    host_group,
    make_mamba_device_pool,
    mamba_host_pool_for,
    register_group,
)

PS = SMALL.page_size


def page_hashes(n: int, tag: str = "h") -> list[str]:
    """A chain of ``n`` distinct 64-char page keys (SGLang's hash format)."""
    return [f"{tag}{i:063x}" for i in range(n)]


def kv_mamba_group(layout: str = "page_first", mamba: MambaShape | None = None) -> Any:
    """KV (MHA) anchor + Mamba state pool: a Qwen3-Next / Nemotron-H style model."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    dev = make_device_pool(False, SMALL)
    kv_host = host_pool_for(dev, layout, False, SMALL)
    mdev = make_mamba_device_pool(mamba)
    return host_group(
        [(PoolName.KV, kv_host, dev), (PoolName.MAMBA, mamba_host_pool_for(mdev, layout), mdev)]
    )


def hybrid_backend(group: Any, extra: dict[str, Any] | None = None, **config: Any) -> Any:
    """Our backend from SGLang's factory with the group's anchor, then the v2 registration burst."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    cfg = make_storage_config(extra if extra is not None else small_extra(), **config)
    backend = StorageBackendFactory.create_backend("dynamic", cfg, group.anchor_entry.host_pool)
    register_group(backend, group)
    return backend


def transfer(
    name: Any,
    keys: list[str],
    host_indices: torch.Tensor | None = None,
    policy: str = "trailing_pages",
    **kw: Any,
) -> Any:
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolTransfer

    return PoolTransfer(
        name=name, host_indices=host_indices, keys=keys, hit_policy=PoolHitPolicy(policy), **kw
    )
