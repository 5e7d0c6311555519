"""FpTable: an open-addressing hash table from 64-bit fingerprints to 1..4 uint64 words.

Invariants: keys are non-zero uint64 (0 marks an empty slot: ValueError naming the index); the
table is a directory of segments of at most ``segment_slots`` slots (65536 by default) whose load
stays <= 0.75: a put that would pass it doubles the segment below that size and splits it in two
at that size, inside the call, so no call rehashes more than one segment's entries however large
the table (a flat table of 6M entries stalled its caller 266 ms per doubling); memory is
``8 * (1 + value_words)`` bytes per slot, at a load between 3/8 and 3/4 once segments split. Every call is atomic with respect to the other calls
on the same table (an internal rwlock), and releases the GIL once for its whole batch, so the
table is safe to use from several threads. Results are numpy arrays, one row per input key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._arrays import U64, BoolArray, U64Array, as_u64


class FpTable:
    """Fingerprint -> value words; see the module docstring for the invariants."""

    __slots__ = ("_t", "value_words")

    def __init__(self, value_words: int = 1, capacity: int = 1024, segment_slots: int = 1 << 16) -> None:
        self._t = _core.FpTable(value_words, capacity, segment_slots)
        self.value_words = value_words

    def __len__(self) -> int:
        return len(self._t)

    @property
    def nbytes(self) -> int:
        """Bytes the slot arrays, the segment directory and the segment headers allocate."""
        return self._t.nbytes

    @property
    def capacity(self) -> int:
        """Slots of every segment together (each segment a power of two)."""
        return self._t.capacity

    def put(self, fps: Any, values: Any) -> BoolArray:
        """Upserts ``values`` (shape (n, value_words), or (n,) for one word); result[i] = was present.

        MemoryError when a growth fails (the keys before the failing one are stored).
        """
        k = as_u64("fps", fps)
        v = as_u64("values", values)
        if v.size != k.size * self.value_words:
            raise ValueError(
                f"values has {v.size} words, expected {k.size} keys x {self.value_words} value words"
            )
        out = np.empty(k.size, dtype=np.bool_)
        self._t.put(k, v, out)
        return out

    def get(self, fps: Any) -> tuple[BoolArray, U64Array]:
        """(found[n], values[n, value_words]); the rows of absent keys are 0."""
        k = as_u64("fps", fps)
        found = np.empty(k.size, dtype=np.bool_)
        values = np.empty((k.size, self.value_words), dtype=U64)
        self._t.get(k, found, values)
        return found, values

    def contains(self, fps: Any) -> BoolArray:
        """found[n]."""
        k = as_u64("fps", fps)
        out = np.empty(k.size, dtype=np.bool_)
        self._t.contains(k, out)
        return out

    def prefix_len(self, fps: Any) -> int:
        """How many leading keys are present (stops at the first miss): batch_exists' answer."""
        return self._t.prefix_len(as_u64("fps", fps))

    def remove(self, fps: Any) -> BoolArray:
        """Removes the keys; result[i] = it was present."""
        k = as_u64("fps", fps)
        out = np.empty(k.size, dtype=np.bool_)
        self._t.remove(k, out)
        return out

    def remove_if(self, fps: Any, expected_word0: Any) -> BoolArray:
        """Removes a key only where its value word 0 equals ``expected_word0[i]`` (an entry
        replaced meanwhile is kept); result[i] = removed."""
        k = as_u64("fps", fps)
        out = np.empty(k.size, dtype=np.bool_)
        self._t.remove_if(k, as_u64("expected_word0", expected_word0), out)
        return out

    def items(self) -> tuple[U64Array, U64Array]:
        """A snapshot: (fps[m], values[m, value_words]) in table order."""
        keys, values = self._t.items()
        return (
            np.frombuffer(keys, dtype=U64),
            np.frombuffer(values, dtype=U64).reshape(-1, self.value_words),
        )

    def clear(self) -> None:
        """Drops every entry and goes back to the initial capacity."""
        self._t.clear()
