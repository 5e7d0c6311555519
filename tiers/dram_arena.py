"""A page-aligned, pre-faulted block of anonymous memory that the DRAM tier carves into slots.

Why mmap and not numpy/torch allocations: mmap memory starts on a 4 KiB boundary (numpy's large
arrays start 16 bytes into a page, and copies between buffers whose offsets differ mod 4096 run
at a third of memcpy speed), and MAP_POPULATE faults it in once in the kernel, so the first sets
do not pay 1-2 s of CPU per GiB for first touch.

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


class DramArena:
    def __init__(self, capacity: int, prefault: bool = True) -> None:
        if capacity <= 0 or capacity % PAGE:
            raise ValueError(f"arena capacity must be a positive multiple of {PAGE}, got {capacity}")
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if prefault and hasattr(mmap, "MAP_POPULATE"):
            flags |= mmap.MAP_POPULATE
        self.capacity = capacity
        self._map: mmap.mmap | None = mmap.mmap(-1, capacity, flags=flags)
        self.bytes: np.ndarray = np.frombuffer(self._map, dtype=np.uint8)

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
