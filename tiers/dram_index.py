"""The DRAM tier's index: object key -> (slot offset, size, version, object type), keyed by the
key's 64-bit fingerprint in one native ``SlotIndex``, which also keeps, per slot, the full key
(checked on every lookup), the readers' pins and the reads.

Rows: three 64-bit words per published object: the slot offset, the size with the object type in
its top 16 bits, the version. Slots start on 4 KiB boundaries (``slab_allocator.ALIGN``): private
arenas have no object header to hold the key, and a served arena's header has room for the key's
hash only, so the key lives in the index. A lookup whose fingerprint is present but whose slot
holds another key is a *collision*: answered as a miss (``Lookup.collided``), never with the
other key's slot.

Invariants: a fingerprint has a row exactly when its slot holds its key; pins and reads belong to
slots and outlive rows (a slot removed while pinned is the tier's zombie, freed with its last pin).
Not thread-safe: the tier's lock guards every call. A batch is one native call, the GIL held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hicache_mooncake.native import SlotIndex, fingerprints

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


class Reads(NamedTuple):
    """What ``DramIndex.read_pin`` pinned for a batch of keys."""

    chosen: np.ndarray
    """Indices (in the batch, int64) of the keys found with their expected size: pinned, a read
    counted."""
    offsets: np.ndarray
    """Their slot offsets (uint64)."""
    found: int
    """Keys found at any size."""
    collided: int
    """Fingerprints another key holds."""


class DramIndex:
    def __init__(self, arena_bytes: int) -> None:
        self._index = SlotIndex(max(1, arena_bytes >> SLOT_SHIFT), SLOT_SHIFT)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        """Bytes this index allocates: its table, its per-slot records and the keys' bytes."""
        return self._index.nbytes

    # ------------------------------------------------------------------ lookups
    def lookup(self, keys: Sequence[str], fps: np.ndarray | None = None) -> Lookup:
        """Look ``keys`` up in one native call; each row found is checked against its slot's key."""
        if fps is None:
            fps = fingerprints(keys)
        found, occupied, rows = self._index.lookup(keys, fps)
        word1 = rows[:, 1]
        return Lookup(fps, found, occupied, rows[:, 0], word1 & _SIZE_MASK, rows[:, 2], word1 >> _TYPE_SHIFT)

    def read_pin(self, keys: Sequence[str], fps: np.ndarray, sizes: Sequence[int]) -> Reads:
        """The readable keys (found, at their expected size) pinned and counted as read, in one call."""
        return Reads(*self._index.read_pin(keys, fps, sizes))

    def key_at(self, offset: int) -> str | None:
        return self._index.key_at(offset)

    def items(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every entry: (keys, offsets, sizes, versions, object types), in table order."""
        keys, _fps, rows = self._index.rows()
        word1 = rows[:, 1]
        return keys, rows[:, 0], word1 & _SIZE_MASK, rows[:, 2], word1 >> _TYPE_SHIFT

    # ------------------------------------------------------------------ pins and reads
    def pin(self, offsets: Sequence[int]) -> list[int]:
        """One more pin on each slot; returns each slot's reads since its object was published."""
        return self._index.pin(offsets).tolist()

    def unpin(self, offsets: Sequence[int] | np.ndarray) -> np.ndarray:
        """One pin less on each slot (ValueError for a slot not pinned, nothing dropped); True
        where that was the slot's last pin."""
        return self._index.unpin(offsets)

    def pinned(self, offsets: Sequence[int] | np.ndarray) -> np.ndarray:
        return self._index.pinned(offsets)

    def pinned_offsets(self) -> list[int]:
        return self._index.pinned_offsets()

    def count_reads(self, offsets: np.ndarray) -> None:
        self._index.count_reads(offsets)

    # ------------------------------------------------------------------ changes
    @staticmethod
    def rows(
        offsets: Sequence[int], sizes: Sequence[int], versions: Sequence[int], obj_types: Sequence[int]
    ) -> np.ndarray:
        """The index rows ``publish`` takes for slots at ``offsets`` holding objects of ``sizes``,
        ``versions`` and ``obj_types`` (n x 3 words: offset, size | type << 52, version)."""
        word1 = (
            [s | (t << _TYPE_SHIFT) for s, t in zip(sizes, obj_types, strict=True)]
            if any(obj_types)
            else sizes
        )
        rows = np.empty((len(offsets), 3), dtype=np.uint64)
        rows.T[:] = [offsets, word1, versions]
        return rows

    def publish(self, keys: Sequence[str], fps: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Publish each key at its (filled, unpublished) slot of its row (``rows``), in one call;
        int64 status per key: 1 published, 0 published already (this key, in the table or
        earlier in the batch: the first value stays), -1 its fingerprint is another key's (a
        collision)."""
        return self._index.publish(keys, fps, rows)

    def move(self, fp: int, key: str, old_offset: int, new_offset: int) -> bool:
        """Point ``key``'s row at ``new_offset`` if it is still at ``old_offset`` (relocation; the
        reads move with it)."""
        return self._index.move(fp, key, old_offset, new_offset)

    def remove(self, fps: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Drop the rows of ``fps`` (found by ``lookup``: their keys verified) at ``offsets``;
        returns whether each slot is pinned by a reader."""
        _removed, pinned = self._index.remove(fps, offsets)
        return pinned

    def clear(self) -> None:
        self._index.clear()
