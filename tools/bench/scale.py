"""Costs at scale: RAM per stored entry, batch_exists latency, reopen times (clean and after kill -9).

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench scale`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hicache_mooncake.sizes import format_size, parse_size
from hicache_mooncake.tools.bench._disk import (
    NOT_DROPPED,
    add_drop_caches_argument,
    default_work_dir,
    drop_caches,
    fs_type,
)
from hicache_mooncake.tools.results_json import write_json

REQUIRES = ("torch", "sglang")  # optional modules, checked by ``bench`` before any work

EXISTS_KEYS = 128
TARGET_BYTES_PER_ENTRY = 150  # issue 49's targets (default policy; 1M and 10M entries)
TARGET_EXISTS_P99_US = 50.0
TARGET_REOPEN_CLEAN_S = 2.0
TARGET_REOPEN_KILLED_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entries", default="100000,1000000", help="entry counts (comma list)")
    parser.add_argument("--page-bytes", default="4KiB", help="bytes per page (4KiB, 8KiB, 16KiB, 32KiB)")
    parser.add_argument("--dir", default=None, help="directory for the SSD tier (default: the temp dir)")
    parser.add_argument("--dram", default="256MiB", help="DRAM tier capacity")
    parser.add_argument("--batch", type=int, default=128, help="pages per batch_set_v1")
    parser.add_argument("--samples", type=int, default=2000, help="batch_exists calls timed")
    parser.add_argument(
        "--index-only",
        action="store_true",
        help="no payload, no backend: fill the SSD index and the default placement + policy with "
        "each count's keys in one process (RAM per entry, index exists p99; for 10M entries)",
    )
    add_drop_caches_argument(parser)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # fill | reopen | policy | index
    parser.add_argument("--child-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-n", type=int, default=0, help=argparse.SUPPRESS)


# ------------------------------------------------------------------------------------------ shared


def _shape(page_bytes: int) -> Any:
    """A host pool shape whose page (K and V of one layer, one head) is ``page_bytes``."""
    from hicache_mooncake.tools.sglang_harness import PoolShape

    tokens = page_bytes // (2 * 64 * 2)  # 2 (K,V) x head_dim 64 x 2 bytes (bf16)
    if tokens < 1 or tokens * 2 * 64 * 2 != page_bytes:
        raise ValueError(f"--page-bytes {page_bytes}: must be a multiple of 256 bytes")
    return PoolShape(page_size=tokens, layers=1, heads=1, head_dim=64, device_tokens=tokens * 256)


def _config(directory: str, n: int, page_bytes: int, dram: int) -> dict[str, Any]:
    from hicache_mooncake.presets import load_preset

    region = 64 << 20
    per_region = (region - 4096) // (4096 + -(-page_bytes // 4096) * 4096)
    # room for every entry below the placement's fill limit, plus a few regions of headroom
    regions = -(-n * 100 // 80 // per_region) + 4
    cfg = load_preset("default")
    cfg["tiers"]["dram"] = {**cfg["tiers"]["dram"], "capacity": dram}
    cfg["tiers"]["ssd"] = {
        **cfg["tiers"]["ssd"],
        "path": directory,
        "capacity": regions * region,
        "region_size": region,
        "min_free": "256MiB",
        "mode": "write_through",
    }
    return cfg


def _keys(n: int, first: int = 0) -> list[str]:
    """The keys of pages ``first`` .. ``n - 1``."""
    return [f"{i:064x}" for i in range(first, n)]


def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _full_collection() -> tuple[float, int]:
    """Milliseconds of one full garbage collection (``gc.collect()``: every thread stops, the GIL
    held, for as long as it visits the tracked objects) and how many objects it tracks."""
    import gc

    t0 = time.perf_counter()
    gc.collect()
    ms = (time.perf_counter() - t0) * 1e3
    return ms, len(gc.get_objects())


def _exists_latency(be: Any, n: int, samples: int, seed: int) -> dict[str, Any]:
    keys = _keys(n)
    rng = random.Random(seed)
    times: list[float] = []
    found = 0
    for _ in range(samples):
        start = rng.randrange(0, max(1, n - EXISTS_KEYS))
        batch = keys[start : start + EXISTS_KEYS]
        t0 = time.perf_counter()
        found += be.batch_exists(batch)
        times.append(time.perf_counter() - t0)
    return {
        **_percentiles_us(times),
        "mean_us": statistics.fmean(times) * 1e6,
        "samples": samples,
        "keys_per_call": EXISTS_KEYS,
        "found_fraction": found / (samples * EXISTS_KEYS),
    }


def _exists_while_scanning(be: Any, engine: Any, n: int, seed: int) -> dict[str, Any]:
    """batch_exists timed back to back while the background scan of the regions open at the
    kill runs (it indexes in slices; a serving call waits for one slice at most), up to 60 s.
    No samples when the scan was over before the backend was built (it runs during attach)."""
    rng = random.Random(seed)
    times: list[float] = []
    end = time.monotonic() + 60
    while not engine.wait_recovered(0) and time.monotonic() < end:
        start = rng.randrange(0, max(1, n - EXISTS_KEYS))
        batch = _keys(min(n, start + EXISTS_KEYS), start)
        t0 = time.perf_counter()
        be.batch_exists(batch)
        times.append(time.perf_counter() - t0)
    if not times:
        return {"samples": 0}
    return {"samples": len(times), **_percentiles_us(times), "max_us": max(times) * 1e6}


def _percentiles_us(times: list[float]) -> dict[str, float]:
    """p50 and p99 of non-empty ``times`` (seconds), in microseconds."""
    ordered = sorted(times)
    return {
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
    }


def _backend(directory: str, n: int, page_bytes: int, dram: int) -> tuple[Any, Any]:
    from hicache_mooncake.tools.bench._sglang_io import create_backend
    from hicache_mooncake.tools.sglang_harness import make_host_pool

    host = make_host_pool("page_first", False, _shape(page_bytes))
    return create_backend("dynamic", _config(directory, n, page_bytes, dram), host), host


def _ssd(be: Any) -> dict[str, Any]:
    return dict(be.tier_stats()["tiers"].get("ssd", {}))


# ------------------------------------------------------------------------------------------ children


def _child_fill(args: argparse.Namespace) -> int:
    """Fill ``n`` pages, measure RAM and exists, write the JSON, say READY, wait for SIGKILL."""
    import gc

    n, page_bytes, dram = args.child_n, parse_size(args.page_bytes), parse_size(args.dram)
    be, host = _backend(args.child_dir, n, page_bytes, dram)
    ps = host.page_size
    region = host.alloc(args.batch * ps)
    keys = _keys(n)
    be.batch_set_v1(["warm"], region[:ps])
    gc.collect()
    gc0 = _full_collection()
    rss0 = _rss()
    t0 = time.perf_counter()
    c0 = time.process_time()
    failed = 0
    for i in range(0, n, args.batch):
        batch = keys[i : i + args.batch]
        failed += len(batch) - sum(bool(r) for r in be.batch_set_v1(batch, region[: len(batch) * ps]))
    set_s = time.perf_counter() - t0
    flushed = be.store.flush(600)  # every page has its SSD copy
    fill_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    gc.collect()
    rss1 = _rss()
    gc1 = _full_collection()
    ssd = _ssd(be)
    out = {
        "entries": n,
        "set_failed": failed,
        "set_seconds": set_s,
        "fill_seconds_with_ssd_copies": fill_s,
        "fill_cpu_seconds": cpu_s,
        "ssd_copies_done": flushed,
        "ssd_entries": ssd.get("entries", 0),
        "rss_before": rss0,
        "rss_after": rss1,
        "bytes_per_entry": (rss1 - rss0) / n,
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "gc": {
            "tracked_objects_before": gc0[1],
            "tracked_objects_after": gc1[1],
            "tracked_objects_per_entry": (gc1[1] - gc0[1]) / n,
            "full_collection_ms_before": gc0[0],
            "full_collection_ms_after": gc1[0],
        },
        "exists": _exists_latency(be, n, args.samples, seed=n),
        "placement": {
            k: v for k, v in be.tier_stats()["tiers"].get("placement", {}).items() if isinstance(v, int | str)
        },
    }
    Path(args.child_out).write_text(json.dumps(out))
    print("READY", flush=True)
    while True:  # the parent kills this process (SIGKILL) now
        time.sleep(60)


def _child_reopen(args: argparse.Namespace) -> int:
    """Reopen after the kill, wait for the background scan, exists again; close; reopen clean."""
    n, page_bytes, dram = args.child_n, parse_size(args.page_bytes), parse_size(args.dram)
    from hicache_mooncake.tools.bench._sglang_io import create_backend
    from hicache_mooncake.tools.sglang_harness import make_host_pool

    host = make_host_pool("page_first", False, _shape(page_bytes))
    cfg = _config(args.child_dir, n, page_bytes, dram)
    out: dict[str, Any] = {}
    for label in ("after_kill", "clean"):
        drop_caches(args.drop_caches)
        c0, t0 = time.process_time(), time.perf_counter()
        be = create_backend("dynamic", cfg, host, settle=False)  # attach as SGLang waits for it
        attach_s = time.perf_counter() - t0
        engine = be.store.ssd.engine
        during = _exists_while_scanning(be, engine, n, seed=n + 2)
        engine.wait_recovered(600)
        indexed_s = time.perf_counter() - t0
        cpu_s = time.process_time() - c0
        ssd = _ssd(be)
        out[label] = {
            "attach_seconds": attach_s,
            "all_indexed_seconds": indexed_s,
            "cpu_seconds": cpu_s,
            "entries_found": ssd.get("entries", 0),
            "regions_from_summaries": ssd.get("recover_from_summaries", 0),
            "exists": _exists_latency(be, n, max(200, args.samples // 4), seed=n + 1),
            "exists_while_scanning": during,
        }
        be.close()
    Path(args.child_out).write_text(json.dumps(out))
    return 0


def _child_policy(args: argparse.Namespace) -> int:
    """The configuration's placement policy alone: RSS per resident key after ``n`` sets and at
    its steady state (module docstring, 3)."""
    import gc

    from hicache_mooncake.config.loader import validate_config
    from hicache_mooncake.tiers.policy import policy_factory
    from hicache_mooncake.tiers.policy.contexts import get_contexts, set_contexts

    n, batch = args.child_n, args.batch
    cfg = validate_config(_config(args.child_dir, n, parse_size(args.page_bytes), parse_size(args.dram)))
    policy = policy_factory(cfg.tiers.policy, **dict(cfg.tiers.policy_options))()
    horizon = float(getattr(policy, "horizon", 0.0))
    turns = math.ceil(max(horizon, 1.0)) + 1
    # the store's key: model slug / digest / page hash / rank suffix (103 characters here)
    prefix, suffix = f"org-demo-model/{0:016x}/", "@tp0of1"
    gc.collect()
    rss0 = _rss()
    t0 = time.perf_counter()
    rss_filled = rss0
    calls: list[float] = []  # seconds per batch: what one store call waits for the policy
    for first in range(0, (1 + turns) * n, batch):
        keys = [f"{prefix}{i:064x}{suffix}" for i in range(first, min(first + batch, (1 + turns) * n))]
        contexts = set_contexts(keys, 0, None, 4096)
        start = time.perf_counter()
        for key, ctx in zip(keys, contexts, strict=True):
            policy.on_set(key, ctx)
            if len(policy) > n:  # as the placement makes room: one victim per page over capacity
                policy.pop_victim()
        calls.append(time.perf_counter() - start)
        if first < n <= first + batch:
            gc.collect()
            rss_filled = _rss()
    set_seconds = time.perf_counter() - t0
    gc.collect()
    rss_steady = _rss()
    observations = getattr(policy, "observations", None)
    observed = observations() if callable(observations) else None
    # re-reads: runs of the newest capacity's pages (mostly resident) read again as hot prefixes
    # are, turns x n page reads: stale entries pile up, so the policy's compactions run
    rng = random.Random(n)
    newest = turns * n
    reads: list[float] = []
    t1 = time.perf_counter()
    for _ in range(turns * n // batch):
        first = newest + rng.randrange(max(1, (n - batch) // batch + 1)) * batch  # a run set
        keys = [f"{prefix}{i:064x}{suffix}" for i in range(first, first + batch)]
        contexts = get_contexts(keys, 4096, batch)
        start = time.perf_counter()
        for key, ctx in zip(keys, contexts, strict=True):
            policy.on_hit(key, ctx)
        reads.append(time.perf_counter() - start)
    out = {
        "policy": type(policy).__name__,
        "horizon": horizon,
        "keys_set": (1 + turns) * n,
        "residents": len(policy),
        "observations": observed,
        "bytes_per_resident_filled": (rss_filled - rss0) / n,
        "bytes_per_resident_steady": (rss_steady - rss0) / n,
        "seconds": set_seconds,  # the sets (the re-reads: reread_seconds)
        "reread_seconds": time.perf_counter() - t1,
        "batch": batch,
        "call_p50_ms": statistics.median(calls) * 1e3,
        "call_p99_ms": sorted(calls)[int(0.99 * (len(calls) - 1))] * 1e3,
        "longest_call_ms": max(calls) * 1e3,
        "reread_calls": len(reads),
        "reread_call_p50_ms": statistics.median(reads) * 1e3,
        "reread_call_p99_ms": sorted(reads)[int(0.99 * (len(reads) - 1))] * 1e3,
        "reread_longest_call_ms": max(reads) * 1e3,
    }
    Path(args.child_out).write_text(json.dumps(out))
    return 0


def _child_index(args: argparse.Namespace) -> int:
    """``--index-only``: what the in-memory indexes keep per entry, without payload or backend.
    ``n`` keys of the store's shape (103 characters) are set into the default configuration's
    placement and policy (sizes of one page; DRAM watermarks of ``--dram``, settled after each
    batch as the store does) and into an SSD index (fingerprints and locations, one region's
    worth per load), batch by batch; the caller's key strings are dropped after each batch, so
    RSS growth / n is what the indexes keep. Then 128-key runs of stored keys are looked up as
    ``batch_exists`` does on the SSD index: one native fingerprinting pass, one table probe."""
    import gc

    import numpy as np

    from hicache_mooncake.config.loader import validate_config
    from hicache_mooncake.native import fingerprints
    from hicache_mooncake.ssd.index import Index
    from hicache_mooncake.tiers.policy import policy_factory
    from hicache_mooncake.tiers.policy.contexts import set_contexts
    from hicache_mooncake.tiers.policy.placement import TierPlacement

    n, batch, page = args.child_n, args.batch, parse_size(args.page_bytes)
    cfg = validate_config(_config(args.child_dir, n, page, parse_size(args.dram)))
    policy = policy_factory(cfg.tiers.policy, **dict(cfg.tiers.policy_options))()
    dram = parse_size(args.dram) // page * page
    placement = TierPlacement(policy, (n + batch) * page, int(dram * 0.95), int(dram * 0.9))
    index = Index()
    prefix, suffix = f"org-demo-model/{0:016x}/", "@tp0of1"
    gc.collect()
    rss0 = _rss()
    t0 = time.perf_counter()
    per_region = 16384
    for first in range(0, n, batch):
        keys = [f"{prefix}{i:064x}{suffix}" for i in range(first, min(n, first + batch))]
        placement.set_batch(keys, set_contexts(keys, 0, None, page))
        placement.settle()
        m = len(keys)
        slot = np.arange(first, first + m, dtype=np.uint64) % np.uint64(per_region)
        index.load_region_fps(
            fingerprints(keys),
            first // per_region,
            1,
            slot * np.uint64(page + 4096),
            np.full(m, page, np.uint64),
            np.arange(first, first + m, dtype=np.uint64),
        )
        del keys
    fill_s = time.perf_counter() - t0
    gc.collect()
    rss1 = _rss()
    rng = random.Random(n)
    times: list[float] = []
    found = 0
    for _ in range(args.samples):
        start = rng.randrange(0, max(1, n - EXISTS_KEYS))
        keys = [f"{prefix}{i:064x}{suffix}" for i in range(start, min(n, start + EXISTS_KEYS))]
        t1 = time.perf_counter()
        found += sum(index.contains_fps(fingerprints(keys)))
        times.append(time.perf_counter() - t1)
    out = {
        "entries": n,
        "policy": type(policy).__name__,
        "fill_seconds": fill_s,
        "residents": len(placement),
        "dram_residents": placement.dram_len,
        "ssd_index_nbytes": index.nbytes,
        "bytes_per_entry": (rss1 - rss0) / n,
        "exists": {**_percentiles_us(times), "samples": len(times), "found": found},
    }
    Path(args.child_out).write_text(json.dumps(out))
    return 0


# ------------------------------------------------------------------------------------------ driver


def _child(args: argparse.Namespace, kind: str, directory: str, n: int, out: str) -> list[str]:
    cmd = [
        sys.executable, "-m", "hicache_mooncake", "bench", "scale", "--child", kind, "--child-dir", directory,
        "--child-out", out, "--child-n", str(n), "--page-bytes", args.page_bytes, "--dram", args.dram,
        "--batch", str(args.batch), "--samples", str(args.samples),
    ]  # fmt: skip
    return cmd + (["--drop-caches"] if args.drop_caches else [])


def _measure(args: argparse.Namespace, base: str, n: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix=f"scale-{n}-", dir=base)
    try:
        fill_out, reopen_out = os.path.join(base, f"fill-{n}.json"), os.path.join(base, f"reopen-{n}.json")
        proc = subprocess.Popen(_child(args, "fill", work, n, fill_out), stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "READY":
                proc.wait(60)
                raise RuntimeError(f"bench scale: the writer of {n} entries failed (exit {proc.returncode})")
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(60)
        row: dict[str, Any] = {"entries": n, "writer": json.loads(Path(fill_out).read_text())}
        subprocess.run(_child(args, "reopen", work, n, reopen_out), check=True)
        row["reopen"] = json.loads(Path(reopen_out).read_text())
        policy_out = os.path.join(base, f"policy-{n}.json")
        subprocess.run(_child(args, "policy", work, n, policy_out), check=True)
        row["policy"] = json.loads(Path(policy_out).read_text())
        for f in (fill_out, reopen_out, policy_out):
            os.unlink(f)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    w, r = row["writer"], row["reopen"]
    row.update(
        {
            "bytes_per_entry": w["bytes_per_entry"],
            "bytes_per_entry_steady_estimate": w["bytes_per_entry"]
            + row["policy"]["bytes_per_resident_steady"]
            - row["policy"]["bytes_per_resident_filled"],
            "policy_bytes_per_resident_steady": row["policy"]["bytes_per_resident_steady"],
            "policy_longest_call_ms": row["policy"]["longest_call_ms"],
            "policy_reread_longest_call_ms": row["policy"]["reread_longest_call_ms"],
            "gc_tracked_objects_per_entry": w["gc"]["tracked_objects_per_entry"],
            "gc_full_collection_ms": w["gc"]["full_collection_ms_after"],
            "gc_full_collection_ms_before_fill": w["gc"]["full_collection_ms_before"],
            "exists_p50_us": w["exists"]["p50_us"],
            "exists_p99_us": w["exists"]["p99_us"],
            "reopen_after_kill_s": r["after_kill"]["attach_seconds"],
            "reopen_after_kill_all_indexed_s": r["after_kill"]["all_indexed_seconds"],
            "reopen_clean_s": r["clean"]["attach_seconds"],
            "entries_found_after_kill": r["after_kill"]["entries_found"],
            "exists_p99_us_while_scanning": r["after_kill"]["exists_while_scanning"].get("p99_us"),
            "exists_max_us_while_scanning": r["after_kill"]["exists_while_scanning"].get("max_us"),
            "entries_found_clean": r["clean"]["entries_found"],
        }
    )
    return row


def run(args: argparse.Namespace) -> int:
    if args.child == "fill":
        return _child_fill(args)
    if args.child == "reopen":
        return _child_reopen(args)
    if args.child == "policy":
        return _child_policy(args)
    if args.child == "index":
        return _child_index(args)
    counts = [int(x) for x in args.entries.split(",") if x.strip()]
    page_bytes = parse_size(args.page_bytes)
    _shape(page_bytes)  # a bad size is refused before any work
    base_parent = args.dir or default_work_dir()
    from hicache_mooncake.config.loader import validate_config

    for n in counts:  # and a configuration the children would refuse (a DRAM tier below one slab)
        validate_config(_config(base_parent, n, page_bytes, parse_size(args.dram)), "bench scale")
    if args.index_only:
        return _run_index_only(args, counts, page_bytes, base_parent)
    if not args.drop_caches:
        print(NOT_DROPPED, flush=True)
    os.makedirs(base_parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="hicache-bench-scale-", dir=base_parent)
    rows = []
    try:
        for n in counts:
            row = _measure(args, base, n)
            rows.append(row)
            print(
                f"{n:>9,} entries of {format_size(page_bytes)}: {row['bytes_per_entry']:.0f} B of RAM per entry "
                f"(~{row['bytes_per_entry_steady_estimate']:.0f} at the policy's steady state) "
                f"({row['gc_tracked_objects_per_entry']:.2f} objects tracked by the collector; a full collection "
                f"{row['gc_full_collection_ms']:.0f} ms, {row['gc_full_collection_ms_before_fill']:.0f} before) | "
                f"batch_exists({EXISTS_KEYS}) p50 {row['exists_p50_us']:.0f} us p99 {row['exists_p99_us']:.0f} us | "
                f"reopen after kill -9 {row['reopen_after_kill_s']:.2f} s (all indexed "
                f"{row['reopen_after_kill_all_indexed_s']:.2f} s, {row['entries_found_after_kill']:,} found; "
                f"{_while_scanning(row)}), "
                f"clean {row['reopen_clean_s']:.2f} s ({row['entries_found_clean']:,} found) | "
                f"the policy's longest call of {args.batch} sets {row['policy_longest_call_ms']:.0f} ms, "
                f"of {args.batch} re-reads {row['policy_reread_longest_call_ms']:.0f} ms",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "benchmark": "scale",
        "page_bytes": page_bytes,
        "dram_capacity": parse_size(args.dram),
        "dir": base_parent,
        "fs_type": fs_type(base_parent),
        "cache_drop_requested": bool(args.drop_caches),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "targets": {
            "bytes_per_entry": TARGET_BYTES_PER_ENTRY,
            "exists_p99_us": TARGET_EXISTS_P99_US,
            "reopen_clean_s": TARGET_REOPEN_CLEAN_S,
            "reopen_after_kill_s": TARGET_REOPEN_KILLED_S,
        },
        "note": "default config (reuse policy, DRAM + SSD) with write_through: every page on SSD; RAM per "
        "entry = VmRSS growth over the fill / entries; exists on runs of 128 stored keys at random "
        "places; reopen = backend construction (after SIGKILL of the writer, then after a clean close); "
        "steady-state estimate = RAM per entry + the policy's own growth per resident key from a fill to its "
        "steady state (the policy alone, (horizon + 2) capacities of keys set, its victims evicted)",
        "per_entries": rows,
    }
    if rows:  # the figures of issue 49's table, at the largest count
        result["bytes_per_entry"] = rows[-1]["bytes_per_entry"]
        result["exists_p99_us"] = rows[-1]["exists_p99_us"]
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        per = (b["entries"] - a["entries"]) / 1e6
        result["exists_p99_us_per_million_entries"] = (b["exists_p99_us"] - a["exists_p99_us"]) / per
        result["exists_p50_us_per_million_entries"] = (b["exists_p50_us"] - a["exists_p50_us"]) / per
        # per entry beyond the first count's (a process tracks a few thousand objects of its own)
        grown = [
            r["writer"]["gc"]["tracked_objects_after"] - r["writer"]["gc"]["tracked_objects_before"]
            for r in (a, b)
        ]
        result["gc_tracked_objects_per_added_entry"] = (grown[1] - grown[0]) / (b["entries"] - a["entries"])
    if args.json_out:
        write_json(args.json_out, result)
    if args.plot_out:
        _plot(rows, args.plot_out)
    return 0


def _run_index_only(args: argparse.Namespace, counts: list[int], page_bytes: int, base_parent: str) -> int:
    """``--index-only``: one child per count (``_child_index``), a row each."""
    os.makedirs(base_parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="hicache-bench-scale-", dir=base_parent)
    rows = []
    try:
        for n in counts:
            out = os.path.join(base, f"index-{n}.json")
            subprocess.run(_child(args, "index", base, n, out), check=True)
            w = json.loads(Path(out).read_text())
            row = {
                "entries": n,
                "index_only": w,
                "bytes_per_entry": w["bytes_per_entry"],
                "exists_p50_us": w["exists"]["p50_us"],
                "exists_p99_us": w["exists"]["p99_us"],
            }
            rows.append(row)
            print(
                f"{n:>11,} entries, index only ({w['policy']}): {row['bytes_per_entry']:.0f} B of RAM per entry "
                f"(SSD index {w['ssd_index_nbytes'] / n:.0f}; fill {w['fill_seconds']:.1f} s) | "
                f"SSD index exists of {EXISTS_KEYS} keys p50 {row['exists_p50_us']:.1f} us "
                f"p99 {row['exists_p99_us']:.1f} us",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "scale",
        "mode": "index_only",
        "page_bytes": page_bytes,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "targets": {"bytes_per_entry": TARGET_BYTES_PER_ENTRY, "exists_p99_us": TARGET_EXISTS_P99_US},
        "note": "no payload, no backend: the default placement + policy and an SSD index filled with "
        "each count's keys; RAM per entry = VmRSS growth / entries (the caller's key strings dropped); "
        "exists = fingerprints + one SSD index probe per 128 stored keys",
        "per_entries": rows,
        "bytes_per_entry": rows[-1]["bytes_per_entry"] if rows else None,
        "exists_p99_us": rows[-1]["exists_p99_us"] if rows else None,
    }
    if args.json_out:
        write_json(args.json_out, result)
    return 0


def _while_scanning(row: dict[str, Any]) -> str:
    p99 = row["exists_p99_us_while_scanning"]
    if p99 is None:
        return "the background scan was over when attach returned"
    return f"batch_exists meanwhile p99 {p99:.0f} us"


def replot(result: dict[str, Any], out: str) -> None:
    """The figure from a JSON this target wrote (``bench scale --replot JSON --plot OUT``)."""
    _plot(result["per_entries"], out)


def _plot(rows: list[dict[str, Any]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hicache_mooncake.tools.bench._plotting import legend_under

    labels = [f"{r['entries']:,}" for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.6), layout="constrained")
    x = range(len(rows))
    axes[0].bar([i - 0.2 for i in x], [r["bytes_per_entry"] for r in rows], 0.4, label="after the fill")
    steady = [r["bytes_per_entry_steady_estimate"] for r in rows]
    axes[0].bar([i + 0.2 for i in x], steady, 0.4, label="policy at steady state (estimate)")
    axes[0].axhline(TARGET_BYTES_PER_ENTRY, color="k", ls="--", lw=1, label="target")
    axes[0].set_xticks(list(x), labels)
    axes[0].set_title("RAM per stored entry (bytes)")
    axes[1].bar([i - 0.2 for i in x], [r["exists_p50_us"] for r in rows], 0.4, label="p50")
    axes[1].bar([i + 0.2 for i in x], [r["exists_p99_us"] for r in rows], 0.4, label="p99")
    axes[1].axhline(TARGET_EXISTS_P99_US, color="k", ls="--", lw=1, label="p99 target")
    axes[1].set_xticks(list(x), labels)
    axes[1].set_title(f"batch_exists of {EXISTS_KEYS} keys (us)")
    axes[2].bar([i - 0.2 for i in x], [r["reopen_after_kill_s"] for r in rows], 0.4, label="after kill -9")
    axes[2].bar([i + 0.2 for i in x], [r["reopen_clean_s"] for r in rows], 0.4, label="clean close")
    axes[2].set_xticks(list(x), labels)
    axes[2].set_title("reopen (attach) seconds")
    for ax in axes:
        ax.set_xlabel("entries")
        legend_under(ax)
    fig.savefig(out, dpi=120)
    plt.close(fig)
