"""A page-aligned DRAM arena (``mmap``) and a first-fit allocator over it.

The arena is anonymous memory, or a file in a shared-memory directory (``ArenaFile``) when
same-host clients should map it (the ``local`` transport). Its first page is reserved for the
``ArenaHeader`` (written into the file by ``ArenaFile``); objects live in ``[data_offset, size)``.
Allocation is first fit over a sorted free list with coalescing on free; every extent is a multiple
of ``ALIGN`` (4 KiB) so object bodies start page-aligned + 64. The allocator is not thread-safe:
the node's store holds its lock around it.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap

from .arena_files import ArenaFile
from .arena_header import ARENA_HEADER_SIZE

ALIGN = 4096


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def arena_size(capacity: int) -> int:
    """Bytes of the mapping that holds ``capacity`` bytes of objects (header page included)."""
    return ARENA_HEADER_SIZE + align_up(capacity)


class Arena:
    """A mapping of ``arena_size(capacity)`` bytes: anonymous, or the node's ``ArenaFile`` (whose
    size and header the file already carries). ``close`` unmaps and removes the file."""

    def __init__(self, capacity: int, shm: ArenaFile | None = None) -> None:
        if capacity < ALIGN:
            raise ValueError(f"arena size {capacity} is below one page ({ALIGN})")
        self.size = arena_size(capacity)
        self.data_offset = ARENA_HEADER_SIZE
        self.capacity = self.size - self.data_offset
        self._shm = shm
        self.shm_path = shm.path if shm is not None else None
        if shm is not None:
            self._mm = mmap.mmap(shm.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        else:
            self._mm = mmap.mmap(-1, self.size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self._mm)

    def close(self) -> None:
        self.view.release()
        # a send may still hold a slice; the mapping then goes with the process
        with contextlib.suppress(BufferError):
            self._mm.close()
        if self._shm is not None:
            self._shm.close()


class Allocator:
    """First-fit extents in ``[base, base + capacity)`` in multiples of ``align``; ``alloc``
    returns an offset or ``None``."""

    def __init__(self, capacity: int, base: int = 0, align: int = ALIGN) -> None:
        self.capacity = capacity
        self.align = align
        self._starts: list[int] = [base]
        self._sizes: dict[int, int] = {base: capacity}
        self.used = 0

    def alloc(self, size: int) -> int | None:
        size = align_up(size, self.align)
        for i, start in enumerate(self._starts):
            free = self._sizes[start]
            if free >= size:
                del self._sizes[start]
                if free == size:
                    self._starts.pop(i)
                else:
                    self._starts[i] = start + size
                    self._sizes[start + size] = free - size
                self.used += size
                return start
        return None

    def free(self, offset: int, size: int) -> None:
        size = align_up(size, self.align)
        self.used -= size
        i = bisect.bisect_left(self._starts, offset)
        # merge with the next extent
        if i < len(self._starts) and self._starts[i] == offset + size:
            size += self._sizes.pop(self._starts[i])
            self._starts.pop(i)
        # merge with the previous extent
        if i > 0:
            prev = self._starts[i - 1]
            if prev + self._sizes[prev] == offset:
                self._sizes[prev] += size
                return
        self._starts.insert(i, offset)
        self._sizes[offset] = size

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used

    def largest_free(self) -> int:
        return max(self._sizes.values(), default=0)
