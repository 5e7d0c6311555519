"""The read path (:class:`ReadPath`): ``get_batch_into`` from region files (or from the write
buffer of a pending put) into the caller's memory.

Look up and pin the regions under the lock; read without it, coalescing adjacent entries of a
region into large ``preadv`` calls (:mod:`.readplan`) that fill the caller's memoryviews directly
when alignment allows (a bounce buffer otherwise). The I/O threads only read, at most
``io_threads + 2`` runs ahead; the caller's own thread verifies each run as it lands, in order
(key, generation, sequence, length, xxh3 checksum of every entry) and copies bounced payloads
into its views, while the next runs are being read: the device does not wait for the checks and
copies (when each I/O thread verified and copied its own run, all of them did so at once while the
device sat idle), and nothing is copied into the caller's memory after it stopped waiting. A
failed check is a miss (counted, entry dropped from the index). On a miss the caller's memory for
that item may hold garbage. A run's pins are released when its read is over (``_finish``), which
may be after a caller that gave up at its deadline returned; such a read gives its engine memory
back itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from hicache_mooncake.native import copy_pages, xxh3_batch

from .allocator import RegionAllocator
from .buffer import Buffer, BufferPool, Slot, WriteBuffer
from .checksum import payload_hash, payload_hashes
from .core import EngineCore
from .format import BLOCK, FLAG_DEAD, parse_entry_header
from .io import READ, IoBatch, byte_view, copy_into, preadv_full
from .readplan import ReadItem, Run, plan_runs
from .spans import common_base
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")

Parts = Sequence[Any]


def copy_views(dst: Sequence[memoryview], src: Sequence[memoryview]) -> None:
    """Copy the bytes of ``src`` (back to back) into ``dst`` (same total length)."""
    si, so = 0, 0
    for v in dst:
        pos, n = 0, v.nbytes
        while pos < n:
            s = src[si]
            take = min(n - pos, s.nbytes - so)
            copy_into(v[pos : pos + take], s[so : so + take])
            pos += take
            so += take
            if so == s.nbytes:
                si, so = si + 1, 0


def copy_out(scratch: Buffer, items: Sequence[tuple[ReadItem, int]]) -> None:
    """Copy each verified bounced payload (at its offset in the engine's ``scratch``) into its
    item's views: one native ``copy_pages`` when the views lie in one caller buffer (the rule),
    else one native call per view."""
    dst: list[memoryview] = []
    src_offsets: list[int] = []
    for it, at in items:
        for v in it.views:
            dst.append(byte_view(v))
            src_offsets.append(at)
            at += v.nbytes
    lengths = [v.nbytes for v in dst]
    d = common_base(dst, writable=True)
    if d is not None:
        copy_pages(d[0], d[1], scratch, src_offsets, lengths)
        return
    for dv, at, n in zip(dst, src_offsets, lengths, strict=True):
        if n:
            copy_pages(dv, [0], scratch, [at], [n])


class _Landed:
    """One run's read: engine memory (``scratch``: header blocks, padding, bounced entries),
    where each entry's header and payload are (``where``), bytes read (``got``) or the error."""

    __slots__ = ("pool", "scratch", "where", "bounced_at", "got", "error")

    def __init__(self, pool: BufferPool, scratch: Buffer) -> None:
        self.pool = pool
        self.scratch: Buffer | None = scratch
        self.where: list[tuple[memoryview, list[memoryview]]] = []
        self.bounced_at: list[int] = []  # per entry: its payload's offset in scratch (-1: in place)
        self.got = 0
        self.error: BaseException | None = None

    def release(self) -> None:
        if self.scratch is not None:
            self.pool.give(self.scratch)
            self.scratch = None


class _Landing:
    """Where the I/O threads hand each run's read to the caller (by run index). After
    :meth:`close` (the caller stopped waiting) a read gives its memory back itself."""

    def __init__(self, n: int) -> None:
        self._cond = threading.Condition()
        self._landed: list[_Landed | None] = [None] * n
        self._open = True

    def put(self, i: int, landed: _Landed) -> None:
        with self._cond:
            if self._open:
                self._landed[i] = landed
                self._cond.notify_all()
                return
        landed.release()

    def take(self, i: int, deadline: float | None) -> _Landed | None:
        """Run ``i``'s read once it landed; None if ``deadline`` passed first."""
        with self._cond:
            while (landed := self._landed[i]) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(None if left is None else min(left, threading.TIMEOUT_MAX))
            self._landed[i] = None
            return landed

    def close(self) -> None:
        with self._cond:
            self._open = False
            left = [x for x in self._landed if x is not None]
            self._landed = [None] * len(self._landed)
        for x in left:
            x.release()


class ReadPath:
    def __init__(self, core: EngineCore, allocator: RegionAllocator, writer: WritePath) -> None:
        self.core = core
        self.alloc = allocator
        self.writer = writer

    def get_batch(
        self,
        items: Sequence[tuple[str, Parts]],
        results: list[bool],
        internal: bool,
        deadline: float | None = None,
    ) -> None:
        """Fill ``results[i]`` per item. ``internal`` (reinsertion) reads count no hits.

        With a ``deadline`` every read lands in memory the engine owns and is copied into the
        caller's views only while the call is still waiting for it: a read that completes after
        the call gave up writes into engine memory, never into memory the caller has reused.
        Without one, aligned reads go straight into the caller's views (zero copy)."""
        c = self.core
        views_list = [[byte_view(p) for p in parts] for _, parts in items]
        plan: list[ReadItem] = []
        mem: list[tuple[int, WriteBuffer, Slot]] = []
        fps = c.index.fps([key for key, _ in items]) if items else None
        with c.lock:
            locs = c.index.lookup(fps) if fps is not None else []
            read: list[int] = []
            for i, (key, _) in enumerate(items):
                views = views_list[i]
                size = sum(v.nbytes for v in views)
                staged = self.writer.pending_slot(key)
                if staged is not None:
                    wb, slot = staged
                    if slot.payload_len != size:
                        c.counts["get_size_mismatch"] += 1
                        continue
                    wb.acquire()
                    mem.append((i, wb, slot))
                    continue
                loc = locs[i]
                if loc is None:
                    continue
                if loc.length != size:
                    c.counts["get_size_mismatch"] += 1
                    continue
                r = c.regions[loc.region]
                r.readers += 1
                read.append(i)
                plan.append(ReadItem(i, key, loc, r, views))
            if read and not internal and fps is not None:
                c.index.hit_many(fps[read])
        for i, wb, slot in mem:
            try:
                copy_views(views_list[i], wb.payload_views(slot))
                results[i] = True
            finally:
                wb.release()
        if plan:
            bounce_all = deadline is not None
            o = c.options
            run_bytes = o.staged_read_run_bytes if bounce_all else o.max_read_run_bytes
            self._read_runs(plan_runs(plan, c.direct, run_bytes, staged=bounce_all), results, deadline)
        if not internal:
            with c.lock:
                c.counts["gets"] += len(items)
                hits = sum(results)
                c.counts["hits"] += hits
                c.counts["misses"] += len(items) - hits
                c.counts["hits_from_write_buffer"] += len(mem)
                c.counts["bytes_read"] += sum(it.loc.length for it in plan if results[it.idx])

    def _read_runs(self, runs: Sequence[Run], results: list[bool], deadline: float | None) -> None:
        """Read ``runs`` on the I/O pool (at most ``io_threads + 2`` submitted and not yet taken)
        and verify and deliver each here as it lands, in order, until ``deadline``. Entries that
        fail verification are dropped from the index. Every run is unpinned once: by its read's
        ``_finish``, or here if it was never submitted."""
        c = self.core
        pool = c.pool
        assert pool is not None
        landing = _Landing(len(runs))
        window = c.options.io_threads + 2
        iobs: list[IoBatch] = []
        bad: list[ReadItem] = []
        try:
            for i, run in enumerate(runs):
                while len(iobs) < min(len(runs), i + window):
                    nxt = runs[len(iobs)]
                    job = self._read_job(nxt, len(iobs), landing)
                    iobs.append(pool.submit([job], on_done=self._finisher(nxt), priority=READ))
                landed = landing.take(i, deadline)
                if landed is None:
                    c.timed_out("read", deadline or 0.0)
                    break
                try:
                    bad.extend(self._deliver(run, landed, results))
                finally:
                    landed.release()
        finally:
            landing.close()
            for iob in iobs:
                iob.abandon()  # reads not started are skipped (their runs unpinned by _finish)
            if deadline is None:  # zero-copy reads land in the caller's memory: never return under
                for iob in iobs:  # one (only an exception here leaves before they all landed)
                    iob.wait(None)
            never = runs[len(iobs) :]
            if never:
                with c.lock:
                    for run in never:
                        self._unpin(run)
        if bad:
            with c.lock:
                for it in bad:
                    if it.other_key:  # another key's entry: a miss, the entry stays indexed
                        c.counts["fingerprint_collisions"] += 1
                        continue
                    if c.index.get(it.key) == it.loc:  # still this entry (seq and gen are in it)
                        c.index.pop(it.key)
                c.counts["read_checksum_errors"] += sum(1 for it in bad if not it.other_key)

    def _unpin(self, run: Run) -> None:
        for it in run.items:
            it.region.readers -= 1
            self.alloc.maybe_free(it.region)

    def _finisher(self, run: Run) -> Callable[[IoBatch], None]:
        return lambda iob: self._finish(run, iob)

    def _finish(self, run: Run, iob: IoBatch) -> None:
        """A run's read is over (maybe after the caller gave up): unpin its regions."""
        c = self.core
        err = next((r for r in iob.results if isinstance(r, OSError)), None)
        with c.lock:
            self._unpin(run)
            c.counts["reads"] += len(run.items)
            if err is not None:
                c.counts["read_io_errors"] += 1
        if err is not None:
            c.io_failed("read", err)

    def _read_job(self, run: Run, i: int, landing: _Landing) -> Callable[[], int]:
        """One vectored read of a run of adjacent entries into the caller's views (or engine
        memory), handed to ``landing`` as run ``i`` whatever happens."""

        def job() -> int:
            buffers = self.core.buffers
            landed = _Landed(buffers, buffers.take(BLOCK * (len(run.items) + 1) + run.bounce_bytes))
            try:
                fd = run.region.fd
                if fd is None:
                    return 0  # nothing read: every entry fails its check
                landed.got = preadv_full(fd, self._layout(run, landed), run.offset)
                return landed.got
            except BaseException as e:
                landed.error = e
                raise
            finally:
                landing.put(i, landed)

        return job

    @staticmethod
    def _layout(run: Run, landed: _Landed) -> list[memoryview]:
        """The iovecs of ``run``'s read; records each entry's header and payload in
        ``landed.where``."""
        assert landed.scratch is not None
        n = len(run.items)
        sv = memoryview(landed.scratch)
        pad = sv[BLOCK * n : BLOCK * (n + 1)]
        bounce_at = BLOCK * (n + 1)
        iov: list[memoryview] = []
        for j, it in enumerate(run.items):
            if it.bounce:
                ent = sv[bounce_at : bounce_at + it.size]
                landed.bounced_at.append(bounce_at + BLOCK)
                bounce_at += it.size
                iov.append(ent)
                landed.where.append((ent[:BLOCK], [ent[BLOCK : BLOCK + it.loc.length]]))
            else:
                hdr = sv[BLOCK * j : BLOCK * (j + 1)]
                landed.bounced_at.append(-1)
                iov.append(hdr)
                iov.extend(it.views)
                tail = it.size - BLOCK - it.loc.length
                if tail:
                    iov.append(pad[:tail])
                landed.where.append((hdr, it.views))
        return iov

    def _deliver(self, run: Run, landed: _Landed, results: list[bool]) -> list[ReadItem]:
        """Verify ``run``'s entries, copy the bounced ones into the caller's views and set their
        results; returns the entries that failed verification (an I/O error fails none: they
        are misses, and the entries stay indexed), among them those whose entry is sound but
        holds another key (``other_key``: a fingerprint collision; the entry stays indexed)."""
        if landed.error is not None:
            return []
        if len(landed.where) != len(run.items):  # the region's file was closed: nothing read
            return list(run.items)
        bad: list[ReadItem] = []
        pos = 0
        if landed.scratch is not None and min(landed.bounced_at) >= 0:  # all in engine memory
            lengths = [it.loc.length for it in run.items]
            hashes = xxh3_batch(landed.scratch, landed.bounced_at, lengths).tolist()
        else:  # (in the caller's memory: where its views lie is looked up)
            hashes = payload_hashes([payload for _, payload in landed.where])
        for it, h in zip(run.items, hashes, strict=True):
            it.payload_hash = h
        out: list[tuple[ReadItem, int]] = []  # verified bounced entries: (item, offset in scratch)
        for it, (hdr, payload), at in zip(run.items, landed.where, landed.bounced_at, strict=True):
            pos += it.size
            whole = landed.got >= pos - (it.size - BLOCK - it.loc.length)
            if whole and self._verify(it, hdr, payload):
                if it.bounce:
                    out.append((it, at))
                else:
                    results[it.idx] = True
            else:
                bad.append(it)
        if out:
            assert landed.scratch is not None
            copy_out(landed.scratch, out)
            for it, _ in out:
                results[it.idx] = True
        return bad

    def _verify(self, it: ReadItem, hdr: memoryview, payload: Sequence[memoryview]) -> bool:
        """Whether the entry is ``it.key``'s and sound. A sound header of the location's entry
        that holds another key (a fingerprint collision) sets ``it.other_key``."""
        h, why = parse_entry_header(hdr, self.core.options.max_key_bytes)
        if (
            h is None
            or h.flags & FLAG_DEAD
            or h.gen != it.loc.gen
            or h.seq != it.loc.seq
            or h.payload_len != it.loc.length
        ):
            log.warning(
                "ssd: bad entry header for %r at %s+%d: %s", it.key, it.region.path, it.loc.offset, why
            )
            return False
        if h.key != it.key.encode("utf-8", "surrogateescape"):
            log.debug("ssd: %r shares its fingerprint with %r (a miss)", it.key, h.key)
            it.other_key = True
            return False
        got = it.payload_hash if it.payload_hash is not None else payload_hash(payload)
        if got != h.payload_hash:
            log.warning(
                "ssd: payload checksum mismatch for %r at %s+%d", it.key, it.region.path, it.loc.offset
            )
            return False
        return True
