"""SGLang's hybrid-model host pools built on CPU, for tests and the benchmark: the same classes
SGLang's pool assembler builds (device pools on ``"cpu"``, host pools unpinned), grouped in its
``HostPoolGroup`` and registered with a backend exactly as ``HybridCacheController`` does.

- Mamba (Qwen3-Next, Nemotron-H, ...): SGLang's ``MambaPool`` -> ``MambaPoolHost`` (one state slot
  per page: every layer's temporal and conv state);
- sliding window (gpt-oss, Gemma): ``SWAKVPool`` -> one MHA host pool for the full layers and
  one for the window layers (``pool_label="swa"``);
- DeepSeek V3.2 sparse attention: ``DSATokenToKVPool`` -> ``MLATokenToKVPoolHost`` + ``DSAIndexerPoolHost``;
- DeepSeek V4: ``LogicalHostPool`` (a KV anchor with no bytes) + ``DeepSeekV4PagedHostPool``s for
  the compressed pools, built from plain CPU buffers (what V4's device pool hands them).

Nothing here is a mock. ``pin_memory=False`` everywhere: pinning needs a CUDA driver.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from hicache_mooncake.tools.sglang_harness import PoolShape, host_pool_for


@dataclass(frozen=True)
class MambaShape:
    """A small Mamba2 state (SGLang's ``Mamba2StateShape.create`` at TP1)."""

    layers: int = 3
    intermediate_size: int = 256
    n_groups: int = 1
    num_heads: int = 2
    head_dim: int = 16
    state_size: int = 16
    conv_kernel: int = 4
    device_slots: int = 16
    host_ratio: float = 2.0
    ssm_dtype: str = "bfloat16"
    side_state: tuple[int, int] | None = None
    """A per-slot side state registered on the pool (SGLang's ``ShortConvPool``, as PLE models do):
    the host pool then carries ``slot_state_buffers`` and SGLang's own zero-copy meta refuses it."""


def make_mamba_device_pool(shape: MambaShape | None = None) -> Any:
    """SGLang's own ``MambaPool`` on ``"cpu"``."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.memory_pool import MambaPool

    s = shape or MambaShape()
    layer_ids = list(range(s.layers))
    with envs.SGLANG_MAMBA_SSM_DTYPE.override(s.ssm_dtype):
        state = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=s.intermediate_size,
            n_groups=s.n_groups,
            num_heads=s.num_heads,
            head_dim=s.head_dim,
            state_size=s.state_size,
            conv_kernel=s.conv_kernel,
        )
        params = Mamba2CacheParams(shape=state, layers=layer_ids)
    pool = MambaPool(
        size=s.device_slots, spec_state_size=0, cache_params=params, mamba_layer_ids=layer_ids, device="cpu"
    )
    if s.side_state is not None:
        from sglang.srt.mem_cache.ple_state_pool import ShortConvPool

        pool.register_slot_state(
            ShortConvPool(
                size=s.device_slots,
                state_shape=s.side_state,
                layer_ids=[0],
                dtype=torch.float32,
                device="cpu",
            )
        )
    return pool


def mamba_host_pool_for(dev: Any, layout: str = "page_first", ratio: float = 2.0) -> Any:
    """SGLang's ``MambaPoolHost`` mirroring ``dev`` (what ``build_mamba_host_pool`` builds, unpinned)."""
    from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost

    (info,) = dev.get_device_pool_infos()
    return MambaPoolHost(
        info.buffer_info, ratio, 0, device_capacity=dev.size, pin_memory=False, layout=layout
    )


def make_swa_pools(
    shape: PoolShape, layout: str = "page_first", swa_tokens: int | None = None
) -> tuple[Any, ...]:
    """``(full_dev, full_host, swa_dev, swa_host)`` from SGLang's ``SWAKVPool`` (last layer full)."""
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    layers = list(range(shape.layers))
    pool = SWAKVPool(
        size=shape.device_tokens,
        size_swa=swa_tokens or shape.device_tokens // 2,
        page_size=shape.page_size,
        dtype=shape.dtype,
        head_num=shape.heads,
        head_dim=shape.head_dim,
        swa_attention_layer_ids=layers[:-1],
        full_attention_layer_ids=layers[-1:],
        device="cpu",
    )
    full_host = host_pool_for(pool.full_kv_pool, layout, False, shape)
    swa_host = _mha_host(pool.swa_kv_pool, layout, shape, pool_label="swa")
    return pool.full_kv_pool, full_host, pool.swa_kv_pool, swa_host


def _mha_host(dev: Any, layout: str, shape: PoolShape, pool_label: str) -> Any:
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    return MHATokenToKVPoolHost(
        dev.get_device_pool_infos()[0].buffer_info, shape.host_ratio, 0, shape.page_size, layout,
        pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
        start_layer=dev.start_layer, end_layer=dev.end_layer, pool_label=pool_label,
    )  # fmt: skip


def make_dsa_pools(
    shape: PoolShape, layout: str = "page_first", index_head_dim: int = 128
) -> tuple[Any, ...]:
    """``(dev, kv_host, indexer_host)``: DeepSeek V3.2's ``DSATokenToKVPool`` with its MLA host pool
    and ``DSAIndexerPoolHost`` (indexer keys riding on the KV pages, same host indices)."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.srt.mem_cache.pool_host.dsa import DSAIndexerPoolHost, make_dsa_indexer_pool_decl
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    kv_dim = shape.kv_lora_rank + shape.qk_rope_head_dim
    dev = DSATokenToKVPool(
        shape.device_tokens, shape.page_size, shape.kv_lora_rank, shape.dtype, shape.qk_rope_head_dim,
        shape.layers, "cpu", index_head_dim=index_head_dim, enable_memory_saver=False, kv_cache_dim=kv_dim,
    )  # fmt: skip
    kv_host = MLATokenToKVPoolHost(
        dev.get_device_pool_infos()[0].buffer_info, shape.host_ratio, 0, shape.page_size, layout,
        pin_memory=False, device="cpu", device_capacity_tokens=dev.size, start_layer=dev.start_layer,
        end_layer=dev.end_layer, target_layer_num=dev.layer_num, override_kv_cache_dim=dev.kv_cache_dim,
    )  # fmt: skip
    indexer = DSAIndexerPoolHost(make_dsa_indexer_pool_decl(dev), kv_host, pin_memory=False)
    return dev, kv_host, indexer


def make_dsv4_pools(
    page_size: int, host_pages: int, layout: str = "page_first", layers: int = 3
) -> dict[str, Any]:
    """DeepSeek V4's host side: a ``LogicalHostPool`` KV anchor; the sliding-window pool and two
    compressed pools (``deepseek_v4_c4``, ``deepseek_v4_c128``) as ``DeepSeekV4PagedHostPool``s over
    CPU buffers; the C4 compressor state as a ``DeepSeekV4StateHostPool`` over SGLang's own
    ``CompressStatePool``s (on ``"cpu"``)."""
    from sglang.srt.mem_cache.deepseek_v4_compress_state import CompressStatePool
    from sglang.srt.mem_cache.memory_pool_host import (
        DeepSeekV4PagedHostPool,
        DeepSeekV4StateHostPool,
        LogicalHostPool,
    )

    pools: dict[str, Any] = {"kv": LogicalHostPool(host_pages * page_size, page_size, layout)}
    for name, item_bytes in (("swa", 1152), ("deepseek_v4_c4", 576), ("deepseek_v4_c128", 160)):
        device_buffers = [torch.zeros(8, item_bytes, dtype=torch.uint8) for _ in range(layers)]
        pools[name] = DeepSeekV4PagedHostPool(
            name, device_buffers, item_bytes, num_host_pages=host_pages, slot_page_size=page_size,
            layout=layout, pin_memory=False,
        )  # fmt: skip
    state_pools = [
        CompressStatePool(
            size=64,
            ring_size=4,
            overlap=False,
            head_dim=32,
            dtype=torch.float32,
            device="cpu",
            enable_memory_saver=False,
            ratio=4,
            swa_page_size=page_size,
        )  # fmt: skip
        for _ in range(layers)
    ]
    pools["deepseek_v4_c4_state"] = DeepSeekV4StateHostPool(
        "deepseek_v4_c4_state", state_pools, num_host_pages=host_pages, swa_page_size=page_size,
        layout=layout, pin_memory=False,
    )  # fmt: skip
    return pools


def host_group(entries: list[tuple[Any, Any, Any]]) -> Any:
    """SGLang's ``HostPoolGroup`` of ``(PoolName, host_pool, device_pool)``; the first is the anchor."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
    from sglang.srt.mem_cache.pool_host import HostPoolGroup

    built = []
    for i, (name, host, dev) in enumerate(entries):
        layers = int(getattr(host, "layer_num", 0) or getattr(host, "num_mamba_layers", 0) or 1)
        built.append(
            build_pool_entry(
                name=name,
                host_pool=host,
                device_pool=dev,
                layer_mapping={j: j for j in range(layers)},
                transfer_layer_id_max=layers,
                is_anchor=i == 0,
            )
        )
    return HostPoolGroup(built)


def register_group(backend: Any, group: Any) -> None:
    """What ``HybridCacheController.attach_storage_backend`` calls, in its order."""
    backend.register_mem_pool_host(group.anchor_entry.host_pool)
    for entry in group.entries:
        backend.register_mem_host_pool_v2(entry.host_pool, entry.name)
    backend.on_host_pools_registered()


def cache_controller(dev: Any, group: Any, shape: PoolShape) -> Any:
    """SGLang's ``HybridCacheController`` over ``group`` (``host_group``) and a paged allocator of
    ``dev``, as the scheduler builds it for a write-through HiCache (``shape``: a ``PoolShape``);
    no storage backend attached yet (the process group must be initialized)."""
    import torch.distributed as dist
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    alloc = PagedTokenToKVPoolAllocator(
        shape.device_tokens, shape.page_size, shape.dtype, "cpu", dev, need_sort=False
    )
    return HybridCacheController(
        alloc,
        group,
        shape.page_size,
        dist.group.WORLD,
        load_cache_event=threading.Event(),
        write_policy="write_through",
        io_backend="direct",
        storage_backend=None,
        transfer_layer_id_max=shape.layers,
    )
