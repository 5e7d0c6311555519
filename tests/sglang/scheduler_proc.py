"""One SGLang scheduler's storage side in its own process, for the host cache tests:
``scheduler_proc.py ROLE SPEC_JSON``; writes its findings as JSON to ``spec["out"]``.

- ``mla-rank``: TP rank ``spec["rank"]`` of an MLA model at TP=2. SGLang's runtime context is
  published for that rank, a 2-rank gloo world is joined (``spec["world"]``: a FileStore path), and
  SGLang's own ``HybridCacheController`` attaches our backend through SGLang's factory with the
  given extra config (one preset YAML, private paths). Rank 0 writes prefix A through the
  controller's backup thread, both ranks prefetch it (SGLang MIN-reduces their hit counts) and load
  it; rank 0 then writes prefix B, which pushes A out of DRAM into the SSD tier, and both prefetch
  and load A again. Rank 1 byte-checks what it loaded each time.
- ``mha-reader``: a second, independent MHA TP1 instance: its backend (through SGLang's factory)
  looks up ``spec["keys"]`` and byte-checks them against pages filled with ``spec["seed"]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_helpers import SMALL, make_backend  # noqa: E402

from hicache_mooncake.tools.sglang_harness import (  # noqa: E402
    fill_random_pages,
    host_pool_for,
    make_device_pool,
    page_snapshot,
)
from hicache_mooncake.tools.sglang_hybrid import cache_controller, host_group  # noqa: E402

PS = SMALL.page_size


def chain(tokens: list[int], prior: str | None = None) -> list[str]:
    from sglang.srt.mem_cache.utils import get_hash_str

    out = []
    for i in range(0, len(tokens), PS):
        prior = get_hash_str(tokens[i : i + PS], prior)
        out.append(prior)
    return out


def expected(host: Any, pages: int, seed: int) -> list[Any]:
    scratch = host.alloc(pages * PS)
    fill_random_pages(host, scratch, seed=seed)
    want = page_snapshot(host, scratch)
    host.free(scratch)
    return want


def mla_rank(spec: dict[str, Any]) -> dict[str, Any]:

    import torch
    import torch.distributed as dist
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.runtime_context import SpawnRanks
    from sglang.srt.server_args import ServerArgs
    from sglang.test.parallel_groups import publish

    rank = int(spec["rank"])
    args = ServerArgs(
        model_path="dummy",
        device="cpu",
        tp_size=2,
        page_size=PS,
        enable_hierarchical_cache=True,
        hicache_io_backend="direct",
        hicache_mem_layout="page_first_direct",
        hicache_ratio=2.0,
        hicache_write_policy="write_through",
        hicache_storage_prefetch_policy="wait_complete",
    )
    publish(args, role="test", ranks=SpawnRanks(world_rank=rank))
    dist.init_process_group("gloo", store=dist.FileStore(spec["world"], 2), rank=rank, world_size=2)
    s = SMALL
    dev = make_device_pool(True, s)
    host = host_pool_for(dev, "page_first_direct", True, s)
    group = host_group([(PoolName.KV, host, dev)])
    ctl = cache_controller(dev, group, s)
    ctl.attach_storage_backend(
        "dynamic",
        prefetch_threshold=PS,
        model_name="org/tiny-mla",
        storage_backend_extra_config=spec["extra"],
        host_pools=group.entries,
    )
    backend = ctl.storage_backend
    n_a, n_b = int(spec["pages_a"]), int(spec["pages_b"])
    tokens_a = list(range(1000, 1000 + n_a * PS))
    hashes_a = chain(tokens_a)
    out: dict[str, Any] = {
        "rank": rank,
        "host_cache": backend.host_cache,
        "writer": backend.is_storage_writer,
        "tiers": [t.name for t in backend.store.tiers],
    }

    def write(tokens: list[int], hashes: list[str], seed: int) -> None:
        src = host.alloc(len(hashes) * PS)
        fill_random_pages(host, src, seed=seed)
        ctl.write_storage(src, tokens, hash_value=hashes)
        op = ctl.ack_backup_queue.get(timeout=60)
        assert op.completed_tokens == len(tokens), op.completed_tokens
        host.free(src)

    def prefetch(tag: str) -> None:
        handle = CacheRequestHandle(rid=f"req-{tag}", attempt_id=0)
        ctl.prefetch(handle, tokens_a + [1, 2], last_hash=None)
        hit = ctl.prefetch_hit_queue.get(timeout=60)
        out[f"hit_tokens_{tag}"] = hit.storage_hit_count  # after SGLang's MIN over the ranks
        if hit.storage_hit_count == 0:
            return  # every rank got the same MIN: none loads
        dst = ctl.alloc_prefetch_host_buffers(hit, hit.storage_hit_count)
        hit.host_indices = dst
        ctl.prefetch_buffer.put(hit)
        deadline = time.monotonic() + 60
        while True:
            ack = ctl.ack_prefetch_queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if ack.completed_req:
                break
        got = page_snapshot(host, dst)
        want = expected(host, n_a, seed=11)
        out[f"loaded_pages_{tag}"] = len(got)
        out[f"bytes_ok_{tag}"] = len(got) == n_a and all(
            torch.equal(a, b) for a, b in zip(want, got, strict=True)
        )
        host.free(dst)

    def service_stats() -> dict[str, Any]:
        stats: dict[str, Any] = backend.tier_stats()["tiers"]["host_cache"]["service"]
        return stats

    if rank == 0:
        write(tokens_a, hashes_a, seed=11)
    dist.barrier()
    prefetch("dram")
    dist.barrier()
    if rank == 0:
        tokens_b = list(range(500_000, 500_000 + n_b * PS))
        hashes_b = chain(tokens_b, None)
        step = 64
        for i in range(0, n_b, step):
            write(tokens_b[i * PS : (i + step) * PS], hashes_b[i : i + step], seed=100 + i)
        deadline = time.monotonic() + 60
        while True:  # until the service's mover has put A on the SSD
            tiers = service_stats()["store"]["tiers"]
            if tiers["ssd"]["background"]["queued"] == 0 and tiers["ssd"]["entries"] >= n_a:
                break
            assert time.monotonic() < deadline, tiers
            time.sleep(0.1)
        out["dram_entries_before_ssd_read"] = tiers["dram"]["entries"]
        out["promotions_before"] = tiers["placement"].get("promotions", 0)
    dist.barrier()
    prefetch("ssd")
    dist.barrier()
    if rank == 0:
        stats = service_stats()
        out["promotions_after"] = stats["store"]["tiers"]["placement"].get("promotions", 0)
        out["service_pid"] = stats["pid"]
        out["clients"] = stats["clients"]
    ctl.detach_storage_backend()
    dist.barrier()
    dist.destroy_process_group()
    return out


def mha_reader(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    backend, host = make_backend("page_first", extra=spec["extra"])
    keys = list(spec["keys"])
    out: dict[str, Any] = {"host_cache": backend.host_cache, "exists": backend.batch_exists(keys)}
    dst = host.alloc(len(keys) * PS)
    out["got"] = backend.batch_get_v1(keys, dst)
    want = expected(host, len(keys), seed=int(spec["seed"]))
    got = page_snapshot(host, dst)
    out["bytes_ok"] = all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    out["service_pid"] = backend.tier_stats()["tiers"]["host_cache"]["service"].get("pid")
    backend.close()
    return out


def main() -> None:
    role, spec = sys.argv[1], json.loads(sys.argv[2])
    result = {"mla-rank": mla_rank, "mha-reader": mha_reader}[role](spec)
    Path(spec["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
