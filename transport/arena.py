"""A page-aligned DRAM arena (``mmap``) and a first-fit allocator over it.

The arena is anonymous memory, or a file in ``/dev/shm`` when same-host clients should map it
(the ``local`` transport). Allocation is first fit over a sorted free list with coalescing on
free; every extent is a multiple of ``ALIGN`` (4 KiB) so object bodies start page-aligned + 64.
The allocator is not thread-safe: the node's store holds its lock around it.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os

ALIGN = 4096


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


class Arena:
    """``size`` bytes of mapped memory; ``shm_path`` set -> backed by that (new) file."""

    def __init__(self, size: int, shm_path: str | None = None) -> None:
        if size < ALIGN:
            raise ValueError(f"arena size {size} is below one page ({ALIGN})")
        self.size = align_up(size)
        self.shm_path = shm_path
        if shm_path:
            fd = os.open(shm_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, self.size)
                self._mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        else:
            self._mm = mmap.mmap(-1, self.size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self._mm)

    def close(self) -> None:
        self.view.release()
        # a send may still hold a slice; the mapping then goes with the process
        with contextlib.suppress(BufferError):
            self._mm.close()
        if self.shm_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.shm_path)


class Allocator:
    """First-fit extents in ``[0, capacity)`` in multiples of ``align``; ``alloc`` returns an
    offset or ``None``."""

    def __init__(self, capacity: int, align: int = ALIGN) -> None:
        self.capacity = capacity
        self.align = align
        self._starts: list[int] = [0]
        self._sizes: dict[int, int] = {0: capacity}
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
