"""Measures the native core's figures quoted in docs/native.md (issue 49): FpTable bytes per
entry at 1M and 10M entries (random fingerprints, one value word), the slowest put of the fill
(batches of 1024 keys: a growth moves one segment, so it stays bounded whatever the size), batch
contains / prefix_len of 128 keys (p50 / p99 in microseconds, the Python wrapper included), and
xxh3 throughput through python-xxhash's dispatch vs the system libxxhash.

Run: ``python -m hicache_mooncake.tools.bench._native_measure [--entries 1000000,10000000]``;
prints one JSON object. Needs ~0.5 GB of RAM at 10M entries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numpy as np

from hicache_mooncake.native import (
    SYSTEM_LIBRARY,
    SYSTEM_SYMBOL,
    XXH3_SOURCE,
    FpTable,
    set_xxh3_library,
    xxh3_64,
)

BATCH = 128


FILL_BATCH = 1024


def fill(entries: int, seed: int) -> tuple[FpTable, np.ndarray, float]:
    """The table, its keys, and the slowest put of the fill in milliseconds."""
    rng = np.random.default_rng(seed)
    fps = np.unique(rng.integers(1, np.iinfo(np.uint64).max, size=entries + entries // 100, dtype=np.uint64))
    fps = rng.permutation(fps)[:entries]
    table = FpTable(value_words=1, capacity=1024)
    slowest = 0
    for start in range(0, fps.size, FILL_BATCH):
        chunk = fps[start : start + FILL_BATCH]
        t0 = time.perf_counter_ns()
        table.put(chunk, chunk)
        slowest = max(slowest, time.perf_counter_ns() - t0)
    return table, fps, slowest / 1e6


def percentiles_us(samples_ns: list[int]) -> dict[str, float]:
    arr = np.array(samples_ns, dtype=np.float64) / 1e3
    return {
        "p50_us": round(float(np.percentile(arr, 50)), 2),
        "p99_us": round(float(np.percentile(arr, 99)), 2),
    }


def batch_latency(table: FpTable, fps: np.ndarray, rounds: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    batches = [np.ascontiguousarray(fps[rng.integers(0, fps.size, size=BATCH)]) for _ in range(rounds)]
    out: dict[str, Any] = {}
    for name, call in (("contains", table.contains), ("prefix_len", table.prefix_len)):
        for b in batches[:50]:
            call(b)  # warm
        samples = []
        for b in batches:
            t0 = time.perf_counter_ns()
            call(b)
            samples.append(time.perf_counter_ns() - t0)
        out[name] = percentiles_us(samples)
    return out


def xxh3_gbps(size: int, repeat: int) -> float:
    buf = np.random.default_rng(1).integers(0, 256, size=size, dtype=np.uint8)
    xxh3_64(buf)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        xxh3_64(buf)
        best = min(best, time.perf_counter() - t0)
    return round(size / best / 1e9, 2)


def xxh3_sources(size: int, repeat: int) -> dict[str, Any]:
    result: dict[str, Any] = {"buffer_bytes": size}
    result["dispatch_gbps"] = xxh3_gbps(size, repeat)
    try:
        set_xxh3_library(SYSTEM_LIBRARY, SYSTEM_SYMBOL)
        result["system_lib_gbps"] = xxh3_gbps(size, repeat)
    except (OSError, ValueError) as exc:
        result["system_lib_gbps"] = None
        result["system_lib_error"] = str(exc)
    finally:
        set_xxh3_library(*XXH3_SOURCE)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", default="1000000,10000000", help="comma-separated table sizes")
    parser.add_argument("--rounds", type=int, default=3000, help="batches timed per call")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"machine": platform.node(), "cpu_count": os.cpu_count(), "tables": []}
    for entries in (int(x) for x in args.entries.split(",")):
        table, fps, slowest_put_ms = fill(entries, seed=entries)
        row: dict[str, Any] = {
            "entries": len(table),
            "capacity": table.capacity,
            "nbytes": table.nbytes,
            "bytes_per_entry": round(table.nbytes / len(table), 1),
            f"slowest_put_{FILL_BATCH}_ms": round(slowest_put_ms, 2),
        }
        row.update(batch_latency(table, fps, args.rounds, seed=3))
        report["tables"].append(row)
        del table, fps
    report["xxh3"] = xxh3_sources(64 << 20, 10)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
