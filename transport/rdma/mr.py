"""Memory-region bookkeeping for RDMA (pure): which registered region holds a local buffer
(-> its lkey), and the remote arena's bounds (-> rkey, absolute address of an offset)."""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

from ..errors import TransportError


def buffer_address(view: memoryview) -> int:
    """Absolute address of a contiguous, writable buffer (registered memory is always writable:
    the host KV pool, an mmap'ed arena), without copying it."""
    if not view.contiguous or view.readonly:
        raise TransportError("RDMA needs contiguous, writable buffers (register the memory first)")
    if view.nbytes == 0:
        return 0
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


@dataclass(frozen=True, slots=True)
class Region:
    addr: int
    length: int
    lkey: int
    rkey: int
    handle: int


class RegionTable:
    """Registered local regions, sorted by address; ``find(addr, n)`` -> the region covering it."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._regions: list[Region] = []
        self._next = 1

    def add(self, addr: int, length: int, lkey: int, rkey: int) -> Region:
        i = bisect.bisect_left(self._starts, addr)
        if (i > 0 and self._regions[i - 1].addr + self._regions[i - 1].length > addr) or (
            i < len(self._starts) and addr + length > self._starts[i]
        ):
            raise TransportError("memory regions must not overlap")
        region = Region(addr, length, lkey, rkey, self._next)
        self._next += 1
        self._starts.insert(i, addr)
        self._regions.insert(i, region)
        return region

    def remove(self, handle: int) -> Region | None:
        for i, r in enumerate(self._regions):
            if r.handle == handle:
                del self._starts[i]
                del self._regions[i]
                return r
        return None

    def find(self, addr: int, length: int) -> Region | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        r = self._regions[i]
        return r if addr + length <= r.addr + r.length else None

    def __len__(self) -> int:
        return len(self._regions)


@dataclass(frozen=True, slots=True)
class RemoteArena:
    """The node's arena as its QpInfo described it."""

    addr: int
    length: int
    rkey: int

    def address_of(self, offset: int, length: int) -> int:
        if offset < 0 or length < 0 or offset + length > self.length:
            raise TransportError(f"extent [{offset}, {offset + length}) is outside the remote arena")
        return self.addr + offset
