"""The read path (:class:`ReadPath`): ``get_batch_into`` from region files (or from the write
buffer of a pending put) into the caller's memory.

Look up and pin the regions under the lock; read without it, coalescing adjacent entries of a
region into large ``preadv`` calls (:mod:`.readplan`) that fill the caller's memoryviews directly
when alignment allows (a bounce buffer otherwise); verify key, generation, sequence, length and
the xxh3 checksum of every entry; unpin. A failed check is a miss (counted, entry dropped from the
index). On a miss the caller's memory for that item may hold garbage. Pins are released and bad
entries dropped when the I/O is over (``_finish``), which may be after a caller that gave up at
its deadline returned.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import xxhash

from .allocator import RegionAllocator
from .buffer import Slot, WriteBuffer
from .core import EngineCore
from .format import BLOCK, FLAG_DEAD, parse_entry_header
from .io import READ, IoBatch, byte_view, copy_into, preadv_full
from .readplan import ReadItem, Run, plan_runs
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")

Parts = Sequence[Any]


def copy_views(dst: Sequence[memoryview], src: Sequence[memoryview]) -> None:
    """Copy the bytes of ``src`` (back to back) into ``dst`` (same total length); the GIL is
    released during each copy."""
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


class _Delivery:
    """Where a read batch's jobs put their results, until the caller stops waiting.

    ``deliver`` copies a verified entry into the caller's views (when it was read into engine
    memory) and sets its result, only while the caller still waits; ``close`` (caller past its
    deadline) waits for copies in progress (memory copies: short) and refuses later ones."""

    def __init__(self, results: list[bool]) -> None:
        self._results = results
        self._cond = threading.Condition()
        self._open = True
        self._copying = 0

    def deliver(self, it: ReadItem, payload: Sequence[memoryview] | None) -> None:
        with self._cond:
            if not self._open:
                return
            self._copying += 1
        try:
            if payload is not None:
                copy_views(it.views, payload)
        finally:
            with self._cond:
                self._results[it.idx] = True
                self._copying -= 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._open = False
            while self._copying:
                self._cond.wait()


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
        with c.lock:
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
                loc = c.index.get(key)
                if loc is None:
                    continue
                if loc.length != size:
                    c.counts["get_size_mismatch"] += 1
                    continue
                r = c.regions[loc.region]
                r.readers += 1
                if not internal:
                    c.index.hit(key)
                plan.append(ReadItem(i, key, loc, r, views))
        for i, wb, slot in mem:
            try:
                copy_views(views_list[i], wb.payload_views(slot))
                results[i] = True
            finally:
                wb.release()
        if plan:
            guard = _Delivery(results)
            bounce_all = deadline is not None
            o = c.options
            run_bytes = o.staged_read_run_bytes if bounce_all else o.max_read_run_bytes
            runs = plan_runs(plan, c.direct, run_bytes, staged=bounce_all)
            assert c.pool is not None
            iob = c.pool.submit(
                [self._run_job(run, guard) for run in runs],
                on_done=lambda b: self._finish(runs, b),
                priority=READ,
            )
            if not iob.wait(deadline):
                guard.close()
                iob.abandon()
                c.timed_out("read", deadline or 0.0)
        if not internal:
            with c.lock:
                c.counts["gets"] += len(items)
                hits = sum(results)
                c.counts["hits"] += hits
                c.counts["misses"] += len(items) - hits
                c.counts["hits_from_write_buffer"] += len(mem)
                c.counts["bytes_read"] += sum(it.loc.length for it in plan if results[it.idx])

    def _finish(self, runs: Sequence[Run], iob: IoBatch) -> None:
        """Every read job of a batch has finished (maybe after the caller gave up): unpin the
        regions, drop entries that failed verification from the index."""
        c = self.core
        err = next((r for r in iob.results if isinstance(r, OSError)), None)
        with c.lock:
            bad = 0
            for run, out in zip(runs, iob.results, strict=True):
                for j, it in enumerate(run.items):
                    it.region.readers -= 1
                    self.alloc.maybe_free(it.region)
                    if isinstance(out, list) and not out[j]:
                        bad += 1
                        if c.index.get(it.key) == it.loc:  # still this entry (seq and gen are in it)
                            c.index.pop(it.key)
            c.counts["reads"] += sum(len(run.items) for run in runs)
            c.counts["read_checksum_errors"] += bad
            if err is not None:
                c.counts["read_io_errors"] += 1
        if err is not None:
            c.io_failed("read", err)

    def _run_job(self, run: Run, guard: _Delivery) -> Callable[[], list[bool]]:
        return lambda: self.read_run(run, guard)

    def read_run(self, run: Run, guard: _Delivery) -> list[bool]:
        """One vectored read for a run of adjacent entries, then per-entry verification; returns
        whether each entry verified, and delivers the good ones through ``guard``."""
        fd = run.region.fd
        n = len(run.items)
        if fd is None:
            return [False] * n
        scratch = self.core.buffers.take(BLOCK * (n + 1) + run.bounce_bytes)
        try:
            sv = memoryview(scratch)
            pad = sv[BLOCK * n : BLOCK * (n + 1)]
            bounce_at = BLOCK * (n + 1)
            iov: list[memoryview] = []
            where: list[tuple[memoryview, list[memoryview]]] = []  # (header view, payload views)
            for j, it in enumerate(run.items):
                if it.bounce:
                    ent = sv[bounce_at : bounce_at + it.size]
                    bounce_at += it.size
                    iov.append(ent)
                    where.append((ent[:BLOCK], [ent[BLOCK : BLOCK + it.loc.length]]))
                else:
                    hdr = sv[BLOCK * j : BLOCK * (j + 1)]
                    iov.append(hdr)
                    iov.extend(it.views)
                    tail = it.size - BLOCK - it.loc.length
                    if tail:
                        iov.append(pad[:tail])
                    where.append((hdr, it.views))
            got = preadv_full(fd, iov, run.offset)
            out: list[bool] = []
            pos = 0
            for it, (hdr, payload) in zip(run.items, where, strict=True):
                pos += it.size
                ok = got >= pos - (it.size - BLOCK - it.loc.length) and self._verify(it, hdr, payload)
                out.append(ok)
                if ok:
                    guard.deliver(it, payload if it.bounce else None)
            return out
        finally:
            self.core.buffers.give(scratch)

    def _verify(self, it: ReadItem, hdr: memoryview, payload: Sequence[memoryview]) -> bool:
        h, why = parse_entry_header(hdr, self.core.options.max_key_bytes)
        if (
            h is None
            or h.flags & FLAG_DEAD
            or h.key != it.key.encode("utf-8", "surrogateescape")
            or h.gen != it.loc.gen
            or h.seq != it.loc.seq
            or h.payload_len != it.loc.length
        ):
            log.warning(
                "ssd: bad entry header for %r at %s+%d: %s", it.key, it.region.path, it.loc.offset, why
            )
            return False
        hasher = xxhash.xxh3_64()
        for v in payload:
            hasher.update(v)
        if hasher.intdigest() != h.payload_hash:
            log.warning(
                "ssd: payload checksum mismatch for %r at %s+%d", it.key, it.region.path, it.loc.offset
            )
            return False
        return True
