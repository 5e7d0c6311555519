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

Private arenas start on a 2 MiB boundary and are backed by transparent huge pages where the
kernel gives them (``madvise(MADV_HUGEPAGE)``): a disk then takes a write from it (the demotion of
a page to the SSD tier) as a few long segments instead of one per 4 KiB page, which is what lets
an O_DIRECT write run at the disk's speed, so the SSD tier writes it in place
(``SsdEngine.register_memory``). Without THP it is ordinary page-aligned memory.

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

from hicache_mooncake.native.prefault import ArenaPrefault, populate_range
from hicache_mooncake.transport.arena_files import ArenaFile, ArenaSpec
from hicache_mooncake.transport.arena_header import ARENA_HEADER_SIZE

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value; Python 3.11 does not export it


class DramArena:
    def __init__(
        self,
        capacity: int,
        prefault: bool = True,
        shared: ArenaSpec | None = None,
        max_capacity: int | None = None,
        huge: bool = True,
    ) -> None:
        if capacity <= 0 or capacity % PAGE:
            raise ValueError(f"arena capacity must be a positive multiple of {PAGE}, got {capacity}")
        size = max(capacity, max_capacity or 0)
        if size % PAGE:
            raise ValueError(f"arena max capacity must be a multiple of {PAGE}, got {size}")
        if shared is not None and size > capacity:
            raise ValueError("a shared arena cannot grow: its size is fixed by its file (max_capacity)")
        self.capacity = capacity
        self.max_capacity = size
        self.file: ArenaFile | None = None
        self._prefault: ArenaPrefault | None = None
        if shared is not None:
            populate = mmap.MAP_POPULATE if prefault and hasattr(mmap, "MAP_POPULATE") else 0
            self.base = ARENA_HEADER_SIZE
            self.file = shared.create(capacity)
            try:
                self._map: mmap.mmap | None = mmap.mmap(
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
            return
        huge = huge and hasattr(mmap, "MADV_HUGEPAGE")
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if size > capacity:
            flags |= _MAP_NORESERVE
        self._map = mmap.mmap(-1, size + (HUGE_PAGE if huge else 0), flags=flags)
        raw = np.frombuffer(self._map, dtype=np.uint8)
        self.base = (-raw.ctypes.data) % HUGE_PAGE if huge else 0
        if huge:
            self._advise(mmap.MADV_HUGEPAGE, self.base, size)
        self.mapping = raw[: self.base + size]
        self.bytes = raw[self.base : self.base + size]
        if prefault:
            self._prefault = ArenaPrefault(self.bytes[:capacity])

    @property
    def shm_path(self) -> str:
        return self.file.path if self.file is not None else ""

    def _advise(self, option: int, start: int, length: int) -> bool:
        if self._map is None:
            return False
        try:
            self._map.madvise(option, start, length)
        except (OSError, ValueError):
            return False
        return True

    def memory(self) -> memoryview:
        """The slot bytes as one view (to register them with a transport or the SSD engine)."""
        return self.bytes.data

    def populate(self, offset: int, nbytes: int) -> None:
        """Fault slot bytes ``[offset, offset + nbytes)`` in now, the GIL released (a tier that
        grows), so sets do not pay for it."""
        if self._map is None or nbytes <= 0:
            return
        populate_range(self.bytes[offset : offset + nbytes])

    def wait_prefaulted(self, timeout: float) -> bool:
        """True once the attach-time prefault has finished (or there is none), within ``timeout``."""
        return self._prefault is None or self._prefault.wait(timeout)

    def release(self, offset: int, nbytes: int) -> None:
        """Give the memory of slot bytes ``[offset, offset + nbytes)`` back (no slot in it is in use;
        private arenas: a shared file's pages stay with the file)."""
        if self._map is None or nbytes <= 0 or self.file is not None:
            return
        if not self._advise(mmap.MADV_DONTNEED, self.base + offset, nbytes):
            log.debug("DRAM arena: cannot release %d bytes at %d", nbytes, offset)

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """A uint8 array over slot bytes ``[offset, offset + nbytes)`` (no copy)."""
        return self.bytes[offset : offset + nbytes]

    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        if self._map is None:
            return
        if self._prefault is not None:
            self._prefault.stop()  # it touches the mapping: it ends before the mapping does
        mapping, self._map = self._map, None
        self.bytes = self.mapping = np.empty(0, dtype=np.uint8)
        try:
            mapping.close()
        except BufferError:
            log.debug("DRAM arena still has exported views; it is released when they are collected")
        if self.file is not None:
            self.file.close()
