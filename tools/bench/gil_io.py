"""Python's own ceiling on the disk: O_DIRECT I/O threads, alone and next to what shares the GIL.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench gil_io`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hicache_mooncake.commands import UsageError
from hicache_mooncake.ssd import checksum
from hicache_mooncake.ssd.io import O_DIRECT, copy_into, huge_buffer, probe_direct_io
from hicache_mooncake.tools.bench._busy import busy_python_thread
from hicache_mooncake.tools.bench._disk import (
    add_dir_argument,
    add_drop_caches_argument,
    default_work_dir,
    drop_caches,
)

CASES = (
    "alone", "busy_python", "hashing_threads_1", "hashing_threads_3", "cpu_processes_1",
    "cpu_processes_2", "busy_python_switch_0.2ms", "busy_python_switch_20ms",
)  # fmt: skip
_PART = 1 << 20
_WORK = 64 << 20  # each load thread's source and destination
# a load process: the same copy and hash in a loop, until killed
_PROCESS_LOOP = (
    "import sys, numpy as np, xxhash\n"
    f"a = np.full({_WORK}, 3, np.uint8); b = np.zeros({_WORK}, np.uint8)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    f"    for o in range(0, {_WORK}, {_PART}):\n"
    f"        b[o:o + {_PART}] = a[o:o + {_PART}]; xxhash.xxh3_64_intdigest(b[o:o + {_PART}])\n"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dir_argument(parser)
    add_drop_caches_argument(parser)
    parser.add_argument("--size-mib", type=int, default=8, help="bytes per I/O, MiB (the SSD tier's runs: 8)")
    parser.add_argument("--total-mb", type=int, default=512, help="MiB per leg (and the size of each file)")
    parser.add_argument("--io-threads", type=int, default=4, help="I/O threads (the SSD tier's default: 4)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma separated, of: {', '.join(CASES)}")


@contextlib.contextmanager
def _hashing_threads(n: int) -> Iterator[None]:
    stop = threading.Event()

    def work() -> None:
        src, dst = huge_buffer(_WORK), huge_buffer(_WORK)
        np.frombuffer(src, np.uint8)[:] = 3
        np.frombuffer(dst, np.uint8)[:] = 0
        while not stop.is_set():
            for off in range(0, _WORK, _PART):
                part = dst[off : off + _PART]
                copy_into(part, src[off : off + _PART])
                checksum.update(checksum.new_hasher(), part)

    threads = [threading.Thread(target=work, name=f"hicache-bench-hash-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


@contextlib.contextmanager
def _cpu_processes(n: int) -> Iterator[None]:
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(n):
            p = subprocess.Popen(
                [sys.executable, "-c", _PROCESS_LOOP],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(p)
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(
                    f"load process {p.pid} did not start: {p.stderr.read() if p.stderr else ''}"
                )
        yield
    finally:
        for p in procs:  # exactly the processes started here, by PID
            p.kill()
            p.wait(10)


def _load(case: str) -> contextlib.AbstractContextManager[None]:
    if case == "alone":
        return contextlib.nullcontext()
    if case == "busy_python":
        return busy_python_thread()
    if case.startswith("busy_python_switch_"):
        return busy_python_thread(float(case.removeprefix("busy_python_switch_").removesuffix("ms")) / 1e3)
    if case.startswith("hashing_threads_"):
        return _hashing_threads(int(case.removeprefix("hashing_threads_")))
    return _cpu_processes(int(case.removeprefix("cpu_processes_")))


def _leg(
    fd: int, write: bool, bufs: list[memoryview], count: int, stop: threading.Event
) -> Callable[[], float]:
    """Start one thread per buffer, writing (or reading) I/Os ``0..count-1`` of one buffer's size
    until all are done or ``stop`` is set (the first thread to run out of I/Os sets it, so the
    other leg of a mixed run stops too); the returned function joins them and gives GB/s."""
    lock = threading.Lock()
    state = {"next": 0, "done": 0}
    io = os.pwritev if write else os.preadv
    size = len(bufs[0])

    def run(buf: memoryview) -> None:
        while not stop.is_set():
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= count:
                stop.set()
                return
            io(fd, [buf], i * size)
            with lock:
                state["done"] += 1

    ts = [threading.Thread(target=run, args=(b,), name="hicache-bench-io", daemon=True) for b in bufs]
    t0 = time.perf_counter()
    for t in ts:
        t.start()

    def finish() -> float:
        for t in ts:
            t.join()
        return state["done"] * size / (time.perf_counter() - t0) / 1e9

    return finish


def _case(fds: tuple[int, int], bufs: list[memoryview], count: int, drop: bool) -> dict[str, float]:
    wfd, rfd = fds
    out = {"write_gbps": _leg(wfd, True, bufs, count, threading.Event())()}
    drop_caches(drop)
    out["read_gbps"] = _leg(rfd, False, bufs, count, threading.Event())()
    drop_caches(drop)
    stop = threading.Event()  # both at once, half the threads each, until the first is done
    half = len(bufs) // 2
    w = _leg(wfd, True, bufs[:half], count, stop)
    r = _leg(rfd, False, bufs[half:], count, stop)
    out["mixed_write_gbps"], out["mixed_read_gbps"] = w(), r()
    out["mixed_gbps"] = out["mixed_write_gbps"] + out["mixed_read_gbps"]
    return out


def measure(
    directory: str, cases: list[str], size: int, total: int, threads: int, drop: bool
) -> dict[str, Any]:
    direct, reason = probe_direct_io(directory)
    flags = os.O_RDWR | os.O_CREAT | (O_DIRECT if direct else 0)
    count = max(1, total // size)
    bufs = [huge_buffer(size) for _ in range(threads)]  # one per I/O thread, on huge pages
    for b in bufs:
        np.frombuffer(b, np.uint8)[:] = 1  # faulted in before any clock runs
    fds = tuple(os.open(os.path.join(directory, name), flags, 0o600) for name in ("w.dat", "r.dat"))
    try:
        for fd in fds:  # laid out, so writes overwrite and reads read what is there
            _leg(fd, True, bufs, count, threading.Event())()
            os.fsync(fd)
        rows: dict[str, dict[str, float]] = {}
        dropped = drop_caches(drop)  # (O_DIRECT reads bypass the page cache anyway)
        for case in cases:
            drop_caches(drop)
            with _load(case):
                rows[case] = _case((fds[0], fds[1]), bufs, count, drop)
            print(case, " ".join(f"{k} {v:.2f}" for k, v in rows[case].items()), flush=True)
    finally:
        for fd in fds:
            os.close(fd)
    if "alone" in rows:
        for row in rows.values():
            for k in ("write", "read", "mixed"):
                alone = rows["alone"][f"{k}_gbps"]
                row[f"{k}_ratio_vs_alone"] = row[f"{k}_gbps"] / alone if alone else 0.0
    return {
        "benchmark": "gil_io",
        "io_mode": "direct" if direct else "buffered",
        "io_mode_reason": reason,
        "page_cache_dropped": dropped,
        "size_bytes": size,
        "bytes_per_leg": count * size,
        "io_threads": threads,
        "switch_interval_s": sys.getswitchinterval(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "cases": rows,
    }


def replot(result: dict[str, Any], out: str) -> None:
    """The figure from a JSON this target wrote (``bench gil_io --replot JSON --plot OUT``)."""
    _plot(result, out)


def _plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hicache_mooncake.tools.bench._plotting import legend_below

    cases = list(result["cases"])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(cases)), 4))
    for j, key in enumerate(("write_gbps", "read_gbps", "mixed_gbps")):
        xs = [i + (j - 1) * 0.27 for i in range(len(cases))]
        ax.bar(xs, [result["cases"][c][key] for c in cases], width=0.27, label=key.removesuffix("_gbps"))
    ax.set_xticks(range(len(cases)), cases, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("GB/s")
    ax.set_title(
        f"Python I/O threads, {result['size_bytes'] >> 20} MiB I/Os ({result['io_mode']})", fontsize=9
    )
    legend_below(fig, ax)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise UsageError(
            f"--cases: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(CASES)}"
        )
    if args.size_mib < 1 or args.total_mb < args.size_mib or args.io_threads < 2:
        raise UsageError("--size-mib >= 1, --total-mb >= --size-mib and --io-threads >= 2 (mixed: half each)")
    d = tempfile.mkdtemp(prefix="gil-io-bench-", dir=args.dir or default_work_dir())
    try:
        result = measure(
            d, cases, args.size_mib << 20, args.total_mb << 20, args.io_threads, args.drop_caches
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    if args.plot_out:
        _plot(result, args.plot_out)
    return 0
