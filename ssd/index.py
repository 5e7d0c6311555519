"""The DRAM index: key -> location of its live entry.

The index is a plain dict guarded by the engine lock. A location is one int packing (region, gen,
offset, length, seq), so an indexed entry costs its key, its dict slot and one ~56-byte int, not
an object and four ints (this index holds every entry on the disk: 10M entries at 4 KiB pages).
The dict holds plain ints where a reopen loaded them from summaries (:meth:`Location.pack_many`:
an int subclass costs ~0.7 us more per entry to make, 0.7 s per 1M entries of attach) and
:class:`Location` values where writes and scans set them; every method hands out
:class:`Location` values, equal (``==``, not ``is``) to what was stored. Reads counted per entry
(``hits``, read by reinsertion) live in a side dict that holds only the entries read since they
were indexed; replacing or removing an entry drops its count. A location is valid only while its
region still has generation ``gen``; reclaim and clear remove locations before the region can be
reopened, and readers additionally verify header and checksum, so a stale location is a miss,
never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

_LEN_BITS, _OFF_BITS, _REGION_BITS, _GEN_BITS = 40, 48, 32, 64  # gen and seq: boot << 40 | counter
_OFF_SHIFT = _LEN_BITS
_REGION_SHIFT = _OFF_SHIFT + _OFF_BITS
_GEN_SHIFT = _REGION_SHIFT + _REGION_BITS
_SEQ_SHIFT = _GEN_SHIFT + _GEN_BITS


class Location(int):
    """Where an entry lies: ``region`` id, the region's generation ``gen`` it was written under,
    ``offset`` of its header block in the region file, ``length`` (payload bytes), ``seq`` (newer
    writes of a key have larger ones). Field widths: length < 2**40, offset < 2**48, region <
    2**32, gen < 2**64 (ValueError beyond); seq is unbounded. Compares as its packed value only
    where code asks for it: callers compare fields."""

    __slots__ = ()

    def __new__(cls, region: int, gen: int, offset: int, length: int, seq: int) -> Location:
        if (
            length >> _LEN_BITS
            or offset >> _OFF_BITS
            or region >> _REGION_BITS
            or gen >> _GEN_BITS
            or seq < 0
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

    @classmethod
    def pack_many(
        cls, region: int, gen: int, offsets: np.ndarray, lengths: np.ndarray, seqs: np.ndarray
    ) -> list[int]:
        """The packed values (plain ints, see the module docstring) of one region's entries (what
        a summary lists, as uint64 arrays): checked once per batch with the limits one at a time
        has, packed in one pass. Opening 1M entries runs this."""
        if not len(offsets):
            return []
        if len(offsets) != len(lengths) or len(offsets) != len(seqs):
            raise ValueError("offsets, lengths and seqs differ in length")
        cls(region, gen, int(offsets.max()), int(lengths.max()), int(seqs.min()))  # raises as one would
        base = (gen << _GEN_SHIFT) | (region << _REGION_SHIFT)
        return [
            (s << _SEQ_SHIFT) | base | (o << _OFF_SHIFT) | n
            for o, n, s in zip(offsets.tolist(), lengths.tolist(), seqs.tolist(), strict=True)
        ]

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


_wrap = int.__new__


def _located(value: int | None) -> Location | None:
    """A stored value as a Location (a plain int from a summary load is wrapped, ~0.1 us)."""
    if value is None or type(value) is Location:
        return value
    return _wrap(Location, value)


class Index:
    def __init__(self) -> None:
        self._map: dict[str, int] = {}
        self._hits: dict[str, int] = {}  # reads of the entries read since they were indexed
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def contains_many(self, keys: Iterable[str]) -> list[bool]:
        return list(map(self._map.__contains__, keys))

    def get(self, key: str) -> Location | None:
        return _located(self._map.get(key))

    def hit(self, key: str) -> None:
        """Count one read of ``key``'s current entry."""
        self._hits[key] = self._hits.get(key, 0) + 1

    def hits(self, key: str) -> int:
        """Reads of ``key``'s current entry since it was indexed."""
        return self._hits.get(key, 0)

    def set(self, key: str, loc: Location) -> Location | None:
        old = _located(self._map.get(key))
        self._map[key] = loc
        if self._hits:
            self._hits.pop(key, None)
        self.bytes += loc.length - (old.length if old else 0)
        return old

    def pop(self, key: str) -> Location | None:
        loc = _located(self._map.pop(key, None))
        if loc is not None:
            self.bytes -= loc.length
            if self._hits:
                self._hits.pop(key, None)
        return loc

    def pop_if(self, key: str, region: int, gen: int) -> Location | None:
        """Remove ``key`` only if it still points into ``region`` at ``gen``."""
        loc = _located(self._map.get(key))
        if loc is not None and loc.region == region and loc.gen == gen:
            return self.pop(key)
        return None

    def load(self, keys: list[str], locs: Iterable[int]) -> None:
        """Bulk insert at open of locations or their packed values (later entries of a key replace
        earlier ones); call :meth:`recount` once after the last load."""
        if self._hits:
            for key in keys:
                self._hits.pop(key, None)
        self._map.update(zip(keys, locs, strict=False))

    def recount(self) -> None:
        mask = (1 << _LEN_BITS) - 1
        self.bytes = sum(value & mask for value in self._map.values())

    def clear(self) -> None:
        self._map.clear()
        self._hits.clear()
        self.bytes = 0

    def keys_snapshot(self) -> list[str]:
        return list(self._map)

    def items(self) -> Iterator[tuple[str, Location]]:
        return ((key, _wrap(Location, value)) for key, value in self._map.items())
