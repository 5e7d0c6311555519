"""A map from 64-bit fingerprints to 64-bit values in flat int64 arrays, grown in bounded steps.

The reuse policy observes every key of the last ``horizon`` capacities (4 by default), so this
map holds several entries per resident page. As a ``dict[int, int]`` an entry cost ~114 bytes: a
24-byte dict entry plus its index slot at a dict's fill (~42), an int object for the key (~40)
and one for the value (~32). Here an entry is 16 bytes of array at a load between 0.3 and 0.6:
27-53 bytes, no Python object, nothing the garbage collector visits.

**Segments (extendible hashing).** The entries live in *segments* of at most ``2**_SEG_BITS``
home slots (1 MiB of arrays). A directory of ``2**depth`` references picks a key's segment by its
low ``depth`` bits; a segment of *local depth* ``d`` serves every directory index that agrees
with it on the low ``d`` bits. A full segment below the largest size doubles; at the largest
size it splits in two by bit ``d`` (the directory doubles first when ``d`` is its depth: a list
concatenation). So growth never moves more than one segment's entries (at most ~40k): a caller
waits for one segment's rebuild (bounded by one segment's size, most of it faulting in its new
arrays), where one table of millions of entries stalls its caller once per doubling for a time
that grows with the table. Keys
that share their low bits beyond what splitting separates (not a hash's fingerprints) make their
segment grow past the largest size instead: correct, just not bounded.

**Inside a segment**: open addressing with linear probing *without wrap-around*. A key's home
slot is ``(fp >> d) & mask`` (the bits above those the directory used); probing runs forward
from there into ``_PAD`` extra slots past the last home slot and never back to slot 0. So every
entry lies at or after its home slot with no empty slot in between (the invariant lookups rely
on), and

- a removal shifts the entries behind it back (Knuth's algorithm R for linear probing): no
  tombstones, so lookups never slow down with churn;
- a segment is built vectorised: sorted by home slot, entry ``i`` goes to
  ``max(home_i, slot_{i-1} + 1)``, a running maximum in numpy.

``_EMPTY`` (the smallest int64) marks a free slot; a key equal to it is kept in a one-entry side
dict, so every int64 is a valid key. Keys outside int64 raise ``OverflowError`` (``hash()`` of any
object fits). Not thread-safe (the policy's callers lock).
"""

from __future__ import annotations

from array import array

import numpy as np

_EMPTY = -(1 << 63)
_PAD = 64  # slots past the last home slot that probe runs may use before the segment grows
_MIN_BITS = 10
_SEG_BITS = 16  # a segment's largest size (home slots) before it splits
_MAX_DEPTH = 32  # the directory's largest depth (2**32 segments: never reached by fingerprints)
_MAX_LOAD = 0.6


class _Segment:
    """``2**bits`` home slots + ``_PAD``; serves the directory indices equal to ``prefix`` in
    their low ``depth`` bits. The last slot always stays empty (every probe stops there)."""

    __slots__ = ("keys", "values", "bits", "mask", "limit", "depth", "prefix", "entries")

    def __init__(self, bits: int, depth: int, prefix: int) -> None:
        size = (1 << bits) + _PAD
        self.keys = array("q", bytes(8 * size))  # zeros, then filled in C (``array * n`` is slow)
        np.frombuffer(self.keys, dtype=np.int64).fill(_EMPTY)
        self.values = array("q", bytes(8 * size))
        self.bits = bits
        self.mask = (1 << bits) - 1
        self.limit = int((1 << bits) * _MAX_LOAD)
        self.depth = depth
        self.prefix = prefix
        self.entries = 0

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values held, in slot order."""
        keys = np.frombuffer(self.keys, dtype=np.int64)
        held = keys != _EMPTY
        return keys[held], np.frombuffer(self.values, dtype=np.int64)[held]


def _build(fps: np.ndarray, values: np.ndarray, bits: int, depth: int, prefix: int) -> _Segment:
    """A segment holding ``fps -> values``, with ``2**bits`` home slots or more: as many more as
    the longest probe run needs to end before the last pad slot."""
    rank = np.arange(len(fps), dtype=np.int64)
    while True:
        home = (fps >> depth) & ((1 << bits) - 1)
        order = np.argsort(home, kind="stable")  # any order among one home slot's keys will do
        slots = np.maximum.accumulate(home[order] - rank) + rank if len(fps) else rank
        if not len(slots) or slots[-1] < (1 << bits) + _PAD - 1:
            break
        bits += 1
    segment = _Segment(bits, depth, prefix)
    np.frombuffer(segment.keys, dtype=np.int64)[slots] = fps[order]
    np.frombuffer(segment.values, dtype=np.int64)[slots] = values[order]
    segment.entries = len(fps)
    return segment


class FingerprintTable:
    """int64 -> int64 map (module docstring): ``get``, ``swap``, ``pop``, ``in``, ``len``, and
    ``lookup_many`` for a whole array of keys at once. ``entries`` is ``len`` as an attribute
    (the policy reads it on every access)."""

    def __init__(self) -> None:
        self._odd: dict[int, int] = {}  # the key equal to _EMPTY, if set
        self._dir: list[_Segment] = [_Segment(_MIN_BITS, 0, 0)]
        self._dmask = 0  # a key's directory index: fp & _dmask (its low ``depth`` bits)
        self.entries = 0

    @property
    def depth(self) -> int:
        """The directory's depth (``2**depth`` references)."""
        return self._dmask.bit_length()

    def segments(self) -> list[_Segment]:
        """The distinct segments, each once."""
        return list({id(s): s for s in self._dir}.values())

    def __len__(self) -> int:
        return self.entries

    def __contains__(self, fp: int) -> bool:
        return self.get(fp) is not None

    def get(self, fp: int, default: int | None = None) -> int | None:
        seg = self._dir[fp & self._dmask]
        keys = seg.keys
        i = (fp >> seg.depth) & seg.mask
        k = keys[i]
        while k != fp:
            if k == _EMPTY:
                return default
            i += 1
            k = keys[i]  # a run never reaches the last pad slot (swap): this loop ends
        if fp == _EMPTY:
            return self._odd.get(fp, default)
        return seg.values[i]

    def swap(self, fp: int, value: int, present: int | None = None) -> int | None:
        """Map ``fp`` to ``value`` (to ``present`` instead if it was mapped and ``present`` is
        given); its previous value, or None."""
        seg = self._dir[fp & self._dmask]
        keys = seg.keys
        i = (fp >> seg.depth) & seg.mask
        k = keys[i]
        while k != fp:
            if k == _EMPTY:
                break
            i += 1
            k = keys[i]
        else:
            if fp != _EMPTY:
                values = seg.values
                old = values[i]
                values[i] = value if present is None else present
                return old
            previous = self._odd.get(fp)
            self._odd[fp] = value if previous is None or present is None else present
            self.entries += previous is None
            return previous
        if i >= len(keys) - 1 or seg.entries >= seg.limit:
            # the segment is full, or the run reached its last pad slot, which stays empty
            # (lookups stop there): it grows or splits, then the key goes where it now belongs
            self._grow(seg)
            return self.swap(fp, value, present)
        seg.values[i] = value  # first: a value outside int64 raises before the key is in
        keys[i] = fp
        seg.entries += 1
        self.entries += 1
        return None

    def pop(self, fp: int, default: int | None = None) -> int | None:
        return self.pop_if(fp, None, 0, default)

    def pop_if(self, fp: int, high: int | None, shift: int, default: int | None = None) -> int | None:
        """``pop(fp)`` if ``high`` is None or its value's bits above ``shift`` equal ``high``;
        else leave it and return ``default``. One probe where a ``get`` and a ``pop`` took two."""
        seg = self._dir[fp & self._dmask]
        keys, values, mask, depth = seg.keys, seg.values, seg.mask, seg.depth
        i = (fp >> depth) & mask
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
            if (k >> depth) & mask <= i:
                keys[i] = k
                values[i] = values[j]
                i = j
            j += 1
            k = keys[j]
        keys[i] = _EMPTY
        seg.entries -= 1
        self.entries -= 1
        return value

    def lookup_many(self, fps: np.ndarray, missing: int) -> np.ndarray:
        """The value of each key of ``fps`` (int64), ``missing`` where absent: per segment, one
        vectorised probe step per slot of the longest run visited, not a Python call per key."""
        fps = np.asarray(fps, dtype=np.int64)
        out = np.full(len(fps), missing, dtype=np.int64)
        wanted = np.flatnonzero(fps != _EMPTY)
        index = fps[wanted] & self._dmask
        order = np.argsort(index, kind="stable")
        wanted, index = wanted[order], index[order]
        starts = np.flatnonzero(np.diff(index, prepend=-1)).tolist()  # one group per index
        for start, end in zip(starts, [*starts[1:], len(index)], strict=False):
            self._probe(self._dir[int(index[start])], fps, wanted[start:end], out)
        if self._odd:
            out[fps == _EMPTY] = self._odd.get(_EMPTY, missing)
        return out

    @staticmethod
    def _probe(seg: _Segment, fps: np.ndarray, pending: np.ndarray, out: np.ndarray) -> None:
        """``out[i] = value of fps[i]`` for each ``i`` of ``pending`` that ``seg`` holds."""
        keys = np.frombuffer(seg.keys, dtype=np.int64)
        values = np.frombuffer(seg.values, dtype=np.int64)
        pos = (fps[pending] >> seg.depth) & seg.mask
        while len(pending):
            k = keys[pos]
            found = k == fps[pending]
            out[pending[found]] = values[pos[found]]
            going = ~found & (k != _EMPTY)
            pending, pos = pending[going], pos[going] + 1

    def _grow(self, seg: _Segment) -> None:
        """Make room in ``seg``: twice the home slots while below ``2**_SEG_BITS``, else split it
        by its next directory bit (the directory doubles first if needed). A split that would not
        separate its keys (they share that bit and the ones below) doubles the segment instead."""
        fps, values = seg.live()
        depth = seg.depth
        if seg.bits < _SEG_BITS or depth >= _MAX_DEPTH:
            self._replace(seg, [_build(fps, values, seg.bits + 1, depth, seg.prefix)])
            return
        upper = (fps >> depth) & 1 == 1
        count = int(np.count_nonzero(upper))
        if count in (0, len(fps)):
            self._replace(seg, [_build(fps, values, seg.bits + 1, depth, seg.prefix)])
            return
        if depth == self.depth:
            self._dir = self._dir + self._dir  # index j and j + 2**depth: the same segment
            self._dmask = (self._dmask << 1) | 1
        lower = ~upper
        halves = [
            _build(fps[lower], values[lower], _SEG_BITS, depth + 1, seg.prefix),
            _build(fps[upper], values[upper], _SEG_BITS, depth + 1, seg.prefix | (1 << depth)),
        ]
        self._replace(seg, halves)

    def _replace(self, seg: _Segment, new: list[_Segment]) -> None:
        """Point the directory's references to ``seg`` at ``new`` (one segment of the same depth,
        or its two halves: each index to the half whose prefix it has)."""
        dir_, size = self._dir, len(self._dir)
        for j in range(seg.prefix, size, 1 << seg.depth):
            dir_[j] = new[0] if len(new) == 1 or not (j >> seg.depth) & 1 else new[1]
