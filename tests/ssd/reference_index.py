"""Reference model of the SSD index (tests only): the engine's former pure-Python index, a dict
of key strings -> packed locations. ``tests/ssd/test_ssd_index.py`` holds the native
fingerprint index (``hicache_mooncake.ssd.index``) to the same answers; nothing in the product
imports this module. Its original notes follow.

The DRAM index: key -> location of its live entry.

The index is a plain dict guarded by the engine lock. A location is one int packing (region, gen,
offset, length, seq), so an indexed entry costs its key, its dict slot and one ~56-byte int, not
an object and four ints (this index holds every entry on the disk: 10M entries at 4 KiB pages).
The dict holds that int as a plain ``int``, not as the :class:`Location` it was given: an instance
of an ``int`` subclass is tracked by the garbage collector (~88 bytes where the plain int takes
56), and so is the dict that holds one (a dict of strs and plain ints is not), and every full
collection visits them with the GIL held, a pause that grows with the entries indexed: at
millions of entries it would stop every thread of SGLang each time the collector ran one.

Entries a reopen loads from a region's summary (:meth:`Index.load_region`) are stored as a
reference instead: a negative int ``~(load << 32 | i)`` into that summary's columns (numpy arrays
the index keeps, 24 bytes per entry, dropped when none of their entries is indexed any more).
Making them takes one C-level pass (``zip`` with a ``range``), where packing every location in
Python (and making an int subclass of it) cost time per entry that dominated a large reopen.
A packed location is never negative, so the sign tells the two apart. Every method hands out
:class:`Location` values, equal (``==``, not ``is``) to what was stored.

Reads counted per entry (``hits``, read by reinsertion) live in a side dict that holds only the
entries read since they were indexed; replacing or removing an entry drops its count. A location
is valid only while its region still has generation ``gen``; reclaim and clear remove locations
before the region can be reopened, and readers additionally verify header and checksum, so a
stale location is a miss, never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from hicache_mooncake.ssd.index import Location

_LEN_BITS = 40
_REF_BITS = 32
_REF_MASK = (1 << _REF_BITS) - 1
_LEN_MASK = (1 << _LEN_BITS) - 1


def _unpacked(value: int) -> Location:
    """The :class:`Location` of a stored (plain, non-negative) packed int, without re-checking
    the field widths its construction checked."""
    return int.__new__(Location, value)


@dataclass(frozen=True, slots=True)
class _Load:
    """One region's summary columns, as loaded (copies: the summary file's bytes are not kept)."""

    region: int
    gen: int
    offsets: np.ndarray
    lengths: np.ndarray
    seqs: np.ndarray


class Index:
    def __init__(self) -> None:
        self._map: dict[str, int] = {}  # a packed location (>= 0) or ~reference into _loads (< 0)
        self._hits: dict[str, int] = {}  # reads of the entries read since they were indexed
        self._loads: list[_Load | None] = []
        self._live: list[int] = []  # per load: its entries still referenced by _map
        self.bytes = 0

    def _located(self, value: int | None) -> Location | None:
        if value is None:
            return None
        if value >= 0:
            return _unpacked(value)
        ref = ~value
        load = self._loads[ref >> _REF_BITS]
        assert load is not None, "a reference into a dropped load"
        i = ref & _REF_MASK
        return Location(load.region, load.gen, int(load.offsets[i]), int(load.lengths[i]), int(load.seqs[i]))

    def _unref(self, value: int | None) -> None:
        """``value`` left the map: a reference's load is dropped with its last entry."""
        if value is None or value >= 0:
            return
        slot = ~value >> _REF_BITS
        self._live[slot] -= 1
        if not self._live[slot]:
            self._loads[slot] = None

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def contains_many(self, keys: Iterable[str]) -> list[bool]:
        return list(map(self._map.__contains__, keys))

    def get(self, key: str) -> Location | None:
        return self._located(self._map.get(key))

    def hit(self, key: str) -> None:
        """Count one read of ``key``'s current entry."""
        self._hits[key] = self._hits.get(key, 0) + 1

    def hits(self, key: str) -> int:
        """Reads of ``key``'s current entry since it was indexed."""
        return self._hits.get(key, 0)

    def set(self, key: str, loc: Location) -> Location | None:
        value = self._map.get(key)
        old = self._located(value)
        self._map[key] = int(loc)  # a plain int: untracked by the collector (module docstring)
        self._unref(value)
        if self._hits:
            self._hits.pop(key, None)
        self.bytes += loc.length - (old.length if old else 0)
        return old

    def pop(self, key: str) -> Location | None:
        value = self._map.pop(key, None)
        loc = self._located(value)
        self._unref(value)
        if loc is not None:
            self.bytes -= loc.length
            if self._hits:
                self._hits.pop(key, None)
        return loc

    def pop_if(self, key: str, region: int, gen: int) -> Location | None:
        """Remove ``key`` only if it still points into ``region`` at ``gen``."""
        loc = self._located(self._map.get(key))
        if loc is not None and loc.region == region and loc.gen == gen:
            return self.pop(key)
        return None

    def load(self, keys: list[str], locs: Iterable[Location]) -> None:
        """Bulk insert at open (later entries of a key replace earlier ones); call
        :meth:`recount` once after the last load."""
        for key, loc in zip(keys, locs, strict=True):
            self.set(key, loc)

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
        ``lengths[i]`` payload bytes and sequence ``seqs[i]`` (uint64 columns). Checked as a whole
        with the limits a :class:`Location` has (ValueError); a key already indexed is replaced,
        as by later entries. Call :meth:`recount` once after the last load."""
        n = len(keys)
        if not n:
            return
        if not len(offsets) == len(lengths) == len(seqs) == n:
            raise ValueError("keys, offsets, lengths and seqs differ in length")
        Location(region, gen, int(offsets.max()), int(lengths.max()), int(seqs.min()))  # raises as one would
        if n > _REF_MASK:
            raise ValueError(f"{n} entries in one region: at most {_REF_MASK}")
        slot = len(self._loads)
        self._loads.append(_Load(region, gen, offsets.copy(), lengths.copy(), seqs.copy()))
        # An upper bound of the references (one summary lists a key once). A key an earlier load
        # also listed (rare: a key in two summaries) is not subtracted from that load's count, so
        # that load keeps its columns until clear: a count is never low, so none is dropped early.
        self._live.append(n)
        if self._hits:
            for key in keys:
                self._hits.pop(key, None)
        first = ~(slot << _REF_BITS)  # ~(slot << 32 | i) for i in 0 .. n - 1
        self._map.update(zip(keys, range(first, first - n, -1), strict=True))

    def recount(self) -> None:
        """``bytes`` from scratch (at open, when a key is in two summaries): references are summed
        from their columns in numpy, without making a Location each (~1 s per 1M entries)."""
        values = self._map.values()
        total = sum(v & _LEN_MASK for v in values if v >= 0)
        refs = np.fromiter((~v for v in values if v < 0), np.int64)
        if len(refs):
            columns = [load.lengths if load is not None else np.empty(0, np.uint64) for load in self._loads]
            starts = np.cumsum([0, *map(len, columns)])[:-1]
            total += int(np.concatenate(columns)[starts[refs >> _REF_BITS] + (refs & _REF_MASK)].sum())
        self.bytes = total

    def clear(self) -> None:
        self._map.clear()
        self._hits.clear()
        self._loads.clear()
        self._live.clear()
        self.bytes = 0

    def keys_snapshot(self) -> list[str]:
        return list(self._map)

    def items(self) -> Iterator[tuple[str, Location]]:
        for key, value in self._map.items():
            loc = self._located(value)
            assert loc is not None
            yield key, loc
