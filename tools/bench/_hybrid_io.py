"""The hybrid case of ``bench sglang``: a Mamba-state pool next to the KV pool, driven the way SGLang's
``HybridCacheController`` drives a backend (underscore: a helper, not a ``bench`` target).

Each node of ``node_pages`` KV pages is backed up as ``batch_set_v1`` of its pages plus
``batch_set_v2`` of the Mamba state at its end (TRAILING_PAGES), and read back the same way. The
memcpy baseline copies the same parts (KV pages and state components), node after node, into
and out of one pre-faulted buffer as large as everything the run stores (as the DRAM tier holds
it: every object at its own place, so neither side copies into a cache-hot buffer).
"""

from __future__ import annotations

import mmap
import statistics
import time
from dataclasses import dataclass
from typing import Any

from hicache_mooncake.tools.bench._sglang_io import create_backend, page_workload


@dataclass
class HybridWorkload:
    kv: Any  # PageWorkload
    mamba: Any
    src_slot: Any
    dst_slot: Any
    node_pages: int
    page_bytes: int
    state_bytes: int

    @property
    def nodes(self) -> list[list[str]]:
        keys = self.kv.keys
        return [keys[i : i + self.node_pages] for i in range(0, len(keys), self.node_pages)]

    @property
    def total_bytes(self) -> int:
        return self.kv.pages * self.page_bytes + len(self.nodes) * self.state_bytes


def hybrid_workload(page_bytes: int, total: int, node_pages: int) -> HybridWorkload:
    from hicache_mooncake.tools.sglang_harness import fill_random_pages
    from hicache_mooncake.tools.sglang_hybrid import MambaShape, make_mamba_device_pool, mamba_host_pool_for

    kv = page_workload(page_bytes, total, batch_max=node_pages)
    # about 1 MiB per state: 8 layers of a 16 x 64 x 64 bf16 SSM state + conv (a small Mamba2 model)
    shape = MambaShape(
        layers=8, intermediate_size=1024, num_heads=16, head_dim=64, state_size=64, device_slots=2
    )
    mamba = mamba_host_pool_for(make_mamba_device_pool(shape), "page_first")
    src_slot, dst_slot = mamba.alloc(1), mamba.alloc(1)
    fill_random_pages(mamba, src_slot, seed=3)
    fill_random_pages(mamba, dst_slot, seed=4)
    state_bytes = sum(mamba.get_page_buffer_meta(src_slot)[1])
    return HybridWorkload(kv, mamba, src_slot, dst_slot, node_pages, page_bytes, state_bytes)


def hybrid_backend(extra: dict[str, Any], w: HybridWorkload) -> Any:
    from sglang.srt.mem_cache.hicache_storage import PoolName

    backend = create_backend("dynamic", extra, w.kv.host)
    backend.register_mem_host_pool_v2(w.kv.host, PoolName.KV)
    backend.register_mem_host_pool_v2(w.mamba, PoolName.MAMBA)
    backend.on_host_pools_registered()
    return backend


def _state(keys: list[str], slot: Any) -> list[Any]:
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    return [
        PoolTransfer(
            name=PoolName.MAMBA, host_indices=slot, keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES
        )
    ]


def hybrid_set(backend: Any, w: HybridWorkload) -> None:
    for keys in w.nodes:
        backend.batch_set_v2(_state(keys, w.src_slot))
        backend.batch_set_v1(keys, w.kv.src[: len(keys) * 64])


def hybrid_get(backend: Any, w: HybridWorkload) -> None:
    for keys in w.nodes:
        backend.batch_get_v1(keys, w.kv.dst[: len(keys) * 64])
        backend.batch_get_v2(_state(keys, w.dst_slot))


def bench_hybrid(
    extra: dict[str, Any], page_bytes: int, total: int, repeats: int, node_pages: int = 16
) -> dict[str, Any]:
    """Our backend (``extra``, DRAM sized to hold the run) vs memcpy of the same parts; medians."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    from hicache_mooncake.tools.bench.sglang import _timed

    w = hybrid_workload(page_bytes, total, node_pages)
    # DRAM holds the run, plus one slab for each of the two size classes (KV page, state): a slab
    # serves one object size, so a one-slab arena could not hold both kinds at once
    dram = (-(-(w.total_bytes * 5 // 4) // (64 << 20)) + 2) * (64 << 20)
    conf = {**extra, "tiers": {**extra["tiers"], "dram": {**extra["tiers"]["dram"], "capacity": dram}}}
    ours_set, ours_get, mem_set, mem_get = [], [], [], []
    for _ in range(repeats):
        backend = hybrid_backend(conf, w)
        ours_set.append(_timed(lambda b=backend: hybrid_set(b, w)))
        ours_get.append(_timed(lambda b=backend: hybrid_get(b, w)))
        assert backend.batch_get_v2(_state(w.nodes[-1], w.dst_slot)) == {PoolName.MAMBA: [True]}
        backend.close()
        copy_set, copy_get = hybrid_memcpy(w)
        mem_set.append(copy_set)
        mem_get.append(copy_get)

    def gbps(times: list[float]) -> float:
        return w.total_bytes / statistics.median(times) / 1e9

    row = {
        "page_bytes": page_bytes,
        "state_bytes": w.state_bytes,
        "node_pages": node_pages,
        "nodes": len(w.nodes),
        "ours_set_gbps": gbps(ours_set),
        "ours_get_gbps": gbps(ours_get),
        "memcpy_set_gbps": gbps(mem_set),
        "memcpy_get_gbps": gbps(mem_get),
    }
    row["set_ratio_vs_memcpy"] = row["ours_set_gbps"] / row["memcpy_set_gbps"]
    row["get_ratio_vs_memcpy"] = row["ours_get_gbps"] / row["memcpy_get_gbps"]
    return row


def hybrid_memcpy(w: HybridWorkload) -> tuple[float, float]:
    """Seconds to copy every node's KV parts and state parts out to, then back from, a buffer of
    ``w.total_bytes`` (numpy copies of the same memoryviews our backend moves)."""
    import numpy as np

    from hicache_mooncake.sglang_adapter.host_pool_views import HostPoolViews, pool_tensors

    maps = [HostPoolViews(pool_tensors(w.kv.host)), HostPoolViews(pool_tensors(w.mamba))]

    def parts(pool: Any, hmap: HostPoolViews, idx: Any, pages: int) -> list[memoryview]:
        ptrs, sizes = pool.get_page_buffer_meta(idx)
        return [p for page in hmap.page_parts(ptrs, sizes, pages) for p in page]

    n = w.node_pages
    src = parts(w.kv.host, maps[0], w.kv.src[: n * 64], n) + parts(w.mamba, maps[1], w.src_slot, 1)
    dst = parts(w.kv.host, maps[0], w.kv.dst[: n * 64], n) + parts(w.mamba, maps[1], w.dst_slot, 1)
    buf = mmap.mmap(-1, w.total_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
    arena = np.frombuffer(buf, dtype=np.uint8)
    times = []
    for views, out in ((src, True), (dst, False)):
        pos, start = 0, time.perf_counter()
        for _node in w.nodes:
            for p in views:
                host = np.frombuffer(p, dtype=np.uint8)
                if out:
                    np.copyto(arena[pos : pos + p.nbytes], host)
                else:
                    np.copyto(host, arena[pos : pos + p.nbytes])
                pos += p.nbytes
        times.append(time.perf_counter() - start)
    del arena, src, dst
    for hmap in maps:
        hmap.close()
    buf.close()
    return times[0], times[1]
