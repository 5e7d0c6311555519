"""Write buffer: one batch of entries laid out exactly as they go to disk.

Logically a batch is ``[header block][payload padded to 4096]`` per entry, back to back; the
engine reserves region space for that layout and writes it with ``pwritev``. Two ways to hold it:

* **staged** (copy): the batch is copied once into page-aligned memory (one contiguous I/O per
  chunk). Used when O_DIRECT is on and some payload part is not 4096-aligned (address or length).
* **borrowed** (zero copy): only the header blocks live in our aligned memory; the payload iovecs
  are the caller's own memoryviews (SGLang's host pool), written in place. Used for buffered I/O
  and for O_DIRECT when every part is aligned. The caller's memory must stay valid until the
  put returns; :meth:`WriteBuffer.drop` in borrowed mode therefore waits until every reader
  that is copying a pending entry out of it has finished.

Payload hashes are computed while appending, before any byte is written; headers (filled in
after the engine has reserved region space: sequence number, region generation) carry them. So a
write that completes after its put gave up (deadline), while the caller already reuses its
memory, leaves an entry whose checksum does not match: never indexed in this life, and dropped by
recovery or by the read-time verification after a restart.

While the batch is being written, readers of its keys copy their bytes from here
(``payload_views``). Buffers are reference counted: the writer holds one reference, each such
reader holds one while it copies, the I/O jobs hold one until they have finished (which may be
after an abandoned put returned); the memory returns to the :class:`BufferPool` only when the
count drops to zero, so a buffer is never reused under a reader or a write in flight.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

from .format import BLOCK, EntryHeader, align_up, entry_size
from .io import aligned_buffer


@dataclass
class Slot:
    """One entry of a :class:`WriteBuffer`. ``offset`` is the header block's offset in the
    batch's logical (on-disk) layout; ``hdr`` is its header block, ``payload`` the payload bytes
    (a slice of staged memory, or the caller's views when borrowed), ``pad`` the zero bytes that
    follow the payload up to the next 4096 boundary."""

    key: bytes
    offset: int
    payload_len: int
    payload_hash: int
    hdr: memoryview
    payload: list[memoryview]
    pad: int

    @property
    def size(self) -> int:
        return entry_size(self.payload_len)


class BufferPool:
    """Reuses aligned buffers by power-of-two size class (avoids page faults on every batch)."""

    def __init__(self, max_pooled_bytes: int = 256 << 20) -> None:
        self._lock = threading.Lock()
        self._free: dict[int, list[mmap.mmap]] = {}
        self._pooled = 0
        self._max = max_pooled_bytes

    @staticmethod
    def _class(size: int) -> int:
        c = 1 << 20
        while c < size:
            c <<= 1
        return c

    def take(self, size: int) -> mmap.mmap:
        c = self._class(size)
        with self._lock:
            lst = self._free.get(c)
            if lst:
                self._pooled -= c
                return lst.pop()
        return aligned_buffer(c)

    def give(self, mem: mmap.mmap) -> None:
        c = len(mem)
        with self._lock:
            if self._pooled + c <= self._max:
                self._free.setdefault(c, []).append(mem)
                self._pooled += c

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._pooled = 0


_ZEROS = memoryview(aligned_buffer(BLOCK))


class WriteBuffer:
    """Staging memory for one batch; see the module docstring for layout and lifetime."""

    def __init__(self, pool: BufferPool, capacity: int, entries: int = 0, borrow: bool = False) -> None:
        self._pool = pool
        self.borrow = borrow
        self._mem = pool.take(entries * BLOCK if borrow else capacity)
        self.view = memoryview(self._mem)
        self.used = 0  # logical bytes appended
        self._hdr_used = 0  # borrowed mode: header blocks used in ``view``
        self.slots: list[Slot] = []
        self._refs = 1
        self._readers = 0
        self._cond = threading.Condition()

    def append(self, key: bytes, parts: Sequence[memoryview]) -> Slot:
        """Add ``parts`` as one entry (copied when staged, referenced when borrowed)."""
        off = self.used
        hasher = xxhash.xxh3_64()
        if self.borrow:
            hdr = self.view[self._hdr_used : self._hdr_used + BLOCK]
            self._hdr_used += BLOCK
            payload = [p for p in parts if p.nbytes]
            for p in payload:
                hasher.update(p)
            plen = sum(p.nbytes for p in payload)
        else:
            hdr = self.view[off : off + BLOCK]
            pos = off + BLOCK
            for p in parts:
                n = p.nbytes
                if n:
                    self.view[pos : pos + n] = p
                    hasher.update(p)
                    pos += n
            plen = pos - off - BLOCK
            payload = [self.view[off + BLOCK : pos]]
        hdr[:] = bytes(BLOCK)
        end = off + BLOCK + align_up(plen)
        pad = end - (off + BLOCK + plen)
        if pad and not self.borrow:
            self.view[end - pad : end] = bytes(pad)
        slot = Slot(key, off, plen, hasher.intdigest(), hdr, payload, pad)
        self.slots.append(slot)
        self.used = end
        return slot

    def entry_iov(self, slot: Slot) -> list[memoryview]:
        """The iovecs that write ``slot``'s entry (header, payload, padding)."""
        if not self.borrow:
            return [self.view[slot.offset : slot.offset + slot.size]]
        out = [slot.hdr, *slot.payload]
        if slot.pad:
            out.append(_ZEROS[: slot.pad])
        return out

    def write_header(self, slot: Slot, seq: int, gen: int) -> None:
        EntryHeader(slot.key, slot.payload_len, seq, gen, slot.payload_hash).pack_into(slot.hdr)

    def payload_views(self, slot: Slot) -> list[memoryview]:
        return slot.payload

    def acquire(self) -> None:
        """A reader starts copying a pending entry out of this buffer."""
        with self._cond:
            self._refs += 1
            self._readers += 1

    def release(self) -> None:
        """A reader is done (see :meth:`acquire`)."""
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()
        self.drop()

    def hold(self) -> None:
        """One more owner reference (the I/O jobs hold one until they have finished)."""
        with self._cond:
            self._refs += 1

    def drop(self, wait_readers: bool = False) -> None:
        """Drop one owner reference (the last reference returns the memory to the pool). With
        ``wait_readers`` (the writer, borrowed mode) first wait until the readers still copying out
        of the caller's memory are done, so a put does not return while its memory is being read
        (a memory copy: short, whatever the disk does)."""
        with self._cond:
            if wait_readers:
                while self._readers > 0:
                    self._cond.wait()
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._pool.give(self._mem)
