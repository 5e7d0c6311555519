"""The DRAM index: 64-bit key fingerprint -> location of its live entry, in a native table.

Keys are fingerprinted once (``hicache_mooncake.native.fingerprint``: xxh3_64 of the UTF-8 key)
and the index is a native :class:`~hicache_mooncake.native.FpTable` (open addressing, four
uint64 words per entry), guarded by the engine lock. No key string is kept here: the full key is
in every entry's header on disk (and in its region's summary), and every read checks it, so two
keys with one fingerprint (a *collision*) share one slot and the one not indexed there reads as a
miss (counted as ``fingerprint_collisions`` by the read path), never as the other key's bytes.
Consequences of a shared slot, all misses and never wrong bytes: a put of the second key is
answered as already stored, ``contains`` of either answers True, a ``remove`` of either drops
the slot.

The words of an entry (``_pack`` / ``_unpack``), chosen so that ``remove_if`` on word 0 (the
region's generation, unique per region life) removes only an entry still in that life::

    w0 = gen    w1 = seq    w2 = offset | (length & 0xFFFF) << 48
    w3 = length >> 16 | region << 24 | hits << 56

``hits`` (reads since the entry was indexed, read by reinsertion) saturates at
:data:`MAX_HITS`; replacing an entry starts it at zero. Every method hands out :class:`Location`
values. A location is valid only while its region still has generation ``gen``; reclaim and clear
remove locations before the region can be reopened, and readers additionally verify header, key
and checksum, so a stale location is a miss, never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from hicache_mooncake.native import FpTable, fingerprint, fingerprints

_LEN_BITS, _OFF_BITS, _REGION_BITS, _GEN_BITS = 40, 48, 32, 64  # gen and seq: boot << 40 | counter
_OFF_SHIFT = _LEN_BITS
_REGION_SHIFT = _OFF_SHIFT + _OFF_BITS
_GEN_SHIFT = _REGION_SHIFT + _REGION_BITS
_SEQ_SHIFT = _GEN_SHIFT + _GEN_BITS

MAX_HITS = 255
"""Reads counted per entry at most (8 bits of its words); reinsertion thresholds are small."""


class Location(int):
    """Where an entry lies: ``region`` id, the region's generation ``gen`` it was written under,
    ``offset`` of its header block in the region file, ``length`` (payload bytes), ``seq`` (newer
    writes of a key have larger ones). Field widths: length < 2**40, offset < 2**48, region <
    2**32, gen < 2**64, seq < 2**64 (ValueError beyond). Compares as its packed value only where
    code asks for it: callers compare fields."""

    __slots__ = ()

    def __new__(cls, region: int, gen: int, offset: int, length: int, seq: int) -> Location:
        if (
            length >> _LEN_BITS
            or offset >> _OFF_BITS
            or region >> _REGION_BITS
            or gen >> _GEN_BITS
            or seq >> 64
            or min(length, offset, region, gen, seq) < 0
        ):
            raise ValueError(
                f"location out of range: r={region} gen={gen} off={offset} len={length} seq={seq}"
            )
        return int.__new__(
            cls,
            (seq << _SEQ_SHIFT)
            | (gen << _GEN_SHIFT)
            | (region << _REGION_SHIFT)
            | (offset << _OFF_SHIFT)
            | length,
        )

    @property
    def region(self) -> int:
        return (self >> _REGION_SHIFT) & ((1 << _REGION_BITS) - 1)

    @property
    def gen(self) -> int:
        return (self >> _GEN_SHIFT) & ((1 << _GEN_BITS) - 1)

    @property
    def offset(self) -> int:
        return (self >> _OFF_SHIFT) & ((1 << _OFF_BITS) - 1)

    @property
    def length(self) -> int:
        return self & ((1 << _LEN_BITS) - 1)

    @property
    def seq(self) -> int:
        return self >> _SEQ_SHIFT

    def __bool__(self) -> bool:
        return True  # a location at offset 0 of region 0 is still a location

    def __repr__(self) -> str:
        return (
            f"Location(r={self.region}, gen={self.gen}, off={self.offset}, len={self.length}, seq={self.seq})"
        )


class Columns(NamedTuple):
    """Fields of a batch of entries, one uint64 array each (``Index.columns``)."""

    region: np.ndarray
    gen: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    seq: np.ndarray


_WORDS = 4
_U48 = (1 << 48) - 1
_U32 = (1 << 32) - 1
_U24 = (1 << 24) - 1
_U16 = (1 << 16) - 1
_HITS_SHIFT = 56
_HITS_CLEAR = np.uint64((1 << _HITS_SHIFT) - 1)


def _pack(loc: Location) -> list[int]:
    n = loc.length
    return [loc.gen, loc.seq, loc.offset | (n & _U16) << 48, n >> 16 | loc.region << 24]


def _unpack(w: Sequence[int]) -> Location:
    gen, seq, lo, hi = (int(x) for x in w)
    return Location((hi >> 24) & _U32, gen, lo & _U48, (hi & _U24) << 16 | lo >> 48, seq)


def _lengths(values: np.ndarray) -> np.ndarray:
    """Payload lengths of packed rows (uint64)."""
    return ((values[:, 3] & np.uint64(_U24)) << np.uint64(16)) | (values[:, 2] >> np.uint64(48))


def _regions(values: np.ndarray) -> np.ndarray:
    return (values[:, 3] >> np.uint64(24)) & np.uint64(_U32)


def _rows(
    n: int, region: int, gen: int, offsets: np.ndarray, lengths: np.ndarray, seqs: np.ndarray
) -> np.ndarray:
    """Packed rows of ``n`` entries of one region generation (uint64 columns), checked as a
    whole with the limits a :class:`Location` has (ValueError naming the widest field)."""
    if not len(offsets) == len(lengths) == len(seqs) == n:
        raise ValueError("keys, offsets, lengths and seqs differ in length")
    values = np.empty((n, _WORDS), np.uint64)
    if not n:
        return values
    Location(region, gen, int(offsets.max()), int(lengths.max()), int(seqs.max()))  # raises as one would
    o = offsets.astype(np.uint64, copy=False)
    ln = lengths.astype(np.uint64, copy=False)
    values[:, 0] = gen
    values[:, 1] = seqs
    values[:, 2] = o | ((ln & np.uint64(_U16)) << np.uint64(48))
    values[:, 3] = (ln >> np.uint64(16)) | (np.uint64(region) << np.uint64(24))
    return values


class Index:
    """Fingerprint -> :class:`Location` (module docstring). Not thread-safe by itself: every
    caller holds the engine lock. ``bytes`` is the payload bytes indexed."""

    def __init__(self) -> None:
        self._table = FpTable(_WORDS, 1024)
        self.bytes = 0

    # ------------------------------------------------------------------ fingerprints
    @staticmethod
    def fp(key: str) -> int:
        return fingerprint(key)

    @staticmethod
    def fps(keys: Sequence[str]) -> np.ndarray:
        return fingerprints(keys)

    @property
    def nbytes(self) -> int:
        """Bytes the native table allocates."""
        return int(self._table.nbytes)

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, key: str) -> bool:
        return bool(self._table.contains(np.array([fingerprint(key)], np.uint64))[0])

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        if not keys:
            return []
        return self._table.contains(fingerprints(keys)).tolist()

    def contains_fps(self, fps: np.ndarray) -> list[bool]:
        return self._table.contains(fps).tolist() if len(fps) else []

    def get(self, key: str) -> Location | None:
        return self.get_fp(fingerprint(key))

    def get_fp(self, fp: int) -> Location | None:
        found, values = self._table.get(np.array([fp], np.uint64))
        return _unpack(values[0]) if found[0] else None

    def lookup(self, fps: np.ndarray) -> list[Location | None]:
        """The locations of ``fps`` (one native call)."""
        if not len(fps):
            return []
        found, values = self._table.get(fps)
        return [_unpack(v) if ok else None for ok, v in zip(found.tolist(), values.tolist(), strict=True)]

    def hit(self, key: str) -> None:
        """Count one read of ``key``'s current entry."""
        self.hit_many(np.array([fingerprint(key)], np.uint64))

    def hit_many(self, fps: np.ndarray) -> None:
        """Count one read of each of ``fps``'s current entries (absent ones: nothing); a
        fingerprint listed twice counts once."""
        if not len(fps):
            return
        found, values = self._table.get(fps)
        if not found.any():
            return
        fps, values = fps[found], values[found]
        hits = values[:, 3] >> np.uint64(_HITS_SHIFT)
        more = hits < MAX_HITS
        if not more.any():
            return
        values = values[more]
        values[:, 3] = (values[:, 3] & _HITS_CLEAR) | ((hits[more] + np.uint64(1)) << np.uint64(_HITS_SHIFT))
        self._table.put(fps[more], values)

    def hits(self, key: str) -> int:
        """Reads of ``key``'s current entry since it was indexed (at most :data:`MAX_HITS`)."""
        return self.hits_many(np.array([fingerprint(key)], np.uint64))[0]

    def hits_many(self, fps: np.ndarray) -> list[int]:
        if not len(fps):
            return []
        _, values = self._table.get(fps)
        return (values[:, 3] >> np.uint64(_HITS_SHIFT)).tolist()

    # ------------------------------------------------------------------ changes
    def set(self, key: str, loc: Location) -> Location | None:
        return self.set_fp(fingerprint(key), loc)

    def set_fp(self, fp: int, loc: Location) -> Location | None:
        """Index ``loc`` under ``fp`` (its read count starts at zero); returns the one replaced."""
        fa = np.array([fp], np.uint64)
        found, values = self._table.get(fa)
        old = _unpack(values[0]) if found[0] else None
        self._table.put(fa, np.array([_pack(loc)], np.uint64))
        self.bytes += loc.length - (old.length if old is not None else 0)
        return old

    def set_many(self, fps: np.ndarray, locs: Sequence[Location]) -> None:
        """:meth:`set_fp` of each pair in two native calls (a fingerprint listed twice: the
        later location wins, as one after the other would)."""
        if not len(fps):
            return
        found, values = self._table.get(fps)
        gone = values[found]
        if len(gone):
            self.bytes -= int(_lengths(gone).sum())
        self._table.put(fps, np.array([_pack(loc) for loc in locs], np.uint64))
        self.bytes += sum(loc.length for loc in locs)
        if len(set(fps.tolist())) != len(fps):
            self.recount()  # (a repeated fingerprint: its replaced lengths were counted twice)

    def pop(self, key: str) -> Location | None:
        return self.pop_fp(fingerprint(key))

    def pop_fp(self, fp: int) -> Location | None:
        fa = np.array([fp], np.uint64)
        found, values = self._table.get(fa)
        if not found[0]:
            return None
        self._table.remove(fa)
        loc = _unpack(values[0])
        self.bytes -= loc.length
        return loc

    def pop_if(self, key: str, region: int, gen: int) -> Location | None:
        """Remove ``key`` only if it still points into ``region`` at ``gen``."""
        return self.pop_if_fp(fingerprint(key), region, gen)

    def pop_if_fp(self, fp: int, region: int, gen: int) -> Location | None:
        loc = self.get_fp(fp)
        if loc is None or loc.region != region or loc.gen != gen:
            return None
        return self.pop_fp(fp)

    def pop_if_many(self, fps: np.ndarray, region: int, gen: int) -> np.ndarray:
        """Remove each of ``fps`` that still points into ``region`` at ``gen`` (two native
        calls); returns a bool array: removed here (a fingerprint listed twice: its first place)."""
        if not len(fps):
            return np.zeros(0, bool)
        found, values = self._table.get(fps)
        mine = found & (values[:, 0] == np.uint64(gen)) & (_regions(values) == np.uint64(region))
        if not mine.any():
            return mine
        where = np.flatnonzero(mine)
        removed = self._table.remove_if(fps[where], np.full(len(where), gen, np.uint64))
        out = np.zeros(len(fps), bool)
        out[where[removed]] = True
        self.bytes -= int(_lengths(values[out]).sum())
        return out

    # ------------------------------------------------------------------ bulk
    def load(self, keys: list[str], locs: Iterable[Location]) -> None:
        """Bulk insert at open (later entries of a key replace earlier ones); call
        :meth:`recount` once after the last load."""
        rows = [_pack(loc) for loc in locs]
        if len(rows) != len(keys):
            raise ValueError("keys and locations differ in length")
        if rows:
            self._table.put(fingerprints(keys), np.array(rows, np.uint64))

    def load_region(
        self,
        keys: list[str],
        region: int,
        gen: int,
        offsets: np.ndarray,
        lengths: np.ndarray,
        seqs: np.ndarray,
    ) -> None:
        """Bulk insert of one region's summary at open: ``keys[i]`` lies at ``offsets[i]``, with
        ``lengths[i]`` payload bytes and sequence ``seqs[i]`` (uint64 columns): one native call
        to fingerprint the keys and one to insert. Checked as a whole with the limits a
        :class:`Location` has (ValueError, nothing added); a key already indexed is replaced, as
        by later entries. Call :meth:`recount` once after the last load."""
        self.load_region_fps(
            fingerprints(keys) if keys else np.zeros(0, np.uint64), region, gen, offsets, lengths, seqs
        )

    def set_entries(
        self,
        fps: np.ndarray,
        region: int,
        gen: int,
        offsets: np.ndarray,
        lengths: np.ndarray,
        seqs: np.ndarray,
    ) -> None:
        """:meth:`set_many` of entries written into one region generation, as columns (uint64):
        two native calls, no :class:`Location` per entry. Checked as a whole (ValueError,
        nothing indexed); replaced entries' bytes leave ``bytes``, read counts start at zero.
        Also the bulk insert of one region's summary at open (``load_region_fps``)."""
        rows = _rows(len(fps), region, gen, offsets, lengths, seqs)
        if not len(fps):
            return
        # a fingerprint listed twice: its last entry stays, and what it replaced leaves once
        uniq, first_from_end = np.unique(fps[::-1], return_index=True)
        found, values = self._table.get(uniq)
        self._table.put(fps, rows)
        kept = lengths[len(fps) - 1 - first_from_end]
        self.bytes += int(kept.sum()) - (int(_lengths(values[found]).sum()) if found.any() else 0)

    def columns(self, fps: np.ndarray) -> tuple[np.ndarray, Columns]:
        """Whether each of ``fps`` is indexed, and its entry's fields as uint64 columns (zeros
        where not indexed): one native call, no :class:`Location` per entry."""
        found, values = self._table.get(fps)
        values[~found] = 0
        return found, Columns(
            region=_regions(values),
            gen=values[:, 0],
            offset=values[:, 2] & np.uint64(_U48),
            length=_lengths(values),
            seq=values[:, 1],
        )

    load_region_fps = set_entries
    """:meth:`load_region` of the keys' fingerprints ``fps``: :meth:`set_entries`."""

    def regions_of(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each of ``fps`` is indexed, and the region it is in (uint64; 0 where not
        indexed): one native call, no :class:`Location` per entry."""
        found, values = self._table.get(fps)
        return found, np.where(found, _regions(values), np.uint64(0))

    def in_region(self, fps: np.ndarray, region: int) -> np.ndarray:
        """Whether each of ``fps`` is indexed in ``region`` (a bool array; one native call)."""
        found, regions = self.regions_of(fps)
        return found & (regions == np.uint64(region))

    def recount(self) -> None:
        """``bytes`` from scratch (one snapshot of the table)."""
        _, values = self._table.items()
        self.bytes = int(_lengths(values).sum()) if len(values) else 0

    def clear(self) -> None:
        self._table.clear()
        self.bytes = 0

    def items_fp(self) -> tuple[np.ndarray, list[Location]]:
        """A snapshot: fingerprints and their locations (no keys: they are on disk)."""
        fps, values = self._table.items()
        return fps, [_unpack(v) for v in values.tolist()]
