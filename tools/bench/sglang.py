"""Through SGLang's interface: our backend vs SGLang's `file` backend, and the DRAM tier vs memcpy.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench sglang`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from hicache_mooncake.commands import UsageError
from hicache_mooncake.sizes import format_size
from hicache_mooncake.tools.bench._busy import busy_python_thread
from hicache_mooncake.tools.bench._sglang_io import (
    PAGE_SHAPES,
    PageStamps,
    create_backend,
    page_workload,
    timed_generic_get,
    timed_generic_set,
    timed_v1_get,
    timed_v1_set,
    v1_batches,
)
from hicache_mooncake.tools.results_json import write_json

REQUIRES = ("torch", "sglang")  # optional modules, checked by ``bench`` before any work


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--total", default="512MiB", help="bytes written per page size and backend")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="64KiB,128KiB,1MiB,4MiB,8MiB", help="page sizes to run")
    parser.add_argument(
        "--dir", default=None, help="directory for SGLang's file backend (default: a temp dir)"
    )
    parser.add_argument(
        "--hybrid",
        choices=("include", "only", "skip"),
        default="include",
        help="the hybrid-model case (1 MiB KV pages + a ~1 MiB Mamba state per 16-page node, v1 + v2)",
    )
    parser.add_argument(
        "--host-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the host-cache row: a second process reads what this one wrote",
    )


def run(args: argparse.Namespace) -> int:
    from hicache_mooncake.sizes import parse_size

    total = parse_size(args.total)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = []
    hybrid = _hybrid_case(total, args.repeats) if args.hybrid != "skip" else None
    if args.hybrid == "only":
        assert hybrid is not None
        if args.json_out:
            write_json(args.json_out, {"benchmark": "sglang", "hybrid": hybrid})
        return 0
    for size in sizes:
        if size not in PAGE_SHAPES:
            raise UsageError(
                f"unsupported page size {format_size(size)}; choose from {', '.join(map(format_size, PAGE_SHAPES))}"
            )
        rows.append(_bench_size(size, total, args.repeats, args.dir))
        r = rows[-1]
        if args.host_cache:
            r.update(_host_cache_row(size, total, args.repeats))
            print(
                f"{format_size(size):>8}: host cache set {r['host_cache_set_gbps']:.2f} GB/s "
                f"({r['host_cache_set_ratio_vs_memcpy']:.2f} of memcpy), second process get "
                f"{r['host_cache_get_gbps']:.2f} GB/s ({r['host_cache_get_ratio_vs_memcpy']:.2f} of memcpy), "
                f"sets into a full host cache {r['host_cache_full_set_gbps']:.2f} GB/s "
                f"({r['host_cache_full_set_ratio_vs_memcpy']:.2f} of memcpy)"
            )
        print(
            f"{format_size(size):>8}: ours set {r['ours_set_gbps']:.2f} get {r['ours_get_gbps']:.2f} GB/s | "
            f"file set {r['file_set_gbps']:.2f} get {r['file_get_gbps']:.2f} | memcpy set {r['memcpy_set_gbps']:.2f} "
            f"get {r['memcpy_get_gbps']:.2f} | vs file x{r['set_ratio_vs_file']:.1f}/x{r['get_ratio_vs_file']:.1f} "
            f"dram tier/memcpy {r['dram_set_ratio_vs_memcpy']:.2f}/{r['dram_get_ratio_vs_memcpy']:.2f} "
            f"(default config {r['default_set_ratio_vs_memcpy']:.2f}/{r['default_get_ratio_vs_memcpy']:.2f}, "
            f"sets into a full cache {r['full_cache_set_ratio_vs_memcpy']:.2f}; "
            f"next to a busy Python thread {r['busy_set_ratio_vs_alone']:.2f}/{r['busy_get_ratio_vs_alone']:.2f} "
            f"of alone)"
        )
    big = [r for r in rows if r["page_bytes"] >= 1 << 20] or rows
    small = [r for r in rows if r["page_bytes"] < 1 << 20]

    def worst(prefix: str, among: list[dict[str, Any]]) -> float | None:
        """The lower of set and get ``{prefix}_*_ratio_vs_memcpy`` over ``among`` (None: no row)."""
        if not among:
            return None
        return min(min(r[f"{prefix}_set_ratio_vs_memcpy"], r[f"{prefix}_get_ratio_vs_memcpy"]) for r in among)

    result = {
        "benchmark": "sglang",
        "set_ratio_vs_file": min(r["set_ratio_vs_file"] for r in rows),
        "get_ratio_vs_file": min(r["get_ratio_vs_file"] for r in rows),
        "dram_ratio_vs_memcpy": worst("dram", big),
        "default_config_ratio_vs_memcpy": worst("default", big),
        "small_page_dram_ratio_vs_memcpy": worst("dram", small),
        "small_page_default_config_ratio_vs_memcpy": worst("default", small),
        "full_cache_set_ratio_vs_memcpy": min(r["full_cache_set_ratio_vs_memcpy"] for r in big),
        "small_page_full_cache_set_ratio_vs_memcpy": (
            min(r["full_cache_set_ratio_vs_memcpy"] for r in small) if small else None
        ),
        "busy_ratio_vs_alone": min(
            min(r["busy_set_ratio_vs_alone"], r["busy_get_ratio_vs_alone"]) for r in rows
        ),
        "host_cache_ratio_vs_memcpy": (
            min(min(r["host_cache_set_ratio_vs_memcpy"], r["host_cache_get_ratio_vs_memcpy"]) for r in big)
            if args.host_cache
            else None
        ),
        "host_cache_get_ratio_vs_memcpy": (
            min(r["host_cache_get_ratio_vs_memcpy"] for r in big) if args.host_cache else None
        ),
        "host_cache_full_set_ratio_vs_memcpy": (
            min(r["host_cache_full_set_ratio_vs_memcpy"] for r in big) if args.host_cache else None
        ),
        "note": (
            "ours = configs/default.yaml with the SSD tier off (the reuse policy); "
            "dram tier = the same with the cheapest policy (lru); "
            "full cache = ours with DRAM a quarter of the pages, filled with other pages first: "
            "every timed set evicts (the steady state of a running cache; sets only; its calls "
            "hold at most a quarter of its DRAM, none evicts its own pages); "
            "memcpy ratios: worst over 1-8 MiB pages and both directions (small_page_*: over the pages "
            "below 1 MiB); vs-file ratios: worst over all "
            "sizes; busy = ours next to a thread running Python throughout (as SGLang's scheduler), "
            "worst over all sizes; SGLang's file backend runs with a warm page cache (its best case); host cache = the "
            "same preset with tiers.host_cache: on: this process sets, a second process gets; "
            "host cache full = its sets of new pages after its DRAM was filled with others (each "
            "makes room at the reservation)"
        ),
        "per_page_size": rows,
    }
    if hybrid is not None:
        result["hybrid"] = hybrid
    below = (
        f"; below 1 MiB {result['small_page_dram_ratio_vs_memcpy']:.0%} and "
        f"{result['small_page_default_config_ratio_vs_memcpy']:.0%}"
        if small
        else ""
    )
    print(
        f"summary: set x{result['set_ratio_vs_file']:.1f} and get x{result['get_ratio_vs_file']:.1f} vs SGLang file; "
        f"DRAM tier at {result['dram_ratio_vs_memcpy']:.0%} of memcpy, default config at "
        f"{result['default_config_ratio_vs_memcpy']:.0%} (worst over 1-8 MiB pages and directions{below}); next to "
        f"a busy Python thread at {result['busy_ratio_vs_alone']:.0%} of alone (worst over all sizes)"
    )
    if args.host_cache:
        print(
            f"host cache: a second process reads at {result['host_cache_get_ratio_vs_memcpy']:.0%} of memcpy "
            f"(worst over 1-8 MiB pages; with the writer's sets {result['host_cache_ratio_vs_memcpy']:.0%})"
        )
    if args.json_out:
        write_json(args.json_out, result)
    if args.plot_out:
        _plot(rows, args.plot_out)
    return 0


def _hybrid_case(total: int, repeats: int) -> dict[str, Any]:
    """KV pages (v1) and a Mamba state per node (v2) through the default config (SSD off), as a
    fraction of memcpy of the same parts."""
    import yaml

    from hicache_mooncake.presets import preset_path
    from hicache_mooncake.tools.bench._hybrid_io import bench_hybrid

    extra = yaml.safe_load(preset_path("default").read_text())
    extra.get("tiers", {}).pop("ssd", None)
    row = bench_hybrid(extra, 1 << 20, total, repeats)
    print(
        f"hybrid (1 MiB KV pages + {format_size(row['state_bytes'])} Mamba state per {row['node_pages']} pages): "
        f"set {row['ours_set_gbps']:.2f} get {row['ours_get_gbps']:.2f} GB/s | memcpy set {row['memcpy_set_gbps']:.2f} "
        f"get {row['memcpy_get_gbps']:.2f} | {row['set_ratio_vs_memcpy']:.0%}/{row['get_ratio_vs_memcpy']:.0%} of memcpy"
    )
    return row


def _bench_size(page_bytes: int, total: int, repeats: int, file_dir: str | None) -> dict[str, Any]:
    import yaml

    from hicache_mooncake.presets import preset_path

    w = page_workload(page_bytes, total)
    host, src, dst, keys, batches, batch, pages = w.host, w.src, w.dst, w.keys, w.batches, w.batch, w.pages
    stamps = PageStamps(host)

    extra = yaml.safe_load(preset_path("default").read_text())
    dram_bytes = -(-(pages * page_bytes * 5 // 4) // (64 << 20)) * (64 << 20)
    extra["tiers"]["dram"].update({"capacity": dram_bytes})
    extra.get("tiers", {}).pop("ssd", None)

    cheapest = {**extra, "tiers": {**extra["tiers"], "policy": "lru"}}
    # the steady state: DRAM a quarter of the pages (whole slabs: the preset's where the run is
    # large enough for two; else slabs that hold a page with its header, so that a page stays one
    # object as in the other legs), filled with other keys first, so that every timed set evicts
    quarter = pages * page_bytes // 4
    slab = 64 << 20 if quarter >= 128 << 20 else max(2 * page_bytes, 1 << 20)
    full_bytes = max(2 * slab, quarter // slab * slab)
    full_dram = {**extra["tiers"]["dram"], "capacity": full_bytes, "slab_size": slab}
    full = {**extra, "tiers": {**extra["tiers"], "dram": full_dram}}
    per_call = max(1, min(batch, full_bytes // 4 // page_bytes))
    full_calls = [b[i : i + per_call] for b in batches for i in range(0, len(b), per_call)]
    fill = [[f"{key}-fill" for key in b] for b in full_calls]
    checked = max(1, full_bytes // 2 // (per_call * page_bytes))  # the newest calls read back
    times: dict[str, list[float]] = {
        name: []
        for name in (
            "ours_set",
            "ours_get",
            "busy_set",
            "busy_get",
            "tier_set",
            "tier_get",
            "full_set",
            "file_set",
            "file_get",
            "mem_set",
            "mem_get",
            "mem_numpy_set",
            "mem_numpy_get",
            "mem_native_set",
            "mem_native_get",
        )
    }
    bad = dict.fromkeys(("ours", "busy", "tier", "full", "file", "memcpy"), 0)
    evicted: list[int] = []  # pages the full cache dropped during its timed sets, per repeat
    left_out: list[int] = []  # timed pages it did not admit (a call evicting its own pages)
    served = dict.fromkeys(bad, 0)
    for rep in range(repeats):

        def tags(b: int, j: int, rep: int = rep) -> int:
            return (rep << 48) | (b * batch + j)

        for label, conf, set_times, get_times in (
            ("ours", extra, times["ours_set"], times["ours_get"]),
            ("busy", extra, times["busy_set"], times["busy_get"]),
            ("tier", cheapest, times["tier_set"], times["tier_get"]),
        ):
            backend = create_backend("dynamic", conf, host)
            with busy_python_thread() if label == "busy" else contextlib.nullcontext():
                set_times.append(timed_v1_set(backend.batch_set_v1, batches, src, stamps, tags, 64).seconds)
                got = timed_v1_get(backend.batch_get_v1, batches, src, dst, stamps, tags, 64)
            get_times.append(got.seconds)
            bad[label] += got.bad_pages + (pages - got.ok_pages)
            served[label] += got.ok_pages
            assert backend.batch_exists(keys[:batch]) == batch
            backend.close()

        backend = create_backend("dynamic", full, host)
        v1_batches(backend.batch_set_v1, fill, src, 64)
        before = backend.tier_stats()["tiers"]["placement"]
        times["full_set"].append(
            timed_v1_set(backend.batch_set_v1, full_calls, src, stamps, tags, 64).seconds
        )
        after = backend.tier_stats()["tiers"]["placement"]
        evicted.append(after.get("dropped", 0) - before.get("dropped", 0))
        left_out.append(after.get("not_admitted", 0) - before.get("not_admitted", 0))
        first = max(0, len(full_calls) - checked)  # the newest calls (half of DRAM) are resident
        got = timed_v1_get(
            backend.batch_get_v1,
            full_calls[first:],
            src,
            dst,
            stamps,
            lambda b, j, at=first: tags(b + at, j),
            64,
        )
        bad["full"] += got.bad_pages  # a policy may have evicted a page of them (then not served)
        served["full"] += got.ok_pages
        backend.close()

        tmp = tempfile.mkdtemp(prefix="hicache-bench-file-", dir=file_dir)
        try:
            fb = create_backend("file", {"file_storage_path": tmp}, host)
            fkeys = [[f"{k}r{rep}" for k in b] for b in batches]
            times["file_set"].append(timed_generic_set(fb, host, fkeys, src, stamps, tags).seconds)
            got = timed_generic_get(fb, host, fkeys, src, dst, stamps, tags)
            times["file_get"].append(got.seconds)
            bad["file"] += got.bad_pages + (pages - got.ok_pages)
            served["file"] += got.ok_pages
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

        m = _memcpy_baseline(stamps, src, dst, batches, page_bytes, tags)
        times["mem_set"].append(m.set_seconds)
        times["mem_get"].append(m.get_seconds)
        for name in ("numpy_set", "numpy_get", "native_set", "native_get"):
            times[f"mem_{name}"].append(getattr(m, f"{name}_seconds"))
        bad["memcpy"] += m.bad_pages
        served["memcpy"] += pages
    stamps.close()

    def gbps(samples: list[float]) -> float:
        return pages * page_bytes / statistics.median(samples) / 1e9

    row: dict[str, Any] = {
        "page_bytes": page_bytes,
        "pages": pages,
        "ours_set_gbps": gbps(times["ours_set"]),
        "ours_get_gbps": gbps(times["ours_get"]),
        "busy_set_gbps": gbps(times["busy_set"]),
        "busy_get_gbps": gbps(times["busy_get"]),
        "full_cache_set_gbps": gbps(times["full_set"]),
        "full_cache_dram_bytes": full_bytes,
        "full_cache_evicted_per_set_page": min(evicted) / pages,
        "full_cache_not_admitted_per_set_page": max(left_out) / pages,
        "full_cache_pages_per_call": per_call,
        "dram_tier_set_gbps": gbps(times["tier_set"]),
        "dram_tier_get_gbps": gbps(times["tier_get"]),
        "file_set_gbps": gbps(times["file_set"]),
        "file_get_gbps": gbps(times["file_get"]),
        "memcpy_set_gbps": gbps(times["mem_set"]),
        "memcpy_get_gbps": gbps(times["mem_get"]),
        "memcpy_numpy_set_gbps": gbps(times["mem_numpy_set"]),
        "memcpy_numpy_get_gbps": gbps(times["mem_numpy_get"]),
        "memcpy_native_set_gbps": gbps(times["mem_native_set"]),
        "memcpy_native_get_gbps": gbps(times["mem_native_get"]),
        "pages_verified": served,
        "bad_pages": bad,
    }
    row["set_ratio_vs_file"] = row["ours_set_gbps"] / row["file_set_gbps"]
    row["get_ratio_vs_file"] = row["ours_get_gbps"] / row["file_get_gbps"]
    row["dram_set_ratio_vs_memcpy"] = row["dram_tier_set_gbps"] / row["memcpy_set_gbps"]
    row["dram_get_ratio_vs_memcpy"] = row["dram_tier_get_gbps"] / row["memcpy_get_gbps"]
    row["default_set_ratio_vs_memcpy"] = row["ours_set_gbps"] / row["memcpy_set_gbps"]
    row["default_get_ratio_vs_memcpy"] = row["ours_get_gbps"] / row["memcpy_get_gbps"]
    row["full_cache_set_ratio_vs_memcpy"] = row["full_cache_set_gbps"] / row["memcpy_set_gbps"]
    # next to a thread running Python (SGLang's scheduler): a fair share of the GIL is about 0.5
    row["busy_set_ratio_vs_alone"] = row["busy_set_gbps"] / row["ours_set_gbps"]
    row["busy_get_ratio_vs_alone"] = row["busy_get_gbps"] / row["ours_get_gbps"]
    return row


def _host_cache_row(page_bytes: int, total: int, repeats: int) -> dict[str, Any]:
    """This process sets through a private host cache; a second process gets (module docstring)."""
    import json
    import os
    import signal
    import subprocess
    import sys

    import yaml

    from hicache_mooncake.host_cache.lock import holder_pid
    from hicache_mooncake.presets import preset_path
    from hicache_mooncake.tools.sglang_harness import fill_random_pages

    w = page_workload(page_bytes, total)
    tmp = tempfile.mkdtemp(prefix="hicache-bench-hc-")
    shm = tempfile.mkdtemp(prefix="hicache-bench-hc-", dir="/dev/shm")
    extra = yaml.safe_load(preset_path("default").read_text())
    extra["tiers"].pop("ssd", None)
    dram_bytes = -(-(w.pages * page_bytes * 5 // 4) // (64 << 20)) * (64 << 20)
    extra["tiers"]["dram"].update({"capacity": dram_bytes})
    extra["tiers"]["host_cache"] = "on"
    extra["host_cache"] = {"dir": os.path.join(tmp, "run"), "shm_dir": shm, "start_timeout_s": 120}
    backend = create_backend("dynamic", extra, w.host)
    pid = holder_pid(os.path.join(tmp, "run", "host-cache.lock"))
    try:
        set_times, mem_set = [], []
        stamps = PageStamps(w.host)
        try:
            for rep in range(repeats):
                if rep:
                    backend.clear()
                set_times.append(_timed(lambda: v1_batches(backend.batch_set_v1, w.batches, w.src, 64)))
                m = _memcpy_baseline(stamps, w.src, w.dst, w.batches, page_bytes, memcpy_tag)
                if m.bad_pages:
                    raise RuntimeError(f"memcpy baseline: {m.bad_pages} pages differ")
                mem_set.append(m.set_seconds)
                fill_random_pages(w.host, w.src, seed=1)  # the pages the reader expects (unstamped)
        finally:
            stamps.close()
        spec = {"page_bytes": page_bytes, "total": total, "repeats": repeats, "extra": extra}
        proc = subprocess.run(
            [sys.executable, "-m", "hicache_mooncake.tools.bench._host_cache_reader", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the host-cache reader failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        if not got["byte_exact"]:
            raise RuntimeError("the host-cache reader got wrong bytes")
        full_times = _host_cache_full_sets(backend, w, repeats)
    finally:
        backend.close()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)

    def gbps(times: list[float]) -> float:
        return w.pages * page_bytes / statistics.median(times) / 1e9

    def ratio(ours: list[float], memcpy: list[float]) -> float:
        """Median of the per-repeat ratios: each repeat times ours and memcpy back to back, so a
        noisy neighbour slows both (the ratio of medians would mix different moments)."""
        return statistics.median(m / o for o, m in zip(ours, memcpy, strict=True))

    return {
        "host_cache_set_gbps": gbps(set_times),
        "host_cache_get_gbps": gbps(got["get_times"]),
        "host_cache_memcpy_set_gbps": gbps(mem_set),
        "host_cache_memcpy_get_gbps": gbps(got["memcpy_get_times"]),
        "host_cache_set_ratio_vs_memcpy": ratio(set_times, mem_set),
        "host_cache_get_ratio_vs_memcpy": ratio(got["get_times"], got["memcpy_get_times"]),
        "host_cache_full_set_gbps": gbps(full_times),
        "host_cache_full_set_ratio_vs_memcpy": statistics.median(mem_set) / statistics.median(full_times),
    }


def _host_cache_full_sets(backend: Any, w: Any, repeats: int) -> list[float]:
    """The host cache's steady state: its DRAM (5/4 of the pages) is filled with other pages
    first, then every timed set of new pages makes room (the policy's victims leave at the
    reservation, before the writer copies). Seconds per repeat of all the pages; a set that
    stored fewer pages than asked fails the benchmark (a refusal is faster than a copy)."""

    def sets(tag: str) -> float:
        named = [[f"{key}-{tag}" for key in b] for b in w.batches]
        stored = 0
        start = time.perf_counter()
        for keys in named:
            stored += sum(map(bool, backend.batch_set_v1(keys, w.src[: len(keys) * 64])))
        seconds = time.perf_counter() - start
        if stored != w.pages:
            raise RuntimeError(f"the full host cache stored {stored} of {w.pages} pages ({tag})")
        return seconds

    sets("fill0")
    sets("fill1")
    return [sets(f"full{rep}") for rep in range(repeats)]


class _MemcpyRun:
    """Seconds of the baseline's copies: ``numpy`` (one ``np.copyto`` per part, a Python loop),
    ``native`` (one native ``copy_pages`` call per pool buffer for the whole batch, its offsets
    computed before the clock starts: the copy and nothing else), and per direction the better
    of the two (the baseline at its best: what the ratios divide by)."""

    def __init__(self) -> None:
        self.numpy_set_seconds = self.numpy_get_seconds = 0.0
        self.native_set_seconds = self.native_get_seconds = 0.0
        self.bad_pages = 0

    @property
    def set_seconds(self) -> float:
        return min(self.numpy_set_seconds, self.native_set_seconds)

    @property
    def get_seconds(self) -> float:
        return min(self.numpy_get_seconds, self.native_get_seconds)


def _memcpy_baseline(
    stamps: PageStamps, src: Any, dst: Any, batches: list[list[str]], page_bytes: int, tags: Any
) -> _MemcpyRun:
    """The same parts of the same host pages copied into fresh memory as large as the run (the
    kind of memory the DRAM tier's arena is), every page at its own place, then back out into the
    destination pages; per batch, stamped and checked like the backends (untimed). Twice: a
    Python loop of ``np.copyto`` per part, and one native batch copy per pool buffer (``_MemcpyRun``)."""
    from hicache_mooncake.native import copy_pages
    from hicache_mooncake.tiers.dram_arena import DramArena
    from hicache_mooncake.transport.batch_copy import locate

    out = _MemcpyRun()
    arena = DramArena(-(-sum(len(b) for b in batches) * page_bytes // 4096) * 4096)
    arena.wait_prefaulted(600)
    try:
        slots = arena.bytes
        for b, keys in enumerate(batches):
            stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
            pages = stamps.parts(src, len(keys))
            t0 = time.perf_counter()
            pos = b * len(batches[0]) * page_bytes
            for parts in pages:
                for p in parts:
                    np.copyto(slots[pos : pos + p.nbytes], p)
                    pos += p.nbytes
            out.numpy_set_seconds += time.perf_counter() - t0
        for b, keys in enumerate(batches):
            pages = stamps.parts(dst, len(keys))
            t0 = time.perf_counter()
            pos = b * len(batches[0]) * page_bytes
            for parts in pages:
                for p in parts:
                    np.copyto(p, slots[pos : pos + p.nbytes])
                    pos += p.nbytes
            out.numpy_get_seconds += time.perf_counter() - t0
            stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
            out.bad_pages += stamps.mismatches(src, dst, len(keys))
        slots[:] = 0  # the native pass must copy every byte again
        for direction in ("set", "get"):
            for b, keys in enumerate(batches):
                region = src if direction == "set" else dst
                if direction == "set":
                    stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
                views = stamps.views(region, len(keys))
                lengths = np.fromiter((v.nbytes for v in views), dtype=np.uint64, count=len(views))
                at = np.uint64(b * len(batches[0]) * page_bytes) + np.cumsum(lengths) - lengths
                groups = [
                    (owner, at[idx], offsets.astype(np.uint64), lengths[idx])
                    for owner, idx, offsets in locate(views).groups
                ]
                t0 = time.perf_counter()
                for owner, arena_at, pool_at, n in groups:
                    if direction == "set":
                        copy_pages(slots, arena_at, owner, pool_at, n)
                    else:
                        copy_pages(owner, pool_at, slots, arena_at, n)
                if direction == "set":
                    out.native_set_seconds += time.perf_counter() - t0
                else:
                    out.native_get_seconds += time.perf_counter() - t0
                    stamps.stamp(src, [tags(b, j) for j in range(len(keys))])
                    out.bad_pages += stamps.mismatches(src, dst, len(keys))
        del slots
    finally:
        arena.close()
    return out


def memcpy_tag(b: int, j: int) -> int:
    """The stamp of page ``j`` of batch ``b`` in a memcpy baseline run (distinct per page)."""
    return (b << 20) | j


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def replot(result: dict[str, Any], out: str) -> None:
    """The figure from a JSON this target wrote (``bench sglang --replot JSON --plot OUT``)."""
    _plot(result["per_page_size"], out)


def _plot(rows: list[dict[str, Any]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hicache_mooncake.tools.bench._plotting import legend_below

    labels = [format_size(r["page_bytes"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, op in zip(axes, ("set", "get"), strict=True):
        series = [  # (label, field, colour: one per series in both panels)
            ("hicache-mooncake (DRAM)", f"ours_{op}_gbps", "C0"),
            ("SGLang file", f"file_{op}_gbps", "C1"),
            ("memcpy", f"memcpy_{op}_gbps", "C2"),
        ]
        if op == "set":  # the legend is the set panel's: it names every series
            series.insert(1, ("hicache-mooncake, full cache (each set evicts)", "full_cache_set_gbps", "C3"))
        width = 0.8 / len(series)
        for k, (name, key, colour) in enumerate(series):
            ax.bar(
                x + (k - (len(series) - 1) / 2) * width,
                [r[key] for r in rows],
                width,
                label=name,
                color=colour,
            )
        ax.set_xticks(x, labels)
        ax.set_title(f"batch_{op} through SGLang's interface")
        ax.set_xlabel("page size")
    axes[0].set_ylabel("GB/s (median)")
    legend_below(fig, axes[0], fontsize=10)
    fig.savefig(out, dpi=120)
