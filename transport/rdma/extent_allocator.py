"""A first-fit extent allocator (the RDMA engine's registered scratch pool carves per-call header
and bounce buffers out of it). Extents are multiples of ``align``; freeing coalesces with both
neighbours. Not thread-safe: the caller holds its lock around it."""

from __future__ import annotations

import bisect


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class Allocator:
    """First-fit extents in ``[base, base + capacity)`` in multiples of ``align``; ``alloc``
    returns an offset or ``None``."""

    def __init__(self, capacity: int, base: int = 0, align: int = 4096) -> None:
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
