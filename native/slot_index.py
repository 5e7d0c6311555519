"""SlotIndex: the DRAM tier's index in one native structure (``native/src/hm_slotindex.c``).

Rows: 64-bit fingerprint -> three uint64 words (the slot offset first; the tier packs the size,
object type and version into the other two). Per slot of the arena (``offset >> slot_shift``):
the UTF-8 bytes of the key published there, the slot's pin count and its reads. Every lookup
compares the caller's key with the key of the row's slot: another key under the same fingerprint
is a collision, answered as a miss. A batch is one call, with the GIL held throughout (a
publish's growth rehashes one segment of at most ``segment_slots`` rows).

Invariants: a row exists exactly when its slot holds its key; pins and reads belong to the slot
and outlive its row; reads restart at 0 when a row is published there. A row dropped (``remove``,
``move``, ``clear``) while a reader pins its slot leaves a *zombie*: the index keeps the object's
size, and the unpin that drops the slot's last pin puts (offset, size) on the freed list, which the
caller empties (``take_freed``) to give the slot back to its allocator; room on that list is
reserved when the zombie is made, so an unpin never fails for a pinned slot.

Concurrency: each call holds the GIL from start to end, which makes it atomic; the caller
serialises the calls that change rows (the DRAM tier's lock). ``read_into``, ``pin_found`` and
``unpin`` need no lock: ``read_into`` looks up, checks and pins with the GIL held, releases it
once for the copy (the pins keep the slots from being freed) and unpins with it held again.

Bad arguments (an offset that is not a slot, a slot that holds a key or a zombie, a slot given
twice, a key that is not a str, an unpin below zero, a part that is not a writable C-contiguous
buffer) raise ValueError / TypeError / BufferError naming the item, and nothing changes; a
publish that runs out of memory raises MemoryError with the items before it published. Memory: 16 bytes per arena slot
(mapped and faulted in when the index is made), 4 bytes plus the key per published row, and the
table's 32 bytes per row at a load of 3/8 to 3/4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _core
from ._arrays import U64, BoolArray, I64Array, U64Array, as_u64

ROW_WORDS = 3
I64 = np.dtype(np.int64)


class SlotIndex:
    """See the module docstring."""

    __slots__ = ("_t",)

    def __init__(self, slots: int, slot_shift: int, segment_slots: int = 16384) -> None:
        self._t = _core.SlotIndex(slots, slot_shift, segment_slots)

    def __len__(self) -> int:
        return len(self._t)

    @property
    def nbytes(self) -> int:
        """Bytes of the table, the slot records and the key bytes."""
        return int(self._t.nbytes)

    @property
    def pinned_count(self) -> int:
        """Slots pinned now."""
        return int(self._t.pinned_count)

    def lookup(self, keys: Sequence[str], fps: Any) -> tuple[BoolArray, BoolArray, U64Array]:
        """(found, occupied, rows[n, 3]): found = the row's slot holds this key; occupied = a row
        exists for the fingerprint (this key's or a collision's); rows of absent keys are 0."""
        k = as_u64("fps", fps)
        found = np.empty(k.size, dtype=np.bool_)
        occupied = np.empty(k.size, dtype=np.bool_)
        rows = np.empty((k.size, ROW_WORDS), dtype=U64)
        self._t.lookup(keys, k, found, occupied, rows)
        return found, occupied, rows

    def sizes(self, keys: Sequence[str], fps: Any) -> tuple[I64Array, int]:
        """(each key's published size, -1 where absent; the keys whose fingerprint another key
        holds, absent too): ``lookup`` without the rows, in one call."""
        k = as_u64("fps", fps)
        out = np.empty(k.size, dtype=I64)
        collisions = self._t.sizes(keys, k, out)
        return out, int(collisions)

    @property
    def zombie_count(self) -> int:
        """Zombies not yet taken: slots still pinned and those on the freed list."""
        return int(self._t.zombie_count)

    @property
    def read_counts(self) -> dict[str, int]:
        """``read_into``'s figures: hits, hit_bytes, misses, size_mismatch (found at another
        size), fingerprint_collisions."""
        return self._t.read_counts

    def read_into(
        self, keys: Sequence[str], fps: U64Array, arena: Any, pages: Sequence[Sequence[Any]]
    ) -> tuple[int, list[bool] | None, int]:
        """Copy every key found at its page's size (the page's parts together) out of ``arena``
        (from its slot, the parts back to back) into its page's parts: pinned, counted as a read,
        copied with the GIL released once, unpinned, in one call. ``fps``: a uint64 array.
        Returns (keys copied, per key whether it was (None: all were), zombies on the freed
        list). All or nothing on bad arguments."""
        return self._t.read_into(keys, fps, arena, pages)

    def take_freed(self) -> list[tuple[int, int]]:
        """The (offset, size) of each zombie freed by its last unpin since the last call."""
        return self._t.take_freed()

    def pin(self, offsets: Any) -> U64Array:
        """One more pin on each slot (no read counted); returns each slot's reads so far."""
        o = as_u64("offsets", offsets)
        reads = np.empty(o.size, dtype=U64)
        self._t.pin(o, reads)
        return reads

    def pin_found(self, keys: Sequence[str], fps: Any) -> tuple[BoolArray, U64Array, U64Array]:
        """``lookup`` and one more pin (no read counted) on each found key's slot, in one call:
        (found, rows[n, 3], each found slot's reads so far)."""
        k = as_u64("fps", fps)
        found = np.empty(k.size, dtype=np.bool_)
        rows = np.empty((k.size, ROW_WORDS), dtype=U64)
        reads = np.empty(k.size, dtype=U64)
        self._t.pin_found(keys, k, found, rows, reads)
        return found, rows, reads

    def count_reads(self, offsets: Any) -> None:
        self._t.count_reads(as_u64("offsets", offsets))

    def unpin(self, offsets: Any) -> int:
        """One pin less on each slot (a zombie's last pin frees it onto the freed list); returns
        the zombies on the freed list."""
        return int(self._t.unpin(as_u64("offsets", offsets)))

    def pinned(self, offsets: Any) -> BoolArray:
        o = as_u64("offsets", offsets)
        out = np.empty(o.size, dtype=np.bool_)
        self._t.pinned(o, out)
        return out

    def pinned_offsets(self) -> list[int]:
        """Every pinned slot's offset (a scan of the slot records unless none is pinned)."""
        return self._t.pinned_offsets()

    def publish(self, keys: Sequence[str], fps: Any, rows: Any) -> np.ndarray:
        """Each key at the slot of its row (``rows[i, 0]``); int64 status per key: 1 published,
        0 published already (its first value stays), -1 another key holds the fingerprint."""
        k = as_u64("fps", fps)
        status = np.empty(k.size, dtype=I64)
        self._t.publish(keys, k, as_u64("rows", rows), status)
        return status

    def remove(self, fps: Any, offsets: Any) -> tuple[int, BoolArray]:
        """Drop each fingerprint's row where it is at its offset: (rows removed, whether each
        slot is pinned by a reader: a dropped row's pinned slot became a zombie; the caller frees
        the others)."""
        o = as_u64("offsets", offsets)
        pinned = np.empty(o.size, dtype=np.bool_)
        removed = self._t.remove(as_u64("fps", fps), o, pinned)
        return int(removed), pinned

    def move(self, fp: int, key: str, old_offset: int, new_offset: int) -> bool:
        """Point ``key``'s row at ``new_offset`` if it is still at ``old_offset`` (the key and the
        reads move with it; the pins stay with the slots); the old slot, which the caller pins
        (ValueError otherwise), becomes a zombie."""
        return bool(self._t.move(fp, key, old_offset, new_offset))

    def key_at(self, offset: int) -> str | None:
        return self._t.key_at(offset)

    def rows(self) -> tuple[list[str], U64Array, U64Array]:
        """Every row: (keys, fingerprints, rows[n, 3]), in table order."""
        n = len(self._t)
        fps = np.empty(n, dtype=U64)
        rows = np.empty((n, ROW_WORDS), dtype=U64)
        keys = self._t.rows_into(fps, rows)
        return keys, fps, rows

    def clear(self) -> None:
        """Drop every row and its key; pinned slots become zombies (pins and reads stay with
        their slots)."""
        self._t.clear()
