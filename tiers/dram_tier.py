"""Local host-DRAM tier: objects in a pre-allocated arena of size-class slabs. No policy of its
own: the store's placement decides what lives here; this tier only stores, finds and frees.

Index: keyed by the 64-bit fingerprint of each key in a native table (``dram_index``); the full
key is kept per slot and checked on every lookup, so a fingerprint collision is a miss (counted as
``fingerprint_collisions``), never another object's bytes; a set whose fingerprint is taken by
another key is refused (False). Copies between SGLang's pool and the arena are one native call
per batch (a put: ``native.copy_slots``; a get: ``DramIndex.read_into``, which also looks up, pins and
unpins; the GIL released once, every part and offset bounds-checked).

Concurrency: one lock guards the allocator and every change of the index; it is never held while
bytes are copied. A get takes no lock: one native call (``DramIndex.read_into``) looks up and pins
its slots, copies with the GIL released, and unpins (each index call is atomic under the GIL). A
slot removed while pinned becomes a *zombie* the index keeps; its last unpin puts it on the index's
freed list, and whoever unpinned gives it back to the allocator under the lock, so a reader never
sees another object's bytes. A writer copies into a reserved slot that no reader can find until
the copy is complete and the key is published.

Space: ``put_batch`` only takes free slots; when none is free for an object's size class the put
fails (``rejected_no_space``) and the store decides what to move out (never this tier).

Served arenas (``object_headers``: the host cache and memory nodes, whose clients copy bytes
themselves): every slot is ``[body][ObjectHeader]``; the body starts the slot (page-aligned), the
64-byte header follows it at ``header_offset``. A header is VALID (with a fresh version) only
while its key is published; removal invalidates it at once (before the slot can be reused, even
while a pinned reader still copies), so a one-sided reader that validates the header before and
after its copy never takes another object's bytes. Writers from outside (``reserve``) get a slot
whose header says WRITING; ``publish`` makes it VALID, ``cancel`` frees it.

Resizing at runtime (``resize``, up to ``max_capacity``; private arenas): growing faults the new
slabs in and makes them usable; shrinking retires the slabs past the new size (nothing new goes
there). The store then empties them: ``relocate`` copies entries into free slots of the remaining
slabs (a reader of the old slot keeps it until done, as for a removal), or the placement moves
them out; each retired slab whose last slot is freed gives its memory back (``release_retired``).
"""

from __future__ import annotations

import itertools
import logging
import operator
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from hicache_mooncake.native import copy_pages, copy_slots, fingerprints, key_hashes
from hicache_mooncake.transport.arena_files import ArenaSpec
from hicache_mooncake.transport.object_header import (
    HEADER_DTYPE,
    HEADER_MAGIC,
    HEADER_SIZE,
    STATE_FREE,
    STATE_VALID,
    STATE_WRITING,
    ObjectHeader,
    key_hash,
)

from .dram_arena import DramArena
from .dram_index import DramIndex, Lookup
from .parts import Parts, pages_sizes
from .policy import AccessContext
from .policy.dram_room import RoomPlan
from .slab_allocator import SlabAllocator, slot_size_for
from .tier import Tier

log = logging.getLogger(__name__)
_ITEM_KEY = operator.itemgetter(0)
_ITEM_PARTS = operator.itemgetter(1)
_ITEM_CTX = operator.itemgetter(2)
_CTX_TYPE = operator.attrgetter("obj_type")
# a Reservation's fields, read by C-level passes over a batch
_KEY = operator.attrgetter("key")
_OFFSET = operator.attrgetter("offset")
_NBYTES = operator.attrgetter("nbytes")
_VERSION = operator.attrgetter("version")
_OBJ_TYPE = operator.attrgetter("obj_type")
_GENERATION = operator.attrgetter("generation")


def _no_class(_nbytes: int) -> bool:
    return False


class Pinned(NamedTuple):
    """A pinned DRAM entry; ``data`` stays valid (and unchanged) until it is released."""

    key: str
    offset: int
    nbytes: int
    data: np.ndarray
    hits: int


class Reservation(NamedTuple):
    """A slot reserved for ``key`` whose body an outside writer fills (``body`` is its view)."""

    key: str
    offset: int
    nbytes: int
    version: int
    obj_type: int
    arena: DramArena
    generation: int = 0
    """``DramTier.generation`` at reservation: ``publish`` refuses it after a clear (``clear``)."""
    tag: int = 0
    """The caller's own mark (``reserve``'s ``tag``; the store: its tenant-clear fence)."""

    @property
    def body(self) -> np.ndarray:
        """The slot's body (made when asked: a one-sided writer copies into the arena itself
        and never needs it)."""
        return self.arena.view(self.offset, self.nbytes)


class Located(NamedTuple):
    """Where a published object lives, in slot offsets (``DramTier.wire_offset`` maps them)."""

    offset: int
    nbytes: int
    version: int
    obj_type: int
    header: int


def header_offset(offset: int, nbytes: int) -> int:
    """Slot offset of an object's header: right after its body, 64-byte aligned."""
    return offset + -(-nbytes // HEADER_SIZE) * HEADER_SIZE


class DramTier(Tier):
    name = "dram"

    def __init__(
        self,
        capacity: int,
        slab_size: int = 64 << 20,
        prefault: bool = True,
        shared: ArenaSpec | None = None,
        object_headers: bool = False,
        max_capacity: int | None = None,
    ) -> None:
        """``shared``: the arena is a shared-memory file made from this spec (same-host clients
        map it); ``object_headers``: every slot carries an ``ObjectHeader`` (one-sided readers);
        ``max_capacity``: the most ``resize`` may grow to (default: ``capacity``; private arenas)."""
        self._allocator = SlabAllocator(capacity, slab_size, max_capacity)
        self._arena = DramArena(
            self._allocator.capacity,
            prefault=prefault,
            shared=shared,
            max_capacity=self._allocator.max_slabs * self._allocator.slab_size,
        )
        self.headers = object_headers
        self._prefault = prefault
        self._resize_lock = threading.Lock()  # resize vs giving memory back (never under _lock)
        # fingerprint -> (slot offset, nbytes, version, obj_type); per slot its key, its readers'
        # pins and its reads since it was published (``Pinned.hits``)
        self._index = DramIndex(self._allocator.max_slabs * self._allocator.slab_size)
        self._versions = itertools.count(time.time_ns() // 1000)
        self._lock = threading.Lock()
        # the clear fence: even while open, odd while a clear runs; bumped only under _lock
        self._generation = 0
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
                "relocated",
                "refused_after_clear",
                "fingerprint_collisions",
            ),
            0,
        )

    # ------------------------------------------------------------------ the arena
    @property
    def arena_view(self) -> memoryview:
        """The whole mapping (a shared arena's header page included); ``wire_offset`` indexes it."""
        return self._arena.mapping.data

    @property
    def shm_path(self) -> str:
        return self._arena.shm_path

    def wait_prefaulted(self, timeout: float) -> bool:
        """True once the arena's background prefault (``prefault``) has ended, within ``timeout``."""
        return self._arena.wait_prefaulted(timeout)

    def wire_offset(self, offset: int) -> int:
        return self._arena.base + offset

    def _slot_bytes(self, nbytes: int) -> int:
        return header_offset(0, nbytes) + HEADER_SIZE if self.headers else nbytes

    def _write_header(self, offset: int, nbytes: int, state: int, version: int, key: str, otype: int) -> None:
        ObjectHeader.pack_into(
            self._arena.bytes, header_offset(offset, nbytes), state, version, key_hash(key), nbytes, otype
        )

    def _invalidate(self, offset: int, nbytes: int) -> None:
        if self.headers and not self._closed:
            ObjectHeader.pack_into(self._arena.bytes, header_offset(offset, nbytes), STATE_FREE, 0, 0, 0, 0)

    def _write_headers(
        self,
        offsets: Sequence[int],
        sizes: Sequence[int],
        state: int,
        versions: Sequence[int] | int = 0,
        keys: Sequence[str] | None = None,
        obj_types: Sequence[int] | int = 0,
    ) -> None:
        """``_write_header`` of a batch in one native copy (FREE headers: ``keys`` None, zeros)."""
        n = len(offsets)
        if not n or self._closed:
            return
        headers = np.zeros(n, dtype=HEADER_DTYPE)
        headers["magic"] = HEADER_MAGIC
        headers["state"] = state
        if state != STATE_FREE:
            headers["version"] = versions
            headers["key_hash"] = key_hashes(keys or ())
            headers["size"] = sizes
            headers["obj_type"] = obj_types
        size_arr = np.asarray(sizes, dtype=np.uint64)
        at = np.asarray(offsets, dtype=np.uint64) + (size_arr + np.uint64(HEADER_SIZE - 1)) // np.uint64(
            HEADER_SIZE
        ) * np.uint64(HEADER_SIZE)
        copy_pages(
            self._arena.bytes,
            at,
            headers.view(np.uint8),
            np.arange(n, dtype=np.uint64) * np.uint64(HEADER_SIZE),
            np.full(n, HEADER_SIZE, dtype=np.uint64),
        )

    # ------------------------------------------------------------------ queries
    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        if fps is None:
            fps = fingerprints(keys)
        with self._lock:
            return self._index.lookup(keys, fps).found.tolist()

    def stored_sizes(self, keys: Sequence[str], fps: np.ndarray | None = None) -> np.ndarray:
        """The published size of each key, -1 where absent (int64, one per key; no per-key
        Python: a set screens its whole batch with it); no hit or miss is counted. ``fps``: the
        keys' fingerprints (None: computed here)."""
        if fps is None:
            fps = fingerprints(keys)
        with self._lock:
            return self._index.sizes(keys, fps)

    def entry_count(self) -> int:
        return len(self._index)

    @property
    def capacity_bytes(self) -> int:
        return self._allocator.capacity

    def memory_regions(self) -> list[memoryview]:
        """The arena's memory (what demotions to the SSD tier are written from)."""
        return [self._arena.memory()]

    def fits(self, nbytes: int) -> bool:
        """Whether an object of ``nbytes`` can be stored at all (its slot fits in a slab); room
        is another matter."""
        return self._allocator.fits(self._slot_bytes(nbytes))

    def count_too_large(self, n: int) -> None:
        """``n`` pages larger than a slot were refused before reaching this tier (by the store,
        which asks ``capacity_objects`` first): counted as if refused here."""
        with self._lock:
            self._counts["rejected_too_large"] += n

    def capacity_objects(self, nbytes: int) -> int:
        """How many objects of ``nbytes`` the arena holds when all slabs serve that size."""
        slot = slot_size_for(self._slot_bytes(nbytes))
        if slot > self._allocator.slab_size:
            return 0
        return (self._allocator.slab_size // slot) * self._allocator.slab_count

    def free_objects(self, nbytes: int) -> int:
        """Objects of ``nbytes`` that fit in free slots now."""
        need = self._slot_bytes(nbytes)
        slot = slot_size_for(need)
        with self._lock:
            free = self._allocator.free_slots(need)
            return free + self._allocator.free_slab_count * (self._allocator.slab_size // slot)

    def room_plan(self, nbytes: int) -> RoomPlan | None:
        """What could make room for objects of ``nbytes`` (``dram_room``), or None when taking out
        pages of any size helps: a slot of its class or a whole slab is free (or the store
        must free bytes for another reason), or no usable slab serves another class (every page
        taken out then frees a slot of this one, so the placement frees bytes: the policy's
        victims, or its least recent DRAM pages demoted, exactly as a set that is short of
        bytes). Pages of other classes are listed only for slabs every used slot of which
        holds a published page no reader pins; the index is walked only when other classes
        hold slabs."""
        need = self._slot_bytes(nbytes)
        if not self._allocator.fits(need):
            return RoomPlan(_no_class, 0, {}, {})
        slot = slot_size_for(need)
        slab_size = self._allocator.slab_size

        def same_class(size: int) -> bool:
            return slot_size_for(self._slot_bytes(size)) == slot

        slab_of: dict[str, int] = {}
        slab_keys: dict[int, list[str]] = {}
        with self._lock:
            alloc = self._allocator
            if alloc.free_slab_count or alloc.free_slots(need):
                return None
            used = alloc.slabs_in_use(need)  # slabs of the other classes below the limit
            if not used:
                return None  # every usable slab serves this class: any page taken out makes room
            pinned = {offset // slab_size for offset in self._index.pinned_offsets()}
            keys, offsets, *_rest = self._index.items()
            for key, offset in zip(keys, offsets.tolist(), strict=True):
                slab = offset // slab_size
                if slab in used and slab not in pinned:
                    slab_keys.setdefault(slab, []).append(key)
            for slab in [s for s, keys in slab_keys.items() if len(keys) != used[s]]:
                del slab_keys[slab]  # a reserved or removed-while-read slot keeps it
            slab_of = {key: slab for slab, keys in slab_keys.items() for key in keys}
        return RoomPlan(same_class, slab_size // slot, slab_of, slab_keys)

    @property
    def used_fraction(self) -> float:
        return self._allocator.used_bytes / self._allocator.capacity

    def keys(self) -> list[str]:
        with self._lock:
            return self._index.items()[0]

    def slot_offsets(self) -> dict[str, int]:
        """Each published key's slot offset (tests and diagnostics)."""
        with self._lock:
            keys, offsets, *_rest = self._index.items()
        return dict(zip(keys, offsets.tolist(), strict=True))

    @property
    def index_nbytes(self) -> int:
        """Bytes the index allocates (its native table and per-slot key array; not the keys)."""
        return self._index.nbytes

    def locate(self, keys: Sequence[str], sizes: Sequence[int] | None = None) -> list[Located | None]:
        """Where each published key lives (None: absent, or not of the expected size; 0 = any).
        Counted as hits / misses like reads: a one-sided reader copies it next."""
        n = len(keys)
        out: list[Located | None] = [None] * n
        fps = fingerprints(keys)
        with self._lock:
            if self._closed:
                self._counts["misses"] += n
                return out
            look = self._index.lookup(keys, fps)
            ok = look.found
            if sizes is not None:
                want = np.asarray(sizes, dtype=np.uint64)
                ok = ok & ((want == 0) | (look.sizes == want))
            hit: list[int] = np.flatnonzero(ok).tolist()
            found = int(look.found.sum())
            self._counts["misses"] += n - found
            self._counts["size_mismatch"] += found - len(hit)
            self._counts["fingerprint_collisions"] += int(look.collided.sum())
            self._counts["hits"] += len(hit)
            self._counts["hit_bytes"] += int(look.sizes[hit].sum())
            self._index.count_reads(look.offsets[hit])
        rows = zip(
            hit,
            look.offsets[hit].tolist(),
            look.sizes[hit].tolist(),
            look.versions[hit].tolist(),
            look.obj_types[hit].tolist(),
            strict=True,
        )
        for i, offset, nbytes, version, otype in rows:
            out[i] = Located(offset, nbytes, version, otype, header_offset(offset, nbytes))
        return out

    def committed_extent(self, offset: int, length: int) -> bool:
        """Does ``[offset, offset + length)`` (slot offsets) lie in one published object's body or
        header? (Linear in the entries: the tcp engine's address-based reads only.)"""
        end = offset + length
        with self._lock:
            _keys, starts, sizes, *_rest = self._index.items()
        starts_i = starts.astype(np.int64)
        stops = starts_i + -(-sizes.astype(np.int64) // HEADER_SIZE) * HEADER_SIZE
        if self.headers:
            stops += HEADER_SIZE
        return bool(np.any((starts_i <= offset) & (stops >= end)))

    # ------------------------------------------------------------------ writes
    def put_batch(
        self,
        items: Sequence[tuple[str, Parts, AccessContext]],
        deadline: float | None = None,
        generation: int | None = None,
        *,
        fps: np.ndarray | None = None,
    ) -> list[bool]:
        """Reserve free slots for the whole batch under one lock hold, copy outside it (one native
        copy), publish under one hold (one index call). A key already present is True (values
        are immutable: its first value stays; the copy made for it is freed); an item with no
        free slot of its class is True only if its key is present, else False; an item whose
        fingerprint another key holds is False. The index is not probed before the copy: the
        store's calls screen their keys first, so a present key is the rare case that costs a
        copy, not every call a probe. Memory copies finish quickly, so ``deadline`` is only
        part of the contract. ``generation``: the ``generation`` the caller's operation started
        in; unless it is still the current one and no clear runs, nothing is published (every
        item False, slots freed): bytes read before a clear never land after it. ``fps``: the
        keys' fingerprints (``Tier``'s contract; None: computed here)."""
        n = len(items)
        keys = list(map(_ITEM_KEY, items))
        if fps is None:
            fps = fingerprints(keys)
        pages: list[Parts] = list(map(_ITEM_PARTS, items))
        sizes = pages_sizes(pages)  # the parts' own: a slot is sized by what is copied into it
        types = list(map(int, map(_CTX_TYPE, map(_ITEM_CTX, items))))
        versions = list(itertools.islice(self._versions, n))
        with self._lock:
            if self._closed:
                return [False] * n
            offsets = self._alloc_batch_locked(sizes)
        if None in offsets:  # no slot for some: those are True only where the key is present
            return self._put_some(items, keys, fps, pages, sizes, types, versions, offsets, generation)
        slots = cast(list[int], offsets)
        rows = self._index.rows(slots, sizes, versions, types)  # before the copy: caches warm
        if not self._copy_in(slots, pages, offsets, sizes):
            return [False] * n
        with self._lock:
            if not self._publishable_locked(generation, offsets, sizes, n):
                return [False] * n
            return self._publish_locked(keys, fps, rows, slots, sizes, types)

    def _put_some(
        self,
        items: Sequence[tuple[str, Parts, AccessContext]],
        keys: list[str],
        fps: np.ndarray,
        pages: list[Parts],
        sizes: list[int],
        types: list[int],
        versions: list[int],
        offsets: list[int | None],
        generation: int | None,
    ) -> list[bool]:
        """``put_batch`` when some items got no slot: those answer whether their key is present
        (one index call); the others are copied and published as usual."""
        missing = [i for i, offset in enumerate(offsets) if offset is None]
        with self._lock:
            if self._closed:
                return [False] * len(items)
            look = self._index.lookup([keys[i] for i in missing], fps[missing])
            self._counts["fingerprint_collisions"] += int(look.collided.sum())
        results = [False] * len(items)
        for i, present in zip(missing, look.found.tolist(), strict=True):
            results[i] = present
        chosen = [i for i, offset in enumerate(offsets) if offset is not None]
        if not chosen:
            return results
        slots = [cast(int, offsets[i]) for i in chosen]
        nbytes = [sizes[i] for i in chosen]
        kinds = [types[i] for i in chosen]
        rows = self._index.rows(slots, nbytes, [versions[i] for i in chosen], kinds)
        if not self._copy_in(slots, [pages[i] for i in chosen], offsets, sizes):
            return results
        with self._lock:
            if not self._publishable_locked(generation, offsets, sizes, len(items)):
                return [False] * len(items)
            done = self._publish_locked([keys[i] for i in chosen], fps[chosen], rows, slots, nbytes, kinds)
        for i, ok in zip(chosen, done, strict=True):
            results[i] = ok
        return results

    def _copy_in(
        self, slots: list[int], pages: list[Parts], offsets: Sequence[int | None], sizes: Sequence[int]
    ) -> bool:
        """Copy ``pages`` into their reserved ``slots`` (one native call, the lock not held);
        False (every reserved slot freed again) when the copy refuses a part or the tier closed."""
        try:
            copy_slots(self._arena.bytes, slots, pages, True)
            return True
        except (ValueError, TypeError, BufferError) as exc:  # a part the copy refuses; closed
            log.debug("DRAM put of %d pages not copied: %s", len(slots), exc)
            with self._lock:
                if not self._closed:
                    self._free_unpublished_locked(offsets, sizes)
            return False

    def _publishable_locked(
        self, generation: int | None, offsets: Sequence[int | None], sizes: Sequence[int], n: int
    ) -> bool:
        """Whether copied slots may be published now: not closed, and (``generation`` given) no
        clear since it was read; else the slots are freed (a clear's refusal counted)."""
        if self._closed:
            return False
        if generation is not None and not self._open_locked(generation):
            self._free_unpublished_locked(offsets, sizes)
            self._counts["refused_after_clear"] += n
            return False
        return True

    def reserve(self, items: Sequence[tuple[str, int, int]], tag: int = 0) -> list[Reservation | None]:
        """Slots for ``(key, nbytes, obj_type)`` that the caller fills through ``Reservation.body``
        (None: no free slot of its class, too large, or closed), under one lock hold. Nobody finds
        them until ``publish``. ``tag``: kept in each ``Reservation`` for the caller."""
        out: list[Reservation | None] = [None] * len(items)
        with self._lock:
            if self._closed:
                return out
            offsets = self._alloc_batch_locked([nbytes for _key, nbytes, _otype in items])
            got = [j for j, offset in enumerate(offsets) if offset is not None]
            if not got:
                return out
            if len(got) < len(items):
                items, offsets = [items[j] for j in got], [offsets[j] for j in got]
            keys, sizes, kinds = zip(*items, strict=True)
            slots = cast("list[int]", offsets)
            versions = list(itertools.islice(self._versions, len(got)))
            made = map(
                Reservation,
                keys,
                slots,
                sizes,
                versions,
                kinds,
                itertools.repeat(self._arena),
                itertools.repeat(self._generation),
                itertools.repeat(tag),
            )
            for j, res in zip(got, made, strict=True):
                out[j] = res
            if self.headers:
                self._write_headers(slots, sizes, STATE_WRITING, versions, keys, kinds)
        return out

    def publish(self, reservations: Sequence[Reservation]) -> list[Located | None]:
        """Make filled reservations visible, in one index call; returns where each key lives now.
        A key published meanwhile by someone else keeps its first value (this slot is freed,
        that one is returned); None when the tier is closed, when another key holds the
        fingerprint (the slot is freed; counted), or when a clear ran (or runs) since the slot
        was reserved (its slot is freed: bytes filled before a clear never land after it)."""
        out: list[Located | None] = [None] * len(reservations)
        live, done, look = self._publish(reservations, where=True)
        if look is None:
            return out
        rows = zip(
            live,
            done,
            look.found.tolist(),
            look.offsets.tolist(),
            look.sizes.tolist(),
            look.versions.tolist(),
            look.obj_types.tolist(),
            strict=True,
        )
        for j, ok, found, offset, nbytes, version, otype in rows:
            if ok and found:
                out[j] = Located(offset, nbytes, version, otype, header_offset(offset, nbytes))
        return out

    def publish_flags(self, reservations: Sequence[Reservation]) -> list[bool]:
        """``publish``, answering only whether each key is findable now (``publish`` is not
        None): no second index lookup and no ``Located`` per key (a served commit's answer)."""
        out = [False] * len(reservations)
        live, done, _ = self._publish(reservations, where=False)
        if len(live) == len(out):
            return done
        for j, ok in zip(live, done, strict=True):
            out[j] = ok
        return out

    def _publish(
        self, reservations: Sequence[Reservation], where: bool
    ) -> tuple[list[int], list[bool], Lookup | None]:
        """``publish``'s work under one lock hold: ``(live, done, lookup)``: the positions of the
        reservations made since the last clear (the others are freed, counted), whether each
        of them is findable now (``_publish_locked``), and with ``where`` the index lookup of
        their keys (None when closed or nothing is live, or without ``where``)."""
        keys = list(map(_KEY, reservations))
        fps = fingerprints(keys)
        with self._lock:
            if self._closed:
                return [], [], None
            gens = set(map(_GENERATION, reservations))
            if len(gens) == 1 and self._open_locked(next(iter(gens))):
                live = list(range(len(reservations)))  # the usual commit: no clear since
                chosen, live_keys, live_fps = reservations, keys, fps
            else:
                live = []
                for j, res in enumerate(reservations):
                    if self._open_locked(res.generation):
                        live.append(j)
                        continue
                    self._invalidate(res.offset, res.nbytes)
                    self._allocator.free(res.offset, self._slot_bytes(res.nbytes))
                    self._counts["refused_after_clear"] += 1
                if not live:
                    return [], [], None
                chosen = [reservations[j] for j in live]
                live_keys, live_fps = [keys[j] for j in live], fps[live]
            slots, nbytes, kinds = (
                list(map(_OFFSET, chosen)),
                list(map(_NBYTES, chosen)),
                list(map(_OBJ_TYPE, chosen)),
            )
            index_rows = self._index.rows(slots, nbytes, list(map(_VERSION, chosen)), kinds)
            done = self._publish_locked(live_keys, live_fps, index_rows, slots, nbytes, kinds)
            look = self._index.lookup(live_keys, live_fps) if where else None
        return live, done, look

    def cancel(self, reservations: Sequence[Reservation]) -> None:
        """Free reservations that will not be published."""
        with self._lock:
            for res in reservations:
                if not self._closed:
                    self._invalidate(res.offset, res.nbytes)
                    self._allocator.free(res.offset, self._slot_bytes(res.nbytes))

    def remove_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> int:
        """Remove each key present; returns how many were. The usual call (a store call's
        victims: slots of one size, none pinned by a reader) frees them in one allocator step."""
        if fps is None:
            fps = fingerprints(keys)
        with self._lock:
            look = self._index.lookup(keys, fps)
            found = np.flatnonzero(look.found)
            if not len(found):
                return 0
            at: list[int] = found.tolist()
            if len(set(keys)) < len(keys):  # a key given twice is removed once: its first position
                _fps, first = np.unique(fps[found], return_index=True)
                at = found[np.sort(first)].tolist()
            if len(at) == len(keys):  # every key present once (a store call's victims)
                gone, offsets, sizes, at_fps = list(keys), look.offsets, look.sizes, fps
            else:
                gone, offsets, sizes, at_fps = (
                    [keys[j] for j in at],
                    look.offsets[at],
                    look.sizes[at],
                    fps[at],
                )
            nbytes = sizes.tolist()
            pinned = self._index.remove(at_fps, offsets)
            slots = offsets.tolist()
            self.events.removed(self.name, gone)
            if len(set(nbytes)) == 1 and len(at) > 1 and not pinned.any():
                if self.headers:
                    self._write_headers(slots, nbytes, STATE_FREE)
                self._allocator.free_many(slots, self._slot_bytes(nbytes[0]))
            else:
                for offset, size, held in zip(slots, nbytes, pinned.tolist(), strict=True):
                    self._release_locked(offset, size, held)
            self._counts["removals"] += len(at)
        if self._allocator.released:
            self.release_retired()
        return len(at)

    # ------------------------------------------------------------------ clear (the fence)
    @property
    def generation(self) -> int:
        """The clear fence: what an operation that may publish later (a promotion, a set, a
        re-warm, a served reservation) reads when it starts, before it reads any bytes. Even
        while no clear runs; odd from ``begin_clear`` to ``end_clear``. An operation publishes
        only if the generation is still the one it read and even."""
        return self._generation

    def begin_clear(self) -> None:
        """Close the fence: nothing started before now or until ``end_clear`` publishes."""
        with self._lock:
            if not self._generation & 1:
                self._generation += 1

    def end_clear(self) -> None:
        """Open the fence again (operations starting from now on publish)."""
        with self._lock:
            if self._generation & 1:
                self._generation += 1

    def _open_locked(self, generation: int) -> bool:
        return generation == self._generation and not generation & 1

    def _free_unpublished_locked(self, offsets: Sequence[int | None], sizes: Sequence[int]) -> None:
        for offset, nbytes in zip(offsets, sizes, strict=True):
            if offset is not None:
                self._invalidate(offset, nbytes)
                self._allocator.free(offset, self._slot_bytes(nbytes))

    def clear(self) -> None:
        """Drop every entry. Operations that started before (``generation``) never publish after
        it; inside ``begin_clear``/``end_clear`` (the store's clear of all tiers) the fence stays
        closed until ``end_clear``."""
        with self._lock:
            began = not self._generation & 1
            if began:
                self._generation += 1
            _keys, offsets, sizes, held = self._index.remove_all()
            for offset, nbytes, pinned in zip(offsets.tolist(), sizes.tolist(), held.tolist(), strict=True):
                self._release_locked(offset, nbytes, pinned)
            self.events.cleared(self.name)
            if began:
                self._generation += 1

    # ------------------------------------------------------------------ reads
    def get_batch_into(
        self,
        items: Sequence[tuple[str, Parts, AccessContext]],
        deadline: float | None = None,
        *,
        fps: np.ndarray | None = None,
    ) -> list[bool]:
        """Look up, pin, copy out and unpin the whole batch in one native call, no lock taken
        (``DramIndex.read_into``). A key found at another size, or whose fingerprint another key
        holds, is a miss (counted as ``size_mismatch`` / ``fingerprint_collisions``); a found
        page's part the copy refuses misses the whole batch. ``fps``: the keys' fingerprints (``Tier``'s
        contract; None: computed here)."""
        n = len(items)
        keys = list(map(_ITEM_KEY, items))
        if fps is None:
            fps = fingerprints(keys)
        if self._closed:
            return [False] * n
        try:
            hits, hit, freed = self._index.read_into(
                keys, fps, self._arena.bytes, list(map(_ITEM_PARTS, items))
            )
        except (ValueError, TypeError, BufferError) as exc:  # a part the copy refuses; closed
            log.debug("DRAM get of %d pages not copied: %s", n, exc)
            return [False] * n
        if freed:
            self._free_zombies()
        return [True] * n if hit is None else hit

    def _free_zombies(self) -> None:
        """Give the zombies the index freed back to the allocator (a reader's last unpin)."""
        with self._lock:
            self._free_zombies_locked()
        if self._allocator.released:
            self.release_retired()

    def _free_zombies_locked(self) -> None:
        for offset, nbytes in self._index.take_freed():
            if not self._closed:
                self._allocator.free(offset, self._slot_bytes(nbytes))

    # ------------------------------------------------------------------ pinned access (the mover)
    def pin_entries(self, keys: Sequence[str]) -> list[Pinned | None]:
        """Pin resident entries for reading (copies to a lower tier, two-sided sends), in one
        index call that takes no lock; ``release`` unpins them."""
        arena = self._arena.bytes  # taken first: a close meanwhile leaves these bytes mapped
        if self._closed:
            return [None] * len(keys)
        found, offsets, sizes, reads = self._index.pin_found(keys, fingerprints(keys))
        rows = zip(keys, found.tolist(), offsets.tolist(), sizes.tolist(), reads, strict=True)
        return [
            Pinned(key, offset, nbytes, arena[offset : offset + nbytes], hits) if ok else None
            for key, ok, offset, nbytes, hits in rows
        ]

    def release(self, pinned: Sequence[Pinned]) -> None:
        """Unpin entries ``pin_entries`` pinned (no lock unless a zombie's last pin goes)."""
        if pinned and self._index.unpin([p.offset for p in pinned]):
            self._free_zombies()

    def object_type(self, key: str) -> int | None:
        fps = fingerprints([key])
        with self._lock:
            look = self._index.lookup([key], fps)
        return int(look.obj_types[0]) if look.found[0] else None

    # ------------------------------------------------------------------ resizing
    @property
    def max_capacity_bytes(self) -> int:
        return self._allocator.max_slabs * self._allocator.slab_size

    def resize(self, capacity: int) -> int:
        """Use ``capacity`` bytes (whole slabs, at least one, at most ``max_capacity_bytes``) from
        now on; returns the capacity in effect. Growing faults the new slabs in first (outside the
        lock; bounded by the memory copied), shrinking retires slabs (see the module docstring)."""
        alloc = self._allocator
        slabs = capacity // alloc.slab_size
        if not 1 <= slabs <= alloc.max_slabs:
            raise ValueError(
                f"DRAM capacity must be 1 to {alloc.max_slabs} slabs of {alloc.slab_size} bytes, got {capacity}"
            )
        with self._resize_lock:  # no retired slab is given back while slabs come back into use
            if slabs > alloc.slab_count and self._prefault:
                start = alloc.slab_count * alloc.slab_size
                self._arena.populate(start, (slabs - alloc.slab_count) * alloc.slab_size)
            with self._lock:
                if self._closed:
                    return alloc.capacity
                alloc.set_slab_limit(slabs)
        self.release_retired()
        return alloc.capacity

    def retired_keys(self, limit: int = 1 << 30) -> list[str]:
        """Keys whose slots lie in retired slabs (to relocate or move out), at most ``limit``."""
        alloc = self._allocator
        with self._lock:
            if not alloc.retired_in_use:
                return []
            keys, offsets, *_rest = self._index.items()
        retired = np.flatnonzero(offsets >= np.uint64(alloc.slab_count * alloc.slab_size))[:limit]
        return [keys[i] for i in retired.tolist()]

    @property
    def retired_slabs_in_use(self) -> int:
        with self._lock:
            return self._allocator.retired_in_use

    def relocate(self, keys: Sequence[str]) -> list[bool]:
        """Copy entries that lie in retired slabs into free slots of the others, per key True when
        moved. Values are immutable, so both slots hold the same bytes while the index switches; a
        reader pinned on the old slot keeps it until done (it is freed by the last reader). False:
        not in a retired slab, gone meanwhile, or no free slot of its size."""
        moves: list[tuple[int, str, int, int, int, int]] = []  # (i, key, fp, old, nbytes, new)
        out = [False] * len(keys)
        fps = fingerprints(keys)
        with self._lock:
            if self._closed or self.headers:  # served arenas never resize (their size is fixed)
                return out
            look = self._index.lookup(keys, fps)
            rows = zip(look.found.tolist(), look.offsets.tolist(), look.sizes.tolist(), strict=True)
            for i, (ok, offset, nbytes) in enumerate(rows):
                if (
                    not ok
                    or not self._allocator.is_retired(offset)
                    or any(m[2] == int(fps[i]) for m in moves)
                ):
                    continue
                new = self._allocator.alloc(self._slot_bytes(nbytes))
                if new is None:
                    continue
                self._index.pin([offset])
                moves.append((i, keys[i], int(fps[i]), offset, nbytes, new))
        if moves:
            arena = self._arena.bytes
            olds = np.array([m[3] for m in moves], dtype=np.uint64)
            news = np.array([m[5] for m in moves], dtype=np.uint64)
            copy_pages(arena, news, arena, olds, np.array([m[4] for m in moves], dtype=np.uint64))
        with self._lock:
            for i, key, fp, offset, nbytes, new in moves:
                if not self._closed and self._index.move(fp, key, offset, new):
                    self._release_locked(offset, nbytes, True)  # a zombie until the unpin below
                    out[i] = True
                    self._counts["relocated"] += 1
                elif not self._closed:
                    self._allocator.free(new, self._slot_bytes(nbytes))
                self._unpin_locked([offset])
        self.release_retired()
        return out

    def release_retired(self) -> int:
        """Give back the memory of retired slabs that became empty; returns how many."""
        with self._resize_lock:
            with self._lock:
                slabs = self._allocator.take_released()
            size = self._allocator.slab_size
            for slab in slabs:
                self._arena.release(slab * size, size)
        return len(slabs)

    # ------------------------------------------------------------------ internals
    def _alloc_batch_locked(self, sizes: Sequence[int]) -> list[int | None]:
        """A slot offset for each of ``sizes`` (in order; None: larger than a slab, or no free slot
        of its class, each counted), in one allocator call."""
        offsets, too_large = self._allocator.alloc_batch(
            list(map(self._slot_bytes, sizes)) if self.headers else sizes
        )
        if too_large:
            self._counts["rejected_too_large"] += too_large
        missing = offsets.count(None) - too_large
        if missing:
            self._counts["rejected_no_space"] += missing
        return offsets

    def _publish_locked(
        self,
        keys: Sequence[str],
        fps: np.ndarray,
        rows: np.ndarray,
        offsets: Sequence[int],
        sizes: Sequence[int],
        obj_types: Sequence[int],
    ) -> list[bool]:
        """Make each key findable at its filled slot, in one index call (``rows``: the index rows
        of ``offsets``, ``sizes``, their versions and ``obj_types``, ``DramIndex.rows``). A key
        published meanwhile (by another writer, or earlier in this batch) keeps its first
        (immutable) value: this slot is freed, True. A fingerprint another key holds: this slot
        is freed, False (``fingerprint_collisions``)."""
        m = len(keys)
        if not m:
            return []
        if self.headers:  # VALID before the row is findable (one-sided readers locate it after)
            self._write_headers(offsets, sizes, STATE_VALID, rows[:, 2].tolist(), keys, obj_types)
        status = self._index.publish(keys, fps, rows)
        published = status == 1
        if published.all():
            kept_keys, kept_bytes = keys, sum(sizes)
        else:
            for j in np.flatnonzero(~published).tolist():
                self._invalidate(offsets[j], sizes[j])
                self._allocator.free(offsets[j], self._slot_bytes(sizes[j]))
            self._counts["fingerprint_collisions"] += int((status < 0).sum())
            picked: list[int] = np.flatnonzero(published).tolist()
            kept_keys = [keys[j] for j in picked]
            kept_bytes = sum(sizes[j] for j in picked)
        if kept_keys:
            self.events.stored(self.name, list(kept_keys))
            self._counts["puts"] += len(kept_keys)
            self._counts["put_bytes"] += kept_bytes
        return (status >= 0).tolist()

    def _release_locked(self, offset: int, nbytes: int, pinned: bool) -> None:
        """Free a slot whose row is gone; ``pinned``: a reader held it when its row was dropped,
        so the index keeps it as a zombie and it is freed with its last unpin."""
        self._invalidate(offset, nbytes)  # one-sided readers miss from now on
        if not pinned:
            self._allocator.free(offset, self._slot_bytes(nbytes))

    def _unpin_locked(self, offsets: Sequence[int] | np.ndarray) -> None:
        """Drop one pin of each slot (one index call); a zombie's last pin frees it."""
        if len(offsets) and self._index.unpin(offsets):
            self._free_zombies_locked()

    # ------------------------------------------------------------------ lifecycle
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "tier": self.name,
                "entries": len(self._index),
                "index_bytes": self._index.nbytes,
                "used_bytes": self._allocator.used_bytes,
                "capacity_bytes": self._allocator.capacity,
                "max_capacity_bytes": self.max_capacity_bytes,
                "free_slabs": self._allocator.free_slab_count,
                "retired_slabs_in_use": self._allocator.retired_in_use,
                "zombies": self._index.zombie_count,
                **self._counts,
                **{name: self._counts[name] + count for name, count in self._index.read_counts.items()},
            }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._index.clear()
        self._arena.close()
