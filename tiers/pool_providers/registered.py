"""Which byte ranges of this process are registered with a transfer engine, and raw addresses.

``RegisteredRanges.covers(addr, n)`` is a bisect over sorted, non-overlapping (base, end) ranges;
a part inside one of them moves zero copy, any other part takes the provider's staged path.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


def address_of(view: memoryview) -> int:
    """Address of the first byte of a contiguous buffer (read-only views included)."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


class RegisteredRanges:
    def __init__(self) -> None:
        self._bases: list[int] = []
        self._ends: list[int] = []

    def add(self, base: int, nbytes: int) -> bool:
        """Record ``[base, base + nbytes)``; False (nothing recorded) if it overlaps a known range."""
        i = bisect.bisect_right(self._bases, base)
        if (i > 0 and self._ends[i - 1] > base) or (i < len(self._bases) and self._bases[i] < base + nbytes):
            return False
        self._bases.insert(i, base)
        self._ends.insert(i, base + nbytes)
        return True

    def covers(self, addr: int, nbytes: int) -> bool:
        i = bisect.bisect_right(self._bases, addr) - 1
        return i >= 0 and addr + nbytes <= self._ends[i]

    def covers_all(self, addrs: Sequence[int], sizes: Sequence[int]) -> bool:
        return all(self.covers(a, n) for a, n in zip(addrs, sizes, strict=True))

    def ranges(self) -> list[tuple[int, int]]:
        return [(b, e - b) for b, e in zip(self._bases, self._ends, strict=True)]

    def total_bytes(self) -> int:
        return sum(e - b for b, e in zip(self._bases, self._ends, strict=True))

    def clear(self) -> None:
        self._bases.clear()
        self._ends.clear()
