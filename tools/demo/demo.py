"""``hicache-mooncake demo``: SGLang's own host pool and factory, our default YAML, real pages.

Builds a real SGLang host KV pool on CPU, reads the shipped ``default.yaml`` (or ``--config``) with
SGLang's own extra-config parser (``@FILE``, as ``--hicache-storage-backend-extra-config`` does;
loader keys a partial file lacks are filled in from their defaults), creates our backend through
SGLang's ``StorageBackendFactory`` with the ``dynamic`` backend, as SGLang's cache controller does,
writes a few thousand pages through the zero-copy v1 interface, then reads back
every page the store still holds (newest first; each run of present pages in one call, as SGLang
reads a prefix), checks every byte, and prints what each tier holds and served and, from the
tiers' counters, why the other pages are gone.

The SSD tier writes into a temporary directory of its own (under $TMPDIR), removed at the end
unless ``--keep``; ``--ssd-dir DIR`` uses DIR instead and leaves it in place. The demo says where
it wrote and how much, and whether the SSD tier was used at all (pages go there only once DRAM
fills to its high watermark).

Needs torch and SGLang (the ``sglang`` extra), checked before anything else: exit status 2 and
one line naming the extra when either is missing.
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
from hicache_mooncake.config import CONFIG_ENV, deep_merge, load_config_file
from hicache_mooncake.config.loader import LoadedConfig
from hicache_mooncake.config.schema import LOADER_KEYS
from hicache_mooncake.optional_deps import require
from hicache_mooncake.sizes import format_size
from hicache_mooncake.tools.demo.report import (
    explain_misses,
    leading_run,
    present_runs,
    ssd_use_lines,
    tier_rows,
)

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
    require("torch", "sglang")
    from hicache_mooncake.presets import preset_path

    loaded = load_config_file(args.config or preset_path("default"))
    print(f"config: {loaded.path}")
    if os.environ.pop(CONFIG_ENV, None):
        print(f"(${CONFIG_ENV} is ignored here: the demo uses --config)")
    extra = sglang_extra_config(loaded)
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


def sglang_extra_config(loaded: LoadedConfig) -> dict[str, Any]:
    """The extra config as SGLang's cache controller hands it to the ``dynamic`` loader: the file
    read by SGLang's own parser (``@FILE``; it removes the keys SGLang consumes, such as
    ``prefetch_threshold``, and refuses what SGLang refuses: UsageError naming it), plus the loader
    keys a partial file lacks, from their defaults (SGLang itself would refuse such a file)."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    try:
        parsed, *_ = HybridCacheController.parse_storage_backend_extra_config(f"@{loaded.path}")
    except (ValueError, TypeError) as exc:
        raise UsageError(f"SGLang's loader refuses {loaded.path}: {exc}") from None
    defaults = loaded.extra_config()
    added = sorted(k for k in LOADER_KEYS if k not in parsed)
    if added:
        print(
            f"warning: SGLang itself would refuse {loaded.path} (Missing required field "
            f"'{added[0]}'; `hicache-mooncake config validate` says so too); the demo fills in "
            f"{', '.join(added)} from their defaults"
        )
    return {**{k: defaults[k] for k in added}, **parsed}


def _demo(args: argparse.Namespace, extra: dict[str, Any]) -> int:
    # SGLang's quantization modules warn at import on a CPU-only machine; nothing here uses them.
    warnings.filterwarnings("ignore", message="Only CUDA", category=UserWarning)
    import torch
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from tqdm import tqdm

    from hicache_mooncake.tools.sglang_harness import (
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
    print(
        f"backend: {type(backend).__module__}.{type(backend).__name__}, made by SGLang's "
        f"StorageBackendFactory ('dynamic', {extra['module_path']}.{extra['class_name']})"
    )
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
        if mover is not None and mover.queued:
            print(f"waiting for background demotion DRAM -> SSD ({mover.queued} pages queued) ...")
        if mover is not None:
            mover.flush()
        before_read = backend.tier_stats()
        before = before_read["tiers"]
        for line in ssd_use_lines(before, args.pages, page_bytes):
            print(line)
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
        for line in tier_rows(stats["tiers"], before):
            print(line)
        for line in explain_misses(before_read, stats, args.pages, stored, found, vanished):
            print(line)
        return 0 if not mismatched else 1
    finally:
        backend.close()


def _report_ssd_dir(path: Path, remove: bool) -> None:
    files = [p for p in path.rglob("*") if p.is_file()]
    on_disk = sum(p.stat().st_blocks * 512 for p in files)
    what = f"SSD tier: {len(files)} files, {format_size(on_disk)} on disk in {path}"
    if remove:
        shutil.rmtree(path, ignore_errors=True)
        print(f"{what}; removed (--keep keeps it)")
    else:
        print(f"{what}; kept")
