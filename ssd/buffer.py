"""Aligned write buffer: one batch of entries laid out exactly as they go to disk.

A batch is copied once into page-aligned memory (so one O_DIRECT ``pwritev`` can write it) as
``[header block][payload padded to 4096]`` per entry. Payload hashes are computed while packing;
headers are filled in after the engine has reserved region space (they carry the sequence number
and region generation).

While the batch is being written, readers of its keys copy their bytes from this memory
(``payload_view``). Buffers are reference counted: the writer holds one reference, each such
reader holds one while it copies; the memory returns to the :class:`BufferPool` only when the
count drops to zero, so a buffer is never reused under a reader.
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
    """One entry inside a :class:`WriteBuffer` (``offset`` is the header block's offset)."""

    key: bytes
    offset: int
    payload_len: int
    payload_hash: int

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


class WriteBuffer:
    """Staging memory for one batch; see the module docstring for layout and lifetime."""

    def __init__(self, pool: BufferPool, capacity: int) -> None:
        self._pool = pool
        self._mem = pool.take(capacity)
        self.view = memoryview(self._mem)
        self.used = 0
        self.slots: list[Slot] = []
        self._refs = 1
        self._lock = threading.Lock()

    def append(self, key: bytes, parts: Sequence[memoryview]) -> Slot:
        """Copy ``parts`` in as one entry (zero padding, payload hash); returns its slot."""
        off = self.used
        hdr = self.view[off : off + BLOCK]
        hdr[:] = bytes(BLOCK)
        pos = off + BLOCK
        hasher = xxhash.xxh3_64()
        for p in parts:
            n = p.nbytes
            if n:
                self.view[pos : pos + n] = p
                hasher.update(p)
                pos += n
        plen = pos - off - BLOCK
        end = off + BLOCK + align_up(plen)
        if end > pos:
            self.view[pos:end] = bytes(end - pos)
        slot = Slot(key, off, plen, hasher.intdigest())
        self.slots.append(slot)
        self.used = end
        return slot

    def write_header(self, slot: Slot, seq: int, gen: int) -> None:
        EntryHeader(slot.key, slot.payload_len, seq, gen, slot.payload_hash).pack_into(
            self.view[slot.offset : slot.offset + BLOCK]
        )

    def payload_view(self, slot: Slot) -> memoryview:
        start = slot.offset + BLOCK
        return self.view[start : start + slot.payload_len]

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._pool.give(self._mem)
