"""A map from 64-bit fingerprints to 64-bit values in two flat int64 arrays.

The reuse policy observes every key of the last ``horizon`` capacities (4 by default), so this
map holds several entries per resident page. As a ``dict[int, int]`` an entry cost ~114 bytes: a
24-byte dict entry plus its index slot at a dict's fill (~42), an int object for the key (~40)
and one for the value (~32). Here an entry is 16 bytes of array at a load between 0.3 and 0.6:
27-53 bytes, no Python object, nothing the garbage collector visits.

Layout: open addressing with linear probing *without wrap-around*. A key's home slot is its low
bits (``fp & mask``, ``2**bits`` slots); probing runs forward from there into ``_PAD`` extra slots
past the last home slot and never back to slot 0. So every entry lies at or after its home slot
with no empty slot in between (the invariant lookups rely on), and

- a removal shifts the entries behind it back (Knuth's algorithm R for linear probing): no
  tombstones, so lookups never slow down with churn;
- a rebuild (growth, or a probe run reaching the end of the pad) is vectorised: sorted by home
  slot, entry ``i`` goes to ``max(home_i, slot_{i-1} + 1)``, a running maximum in numpy.
  Measured on the project's VM: 147-575 ms at 1.26M entries (a dict of as many int keys resized
  in ~70 ms); re-inserting them one by one in Python would take several seconds. It is a stall
  of the caller, once per doubling.

``_EMPTY`` (the smallest int64) marks a free slot; a key equal to it is kept in a one-entry side
dict, so every int64 is a valid key. Keys outside int64 raise ``OverflowError`` (``hash()`` of any
object fits). Not thread-safe (the policy's callers lock).
"""

from __future__ import annotations

from array import array

import numpy as np

_EMPTY = -(1 << 63)
_PAD = 64  # slots past the last home slot that probe runs may use before a rebuild
_MIN_BITS = 10
_MAX_LOAD = 0.6


class FingerprintTable:
    """int64 -> int64 map (module docstring): ``get``, ``swap``, ``pop``, ``in``, ``len``, and
    ``lookup_many`` for a whole array of keys at once. ``entries`` is ``len`` as an attribute
    (the policy reads it on every access)."""

    def __init__(self) -> None:
        self._odd: dict[int, int] = {}  # the key equal to _EMPTY, if set
        self._allocate(_MIN_BITS)
        self.entries = 0

    def _allocate(self, bits: int) -> None:
        self._bits = bits
        self._mask = (1 << bits) - 1
        self._limit = int((1 << bits) * _MAX_LOAD)
        size = (1 << bits) + _PAD
        self._keys = array("q", bytes(8 * size))  # zeros, then filled in C (``array * n`` is slow)
        np.frombuffer(self._keys, dtype=np.int64).fill(_EMPTY)
        self._values = array("q", bytes(8 * size))

    def __len__(self) -> int:
        return self.entries

    def __contains__(self, fp: int) -> bool:
        return self.get(fp) is not None

    def get(self, fp: int, default: int | None = None) -> int | None:
        keys = self._keys
        i = fp & self._mask
        k = keys[i]
        while k != fp:
            if k == _EMPTY:
                return default
            i += 1
            k = keys[i]  # a run never reaches the last pad slot (swap): this loop ends
        if fp == _EMPTY:
            return self._odd.get(fp, default)
        return self._values[i]

    def swap(self, fp: int, value: int) -> int | None:
        """Map ``fp`` to ``value``; its previous value, or None."""
        keys = self._keys
        i = fp & self._mask
        k = keys[i]
        while k != fp:
            if k == _EMPTY:
                break
            i += 1
            k = keys[i]
        else:
            if fp != _EMPTY:
                old = self._values[i]
                self._values[i] = value
                return old
            previous = self._odd.get(fp)
            self._odd[fp] = value
            self.entries += previous is None
            return previous
        if i >= len(keys) - 1 or self.entries >= self._limit:
            # the load is too high, or the run reached the last pad slot, which stays empty
            # (lookups stop there): twice the home slots, then again
            self._rebuild(self._bits + 1)
            return self.swap(fp, value)
        self._values[i] = value  # first: a value outside int64 raises before the key is in
        keys[i] = fp
        self.entries += 1
        return None

    def pop(self, fp: int, default: int | None = None) -> int | None:
        return self.pop_if(fp, None, 0, default)

    def pop_if(self, fp: int, high: int | None, shift: int, default: int | None = None) -> int | None:
        """``pop(fp)`` if ``high`` is None or its value's bits above ``shift`` equal ``high``;
        else leave it and return ``default``. One probe where a ``get`` and a ``pop`` took two."""
        keys, values, mask = self._keys, self._values, self._mask
        i = fp & mask
        k = keys[i]
        while k != fp:
            if k == _EMPTY:
                return default
            i += 1
            k = keys[i]
        if fp == _EMPTY:
            odd = self._odd.get(fp)
            if odd is None or (high is not None and odd >> shift != high):
                return default
            self.entries -= 1
            return self._odd.pop(fp)
        value = values[i]
        if high is not None and value >> shift != high:
            return default
        j = i + 1
        k = keys[j]
        while k != _EMPTY:  # shift back every entry of the run that may sit at the hole
            if k & mask <= i:
                keys[i] = k
                values[i] = values[j]
                i = j
            j += 1
            k = keys[j]
        keys[i] = _EMPTY
        self.entries -= 1
        return value

    def lookup_many(self, fps: np.ndarray, missing: int) -> np.ndarray:
        """The value of each key of ``fps`` (int64), ``missing`` where absent: one vectorised probe
        step per slot of the longest run visited, not a Python call per key."""
        fps = np.asarray(fps, dtype=np.int64)
        keys = np.frombuffer(self._keys, dtype=np.int64)
        values = np.frombuffer(self._values, dtype=np.int64)
        out = np.full(len(fps), missing, dtype=np.int64)
        pending = np.flatnonzero(fps != _EMPTY)
        pos = fps[pending] & self._mask
        while len(pending):
            k = keys[pos]
            found = k == fps[pending]
            out[pending[found]] = values[pos[found]]
            going = ~found & (k != _EMPTY)
            pending, pos = pending[going], pos[going] + 1
        if self._odd:
            out[fps == _EMPTY] = self._odd.get(_EMPTY, missing)
        return out

    def _rebuild(self, bits: int) -> None:
        """Move every entry into a table of ``2**bits`` home slots (larger again if a run would
        pass the pad). The entries, read in slot order, are sorted by their home slot but for the
        order inside each run; so doubling sorts them by the old home (runs of a sorted sequence:
        cheap for a stable sort) and then by the new home bit (a radix sort of one byte), not by a
        full sort of the new homes (two interleaved sequences: ~3x slower at millions)."""
        keys = np.frombuffer(self._keys, dtype=np.int64)
        live = keys != _EMPTY
        fps = keys[live]
        values = np.frombuffer(self._values, dtype=np.int64)[live]
        del keys
        old_bits = self._bits
        while True:
            home = fps & ((1 << bits) - 1)
            if bits == old_bits + 1:
                by_old = np.argsort(fps & ((1 << old_bits) - 1), kind="stable")
                order = by_old[np.argsort((fps[by_old] >> old_bits & 1).astype(np.uint8), kind="stable")]
            else:
                order = np.argsort(home)  # any order among one home slot's keys will do
            rank = np.arange(len(fps), dtype=np.int64)
            slots = np.maximum.accumulate(home[order] - rank) + rank if len(fps) else rank
            if not len(slots) or slots[-1] < (1 << bits) + _PAD - 1:
                break
            bits += 1
        self._allocate(bits)
        np.frombuffer(self._keys, dtype=np.int64)[slots] = fps[order]
        np.frombuffer(self._values, dtype=np.int64)[slots] = values[order]
