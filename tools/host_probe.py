"""What the machine under a benchmark could do while it ran: its CPU model and two reference
speeds (a pure-Python loop, a memcpy), measured just before and just after the target.

Why: this project's VMs move between hosts. Within one day the same VM ran a memcpy of 64 KiB
pages at 13 and at 22 GB/s and a Python busy loop at 56M and 110M loops/s, so two result files
from different hours are not comparable by their GB/s alone; with these figures beside them a
reader sees which host each run had (and whether it changed during the run: ``before`` against
``after``). The ratios the benchmarks report (against memcpy, fio, ``file``, Mooncake measured in
the same run) stay the figures to compare; this block says what the absolute ones rest on.

Each speed is the median of a few short runs (about 0.1 s each, 0.6-0.8 s per probe in all).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

_LOOP = 2_000_000  # iterations per Python-loop run (~20-40 ms on this project's VMs)
_COPY_BYTES = 64 << 20  # per memcpy run: larger than the last-level caches of these hosts
_RUNS = 5


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name as the kernel reports it (``platform.processor()`` where there is no
    ``/proc/cpuinfo``; ``"unknown"`` when neither says)."""
    try:
        for line in Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def python_loops_per_s(runs: int = _RUNS, loop: int = _LOOP) -> float:
    """Iterations per second of an empty ``for`` loop (what a pure-Python thread gets done)."""
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(loop):
            pass
        rates.append(loop / (time.perf_counter() - start))
    return statistics.median(rates)


def memcpy_gbps(runs: int = _RUNS, nbytes: int = _COPY_BYTES) -> float:
    """GB/s (1e9 bytes) of one contiguous copy of ``nbytes`` between two buffers touched first
    (numpy's copy: a memcpy, no page faults inside the timing)."""
    import numpy as np

    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    np.copyto(dst, src)
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        np.copyto(dst, src)
        rates.append(nbytes / (time.perf_counter() - start) / 1e9)
    return statistics.median(rates)


def speeds() -> dict[str, float]:
    """One measurement of the reference speeds, and the load average when it was taken."""
    return {
        "python_loops_per_s": python_loops_per_s(),
        "memcpy_gbps": memcpy_gbps(),
        "load_average_1m": os.getloadavg()[0],
    }


def host_block(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The ``host`` field of a result file: the CPU and the speeds around the run."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "before": before, "after": after}
