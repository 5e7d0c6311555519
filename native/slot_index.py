"""SlotIndex: the DRAM tier's index in one native structure (``native/src/hm_slotindex.c``).

Rows: 64-bit fingerprint -> three uint64 words (the slot offset first; the tier packs the size,
object type and version into the other two). Per slot of the arena (``offset >> slot_shift``):
the UTF-8 bytes of the key published there, the slot's pin count and its reads. Every lookup
compares the caller's key with the key of the row's slot: another key under the same fingerprint
is a collision, answered as a miss. A batch is one call, with the GIL held throughout (a
publish's growth rehashes one segment of at most ``segment_slots`` rows).

Invariants: a row exists exactly when its slot holds its key; pins and reads belong to the slot
and outlive its row (a removed slot a reader still pins is the caller's to free with its last pin;
reads restart at 0 when a row is published there). Not thread-safe: the caller serialises every
call (the DRAM tier's lock). Bad arguments (an offset that is not a slot, a slot that holds a key,
a slot given twice, a key that is not a str, an unpin below zero) raise ValueError / TypeError
naming the item, and nothing changes; a publish that runs out of memory raises MemoryError with
the items before it published. Memory: 16 bytes per arena slot (mapped and faulted in when the index is made),
4 bytes plus the key per published row, and the table's 32 bytes per row at a load of 3/8 to 3/4.
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

    def read_pin(self, keys: Sequence[str], fps: Any, sizes: Any) -> tuple[I64Array, U64Array, int, int]:
        """Pin and count a read of every key found whose row's word 1 (masked to 48 bits) equals
        its expected size: (chosen indices, their slot offsets, keys found at any size,
        fingerprints held by another key)."""
        k = as_u64("fps", fps)
        chosen = np.empty(k.size, dtype=I64)
        offsets = np.empty(k.size, dtype=U64)
        n, found, collided = self._t.read_pin(keys, k, as_u64("sizes", sizes), chosen, offsets)
        return chosen[:n], offsets[:n], found, collided

    def pin(self, offsets: Any) -> U64Array:
        """One more pin on each slot (no read counted); returns each slot's reads so far."""
        o = as_u64("offsets", offsets)
        reads = np.empty(o.size, dtype=U64)
        self._t.pin(o, reads)
        return reads

    def count_reads(self, offsets: Any) -> None:
        self._t.count_reads(as_u64("offsets", offsets))

    def unpin(self, offsets: Any) -> BoolArray:
        """One pin less on each slot; True where that was its last pin."""
        o = as_u64("offsets", offsets)
        last = np.empty(o.size, dtype=np.bool_)
        self._t.unpin(o, last)
        return last

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
        slot is pinned by a reader)."""
        o = as_u64("offsets", offsets)
        pinned = np.empty(o.size, dtype=np.bool_)
        removed = self._t.remove(as_u64("fps", fps), o, pinned)
        return int(removed), pinned

    def move(self, fp: int, key: str, old_offset: int, new_offset: int) -> bool:
        """Point ``key``'s row at ``new_offset`` if it is still at ``old_offset`` (the key and the
        reads move with it; the pins stay with the slots)."""
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
        """Drop every row and its key (pins and reads stay with their slots)."""
        self._t.clear()
