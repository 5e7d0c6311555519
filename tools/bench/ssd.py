"""SSD tier vs fio (raw O_DIRECT, at its best) vs SGLang's `file` backend and aiofiles, on one directory, in one run.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench ssd`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.optional_deps import require
from hicache_mooncake.sizes import format_size, parse_size
from hicache_mooncake.tools.bench import _disk
from hicache_mooncake.tools.bench._busy import busy_python_thread
from hicache_mooncake.tools.bench._disk import (
    NOT_DROPPED,
    add_dir_argument,
    add_drop_caches_argument,
    default_work_dir,
    drop_caches,
    fs_type,
    wait_disk_idle,
)
from hicache_mooncake.tools.bench._fio import Fio, HugePages, max_buffer_bytes
from hicache_mooncake.tools.bench._sglang_io import (
    PAGE_SHAPES,
    PageStamps,
    Timed,
    create_backend,
    page_workload,
    timed_generic_get,
    timed_generic_set,
    timed_v1_get,
    timed_v1_set,
)
from hicache_mooncake.tools.results_json import write_json

REQUIRES = ("torch", "sglang")  # optional modules, checked by ``bench`` before any work

BATCH_PAGES = 128
TARGET_VS_FIO = 0.9
TARGET_VS_FILE = 5.0
TARGET_CPU_S_PER_GB = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dir_argument(parser)
    add_drop_caches_argument(parser)
    parser.add_argument(
        "--hugepages",
        action="store_true",
        help="root: raise vm.nr_overcommit_hugepages for the run (restored after) so fio's buffers "
        "can be 2 MiB huge pages (default: fio uses huge pages only if the host already allows them)",
    )
    parser.add_argument("--total", default="1GiB", help="bytes written per page size, backend and round")
    parser.add_argument("--sizes", default="1MiB,8MiB", help="page sizes (1MiB, 8MiB, 256KiB, 4MiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=BATCH_PAGES, help="pages per batch_set/get call (max)")
    parser.add_argument(
        "--batch-bytes",
        default="256MiB",
        help="cap on one batch's bytes (the host pool holds two batches)",
    )
    parser.add_argument("--no-file", action="store_true", help="skip SGLang's file backend")
    parser.add_argument(
        "--no-aiofiles", action="store_true", help="skip the aiofiles leg (the same pages through aiofiles)"
    )
    parser.add_argument(
        "--no-concurrency",
        dest="concurrency",
        action="store_false",
        help="skip the backup + prefetch threads case",
    )
    parser.add_argument("--recover-bound-s", type=float, default=60.0, help="reopen must finish within this")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="measure every page size in this process (default: one fresh process per page size; a "
        "second size measured in the same process read ~2x slower here, cause not found)",
    )
    parser.add_argument(
        "--disk-quiet-s",
        type=float,
        default=1.0,
        help="seconds the disk must have been idle before each timed step (the trims of deleted "
        "files done); less only for smoke runs, whose figures then carry the previous step's trims",
    )
    parser.add_argument("--row-json", default=None, help=argparse.SUPPRESS)  # child mode: one size, one row


# ---------------------------------------------------------------------------------------- helpers


def _figures(nbytes: int, t: Timed) -> dict[str, float]:
    gb = nbytes / 1e9
    return {
        "gbps": gb / t.seconds if t.seconds else 0.0,
        "cpu_s_per_gb": t.cpu_seconds / gb,
        "seconds": t.seconds,
        "ok_pages": t.ok_pages,
        "bad_pages": t.bad_pages,
    }


REGION_BYTES = 64 << 20  # the SSD tier's region size in every configuration this bench makes


def _capacity(total: int) -> int:
    """Region bytes for ``total`` payload bytes: the placement keeps the SSD at most ``ssd_fill``
    full (whole-region reclaim), and every entry carries a 4 KiB header."""
    return (-(-total * 3 // 2) // REGION_BYTES + 4) * REGION_BYTES


# ---------------------------------------------------------------------------------------- ours / file


def ssd_only_config(path: str, capacity: int, verify_on_recover: bool = True) -> dict[str, Any]:
    from hicache_mooncake.presets import load_preset

    cfg = load_preset("default")
    cfg["tiers"]["dram"] = {**cfg["tiers"].get("dram", {}), "enabled": False}
    cfg["tiers"]["ssd"] = {
        **cfg["tiers"].get("ssd", {}),
        "enabled": True,
        "path": path,
        "capacity": capacity,
        "region_size": REGION_BYTES,
        "min_free": "64MiB",
        "verify_on_recover": verify_on_recover,
    }
    return cfg


def _ssd_stats(backend: Any) -> dict[str, Any]:
    return dict(backend.tier_stats()["tiers"].get("ssd", {}))


def fill_until_reclaim(be: Any, region: Any, batch: int, page_bytes: int, capacity: int) -> dict[str, Any]:
    """Bring the tier to its steady state: set throwaway pages (never read back, so not
    stamped) until it has reclaimed a region, so every region has been written once, at most
    twice ``capacity``; ``steady_into_reused_regions`` says whether it got there."""
    limit = 2 * capacity // page_bytes + batch
    pages = failed = 0

    def reclaimed() -> bool:
        return int(_ssd_stats(be).get("reclaimed_regions", 0)) > 0

    while pages < limit and not reclaimed():
        keys = [f"w{pages + j:063x}" for j in range(batch)]
        res = be.batch_set_v1(keys, region[: batch * 64])
        failed += sum(not r for r in res)
        pages += batch
    return {"steady_into_reused_regions": reclaimed(), "warmup_pages": pages, "warmup_failed_sets": failed}


def _bench_round(
    fio: Fio,
    base: str,
    page_bytes: int,
    pages: int,
    batch: int,
    host: Any,
    src: Any,
    dst: Any,
    rnd: int,
    with_file: bool,
    drop: bool,
    with_aiofiles: bool = True,
) -> dict[str, Any]:
    total = pages * page_bytes
    out: dict[str, Any] = {"round": rnd}
    stamps = PageStamps(host)
    work = tempfile.mkdtemp(prefix=f"r{rnd}-{format_size(page_bytes)}-", dir=base)
    dropped = [True]

    def drop_now() -> None:
        dropped[0] = drop_caches(drop) and dropped[0]

    def tags(b: int, j: int) -> int:
        return (rnd << 48) | (b * batch + j)

    try:
        wait_disk_idle(base)  # the previous round's files are trimmed before anything is timed
        # fio: raw sequential O_DIRECT write + read of the same directory, best configuration
        fpath = os.path.join(work, "fio.dat")
        out["fio_write"], out["fio_read"] = fio.best(fpath, page_bytes, total, drop_now)
        wait_disk_idle(base)
        out["fio_overwrite"] = fio.best_overwrite(fpath, page_bytes, total)
        os.unlink(fpath)
        wait_disk_idle(base)

        keys = [f"{rnd:04d}{i:060x}" for i in range(pages)]
        batches = [keys[i : i + batch] for i in range(0, pages, batch)]
        if with_aiofiles:  # the same pages through aiofiles' thread pool (buffered, then fsync)
            from hicache_mooncake.tools.bench._aiofiles_io import aiofiles_get, aiofiles_set

            apath = os.path.join(work, "aiofiles.dat")
            out["aiofiles_set"] = _figures(total, aiofiles_set(apath, batches, batch, src, stamps, tags))
            drop_now()
            out["aiofiles_get"] = _figures(total, aiofiles_get(apath, batches, batch, src, dst, stamps, tags))
            os.unlink(apath)
            wait_disk_idle(base)

        # ours: SSD-only backend created by SGLang's factory, zero-copy v1 interface
        capacity = _capacity(total)
        cfg = ssd_only_config(os.path.join(work, "ours"), capacity)
        be = create_backend("dynamic", cfg, host)
        try:
            stats = _ssd_stats(be)
            out["io_mode"] = stats.get("io_mode")
            out["io_mode_reason"] = stats.get("io_mode_reason")
            # Warm-up outside timing: the first calls import / fault in code; and drop_caches
            # evicts this process's code pages too, so a tiny get of other keys re-faults them.
            warm = [f"warm{rnd}-{i}" for i in range(2)]
            be.batch_set_v1(warm, src[: len(warm) * 64])
            out["ours_set"] = _figures(total, timed_v1_set(be.batch_set_v1, batches, src, stamps, tags, 64))
            drop_now()
            be.batch_get_v1(warm, dst[: len(warm) * 64])
            got = timed_v1_get(be.batch_get_v1, batches, src, dst, stamps, tags, 64)
            out["ours_get"] = _figures(total, got)
            # the same gets next to a thread running Python throughout (SGLang's scheduler): each
            # time a call gives the GIL up (every read does) it may wait a switch interval for it
            drop_now()
            with busy_python_thread():
                got = timed_v1_get(be.batch_get_v1, batches, src, dst, stamps, tags, 64)
            out["ours_busy_get"] = _figures(total, got)
            entries = _ssd_stats(be).get("entries", 0)
        finally:
            be.close()

        # reopen of the full tier: construct the backend again, verify + headers only
        for label, verify in (("reopen_verify", True), ("reopen_headers_only", False)):
            drop_caches(drop)
            t0 = time.perf_counter()
            be = create_backend(
                "dynamic", ssd_only_config(os.path.join(work, "ours"), capacity, verify), host
            )
            secs = time.perf_counter() - t0
            try:
                st = _ssd_stats(be)
                out[label] = {
                    "seconds": secs,
                    "entries_before": entries,
                    "entries_recovered": st.get("entries", 0),
                    "bytes_recovered": st.get("used_bytes", 0),
                    "recover_seconds_engine": st.get("recover_seconds"),
                }
            finally:
                be.close()
        # steady state: once every region has been written (the tier full, reclaim running),
        # sets go into reused regions: no block allocation, no extent conversion, no journal
        # flush of the filesystem's own (on this VM's ext4 those stall a cold fill for seconds)
        wait_disk_idle(base)
        be = create_backend("dynamic", cfg, host)
        try:
            steady_state = fill_until_reclaim(be, src, batch, page_bytes, capacity)
            out["steady_into_reused_regions"] = steady_state["steady_into_reused_regions"]
            out["steady_fill_failed_pages"] = steady_state["warmup_failed_sets"]
            wait_disk_idle(base)
            steady = [[f"{k}s" for k in b] for b in batches]
            out["ours_steady_set"] = _figures(
                total,
                timed_v1_set(
                    be.batch_set_v1,
                    steady,
                    src,
                    stamps,
                    lambda b, j: (rnd << 48) | 1 << 46 | (b * batch + j),
                    64,
                ),
            )
            wait_disk_idle(base)
            busy = [[f"{k}b" for k in b] for b in batches]
            with busy_python_thread():
                busy_set = timed_v1_set(
                    be.batch_set_v1,
                    busy,
                    src,
                    stamps,
                    lambda b, j: (rnd << 48) | 1 << 45 | (b * batch + j),
                    64,
                )
            out["ours_busy_steady_set"] = _figures(total, busy_set)
        finally:
            be.close()

        shutil.rmtree(os.path.join(work, "ours"), ignore_errors=True)
        wait_disk_idle(base)

        # SGLang's file backend, driven the way its cache controller drives it
        if with_file:
            fdir = os.path.join(work, "file")
            fb = create_backend("file", {"file_storage_path": fdir}, host)
            fkeys = [[f"{k}f" for k in b] for b in batches]
            fwarm = [f"warm{rnd}-{i}f" for i in range(2)]
            timed_generic_set(fb, host, [fwarm], src, stamps, lambda b, j: 1 << 62 | j)
            out["file_set"] = _figures(total, timed_generic_set(fb, host, fkeys, src, stamps, tags))
            drop_now()
            timed_generic_get(fb, host, [fwarm], src, dst, stamps, lambda b, j: 1 << 62 | j)
            out["file_get"] = _figures(total, timed_generic_get(fb, host, fkeys, src, dst, stamps, tags))
            with contextlib.suppress(Exception):
                fb.close()
    finally:
        stamps.close()
        shutil.rmtree(work, ignore_errors=True)
        wait_disk_idle(base)
    out["cache_dropped"] = dropped[0]
    return out


def _bench_size(
    fio: Fio,
    base: str,
    page_bytes: int,
    total: int,
    repeats: int,
    batch_max: int,
    batch_bytes: int,
    with_file: bool,
    drop: bool,
    concurrency: bool,
    with_aiofiles: bool = True,
) -> dict[str, Any]:
    from hicache_mooncake.tools.bench._ssd_concurrency import PREFETCH_THREADS, concurrency_case

    w = page_workload(
        page_bytes, total, batch_max, batch_bytes, extra_regions=PREFETCH_THREADS if concurrency else 0
    )
    host, src, dst, batch, pages = w.host, w.src, w.dst, w.batch, w.pages
    rounds = [
        _bench_round(fio, base, page_bytes, pages, batch, host, src, dst, r, with_file, drop, with_aiofiles)
        for r in range(repeats)
    ]
    ptrs, sizes = host.get_page_buffer_meta(src[:64])
    row: dict[str, Any] = {
        "page_bytes": page_bytes,
        "page_size": format_size(page_bytes),
        "pages": pages,
        "bytes_per_round": pages * page_bytes,
        "batch_pages": batch,
        "host_pool_ptr_mod_4096": int(host.kv_buffer.data_ptr() % 4096),
        "host_parts_per_page": len(ptrs),
        "host_part_bytes": sorted({int(s) for s in sizes}),
        "host_parts_4096_aligned": all(
            int(p) % 4096 == 0 and int(s) % 4096 == 0 for p, s in zip(ptrs, sizes, strict=True)
        ),
        "fio_engine": rounds[0]["fio_write"]["engine"],
        "fio_iomem": rounds[0]["fio_write"]["iomem"],
        "io_mode": rounds[0].get("io_mode"),
        "cache_drop_ok": all(r["cache_dropped"] for r in rounds),
    }

    def med(leg: str, field: str) -> float:
        return statistics.median(float(r[leg][field]) for r in rounds)

    legs = [
        ("fio_write", "fio", "set"),
        ("fio_read", "fio", "get"),
        ("ours_set", "ours", "set"),
        ("ours_get", "ours", "get"),
        ("fio_overwrite", "fio", "overwrite"),
        ("ours_steady_set", "ours", "steady_set"),
        ("ours_busy_get", "ours", "busy_get"),
        ("ours_busy_steady_set", "ours", "busy_steady_set"),
    ]
    if with_file:
        legs += [("file_set", "file", "set"), ("file_get", "file", "get")]
    if with_aiofiles:
        legs += [("aiofiles_set", "aiofiles", "set"), ("aiofiles_get", "aiofiles", "get")]
    for leg, who, op in legs:
        row[f"{who}_{op}_gbps"] = med(leg, "gbps")
        row[f"{who}_{op}_cpu_s_per_gb"] = med(leg, "cpu_s_per_gb")
    for leg, op in (("fio_write", "set"), ("fio_read", "get"), ("fio_overwrite", "overwrite")):
        # the configuration that won the median round, and every configuration's median
        legs_of_rounds = sorted((r[leg] for r in rounds), key=lambda x: float(x["gbps"]))
        row[f"fio_{op}_config"] = legs_of_rounds[len(legs_of_rounds) // 2]["config"]
        labels = list(rounds[0][leg]["all"])
        row[f"fio_{op}_gbps_by_config"] = {
            k: statistics.median(float(r[leg]["all"][k]) for r in rounds) for k in labels
        }
    row["fio_config"] = {
        "set": row["fio_set_config"],
        "get": row["fio_get_config"],
        "overwrite": row["fio_overwrite_config"],
        "iomem": row["fio_iomem"],
    }

    def ratio(a: str, b: str) -> float:
        return statistics.median(float(r[a]["gbps"]) / float(r[b]["gbps"]) for r in rounds)

    row["set_ratio_vs_fio"] = ratio("ours_set", "fio_write")
    row["get_ratio_vs_fio"] = ratio("ours_get", "fio_read")
    # a tier in use (every region written once) against fio writing over its laid-out file
    row["steady_set_ratio_vs_fio"] = ratio("ours_steady_set", "fio_overwrite")
    # next to a busy Python thread vs alone, both sides in one round (about 0.5: a fair share)
    row["busy_get_ratio_vs_alone"] = ratio("ours_busy_get", "ours_get")
    row["busy_set_ratio_vs_alone"] = ratio("ours_busy_steady_set", "ours_steady_set")
    if with_file:
        row["get_ratio_vs_sglang_file"] = ratio("ours_get", "file_get")
        row["set_ratio_vs_sglang_file"] = ratio("ours_set", "file_set")
        row["file_bad_pages"] = max(int(r["file_get"]["bad_pages"]) for r in rounds)
    if with_aiofiles:  # the asyncio idiom's figure beside fio's and ours
        row["aiofiles_set_ratio_vs_fio"] = ratio("aiofiles_set", "fio_write")
        row["aiofiles_get_ratio_vs_fio"] = ratio("aiofiles_get", "fio_read")
        row["get_ratio_vs_aiofiles"] = ratio("ours_get", "aiofiles_get")
        row["set_ratio_vs_aiofiles"] = ratio("ours_set", "aiofiles_set")
        row["aiofiles_bad_pages"] = max(int(r["aiofiles_get"]["bad_pages"]) for r in rounds)
        row["aiofiles_missed_pages"] = max(pages - int(r["aiofiles_get"]["ok_pages"]) for r in rounds)
    for label in ("reopen_verify", "reopen_headers_only"):
        row[f"{label}_s"] = statistics.median(float(r[label]["seconds"]) for r in rounds)
        row[f"{label}_all_recovered"] = all(
            r[label]["entries_recovered"] == r[label]["entries_before"] for r in rounds
        )
    row["ours_set_failed_pages"] = max(pages - int(r["ours_set"]["ok_pages"]) for r in rounds)
    row["steady_into_reused_regions"] = all(r["steady_into_reused_regions"] for r in rounds)
    row["ours_steady_set_failed_pages"] = max(
        pages - int(r["ours_steady_set"]["ok_pages"]) + int(r["steady_fill_failed_pages"]) for r in rounds
    )
    row["ours_get_missed_pages"] = max(
        pages - int(r[leg]["ok_pages"]) for r in rounds for leg in ("ours_get", "ours_busy_get")
    )
    row["ours_bad_pages"] = max(
        int(r[leg]["bad_pages"]) for r in rounds for leg in ("ours_get", "ours_busy_get")
    )
    row["ours_busy_steady_set_failed_pages"] = max(
        pages - int(r["ours_busy_steady_set"]["ok_pages"]) for r in rounds
    )
    row["ours_bytes_ok"] = row["ours_bad_pages"] == 0 and row["ours_get_missed_pages"] == 0
    row["pages_verified"] = sum(int(r["ours_get"]["ok_pages"]) for r in rounds)  # busy gets: checked alike
    if concurrency:
        row["concurrency"] = concurrency_case(fio, base, w, drop, repeats)
    row["rounds"] = rounds
    del host
    return row


# ---------------------------------------------------------------------------------------- entry


def run(args: argparse.Namespace) -> int:
    if shutil.which("fio") is None:
        raise UsageError("bench ssd needs fio (apt-get install fio)")
    total = parse_size(args.total)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    for size in sizes:
        if size not in PAGE_SHAPES:
            raise UsageError(
                f"unsupported page size {format_size(size)}; choose from "
                f"{', '.join(map(format_size, PAGE_SHAPES))}"
            )
    if not args.no_aiofiles:
        require("aiofiles", needed_for="bench ssd's aiofiles leg (--no-aiofiles skips it)")
    if args.disk_quiet_s < 0:
        raise UsageError(f"--disk-quiet-s must be >= 0, got {args.disk_quiet_s}")
    _disk.QUIET_S = args.disk_quiet_s
    huge = HugePages(max(max_buffer_bytes(s) for s in sizes), setup=args.hugepages and not args.row_json)
    try:
        return _run(args, total, sizes, huge)
    finally:
        huge.restore()


def _run(args: argparse.Namespace, total: int, sizes: list[int], huge: HugePages) -> int:
    fio = Fio("shmhuge" if huge.ok else "malloc", huge.reason)
    if args.row_json:  # child of the per-size isolation below: measure in the parent's directory
        row = _bench_size(
            fio, args.dir, sizes[0], total, args.repeats, args.batch, parse_size(args.batch_bytes),
            not args.no_file, args.drop_caches, args.concurrency, not args.no_aiofiles,
        )  # fmt: skip
        row["fio_iomem_reason"] = fio.iomem_reason
        Path(args.row_json).write_text(json.dumps(row))
        return 0
    if not args.drop_caches:
        print(NOT_DROPPED, flush=True)
    if not huge.ok:
        print(f"fio on ordinary 4 KiB pages (a lower ceiling than the disk's): {huge.reason}", flush=True)
    base_parent = args.dir or default_work_dir()
    os.makedirs(base_parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="hicache-bench-ssd-", dir=base_parent)
    rows = []
    try:
        for size in sizes:
            if args.in_process:
                row = _bench_size(
                    fio, base, size, total, args.repeats, args.batch, parse_size(args.batch_bytes),
                    not args.no_file, args.drop_caches, args.concurrency, not args.no_aiofiles,
                )  # fmt: skip
                row["fio_iomem_reason"] = fio.iomem_reason
            else:
                row = _bench_size_in_child(args, base, size)
            rows.append(row)
            _print_row(row, args.no_file)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    per_size = {r["page_size"]: r for r in rows}
    result: dict[str, Any] = {
        "benchmark": "ssd",
        "dir": base_parent,
        "fs_type": fs_type(base_parent),
        "total_bytes_per_round": total,
        "repeats": args.repeats,
        "disk_quiet_s": args.disk_quiet_s,
        "fio_engine": rows[0]["fio_engine"] if rows else fio.engine,
        "fio_engines_failed": fio.tried,
        "fio_iomem": rows[0]["fio_iomem"] if rows else fio.iomem,
        "fio_iomem_reason": next((r["fio_iomem_reason"] for r in rows if r.get("fio_iomem_reason")), ""),
        "fio_configs_tried": [c.label for c in _fio_configs()],
        "cache_drop_ok": all(r["cache_drop_ok"] for r in rows),
        "cache_drop_requested": bool(args.drop_caches),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "targets": {
            "vs_fio": TARGET_VS_FIO,
            "get_vs_sglang_file": TARGET_VS_FILE,
            "cpu_s_per_gb": TARGET_CPU_S_PER_GB,
        },
        "recover_bound_s": args.recover_bound_s,
        "recover_within_bound": all(r["reopen_verify_s"] <= args.recover_bound_s for r in rows),
        "note": "ratios are medians of per-round ratios (fio at its best configuration, ours and file "
        "measured side by side in each round); GB/s and CPU s/GB are medians; every page stamped "
        "uniquely and every page read back compared, outside the timed calls; "
        + ("page cache dropped before every read" if args.drop_caches else NOT_DROPPED),
    }
    for r in rows:
        key = r["page_size"]
        result[key] = {k: v for k, v in r.items() if k != "rounds"}
        result[key]["meets_targets"] = (
            r["set_ratio_vs_fio"] >= TARGET_VS_FIO
            and r["get_ratio_vs_fio"] >= TARGET_VS_FIO
            and r["ours_bytes_ok"]
            and (args.no_file or r["get_ratio_vs_sglang_file"] >= TARGET_VS_FILE)
        )
    result["per_page_size"] = list(per_size.values())
    for r in rows:
        print(
            f"{r['page_size']}: set_ratio_vs_fio {r['set_ratio_vs_fio']:.2f}  get_ratio_vs_fio "
            f"{r['get_ratio_vs_fio']:.2f} (fio {r['fio_iomem']}: set {r['fio_set_config']}, get "
            f"{r['fio_get_config']})"
            + ("" if args.no_file else f"  get_ratio_vs_sglang_file {r['get_ratio_vs_sglang_file']:.1f}")
        )
    if args.json_out:
        write_json(args.json_out, result)
    if args.plot_out:
        _plot(rows, args.plot_out, not args.no_file, args.drop_caches)
    return 0


def _fio_configs() -> tuple[Any, ...]:
    from hicache_mooncake.tools.bench._fio import CONFIGS

    return CONFIGS


def _print_row(row: dict[str, Any], no_file: bool) -> None:
    line = (
        f"{row['page_size']:>6}: fio w {row['fio_set_gbps']:.2f} r {row['fio_get_gbps']:.2f} GB/s"
        f" ({row['fio_engine']}, {row['fio_iomem']}) | ours set {row['ours_set_gbps']:.2f} get "
        f"{row['ours_get_gbps']:.2f} ({row['io_mode']}; CPU {row['ours_set_cpu_s_per_gb']:.2f}/"
        f"{row['ours_get_cpu_s_per_gb']:.2f} s/GB; {row['pages_verified']} pages verified, "
        f"{row['ours_bad_pages']} bad)"
    )
    if not no_file:
        line += (
            f" | file set {row['file_set_gbps']:.2f} get {row['file_get_gbps']:.2f}"
            f" (CPU {row['file_set_cpu_s_per_gb']:.2f}/{row['file_get_cpu_s_per_gb']:.2f})"
        )
    line += f" | set/fio {row['set_ratio_vs_fio']:.2f} get/fio {row['get_ratio_vs_fio']:.2f}"
    line += (
        f" | steady set {row['ours_steady_set_gbps']:.2f} vs fio overwrite {row['fio_overwrite_gbps']:.2f}"
        f" ({row['steady_set_ratio_vs_fio']:.2f})"
    )
    if not no_file:
        line += f" get/file x{row['get_ratio_vs_sglang_file']:.1f}"
    if "aiofiles_set_gbps" in row:
        line += (
            f" | aiofiles set {row['aiofiles_set_gbps']:.2f} get {row['aiofiles_get_gbps']:.2f}"
            f" ({row['aiofiles_set_ratio_vs_fio']:.2f}/{row['aiofiles_get_ratio_vs_fio']:.2f} of fio;"
            f" CPU {row['aiofiles_set_cpu_s_per_gb']:.2f}/{row['aiofiles_get_cpu_s_per_gb']:.2f} s/GB)"
        )
    line += f" | reopen {row['reopen_verify_s']:.2f}s (headers {row['reopen_headers_only_s']:.2f}s)"
    line += (
        f" | next to a busy Python thread: get {row['ours_busy_get_gbps']:.2f}, steady set "
        f"{row['ours_busy_steady_set_gbps']:.2f} ({row['busy_get_ratio_vs_alone']:.2f}/"
        f"{row['busy_set_ratio_vs_alone']:.2f} of alone)"
    )
    print(line, flush=True)
    conc = row.get("concurrency")
    if conc:
        print(
            f"{row['page_size']:>6}: threads: backup alone {conc['backup_alone_gbps']:.2f}, prefetch alone "
            f"{conc['prefetch_alone_gbps']:.2f}, together {conc['together_gbps']:.2f} GB/s "
            f"(x{conc['aggregate_ratio_vs_one_thread']:.2f} one thread; backups at "
            f"{conc['backup_share_of_solo']:.0%} of alone) | fio mixed {conc['fio_mixed_gbps']:.2f}"
            f" | {'steady state' if conc['steady_into_reused_regions'] else 'cold fill (tier never full)'}"
            f" | median of {conc['repeats']}",
            flush=True,
        )


def _bench_size_in_child(args: argparse.Namespace, base: str, size: int) -> dict[str, Any]:
    """One page size in a fresh interpreter (same options), so sizes do not disturb each other."""
    out = os.path.join(base, f"row-{size}.json")
    cmd = [
        sys.executable, "-m", "hicache_mooncake", "bench", "ssd", "--sizes", str(size), "--total", args.total,
        "--repeats", str(args.repeats), "--batch", str(args.batch), "--batch-bytes", args.batch_bytes,
        "--dir", base, "--row-json", out, "--disk-quiet-s", str(args.disk_quiet_s),
    ]  # fmt: skip
    if args.no_file:
        cmd.append("--no-file")
    if args.no_aiofiles:
        cmd.append("--no-aiofiles")
    if args.drop_caches:
        cmd.append("--drop-caches")
    if not args.concurrency:
        cmd.append("--no-concurrency")
    subprocess.run(cmd, check=True)
    row: dict[str, Any] = json.loads(Path(out).read_text())
    os.unlink(out)
    return row


def replot(result: dict[str, Any], out: str) -> None:
    """The figure from a JSON this target wrote (``bench ssd --replot JSON --plot OUT``)."""
    rows = result["per_page_size"]
    with_file = any("get_ratio_vs_sglang_file" in r for r in rows)
    _plot(rows, out, with_file, bool(result["cache_drop_requested"]))


def _plot(rows: list[dict[str, Any]], out: str, with_file: bool, dropped: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from hicache_mooncake.tools.bench._plotting import legend_below

    iomem = rows[0]["fio_iomem"] if rows else "?"
    fio_label = "huge-page buffers" if iomem == "shmhuge" else "4 KiB-page buffers"
    series = [(f"fio O_DIRECT (best config, {fio_label})", "fio"), ("hicache-mooncake SSD tier", "ours")]
    if with_file:
        series.append(("SGLang file", "file"))
    if rows and all("aiofiles_set_gbps" in r for r in rows):
        series.append(("aiofiles (thread pool, buffered + fsync)", "aiofiles"))
    labels = [r["page_size"] for r in rows]
    x = np.arange(len(rows))
    width = 0.8 / len(series)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, op in zip(axes, ("set", "get"), strict=True):
        for k, (name, who) in enumerate(series):
            vals = [r[f"{who}_{op}_gbps"] for r in rows]
            bars = ax.bar(x + (k - (len(series) - 1) / 2) * width, vals, width, label=name)
            for b, r in zip(bars, rows, strict=True):
                ax.annotate(
                    f"{r[f'{who}_{op}_cpu_s_per_gb']:.2f}",
                    (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(x, labels)
        read = "read, page cache dropped" if dropped else "read, page cache not dropped"
        ax.set_title(f"{op} ({'write' if op == 'set' else read})")
        ax.set_xlabel("page size (labels: CPU s/GB)")
    axes[0].set_ylabel("GB/s (median)")
    fig.suptitle("SSD tier through SGLang's interface vs fio, SGLang's file backend and aiofiles")
    legend_below(fig, axes[0])
    fig.savefig(out, dpi=120)
    plt.close(fig)
