"""The DRAM index: key -> location of its live entry.

The index is a plain dict guarded by the engine lock. A :class:`Location` is immutable except
for ``hits`` (incremented on each get; read by reinsertion). A location is valid only while its
region still has generation ``gen``; reclaim and clear remove locations before the region can be
reopened, and readers additionally verify header and checksum, so a stale location is a miss,
never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class Location:
    __slots__ = ("region", "gen", "offset", "length", "seq", "hits")

    def __init__(self, region: int, gen: int, offset: int, length: int, seq: int) -> None:
        self.region = region  # region id
        self.gen = gen  # region generation the entry was written under
        self.offset = offset  # offset of the entry header block in the region file
        self.length = length  # payload bytes
        self.seq = seq
        self.hits = 0

    def __repr__(self) -> str:
        return (
            f"Location(r={self.region}, gen={self.gen}, off={self.offset}, len={self.length}, seq={self.seq})"
        )


class Index:
    def __init__(self) -> None:
        self._map: dict[str, Location] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def contains_many(self, keys: Iterable[str]) -> list[bool]:
        return list(map(self._map.__contains__, keys))

    def get(self, key: str) -> Location | None:
        return self._map.get(key)

    def set(self, key: str, loc: Location) -> Location | None:
        old = self._map.get(key)
        self._map[key] = loc
        self.bytes += loc.length - (old.length if old else 0)
        return old

    def pop(self, key: str) -> Location | None:
        loc = self._map.pop(key, None)
        if loc is not None:
            self.bytes -= loc.length
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
        self._map.update(zip(keys, locs, strict=False))

    def recount(self) -> None:
        self.bytes = sum(loc.length for loc in self._map.values())

    def clear(self) -> None:
        self._map.clear()
        self.bytes = 0

    def keys_snapshot(self) -> list[str]:
        return list(self._map)

    def items(self) -> Iterator[tuple[str, Location]]:
        return iter(self._map.items())
