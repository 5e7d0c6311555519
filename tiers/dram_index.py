"""The DRAM tier's index: object key -> (slot offset, size, version, object type), keyed by the
key's 64-bit fingerprint in a native ``FpTable``; the full key is kept per slot and checked on
every lookup.

Entries: one table row per published object, three 64-bit words: the slot offset, the size with
the object type in its top 16 bits, the version. The full key lives in a side array indexed by
slot (``offset >> 12``: every slot starts on a 4 KiB boundary, ``slab_allocator.ALIGN``): private
arenas have no object header to hold it, and a served arena's header has room for the key's hash
only. A lookup whose fingerprint is present but whose slot holds another key is a *collision*:
it is answered as a miss (``Lookup.collided``), never with the other key's slot.

Invariants: a fingerprint is in the table exactly when the slot of its row has its key in the
side array; a slot's key is cleared when its row is removed. Not thread-safe: the tier's lock
guards every call (the table's own lock only makes each native call atomic).
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple, cast

import numpy as np

from hicache_mooncake.native import FpTable, fingerprints

from .slab_allocator import ALIGN

SLOT_SHIFT = ALIGN.bit_length() - 1
assert 1 << SLOT_SHIFT == ALIGN
_TYPE_SHIFT = 48
_SIZE_MASK = (1 << _TYPE_SHIFT) - 1


class Lookup(NamedTuple):
    """What ``DramIndex.lookup`` found for a batch of keys (arrays of the batch's length)."""

    fps: np.ndarray
    """The keys' fingerprints (uint64)."""
    found: np.ndarray
    """The key itself is published (bool)."""
    occupied: np.ndarray
    """Its fingerprint is in the table, for this key or another one (bool)."""
    offsets: np.ndarray
    """Slot offset of each row found (uint64; 0 where not ``occupied``)."""
    sizes: np.ndarray
    """Object size of each row found (uint64)."""
    versions: np.ndarray
    obj_types: np.ndarray

    @property
    def collided(self) -> np.ndarray:
        """The fingerprint is present for another key: a miss."""
        return self.occupied & ~self.found


class DramIndex:
    def __init__(self, arena_bytes: int) -> None:
        self._table = FpTable(value_words=3, capacity=1024)
        self._slot_keys: list[str | None] = [None] * (arena_bytes >> SLOT_SHIFT)

    def __len__(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        """Bytes this index allocates: the table and the side array's pointers (not the keys)."""
        return int(self._table.nbytes) + 8 * len(self._slot_keys)

    # ------------------------------------------------------------------ lookups
    def lookup(self, keys: Sequence[str], fps: np.ndarray | None = None) -> Lookup:
        """Look ``keys`` up in one table call; each row found is checked against its slot's key."""
        if fps is None:
            fps = fingerprints(keys)
        occupied, values = self._table.get(fps)
        offsets = values[:, 0]
        if occupied.any():
            stored = map(self._slot_keys.__getitem__, (offsets >> SLOT_SHIFT).tolist())
            found = occupied & np.fromiter(map(operator.eq, stored, keys), bool, len(keys))
        else:  # every key new (a set's usual call): nothing to compare
            found = occupied
        word1 = values[:, 1]
        return Lookup(fps, found, occupied, offsets, word1 & _SIZE_MASK, values[:, 2], word1 >> _TYPE_SHIFT)

    def occupied(self, fps: np.ndarray) -> np.ndarray:
        """Whether each fingerprint is in the table (for any key): one native call, no values."""
        return self._table.contains(fps)

    def key_at(self, offset: int) -> str | None:
        return self._slot_keys[offset >> SLOT_SHIFT]

    def items(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every entry: (keys, offsets, sizes, versions, object types), in table order."""
        _fps, values = self._table.items()
        offsets = values[:, 0]
        keys = list(map(self._slot_keys.__getitem__, (offsets >> SLOT_SHIFT).tolist()))
        word1 = values[:, 1]
        return cast(list[str], keys), offsets, word1 & _SIZE_MASK, values[:, 2], word1 >> _TYPE_SHIFT

    # ------------------------------------------------------------------ changes
    def insert(
        self,
        keys: Sequence[str],
        fps: np.ndarray,
        offsets: Sequence[int],
        sizes: Sequence[int],
        versions: Sequence[int],
        obj_types: Sequence[int],
    ) -> None:
        """Publish entries whose fingerprints are absent and distinct (the caller checked)."""
        n = len(keys)
        values = np.empty((n, 3), dtype=np.uint64)
        values[:, 0] = offsets
        values[:, 1] = np.asarray(sizes, dtype=np.uint64) | (
            np.asarray(obj_types, dtype=np.uint64) << np.uint64(_TYPE_SHIFT)
        )
        values[:, 2] = versions
        deque(map(self._slot_keys.__setitem__, (values[:, 0] >> SLOT_SHIFT).tolist(), keys), maxlen=0)
        self._table.put(fps, values)

    def move(self, fp: int, key: str, old_offset: int, new_offset: int) -> bool:
        """Point ``key``'s row at ``new_offset`` if it is still at ``old_offset`` (relocation)."""
        fps = np.array([fp], dtype=np.uint64)
        found, values = self._table.get(fps)
        if not found[0] or int(values[0, 0]) != old_offset or self.key_at(old_offset) != key:
            return False
        values[0, 0] = new_offset
        self._table.put(fps, values)
        self._slot_keys[old_offset >> SLOT_SHIFT] = None
        self._slot_keys[new_offset >> SLOT_SHIFT] = key
        return True

    def remove(self, fps: np.ndarray, offsets: np.ndarray) -> None:
        """Drop the rows of ``fps`` (found by ``lookup``: their keys verified) at ``offsets``."""
        self._table.remove_if(fps, offsets)
        slots = (offsets >> SLOT_SHIFT).tolist()
        deque(map(self._slot_keys.__setitem__, slots, repeat(None, len(slots))), maxlen=0)

    def clear(self) -> None:
        _fps, values = self._table.items()
        slots = (values[:, 0] >> SLOT_SHIFT).tolist()
        deque(map(self._slot_keys.__setitem__, slots, repeat(None, len(slots))), maxlen=0)
        self._table.clear()
