"""The read path (:class:`ReadPath`): ``get_batch_into`` from region files (or from the write
buffer of a pending put) into the caller's memory.

Look up and pin the regions under the lock; read without it, coalescing adjacent entries of a
region into large ``preadv`` calls (:mod:`.readplan`) that fill the caller's memoryviews directly
when alignment allows (a bounce buffer otherwise); verify key, generation, sequence, length and
the xxh3 checksum of every entry; unpin. A failed check is a miss (counted, entry dropped from the
index). On a miss the caller's memory for that item may hold garbage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import xxhash

from .allocator import RegionAllocator
from .buffer import Slot, WriteBuffer
from .core import EngineCore
from .format import BLOCK, FLAG_DEAD, parse_entry_header
from .io import byte_view, preadv_full
from .readplan import ReadItem, Run, plan_runs
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
            v[pos : pos + take] = s[so : so + take]
            pos += take
            so += take
            if so == s.nbytes:
                si, so = si + 1, 0


class ReadPath:
    def __init__(self, core: EngineCore, allocator: RegionAllocator, writer: WritePath) -> None:
        self.core = core
        self.alloc = allocator
        self.writer = writer

    def get_batch(self, items: Sequence[tuple[str, Parts]], results: list[bool], internal: bool) -> None:
        """Fill ``results[i]`` per item. ``internal`` (reinsertion) reads count no hits."""
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
                    loc.hits += 1
                plan.append(ReadItem(i, key, loc, r, views))
        for i, wb, slot in mem:
            try:
                copy_views(views_list[i], wb.payload_views(slot))
                results[i] = True
            finally:
                wb.release()
        bad: list[ReadItem] = []
        read_bytes = 0
        try:
            if plan:
                runs = plan_runs(plan, c.direct, c.options.max_read_run_bytes)
                assert c.pool is not None
                outs = c.pool.run_all([self._run_job(run) for run in runs])
                for run, out in zip(runs, outs, strict=True):
                    for it, ok in zip(run.items, out, strict=True):
                        results[it.idx] = ok
                        if ok:
                            read_bytes += it.loc.length
                        else:
                            bad.append(it)
        finally:
            with c.lock:
                for it in plan:
                    it.region.readers -= 1
                    self.alloc.maybe_free(it.region)
                for it in bad:
                    if c.index.get(it.key) is it.loc:
                        c.index.pop(it.key)
                if not internal:
                    c.counts["gets"] += len(items)
                    hits = sum(results)
                    c.counts["hits"] += hits
                    c.counts["misses"] += len(items) - hits
                    c.counts["hits_from_write_buffer"] += len(mem)
                    c.counts["bytes_read"] += read_bytes
                c.counts["reads"] += len(plan)
                c.counts["read_checksum_errors"] += len(bad)

    def _run_job(self, run: Run) -> Callable[[], list[bool]]:
        return lambda: self.read_run(run)

    def read_run(self, run: Run) -> list[bool]:
        """One vectored read for a run of adjacent entries, then per-entry verification."""
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
                if ok and it.bounce:
                    copy_views(it.views, payload)
                out.append(ok)
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
