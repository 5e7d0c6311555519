"""A page-aligned, pre-faulted block of anonymous memory that the DRAM tier carves into slots.

Why mmap and not numpy/torch allocations: mmap memory starts on a 4 KiB boundary (numpy's large
arrays start 16 bytes into a page, and copies between buffers whose offsets differ mod 4096 run
at a third of memcpy speed), and MAP_POPULATE faults it in once in the kernel, so the first sets
do not pay 1-2 s of CPU per GiB for first touch.

Resizing: the mapping covers ``max_capacity`` bytes (the most the tier may grow to); beyond the
starting ``capacity`` it is reserved without commitment (``MAP_NORESERVE``) and faulted in only
when the tier grows (``populate``). ``release`` gives a range's memory back to the kernel (the
addresses stay valid and read as zeros until written again).

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
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value; Python 3.11 does not export it
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14


class DramArena:
    def __init__(self, capacity: int, prefault: bool = True, max_capacity: int | None = None) -> None:
        if capacity <= 0 or capacity % PAGE:
            raise ValueError(f"arena capacity must be a positive multiple of {PAGE}, got {capacity}")
        size = max(capacity, max_capacity or 0)
        if size % PAGE:
            raise ValueError(f"arena max capacity must be a multiple of {PAGE}, got {size}")
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if size > capacity:
            flags |= _MAP_NORESERVE
        elif prefault and hasattr(mmap, "MAP_POPULATE"):
            flags |= mmap.MAP_POPULATE
        self.capacity = capacity
        self.max_capacity = size
        self._map: mmap.mmap | None = mmap.mmap(-1, size, flags=flags)
        self.bytes: np.ndarray = np.frombuffer(self._map, dtype=np.uint8)
        if prefault and size > capacity:
            self.populate(0, capacity)

    def populate(self, offset: int, nbytes: int) -> None:
        """Fault ``[offset, offset + nbytes)`` in now (a tier that grows), so sets do not pay for it."""
        if self._map is None or nbytes <= 0:
            return
        try:
            self._map.madvise(_MADV_POPULATE_WRITE, offset, nbytes)
        except (OSError, ValueError):  # an older kernel: touch one byte per page
            self.bytes[offset : offset + nbytes : PAGE] = self.bytes[offset : offset + nbytes : PAGE]

    def release(self, offset: int, nbytes: int) -> None:
        """Give the memory of ``[offset, offset + nbytes)`` back (no slot in it is in use)."""
        if self._map is None or nbytes <= 0:
            return
        try:
            self._map.madvise(mmap.MADV_DONTNEED, offset, nbytes)
        except (OSError, ValueError) as exc:
            log.debug("DRAM arena: cannot release %d bytes at %d: %s", nbytes, offset, exc)

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
