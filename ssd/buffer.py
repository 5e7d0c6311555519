"""Write layout and staging memory of the SSD engine.

:class:`WriteBuffer` is one sub-batch of a put laid out as it goes to disk: ``[header block]
[payload padded to 4096]`` per entry, back to back; the engine reserves region space for that
layout and the native I/O workers write it (``native.write_entries``, see ``writer.py``: they
copy or borrow the payloads, hash them and lay out the headers, in their own staging memory).

While the batch is being written, readers of its keys copy their bytes from the caller's memory
(``payload_views``), which must stay valid until the put returns: :meth:`WriteBuffer.drop`
therefore waits until every such reader has finished.

:class:`BufferPool` reuses aligned buffers by size class for the engine's other staging (a get's
scratch when its destination is not one buffer, the reclaimer's reads).
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Sequence

from .format import entry_size
from .io import HUGE_PAGE, aligned_buffer, huge_buffer


class Slot:
    """One entry of a :class:`WriteBuffer`. ``offset`` is the header block's offset in the
    batch's logical (on-disk) layout; ``payload`` the caller's views (empty ones left out);
    ``size`` the bytes the entry takes on disk (``entry_size(payload_len)``)."""

    __slots__ = ("key", "offset", "payload", "payload_len", "size")

    def __init__(self, key: bytes, offset: int, payload_len: int, payload: list[memoryview]) -> None:
        self.key = key
        self.offset = offset
        self.payload_len = payload_len
        self.payload = payload
        self.size = entry_size(payload_len)


Buffer = mmap.mmap | memoryview  # what a BufferPool hands out (page- or 2 MiB-aligned)


class BufferPool:
    """Reuses aligned buffers by size class (avoids faulting fresh pages in on every batch).

    Buffers of 2 MiB and more start on a 2 MiB boundary and are backed by transparent huge pages
    where the kernel gives them (:func:`~.io.huge_buffer`): staged writes and reads then reach
    the device as long segments, at its full speed.

    Invariants: :meth:`take` hands out the smallest pooled buffer at least as large as asked
    (best fit: the short tail job of a batch reuses a standard job's buffer instead of faulting
    in a class of its own); it allocates only when no pooled buffer is large enough. At most
    ``max_pooled_bytes`` stay pooled; a buffer given back beyond that is unmapped. A fresh
    buffer's pages are faulted in with the GIL released, and :meth:`reserve` does that up front
    (at engine open) so the first batches do not pay it."""

    def __init__(self, max_pooled_bytes: int = 256 << 20) -> None:
        self._lock = threading.Lock()
        self._free: dict[int, list[Buffer]] = {}
        self._pooled = 0
        self._max = max_pooled_bytes
        self.allocated = 0  # buffers made (reserve included): steady state adds none

    @staticmethod
    def size_class(size: int) -> int:
        """Power-of-two classes up to 2 MiB, then whole 2 MiB pages (a staged run of 8 MiB and a
        header is 10 MiB, not 16)."""
        if size > HUGE_PAGE:
            return -(-size // HUGE_PAGE) * HUGE_PAGE
        c = 1 << 20
        while c < size:
            c <<= 1
        return c

    def take(self, size: int) -> Buffer:
        c = self.size_class(size)
        with self._lock:
            fits = [k for k, lst in self._free.items() if k >= c and lst]
            if fits:
                k = min(fits)
                self._pooled -= k
                return self._free[k].pop()
            self.allocated += 1
        return self._make(c)

    @staticmethod
    def _make(c: int) -> Buffer:
        return huge_buffer(c) if c >= HUGE_PAGE else aligned_buffer(c)

    def give(self, mem: Buffer) -> None:
        c = len(mem)
        with self._lock:
            if self._pooled + c <= self._max:
                self._free.setdefault(c, []).append(mem)
                self._pooled += c

    def reserve(self, size: int, count: int) -> int:
        """Make ``count`` buffers of ``size``'s class and pool them, as far as the pool's cap
        allows; returns how many were made. Costs the page faults now (about 0.1 s per GB)
        instead of in the first calls that need the memory. Meant for engine open (nothing takes
        from the pool yet)."""
        c = self.size_class(size)
        made = 0
        while made < count and self._pooled + c <= self._max:
            with self._lock:
                self.allocated += 1
            self.give(self._make(c))
            made += 1
        return made

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._pooled = 0


class WriteBuffer:
    """Layout of one sub-batch and the gate of the readers of its pending entries (module
    docstring). ``borrow``: its payloads are written in place (zero copy), not staged."""

    def __init__(self, borrow: bool) -> None:
        self.borrow = borrow
        self.used = 0  # logical bytes laid out
        self._readers = 0
        self._cond = threading.Condition()

    def add(self, key: bytes, parts: Sequence[memoryview]) -> Slot:
        """Lay ``parts`` out as the next entry (nothing is copied or hashed here)."""
        src = [p for p in parts if p.nbytes]
        slot = Slot(key, self.used, sum(p.nbytes for p in src), src)
        self.used += slot.size
        return slot

    def payload_views(self, slot: Slot) -> list[memoryview]:
        return slot.payload

    def acquire(self) -> None:
        """A reader starts copying a pending entry out of the caller's memory."""
        with self._cond:
            self._readers += 1

    def release(self) -> None:
        """A reader is done (see :meth:`acquire`)."""
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def drop(self, wait_readers: bool = False) -> None:
        """The writer is done with the batch. With ``wait_readers``, first wait until the readers
        still copying out of the caller's memory are done, so a put does not return while its
        memory is being read (a memory copy: short, whatever the disk does)."""
        if wait_readers:
            with self._cond:
                while self._readers > 0:
                    self._cond.wait()
