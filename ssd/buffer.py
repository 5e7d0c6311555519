"""Write buffer: one batch of entries laid out exactly as they go to disk.

Logically a batch is ``[header block][payload padded to 4096]`` per entry, back to back; the
engine reserves region space for that layout and writes it with ``pwritev``, in jobs of whole
entries (about ``write_chunk_bytes`` each) that run in parallel on the I/O pool. Two ways to
write a job (:meth:`WriteBuffer.fill_job`):

* **staged** (copy): the job's entries (headers included) are copied into one buffer of the
  :class:`BufferPool`, backed by huge pages, so the write reaches the device as a few long
  segments; the buffer goes back to the pool when the write is over. Used with O_DIRECT when
  some payload part is not 4096-aligned, or when the caller's memory is not on huge pages
  (``SsdOptions.stage_writes``);
* **borrowed** (zero copy): the header blocks live in this buffer's aligned memory and the
  payload iovecs are the caller's own memoryviews (SGLang's host pool), written in place.

The put's own thread fills the jobs (copy, payload hash: native batch calls, one crossing per job)
in order while the I/O threads write
the jobs filled before, so copies overlap writes; no fill runs after the put returned: the
checksum is taken from the caller's bytes as they were during the call.
So a write that completes after its put gave up (deadline), while the caller already reuses its
memory, leaves an entry whose checksum does not match (borrowed) or that holds the bytes of the
call (staged): never indexed in this life, and never served with other bytes after a restart.

While the batch is being written, readers of its keys copy their bytes from the caller's memory
(``payload_views``), which must stay valid until the put returns: :meth:`WriteBuffer.drop`
therefore waits until every such reader has finished. The header memory is reference counted:
the writer holds one reference, each such reader one while it copies, the I/O jobs one until they
have finished (which may be after an abandoned put returned); it returns to the pool only when
the count drops to zero.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hicache_mooncake.native import copy_pages, copy_pages_checksum, xxh3_batch

from . import checksum
from .format import BLOCK, EntryHeader, align_up, entry_size
from .io import HUGE_PAGE, aligned_buffer, byte_view, huge_buffer
from .options import SsdOptions
from .spans import common_base


@dataclass
class Slot:
    """One entry of a :class:`WriteBuffer`. ``offset`` is the header block's offset in the
    batch's logical (on-disk) layout; ``hdr`` is its header block (borrowed mode), ``payload`` the
    caller's views, ``pad`` the zero bytes that follow the payload up to the next 4096 boundary.
    ``payload_hash`` is set when the entry is filled."""

    key: bytes
    offset: int
    payload_len: int
    hdr: memoryview
    payload: list[memoryview]
    pad: int
    payload_hash: int = 0

    @property
    def size(self) -> int:
        return entry_size(self.payload_len)


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


def reserve_staging(pool: BufferPool, options: SsdOptions) -> int:
    """Fill ``pool`` at engine open with the staging buffers one write window uses at once
    (``io_threads + 2`` jobs of up to ``write_chunk_bytes`` with their header blocks, and the
    header memory of the two sub-batches a large put has in flight), so a fresh
    engine's first sets copy into memory already faulted in (otherwise they spend much of their
    CPU zeroing fresh huge pages; reads stage in the native I/O workers' own memory). Never more
    than a quarter of ``capacity_bytes`` (a small engine never has that much in flight) nor the
    pool's cap. Returns buffers made."""
    job = options.write_chunk_bytes + 2 * BLOCK
    count = min(options.io_threads + 4, options.capacity_bytes // 4 // BufferPool.size_class(job))
    return pool.reserve(job, count)


_ZEROS = memoryview(aligned_buffer(BLOCK))


def _stage(view: memoryview, slots: Sequence[Slot]) -> list[int]:
    """Copy the payloads of ``slots`` into ``view`` as laid out on disk (each after its 4096-byte
    header block, back to back) and return their xxh3_64: one ``copy_pages_checksum`` when every
    payload is one part and all lie in one buffer (the common case); otherwise one
    ``copy_pages`` per source buffer and one ``xxh3_batch`` over the staged payloads."""
    dst: list[int] = []
    parts: list[memoryview] = []
    starts: list[int] = []
    pos = 0
    for slot in slots:
        at = pos + BLOCK
        starts.append(at)
        for p in slot.payload:
            dst.append(at)
            parts.append(byte_view(p))
            at += p.nbytes
        pos += slot.size
    lengths = np.fromiter((p.nbytes for p in parts), np.uint64, len(parts))
    found = common_base(parts)
    if found is not None:
        src, src_offsets = found
        if len(parts) == len(slots):
            return copy_pages_checksum(view, dst, src, src_offsets, lengths).tolist()
        copy_pages(view, dst, src, src_offsets, lengths)
    else:
        for p, at in zip(parts, dst, strict=True):
            copy_pages(view, [at], p, [0], [p.nbytes])
    sizes = np.fromiter((slot.payload_len for slot in slots), np.uint64, len(slots))
    return xxh3_batch(view, starts, sizes).tolist()


class WriteBuffer:
    """Layout and header blocks of one batch; see the module docstring for layout and lifetime."""

    def __init__(self, pool: BufferPool, entries: int, borrow: bool) -> None:
        self._pool = pool
        self.borrow = borrow
        self._mem = pool.take(max(1, entries) * BLOCK)
        self.view = memoryview(self._mem)
        self.used = 0  # logical bytes laid out
        self.slots: list[Slot] = []
        self._refs = 1
        self._readers = 0
        self._cond = threading.Condition()

    def add(self, key: bytes, parts: Sequence[memoryview]) -> Slot:
        """Lay ``parts`` out as the next entry (nothing is copied or hashed yet)."""
        off = self.used
        src = [p for p in parts if p.nbytes]
        plen = sum(p.nbytes for p in src)
        i = len(self.slots)
        end = off + BLOCK + align_up(plen)
        slot = Slot(key, off, plen, self.view[i * BLOCK : (i + 1) * BLOCK], src, end - (off + BLOCK + plen))
        self.slots.append(slot)
        self.used = end
        return slot

    def fill_job(
        self, entries: Sequence[tuple[Slot, int]], gen: int
    ) -> tuple[list[memoryview], Buffer | None]:
        """Hash (and when staged, copy) the entries of one write job and write their headers
        (``(slot, seq)``, back to back on disk). Returns the iovecs to write and the staging
        buffer to give back to the pool once written (None when borrowed). The payloads are
        copied and hashed by native batch calls (:func:`_stage`, :func:`~.checksum.payload_hashes`),
        the GIL released once per call, not once per page."""
        if self.borrow:
            iov: list[memoryview] = []
            hashes = checksum.payload_hashes([slot.payload for slot, _ in entries])
            for (slot, seq), h in zip(entries, hashes, strict=True):
                slot.payload_hash = h
                slot.hdr[:] = _ZEROS
                EntryHeader(slot.key, slot.payload_len, seq, gen, slot.payload_hash).pack_into(slot.hdr)
                iov.append(slot.hdr)
                iov.extend(slot.payload)
                if slot.pad:
                    iov.append(_ZEROS[: slot.pad])
            return iov, None
        nbytes = sum(slot.size for slot, _ in entries)
        mem = self._pool.take(nbytes)
        view = memoryview(mem)
        try:
            hashes = _stage(view, [slot for slot, _ in entries])
            pos = 0
            for (slot, seq), h in zip(entries, hashes, strict=True):
                hdr = view[pos : pos + BLOCK]
                hdr[:] = _ZEROS
                if slot.pad:
                    at = pos + BLOCK + slot.payload_len
                    view[at : at + slot.pad] = _ZEROS[: slot.pad]
                slot.payload_hash = h
                EntryHeader(slot.key, slot.payload_len, seq, gen, slot.payload_hash).pack_into(hdr)
                pos += slot.size
        except BaseException:
            self._pool.give(mem)
            raise
        return [view[:nbytes]], mem

    def give_back(self, mem: Buffer | None) -> None:
        """A staged job's buffer, once its write is over."""
        if mem is not None:
            self._pool.give(mem)

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
        ``wait_readers`` (the writer) first wait until the readers still copying out of the
        caller's memory are done, so a put does not return while its memory is being read (a
        memory copy: short, whatever the disk does)."""
        with self._cond:
            if wait_readers:
                while self._readers > 0:
                    self._cond.wait()
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._pool.give(self._mem)
