"""Space: which region the next bytes go to (:class:`RegionAllocator`).

Keeps one *active* region per directory, opens a new one when a batch does not fit (a free
allocated region first, then a not yet allocated one while the free-space floor allows, else the
oldest sealed region is dropped synchronously), and gives disk space back when the filesystem
falls below the floor. Reservations happen under the core lock; preallocation and header writes
happen without it, by the one thread that moved the region to ``OPENING``.

A reservation is a :class:`Reservation`: a contiguous byte range of one region, pinned
(``writers``) until the write path has finished its ``pwritev`` and calls :meth:`finish_write`.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Sequence

from .core import EngineCore
from .format import BLOCK, RegionHeader, entry_size
from .reclaim import drop_all, pick_victim
from .region import Region, RegionState, open_region_fd, preallocate, remove_region_file, write_region_header
from .space import FloorGuard

log = logging.getLogger("hicache_mooncake.ssd")


class Reservation:
    """``sizes[i]`` bytes per entry, back to back from ``file_off`` in ``region`` (generation ``gen``,
    epoch ``epoch`` at reservation time); ``seqs`` are the entries' sequence numbers."""

    __slots__ = ("region", "file_off", "first", "count", "seqs", "gen", "epoch")

    def __init__(self, region: Region, file_off: int, first: int, seqs: list[int], epoch: int) -> None:
        self.region = region
        self.file_off = file_off
        self.first = first  # index of the first entry in the caller's batch
        self.count = len(seqs)
        self.seqs = seqs
        self.gen = region.gen
        self.epoch = epoch


class RegionAllocator:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        nd = len(core.options.dirs)
        self.active: list[Region | None] = [None] * nd
        self.opening: list[threading.Event | None] = [None] * nd
        self.floors = [FloorGuard(d, core.options.min_free_bytes) for d in core.options.dirs]
        self._rr = 0

    # ------------------------------------------------------------------ lock held

    def free_count(self, di: int) -> int:
        """Regions of ``di`` ready to open: free allocated ones, else 1 if a new one fits on disk."""
        now = time.monotonic()
        n = 0
        unallocated = False
        for r in self.core.regions:
            if r.dir_index == di and r.state is RegionState.FREE and r.alloc_retry_at <= now:
                if r.allocated:
                    n += 1
                else:
                    unallocated = True
        if n == 0 and unallocated and self.floors[di].ok(extra=self.core.options.region_size):
            return 1
        return n

    def _take_free(self, di: int, allow_unallocated: bool) -> Region | None:
        now = time.monotonic()
        fallback = None
        for r in self.core.regions:
            if r.dir_index != di or r.state is not RegionState.FREE or r.alloc_retry_at > now:
                continue
            if r.allocated:
                return r
            if fallback is None and allow_unallocated:
                fallback = r
        return fallback

    def seal(self, r: Region) -> None:
        if r.state is RegionState.ACTIVE:
            r.state = RegionState.SEALED
            self.core.fifo.append(r.rid)
        if self.active[r.dir_index] is r:
            self.active[r.dir_index] = None

    def maybe_free(self, r: Region) -> None:
        if r.state is RegionState.DRAINING and not r.pinned:
            r.state = RegionState.FREE
            r.keys = []
            r.live_bytes = 0

    def drop_oldest(self, di: int) -> tuple[Region | None, list[str]]:
        """Synchronously evict the oldest sealed unpinned region of ``di`` (no reinsertion)."""
        c = self.core
        victim = pick_victim(c.fifo, c.regions, di)
        if victim is None:
            return None, []
        c.fifo.remove(victim.rid)
        evicted = drop_all(victim, c.index)
        victim.state = RegionState.FREE
        c.counts["reclaimed_regions"] += 1
        c.counts["evicted_entries"] += len(evicted)
        return victim, evicted

    def forget_all(self) -> None:
        """``clear``: no active region, nothing sealed (lock held)."""
        self.active = [None] * len(self.active)
        self.core.fifo = []

    # ------------------------------------------------------------------ no lock held

    def pick_dir(self) -> int:
        nd = len(self.active)
        if nd == 1:
            return 0
        with self.core.lock:
            self._rr = (self._rr + 1) % nd
            return self._rr

    def reserve(
        self,
        di: int,
        sizes: Sequence[int],
        allow_open: bool,
        on_reserved: Callable[[Reservation], None],
    ) -> tuple[list[Reservation], str]:
        """Reserve space for entries of ``sizes`` payload bytes, in order; returns the reservations
        (pinned) and, if some entries could not be placed, the reason (``no_space`` / ``floor`` /
        ``io_error``). Entries ``[sum(r.count), len(sizes))`` were not placed. ``on_reserved`` is
        called under the lock for each reservation as it is made."""
        c = self.core
        rs = c.options.region_size
        out: list[Reservation] = []
        k = 0
        reason = ""
        alloc_failed = False  # a new region file could not be allocated: reuse old ones instead
        for _attempt in range(4 * len(c.regions) + 8):
            if k >= len(sizes):
                break
            to_open: Region | None = None
            wait_ev: threading.Event | None = None
            evicted: list[str] = []
            with c.lock:
                if c.closed:
                    reason = "io_error"
                    break
                r = self.active[di]
                if r is not None:
                    start, off = k, r.write_off
                    while k < len(sizes) and off + entry_size(sizes[k]) <= rs:
                        off += entry_size(sizes[k])
                        k += 1
                    if k > start:
                        seqs = [c.next_seq() for _ in range(k - start)]
                        res = Reservation(r, r.write_off, start, seqs, c.epoch)
                        out.append(res)
                        on_reserved(res)
                        r.write_off = off
                        r.writers += 1
                        if k >= len(sizes):
                            break
                    self.seal(r)
                if not allow_open:
                    reason = "no_space"
                    break
                if self.opening[di] is not None:
                    wait_ev = self.opening[di]
                else:
                    cand = self._take_free(di, allow_unallocated=not alloc_failed)
                    if cand is None:
                        cand, evicted = self.drop_oldest(di)
                    if cand is None:
                        reason = reason or "no_space"
                        break
                    cand.state = RegionState.OPENING
                    cand.gen = c.next_seq()
                    cand.epoch = c.epoch
                    wait_ev = threading.Event()
                    self.opening[di] = wait_ev
                    to_open = cand
            c.notify_evicted(evicted)
            if to_open is None:
                assert wait_ev is not None
                wait_ev.wait(timeout=1.0)
                continue
            ok, why = self._open_region(to_open)
            with c.lock:
                self.opening[di] = None
                if ok and to_open.epoch == c.epoch and not c.closed:
                    to_open.state = RegionState.ACTIVE
                    to_open.write_off = BLOCK
                    to_open.keys = []
                    to_open.live_bytes = 0
                    self.active[di] = to_open
                    c.counts["opened_regions"] += 1
                else:
                    to_open.state = RegionState.FREE
                    if not ok:
                        reason = why
                        if to_open.allocated:
                            to_open.alloc_retry_at = time.monotonic() + 1.0
                        else:
                            alloc_failed = True
            assert wait_ev is not None
            wait_ev.set()
        return out, reason

    def finish_write(self, res: Reservation, failed: bool) -> None:
        """Unpin a reservation once its write is over (lock held); a failed write seals the region."""
        r = res.region
        r.writers -= 1
        r.dirty = True
        if failed and r.state is RegionState.ACTIVE:
            self.seal(r)  # do not keep appending after a failed write
        self.maybe_free(r)

    def _open_region(self, r: Region) -> tuple[bool, str]:
        """Make ``r``'s file ready (state OPENING: this thread owns it): preallocate, write header."""
        o = self.core.options
        try:
            if not r.allocated and not self.floors[r.dir_index].ok(extra=o.region_size, fresh=True):
                return False, "floor" if o.min_free_bytes > 0 else "no_space"
            if r.fd is None:
                r.fd = open_region_fd(r.path, self.core.direct, create=True)
            if not r.allocated:
                preallocate(r.fd, o.region_size)
                r.allocated = True
                self.floors[r.dir_index].invalidate()
            write_region_header(r.fd, RegionHeader(r.rid, r.epoch, r.gen, o.region_size, time.time_ns()))
            return True, ""
        except OSError as e:
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            if not r.allocated:
                remove_region_file(r)
            log.log(logging.DEBUG if full else logging.WARNING, "ssd: cannot open region %s: %s", r.path, e)
            return False, "no_space" if full else "io_error"

    def release_for_floor(self, di: int) -> None:
        """Below the free-space floor: give one region's disk space back (free ones first)."""
        c = self.core
        evicted: list[str] = []
        with c.lock:
            victim = None
            for r in c.regions:
                if r.dir_index == di and r.state is RegionState.FREE and r.allocated:
                    victim = r
                    break
            if victim is None:
                victim, evicted = self.drop_oldest(di)
            if victim is None:
                return
            victim.state = RegionState.OPENING  # exclusive while its file is removed
        c.notify_evicted(evicted)
        remove_region_file(victim)
        with c.lock:
            victim.state = RegionState.FREE
            victim.alloc_retry_at = time.monotonic() + 1.0
            c.counts["released_regions"] += 1
        self.floors[di].invalidate()
