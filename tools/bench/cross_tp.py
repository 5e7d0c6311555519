"""Cross-TP head groups: what ``tp_lcm_size`` costs against per-rank page objects.

One TP=1 backend made by SGLang's factory over SGLang's own MHA host pool (CPU, unpinned), DRAM
tier only, stores and reads batches of pages through ``batch_set_v1``/``batch_get_v1`` with
``tp_lcm_size`` off (one object per page, today's keys) and 2, 4, 8 (that many head-group
objects per page), for two page sizes and two host layouts: ``page_first`` (a head group is
strided: gathered into a staging buffer on set, scattered on get) and ``page_head`` (a group
is contiguous: zero copy). Reported per case: set and get throughput (best of ``--repeats``),
store calls per batch, and DRAM index entries per page.

    python -m hicache_mooncake.tools.bench.cross_tp --json benchmarks/results/bench_cross_tp.json
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import time
from collections.abc import Sequence
from typing import Any

from hicache_mooncake.tools.results_json import write_json

LCMS = (None, 2, 4, 8)
REQUIRES = ("torch", "sglang")
LAYOUTS = ("page_first", "page_head")
# page bytes -> (page_size tokens, layers, heads, head_dim); bf16, K and V: 2 x 2 x ... bytes
PAGES = {64 << 10: (16, 2, 8, 64), 1 << 20: (64, 4, 8, 128)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mib", type=int, default=64, help="MiB moved per measured pass (default: 64)")
    parser.add_argument("--batch", type=int, default=32, help="pages per batch_set_v1/batch_get_v1 call")
    parser.add_argument("--repeats", type=int, default=3, help="passes per case; the best one counts")


def _backend(layout: str, page_bytes: int, lcm: int | None, pages: int, stored: int) -> tuple[Any, Any]:
    """A TP=1 rank whose host pool holds two batches of ``pages`` and whose DRAM tier holds
    ``stored`` pages (nothing is evicted while measuring)."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.tools.sglang_harness import PoolShape, make_host_pool, make_storage_config

    ps, layers, heads, head_dim = PAGES[page_bytes]
    shape = PoolShape(page_size=ps, layers=layers, heads=heads, head_dim=head_dim, device_tokens=pages * ps)
    host = make_host_pool(layout, False, shape)
    capacity = (stored * page_bytes * 5) // 4 + (32 << 20)
    extra = {
        "backend_name": "hicache_mooncake",
        "module_path": "hicache_mooncake.backend",
        "class_name": "HiCacheMooncakeBackend",
        "interface_v1": 1,
        "tiers": {
            "host_cache": "off",
            "dram": {"capacity": capacity, "slab_size": 2 * page_bytes},
            "ssd": {"enabled": False},
        },
    }
    cfg = make_storage_config(extra, layout=layout, tp_lcm_size=lcm)
    backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
    backend.register_mem_pool_host(host)
    return backend, host


def measure(
    layout: str, page_bytes: int, lcm: int | None, mib: int, batch: int, repeats: int
) -> dict[str, Any]:
    """Best-of-``repeats`` set and get throughput of ``mib`` MiB in batches of ``batch`` pages."""
    from hicache_mooncake.tools.sglang_harness import fill_random_pages

    pages = max(batch, (mib << 20) // page_bytes // batch * batch)
    backend, host = _backend(layout, page_bytes, lcm, batch, pages)
    calls: list[int] = []
    put = backend.store.put_batch

    def counted(keys: Sequence[str], *args: Any, **kwargs: Any) -> list[bool]:
        calls.append(len(keys))
        return put(keys, *args, **kwargs)

    backend.store.put_batch = counted
    try:
        src = host.alloc(batch * host.page_size)
        dst = host.alloc(batch * host.page_size)
        fill_random_pages(host, src, seed=1)
        best_set = best_get = float("inf")
        entries_per_page = 0.0
        for rep in range(repeats):
            backend.clear()
            keys = [[f"r{rep}b{b}p{p:056x}" for p in range(batch)] for b in range(pages // batch)]
            start = time.perf_counter()
            for ks in keys:
                if not all(backend.batch_set_v1(ks, src)):
                    raise RuntimeError(f"set failed: {layout} {page_bytes} tp_lcm_size={lcm}")
            best_set = min(best_set, time.perf_counter() - start)
            entries_per_page = backend.tier_stats()["tiers"]["dram"]["entries"] / pages
            start = time.perf_counter()
            for ks in keys:
                if not all(backend.batch_get_v1(ks, dst)):
                    raise RuntimeError(f"get missed: {layout} {page_bytes} tp_lcm_size={lcm}")
            best_get = min(best_get, time.perf_counter() - start)
        total = pages * page_bytes
        return {
            "layout": layout,
            "page_bytes": page_bytes,
            "tp_lcm_size": lcm or 1,
            "objects_per_page": backend._kv_cut().per_page,
            "zero_copy": bool(backend._head_groups.zero_copy) if backend._head_groups is not None else True,
            "index_entries_per_page": entries_per_page,
            "store_calls_per_batch": len(calls) / (repeats * (pages // batch)),
            "pages": pages,
            "batch_pages": batch,
            "set_gbps": round(total / best_set / 1e9, 3),
            "get_gbps": round(total / best_get / 1e9, 3),
            "set_us_per_page": round(best_set / pages * 1e6, 2),
            "get_us_per_page": round(best_get / pages * 1e6, 2),
        }
    finally:
        backend.close()
        gc.collect()


def run(args: argparse.Namespace) -> int:
    """``bench cross_tp`` (the common ``--json OUT`` writes the result) and ``python -m``."""
    result = measure_all(args)
    if getattr(args, "json_out", None):
        write_json(args.json_out, result)
    return 0


def measure_all(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for page_bytes in PAGES:
        for layout in LAYOUTS:
            for lcm in LCMS:
                row = measure(layout, page_bytes, lcm, args.mib, args.batch, args.repeats)
                rows.append(row)
                print(
                    f"{page_bytes >> 10:>5} KiB {layout:<10} tp_lcm_size={row['tp_lcm_size']}: "
                    f"set {row['set_gbps']:.2f} GB/s, get {row['get_gbps']:.2f} GB/s, "
                    f"{row['index_entries_per_page']:.0f} index entries/page, "
                    f"{row['store_calls_per_batch']:.0f} store call/batch",
                    flush=True,
                )
    return {
        "bench": "cross_tp",
        "what": "TP=1 rank, DRAM tier, SGLang MHA host pool (bf16, CPU); tp_lcm_size 1 = off (per-rank objects)",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "mib_per_pass": args.mib,
        "repeats": args.repeats,
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hicache_mooncake.tools.bench.cross_tp", description=__doc__
    )
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here (JSON)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.getLogger("hicache_mooncake").setLevel(logging.WARNING)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
