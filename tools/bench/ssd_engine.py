"""Raw SSD engine throughput: put/get MB/s and CPU s/GB per object size, O_DIRECT vs buffered.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench ssd_engine`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from typing import Any

import numpy as np

from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tools.bench._disk import (
    NOT_DROPPED,
    add_dir_argument,
    add_drop_caches_argument,
    default_work_dir,
    drop_caches,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dir_argument(parser)
    add_drop_caches_argument(parser)
    parser.add_argument("--sizes", default="1,8", help="object sizes in MiB, comma separated")
    parser.add_argument("--total-mb", type=int, default=1024, help="MiB written per size and mode")
    parser.add_argument("--modes", default="direct,buffered")
    parser.add_argument("--batch", type=int, default=8, help="objects per put_batch / get_batch_into call")
    parser.add_argument("--threads", type=int, default=2, help="caller threads")
    parser.add_argument("--io-threads", type=int, default=4)
    parser.add_argument("--region-mb", type=int, default=64)
    parser.add_argument(
        "--reopen-entries",
        type=int,
        default=0,
        help="instead of throughput: write this many small entries, kill -9 the writer, and time "
        "the reopen after the kill, after a clean close, and a full scan (the pre-summary reopen)",
    )
    parser.add_argument(
        "--entry-bytes", type=int, default=4096, help="payload per entry for --reopen-entries"
    )


def _aligned(size: int) -> np.ndarray:
    raw = np.empty(size + 4096, dtype=np.uint8)
    off = (-raw.ctypes.data) % 4096
    return raw[off : off + size]


def _timed(fn: Any) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _parallel(threads: int, work: list[list[str]], fn: Any) -> None:
    ts = [threading.Thread(target=fn, args=(work[i],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def measure(
    directory: str,
    mode: str,
    size: int,
    total: int,
    batch: int,
    threads: int,
    io_threads: int,
    region: int,
    drop: bool = False,
) -> dict[str, Any]:
    n = max(batch * threads, total // size)
    keys = [f"obj{i}" for i in range(n)]
    src = _aligned(size)
    src[:] = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
    opts = SsdOptions(
        dirs=(directory,), capacity_bytes=(n * (size + 8192) // region + 3) * region, region_size=region,
        direct_io="on" if mode == "direct" else "off", io_threads=io_threads,
    )  # fmt: skip
    work = [keys[i::threads] for i in range(threads)]
    failures = [0]

    def put_worker(ks: list[str]) -> None:
        for j in range(0, len(ks), batch):
            res = eng.put_batch([(k, [src.data]) for k in ks[j : j + batch]])
            failures[0] += res.count(False)

    eng = SsdEngine(opts)
    io_mode = eng.stats()["io_mode"]
    put_s, put_cpu = _timed(lambda: _parallel(threads, work, put_worker))
    sync_s, _ = _timed(eng.sync)
    eng.close()
    dropped = drop_caches(drop)
    t0 = time.perf_counter()
    eng = SsdEngine(opts)
    recover_s = time.perf_counter() - t0
    recovered = eng.stats()["entries"]
    eng.close()
    t0 = time.perf_counter()
    eng = SsdEngine(SsdOptions(**{**opts.__dict__, "verify_on_recover": False}))
    recover_hdr_s = time.perf_counter() - t0
    drop_caches(drop)
    dsts = [[_aligned(size) for _ in range(batch)] for _ in range(threads)]
    misses = [0]

    def get_worker(ks: list[str]) -> None:
        mine = dsts[work.index(ks)]
        for j in range(0, len(ks), batch):
            part = ks[j : j + batch]
            res = eng.get_batch_into([(k, [mine[i].data]) for i, k in enumerate(part)])
            misses[0] += res.count(False)

    get_s, get_cpu = _timed(lambda: _parallel(threads, work, get_worker))
    ok = bool(np.array_equal(dsts[0][0], src))
    eng.close()
    gb = n * size / 1e9
    return {
        "mode": mode, "io_mode": io_mode, "object_mb": size >> 20, "objects": n, "gb": round(gb, 3),
        "put_MBps": round(n * size / put_s / 1e6, 1), "put_cpu_s_per_gb": round(put_cpu / gb, 3),
        "put_plus_sync_MBps": round(n * size / (put_s + sync_s) / 1e6, 1), "put_failures": failures[0],
        "get_MBps": round(n * size / get_s / 1e6, 1), "get_cpu_s_per_gb": round(get_cpu / gb, 3),
        "get_misses": misses[0], "bytes_ok": ok, "page_cache_dropped": dropped,
        "recover_s_verify": round(recover_s, 3), "recover_s_headers_only": round(recover_hdr_s, 3),
        "recovered": recovered,
    }  # fmt: skip


_WRITER = """
import sys, numpy as np
from hicache_mooncake.ssd import SsdEngine, SsdOptions
d, n, size, cap, region = sys.argv[1], *map(int, sys.argv[2:6])
eng = SsdEngine(SsdOptions(dirs=(d,), capacity_bytes=cap, region_size=region, direct_io="off",
                           reinsertion_hits=0))
src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
view = memoryview(src)
for j in range(0, n, 256):
    res = eng.put_batch([(f"e{i:09d}", [view]) for i in range(j, min(n, j + 256))])
    assert all(res), "put failed"
print("written", flush=True)
sys.stdin.read()  # wait to be killed
"""


def measure_reopen(directory: str, n: int, size: int, region: int, drop: bool = False) -> dict[str, Any]:
    """Reopen times of a store of ``n`` entries: after kill -9 of the writer (summaries of the
    sealed regions, the open region scanned in the background), after a clean close (summaries
    only), and with a full synchronous scan of every payload (``strict``: the pre-summary reopen)."""
    import signal
    import subprocess
    import sys

    from hicache_mooncake.ssd.format import entry_size

    cap = (n * entry_size(size) // (region - 4096) + 3) * region
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-c", _WRITER, directory, str(n), str(size), str(cap), str(region)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline()
    write_s = time.perf_counter() - t0
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    if "written" not in line:
        raise RuntimeError("the writer failed")
    opts = SsdOptions(dirs=(directory,), capacity_bytes=cap, region_size=region, direct_io="off")
    out: dict[str, Any] = {
        "entries": n,
        "entry_bytes": size,
        "region_mb": region >> 20,
        "write_s": round(write_s, 2),
    }
    dropped = drop_caches(drop)
    t0, c0 = time.perf_counter(), time.process_time()
    eng = SsdEngine(opts)
    out["after_kill_attach_s"] = round(time.perf_counter() - t0, 3)
    out["after_kill_attach_cpu_s"] = round(time.process_time() - c0, 3)
    out["after_kill_regions_scanned_in_background"] = eng.stats()["recovering_regions"]
    eng.wait_recovered()
    out["after_kill_all_indexed_s"] = round(time.perf_counter() - t0, 3)
    out["after_kill_entries"] = eng.stats()["entries"]
    eng.close()
    drop_caches(drop)
    t0, c0 = time.perf_counter(), time.process_time()
    eng = SsdEngine(opts)
    out["clean_reopen_s"] = round(time.perf_counter() - t0, 3)
    out["clean_reopen_cpu_s"] = round(time.process_time() - c0, 3)
    st = eng.stats()
    out["clean_reopen_entries"], out["clean_reopen_from_summaries"] = (
        st["entries"],
        st["recover_from_summaries"],
    )
    eng.close()
    drop_caches(drop)
    t0, c0 = time.perf_counter(), time.process_time()
    eng = SsdEngine(SsdOptions(**{**opts.__dict__, "strict": True}))
    out["full_scan_reopen_s"] = round(time.perf_counter() - t0, 3)
    out["full_scan_reopen_cpu_s"] = round(time.process_time() - c0, 3)
    out["full_scan_entries"] = eng.stats()["entries"]
    eng.close()
    out["page_cache_dropped"] = dropped
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)  # this machine is shared: wall times vary
    return out


def run(args: argparse.Namespace) -> int:
    base = args.dir or default_work_dir()
    if args.reopen_entries:
        d = tempfile.mkdtemp(prefix="ssd-bench-reopen-", dir=base)
        try:
            r = measure_reopen(
                d, args.reopen_entries, args.entry_bytes, args.region_mb << 20, args.drop_caches
            )
        finally:
            shutil.rmtree(d, ignore_errors=True)
        print(json.dumps(r))
        if args.json_out:
            with open(args.json_out, "w", encoding="utf-8") as f:
                json.dump({"reopen": r}, f, indent=2)
        return 0
    if not args.drop_caches:
        print(NOT_DROPPED, flush=True)
    results = []
    for mode in args.modes.split(","):
        for mb in (int(x) for x in args.sizes.split(",")):
            d = tempfile.mkdtemp(prefix="ssd-bench-", dir=base)
            try:
                r = measure(
                    d,
                    mode,
                    mb << 20,
                    args.total_mb << 20,
                    args.batch,
                    args.threads,
                    args.io_threads,
                    args.region_mb << 20,
                    args.drop_caches,
                )
            finally:
                with contextlib.suppress(OSError):
                    shutil.rmtree(d)
            print(json.dumps(r))
            results.append(r)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump({"results": results}, f, indent=2)
    return 0
