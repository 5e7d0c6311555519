"""The write path (:class:`WritePath`): ``put_batch`` from the caller's memory to a region file.

1. under the lock: skip keys already stored (values are immutable) and register the new ones as
   *pending* (a concurrent put of the same key waits for this one's result);
2. no lock: lay the batch out in a :class:`WriteBuffer`: the caller's memoryviews are written in
   place (borrowed) when the I/O mode allows and ``stage_writes`` says so, otherwise each entry is
   copied once into huge-page memory (staged);
3. under the lock (:meth:`RegionAllocator.reserve`): reserve contiguous space in the directory's
   active region and pin it; from here a get of a pending key is served from the write buffer
   (a staged entry once it is filled);
4. no lock: jobs of whole entries (about ``write_chunk_bytes`` each): the put's own thread fills
   them in order (copy when staged, payload hash, headers), at most ``io_threads + 2`` jobs ahead
   of the writes, while the I/O pool ``pwritev``s the jobs filled before, so the device always
   has writes in flight (when each I/O thread filled its own job first, the device sat idle
   while all of them copied, about half the time); no fill runs after the put returned; every
   sub-batch of a put is in flight at once;
5. under the lock: index the entries, unpin. Only now does the put report True: the bytes are in
   the region file (page cache or device), so a SIGKILL after it loses nothing.

Results are per item; nothing here raises for I/O or space problems (reasons are counted).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .allocator import RegionAllocator, Reservation
from .buffer import Buffer, Slot, WriteBuffer
from .core import EngineCore
from .format import BLOCK, entry_size
from .index import Location
from .io import WRITE, IoBatch, byte_view, is_aligned, pwritev_full

Parts = Sequence[Any]  # memoryview-compatible buffers

log = logging.getLogger("hicache_mooncake.ssd")


class Pending:
    """A key whose write is in flight. ``buf``/``slot`` are set once its space is reserved."""

    __slots__ = ("buf", "slot", "done", "ok", "removed")

    def __init__(self) -> None:
        self.buf: WriteBuffer | None = None
        self.slot: Slot | None = None
        self.done = threading.Event()
        self.ok = False
        self.removed = False


class _New:
    __slots__ = ("idx", "key", "fp", "kb", "views", "size", "pending", "slot")

    def __init__(
        self, idx: int, key: str, fp: int, kb: bytes, views: list[memoryview], size: int, p: Pending
    ) -> None:
        self.idx = idx
        self.key = key
        self.fp = fp  # the key's fingerprint (the index's key)
        self.kb = kb
        self.views = views
        self.size = size
        self.pending = p
        self.slot: Slot | None = None


class _Group:
    """The entries of one reservation and the outcome of their write."""

    __slots__ = ("res", "items", "start", "error")

    def __init__(self, res: Reservation, items: list[_New]) -> None:
        self.res = res
        self.items = items
        assert items[0].slot is not None
        self.start = items[0].slot.offset
        self.error: OSError | None = None


class _Job:
    """One write job: entries back to back on disk, filled by the put's thread (``iov``,
    ``staged``), then written by an I/O thread once ``filled`` is set. ``cancelled``: the put
    gave up (deadline) or the fill failed before it was filled; nothing is written."""

    __slots__ = ("group", "off", "slots", "filled", "iov", "staged", "cancelled", "holds_window")

    def __init__(self, group: _Group, off: int, slots: list[tuple[Slot, int]]) -> None:
        self.group = group
        self.off = off  # offset in the group
        self.slots = slots
        self.filled = threading.Event()
        self.iov: list[memoryview] = []
        self.staged: Buffer | None = None
        self.cancelled = False
        self.holds_window = False  # took a place of the put's fill window (freed after the write)


class _BatchWrite:
    """One sub-batch in flight: shared by the caller and the I/O completion (``_finish``)."""

    def __init__(
        self,
        batch: list[_New],
        results: list[bool],
        reinsert_rid: int | None,
        buf: WriteBuffer,
        window: threading.Semaphore,
    ) -> None:
        self.batch = batch
        self.results = results
        self.reinsert_rid = reinsert_rid
        self.buf = buf
        self.groups: list[_Group] = []
        self.job_groups: list[_Group] = []  # the group of each write job, in job order
        self.failed_reason = ""
        self.finished = False  # _finish ran (lock held to read/write)
        self.abandoned = False  # the caller returned before _finish (lock held)
        self.jobs: list[_Job] = []  # in submission order, filled in that order by the caller
        self.window = window  # jobs filled and not yet written, shared by the put's sub-batches
        self.iob: IoBatch | None = None


class WritePath:
    def __init__(self, core: EngineCore, allocator: RegionAllocator) -> None:
        self.core = core
        self.alloc = allocator
        self.pending: dict[str, Pending] = {}

    def put_batch(
        self,
        items: Sequence[tuple[str, Parts]],
        results: list[bool],
        di: int,
        reinsert_rid: int | None = None,
        deadline: float | None = None,
        open_regions: bool = False,
        epoch: int | None = None,
    ) -> bool:
        """Store ``items`` into directory ``di``, setting ``results[i]``; returns whether anything
        new was written (the caller then gives the reclaimer a chance). ``reinsert_rid``: rewrite
        entries of that region (reclaim), only into the active region (unless ``open_regions``:
        a resize moving entries out of retired regions) and only if still indexed there.
        ``deadline`` (``time.monotonic()``): what is not written by then is False (the I/O
        may finish later; it is then not indexed, see :meth:`_finish`). ``epoch``: the epoch the
        caller's operation started in; if a clear bumped it, nothing is indexed (False)."""
        c = self.core
        o = c.options
        prepared: list[tuple[int, str, bytes, list[memoryview], int]] = []
        rejects: Counter[str] = Counter()
        for i, (key, parts) in enumerate(items):
            kb = key.encode("utf-8", "surrogateescape")
            if not kb or len(kb) > o.max_key_bytes:
                rejects["rejected_bad_key"] += 1
                continue
            views = [byte_view(p) for p in parts]
            size = sum(v.nbytes for v in views)
            if size > o.max_object_bytes:
                rejects["rejected_too_large"] += 1
                continue
            prepared.append((i, key, kb, views, size))
        floor_ok = reinsert_rid is not None or self.alloc.floors[di].ok()
        mine: list[_New] = []
        waits: list[tuple[int, Pending]] = []
        fps = c.index.fps([key for _, key, _, _, _ in prepared]) if prepared else None
        with c.lock:
            stored = c.index.lookup(fps) if fps is not None else []  # one native lookup
            c.counts.update(rejects)
            if reinsert_rid is None:
                c.counts["puts"] += len(items)
            if not floor_ok:
                c.counts["rejected_floor"] += len(prepared)
                prepared = []
            if epoch is not None and epoch != c.epoch:
                c.counts["rejected_stale_epoch"] += len(prepared)
                prepared = []
            fp_list = fps.tolist() if fps is not None else []
            for j, (i, key, kb, views, size) in enumerate(prepared):
                fp, loc = fp_list[j], stored[j]
                if loc is not None and loc.region != reinsert_rid:
                    results[i] = True
                    c.counts["put_existing"] += 1
                    continue
                p = self.pending.get(key)
                if p is not None:
                    waits.append((i, p))
                    continue
                p = Pending()
                self.pending[key] = p
                mine.append(_New(i, key, fp, kb, views, size, p))
        if not floor_ok:
            self.alloc.release_for_floor(di, deadline)
        # Sub-batches of at most one region's worth of bytes each, all in flight at once.
        subs: list[tuple[list[_New], int]] = []
        batch: list[_New] = []
        nbytes = 0
        for it in mine:
            es = entry_size(it.size)
            if batch and nbytes + es > o.region_size:
                subs.append((batch, nbytes))
                batch, nbytes = [], 0
            batch.append(it)
            nbytes += es
        if batch:
            subs.append((batch, nbytes))
        started: list[_BatchWrite] = []
        window = threading.Semaphore(o.io_threads + 2)
        try:
            for sub, n in subs:
                state = self._start_batch(di, sub, n, results, reinsert_rid, deadline, window, open_regions)
                if epoch is not None:  # written for that epoch: not indexed once a clear bumped it
                    for g in state.groups:
                        g.res.epoch = epoch
                started.append(state)
                # filled before the next sub-batch reserves: a region open it may need runs on
                # the I/O pool, whose threads must not all be waiting for fills of this put
                self._fill(state, deadline)
        finally:
            for state in started:
                self._wait_batch(state, deadline)
        for i, p in waits:
            if p.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                results[i] = p.ok
        return bool(mine)

    def _borrow(self, batch: list[_New]) -> bool:
        """Write the caller's memory in place (zero copy) rather than staging it."""
        c = self.core
        mode = c.options.stage_writes
        if mode == "always" or not c.options.zero_copy_writes:
            return False
        if c.direct and not all(is_aligned(v, BLOCK) for it in batch for v in it.views):
            return False
        if mode == "never" or not c.direct:
            return True
        return all(c.huge_memory.covers(v) for it in batch for v in it.views)

    def _start_batch(
        self,
        di: int,
        batch: list[_New],
        nbytes: int,
        results: list[bool],
        reinsert_rid: int | None,
        deadline: float | None,
        window: threading.Semaphore,
        open_regions: bool = False,
    ) -> _BatchWrite:
        """Lay out, reserve and submit one sub-batch (its jobs wait to be filled by
        :meth:`_fill`); :meth:`_wait_batch` waits for it."""
        c = self.core
        borrow = self._borrow(batch)
        buf = WriteBuffer(c.buffers, len(batch), borrow)
        state = _BatchWrite(batch, results, reinsert_rid, buf, window)
        try:
            for it in batch:
                it.slot = buf.add(it.kb, it.views)

            def on_reserved(res: Reservation) -> None:
                for it in batch[res.first : res.first + res.count]:
                    it.pending.buf, it.pending.slot = buf, it.slot

            reservations, state.failed_reason = self.alloc.reserve(
                di, [it.size for it in batch], reinsert_rid is None or open_regions, on_reserved, deadline
            )
            state.groups = [_Group(res, batch[res.first : res.first + res.count]) for res in reservations]
            jobs: list[Callable[[], None]] = []
            for g in state.groups:
                for job in self.write_jobs(g, buf, state):
                    jobs.append(job)
                    state.job_groups.append(g)
            assert c.pool is not None
            buf.hold()  # the jobs' reference, dropped by _finish
            state.iob = c.pool.submit(jobs, on_done=lambda b: self._finish(state, b), priority=WRITE)
        except BaseException:
            # reserve or layout raised: nothing is in flight
            with c.lock:
                for g in state.groups:
                    self.alloc.finish_write(g.res, failed=True)
                for it in batch:
                    if self.pending.get(it.key) is it.pending:
                        del self.pending[it.key]
            for it in batch:
                it.pending.done.set()
            buf.drop()
            raise
        return state

    def _wait_batch(self, state: _BatchWrite, deadline: float | None) -> None:
        c = self.core
        iob = state.iob
        if iob is None:
            return
        try:
            if not iob.wait(deadline):  # (no fill runs any more: the caller did them)
                with c.lock:
                    if not state.finished:
                        state.abandoned = True
                        iob.abandon()
                        for it in state.batch:
                            if self.pending.get(it.key) is it.pending:
                                del self.pending[it.key]
                            it.pending.ok = False
                if state.abandoned:
                    c.timed_out("write", deadline or 0.0)
        finally:
            for it in state.batch:
                it.pending.done.set()
            state.buf.drop(wait_readers=True)

    def _finish(self, state: _BatchWrite, iob: IoBatch) -> None:
        """Every write job of a batch has finished (runs once, maybe after the caller gave up):
        unpin the regions, index what was written, unless the caller abandoned the batch (its
        results are already False; entries written late are never indexed)."""
        c = self.core
        for g, r in zip(state.job_groups, iob.results, strict=True):
            if isinstance(r, BaseException) and g.error is None:
                g.error = r if isinstance(r, OSError) else OSError(errno.ECANCELED, str(r) or "cancelled")
        dying: OSError | None = None
        with c.lock:
            state.finished = True
            placed: set[int] = set()
            for g in state.groups:
                if g.error is not None:
                    full = g.error.errno in (errno.ENOSPC, errno.EDQUOT)
                    if not full and g.error.errno != errno.ECANCELED:
                        dying = g.error
                    if not state.abandoned:
                        c.counts[f"rejected_{'no_space' if full else 'io_error'}"] += len(g.items)
                for it, seq in zip(g.items, g.res.seqs, strict=True):
                    placed.add(it.idx)
                    if state.abandoned:
                        continue
                    ok = g.error is None
                    if ok:
                        try:  # a bug here must not leave the region pinned (close waits for it)
                            self._commit(it, seq, g, state.reinsert_rid)
                        except Exception:  # noqa: BLE001 - the entry is not indexed: a miss
                            log.exception("ssd write: indexing %r failed", it.key)
                            c.counts["index_failures"] += 1
                            ok = False
                        else:
                            c.counts["bytes_written"] += it.size
                    state.results[it.idx] = ok
                    it.pending.ok = ok
                    if self.pending.get(it.key) is it.pending:
                        del self.pending[it.key]
                # unpin after indexing: a region sealed meanwhile is summarised with these entries
                self.alloc.finish_write(g.res, failed=g.error is not None)
            if state.abandoned:
                c.counts["late_writes"] += len(placed)
            else:
                for it in state.batch:
                    if it.idx not in placed:
                        c.counts[f"rejected_{state.failed_reason or 'no_space'}"] += 1
                        if self.pending.get(it.key) is it.pending:
                            del self.pending[it.key]
                        it.pending.ok = False
            c.counts["writes"] += len(iob.results)
            c.counts["batches_zero_copy" if state.buf.borrow else "batches_staged"] += 1
        if dying is not None:
            c.io_failed("write", dying)
        state.buf.drop()

    def _commit(self, it: _New, seq: int, g: _Group, reinsert_rid: int | None) -> None:
        """Index one written entry (lock held) unless a clear/remove/reclaim raced it."""
        c = self.core
        r = g.res.region
        if it.pending.removed or g.res.epoch != c.epoch or r.gen != g.res.gen:
            return
        if reinsert_rid is not None:
            cur = c.index.get_fp(it.fp)
            if cur is None or cur.region != reinsert_rid:
                return
            c.counts["reinserted_entries"] += 1
        assert it.slot is not None
        loc = Location(r.rid, g.res.gen, g.res.file_off + (it.slot.offset - g.start), it.size, seq)
        c.index.set_fp(it.fp, loc)
        r.add(it.fp, it.key, it.size)

    def write_jobs(self, g: _Group, buf: WriteBuffer, state: _BatchWrite) -> list[Callable[[], None]]:
        """Jobs of whole entries, about ``write_chunk_bytes`` each (an entry larger than that is a
        job of its own), appended to ``state.jobs``; each returned callable (run on the I/O pool)
        waits until :meth:`_fill` filled its job, then ``pwritev``s it."""
        fd = g.res.region.fd
        assert fd is not None
        chunk = self.core.options.write_chunk_bytes
        pieces: list[_Job] = []
        cur: list[tuple[Slot, int]] = []
        cur_bytes = 0
        for it, seq in zip(g.items, g.res.seqs, strict=True):
            assert it.slot is not None
            if cur and cur_bytes + it.slot.size > chunk:
                pieces.append(_Job(g, cur[0][0].offset - g.start, cur))
                cur, cur_bytes = [], 0
            cur.append((it.slot, seq))
            cur_bytes += it.slot.size
        if cur:
            pieces.append(_Job(g, cur[0][0].offset - g.start, cur))
        state.jobs.extend(pieces)

        def write(job: _Job) -> Callable[[], None]:
            def run() -> None:
                job.filled.wait()  # set by _fill on every path (filled or cancelled)
                try:
                    if job.cancelled:
                        g.error = g.error or OSError(errno.ECANCELED, "put gave up before the copy")
                        return
                    pwritev_full(fd, job.iov, g.res.file_off + job.off)
                except OSError as e:
                    g.error = e
                finally:
                    buf.give_back(job.staged)
                    job.staged, job.iov = None, []
                    if job.holds_window:
                        state.window.release()

            return run

        return [write(job) for job in pieces]

    def _fill(self, state: _BatchWrite, deadline: float | None) -> None:
        """Fill the jobs of ``state`` in submission order, each once a place in the put's window
        is free (a job's place is freed when its write is over), until ``deadline``. Every job
        leaves here filled or cancelled, whatever happens: an I/O thread waits for it."""
        try:
            for job in state.jobs:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break  # past the deadline: the rest are cancelled
                # (a far deadline, a caller's 'no limit', is capped where the platform can wait)
                if not state.window.acquire(
                    timeout=None if left is None else min(left, threading.TIMEOUT_MAX)
                ):
                    break
                job.holds_window = True
                try:
                    job.iov, job.staged = state.buf.fill_job(job.slots, job.group.res.gen)
                except Exception:  # noqa: BLE001 - a bug in one job's fill fails that job only
                    log.exception("ssd write: filling a write job failed")
                    job.cancelled = True
                job.filled.set()
        finally:
            for job in state.jobs:
                if not job.filled.is_set():
                    job.cancelled = True
                    job.filled.set()

    # ------------------------------------------------------------------ pending entries (lock held)

    def pending_slot(self, key: str) -> tuple[WriteBuffer, Slot] | None:
        """The staged bytes of ``key`` if its write is in flight (lock held)."""
        p = self.pending.get(key)
        if p is not None and p.buf is not None and p.slot is not None and not p.removed:
            return p.buf, p.slot
        return None

    def forget(self, key: str) -> bool:
        """``remove``: a pending write of ``key`` will not be indexed (lock held)."""
        p = self.pending.get(key)
        if p is not None:
            p.removed = True
        return p is not None

    def forget_all(self) -> None:
        for p in self.pending.values():
            p.removed = True
