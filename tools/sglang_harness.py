"""Real SGLang host KV pools and storage configs built on CPU, for the demo, benchmarks and tests.

These are SGLang's own classes (device pool on ``"cpu"``, host pool with ``pin_memory=False``,
because pinning needs a CUDA driver). Nothing here is a mock: the backend sees exactly the
objects SGLang's cache controller would hand it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class PoolShape:
    page_size: int = 64
    layers: int = 4
    heads: int = 8
    head_dim: int = 128
    dtype: torch.dtype = torch.bfloat16
    device_tokens: int = 4096
    host_ratio: float = 2.0
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64

    def page_bytes(self, mla: bool = False) -> int:
        item = torch.tensor([], dtype=self.dtype).element_size()
        if mla:
            return self.layers * self.page_size * (self.kv_lora_rank + self.qk_rope_head_dim) * item
        return 2 * self.layers * self.page_size * self.heads * self.head_dim * item


def make_device_pool(mla: bool = False, shape: PoolShape | None = None) -> Any:
    """SGLang's own device KV pool (MHA or MLA), allocated on ``"cpu"``."""
    s = shape or PoolShape()
    if mla:
        from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

        return MLATokenToKVPool(
            s.device_tokens, s.page_size, s.dtype, s.kv_lora_rank, s.qk_rope_head_dim, s.layers,
            device="cpu", enable_memory_saver=False,
        )  # fmt: skip
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    return MHATokenToKVPool(
        size=s.device_tokens, page_size=s.page_size, dtype=s.dtype, head_num=s.heads, head_dim=s.head_dim,
        layer_num=s.layers, device="cpu", enable_memory_saver=False, enable_alt_stream=False,
    )  # fmt: skip


def make_host_pool(layout: str = "page_first", mla: bool = False, shape: PoolShape | None = None) -> Any:
    """A real (device pool on CPU, unpinned host pool) pair; returns the host pool."""
    return host_pool_for(make_device_pool(mla, shape), layout, mla, shape)


def host_pool_for(dev: Any, layout: str, mla: bool = False, shape: PoolShape | None = None) -> Any:
    """SGLang's host pool class for ``dev``, unpinned (pinning needs a CUDA driver). Releases up to
    0.5.22 take the device pool, 0.5.23 takes its buffer facts."""
    s = shape or PoolShape()
    if mla:
        from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost as HostCls

        extra: dict[str, Any] = {"target_layer_num": dev.layer_num}
    else:
        from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost as HostCls

        extra = {}
    if "buffer_info" in inspect.signature(HostCls).parameters:
        return HostCls(
            dev.get_device_pool_infos()[0].buffer_info, s.host_ratio, 0, s.page_size, layout,
            pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
            start_layer=dev.start_layer, end_layer=dev.end_layer, **extra,
        )  # fmt: skip
    return HostCls(dev, s.host_ratio, 0, s.page_size, layout, pin_memory=False, device="cpu")


def make_storage_config(
    extra_config: dict[str, Any] | None,
    *,
    tp_rank: int = 0,
    tp_size: int = 1,
    is_mla: bool = False,
    model_name: str = "org/demo-model",
    layout: str = "page_first",
    tp_lcm_size: int | None = None,
) -> Any:
    """SGLang's own ``HiCacheStorageConfig``, filled by keyword (its field order varies by release)."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    wanted = {
        "tp_rank": tp_rank,
        "tp_size": tp_size,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": is_mla,
        "enable_storage_metrics": True,
        "is_page_first_layout": layout == "page_first",
        "model_name": model_name,
        "extra_config": extra_config,
        "tp_lcm_size": tp_lcm_size,
    }
    params = inspect.signature(HiCacheStorageConfig).parameters
    return HiCacheStorageConfig(**{k: v for k, v in wanted.items() if k in params})


def fill_random_pages(host: Any, host_indices: torch.Tensor, seed: int) -> None:
    """Random bytes into every page of ``host_indices`` through SGLang's flat-page API (any host
    pool class and dtype: KV, Mamba state, indexer, DeepSeek V4 pools)."""
    gen = torch.Generator().manual_seed(seed)
    template = host.get_dummy_flat_data_page()
    nbytes = template.numel() * template.element_size()
    for i in range(0, len(host_indices), host.page_size):
        page = torch.randint(0, 256, (nbytes,), generator=gen, dtype=torch.uint8)
        host.set_from_flat_data_page(int(host_indices[i]), page.view(template.dtype))


def page_snapshot(host: Any, host_indices: torch.Tensor) -> list[torch.Tensor]:
    """Each page's bytes (uint8; comparing raw bytes, since random bits include NaNs)."""
    return [
        host.get_data_page(int(host_indices[i]), flat=True).flatten().contiguous().view(torch.uint8).clone()
        for i in range(0, len(host_indices), host.page_size)
    ]
