"""The DRAM index: key -> location of its live entry.

The index is a plain dict guarded by the engine lock. A :class:`Location` is an immutable value:
one int packing (region, gen, offset, length, seq), so an indexed entry costs its key, its dict
slot and one ~56-byte int, not an object and four ints (this index holds every entry on the disk:
10M entries at 4 KiB pages). Reads counted per entry (``hits``, read by reinsertion) live in a
side dict that holds only the entries read since they were indexed; replacing or removing an
entry drops its count. A location is valid only while its region still has generation ``gen``;
reclaim and clear remove locations before the region can be reopened, and readers additionally
verify header and checksum, so a stale location is a miss, never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

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
    def many(
        cls, region: int, gen: int, offsets: Sequence[int], lengths: Sequence[int], seqs: Sequence[int]
    ) -> list[Location]:
        """The locations of one region's entries (what a summary lists): checked once per batch
        (the same limits as one at a time), packed in one pass. Opening 1M entries runs this."""
        if not offsets:
            return []
        if len(offsets) != len(lengths) or len(offsets) != len(seqs):
            raise ValueError("offsets, lengths and seqs differ in length")
        cls(region, gen, max(offsets), max(lengths), min(seqs))  # raises as one would
        if min(offsets) < 0 or min(lengths) < 0:
            raise ValueError(f"location out of range: negative offset or length in region {region}")
        base = (gen << _GEN_SHIFT) | (region << _REGION_SHIFT)
        new = int.__new__
        return [
            new(cls, (s << _SEQ_SHIFT) | base | (o << _OFF_SHIFT) | n)
            for o, n, s in zip(offsets, lengths, seqs, strict=True)
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


class Index:
    def __init__(self) -> None:
        self._map: dict[str, Location] = {}
        self._hits: dict[str, int] = {}  # reads of the entries read since they were indexed
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def contains_many(self, keys: Iterable[str]) -> list[bool]:
        return list(map(self._map.__contains__, keys))

    def get(self, key: str) -> Location | None:
        return self._map.get(key)

    def hit(self, key: str) -> None:
        """Count one read of ``key``'s current entry."""
        self._hits[key] = self._hits.get(key, 0) + 1

    def hits(self, key: str) -> int:
        """Reads of ``key``'s current entry since it was indexed."""
        return self._hits.get(key, 0)

    def set(self, key: str, loc: Location) -> Location | None:
        old = self._map.get(key)
        self._map[key] = loc
        if self._hits:
            self._hits.pop(key, None)
        self.bytes += loc.length - (old.length if old else 0)
        return old

    def pop(self, key: str) -> Location | None:
        loc = self._map.pop(key, None)
        if loc is not None:
            self.bytes -= loc.length
            if self._hits:
                self._hits.pop(key, None)
        return loc

    def pop_if(self, key: str, region: int, gen: int) -> Location | None:
        """Remove ``key`` only if it still points into ``region`` at ``gen``."""
        loc = self._map.get(key)
        if loc is not None and loc.region == region and loc.gen == gen:
            return self.pop(key)
        return None

    def load(self, keys: list[str], locs: Iterable[Location]) -> None:
        """Bulk insert at open (later entries of a key replace earlier ones); call
        :meth:`recount` once after the last load."""
        if self._hits:
            for key in keys:
                self._hits.pop(key, None)
        self._map.update(zip(keys, locs, strict=False))

    def recount(self) -> None:
        self.bytes = sum(loc.length for loc in self._map.values())

    def clear(self) -> None:
        self._map.clear()
        self._hits.clear()
        self.bytes = 0

    def keys_snapshot(self) -> list[str]:
        return list(self._map)

    def items(self) -> Iterator[tuple[str, Location]]:
        return iter(self._map.items())
