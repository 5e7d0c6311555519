"""SSD tier vs fio (raw O_DIRECT) vs SGLang's `file` backend, on the same directory, in one run.

For each page size (1 MiB and 8 MiB by default) and each of ``--repeats`` rounds:

1. **fio**: sequential O_DIRECT write then read of ``--total`` bytes in the directory, block size =
   page size, I/O depth 16, ``io_uring`` (falling back to ``libaio``, then ``psync``; the engine
   used is recorded), page cache dropped before the read;
2. **ours**: a real SGLang host pool; our backend created by SGLang's ``StorageBackendFactory``
   (``dynamic``) with an SSD-only configuration (``tiers.dram.enabled: false``) whose path is in
   the directory; ``batch_set_v1`` / ``batch_get_v1`` in batches of up to 128 pages, page cache
   dropped before the gets; then the backend is closed and constructed again on the full tier
   (the reopen / recovery time, payloads verified);
3. **file**: SGLang's ``file`` backend (``HiCacheFile``) on the same directory, driven the way
   its cache controller drives it (flat pages out, dummy pages in), page cache dropped before
   the gets.

CPU seconds per GB are ``getrusage`` of this process (ours, file: all threads) or of the fio
child. Ratios per page size are the medians of the per-round ratios (each round measures all
three side by side, which cancels most of the noise of a shared machine); raw figures are
medians too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hicache_mooncake.bench._sglang_io import (
    PAGE_SHAPES,
    create_backend,
    generic_get,
    generic_set,
    page_workload,
)
from hicache_mooncake.results_json import write_json
from hicache_mooncake.sizes import format_size, parse_size

FIO_ENGINES = ("io_uring", "libaio", "psync")
FIO_DEPTH = 16
BATCH_PAGES = 128
TARGET_VS_FIO = 0.9
TARGET_VS_FILE = 5.0
_REPO = Path(__file__).resolve().parents[2]
# page bytes = 2 (K,V) * layers * 64 tokens * heads * 128 dim * 2 (bf16) = 32 KiB * layers * heads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        default=None,
        help="directory to measure (a temp dir is made in it; default: under the repository, "
        "or the system temp dir when that is not tmpfs)",
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
    parser.add_argument("--recover-bound-s", type=float, default=60.0, help="reopen must finish within this")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="measure every page size in this process (default: one fresh process per page size; a "
        "second size measured in the same process read ~2x slower here, cause not found)",
    )
    parser.add_argument("--row-json", default=None, help=argparse.SUPPRESS)  # child mode: one size, one row


# ---------------------------------------------------------------------------------------- helpers


def fs_type(path: str) -> str:
    """Filesystem type of ``path`` (longest mount point prefix in /proc/mounts)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3:
                continue
            mnt = fields[1].replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fields[2]
    return kind


def default_base_dir() -> str:
    """Under the repository (a real disk) when writable, else the temp dir if it is not tmpfs."""
    for cand in (_REPO / "build", Path(tempfile.gettempdir()), Path.cwd()):
        with contextlib.suppress(OSError):
            cand.mkdir(parents=True, exist_ok=True)
            if os.access(cand, os.W_OK) and fs_type(str(cand)) not in ("tmpfs", "ramfs"):
                return str(cand)
    return str(Path.cwd())


def drop_caches() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``; False when not permitted."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def settle() -> None:
    """After deleting files: ``sync`` so the filesystem's discards (``-o discard``) and journal
    commit land now, not inside the next measurement."""
    os.sync()
    time.sleep(0.2)


def _cpu(who: int) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def _measure(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn()``."""
    c0, t0 = _cpu(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    return time.perf_counter() - t0, _cpu(resource.RUSAGE_SELF) - c0


def _figures(nbytes: int, wall: float, cpu: float) -> dict[str, float]:
    gb = nbytes / 1e9
    return {"gbps": gb / wall, "cpu_s_per_gb": cpu / gb, "seconds": wall}


# ---------------------------------------------------------------------------------------- fio


class Fio:
    """Runs fio jobs; the first engine of ``FIO_ENGINES`` that works is kept for the whole run."""

    def __init__(self) -> None:
        self.engine: str | None = None
        self.tried: dict[str, str] = {}

    def run(self, path: str, rw: str, bs: int, size: int) -> dict[str, Any]:
        engines = [self.engine] if self.engine else list(FIO_ENGINES)
        last = ""
        for eng in engines:
            assert eng is not None
            try:
                out = self._run_once(path, rw, bs, size, eng)
            except RuntimeError as e:
                self.tried[eng] = str(e)[-300:]
                last = str(e)
                continue
            self.engine = eng
            return out
        raise RuntimeError(f"fio failed with every engine: {last}")

    @staticmethod
    def _run_once(path: str, rw: str, bs: int, size: int, engine: str) -> dict[str, Any]:
        cmd = [
            "fio", "--name=hicache-bench", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
            f"--size={size}", f"--ioengine={engine}", f"--iodepth={FIO_DEPTH}", "--direct=1",
            "--numjobs=1", "--thread=0", "--group_reporting", "--output-format=json",
        ]  # fmt: skip
        if rw == "write":
            cmd.append("--fallocate=none")
        c0 = _cpu(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        cpu = _cpu(resource.RUSAGE_CHILDREN) - c0
        if proc.returncode != 0:
            raise RuntimeError(
                f"fio {engine} rc={proc.returncode}: {proc.stderr.strip() or proc.stdout[-300:]}"
            )
        text = proc.stdout
        start = text.find("{")  # fio may print warnings before the JSON
        data = json.loads(text[start:])
        job = data["jobs"][0]
        if job.get("error"):
            raise RuntimeError(f"fio {engine} job error {job['error']}")
        side = job["read" if rw == "read" else "write"]
        bw = float(side["bw_bytes"])
        if bw <= 0:
            raise RuntimeError(f"fio {engine}: no bandwidth reported")
        io_bytes = float(side.get("io_bytes") or size)
        return {
            "gbps": bw / 1e9,
            "cpu_s_per_gb": cpu / (io_bytes / 1e9),
            "fio_usr_cpu_pct": job.get("usr_cpu"),
            "fio_sys_cpu_pct": job.get("sys_cpu"),
            "engine": engine,
        }


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
        "min_free": "64MiB",
        "verify_on_recover": verify_on_recover,
    }
    return cfg


def _ssd_stats(backend: Any) -> dict[str, Any]:
    return dict(backend.tier_stats()["tiers"].get("ssd", {}))


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
) -> dict[str, Any]:
    from hicache_mooncake.sglang_harness import page_snapshot

    total = pages * page_bytes
    out: dict[str, Any] = {"round": rnd}
    work = tempfile.mkdtemp(prefix=f"r{rnd}-{format_size(page_bytes)}-", dir=base)
    try:
        # fio: raw sequential O_DIRECT write + read of the same directory
        fpath = os.path.join(work, "fio.dat")
        out["fio_write"] = fio.run(fpath, "write", page_bytes, total)
        out["cache_dropped"] = drop_caches()
        out["fio_read"] = fio.run(fpath, "read", page_bytes, total)
        os.unlink(fpath)
        settle()

        # ours: SSD-only backend created by SGLang's factory, zero-copy v1 interface
        keys = [f"{rnd:04d}{i:060x}" for i in range(pages)]
        batches = [keys[i : i + batch] for i in range(0, pages, batch)]
        region = 64 << 20
        # headroom: the placement keeps the SSD at most ``ssd_fill`` full (whole-region
        # reclaim), and every entry carries a 4 KiB header
        capacity = (-(-total * 3 // 2) // region + 4) * region
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
            set_ok = [0]

            def ours_set() -> None:
                for b in batches:
                    set_ok[0] += sum(be.batch_set_v1(b, src[: len(b) * 64]))

            out["ours_set"] = _figures(total, *_measure(ours_set))
            out["ours_set"]["ok_pages"] = set_ok[0]
            out["cache_dropped"] = drop_caches() and out["cache_dropped"]
            be.batch_get_v1(warm, dst[: len(warm) * 64])
            get_ok = [0]

            def ours_get() -> None:
                for b in batches:
                    get_ok[0] += sum(be.batch_get_v1(b, dst[: len(b) * 64]))

            out["ours_get"] = _figures(total, *_measure(ours_get))
            out["ours_get"]["ok_pages"] = get_ok[0]
            n_last = len(batches[-1])
            same = [
                bool((a == b).all())
                for a, b in zip(
                    page_snapshot(host, src[: n_last * 64]),
                    page_snapshot(host, dst[: n_last * 64]),
                    strict=True,
                )
            ]
            out["ours_bytes_ok"] = all(same)
            entries = _ssd_stats(be).get("entries", 0)
        finally:
            be.close()

        # reopen of the full tier: construct the backend again (recovery scan), verify + headers only
        for label, verify in (("reopen_verify", True), ("reopen_headers_only", False)):
            drop_caches()
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
        shutil.rmtree(os.path.join(work, "ours"), ignore_errors=True)
        settle()

        # SGLang's file backend, driven the way its cache controller drives it
        if with_file:
            fdir = os.path.join(work, "file")
            fb = create_backend("file", {"file_storage_path": fdir}, host)
            fkeys = [[f"{k}f" for k in b] for b in batches]
            fwarm = [[f"warm{rnd}-{i}f" for i in range(2)]]
            generic_set(fb, host, fwarm, src)
            out["file_set"] = _figures(total, *_measure(lambda: generic_set(fb, host, fkeys, src)))
            out["cache_dropped"] = drop_caches() and out["cache_dropped"]
            generic_get(fb, host, fwarm, dst)
            out["file_get"] = _figures(total, *_measure(lambda: generic_get(fb, host, fkeys, dst)))
            hits = fb.batch_exists(fkeys[-1])
            out["file_pages_present_last_batch"] = hits
            with contextlib.suppress(Exception):
                fb.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        settle()
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
) -> dict[str, Any]:
    w = page_workload(page_bytes, total, batch_max, batch_bytes)
    host, src, dst, batch, pages = w.host, w.src, w.dst, w.batch, w.pages
    rounds = [
        _bench_round(fio, base, page_bytes, pages, batch, host, src, dst, r, with_file)
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
        "io_mode": rounds[0].get("io_mode"),
        "cache_drop_ok": all(r["cache_dropped"] for r in rounds),
        "ours_bytes_ok": all(r["ours_bytes_ok"] for r in rounds),
    }

    def med(path: tuple[str, str]) -> float:
        return statistics.median(float(r[path[0]][path[1]]) for r in rounds)

    legs = [
        ("fio_write", "fio", "set"),
        ("fio_read", "fio", "get"),
        ("ours_set", "ours", "set"),
        ("ours_get", "ours", "get"),
    ]
    if with_file:
        legs += [("file_set", "file", "set"), ("file_get", "file", "get")]
    for leg, who, op in legs:
        row[f"{who}_{op}_gbps"] = med((leg, "gbps"))
        row[f"{who}_{op}_cpu_s_per_gb"] = med((leg, "cpu_s_per_gb"))

    def ratio(a: str, b: str) -> float:
        return statistics.median(float(r[a]["gbps"]) / float(r[b]["gbps"]) for r in rounds)

    row["set_ratio_vs_fio"] = ratio("ours_set", "fio_write")
    row["get_ratio_vs_fio"] = ratio("ours_get", "fio_read")
    if with_file:
        row["get_ratio_vs_sglang_file"] = ratio("ours_get", "file_get")
        row["set_ratio_vs_sglang_file"] = ratio("ours_set", "file_set")
    for label in ("reopen_verify", "reopen_headers_only"):
        row[f"{label}_s"] = statistics.median(float(r[label]["seconds"]) for r in rounds)
        row[f"{label}_all_recovered"] = all(
            r[label]["entries_recovered"] == r[label]["entries_before"] for r in rounds
        )
    row["ours_set_failed_pages"] = max(pages - int(r["ours_set"]["ok_pages"]) for r in rounds)
    row["ours_get_missed_pages"] = max(pages - int(r["ours_get"]["ok_pages"]) for r in rounds)
    row["rounds"] = rounds
    del host
    return row


# ---------------------------------------------------------------------------------------- entry


def run(args: argparse.Namespace) -> int:
    if shutil.which("fio") is None:
        raise SystemExit("bench ssd needs fio (apt-get install fio)")
    total = parse_size(args.total)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    for size in sizes:
        if size not in PAGE_SHAPES:
            raise SystemExit(
                f"unsupported page size {format_size(size)}; choose from "
                f"{', '.join(map(format_size, PAGE_SHAPES))}"
            )
    fio = Fio()
    if args.row_json:  # child of the per-size isolation below: measure in the parent's directory
        row = _bench_size(
            fio,
            args.dir,
            sizes[0],
            total,
            args.repeats,
            args.batch,
            parse_size(args.batch_bytes),
            not args.no_file,
        )
        Path(args.row_json).write_text(json.dumps(row))
        return 0
    base_parent = args.dir or default_base_dir()
    os.makedirs(base_parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="hicache-bench-ssd-", dir=base_parent)
    rows = []
    try:
        for size in sizes:
            if args.in_process:
                row = _bench_size(
                    fio,
                    base,
                    size,
                    total,
                    args.repeats,
                    args.batch,
                    parse_size(args.batch_bytes),
                    not args.no_file,
                )
            else:
                row = _bench_size_in_child(args, base, size)
            rows.append(row)
            line = (
                f"{row['page_size']:>6}: fio w {row['fio_set_gbps']:.2f} r {row['fio_get_gbps']:.2f} GB/s"
                f" ({row['fio_engine']}) | ours set {row['ours_set_gbps']:.2f} get {row['ours_get_gbps']:.2f}"
                f" ({row['io_mode']}; CPU {row['ours_set_cpu_s_per_gb']:.2f}/{row['ours_get_cpu_s_per_gb']:.2f} s/GB)"
            )
            if not args.no_file:
                line += (
                    f" | file set {row['file_set_gbps']:.2f} get {row['file_get_gbps']:.2f}"
                    f" (CPU {row['file_set_cpu_s_per_gb']:.2f}/{row['file_get_cpu_s_per_gb']:.2f})"
                )
            line += f" | set/fio {row['set_ratio_vs_fio']:.2f} get/fio {row['get_ratio_vs_fio']:.2f}"
            if not args.no_file:
                line += f" get/file x{row['get_ratio_vs_sglang_file']:.1f}"
            line += f" | reopen {row['reopen_verify_s']:.2f}s (headers {row['reopen_headers_only_s']:.2f}s)"
            print(line, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    per_size = {r["page_size"]: r for r in rows}
    result: dict[str, Any] = {
        "benchmark": "ssd",
        "dir": base_parent,
        "fs_type": fs_type(base_parent),
        "total_bytes_per_round": total,
        "repeats": args.repeats,
        "fio_engine": rows[0]["fio_engine"] if rows else fio.engine,
        "fio_engines_failed": fio.tried,
        "fio_iodepth": FIO_DEPTH,
        "cache_drop_ok": all(r["cache_drop_ok"] for r in rows),
        "cpu_count": os.cpu_count(),
        "targets": {"vs_fio": TARGET_VS_FIO, "get_vs_sglang_file": TARGET_VS_FILE},
        "recover_bound_s": args.recover_bound_s,
        "recover_within_bound": all(r["reopen_verify_s"] <= args.recover_bound_s for r in rows),
        "note": "ratios are medians of per-round ratios (fio, ours and file measured side by side in "
        "each round); GB/s and CPU s/GB are medians; page cache dropped before every read",
    }
    for r in rows:
        key = r["page_size"]
        result[key] = {k: v for k, v in r.items() if k != "rounds"}
        result[key]["meets_targets"] = (
            r["set_ratio_vs_fio"] >= TARGET_VS_FIO
            and r["get_ratio_vs_fio"] >= TARGET_VS_FIO
            and (args.no_file or r["get_ratio_vs_sglang_file"] >= TARGET_VS_FILE)
        )
    result["per_page_size"] = list(per_size.values())
    for r in rows:
        print(
            f"{r['page_size']}: set_ratio_vs_fio {r['set_ratio_vs_fio']:.2f}  get_ratio_vs_fio "
            f"{r['get_ratio_vs_fio']:.2f}"
            + ("" if args.no_file else f"  get_ratio_vs_sglang_file {r['get_ratio_vs_sglang_file']:.1f}")
        )
    if args.json_out:
        write_json(args.json_out, result)
    if args.plot_out:
        _plot(rows, args.plot_out, not args.no_file)
    return 0


def _bench_size_in_child(args: argparse.Namespace, base: str, size: int) -> dict[str, Any]:
    """One page size in a fresh interpreter (same options), so sizes do not disturb each other."""
    out = os.path.join(base, f"row-{size}.json")
    cmd = [
        sys.executable, "-m", "hicache_mooncake", "bench", "ssd", "--sizes", str(size), "--total", args.total,
        "--repeats", str(args.repeats), "--batch", str(args.batch), "--batch-bytes", args.batch_bytes,
        "--dir", base, "--row-json", out,
    ]  # fmt: skip
    if args.no_file:
        cmd.append("--no-file")
    subprocess.run(cmd, check=True)
    row: dict[str, Any] = json.loads(Path(out).read_text())
    os.unlink(out)
    return row


def _plot(rows: list[dict[str, Any]], out: str, with_file: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    series = [("fio O_DIRECT (depth 16)", "fio"), ("hicache-mooncake SSD tier", "ours")]
    if with_file:
        series.append(("SGLang file", "file"))
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
        ax.set_title(f"{op} ({'write' if op == 'set' else 'read, page cache dropped'})")
        ax.set_xlabel("page size (labels: CPU s/GB)")
    axes[0].set_ylabel("GB/s (median)")
    axes[0].legend(fontsize=8)
    fig.suptitle("SSD tier through SGLang's interface vs fio and SGLang's file backend")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
