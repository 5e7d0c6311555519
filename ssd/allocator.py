"""Space: which region the next bytes go to (:class:`RegionAllocator`).

Keeps one *active* region per directory and up to :data:`STANDBY_DEPTH` *standby* regions, opened
in advance one after the other, so that a batch that does not fit moves on to the next standby at
once instead of waiting for a region to be opened (preallocation and a header write, which queue
behind the data on a busy disk, while one large put fills several regions; the figures that chose
the depth are in docs/performance-notes.md). A
standby is only ever a free region (never one emptied by eviction), so a full cache holds no more
empty regions than reclaim frees. A region
is opened from a free allocated region first, then a not yet allocated one while the free-space
floor allows, else (only when a batch needs it, never for a standby) the oldest sealed region is
dropped synchronously. Gives disk space back when the filesystem falls below the floor. Reservations happen under the core lock; preallocation and header writes
happen without it, by the one thread that moved the region to ``OPENING``.

A reservation is a :class:`Reservation`: a contiguous byte range of one region, pinned
(``writers``) until the write path has finished its ``pwritev`` and calls :meth:`finish_write`.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from .core import EngineCore
from .format import BLOCK, RegionHeader, entry_size
from .io import URGENT, IoBatch
from .names import tell_untold
from .reclaim import drop_all, pick_victim
from .region import Region, RegionState, open_region_fd, preallocate, remove_region_file, write_region_header
from .space import FloorGuard
from .summarizer import Summarizer
from .summary import remove_summary

log = logging.getLogger("hicache_mooncake.ssd")

STANDBY_DEPTH = 2  # empty regions opened ahead per directory (module docstring)


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


class _Opening:
    """A region open in flight for one directory; waiters wait on ``event``."""

    __slots__ = ("event", "why")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.why = ""


class RegionAllocator:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        nd = len(core.options.dirs)
        self.active: list[Region | None] = [None] * nd
        # opened, empty, next to become active (oldest first), at most STANDBY_DEPTH per directory
        self.standby: list[deque[Region]] = [deque() for _ in range(nd)]
        self.opening: list[_Opening | None] = [None] * nd
        self.floors = [FloorGuard(d, core.options.min_free_bytes) for d in core.options.dirs]
        self._rr = 0
        self.summaries = Summarizer(core)
        # Told when a region file is made (True) or removed (False): the region map (epoch.py).
        self.on_region_file: Callable[[int, int, bool], None] | None = None

    # ------------------------------------------------------------------ lock held

    def free_count(self, di: int) -> int:
        """Regions of ``di`` ready to open: free allocated ones, else 1 if a new one fits on disk."""
        now = time.monotonic()
        n = 0
        unallocated = False
        for r in self.core.regions[: self.core.region_limit]:
            if r.dir_index == di and r.state is RegionState.FREE and r.alloc_retry_at <= now:
                if r.allocated:
                    n += 1
                else:
                    unallocated = True
        if n == 0 and unallocated and self.floors[di].ok(extra=self.core.options.region_size):
            return 1
        return n

    def _spare_free(self, di: int, want: int) -> bool:
        """At least ``want`` regions of ``di`` could be opened now: free allocated ones, plus
        not yet allocated ones while the free-space floor leaves room for ``want`` more files.
        A standby beyond the first asks for two, so in a full cache (or one at its floor) only one
        empty region is held open, as reclaim and the floor expect: a second one would cost the
        cache a region of data."""
        now = time.monotonic()
        allocated = unallocated = 0
        for r in self.core.regions[: self.core.region_limit]:
            if r.dir_index == di and r.state is RegionState.FREE and r.alloc_retry_at <= now:
                if r.allocated:
                    allocated += 1
                    if allocated >= want:
                        return True
                else:
                    unallocated += 1
        if not unallocated or not self.floors[di].ok(extra=want * self.core.options.region_size):
            return False
        return allocated + unallocated >= want

    def _take_free(self, di: int, allow_unallocated: bool) -> Region | None:
        now = time.monotonic()
        fallback = None
        for r in self.core.regions[: self.core.region_limit]:
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
            self.summaries.maybe_summarize(r)
        if self.active[r.dir_index] is r:
            self.active[r.dir_index] = None
        if r in self.standby[r.dir_index]:  # a standby past a shrunk limit (resize) is sealed empty
            self.standby[r.dir_index].remove(r)

    def maybe_free(self, r: Region) -> None:
        if r.state is RegionState.DRAINING and not r.pinned:
            r.state = RegionState.FREE
            r.reset_entries()

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
        self.standby = [deque() for _ in self.standby]
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
        deadline: float | None = None,
    ) -> tuple[list[Reservation], str]:
        """Reserve space for entries of ``sizes`` payload bytes, in order; returns the reservations
        (pinned) and, if some entries could not be placed, the reason (``no_space`` / ``floor`` /
        ``io_error`` / ``timeout``). Entries ``[sum(r.count), len(sizes))`` were not placed.
        ``on_reserved`` is called under the lock for each reservation as it is made. Opening a
        region (preallocation, header write) runs on the I/O pool; a caller past ``deadline``
        stops waiting for it (the open completes, or fails, on its own)."""
        c = self.core
        rs = c.options.region_size
        out: list[Reservation] = []
        k = 0
        reason = ""
        alloc_failed = [False]  # a new region file could not be allocated: reuse old ones instead
        evicted: list[str] = []  # keys dropped for a region open, told to on_evict without the lock
        esizes = [entry_size(n) for n in sizes]
        for _attempt in range(4 * len(c.regions) + 8):
            if k >= len(sizes):
                break
            opening: _Opening | None = None
            with c.lock:
                if c.closed:
                    reason = "io_error"
                    break
                r = self.active[di]
                if r is not None:
                    start, off = k, r.write_off
                    while k < len(sizes) and off + esizes[k] <= rs:
                        off += esizes[k]
                        k += 1
                    if k > start:
                        seqs = c.next_seqs(k - start)
                        res = Reservation(r, r.write_off, start, seqs, c.epoch)
                        out.append(res)
                        on_reserved(res)
                        r.write_off = off
                        r.writers += 1
                        if k >= len(sizes):
                            if allow_open:
                                evicted = self._prepare_standby(di, alloc_failed)
                            break
                    self.seal(r)
                if self.standby[di]:
                    self.active[di] = self.standby[di].popleft()
                    if allow_open:
                        evicted = self._prepare_standby(di, alloc_failed)
                    opening = None
                elif not allow_open:
                    reason = "no_space"
                    break
                elif self.opening[di] is not None:
                    opening = self.opening[di]
                else:
                    opening, evicted = self._start_open(di, alloc_failed)
                    if opening is None:
                        reason = reason or "no_space"
                        break
            c.notify_evicted(evicted)
            evicted = []
            if opening is None:  # moved on to the standby region
                continue
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            done = left > 0 and opening.event.wait(left)
            if not done and deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
                c.timed_out("region_open", deadline)
                break
            if opening.why:
                reason = opening.why
        c.notify_evicted(evicted)
        return out, reason

    def _start_open(
        self, di: int, alloc_failed: list[bool], evict: bool = True
    ) -> tuple[_Opening | None, list[str]]:
        """Start opening a region of ``di`` (lock held): a free one, else (``evict``) the oldest
        sealed one dropped. Returns the opening (None: nothing to open) and the keys evicted."""
        c = self.core
        evicted: list[str] = []
        cand = self._take_free(di, allow_unallocated=not alloc_failed[0])
        while cand is None and evict:
            victim, dropped = self.drop_oldest(di)
            evicted.extend(dropped)
            if victim is None:
                break
            if victim.rid < c.region_limit:  # a retired region is emptied, never reopened
                cand = victim
        if cand is None:
            return None, evicted
        cand.state = RegionState.OPENING
        cand.gen = c.next_seq()
        cand.epoch = c.epoch
        opening = _Opening()
        self.opening[di] = opening
        self._open_async(di, cand, opening, alloc_failed)
        return opening, evicted

    def _prepare_standby(self, di: int, alloc_failed: list[bool]) -> list[str]:
        """Open the next region in the background if fewer than :data:`STANDBY_DEPTH` are ready,
        none is on its way and a free region is there (lock held; a standby never evicts: in a
        full cache the reclaimer frees the next region, or it is opened when needed). The open's
        completion calls this again, so the standbys fill up one open at a time."""
        if len(self.standby[di]) >= STANDBY_DEPTH or self.opening[di] is not None or alloc_failed[0]:
            return []
        if self.standby[di] and not self._spare_free(di, 2):
            return []  # a further standby never takes the last free region
        _, evicted = self._start_open(di, alloc_failed, evict=False)
        return evicted

    def _open_async(self, di: int, r: Region, opening: _Opening, alloc_failed: list[bool]) -> None:
        """Open ``r`` (state OPENING, owned by this open) on the I/O pool; ``opening.event`` is set
        after the region became ACTIVE (or FREE again on failure, with ``opening.why``)."""
        c = self.core

        def finish(b: IoBatch) -> None:
            res = b.results[0]
            ok, why = res if isinstance(res, tuple) else (False, "io_error")
            with c.lock:
                self.opening[di] = None
                if ok and r.epoch == c.epoch:
                    # also when the engine closed meanwhile: its header is on disk, and close
                    # (which waits for opens) writes its summary, so the next open scans nothing
                    r.state = RegionState.ACTIVE
                    r.write_off = BLOCK
                    r.reset_entries()
                    r.summarized = False
                    if self.active[di] is None:
                        self.active[di] = r
                    else:
                        self.standby[di].append(r)
                    c.counts["opened_regions"] += 1
                    # the next standby, if one is missing (no eviction: keys to tell are none)
                    if not c.closed:
                        self._prepare_standby(di, alloc_failed)
                else:
                    r.state = RegionState.FREE
                    if not ok:
                        opening.why = why
                        if r.allocated:
                            r.alloc_retry_at = time.monotonic() + 1.0
                        else:
                            alloc_failed[0] = True
            opening.event.set()

        assert c.pool is not None
        c.pool.submit([lambda: self._open_region(r)], on_done=finish, priority=URGENT)

    def finish_write(self, res: Reservation, failed: bool) -> None:
        """Unpin a reservation once its write is over (lock held); a failed write seals the region."""
        r = res.region
        r.writers -= 1
        r.dirty = True
        if failed and r.state is RegionState.ACTIVE:
            self.seal(r)  # do not keep appending after a failed write
        self.summaries.maybe_summarize(r)
        self.maybe_free(r)

    def _open_region(self, r: Region) -> tuple[bool, str]:
        """Make ``r``'s file ready (state OPENING: this thread owns it): preallocate, write header."""
        o = self.core.options
        tell_untold(self.core, r)  # keys a synchronous eviction dropped: before its summary goes
        try:
            if not r.allocated and not self.floors[r.dir_index].ok(extra=o.region_size, fresh=True):
                return False, "floor" if o.min_free_bytes > 0 else "no_space"
            if r.fd is None:
                r.fd = open_region_fd(r.path, self.core.direct, create=True)
            if not r.allocated:
                preallocate(r.fd, o.region_size)
                r.allocated = True
                self.floors[r.dir_index].invalidate()
            self._region_file(r, True)  # (mapped again if a crash lost the map's update)
            remove_summary(r.path)  # (a stale one would be ignored anyway: other generation)
            write_region_header(r.fd, RegionHeader(r.rid, r.epoch, r.gen, o.region_size, time.time_ns()))
            return True, ""
        except OSError as e:
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            if not r.allocated:
                remove_region_file(r)
                self._region_file(r, False)
            log.log(logging.DEBUG if full else logging.WARNING, "ssd: cannot open region %s: %s", r.path, e)
            return False, "no_space" if full else "io_error"

    def _region_file(self, r: Region, present: bool) -> None:
        cb = self.on_region_file
        if cb is not None:
            cb(r.dir_index, r.rid, present)

    def release_for_floor(self, di: int, deadline: float | None) -> None:
        """Below the free-space floor: give one region's disk space back (free ones first). The
        unlink runs on the I/O pool (the region stays OPENING, owned by it, until done); the
        caller waits for it until ``deadline``."""
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
        r = victim

        def finish(_b: IoBatch) -> None:
            with c.lock:
                r.state = RegionState.FREE
                r.alloc_retry_at = time.monotonic() + 1.0
                c.counts["released_regions"] += 1
            self.floors[di].invalidate()

        assert c.pool is not None

        def remove() -> None:
            tell_untold(c, r)
            remove_region_file(r)
            self._region_file(r, False)

        c.pool.submit([remove], on_done=finish).wait(deadline)
