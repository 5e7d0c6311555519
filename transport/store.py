"""The node's object store: key -> slot in the arena, local eviction, pins and reservations.

Every slot is ``[64-byte ObjectHeader][body]``. Writers reserve a slot (header state WRITING),
fill the body outside the lock (straight from the socket, or one-sided by a client), then commit
(header VALID, key becomes visible). Two-sided readers pin a slot while they send it, so it is not
reused under them; one-sided readers do not pin: they validate the header instead. Freeing a slot
clears its header first, so a stale one-sided read of it is a miss.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .arena import Allocator, Arena
from .eviction import Evictor, LruEvictor
from .object_header import (
    HEADER_SIZE,
    STATE_VALID,
    STATE_WRITING,
    ObjectHeader,
    key_hash,
    mark_free,
    write_header,
)
from .wire import SlotRef

RESERVED_NEW = 0
RESERVED_PRESENT = 1
RESERVED_NO_SPACE = 2
RESERVED_BUSY = 3


@dataclass(slots=True)
class Slot:
    key: str
    offset: int  # of the header
    alloc_size: int
    size: int  # body bytes
    version: int
    obj_type: int
    owner: object = None
    pins: int = 0
    dead: bool = False  # removed or evicted while pinned: free when the last pin goes
    created: float = field(default_factory=time.monotonic)

    @property
    def body(self) -> int:
        return self.offset + HEADER_SIZE


class NodeStore:
    def __init__(self, arena: Arena, evictor: Evictor | None = None) -> None:
        self.arena = arena
        self.view = arena.view
        self._alloc = Allocator(arena.capacity, arena.data_offset)
        self._evictor: Evictor = evictor if evictor is not None else LruEvictor()
        self._index: dict[str, Slot] = {}
        self._pending: dict[str, Slot] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(int(time.time() * 1_000_000))
        self.counters: dict[str, int] = {
            "hits": 0,
            "misses": 0,
            "stored": 0,
            "already_present": 0,
            "no_space": 0,
            "evicted": 0,
            "removed": 0,
        }

    # ---- writers --------------------------------------------------------------------------

    def reserve(self, key: str, size: int, obj_type: int, owner: object = None) -> tuple[int, Slot | None]:
        need = HEADER_SIZE + size
        with self._lock:
            if key in self._index:
                self.counters["already_present"] += 1
                self._evictor.on_hit(key)
                return RESERVED_PRESENT, None
            if key in self._pending:
                return RESERVED_BUSY, None
            offset = self._alloc.alloc(need)
            if offset is None and need <= self._alloc.capacity:  # never evict for the impossible
                offset = self._make_room(need)
            if offset is None:
                self.counters["no_space"] += 1
                return RESERVED_NO_SPACE, None
            slot = Slot(key, offset, need, size, next(self._versions), obj_type, owner)
            write_header(
                self.view, offset, ObjectHeader(STATE_WRITING, slot.version, key_hash(key), size, obj_type)
            )
            self._pending[key] = slot
            return RESERVED_NEW, slot

    def commit(self, slot: Slot) -> bool:
        with self._lock:
            if self._pending.get(slot.key) is not slot:
                return False
            del self._pending[slot.key]
            write_header(
                self.view,
                slot.offset,
                ObjectHeader(STATE_VALID, slot.version, key_hash(slot.key), slot.size, slot.obj_type),
            )
            slot.owner = None
            self._index[slot.key] = slot
            self._evictor.on_insert(slot.key)
            self.counters["stored"] += 1
            return True

    def commit_key(self, key: str, version: int, owner: object) -> bool:
        with self._lock:
            slot = self._pending.get(key)
        if slot is None or slot.version != version or slot.owner is not owner:
            return False
        return self.commit(slot)

    def abort(self, slot: Slot) -> None:
        with self._lock:
            if self._pending.get(slot.key) is slot:
                del self._pending[slot.key]
                self._free(slot)

    def abort_key(self, key: str, version: int, owner: object) -> None:
        with self._lock:
            slot = self._pending.get(key)
        if slot is not None and slot.version == version and slot.owner is owner:
            self.abort(slot)

    def pending_slot(self, offset: int, length: int) -> Slot | None:
        """The reservation whose body contains ``[offset, offset+length)`` (one-sided writers
        may only write into reservations, never over committed objects)."""
        with self._lock:
            for slot in self._pending.values():
                if slot.body <= offset and offset + length <= slot.body + slot.size:
                    return slot
        return None

    def owns_pending(self, owner: object) -> bool:
        """True while ``owner`` holds a reservation (its connection must not be closed as idle:
        a one-sided writer may be filling the slot right now)."""
        with self._lock:
            return any(s.owner is owner for s in self._pending.values())

    def release_owner(self, owner: object) -> int:
        """Abort every reservation ``owner`` (a dropped connection) still holds."""
        with self._lock:
            mine = [s for s in self._pending.values() if s.owner is owner]
            for slot in mine:
                del self._pending[slot.key]
                self._free(slot)
        return len(mine)

    # ---- readers --------------------------------------------------------------------------

    def exists(self, keys: list[str]) -> list[bool]:
        with self._lock:
            return [k in self._index for k in keys]

    def pin(self, key: str, expected_size: int) -> Slot | None:
        with self._lock:
            slot = self._index.get(key)
            if slot is None or slot.size != expected_size:
                self.counters["misses"] += 1
                return None
            slot.pins += 1
            self._evictor.on_hit(key)
            self.counters["hits"] += 1
            return slot

    def unpin(self, slot: Slot) -> None:
        with self._lock:
            slot.pins -= 1
            if slot.pins == 0 and slot.dead:
                self._free(slot)

    def lookup(self, keys: list[str]) -> list[SlotRef]:
        out = []
        with self._lock:
            for key in keys:
                slot = self._index.get(key)
                if slot is None:
                    self.counters["misses"] += 1
                    out.append(SlotRef(False))
                else:
                    self.counters["hits"] += 1
                    self._evictor.on_hit(key)
                    out.append(SlotRef(True, slot.offset, slot.size, slot.version, slot.obj_type))
        return out

    def live_extent(self, offset: int, length: int) -> bool:
        """True when ``[offset, offset+length)`` lies inside one committed slot (READ_AT check)."""
        with self._lock:
            return any(
                s.offset <= offset and offset + length <= s.offset + s.alloc_size
                for s in self._index.values()
            )

    # ---- removal --------------------------------------------------------------------------

    def remove(self, keys: list[str]) -> list[bool]:
        out = []
        with self._lock:
            for key in keys:
                slot = self._index.pop(key, None)
                if slot is None:
                    out.append(False)
                    continue
                self._evictor.on_remove(key)
                self._retire(slot)
                self.counters["removed"] += 1
                out.append(True)
        return out

    def clear(self) -> int:
        with self._lock:
            slots = list(self._index.values())
            self._index.clear()
            for slot in slots:
                self._evictor.on_remove(slot.key)
                self._retire(slot)
            self.counters["removed"] += len(slots)
            return len(slots)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self.counters,
                "objects": len(self._index),
                "pending": len(self._pending),
                "capacity": self.arena.capacity,
                "used": self._alloc.used,
            }

    # ---- internals (lock held) ------------------------------------------------------------

    def _make_room(self, need: int) -> int | None:
        skipped: list[str] = []
        offset = None
        try:
            while offset is None:
                victim = self._evictor.pop_victim()
                if victim is None:
                    break
                slot = self._index.get(victim)
                if slot is None:
                    continue
                if slot.pins:
                    skipped.append(victim)
                    continue
                del self._index[victim]
                self._retire(slot)
                self.counters["evicted"] += 1
                offset = self._alloc.alloc(need)
        finally:
            for key in skipped:
                self._evictor.on_insert(key)
        return offset

    def _retire(self, slot: Slot) -> None:
        mark_free(self.view, slot.offset)
        if slot.pins:
            slot.dead = True
        else:
            self._free(slot)

    def _free(self, slot: Slot) -> None:
        mark_free(self.view, slot.offset)
        self._alloc.free(slot.offset, slot.alloc_size)
