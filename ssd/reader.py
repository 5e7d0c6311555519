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
from .io import byte_view, copy_into
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
        Without a deadline the call waits for every read."""
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
            self._read(plan, results, deadline)
        if not internal:
            with c.lock:
                c.counts["gets"] += len(items)
                hits = sum(results)
                c.counts["hits"] += hits
                c.counts["misses"] += len(items) - hits
                c.counts["hits_from_write_buffer"] += len(mem)
                c.counts["bytes_read"] += sum(it.loc.length for it in plan if results[it.idx])

    def _read(self, plan: list[ReadItem], results: list[bool], deadline: float | None) -> None:
        """Read, check and deliver ``plan`` in one native call (until ``deadline``; without one
        the call waits for every read), then unpin every run and account for what was found."""
        c = self.core
        runs = plan_runs(plan, c.options.read_run_bytes)
        live = [run for run in runs if run.region.fd is not None]
        bad = [it for run in runs if run.region.fd is None for it in run.items]  # closed: nothing read
        verdicts: list[int] = []
        order = [it for run in live for it in run.items]
        try:
            if live:
                verdicts = self._read_runs(live, order, deadline)
        finally:
            with c.lock:
                for run in runs:
                    self._unpin(run)
                c.counts["reads"] += len(order)
        io_error: OSError | None = None
        timed_out = False
        at = 0
        for run in live:  # an I/O error or a timeout is the whole run's
            r = verdicts[at]
            at += len(run.items)
            if r == -errno.ETIMEDOUT:
                timed_out = True
            elif r < 0:
                io_error = OSError(-r, os.strerror(-r))
                with c.lock:
                    c.counts["read_io_errors"] += 1
        collisions = 0
        for it, r in zip(order, verdicts, strict=True):
            if r == EntryVerdict.OK:
                results[it.idx] = True
            elif r == EntryVerdict.OTHER_KEY:  # sound, another key's: a miss, the entry stays
                log.debug("ssd: %r shares its fingerprint with another key (a miss)", it.key)
                collisions += 1
            elif r > 0:
                log.warning(
                    "ssd: entry of %r at %s+%d failed its check: %s",
                    it.key, it.region.path, it.loc.offset, EntryVerdict(r).name.lower(),
                )  # fmt: skip
                bad.append(it)
        if timed_out:
            c.timed_out("read", deadline or 0.0)
        if io_error is not None:
            c.io_failed("read", io_error)
        if bad or collisions:
            with c.lock:
                for it in bad:
                    if c.index.get(it.key) == it.loc:  # still this entry (seq and gen are in it)
                        c.index.pop(it.key)
                c.counts["read_checksum_errors"] += len(bad)
                c.counts["fingerprint_collisions"] += collisions

    def _read_runs(self, runs: list[Run], order: list[ReadItem], deadline: float | None) -> list[int]:
        """``native.read_entries`` of ``runs`` (``order``: their entries, run by run); returns one
        verdict (or -errno) per entry of ``order``. Payloads go straight into the callers' views
        when they lie in one buffer (SGLang's host pool, a DRAM arena: the rule); otherwise into
        one engine buffer, copied into each view here (while the caller still waits)."""
        c = self.core
        views = [v for it in order for v in it.views]
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
        try:
            timeout = 1e9 if deadline is None else max(0.0, deadline - time.monotonic())
            got = read_entries(
                fds=[run.region.fd for run in runs],
                run_offsets=[run.offset for run in runs],
                run_items=np.cumsum([0] + [len(run.items) for run in runs], dtype=np.uint64),
                payload_lengths=[it.loc.length for it in order],
                gens=[it.loc.gen for it in order],
                seqs=[it.loc.seq for it in order],
                keys=[it.key.encode("utf-8", "surrogateescape") for it in order],
                part_items=np.cumsum([0] + [len(it.views) for it in order], dtype=np.uint64),
                dst=dst,
                dst_offsets=dst_offsets,
                part_lengths=lengths,
                max_key=c.options.max_key_bytes,
                timeout_s=timeout,
            ).tolist()
            if scratch is not None:
                q = 0
                for it, r in zip(order, got, strict=True):
                    for v in it.views:
                        if r == EntryVerdict.OK and v.nbytes:
                            copy_pages(v, [0], scratch, [int(dst_offsets[q])], [v.nbytes])
                        q += 1
            return got
        finally:
            if scratch is not None:
                c.buffers.give(scratch)

    def _unpin(self, run: Run) -> None:
        for it in run.items:
            it.region.readers -= 1
            self.alloc.maybe_free(it.region)
