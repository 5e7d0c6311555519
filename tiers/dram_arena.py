"""A page-aligned, pre-faulted block of anonymous memory that the DRAM tier carves into slots.

Why mmap and not numpy/torch allocations: mmap memory starts on a 4 KiB boundary (numpy's large
arrays start 16 bytes into a page, and copies between buffers whose offsets differ mod 4096 run
at a third of memcpy speed), and MAP_POPULATE faults it in once in the kernel, so the first sets
do not pay 1-2 s of CPU per GiB for first touch.

With ``huge`` (the default) the block starts on a 2 MiB boundary and is backed by transparent
huge pages where the kernel gives them (``madvise(MADV_HUGEPAGE)``): a disk then takes a write
from it (the demotion of a page to the SSD tier) as a few long segments instead of one per 4 KiB
page, which is what lets an O_DIRECT write run at the disk's speed, so the SSD tier writes it in
place (``SsdEngine.register_memory``). Without THP it is ordinary page-aligned memory.

Invariant: ``view(offset, n)`` never outlives ``close()`` in correct callers; ``close`` releases
the mapping as soon as no exported view remains (a view still held by a caller keeps it alive
until garbage collection rather than crashing).
"""

from __future__ import annotations

import logging
import mmap

import numpy as np

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
_MADV_POPULATE_WRITE = 23  # Linux 5.14+


class DramArena:
    def __init__(self, capacity: int, prefault: bool = True, huge: bool = True) -> None:
        if capacity <= 0 or capacity % PAGE:
            raise ValueError(f"arena capacity must be a positive multiple of {PAGE}, got {capacity}")
        self.capacity = capacity
        advise = getattr(mmap.mmap, "madvise", None)
        if huge and advise is not None and hasattr(mmap, "MADV_HUGEPAGE"):
            self._map: mmap.mmap | None = mmap.mmap(
                -1, capacity + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            )
            raw = np.frombuffer(self._map, dtype=np.uint8)
            start = (-raw.ctypes.data) % HUGE_PAGE
            self._advise(mmap.MADV_HUGEPAGE, start, capacity)
            if prefault and not self._advise(_MADV_POPULATE_WRITE, start, capacity):
                raw[start : start + capacity : PAGE] = 0  # first touch, page by page
            self.bytes: np.ndarray = raw[start : start + capacity]
        else:
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            if prefault and hasattr(mmap, "MAP_POPULATE"):
                flags |= mmap.MAP_POPULATE
            self._map = mmap.mmap(-1, capacity, flags=flags)
            self.bytes = np.frombuffer(self._map, dtype=np.uint8)

    def _advise(self, option: int, start: int, length: int) -> bool:
        assert self._map is not None
        try:
            self._map.madvise(option, start, length)
        except OSError:
            return False
        return True

    def memory(self) -> memoryview:
        """The whole arena as one byte view (to register it with a transport or the SSD engine)."""
        return self.bytes.data

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """A uint8 array over ``[offset, offset + nbytes)`` (no copy)."""
        return self.bytes[offset : offset + nbytes]

    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        if self._map is None:
            return
        mapping, self._map = self._map, None
        self.bytes = np.empty(0, dtype=np.uint8)
        try:
            mapping.close()
        except BufferError:
            log.debug("DRAM arena still has exported views; it is released when they are collected")
