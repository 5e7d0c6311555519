"""Read planning: turn a batch of index lookups into few, large reads.

Entries of one region are sorted by offset and merged into *runs* while each next entry starts
where the previous one ends (a batch written together is contiguous on disk), up to
``max_run_bytes`` (an entry larger than that is a run of its own). A run is one ``pread`` into a
native I/O worker's staging memory, header blocks and padding included (``native.read_entries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .format import entry_size
from .index import Location
from .region import Region


@dataclass
class ReadItem:
    idx: int  # position in the caller's batch
    key: str
    loc: Location
    region: Region
    views: list[memoryview]

    @property
    def size(self) -> int:
        return entry_size(self.loc.length)


@dataclass
class Run:
    region: Region
    offset: int
    items: list[ReadItem] = field(default_factory=list)
    nbytes: int = 0


def plan_runs(items: Sequence[ReadItem], max_run_bytes: int) -> list[Run]:
    by_region: dict[int, list[ReadItem]] = {}
    for it in items:
        by_region.setdefault(it.region.rid, []).append(it)
    runs: list[Run] = []
    for lst in by_region.values():
        lst.sort(key=lambda x: x.loc.offset)
        cur: Run | None = None
        for it in lst:
            if (
                cur is None
                or it.loc.offset != cur.offset + cur.nbytes
                or cur.nbytes + it.size > max_run_bytes
            ):
                cur = Run(it.region, it.loc.offset)
                runs.append(cur)
            cur.items.append(it)
            cur.nbytes += it.size
    return runs
