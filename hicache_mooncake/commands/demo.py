"""``hicache-mooncake demo``: SGLang's own host pool and factory, our default YAML, real pages.

Builds a real SGLang host KV pool on CPU, creates our backend through SGLang's
``StorageBackendFactory`` exactly as the ``dynamic`` loader does with the shipped ``default.yaml``
(or ``--config``), writes a few thousand pages through the zero-copy v1 interface, then reads back
every page the store still holds (newest first; each run of present pages in one call, as SGLang
reads a prefix), checks every byte, and prints what each tier holds and served and, from the
tiers' counters, why the other pages are gone.

The SSD tier writes into a temporary directory of its own (under $TMPDIR), removed at the end
unless ``--keep``; ``--ssd-dir DIR`` uses DIR instead and leaves it in place. The demo says where
it wrote and how much.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.commands._demo_report import explain_misses, leading_run, present_runs
from hicache_mooncake.config import CONFIG_ENV, deep_merge, load_config_file
from hicache_mooncake.sizes import format_size

BATCH_PAGES = 128


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="store and load pages through SGLang's interface on the default config",
        description=__doc__,
    )
    parser.add_argument(
        "--config", default=None, help="YAML to use instead of the shipped default.yaml (@ prefix allowed)"
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
    parser.add_argument(
        "--ssd-dir",
        default=None,
        help="SSD tier directory (default: a new temporary directory, removed at the end)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary SSD directory")
    parser.set_defaults(func=run, exit_findings="a page read back differs from what was written")


def run(args: argparse.Namespace) -> int:
    if args.pages < 1 or args.layers < 1:
        raise UsageError("--pages and --layers must be at least 1")
    from hicache_mooncake.presets import preset_path

    loaded = load_config_file(args.config or preset_path("default"))
    print(f"config: {loaded.path}")
    if os.environ.pop(CONFIG_ENV, None):
        print(f"(${CONFIG_ENV} is ignored here: the demo uses --config)")
    extra = loaded.extra_config()
    ssd_dir: Path | None = None
    temporary = False
    if loaded.config.tiers.ssd.enabled:
        if args.ssd_dir:
            ssd_dir = Path(args.ssd_dir).expanduser().resolve()
            ssd_dir.mkdir(parents=True, exist_ok=True)
        else:
            ssd_dir, temporary = Path(tempfile.mkdtemp(prefix="hicache-mooncake-demo-")), True
        ssd: dict[str, Any] = {"path": str(ssd_dir)}
        if temporary and not args.keep:
            ssd["flush_on_detach_s"] = 0  # the directory is removed: nothing to keep on detach
        extra = deep_merge(extra, {"tiers": {"ssd": ssd}})
        print(f"SSD tier: {ssd_dir}" + (" (temporary)" if temporary else ""))
    try:
        return _demo(args, extra)
    finally:
        if ssd_dir is not None:
            _report_ssd_dir(ssd_dir, remove=temporary and not args.keep)


def _demo(args: argparse.Namespace, extra: dict[str, Any]) -> int:
    # SGLang's quantization modules warn at import on a CPU-only machine; nothing here uses them.
    warnings.filterwarnings("ignore", message="Only CUDA", category=UserWarning)
    import torch
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from tqdm import tqdm

    from hicache_mooncake.sglang_harness import (
        PoolShape,
        fill_random_pages,
        make_host_pool,
        make_storage_config,
    )

    no_bar = not sys.stderr.isatty()  # no progress bars into a log file or pipe
    shape = PoolShape(page_size=64, layers=args.layers, heads=4, head_dim=128, device_tokens=BATCH_PAGES * 64)
    ps, page_bytes = shape.page_size, shape.page_bytes()
    print(f"SGLang host pool: MHA page_first, {format_size(page_bytes)} per page, {args.pages} pages")
    host = make_host_pool("page_first", False, shape)
    backend = StorageBackendFactory.create_backend("dynamic", make_storage_config(extra), host)
    backend.register_mem_pool_host(host)
    try:
        src = host.alloc(BATCH_PAGES * ps)
        dst = host.alloc(BATCH_PAGES * ps)
        fill_random_pages(host, src, seed=0)
        keys = [f"{i:064x}" for i in range(args.pages)]
        batches = [keys[i : i + BATCH_PAGES] for i in range(0, len(keys), BATCH_PAGES)]
        stored = 0
        t_set = 0.0
        mover = backend.store.mover
        for chunk in tqdm(batches, desc="set", unit="batch", disable=no_bar):
            start = time.perf_counter()
            ok = backend.batch_set_v1(chunk, src[: len(chunk) * ps])
            t_set += time.perf_counter() - start
            stored += sum(ok)
            if mover is not None and not args.no_pace:
                mover.flush()  # a write rate the SSD absorbs (prefill is slower than memcpy)
        if mover is not None:
            print("waiting for background demotion DRAM -> SSD ...")
            mover.flush()
        before_read = backend.tier_stats()
        before = before_read["tiers"]
        found = mismatched = vanished = 0
        t_get = 0.0
        want = host.kv_buffer[:, src[0] : src[0] + BATCH_PAGES * ps].clone()
        # newest first, as prefixes are reused: recent pages come from DRAM, older ones from SSD
        for chunk in tqdm(batches[::-1], desc="get", unit="batch", disable=no_bar):
            for lo, hi in present_runs([backend.exists(k) for k in chunk]):
                start = time.perf_counter()
                n = leading_run(backend.batch_get_v1(chunk[lo:hi], dst[: (hi - lo) * ps]))
                t_get += time.perf_counter() - start
                found += n
                vanished += hi - lo - n
                got = host.kv_buffer[:, dst[0] : dst[0] + n * ps]
                if not torch.equal(got.view(torch.uint8), want[:, lo * ps : (lo + n) * ps].view(torch.uint8)):
                    mismatched += 1
        written, read = stored * page_bytes, found * page_bytes
        print(
            f"set: {stored}/{args.pages} pages stored, {format_size(written)} in {t_set:.2f}s of foreground "
            f"calls = {written / max(t_set, 1e-9) / 1e9:.2f} GB/s"
        )
        print(
            f"get: {found}/{args.pages} pages found, {read / max(t_get, 1e-9) / 1e9:.2f} GB/s, "
            f"byte check: {'OK' if not mismatched else f'{mismatched} reads differ'}"
        )
        stats = backend.tier_stats()
        _print_tiers(stats["tiers"], before)
        for line in explain_misses(before_read, stats, args.pages, stored, found, vanished):
            print(line)
        return 0 if not mismatched else 1
    finally:
        backend.close()


def _print_tiers(after: dict[str, Any], before: dict[str, Any]) -> None:
    print("tiers (hits: pages the read phase served from each tier):")
    for name, st in after.items():
        if "tier" not in st:
            continue
        served = st.get("hits", 0) - before.get(name, {}).get("hits", 0)
        extra = ""
        if name == "ssd":
            extra = (
                f" io={st.get('io_mode')} demoted={st.get('background', {}).get('demoted', 0)}"
                f" written={format_size(st.get('bytes_written', 0))}"
            )
        print(
            f"  {name:6s} entries={st.get('entries', 0):6d} used={format_size(st.get('used_bytes', 0))}"
            f" of {format_size(st.get('capacity_bytes', 0))} hits={served} evictions={st.get('evictions', 0)}"
            f"{extra}"
        )


def _report_ssd_dir(path: Path, remove: bool) -> None:
    files = [p for p in path.rglob("*") if p.is_file()]
    on_disk = sum(p.stat().st_blocks * 512 for p in files)
    what = f"SSD tier: {len(files)} files, {format_size(on_disk)} on disk in {path}"
    if remove:
        shutil.rmtree(path, ignore_errors=True)
        print(f"{what}; removed (--keep keeps it)")
    else:
        print(f"{what}; kept")
