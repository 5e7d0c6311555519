"""Read planning: turn a batch of index lookups into few, large vectored reads.

Entries of one region are sorted by offset and merged into *runs* while each next entry starts
where the previous one ends (a batch written together is contiguous on disk), up to
``max_run_bytes`` and the iovec limit. Within a run, each entry contributes its header block
(read into scratch memory, verified), then either the caller's own memoryviews (no copy) or a
slice of a bounce buffer:

* buffered I/O: the caller's views are used directly, whatever their alignment;
* O_DIRECT: only when every view has a 4096-aligned address and length; else bounce;
* calls with a deadline: always bounce (a read completing after the caller gave up must not
  write into the caller's memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .format import BLOCK, entry_size
from .index import Location
from .io import IOV_MAX, is_aligned
from .region import Region


@dataclass
class ReadItem:
    idx: int  # position in the caller's batch
    key: str
    loc: Location
    region: Region
    views: list[memoryview]
    bounce: bool = False
    other_key: bool = False  # its entry is sound but holds another key (a fingerprint collision)
    payload_hash: int | None = None  # xxh3 of the payload as read (one batch call per run)

    @property
    def size(self) -> int:
        return entry_size(self.loc.length)

    def iov_count(self) -> int:
        return 1 if self.bounce else 2 + len(self.views)


@dataclass
class Run:
    region: Region
    offset: int
    items: list[ReadItem] = field(default_factory=list)
    nbytes: int = 0
    bounce_bytes: int = 0


def plan_runs(items: Sequence[ReadItem], direct: bool, max_run_bytes: int, staged: bool = False) -> list[Run]:
    """``staged``: every entry is read into engine memory (a read that may outlive its caller)."""
    for it in items:
        it.bounce = staged or (direct and not all(is_aligned(v, BLOCK) for v in it.views))
    by_region: dict[int, list[ReadItem]] = {}
    for it in items:
        by_region.setdefault(it.region.rid, []).append(it)
    runs: list[Run] = []
    for lst in by_region.values():
        lst.sort(key=lambda x: x.loc.offset)
        cur: Run | None = None
        iovs = 0
        for it in lst:
            if (
                cur is None
                or it.loc.offset != cur.offset + cur.nbytes
                or cur.nbytes + it.size > max_run_bytes
                or iovs + it.iov_count() > IOV_MAX
            ):
                cur = Run(it.region, it.loc.offset)
                runs.append(cur)
                iovs = 0
            cur.items.append(it)
            cur.nbytes += it.size
            iovs += it.iov_count()
            if it.bounce:
                cur.bounce_bytes += it.size
    return runs
