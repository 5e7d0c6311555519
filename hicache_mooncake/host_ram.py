"""How much memory this process may use: the host's RAM, capped by the cgroup (container) limit,
and what is available right now. Used to refuse a DRAM tier that cannot exist before anything is
allocated, and to warn about one that may not fit now."""

from __future__ import annotations

import os
from pathlib import Path


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) is not a number


def memory_limit() -> int:
    """Physical RAM, or the cgroup's memory limit when lower (v2, then v1)."""
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        limit = _read_int(path)
        if limit is not None and 0 < limit < phys:
            return limit
    return phys


def memory_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where the kernel does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
