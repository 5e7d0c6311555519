"""``hicache-mooncake demo``: SGLang's own host pool and factory, our default YAML, real pages.

Builds a real SGLang host KV pool on CPU, creates our backend through SGLang's
``StorageBackendFactory`` exactly as the ``dynamic`` loader does with ``@configs/default.yaml``,
writes and reads a few thousand pages through the zero-copy v1 interface, checks every byte read
back, and prints what each tier holds and the throughput.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from hicache_mooncake.sizes import format_size


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="store and load pages through SGLang's interface on the default config"
    )
    parser.add_argument(
        "--config", default=None, help="YAML to use instead of the shipped configs/default.yaml"
    )
    parser.add_argument("--pages", type=int, default=6000, help="pages to write and read back (default 6000)")
    parser.add_argument(
        "--layers", type=int, default=4, help="layers per page (page = 64 tokens x 4 heads x 128 x 2 x bf16)"
    )
    parser.add_argument(
        "--no-pace",
        action="store_true",
        help="write as fast as memory allows (DRAM overflow beyond what the SSD absorbs is dropped)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch
    import yaml
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from tqdm import tqdm

    from hicache_mooncake.presets import preset_path
    from hicache_mooncake.sglang_harness import (
        PoolShape,
        fill_random_pages,
        make_host_pool,
        make_storage_config,
    )

    config_path = args.config or str(preset_path("default"))
    with open(config_path, encoding="utf-8") as f:
        extra = yaml.safe_load(f)
    batch = 128
    shape = PoolShape(page_size=64, layers=args.layers, heads=4, head_dim=128, device_tokens=batch * 64)
    print(f"config: {config_path}")
    print(f"SGLang host pool: MHA page_first, {format_size(shape.page_bytes())} per page, {args.pages} pages")
    host = make_host_pool("page_first", False, shape)
    backend = StorageBackendFactory.create_backend("dynamic", make_storage_config(extra), host)
    backend.register_mem_pool_host(host)
    try:
        src = host.alloc(batch * shape.page_size)
        dst = host.alloc(batch * shape.page_size)
        fill_random_pages(host, src, seed=0)
        keys = [f"{i:064x}" for i in range(args.pages)]
        batches = [keys[i : i + batch] for i in range(0, len(keys), batch)]
        written = t_set = 0.0
        mover = backend.store.mover
        for chunk in tqdm(batches, desc="set", unit="batch"):
            start = time.perf_counter()
            ok = backend.batch_set_v1(chunk, src[: len(chunk) * shape.page_size])
            t_set += time.perf_counter() - start
            written += sum(ok) * shape.page_bytes()
            if mover is not None and not args.no_pace:
                mover.flush()  # a write rate the SSD absorbs (prefill is slower than memcpy)
        if mover is not None:
            print("waiting for background demotion DRAM -> SSD ...")
            mover.flush()
        before = {n: dict(st) for n, st in backend.tier_stats()["tiers"].items()}
        hits = mismatched = 0
        read = t_get = 0.0
        want = host.kv_buffer[:, src[0] : src[0] + batch * shape.page_size].clone()
        # newest first, as prefixes are reused: recent pages come from DRAM, older ones from SSD
        for chunk in tqdm(batches[::-1], desc="get", unit="batch"):
            start = time.perf_counter()
            ok = backend.batch_get_v1(chunk, dst[: len(chunk) * shape.page_size])
            t_get += time.perf_counter() - start
            n = sum(ok)
            hits += n
            read += n * shape.page_bytes()
            got = host.kv_buffer[:, dst[0] : dst[0] + n * shape.page_size]
            if not torch.equal(got.view(torch.uint8), want[:, : n * shape.page_size].view(torch.uint8)):
                mismatched += 1
        print(
            f"set: {format_size(written)} in {t_set:.2f}s of foreground calls = {written / max(t_set, 1e-9) / 1e9:.2f} GB/s"
        )
        print(
            f"get: {hits}/{args.pages} pages hit, {read / max(t_get, 1e-9) / 1e9:.2f} GB/s, "
            f"byte check: {'OK' if not mismatched else f'{mismatched} batches differ'}"
        )
        after = backend.tier_stats()["tiers"]
        print("tiers (hits: pages the read phase served from each tier):")
        for name, st in after.items():
            if "tier" not in st:
                continue
            served = st.get("hits", 0) - before.get(name, {}).get("hits", 0)
            extra = ""
            if name == "ssd":
                extra = f" io={st.get('io_mode')} demoted={st.get('background', {}).get('demoted', 0)}"
            print(
                f"  {name:6s} entries={st.get('entries', 0):6d} used={format_size(st.get('used_bytes', 0))}"
                f" of {format_size(st.get('capacity_bytes', 0))} hits={served} evictions={st.get('evictions', 0)}"
                f"{extra}"
            )
        return 0 if not mismatched else 1
    finally:
        backend.close()
