"""The reclaimer (:class:`Reclaimer`): keeps one clean region ready per directory.

After a put that wrote something, when a directory has no free region, the oldest sealed,
unpinned region is reclaimed: its hot entries (hit-based reinsertion, or ``keep``) are read back
and rewritten into the active region through the write path, the others are dropped from the
index and reported through ``on_evict``. The victim is pinned (``readers``) while its entries are
read, so it is never reopened under the reinsertion; at most one reclaim runs per directory. It
runs on the thread of the put that triggered it, within that put's deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .allocator import RegionAllocator
from .core import EngineCore
from .format import entry_size
from .index import Location
from .names import region_names
from .reader import ReadPath
from .reclaim import pick_victim, split_for_reinsertion
from .region import Region, RegionState
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")


class Reclaimer:
    def __init__(
        self, core: EngineCore, allocator: RegionAllocator, writer: WritePath, reader: ReadPath
    ) -> None:
        self.core = core
        self.alloc = allocator
        self.writer = writer
        self.reader = reader
        self._busy = [False] * len(core.options.dirs)

    def maybe_reclaim(self, di: int, deadline: float | None = None) -> None:
        c = self.core
        with c.lock:
            if c.closed or self._busy[di] or self.alloc.free_count(di) > 0:
                return
            victim = pick_victim(c.fifo, c.regions, di)
            if victim is None:
                return
        self.reclaim(victim, c.options.reinsertion_fraction, deadline)

    def reclaim(
        self,
        victim: Region,
        reinsertion_fraction: float,
        deadline: float | None = None,
        open_regions: bool = False,
    ) -> bool:
        """Reclaim ``victim`` (sealed, unpinned) now: rewrite its hot entries (at most
        ``reinsertion_fraction`` of a region; into new regions too with ``open_regions``), drop
        the rest. False when it is not reclaimable now (state changed, pinned, or a reclaim of its
        directory is running)."""
        c = self.core
        o = c.options
        di = victim.dir_index
        with c.lock:
            if c.closed or self._busy[di] or victim.state is not RegionState.SEALED or victim.pinned:
                return False
            self._busy[di] = True
            c.fifo.remove(victim.rid)
            victim.state = RegionState.DRAINING
            victim.readers += 1
            gen = victim.gen
        late: list[str] = []
        names: list[str] = []
        fps = np.zeros(0, np.uint64)
        try:
            named = region_names(c, victim)  # file I/O when its keys are not in memory (names.py)
            if named is not None:
                names, fps = named
            with c.lock:
                budget = int(o.region_size * reinsertion_fraction)
                hot, evicted = split_for_reinsertion(
                    victim, c.index, names, fps, o.reinsertion_hits, budget, c.keep
                )
                c.counts["reclaimed_regions"] += 1
                c.counts["evicted_entries"] += len(evicted)
            c.notify_evicted(evicted)
            if hot:
                self._reinsert(victim, hot, deadline, open_regions)
        except Exception:  # noqa: BLE001
            log.exception("ssd reinsertion failed")
        finally:
            with c.lock:
                victim.readers -= 1
                left = np.frombuffer(victim.fps, np.uint64).copy()
                gone = c.index.pop_if_many(left, victim.rid, gen)
                if gone.any():
                    by_fp = dict(zip(fps.tolist(), names, strict=True))
                    late = [k for k in map(by_fp.get, left[gone].tolist()) if k is not None]
                    c.counts["evicted_entries"] += int(gone.sum())
                victim.reset_entries()
                self.alloc.maybe_free(victim)
                self._busy[di] = False
        c.notify_evicted(late)
        return True

    def _reinsert(
        self, victim: Region, hot: Sequence[tuple[str, Location]], deadline: float | None, open_regions: bool
    ) -> None:
        total = sum(entry_size(loc.length) for _, loc in hot)
        mem = self.core.buffers.take(total)
        try:
            view = memoryview(mem)
            items: list[tuple[str, list[memoryview]]] = []
            off = 0
            for key, loc in hot:
                items.append((key, [view[off : off + loc.length]]))
                off += loc.length
            got = [False] * len(items)
            self.reader.get_batch(items, got, internal=True, deadline=deadline)
            to_put = [(k, v) for (k, v), ok in zip(items, got, strict=True) if ok]
            if to_put:
                res = [False] * len(to_put)
                self.writer.put_batch(
                    to_put, res, victim.dir_index, reinsert_rid=victim.rid, deadline=deadline,
                    open_regions=open_regions,
                )  # fmt: skip
        finally:
            self.core.buffers.give(mem)
