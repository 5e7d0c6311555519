"""The read path (:class:`ReadPath`): ``get_batch_into`` from region files (or from the write
buffer of a pending put) into the caller's memory.

Look up and pin the regions under the lock; then one native call (``native.read_entries``) for
the whole get, the GIL released once: adjacent entries of a region are read as one run
(:mod:`.readplan`) by the native I/O workers, each into its own staging memory; the worker that
read a run checks each of its entries (key, generation, sequence, length, xxh3 of the payload)
and copies the payload of each sound one into the caller's views, only while the call is still
waiting: a read that completes after the call gave up at its deadline never touches the caller's
memory. A failed check is a miss (counted, entry dropped from the index); an entry that holds
another key is a counted fingerprint collision (a miss, the entry stays indexed). On a miss the
caller's memory for that item is untouched by this read. The pins are released when the call
returns: a read still in flight then works on the native call's own dup of the file and its bytes
are discarded.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from hicache_mooncake.native import EntryVerdict, copy_pages, read_entries

from .allocator import RegionAllocator
from .buffer import Slot, WriteBuffer
from .core import EngineCore
from .index import Columns, Location
from .io import byte_view, copy_into
from .readplan import ReadPlan, plan_runs
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

        Every read lands in a native I/O worker's staging and is copied into the caller's views
        only while the call is still waiting for it: a read that completes after the call gave up
        at its ``deadline`` is discarded, never written into memory the caller has reused.
        Without a deadline the call waits for every read.

        The batch is looked up, checked and planned as columns (one index call, one sort); Python
        touches each item only to take its views and, while puts are in flight, to look for it
        among them."""
        if not items:
            return
        c = self.core
        keys = [key for key, _ in items]
        views_list = [[byte_view(p) for p in parts] for _, parts in items]
        sizes = np.fromiter((sum(v.nbytes for v in views) for views in views_list), np.uint64, len(items))
        mem: list[tuple[int, WriteBuffer, Slot]] = []
        fps = c.index.fps(keys)
        plan: ReadPlan | None = None
        with c.lock:
            found, fields = c.index.columns(fps)
            mismatches = 0
            if self.writer.pending:  # a key whose put is in flight is served from its memory
                for i, key in enumerate(keys):
                    staged = self.writer.pending_slot(key)
                    if staged is None:
                        continue
                    found[i] = False
                    wb, slot = staged
                    if slot.payload_len != int(sizes[i]):
                        mismatches += 1
                        continue
                    wb.acquire()
                    mem.append((i, wb, slot))
            same = fields.length == sizes
            mismatches += int(np.count_nonzero(found & ~same))
            if mismatches:
                c.counts["get_size_mismatch"] += mismatches
            read = np.flatnonzero(found & same)
            if len(read):
                plan = plan_runs(read, Columns(*(col[read] for col in fields)), c.options.read_run_bytes)
                self._pin(plan, 1)
                if not internal:
                    c.index.hit_many(fps[read])
        for i, wb, slot in mem:
            try:
                copy_views(views_list[i], wb.payload_views(slot))
                results[i] = True
            finally:
                wb.release()
        bytes_read = self._read(plan, keys, views_list, results, deadline) if plan is not None else 0
        if not internal:
            with c.lock:
                c.counts["gets"] += len(items)
                hits = sum(results)
                c.counts["hits"] += hits
                c.counts["misses"] += len(items) - hits
                c.counts["hits_from_write_buffer"] += len(mem)
                c.counts["bytes_read"] += bytes_read

    def _read(
        self,
        plan: ReadPlan,
        keys: list[str],
        views_list: list[list[memoryview]],
        results: list[bool],
        deadline: float | None,
    ) -> int:
        """Read, check and deliver ``plan`` in one native call (until ``deadline``; without one
        the call waits for every read), then unpin its regions and account for what was found;
        returns the payload bytes delivered."""
        c = self.core
        regions = c.regions
        live = [j for j in range(plan.runs) if regions[plan.run_region[j]].fd is not None]
        if len(live) == plan.runs:
            sel = np.arange(len(plan))
        else:  # a run of a region closed meanwhile: nothing read, its entries dropped below
            mask = np.zeros(len(plan), bool)
            for j in live:
                mask[plan.run_first[j] : plan.run_first[j + 1]] = True
            sel = np.flatnonzero(mask)
        verdicts = np.zeros(0, np.int64)
        try:
            if live:
                verdicts = self._read_runs(plan, live, sel, keys, views_list, deadline)
        finally:
            with c.lock:
                self._pin(plan, -1)
                c.counts["reads"] += len(sel)
        io_error: OSError | None = None
        timed_out = False
        at = 0
        for j in live:  # an I/O error or a timeout is the whole run's
            r = int(verdicts[at])
            at += plan.run_first[j + 1] - plan.run_first[j]
            if r == -errno.ETIMEDOUT:
                timed_out = True
            elif r < 0:
                io_error = OSError(-r, os.strerror(-r))
                with c.lock:
                    c.counts["read_io_errors"] += 1
        ok = verdicts == EntryVerdict.OK
        for i in plan.idx[sel[ok]].tolist():
            results[i] = True
        collisions = int(np.count_nonzero(verdicts == EntryVerdict.OTHER_KEY))
        failed = (verdicts > 0) & (verdicts != EntryVerdict.OTHER_KEY)
        bad = sel[failed].tolist()
        for q, r in zip(bad, verdicts[failed].tolist(), strict=True):
            log.warning(
                "ssd: entry of %r at %s+%d failed its check: %s",
                keys[int(plan.idx[q])], regions[int(plan.fields.region[q])].path, int(plan.fields.offset[q]),
                EntryVerdict(r).name.lower(),
            )  # fmt: skip
        if len(sel) < len(plan):
            mask = np.ones(len(plan), bool)
            mask[sel] = False
            bad.extend(np.flatnonzero(mask).tolist())
        if timed_out:
            c.timed_out("read", deadline or 0.0)
        if io_error is not None:
            c.io_failed("read", io_error)
        if bad or collisions:
            f = plan.fields
            with c.lock:
                for q in bad:
                    key = keys[int(plan.idx[q])]
                    loc = Location(
                        int(f.region[q]), int(f.gen[q]), int(f.offset[q]), int(f.length[q]), int(f.seq[q])
                    )
                    if c.index.get(key) == loc:  # still this entry (seq and gen are in it)
                        c.index.pop(key)
                c.counts["read_checksum_errors"] += len(bad)
                c.counts["fingerprint_collisions"] += collisions
        return int(plan.fields.length[sel[ok]].sum())

    def _read_runs(
        self,
        plan: ReadPlan,
        live: list[int],
        sel: np.ndarray,
        keys: list[str],
        views_list: list[list[memoryview]],
        deadline: float | None,
    ) -> np.ndarray:
        """``native.read_entries`` of the runs ``live`` of ``plan`` (``sel``: their entries, in
        plan order); returns one verdict (or -errno) per entry of ``sel``. Payloads go straight
        into the callers' views when they lie in one buffer (SGLang's host pool, a DRAM arena:
        the rule); otherwise into one engine buffer, copied into each view here (while the caller
        still waits)."""
        c = self.core
        idx = plan.idx[sel].tolist()
        order_views = [views_list[i] for i in idx]
        views = [v for vs in order_views for v in vs]
        placed = common_base(views, writable=True)
        scratch: Any = None
        lengths = np.fromiter((v.nbytes for v in views), np.uint64, len(views))
        if placed is not None:
            dst, dst_offsets = placed
        else:
            scratch = c.buffers.take(max(1, int(lengths.sum())))
            dst = scratch
            dst_offsets = np.zeros(len(views), np.uint64)
            np.cumsum(lengths[:-1], out=dst_offsets[1:])
        f = plan.fields
        try:
            timeout = 1e9 if deadline is None else max(0.0, deadline - time.monotonic())
            got = read_entries(
                fds=[c.regions[plan.run_region[j]].fd for j in live],
                run_offsets=[plan.run_offset[j] for j in live],
                run_items=np.cumsum(
                    [0] + [plan.run_first[j + 1] - plan.run_first[j] for j in live], dtype=np.uint64
                ),
                payload_lengths=f.length[sel],
                gens=f.gen[sel],
                seqs=f.seq[sel],
                keys=[keys[i].encode("utf-8", "surrogateescape") for i in idx],
                part_items=np.cumsum([0] + [len(vs) for vs in order_views], dtype=np.uint64),
                dst=dst,
                dst_offsets=dst_offsets,
                part_lengths=lengths,
                max_key=c.options.max_key_bytes,
                timeout_s=timeout,
            )
            if scratch is not None:
                q = 0
                for vs, r in zip(order_views, got.tolist(), strict=True):
                    for v in vs:
                        if r == EntryVerdict.OK and v.nbytes:
                            copy_pages(v, [0], scratch, [int(dst_offsets[q])], [v.nbytes])
                        q += 1
            return got
        finally:
            if scratch is not None:
                c.buffers.give(scratch)

    def _pin(self, plan: ReadPlan, step: int) -> None:
        """Count ``step`` (1: pin, -1: unpin) readers on each region of ``plan`` per entry it
        reads there (lock held); an unpinned region that is draining is freed."""
        rids, counts = np.unique(plan.fields.region, return_counts=True)
        for rid, k in zip(rids.tolist(), counts.tolist(), strict=True):
            r = self.core.regions[rid]
            r.readers += step * k
            if step < 0:
                self.alloc.maybe_free(r)
