"""Registered scratch memory: object headers and the bytes of buffers nobody registered.

SGLang's host pool is registered once (``register_memory``) and moves NIC-to-pool with no copy;
what is not registered (the per-call object headers, a caller's private bytearray) is bounced
through this pool: one copy in (writes) or out (reads). Allocation is first fit in 64-byte
granules; ``take`` waits for space until the caller's deadline, ``try_take`` does not wait.
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import time
from typing import Any

from .device import RdmaDevice
from .extent_allocator import Allocator
from .mr import buffer_address

GRANULE = 64


class ScratchPool:
    def __init__(self, device: RdmaDevice, size: int) -> None:
        self.size = size
        self._mm = mmap.mmap(-1, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self._mm)
        self.addr = buffer_address(self.view)
        self.mr: Any = None
        try:
            self.mr = device.register(self.addr, size, device.v.e["IBV_ACCESS_LOCAL_WRITE"])
        except BaseException:
            self._unmap()
            raise
        self.lkey = int(self.mr.lkey)
        self._alloc = Allocator(size, align=GRANULE)
        self._cond = threading.Condition()

    def try_take(self, n: int) -> int | None:
        """Offset of ``n`` free bytes, or None at once when there is no room now."""
        with self._cond:
            return self._alloc.alloc(n) if 0 < n <= self.size else None

    def take(self, n: int, deadline: float) -> int | None:
        """Offset of ``n`` free bytes, waiting for room until ``deadline`` (None: no room)."""
        if not 0 < n <= self.size:
            return None
        with self._cond:
            while True:
                off = self._alloc.alloc(n)
                if off is not None:
                    return off
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def give(self, offset: int, n: int) -> None:
        with self._cond:
            self._alloc.free(offset, n)
            self._cond.notify_all()

    @property
    def used(self) -> int:
        return self._alloc.used

    def close(self) -> None:
        if self.mr is not None:
            with contextlib.suppress(Exception):
                self.mr.close()
            self.mr = None
        self._unmap()

    def _unmap(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self._mm.close()
