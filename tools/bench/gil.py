"""What SGLang's scheduler thread loses to our threads: its GIL-wait share beside backup + prefetch.

How it measures, its legs and what to read into the figures: docs/benchmarks-notes.md
(``bench gil`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from hicache_mooncake.commands import UsageError
from hicache_mooncake.sizes import format_size, parse_size
from hicache_mooncake.tools.bench._disk import add_dir_argument, default_work_dir
from hicache_mooncake.tools.bench._sglang_io import PAGE_SHAPES
from hicache_mooncake.tools.results_json import write_json

REQUIRES = ("torch", "sglang")  # optional modules, checked by ``bench`` before any work

LEGS = ("dram", "dram_ssd", "file", "mooncake")
TARGET_GIL_WAIT_SHARE = 0.05
PREFETCH_THREADS = 2
_MOONCAKE_MODULE = "hicache_mooncake.tools.bench._gil_mooncake"
_SLAB = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dir_argument(parser)
    parser.add_argument("--size", default="1MiB", help="page size (64KiB .. 8MiB; default 1MiB)")
    parser.add_argument("--batch", type=int, default=16, help="pages per call (default 16)")
    parser.add_argument(
        "--batches", type=int, default=32, help="calls per thread in each timed phase (default 32)"
    )
    parser.add_argument(
        "--stored-batches", type=int, default=4, help="batches of stored pages the prefetch threads read"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each leg (medians reported)")
    parser.add_argument(
        "--busy-alone-s", type=float, default=1.0, help="seconds the busy loop runs alone (its baseline)"
    )
    parser.add_argument("--legs", default=",".join(LEGS), help=f"comma separated, of: {', '.join(LEGS)}")


def _spec(args: argparse.Namespace, page: int) -> dict[str, Any]:
    return {
        "page_bytes": page,
        "batch_pages": args.batch,
        "batches": args.batches,
        "stored_batches": args.stored_batches,
        "repeats": args.repeats,
        "busy_alone_s": args.busy_alone_s,
    }


def _slab(page: int, dram: int) -> int:
    return _SLAB if dram >= 2 * _SLAB else max(2 * page, 1 << 20)


def ours_config(leg: str, spec: dict[str, Any], work: str) -> dict[str, Any]:
    """The default preset, in this process (no host cache, no endpoints): ``dram`` holds every
    page the leg writes; ``dram_ssd`` has DRAM for half the stored pages (and four calls' sets) and an
    SSD tier in ``work``, so gets are served from both tiers and sets demote to the SSD."""
    import yaml

    from hicache_mooncake.presets import preset_path

    cfg = yaml.safe_load(preset_path("default").read_text())
    cfg["tiers"]["host_cache"] = "off"
    cfg["metrics"] = {**cfg.get("metrics", {}), "port": None}
    cfg["admin"] = {**cfg.get("admin", {}), "port": None}
    page, batch = spec["page_bytes"], spec["batch_pages"]
    stored = spec["stored_batches"] * batch * page
    written = stored + spec["repeats"] * 2 * spec["batches"] * batch * page
    if leg == "dram":
        slab = _slab(page, written)
        cfg["tiers"]["dram"].update(capacity=(-(-(written * 5 // 4) // slab) + 1) * slab, slab_size=slab)
        cfg["tiers"].pop("ssd", None)
        return cfg
    dram = stored // 2 + 4 * batch * page  # half the stored pages, and room for four calls' sets
    slab = _slab(page, dram)
    cfg["tiers"]["dram"].update(capacity=max(2 * slab, dram // slab * slab), slab_size=slab)
    region = _SLAB
    cfg["tiers"]["ssd"].update(
        enabled=True,
        path=os.path.join(work, "ssd"),
        capacity=(-(-written * 3 // 2) // region + 4) * region,
        region_size=region,
        min_free="64MiB",
    )
    return cfg


def _host_pool_leg(leg: str, spec: dict[str, Any], work: str) -> dict[str, Any]:
    from hicache_mooncake.tools.bench._gil_meter import measure_leg
    from hicache_mooncake.tools.bench._gil_mooncake import summarize
    from hicache_mooncake.tools.bench._gil_workloads import HostPoolWorkers
    from hicache_mooncake.tools.bench._sglang_io import PageStamps, create_backend, page_workload

    page, batch, stored = spec["page_bytes"], spec["batch_pages"], spec["stored_batches"]
    w = page_workload(page, stored * batch * page, batch, batch * page, extra_regions=PREFETCH_THREADS)
    stamps = PageStamps(w.host)
    if leg == "file":
        backend = create_backend("file", {"file_storage_path": os.path.join(work, "file")}, w.host)
    else:
        backend = create_backend("dynamic", ours_config(leg, spec, work), w.host)
    try:
        workers = HostPoolWorkers(
            backend, w.host, [w.src, w.dst, *w.extra], page, batch, stored, v1=leg != "file"
        )
        stored_ok = workers.store(stamps)
        runs = [
            measure_leg(workers, spec["batches"], spec["busy_alone_s"], first_backup=r * 2 * spec["batches"])
            for r in range(spec["repeats"])
        ]
        served, bad = workers.verify(stamps)
        out = summarize(runs)
        out.update(stored_pages=stored_ok, pages_verified=served, bad_pages=bad)
        if leg != "file":
            tiers = backend.tier_stats().get("tiers", {})
            out["tier_hits"] = {
                name: t["hits"] for name, t in tiers.items() if isinstance(t, dict) and "hits" in t
            }
    finally:
        stamps.close()
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return out


def mooncake_ready() -> str | None:
    """Why the Mooncake leg cannot run here, or None."""
    try:
        import mooncake.store  # noqa: F401
    except Exception as exc:
        return f"Mooncake Store's client is not importable ({exc}); bench remote --pip-install-mooncake installs it"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed: the master must run in a private network namespace"
    if os.geteuid() != 0:
        return "a private network namespace (unshare -n) needs root"
    return None


def _mooncake_leg(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    why = mooncake_ready()
    if why:
        return {"not_measured": why}
    unshare = shutil.which("unshare") or "unshare"
    cmd = [unshare, "-n", "--", sys.executable, "-m", _MOONCAKE_MODULE, json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the Mooncake leg did not finish within {timeout_s:.0f} s"}
    for line in proc.stdout.splitlines():
        kind, _, payload = line.partition(" ")
        if kind == "GIL_RESULT":
            result: dict[str, Any] = json.loads(payload)
            return result
        if kind == "GIL_ERROR":
            return {"error": json.loads(payload)["error"]}
    return {"error": f"the Mooncake leg exited with {proc.returncode}: {proc.stderr[-1500:]}"}


def measure(
    legs: list[str], spec: dict[str, Any], work: str, mooncake_timeout_s: float = 600
) -> dict[str, Any]:
    """Every leg of ``legs`` in this run, in order; the result as ``bench gil --json`` writes it."""
    load = os.getloadavg()  # at the start, as the performance page reads it
    out: dict[str, Any] = {}
    for leg in legs:
        if leg == "mooncake":
            out[leg] = _mooncake_leg(spec, mooncake_timeout_s)
        else:
            out[leg] = _host_pool_leg(leg, spec, work)
        _print_leg(leg, out[leg])
    ours = [out[leg]["gil_wait_share"] for leg in ("dram", "dram_ssd") if leg in out]
    ours_per_gb = [out[leg]["gil_wait_ms_per_gb"] for leg in ("dram", "dram_ssd") if leg in out]
    mc = out.get("mooncake", {}).get("gil_wait_share")
    result: dict[str, Any] = {
        "benchmark": "gil",
        **spec,
        "page_size": format_size(spec["page_bytes"]),
        "threads": {"busy": 1, "backup": 1, "prefetch": PREFETCH_THREADS},
        "switch_interval_s": sys.getswitchinterval(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "target_gil_wait_share": TARGET_GIL_WAIT_SHARE,
        "gil_wait_share": max(ours) if ours else None,
        "gil_wait_share_mooncake": mc,
        "gil_wait_ms_per_gb": max(ours_per_gb) if ours_per_gb else None,
        "gil_wait_ms_per_gb_mooncake": out.get("mooncake", {}).get("gil_wait_ms_per_gb"),
        "legs": out,
        "note": "gil_wait_share: the busy Python thread's time blocked on the GIL (wall - run - run-queue "
        "wait, from the kernel's /proc/self/task/<tid>/schedstat) over its run + blocked time (the time "
        "it was not waiting for a core, cpu_queue_share of the wall), in the window the backup and "
        "prefetch threads run beside it; medians of the repeats; the headline is the worse of ours "
        "(dram, dram_ssd); gil_wait_ms_per_gb: the busy thread's GIL-wait milliseconds per GB the leg moved "
        "beside it (threads at full speed: a leg that moves more bytes takes the GIL more often)",
    }
    result["meets_target"] = (
        bool(ours) and max(ours) <= TARGET_GIL_WAIT_SHARE and (mc is None or max(ours) <= mc)
    )
    return result


def _print_leg(leg: str, row: dict[str, Any]) -> None:
    if "gil_wait_share" not in row:
        print(f"{leg:>9}: not measured: {row.get('not_measured') or row.get('error')}", flush=True)
        return
    print(
        f"{leg:>9}: gil_wait_share {row['gil_wait_share']:.3f} (alone {row['gil_wait_share_alone']:.3f}, "
        f"cpu queue {row['cpu_queue_share']:.2f}; {row['gil_wait_ms_per_gb']:.1f} ms per GB moved) | "
        f"busy loop {row['busy_ratio_vs_alone']:.2f} of alone | "
        f"I/O {row['io_gbps']:.2f} GB/s, {row['io_ratio_vs_alone']:.2f} of alone "
        f"({row['io_gbps_alone']:.2f}) | failed sets {row['failed_sets']}, missed gets {row['missed_gets']}, "
        f"bad {row.get('bad_pages', 0)}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    legs = [leg for leg in args.legs.split(",") if leg]
    unknown = [leg for leg in legs if leg not in LEGS]
    if unknown or not legs:
        raise UsageError(f"--legs: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(LEGS)}")
    page = parse_size(args.size)
    if page not in PAGE_SHAPES:
        raise UsageError(
            f"--size {args.size}: unsupported page size; choose from {', '.join(map(format_size, PAGE_SHAPES))}"
        )
    for name in ("batch", "batches", "stored_batches", "repeats"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.busy_alone_s <= 0:
        raise UsageError(f"--busy-alone-s must be > 0, got {args.busy_alone_s}")
    base = args.dir or default_work_dir()
    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hicache-bench-gil-", dir=base)
    try:
        result = measure(legs, _spec(args, page), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    share = result["gil_wait_share"]
    if share is not None:
        print(
            f"gil_wait_share {share:.3f} (target <= {TARGET_GIL_WAIT_SHARE}"
            + (
                f", Mooncake's client {result['gil_wait_share_mooncake']:.3f}"
                if result["gil_wait_share_mooncake"] is not None
                else ""
            )
            + f"): {'met' if result['meets_target'] else 'not met'}"
        )
    if args.json_out:
        write_json(args.json_out, result)
    return 0
