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
slots and outlive rows. A slot whose row is dropped while a reader pins it is a *zombie*, kept by
the index with its size; its last unpin puts it on the index's freed list, which the tier empties
(``take_freed``) into its allocator under its lock.
Concurrency: every call is one native call with the GIL held throughout, so each is atomic. The
tier's lock serialises the calls that change rows; ``read_into`` (a get's lookup, pins, copy and
unpins), ``pin_found`` and ``unpin`` take no lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hicache_mooncake.native import SlotIndex, fingerprints

from .parts import Parts
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

    def sizes(self, keys: Sequence[str], fps: np.ndarray) -> np.ndarray:
        """Each key's published size, -1 where absent (int64), in one native call (no rows)."""
        return self._index.sizes(keys, fps)[0]

    def read_into(
        self, keys: Sequence[str], fps: np.ndarray, arena: np.ndarray, pages: Sequence[Parts]
    ) -> tuple[int, list[bool] | None, int]:
        """Each key found at its page's size copied out of ``arena`` into its page (pinned and
        counted as a read while it is copied), in one native call that takes no lock: (keys
        copied, per key whether it was or None when all were, zombies waiting in the freed
        list). ValueError / TypeError / BufferError on a bad part, nothing copied."""
        return self._index.read_into(keys, fps, arena, pages)

    @property
    def read_counts(self) -> dict[str, int]:
        """``read_into``'s hits, hit_bytes, misses, size_mismatch, fingerprint_collisions."""
        return self._index.read_counts

    @property
    def zombie_count(self) -> int:
        return self._index.zombie_count

    def take_freed(self) -> list[tuple[int, int]]:
        """(offset, size) of each zombie whose last pin went, to give back to the allocator."""
        return self._index.take_freed()

    def key_at(self, offset: int) -> str | None:
        return self._index.key_at(offset)

    def items(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every entry: (keys, offsets, sizes, versions, object types), in table order."""
        keys, _fps, rows = self._index.rows()
        word1 = rows[:, 1]
        return keys, rows[:, 0], word1 & _SIZE_MASK, rows[:, 2], word1 >> _TYPE_SHIFT

    def remove_all(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Drop every row (as ``remove``; the caller holds the tier's lock, so no row is added
        meanwhile), then give the table's memory back: (keys, offsets, sizes, whether each slot
        is pinned: those became zombies; the caller frees the others)."""
        keys, fps, rows = self._index.rows()
        _removed, pinned = self._index.remove(fps, rows[:, 0])
        self._index.clear()  # empty now: only its memory goes
        return keys, rows[:, 0], rows[:, 1] & _SIZE_MASK, pinned

    # ------------------------------------------------------------------ pins and reads
    def pin_found(
        self, keys: Sequence[str], fps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Look ``keys`` up and pin every one found, in one native call that takes no lock:
        (found, offsets, sizes, each found slot's reads so far)."""
        found, rows, reads = self._index.pin_found(keys, fps)
        return found, rows[:, 0], rows[:, 1] & _SIZE_MASK, reads.tolist()

    def pin(self, offsets: Sequence[int]) -> list[int]:
        """One more pin on each slot; returns each slot's reads since its object was published."""
        return self._index.pin(offsets).tolist()

    def unpin(self, offsets: Sequence[int] | np.ndarray) -> int:
        """One pin less on each slot (ValueError for a slot not pinned, nothing dropped); returns
        the zombies waiting in the freed list."""
        return self._index.unpin(offsets)

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
        reads move with it); the old slot, which the caller pins, becomes a zombie."""
        return self._index.move(fp, key, old_offset, new_offset)

    def remove(self, fps: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Drop the rows of ``fps`` (found by ``lookup``: their keys verified) at ``offsets``;
        returns whether each slot is pinned by a reader (a zombie now; the caller frees the
        others)."""
        _removed, pinned = self._index.remove(fps, offsets)
        return pinned

    def clear(self) -> None:
        """Drop every row (closing: nothing is freed afterwards; pinned slots become zombies)."""
        self._index.clear()
