"""SGLang's backup and prefetch threads at once on the SSD tier (the concurrency case of
``bench ssd``; underscore: a helper, not a ``bench`` target).

SGLang's cache controller calls a storage backend from a backup thread (``batch_set_v1`` of pages
leaving the GPU) and from prefetch threads (``batch_get_v1`` of pages a request will need), at
the same time. Here, on one SSD-only backend (made by SGLang's factory):

0. **steady state first** (untimed): throwaway pages are set until the tier has reclaimed a
   region, so every region has been written once; then the ``total`` bytes the prefetch threads
   will read. Every timed set below goes into a reused region, as in a tier in use: a cold fill
   makes the filesystem allocate and convert extents, whose journal commits stall every write for
   seconds on this project's VM, landing in the solo or the together leg at random. The tier is
   sized so that the reclaim of the timed sets takes only throwaway pages (region reclaim is
   oldest first, and they are older than the stored pages);
1. **alone**: one backup thread sets ``total`` bytes of new pages; one prefetch thread gets
   ``total`` bytes of stored pages (page cache dropped first);
2. **together**: one backup thread and two prefetch threads start at once and run until the
   first of them has done its share; each thread's rate is its bytes over the time inside its own
   calls; the aggregate is their sum;
3. **fio mixed**: one fio job writing over a laid-out file and one reading another at once
   (huge-page buffers when available), the device's own ceiling for the same mixed traffic.

Every page is stamped before its set and every page read back is compared, outside the timed
calls (a prefetch thread checks its batch after each call, a backup thread stamps before each).

The whole case (0-3, a fresh backend each time) runs ``repeats`` times (``bench ssd --repeats``):
each figure is the median of the runs, the ratios the median of each run's own ratio (each run's
threads and fio side by side), the page counts summed; ``runs`` keeps every run.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from typing import Any

from hicache_mooncake.tools.bench._fio import Fio
from hicache_mooncake.tools.bench._sglang_io import PageStamps, PageWorkload, create_backend

TARGET_AGGREGATE = 1.5
TARGET_BACKUP_SHARE = 0.7


class _Worker:
    """One SGLang thread: ``kind`` is ``backup`` (sets of new pages) or ``prefetch`` (gets of
    stored pages); stops at the end of its batches or when ``stop`` is set."""

    def __init__(
        self, kind: str, be: Any, batches: list[list[str]], region: Any, src: Any, stamps: PageStamps,
        tags: dict[str, int], stop: threading.Event, lock: threading.Lock,
    ) -> None:  # fmt: skip
        self.kind, self.be, self.batches, self.region, self.src = kind, be, batches, region, src
        self.stamps, self.tags, self.stop, self.lock = stamps, tags, stop, lock
        self.seconds = 0.0
        self.pages = 0
        self.bad = 0
        self.missed = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"bench-{kind}", daemon=True)

    def _run(self) -> None:
        try:
            for keys in self.batches:
                if self.stop.is_set():
                    break
                n = len(keys)
                if self.kind == "backup":
                    with self.lock:  # the stamp helpers share cached views: one thread at a time
                        self.stamps.stamp(self.region, [self.tags[k] for k in keys])
                    t0 = time.perf_counter()
                    res = self.be.batch_set_v1(keys, self.region[: n * 64])
                    self.seconds += time.perf_counter() - t0
                else:
                    t0 = time.perf_counter()
                    res = self.be.batch_get_v1(keys, self.region[: n * 64])
                    self.seconds += time.perf_counter() - t0
                    ok = [bool(r) for r in res]
                    with self.lock:
                        self.stamps.stamp(self.src, [self.tags[k] for k in keys])
                        self.bad += self.stamps.mismatches(self.src, self.region, n, ok)
                    res = ok
                done = sum(bool(r) for r in res)
                self.pages += done
                self.missed += n - done
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.error = e
        finally:
            self.stop.set()


def _run_threads(workers: list[_Worker]) -> None:
    for w in workers:
        w.thread.start()
    for w in workers:
        w.thread.join()
    for w in workers:
        if w.error is not None:
            raise RuntimeError(f"{w.kind} thread failed: {w.error!r}") from w.error


def _rate(w: _Worker, page_bytes: int) -> float:
    return w.pages * page_bytes / w.seconds / 1e9 if w.seconds else 0.0


def fio_mixed(fio: Fio, work: str, bs: int, size: int, drop: Any) -> dict[str, Any]:
    """One fio job writing over a laid-out file and one reading another, at once (O_DIRECT,
    depth 16): the steady-state counterpart of the tier's threads."""
    rfile, wfile = os.path.join(work, "fio-r.dat"), os.path.join(work, "fio-w.dat")
    from hicache_mooncake.tools.bench._disk import wait_disk_idle
    from hicache_mooncake.tools.bench._fio import CONFIGS

    fio.run(rfile, "write", bs, size, CONFIGS[0])
    fio.run(wfile, "write", bs, size, CONFIGS[0])
    drop()
    wait_disk_idle(work)
    cmd = [
        "fio", "--output-format=json", "--direct=1", f"--ioengine={fio.engine or 'psync'}",
        f"--iomem={fio.iomem}", f"--bs={bs}", "--iodepth=16", f"--size={size}", "--fallocate=none",
        "--name=w", f"--filename={wfile}", "--rw=write", "--name=r", f"--filename={rfile}", "--rw=read",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for f in (rfile, wfile):
        if os.path.exists(f):
            os.unlink(f)
    if proc.returncode != 0:
        return {"gbps": 0.0, "error": (proc.stderr or proc.stdout)[-300:]}
    jobs = json.loads(proc.stdout[proc.stdout.find("{") :])["jobs"]
    by = {j["jobname"]: j for j in jobs}
    w = float(by["w"]["write"]["bw_bytes"]) / 1e9
    r = float(by["r"]["read"]["bw_bytes"]) / 1e9
    # both jobs move ``size``; the aggregate is the bytes over the longer of the two runtimes
    wall = max(float(j["job_runtime"]) for j in jobs) / 1e3
    return {"gbps": 2 * size / wall / 1e9 if wall else 0.0, "write_gbps": w, "read_gbps": r}


PREFETCH_THREADS = 2
"""Prefetch threads of the together phase (each needs its own host region: ``extra_regions``)."""

MEDIAN_FIELDS = (
    "backup_alone_gbps", "prefetch_alone_gbps", "together_gbps", "together_backup_gbps",
    "aggregate_ratio_vs_one_thread", "backup_share_of_solo", "fio_mixed_gbps", "together_ratio_vs_fio_mixed",
)  # fmt: skip
SUM_FIELDS = ("bad_pages", "missed_pages", "failed_sets", "warmup_pages", "warmup_failed_sets")


def concurrency_case(fio: Fio, base: str, w: PageWorkload, drop: bool, repeats: int = 1) -> dict[str, Any]:
    """The case ``repeats`` times; medians and sums over the runs (module docstring)."""
    return summarize_runs([_one_run(fio, base, w, drop) for _ in range(max(1, repeats))])


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure per field over the runs of the case: medians of rates and of each run's ratios,
    sums of page counts, steady only if every run was; every run kept under ``runs``."""
    out: dict[str, Any] = {k: runs[0][k] for k in ("threads_together", "targets")}
    out.update({k: statistics.median(float(r[k]) for r in runs) for k in MEDIAN_FIELDS})
    out.update({k: sum(int(r[k]) for r in runs) for k in SUM_FIELDS})
    out["together_prefetch_gbps"] = [  # per prefetch thread, over the runs
        statistics.median(rates) for rates in zip(*(r["together_prefetch_gbps"] for r in runs), strict=True)
    ]
    out["steady_into_reused_regions"] = all(r["steady_into_reused_regions"] for r in runs)
    out["repeats"] = len(runs)
    out["runs"] = runs
    return out


def _one_run(fio: Fio, base: str, w: PageWorkload, drop: bool) -> dict[str, Any]:
    from hicache_mooncake.tools.bench._disk import drop_caches, wait_disk_idle
    from hicache_mooncake.tools.bench.ssd import _capacity, fill_until_reclaim, ssd_only_config

    host, batch, pages = w.host, w.batch, w.pages
    page_bytes = sum(int(s) for s in host.get_page_buffer_meta(w.src[:64])[1])
    total = pages * page_bytes
    work = tempfile.mkdtemp(prefix="concurrency-", dir=base)
    stamps = PageStamps(host)
    lock = threading.Lock()
    tags: dict[str, int] = {}
    out: dict[str, Any] = {"threads_together": {"backup": 1, "prefetch": PREFETCH_THREADS}}

    def keys(prefix: str, n: int) -> list[list[str]]:
        ks = [f"{prefix}{i:060x}" for i in range(n)]
        for k in ks:
            tags[k] = len(tags) + (7 << 56)
        return [ks[i : i + batch] for i in range(0, n, batch)]

    stored, alone_b, together_b = keys("s", pages), keys("b", pages), keys("t", pages)
    b1, prefetch_regions = w.src, w.extra[:PREFETCH_THREADS]
    p1 = prefetch_regions[0]
    # w.dst becomes the reference the prefetch threads check against: the backup source's bytes,
    # stamped per batch (never the backup's own source, which it is writing from meanwhile)
    for want, have in zip(stamps.parts(w.dst, batch), stamps.parts(b1, batch), strict=True):
        for a, b in zip(want, have, strict=True):
            a[:] = b
    try:
        out["fio_mixed"] = fio_mixed(fio, work, page_bytes, total, lambda: drop_caches(drop))
        wait_disk_idle(work)  # fio's files are trimmed before ours are timed
        capacity = _capacity(3 * total)  # stored + both timed sets, beside the throwaway pages
        be = create_backend("dynamic", ssd_only_config(os.path.join(work, "ours"), capacity), host)
        try:

            def worker(kind: str, batches: list[list[str]], region: Any, stop: threading.Event) -> _Worker:
                return _Worker(kind, be, batches, region, w.dst, stamps, tags, stop, lock)

            # steady state, then the pages the prefetch threads read (untimed), then each kind alone
            out.update(fill_until_reclaim(be, b1, batch, page_bytes, capacity))
            _run_threads([worker("backup", stored, b1, threading.Event())])
            wait_disk_idle(work)
            solo_b = worker("backup", alone_b, b1, threading.Event())
            _run_threads([solo_b])
            drop_caches(drop)
            solo_p = worker("prefetch", stored, p1, threading.Event())
            _run_threads([solo_p])
            # together: the prefetch threads split the stored pages between them
            drop_caches(drop)
            stop = threading.Event()
            tb = worker("backup", together_b, b1, stop)
            tp = [
                worker("prefetch", stored[i::PREFETCH_THREADS], region, stop)
                for i, region in enumerate(prefetch_regions)
            ]
            _run_threads([tb, *tp])
        finally:
            be.close()
    finally:
        stamps.close()
        shutil.rmtree(work, ignore_errors=True)
    alone = {"backup": _rate(solo_b, page_bytes), "prefetch": _rate(solo_p, page_bytes)}
    together = _rate(tb, page_bytes) + sum(_rate(t, page_bytes) for t in tp)
    one = max(alone.values())
    out.update(
        {
            "backup_alone_gbps": alone["backup"],
            "prefetch_alone_gbps": alone["prefetch"],
            "together_gbps": together,
            "together_backup_gbps": _rate(tb, page_bytes),
            "together_prefetch_gbps": [_rate(t, page_bytes) for t in tp],
            "aggregate_ratio_vs_one_thread": together / one if one else 0.0,
            "backup_share_of_solo": _rate(tb, page_bytes) / alone["backup"] if alone["backup"] else 0.0,
            "fio_mixed_gbps": out["fio_mixed"]["gbps"],
            "together_ratio_vs_fio_mixed": together / out["fio_mixed"]["gbps"]
            if out["fio_mixed"]["gbps"]
            else 0.0,
            "bad_pages": solo_p.bad + sum(t.bad for t in tp),
            "missed_pages": solo_p.missed + sum(t.missed for t in tp),
            "failed_sets": solo_b.missed + tb.missed + out["warmup_failed_sets"],
            "targets": {"aggregate_vs_one_thread": TARGET_AGGREGATE, "backup_share": TARGET_BACKUP_SHARE},
        }
    )
    return out
