"""A page-aligned, pre-faulted block of memory that the DRAM tier carves into slots: anonymous, or
a shared-memory arena file (the host cache and memory nodes: same-host clients map it).

Why mmap and not numpy/torch allocations: mmap memory starts on a 4 KiB boundary (numpy's large
arrays start 16 bytes into a page, and copies between buffers whose offsets differ mod 4096 run
at a third of memcpy speed), and MAP_POPULATE faults it in once in the kernel, so the first sets
do not pay 1-2 s of CPU per GiB for first touch.

Shared: the file is created, proven and locked by ``transport.arena_files`` from the server's
``ArenaSpec`` (its first page holds the ``ArenaHeader``; slot offsets start after it, so bodies stay
page-aligned in every process that maps the file). ``base`` is where slot offset 0 lies in the
mapping; ``view`` takes slot offsets, ``mapping`` is the whole mapping (wire offsets index it).

Resizing (private arenas only; a shared arena's size is part of its file and is fixed): the
mapping covers ``max_capacity`` bytes (the most the tier may grow to); beyond the starting
``capacity`` it is reserved without commitment (``MAP_NORESERVE``) and faulted in only when the
tier grows (``populate``). ``release`` gives a range's memory back to the kernel (the addresses stay
valid and read as zeros until written again).

Invariant: ``view(offset, n)`` never outlives ``close()`` in correct callers; ``close`` releases
the mapping as soon as no exported view remains (a view still held by a caller keeps it alive
until garbage collection rather than crashing). A shared arena's file is unlinked at ``close``.
"""

from __future__ import annotations

import logging
import mmap

import numpy as np

from hicache_mooncake.transport.arena_files import ArenaFile, ArenaSpec
from hicache_mooncake.transport.arena_header import ARENA_HEADER_SIZE

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value; Python 3.11 does not export it
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14


class DramArena:
    def __init__(
        self,
        capacity: int,
        prefault: bool = True,
        shared: ArenaSpec | None = None,
        max_capacity: int | None = None,
    ) -> None:
        if capacity <= 0 or capacity % PAGE:
            raise ValueError(f"arena capacity must be a positive multiple of {PAGE}, got {capacity}")
        size = max(capacity, max_capacity or 0)
        if size % PAGE:
            raise ValueError(f"arena max capacity must be a multiple of {PAGE}, got {size}")
        if shared is not None and size > capacity:
            raise ValueError("a shared arena cannot grow: its size is fixed by its file (max_capacity)")
        populate = mmap.MAP_POPULATE if prefault and hasattr(mmap, "MAP_POPULATE") else 0
        self.capacity = capacity
        self.max_capacity = size
        self.file: ArenaFile | None = None
        if shared is None:
            self.base = 0
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            flags |= _MAP_NORESERVE if size > capacity else populate
            self._map: mmap.mmap | None = mmap.mmap(-1, size, flags=flags)
        else:
            self.base = ARENA_HEADER_SIZE
            self.file = shared.create(capacity)
            try:
                self._map = mmap.mmap(
                    self.file.fd,
                    self.base + capacity,
                    flags=mmap.MAP_SHARED | populate,
                    prot=mmap.PROT_READ | mmap.PROT_WRITE,
                )
            except BaseException:
                self.file.close()
                raise
        self.mapping: np.ndarray = np.frombuffer(self._map, dtype=np.uint8)
        self.bytes: np.ndarray = self.mapping[self.base :]
        if prefault and size > capacity:
            self.populate(0, capacity)

    @property
    def shm_path(self) -> str:
        return self.file.path if self.file is not None else ""

    def populate(self, offset: int, nbytes: int) -> None:
        """Fault slot bytes ``[offset, offset + nbytes)`` in now (a tier that grows), so sets do not
        pay for it."""
        if self._map is None or nbytes <= 0:
            return
        try:
            self._map.madvise(_MADV_POPULATE_WRITE, self.base + offset, nbytes)
        except (OSError, ValueError):  # an older kernel: touch one byte per page
            self.bytes[offset : offset + nbytes : PAGE] = self.bytes[offset : offset + nbytes : PAGE]

    def release(self, offset: int, nbytes: int) -> None:
        """Give the memory of slot bytes ``[offset, offset + nbytes)`` back (no slot in it is in use;
        private arenas: a shared file's pages stay with the file)."""
        if self._map is None or nbytes <= 0 or self.file is not None:
            return
        try:
            self._map.madvise(mmap.MADV_DONTNEED, offset, nbytes)
        except (OSError, ValueError) as exc:
            log.debug("DRAM arena: cannot release %d bytes at %d: %s", nbytes, offset, exc)

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """A uint8 array over slot bytes ``[offset, offset + nbytes)`` (no copy)."""
        return self.bytes[offset : offset + nbytes]

    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        if self._map is None:
            return
        mapping, self._map = self._map, None
        self.bytes = self.mapping = np.empty(0, dtype=np.uint8)
        try:
            mapping.close()
        except BufferError:
            log.debug("DRAM arena still has exported views; it is released when they are collected")
        if self.file is not None:
            self.file.close()
