"""``ArenaStore``: ONE ``TieredStore`` served by a ``NodeServer`` (the host cache, memory nodes).

The store's DRAM tier keeps object headers (and, for same-host clients, its arena in shared
memory); this adapter implements transport's ``ServedStore`` protocol over it, so the service runs
the same store, placement and policy code as a process that keeps its tiers in-process:

- ``reserve`` -> ``TieredStore.reserve_batch`` (DRAM slots, room made as for a set);
  ``commit`` -> ``commit_batch`` (the placement's ``set``, one policy call per key);
- ``lookup`` / ``pin`` -> ``locate_batch`` (an SSD or pool hit is read into DRAM first, within
  the deadline; the placement's ``hit``);
- ``exists`` -> ``exists_batch``; ``remove``, ``clear``, ``stats`` as the store's.

Reservations belong to an owner (a connection) until committed or aborted; ``release_owner``
aborts them when the connection goes, so a client that dies leaves no space reserved. A key
reserved by one writer is BUSY for the others until then. Wire offsets index the whole arena
mapping (``view``), header page included.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np

from hicache_mooncake.transport.node.served_store import (
    RESERVED_BUSY,
    RESERVED_NEW,
    RESERVED_NO_SPACE,
    RESERVED_PRESENT,
    PinnedBody,
)
from hicache_mooncake.transport.wire import SetHint, alloc_records, lookup_records

from .dram_tier import DramTier, Reservation
from .policy import AccessContext, ObjectType
from .policy.contexts import set_contexts
from .tiered_store import TieredStore

_CLAIMED = None  # a key being reserved right now (placeholder in ``_pending``)
_OFFSET = operator.attrgetter("offset")
_VERSION = operator.attrgetter("version")


def _obj_type(value: int) -> ObjectType:
    try:
        return ObjectType(value)
    except ValueError:
        return ObjectType.KV_PAGE


class ArenaStore:
    def __init__(self, store: TieredStore, flush_on_close_s: float = 0.0) -> None:
        dram = store.dram
        if dram is None or not dram.headers:
            raise ValueError("a served store needs a DRAM tier with object headers")
        self.store = store
        self.dram: DramTier = dram
        self.flush_on_close_s = flush_on_close_s
        self._pending: dict[str, tuple[Reservation, object, AccessContext] | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ the arena
    @property
    def view(self) -> memoryview:
        return self.dram.arena_view

    @property
    def shm_path(self) -> str:
        return self.dram.shm_path

    @property
    def data_offset(self) -> int:
        return self.dram.wire_offset(0)

    # ------------------------------------------------------------------ readers
    def exists(self, keys: Sequence[str]) -> list[bool]:
        return self.store.exists_batch(keys)

    def lookup(self, items: Sequence[tuple[str, int]], deadline: float) -> np.ndarray:
        """The LOOKUP records (``wire.lookup_records``) of ``items``: one array, no object per key."""
        keys = [k for k, _ in items]
        located = self.store.served.locate_batch(keys, [n for _, n in items], deadline)
        out = lookup_records(len(items))
        hit = [i for i, loc in enumerate(located) if loc is not None]
        if hit:
            rows = np.array([located[i] for i in hit], dtype=np.uint64)  # Located's fields in order
            base = np.uint64(self.dram.wire_offset(0))
            out["found"][hit] = 1
            out["offset"][hit] = rows[:, 0] + base
            out["size"][hit] = rows[:, 1]
            out["version"][hit] = rows[:, 2]
            out["obj_type"][hit] = rows[:, 3]
            out["header"][hit] = rows[:, 4] + base
        return out

    def pin(self, items: Sequence[tuple[str, int]], deadline: float) -> list[PinnedBody | None]:
        keys = [k for k, _ in items]
        located = self.store.served.locate_batch(keys, [n for _, n in items], deadline)
        hits = [i for i, loc in enumerate(located) if loc is not None]
        out: list[PinnedBody | None] = [None] * len(items)
        stray = []
        for i, pinned in zip(hits, self.dram.pin_entries([keys[i] for i in hits]), strict=True):
            if pinned is None:
                continue
            if pinned.nbytes != items[i][1]:
                stray.append(pinned)
                continue
            loc = located[i]
            assert loc is not None
            out[i] = PinnedBody(self.dram.wire_offset(pinned.offset), pinned.nbytes, loc.obj_type, pinned)
        self.dram.release(stray)
        return out

    def unpin(self, pins: Sequence[PinnedBody]) -> None:
        self.dram.release([p.handle for p in pins])

    def readable(self, offset: int, length: int) -> bool:
        start = offset - self.dram.wire_offset(0)
        return start >= 0 and self.dram.committed_extent(start, length)

    # ------------------------------------------------------------------ writers
    def fits(self, nbytes: int) -> bool:
        return self.dram.fits(nbytes)

    def reserve(
        self, items: Sequence[tuple[str, int, int]], owner: object, hint: SetHint, deadline: float
    ) -> np.ndarray:
        """The ALLOC records (``wire.alloc_records``) of ``items``: one array, no object per key
        beyond the pending reservations themselves. A key reserved by another writer (or earlier
        in ``items``) is BUSY."""
        out = alloc_records(len(items))  # RESERVED_NO_SPACE
        keys = [key for key, _size, _otype in items]
        with self._lock:
            if self._closed:
                return out
            pending = self._pending
            if len(set(keys)) == len(keys) and pending.keys().isdisjoint(keys):
                mine = list(range(len(keys)))  # the usual call: every key new to the pending
                pending.update(dict.fromkeys(keys, _CLAIMED))
            else:
                mine = []
                for i, key in enumerate(keys):
                    if key not in pending:
                        pending[key] = _CLAIMED
                        mine.append(i)
        busy = len(keys) - len(mine)
        if busy:
            out["status"] = RESERVED_BUSY
            out["status"][mine] = RESERVED_NO_SPACE
            if not mine:
                return out
            keys = [keys[i] for i in mine]
        ctxs = set_contexts(
            keys,
            hint.prefix_len or 0,
            hint.prev_key,
            [items[i][1] for i in mine],
            obj_type=_obj_type(items[mine[0]][2]),
        )
        got = self.store.served.reserve_batch(keys, ctxs, deadline)
        new = [j for j, res in enumerate(got) if res.__class__ is Reservation]
        made = cast("list[Reservation]", [got[j] for j in new])
        with self._lock:
            pending.update(
                zip([keys[j] for j in new], zip(made, repeat(owner), [ctxs[j] for j in new]), strict=True)
            )
            if len(new) < len(keys):
                for j, res in enumerate(got):
                    if res.__class__ is not Reservation:
                        del pending[keys[j]]
                        if res:
                            out["status"][mine[j]] = RESERVED_PRESENT
        if new:
            at = [mine[j] for j in new] if busy or len(new) < len(keys) else mine
            out["status"][at] = RESERVED_NEW
            out["offset"][at] = np.fromiter(map(_OFFSET, made), np.uint64, len(made)) + np.uint64(
                self.dram.wire_offset(0)
            )
            out["version"][at] = np.fromiter(map(_VERSION, made), np.uint64, len(made))
        return out

    def _take(
        self, items: Sequence[tuple[str, int]], owner: object
    ) -> list[tuple[int, Reservation, AccessContext]]:
        """Remove and return ``owner``'s reservations ``items`` (other owners' stay)."""
        taken = []
        with self._lock:
            for i, (key, version) in enumerate(items):
                entry = self._pending.get(key)
                if entry is not None and entry[0].version == version and entry[1] is owner:
                    del self._pending[key]
                    taken.append((i, entry[0], entry[2]))
        return taken

    def commit(self, items: Sequence[tuple[str, int]], owner: object, deadline: float) -> list[bool]:
        out = [False] * len(items)
        taken = self._take(items, owner)
        if taken:
            done = self.store.served.commit_batch(
                [r for _, r, _ in taken], [c for _, _, c in taken], deadline
            )
            for (i, _, _), ok in zip(taken, done, strict=True):
                out[i] = ok
        return out

    def abort(self, items: Sequence[tuple[str, int]], owner: object) -> None:
        self.store.served.abort_batch([r for _, r, _ in self._take(items, owner)])

    def writable(self, offset: int, length: int) -> bool:
        start = offset - self.dram.wire_offset(0)
        with self._lock:
            return any(
                e is not None and e[0].offset <= start and start + length <= e[0].offset + e[0].nbytes
                for e in self._pending.values()
            )

    def owns_pending(self, owner: object) -> bool:
        with self._lock:
            return any(e is not None and e[1] is owner for e in self._pending.values())

    def release_owner(self, owner: object) -> int:
        with self._lock:
            mine = [k for k, e in self._pending.items() if e is not None and e[1] is owner]
            reservations = [self._pending.pop(k)[0] for k in mine]  # type: ignore[index]
        self.store.served.abort_batch(reservations)
        return len(reservations)

    # ------------------------------------------------------------------ the rest
    def remove(self, keys: Sequence[str]) -> list[bool]:
        return [self.store.remove(k) for k in keys]

    def clear(self) -> int:
        before = len(self.dram.keys())
        self.store.clear()
        return before

    def stats(self) -> dict[str, Any]:
        dram = self.dram.stats()
        with self._lock:
            pending = sum(1 for e in self._pending.values() if e is not None)
        return {
            "objects": dram["entries"],
            "pending": pending,
            "capacity": dram["capacity_bytes"],
            "used": dram["used_bytes"],
            "tiers": self.store.stats(),
        }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            left = [e[0] for e in self._pending.values() if e is not None]
            self._pending.clear()
        self.store.served.abort_batch(left)
        self.store.close(self.flush_on_close_s)
