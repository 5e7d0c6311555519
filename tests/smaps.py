"""What this process has resident of one of its mappings (``/proc/self/smaps``), for tests that
check memory was faulted in ahead of use."""

from __future__ import annotations

import ctypes
from typing import Any


def address_of(buffer: Any) -> int:
    """The first byte's address of a writable buffer (an ``mmap``, a ``bytearray``)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def resident_kib(address: int) -> int:
    """Rss, in KiB, of this process's mapping that starts at ``address``."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and int(head.split("-")[0], 16) == address:
            return next(int(x.split()[1]) for x in lines[i + 1 :] if x.startswith("Rss:"))
    raise AssertionError(f"no mapping at {address:#x}")
