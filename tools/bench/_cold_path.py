"""What each step of a DRAM get costs the calling thread warm, and right after its caches were
evicted (issue 49; underscore: a helper, not a target).

A store call's copy streams megabytes through the core's caches; the Python that runs after it
(and before the next call's copy) finds its code and data evicted. Measured on the project's
2-core VM, a 16-page get of 64 KiB pages took 2-3x as long right after an eviction as warm, and
every step of it, however small warm (a lock, a ``Counter`` update, one torch call), cost 10-60 us
cold: the per-call cost is the number of distinct things a call touches, not its bytecodes. This
helper prints that table for the default config's DRAM tier on SGLang's own host pool, so a
change to the call path can be judged by it (``docs/performance-notes.md``).

Run: ``python -m hicache_mooncake.tools.bench._cold_path [--pages 16] [--page-kib 64]``; prints
one JSON object: per step the median microseconds warm and cold (each step timed alone, right
after a copy of ``--evict-mib`` MiB between two buffers of its own when cold).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

Step = Callable[[], object]


def _steps(backend: Any, dst: Any, hashes: list[str], pages: int, page_bytes: int) -> dict[str, Step]:
    """The steps of one ``batch_get_v1`` of ``hashes`` into host indices ``dst``, each callable
    alone (the whole call first)."""
    from hicache_mooncake.native import copy_slots, fingerprints
    from hicache_mooncake.sglang_adapter.host_pools.index_array import index_array
    from hicache_mooncake.tiers.policy.contexts import get_contexts

    state = backend.store.state
    dram, kv = state.layout.dram, backend._kv_pool()
    space = kv.keys
    keys = space.checked_keys(hashes)
    fps = fingerprints(keys)
    sizes = [page_bytes] * pages
    values = index_array(dst)
    ctxs = get_contexts(keys, sizes, 0)
    views = kv.affine_pages.views(values, pages, kv.index_limit)
    items = list(zip(keys, views, ctxs, strict=True))
    at = dram.slot_offsets()
    offsets = np.array([at[key] for key in keys], dtype=np.uint64)

    def placement_hit() -> None:
        with state.lock:
            state.placement.hit_in_dram_batch(keys, ctxs)

    return {
        "whole batch_get_v1": lambda: backend.batch_get_v1(hashes, dst),
        "key check and join (native)": lambda: space.checked_keys(hashes),
        "fingerprints (native)": lambda: fingerprints(keys),
        "host indices to numpy (one torch call)": lambda: index_array(dst),
        "page views (native)": lambda: kv.affine_pages.views(values, pages, kv.index_limit),
        "store call gate": lambda: state.gate.exit(state.gate.enter()),
        "access contexts": lambda: get_contexts(keys, sizes, 0),
        "placement and policy hit": placement_hit,
        "DRAM tier get (one native call: lookup, pins, copy, unpins)": lambda: dram.get_batch_into(
            items, fps=fps
        ),
        "the same copy alone (copy_slots)": lambda: copy_slots(dram._arena.bytes, offsets, views, False),
        "tenant count": lambda: state.tenant_count(keys[0], get_pages=pages, get_hit_pages=pages),
        "backend metrics (one queued update)": lambda: backend.metrics.record(
            "get", pages, 0, pages * page_bytes, 1e-3
        ),
        "nothing (the timer)": lambda: None,
    }


def _median_us(step: Step, evict: tuple[np.ndarray, np.ndarray] | None, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if evict is not None:
            np.copyto(evict[1], evict[0])
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(pages: int = 16, page_kib: int = 64, evict_mib: int = 64, repeats: int = 30) -> dict[str, Any]:
    """Per step ``{"warm_us", "cold_us"}`` (medians of ``repeats``), on a DRAM-only default config."""
    from hicache_mooncake.tools.bench._gil_workloads import HostPoolWorkers
    from hicache_mooncake.tools.bench._sglang_io import create_backend, page_workload
    from hicache_mooncake.tools.bench.gil import ours_config

    page = page_kib << 10
    spec = {"page_bytes": page, "batch_pages": pages, "batches": 1, "stored_batches": 1, "repeats": 1}
    work = page_workload(page, pages * page, pages, pages * page)
    with tempfile.TemporaryDirectory(prefix="hicache-cold-path-") as tmp:
        backend = create_backend("dynamic", ours_config("dram", spec, tmp), work.host)
        try:
            workers = HostPoolWorkers(backend, work.host, [work.src, work.dst], page, pages, 1, v1=True)
            if workers.store(_NoStamps()) != pages:
                raise RuntimeError("bench cold path: the pages were not stored")
            dst = work.dst[: pages * 64]
            if not all(backend.batch_get_v1(workers.stored[0], dst)):
                raise RuntimeError("bench cold path: a stored page was not served")
            source = np.ones(evict_mib << 20, np.uint8)
            evict = (source, np.empty_like(source))
            steps = _steps(backend, dst, workers.stored[0], pages, page)
            figures = {
                name: {
                    "warm_us": _median_us(step, None, repeats),
                    "cold_us": _median_us(step, evict, repeats),
                }
                for name, step in steps.items()
            }
        finally:
            backend.close()
    return {
        "pages": pages,
        "page_bytes": page,
        "evict_bytes": evict_mib << 20,
        "repeats": repeats,
        "steps": figures,
    }


class _NoStamps:
    """``HostPoolWorkers.store`` stamps pages for a later check; this helper reads no bytes back."""

    def stamp(self, region: Any, tags: list[bytes]) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--page-kib", type=int, default=64, choices=(64, 128, 256, 1024))
    parser.add_argument("--evict-mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(measure(args.pages, args.page_kib, args.evict_mib, args.repeats), indent=1))


if __name__ == "__main__":
    main()
