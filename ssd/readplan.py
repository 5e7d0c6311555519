"""Read planning: turn a batch of index lookups into few, large reads, as columns.

Entries of one region are sorted by offset and merged into *runs* while each next entry starts
where the previous one ends (a batch written together is contiguous on disk), up to
``max_run_bytes`` (an entry larger than that is a run of its own). A run is one ``pread`` into a
native I/O worker's staging memory, header blocks and padding included (``native.read_entries``).

The plan is columns over the entries (one array per field, in read order: by region, then
offset), not an object per entry: a get of 128 pages costs one sort and one pass over ints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .format import BLOCK
from .index import Columns


@dataclass
class ReadPlan:
    """The entries to read, in read order: ``idx`` (int64) their positions in the caller's
    batch, ``fields`` their index entries; run ``j`` is entries ``run_first[j]`` up to
    ``run_first[j + 1]`` of region ``run_region[j]``, starting at byte ``run_offset[j]`` of its
    file. Every entry of the plan is in exactly one run."""

    idx: np.ndarray
    fields: Columns
    run_first: list[int]
    run_region: list[int]
    run_offset: list[int]

    def __len__(self) -> int:
        return len(self.idx)

    @property
    def runs(self) -> int:
        return len(self.run_region)


def entry_sizes(lengths: np.ndarray) -> np.ndarray:
    """Bytes each entry occupies in its region (``format.entry_size`` of each payload length)."""
    block = np.uint64(BLOCK)
    return (lengths + np.uint64(BLOCK - 1)) // block * block + block


def plan_runs(idx: np.ndarray, fields: Columns, max_run_bytes: int) -> ReadPlan:
    """The runs that read the entries ``fields`` (of the batch positions ``idx``)."""
    order = np.lexsort((fields.offset, fields.region))  # stable: equal offsets keep batch order
    fields = Columns(*(col[order] for col in fields))
    run_first: list[int] = []
    run_region: list[int] = []
    run_offset: list[int] = []
    region_at = end = -1
    nbytes = 0
    sizes = entry_sizes(fields.length).tolist()
    for j, (rid, off, size) in enumerate(
        zip(fields.region.tolist(), fields.offset.tolist(), sizes, strict=True)
    ):
        if rid != region_at or off != end or nbytes + size > max_run_bytes:
            run_first.append(j)
            run_region.append(rid)
            run_offset.append(off)
            region_at, nbytes = rid, 0
        nbytes += size
        end = off + size
    run_first.append(len(sizes))
    return ReadPlan(idx[order], fields, run_first, run_region, run_offset)
