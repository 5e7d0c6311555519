"""Changing the engine's capacity while it serves (:class:`Resizer`).

Growing raises ``core.region_limit``: the regions up to it are opened (their files made) as
writes need them, up to ``SsdOptions.max_capacity_bytes``. Shrinking lowers it first (no new bytes
go past it), then empties every region past it, one at a time, while calls keep running:

* an active region is sealed (writes in flight finish; nothing is appended any more);
* a sealed region is reclaimed like any victim (``Reclaimer.reclaim``), except that every entry the
  owner still wants (``keep``, or hit-based reinsertion) is rewritten below the limit, the others
  are dropped and reported through ``on_evict``;
* a free region's file is unlinked (disk space given back) and removed from the region map.

Regions that are pinned (reads or writes in flight) or busy are retried until the deadline; what is
left then is reported (``left``), and a later ``resize`` with the same size continues. Readers never
see other bytes: entries move through the normal write path (new location, same bytes, checksum)
before the old region is freed, and a region is never reused while pinned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .allocator import RegionAllocator
from .core import EngineCore
from .names import tell_untold
from .reclaimer import Reclaimer
from .region import Region, RegionState, remove_region_file
from .summary import remove_summary


@dataclass
class ResizeProgress:
    """Where a resize stands: regions past the limit still to empty (``left``) of ``total``."""

    capacity: int
    total: int = 0
    left: int = 0
    reclaimed: int = 0
    files_removed: int = 0

    @property
    def done(self) -> bool:
        return self.left == 0


class Resizer:
    def __init__(self, core: EngineCore, allocator: RegionAllocator, reclaimer: Reclaimer) -> None:
        self.core = core
        self.alloc = allocator
        self.reclaimer = reclaimer

    def set_limit(self, capacity_bytes: int) -> int:
        """Validate and apply the new size (whole regions); returns the region limit."""
        c = self.core
        o = c.options
        limit = capacity_bytes // o.region_size
        least = 2 * len(o.dirs)
        if not least <= limit <= o.num_regions:
            raise ValueError(
                f"SSD capacity must be {least * o.region_size} to {o.num_regions * o.region_size} bytes "
                f"({least} to {o.num_regions} regions of {o.region_size}), got {capacity_bytes}"
            )
        with c.lock:
            c.region_limit = limit
        return limit

    def vacate(self, deadline: float, progress: ResizeProgress | None = None) -> ResizeProgress:
        """Empty the regions past the limit (module docstring) until done or the deadline."""
        c = self.core
        out = progress or ResizeProgress(c.region_limit * c.options.region_size)
        first = True
        while True:
            with c.lock:
                retired = [
                    r for r in c.regions[c.region_limit :] if r.allocated or r.state is not RegionState.FREE
                ]
                for r in retired:
                    if r.state is RegionState.ACTIVE and not c.closed:
                        self.alloc.seal(r)
            if first:
                out.total = len(retired)
                first = False
            out.left = len(retired)
            if not retired or c.closed or time.monotonic() >= deadline:
                return out
            moved = False
            for r in retired:
                if time.monotonic() >= deadline:
                    break
                if r.state is RegionState.SEALED and self.reclaimer.reclaim(
                    r, 1.0, deadline, open_regions=True
                ):
                    out.reclaimed += 1
                    moved = True
                elif self._remove_file(r):
                    out.files_removed += 1
                    moved = True
            if not moved:
                time.sleep(0.01)  # pinned or busy: readers and writers finish within their deadlines

    def _remove_file(self, r: Region) -> bool:
        """Unlink a free region's file (it stays FREE, not allocated; never reopened while retired)."""
        c = self.core
        with c.lock:
            if r.state is not RegionState.FREE or r.pinned or not r.allocated or r.rid < c.region_limit:
                return False
            r.state = RegionState.OPENING  # exclusive while its file goes
        try:
            tell_untold(c, r)
            remove_region_file(r)
            remove_summary(r.path)
            cb = self.alloc.on_region_file
            if cb is not None:
                cb(r.dir_index, r.rid, False)
        finally:
            with c.lock:
                r.state = RegionState.FREE
            self.alloc.floors[r.dir_index].invalidate()
        return True
