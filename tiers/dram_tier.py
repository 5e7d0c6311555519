"""Local host-DRAM tier: objects in a pre-allocated arena of size-class slabs. No policy of its
own: the store's placement decides what lives here; this tier only stores, finds and frees.

Concurrency: one lock guards the index and the allocator; it is never held while bytes are
copied. A reader pins the slot it copies from; a slot removed while pinned becomes a *zombie*
that is freed by its last reader, so a reader never sees another object's bytes. A writer copies
into a reserved slot that no reader can find until the copy is complete and the key is published.

Space: ``put_batch`` only takes free slots; when none is free for an object's size class the put
fails (``rejected_no_space``) and the store decides what to move out (never this tier).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .dram_arena import DramArena
from .parts import Parts, gather, parts_nbytes, scatter
from .policy import DEFAULT_CONTEXT, AccessContext
from .slab_allocator import SlabAllocator, slot_size_for
from .tier import Tier


class Pinned(NamedTuple):
    """A pinned DRAM entry; ``data`` stays valid (and unchanged) until it is released."""

    key: str
    offset: int
    nbytes: int
    data: np.ndarray
    hits: int


class DramTier(Tier):
    name = "dram"

    def __init__(self, capacity: int, slab_size: int = 64 << 20, prefault: bool = True) -> None:
        self._allocator = SlabAllocator(capacity, slab_size)
        self._arena = DramArena(self._allocator.capacity, prefault=prefault)
        self._index: dict[str, tuple[int, int]] = {}
        self._hits: dict[str, int] = {}
        self._pins: dict[int, int] = {}
        self._zombies: dict[int, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._counts = dict.fromkeys(
            (
                "puts",
                "put_bytes",
                "hits",
                "hit_bytes",
                "misses",
                "removals",
                "rejected_too_large",
                "rejected_no_space",
                "size_mismatch",
            ),
            0,
        )

    # ------------------------------------------------------------------ queries
    def contains(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        with self._lock:
            return [k in self._index for k in keys]

    @property
    def capacity_bytes(self) -> int:
        return self._allocator.capacity

    def memory_regions(self) -> list[memoryview]:
        """The arena's memory (what demotions to the SSD tier are written from)."""
        return [self._arena.memory()]

    def capacity_objects(self, nbytes: int) -> int:
        """How many objects of ``nbytes`` the arena holds when all slabs serve that size."""
        slot = slot_size_for(nbytes)
        if slot > self._allocator.slab_size:
            return 0
        return (self._allocator.slab_size // slot) * self._allocator.slab_count

    def free_objects(self, nbytes: int) -> int:
        """Objects of ``nbytes`` that fit in free slots now."""
        slot = slot_size_for(nbytes)
        with self._lock:
            cls = self._allocator.classes.get(slot)
            free = sum(len(v) for v in cls.free_by_slab.values()) if cls is not None else 0
            return free + self._allocator.free_slab_count * (self._allocator.slab_size // slot)

    @property
    def used_fraction(self) -> float:
        return self._allocator.used_bytes / self._allocator.capacity

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._index)

    # ------------------------------------------------------------------ writes
    def put(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.put_batch([(key, parts, ctx)])[0]

    def put_batch(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        """Reserve free slots for the whole batch under one lock hold, copy outside it, publish
        under one hold. A key already present is True (values are immutable); an item with no
        free slot of its class is False. Memory copies finish quickly, so ``deadline`` is only
        part of the contract."""
        results = [False] * len(items)
        reserved: list[tuple[int, int, int]] = []  # (item index, offset, nbytes)
        with self._lock:
            if self._closed:
                return results
            for i, (key, parts, _ctx) in enumerate(items):
                nbytes = parts_nbytes(parts)
                if key in self._index:
                    results[i] = True
                elif not self._allocator.fits(nbytes):
                    self._counts["rejected_too_large"] += 1
                else:
                    offset = self._allocator.alloc(nbytes)
                    if offset is None:
                        self._counts["rejected_no_space"] += 1
                    else:
                        reserved.append((i, offset, nbytes))
        for i, offset, nbytes in reserved:
            gather(self._arena.view(offset, nbytes), items[i][1])
        with self._lock:
            for i, offset, nbytes in reserved:
                key = items[i][0]
                if self._closed:
                    break
                if key in self._index:  # another thread stored the same (immutable) value first
                    self._allocator.free(offset, nbytes)
                else:
                    self._index[key] = (offset, nbytes)
                    self._counts["puts"] += 1
                    self._counts["put_bytes"] += nbytes
                results[i] = True
        return results

    def remove(self, key: str) -> bool:
        with self._lock:
            entry = self._index.pop(key, None)
            if entry is None:
                return False
            self._hits.pop(key, None)
            self._counts["removals"] += 1
            self._release_locked(*entry)
            return True

    def remove_batch(self, keys: Sequence[str]) -> int:
        """Remove each key present; returns how many were."""
        removed = 0
        with self._lock:
            for key in keys:
                entry = self._index.pop(key, None)
                if entry is not None:
                    self._hits.pop(key, None)
                    self._release_locked(*entry)
                    removed += 1
            self._counts["removals"] += removed
        return removed

    def clear(self) -> None:
        with self._lock:
            for offset, nbytes in self._index.values():
                self._release_locked(offset, nbytes)
            self._index.clear()
            self._hits.clear()

    # ------------------------------------------------------------------ reads
    def get_into(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.get_batch_into([(key, parts, ctx)])[0]

    def get_batch_into(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        """Look up and pin the whole batch under one lock hold, copy out, unpin under one hold."""
        results = [False] * len(items)
        pinned: list[tuple[int, int, int]] = []
        with self._lock:
            if self._closed:
                return results
            for i, (key, parts, _ctx) in enumerate(items):
                entry = self._index.get(key)
                if entry is None:
                    self._counts["misses"] += 1
                    continue
                offset, nbytes = entry
                if parts_nbytes(parts) != nbytes:
                    self._counts["size_mismatch"] += 1
                    continue
                self._hits[key] = self._hits.get(key, 0) + 1
                self._pins[offset] = self._pins.get(offset, 0) + 1
                pinned.append((i, offset, nbytes))
        try:
            for i, offset, nbytes in pinned:
                scatter(self._arena.view(offset, nbytes), items[i][1])
                results[i] = True
        finally:
            with self._lock:
                for i, offset, nbytes in pinned:
                    self._unpin_locked(offset)
                    if results[i]:
                        self._counts["hits"] += 1
                        self._counts["hit_bytes"] += nbytes
        return results

    # ------------------------------------------------------------------ pinned access (the mover)
    def pin_entries(self, keys: Sequence[str]) -> list[Pinned | None]:
        """Pin resident entries for reading (copies to a lower tier); ``release`` unpins them."""
        out: list[Pinned | None] = []
        with self._lock:
            for key in keys:
                entry = None if self._closed else self._index.get(key)
                if entry is None:
                    out.append(None)
                    continue
                self._pins[entry[0]] = self._pins.get(entry[0], 0) + 1
                view = self._arena.view(entry[0], entry[1])
                out.append(Pinned(key, entry[0], entry[1], view, self._hits.get(key, 0)))
        return out

    def release(self, pinned: Sequence[Pinned]) -> None:
        with self._lock:
            for p in pinned:
                self._unpin_locked(p.offset)

    # ------------------------------------------------------------------ internals
    def _release_locked(self, offset: int, nbytes: int) -> None:
        if offset in self._pins:
            self._zombies[offset] = nbytes
        else:
            self._allocator.free(offset, nbytes)

    def _unpin_locked(self, offset: int) -> None:
        left = self._pins[offset] - 1
        if left:
            self._pins[offset] = left
            return
        del self._pins[offset]
        nbytes = self._zombies.pop(offset, None)
        if nbytes is not None and not self._closed:
            self._allocator.free(offset, nbytes)

    # ------------------------------------------------------------------ lifecycle
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "tier": self.name,
                "entries": len(self._index),
                "used_bytes": self._allocator.used_bytes,
                "capacity_bytes": self._allocator.capacity,
                "free_slabs": self._allocator.free_slab_count,
                **self._counts,
            }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._index.clear()
        self._arena.close()
