"""Local host-DRAM tier: objects in a pre-allocated arena, one eviction policy per size class.

Concurrency: one lock guards the index, the allocator and the policies; it is never held while
bytes are copied or while an evicted object is demoted. A reader pins the slot it copies from;
a slot evicted or removed while pinned becomes a *zombie* that is freed by its last reader, so a
reader never sees another object's bytes. A writer copies into a reserved slot that no reader
can find until the copy is complete and the key is published.

Eviction: when no slot of the needed size class is free, the class's policy picks a victim
(a class that owns no keys steals from the class with the most slabs). If ``on_evict`` is set
(write-on-evict demotion), the victim is pinned, handed to ``on_evict(key, bytes)`` outside the
lock, and freed afterwards; an exception from ``on_evict`` only loses that copy (logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .dram_arena import DramArena
from .parts import Parts, gather, parts_nbytes, scatter
from .policy import DEFAULT_CONTEXT, AccessContext, EvictionPolicy, policy_factory
from .slab_allocator import SlabAllocator, slot_size_for
from .tier import Tier

log = logging.getLogger(__name__)
EvictHook = Callable[[str, np.ndarray], None]


class Victim(NamedTuple):
    """A pinned DRAM entry handed to a lower tier; ``data`` is valid until it is released."""

    key: str
    offset: int
    nbytes: int
    data: np.ndarray
    hits: int


class DramTier(Tier):
    name = "dram"

    def __init__(
        self,
        capacity: int,
        slab_size: int = 64 << 20,
        policy: str = "s3fifo",
        policy_options: dict[str, Any] | None = None,
        prefault: bool = True,
        on_evict: EvictHook | None = None,
    ) -> None:
        self._allocator = SlabAllocator(capacity, slab_size)
        self._new_policy = policy_factory(policy, **(policy_options or {}))
        self.policy_name = policy
        self._arena = DramArena(self._allocator.capacity, prefault=prefault)
        self._policies: dict[int, EvictionPolicy] = {}
        self._index: dict[str, tuple[int, int]] = {}
        self._hits: dict[str, int] = {}
        self._pins: dict[int, int] = {}
        self._zombies: dict[int, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.on_evict: EvictHook | None = on_evict
        self._counts = dict.fromkeys(
            (
                "puts",
                "put_bytes",
                "hits",
                "hit_bytes",
                "misses",
                "evictions",
                "demotions",
                "demotion_errors",
                "rejected_too_large",
                "rejected_admission",
                "rejected_no_space",
                "size_mismatch",
                "promotions_skipped_full",
            ),
            0,
        )

    # ------------------------------------------------------------------ queries
    def contains(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def contains_batch(self, keys: Any) -> list[bool]:
        with self._lock:
            return [k in self._index for k in keys]

    def capacity_objects(self, nbytes: int) -> int:
        """How many objects of ``nbytes`` the arena holds when all slabs serve that size."""
        slot = slot_size_for(nbytes)
        if slot > self._allocator.slab_size:
            return 0
        return (self._allocator.slab_size // slot) * self._allocator.slab_count

    def free_objects(self, nbytes: int) -> int:
        """Objects of ``nbytes`` that fit without evicting anything."""
        slot = slot_size_for(nbytes)
        with self._lock:
            cls = self._allocator.classes.get(slot)
            free = sum(len(v) for v in cls.free_by_slab.values()) if cls is not None else 0
            return free + self._allocator.free_slab_count * (self._allocator.slab_size // slot)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._index)

    # ------------------------------------------------------------------ writes
    def put(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.put_batch([(key, parts, ctx)])[0]

    def put_batch(self, items: Sequence[tuple[str, Parts, AccessContext]], evict: bool = True) -> list[bool]:
        """Bookkeeping for the whole batch under one lock hold, copies outside it, one publish.

        A slot is taken without eviction, or by evicting victims in place when no demotion hook
        is set; items that need a demotion (I/O) go through ``_reserve`` one by one. A promotion
        (``ctx.promoted``) or a call with ``evict=False`` takes only free space: making room for a copy
        of a page that a lower tier still holds must not drop a page that exists nowhere else.
        """
        results = [False] * len(items)
        reserved: list[tuple[int, int, int]] = []  # (item index, offset, nbytes)
        slow: list[tuple[int, int]] = []
        with self._lock:
            if self._closed:
                return results
            for i, (key, parts, ctx) in enumerate(items):
                nbytes = parts_nbytes(parts)
                policy = self._policy_for(nbytes)
                if key in self._index:
                    policy.on_hit(key, ctx)
                    results[i] = True
                elif not self._allocator.fits(nbytes):
                    self._counts["rejected_too_large"] += 1
                elif not policy.should_admit(key, ctx):
                    self._counts["rejected_admission"] += 1
                elif ctx.promoted or not evict:  # only free space: making room would drop a page
                    offset = self._allocator.alloc(nbytes)
                    if offset is None:
                        self._counts["promotions_skipped_full"] += 1
                    else:
                        reserved.append((i, offset, nbytes))
                else:
                    offset = self._alloc_locked(nbytes)
                    if offset is None:
                        slow.append((i, nbytes))
                    else:
                        reserved.append((i, offset, nbytes))
        for i, nbytes in slow:
            offset = self._reserve(nbytes)
            if offset is None:
                with self._lock:
                    self._counts["rejected_no_space"] += 1
            else:
                reserved.append((i, offset, nbytes))
        for i, offset, nbytes in reserved:
            gather(self._arena.view(offset, nbytes), items[i][1])
        with self._lock:
            for i, offset, nbytes in reserved:
                key, _parts, ctx = items[i]
                if self._closed:
                    break
                if key in self._index:  # another thread stored the same (immutable) value first
                    self._allocator.free(offset, nbytes)
                else:
                    self._index[key] = (offset, nbytes)
                    self._policy_for(nbytes).on_insert(key, ctx)
                    self._counts["puts"] += 1
                    self._counts["put_bytes"] += nbytes
                results[i] = True
        return results

    def _alloc_locked(self, nbytes: int) -> int | None:
        """A slot without I/O: free, or freed by evicting in place (only when no hook is set)."""
        offset = self._allocator.alloc(nbytes)
        if offset is not None or self.on_evict is not None:
            return offset
        for _ in range(len(self._index) + 1):
            victim = self._evict_one_locked(slot_size_for(nbytes))
            if victim is None:
                return None
            self._release_locked(victim[1], victim[2])
            offset = self._allocator.alloc(nbytes)
            if offset is not None:
                return offset
        return None

    def _reserve(self, nbytes: int) -> int | None:
        """A free slot for ``nbytes``, evicting (and demoting) victims one at a time."""
        for _ in range(len(self._index) + 2):
            with self._lock:
                if self._closed:
                    return None
                offset = self._allocator.alloc(nbytes)
                if offset is not None:
                    return offset
                victim = self._evict_one_locked(slot_size_for(nbytes))
                if victim is None:
                    return None
                vkey, voff, vbytes, _hits = victim
                hook = self.on_evict
                if hook is None:
                    self._release_locked(voff, vbytes)
                    continue
                self._pins[voff] = self._pins.get(voff, 0) + 1
                self._zombies[voff] = vbytes
                view = self._arena.view(voff, vbytes)
            outcome = "demotion_errors"
            try:
                hook(vkey, view)
                outcome = "demotions"
            except Exception:  # a failed demotion loses one copy, never the caller's put
                log.exception("demotion of %s failed; the object is dropped from DRAM", vkey)
            finally:
                with self._lock:
                    self._counts[outcome] += 1
                    self._unpin_locked(voff)
        return None

    def _evict_one_locked(self, slot_size: int) -> tuple[str, int, int, int] | None:
        policy = self._policies.get(slot_size)
        if policy is None or not len(policy):
            victim_class = self._allocator.largest_class()
            policy = self._policies.get(victim_class) if victim_class is not None else None
            if policy is None or not len(policy):
                return None
        key = policy.pop_victim()
        if key is None:
            return None
        entry = self._index.pop(key, None)
        if entry is None:
            return None
        hits = self._hits.pop(key, 0)
        self._counts["evictions"] += 1
        return key, entry[0], entry[1], hits

    def remove(self, key: str) -> bool:
        with self._lock:
            entry = self._index.pop(key, None)
            if entry is None:
                return False
            self._hits.pop(key, None)
            self._policy_for(entry[1]).on_remove(key)
            self._release_locked(*entry)
            return True

    def clear(self) -> None:
        with self._lock:
            for offset, nbytes in self._index.values():
                self._release_locked(offset, nbytes)
            self._index.clear()
            self._hits.clear()
            for policy in self._policies.values():
                policy.clear()

    # ------------------------------------------------------------------ reads
    def get_into(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.get_batch_into([(key, parts, ctx)])[0]

    def get_batch_into(self, items: Sequence[tuple[str, Parts, AccessContext]]) -> list[bool]:
        """Look up and pin the whole batch under one lock hold, copy out, unpin under one hold."""
        results = [False] * len(items)
        pinned: list[tuple[int, int, int]] = []
        with self._lock:
            if self._closed:
                return results
            for i, (key, parts, ctx) in enumerate(items):
                entry = self._index.get(key)
                if entry is None:
                    self._counts["misses"] += 1
                    continue
                offset, nbytes = entry
                if parts_nbytes(parts) != nbytes:
                    self._counts["size_mismatch"] += 1
                    continue
                self._policy_for(nbytes).on_hit(key, ctx)
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

    # ------------------------------------------------------------------ background demotion
    @property
    def used_fraction(self) -> float:
        return self._allocator.used_bytes / self._allocator.capacity

    def take_victims(self, target_used_bytes: int, max_items: int) -> list[Victim]:
        """Evict by policy until used bytes <= target (at most ``max_items``), keeping each
        victim's slot pinned so its bytes stay readable until ``release``. The caller copies the
        bytes to a lower tier, then calls ``release(victims)`` exactly once."""
        out: list[Victim] = []
        with self._lock:
            while (
                not self._closed and len(out) < max_items and self._allocator.used_bytes > target_used_bytes
            ):
                victim = self._evict_one_locked(self._allocator.largest_class() or 0)
                if victim is None:
                    break
                key, offset, nbytes, hits = victim
                self._pins[offset] = self._pins.get(offset, 0) + 1
                self._zombies[offset] = nbytes
                out.append(Victim(key, offset, nbytes, self._arena.view(offset, nbytes), hits))
        return out

    def pin_entries(self, keys: Sequence[str]) -> list[Victim | None]:
        """Pin resident entries for reading (write-through copies); ``release`` unpins them."""
        out: list[Victim | None] = []
        with self._lock:
            for key in keys:
                entry = None if self._closed else self._index.get(key)
                if entry is None:
                    out.append(None)
                    continue
                self._pins[entry[0]] = self._pins.get(entry[0], 0) + 1
                view = self._arena.view(entry[0], entry[1])
                out.append(Victim(key, entry[0], entry[1], view, self._hits.get(key, 0)))
        return out

    def release(self, pinned: Sequence[Victim]) -> None:
        with self._lock:
            for v in pinned:
                self._unpin_locked(v.offset)

    # ------------------------------------------------------------------ internals
    def _policy_for(self, nbytes: int) -> EvictionPolicy:
        size = slot_size_for(nbytes)
        policy = self._policies.get(size)
        if policy is None:
            policy = self._policies[size] = self._new_policy()
        return policy

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
                "policy": self.policy_name,
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
            self._policies.clear()
        self._arena.close()
