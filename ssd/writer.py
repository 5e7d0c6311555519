"""The write path (:class:`WritePath`): ``put_batch`` from the caller's memory to a region file.

1. under the lock: skip keys already stored (values are immutable) and register the new ones as
   *pending* (a concurrent put of the same key waits for this one's result);
2. no lock: lay the batch out in :class:`WriteBuffer` slots (where each entry goes, no copy);
3. under the lock (:meth:`RegionAllocator.reserve`): reserve contiguous space in the directory's
   active region and pin it, one sub-batch of at most a region's bytes at a time; from here a
   get of a pending key is served from the caller's memory (:meth:`WritePath.pending_slot`);
4. one native call for the whole put (``native.write_entries``, the GIL released once): runs of
   whole entries (about ``write_chunk_bytes`` each) go to the native I/O workers, which copy
   each payload into their staging (or, borrowed, write it in place: ``stage_writes``), hash it,
   lay out its header and write the run; no payload is taken after the put returned;
5. under the lock: index the entries, unpin. Only now does the put report True: the bytes are in
   the region file (page cache or device), so a SIGKILL after it loses nothing.

At the deadline the put returns False for everything it had not finished. Runs still being
written then (their payloads were taken) keep their regions pinned until they end: a thread of
the engine waits for them (``WritesInFlight``), then unpins without indexing (``late_writes``),
so a region is never reused under a late write. Results are per item; nothing here raises for
I/O or space problems (reasons are counted).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from hicache_mooncake.native import WritesInFlight, view_spans, write_entries

from .allocator import RegionAllocator, Reservation
from .buffer import Slot, WriteBuffer
from .core import EngineCore
from .format import BLOCK, entry_size
from .index import Location
from .io import byte_view, is_aligned
from .spans import locate_sources

Parts = Sequence[Any]  # memoryview-compatible buffers

log = logging.getLogger("hicache_mooncake.ssd")


class Pending:
    """A key whose write is in flight. ``buf``/``slot`` are set once its space is reserved.
    ``done`` is the put's event, shared by every key it writes: it is set once, when the put is
    over for all of them (``ok`` is final for each by then)."""

    __slots__ = ("buf", "slot", "done", "ok", "removed")

    def __init__(self, done: threading.Event) -> None:
        self.buf: WriteBuffer | None = None
        self.slot: Slot | None = None
        self.done = done
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


class _BatchWrite:
    """One sub-batch (at most a region's bytes): its layout, reservations and outcome."""

    def __init__(
        self, batch: list[_New], results: list[bool], reinsert_rid: int | None, buf: WriteBuffer
    ) -> None:
        self.batch = batch
        self.results = results
        self.reinsert_rid = reinsert_rid
        self.buf = buf
        self.groups: list[_Group] = []
        self.failed_reason = ""
        self.abandoned = False  # the put returned before the writes ended (lock held)
        self.runs = 0  # native write runs


class _Runs:
    """The arguments of one ``write_entries`` call: runs of whole entries of every group."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.offsets: list[int] = []
        self.items: list[int] = [0]
        self.groups: list[_Group] = []  # the group of each run
        self.plens: list[int] = []
        self.gens: list[int] = []
        self.seqs: list[int] = []
        self.keys: list[bytes] = []
        self.parts: list[int] = [0]
        self.views: list[memoryview] = []

    def add_group(self, g: _Group, chunk: int) -> int:
        """Runs of ``g``'s entries, about ``chunk`` bytes each (a larger entry is a run of its
        own); returns how many."""
        fd = g.res.region.fd
        assert fd is not None
        runs = 0
        run_bytes = -1  # no run open
        for it, seq in zip(g.items, g.res.seqs, strict=True):
            slot = it.slot
            assert slot is not None
            if run_bytes < 0 or (run_bytes and run_bytes + slot.size > chunk):
                if run_bytes >= 0:
                    self.items.append(len(self.plens))  # the open run ends before this entry
                self.fds.append(fd)
                self.offsets.append(g.res.file_off + (slot.offset - g.start))
                self.groups.append(g)
                runs += 1
                run_bytes = 0
            run_bytes += slot.size
            self.plens.append(slot.payload_len)
            self.gens.append(g.res.gen)
            self.seqs.append(seq)
            self.keys.append(it.kb)
            self.views.extend(slot.payload)
            self.parts.append(len(self.views))
        if run_bytes >= 0:
            self.items.append(len(self.plens))
        return runs


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
        ``deadline`` (``time.monotonic()``): what is not written by then is False (a write under
        way may finish later; it is then never indexed, see :meth:`_finish`). ``epoch``: the
        epoch the caller's operation started in; if a clear bumped it, nothing is indexed."""
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
        done: threading.Event | None = None  # this put's (``Pending``), made for its first new key
        fps = c.index.fps([key for _, key, _, _, _ in prepared]) if prepared else None
        with c.lock:
            stored: list[bool] = []
            if fps is not None:  # one native lookup: stored already (a reinsertion: elsewhere)
                found, regions = c.index.regions_of(fps)
                if reinsert_rid is not None:
                    found &= regions != np.uint64(reinsert_rid)
                stored = found.tolist()
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
                if stored[j]:
                    results[i] = True
                    c.counts["put_existing"] += 1
                    continue
                p = self.pending.get(key)
                if p is not None:
                    waits.append((i, p))
                    continue
                if done is None:
                    done = threading.Event()
                p = Pending(done)
                self.pending[key] = p
                mine.append(_New(i, key, fp_list[j], kb, views, size, p))
        if not floor_ok:
            self.alloc.release_for_floor(di, deadline)
        if mine:
            self._write_all(di, mine, results, reinsert_rid, deadline, open_regions, epoch)
        for i, p in waits:
            if p.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                results[i] = p.ok
        return bool(mine)

    def _write_all(
        self,
        di: int,
        mine: list[_New],
        results: list[bool],
        reinsert_rid: int | None,
        deadline: float | None,
        open_regions: bool,
        epoch: int | None,
    ) -> None:
        """Reserve ``mine`` in sub-batches of at most one region's bytes, write them all in one
        native call, index what was written in time."""
        o = self.core.options
        subs: list[list[_New]] = []
        batch: list[_New] = []
        nbytes = 0
        for it in mine:
            es = entry_size(it.size)
            if batch and nbytes + es > o.region_size:
                subs.append(batch)
                batch, nbytes = [], 0
            batch.append(it)
            nbytes += es
        if batch:
            subs.append(batch)
        borrow = self._borrow(mine)
        put_done = mine[0].pending.done  # every key of the put shares it
        started: list[_BatchWrite] = []
        try:
            try:
                for sub in subs:
                    state = self._start_batch(di, sub, results, reinsert_rid, deadline, borrow, open_regions)
                    if epoch is not None:  # written for that epoch: not indexed once a clear bumped it
                        for g in state.groups:
                            if g.res.epoch != epoch:
                                # a clear ran since the caller took the bytes: its region is of the
                                # new epoch, where a scan after a crash would find them; never written
                                g.error = OSError(errno.ESTALE, "a clear ran since the put began")
                            g.res.epoch = epoch
                    started.append(state)
                done, writes = self.write_runs(started, deadline)
            except BaseException:
                for state in started:  # reserved, nothing written: unpin, fail
                    self._finish(state, cancelled=True)
                with self.core.lock:  # the sub-batches not reserved yet: no longer pending
                    for it in mine:
                        if self.pending.get(it.key) is it.pending:
                            del self.pending[it.key]
                put_done.set()
                raise
            if writes is None and done:
                for state in started:
                    self._finish(state)
                return
            with self.core.lock:  # the put gives up: its results stay False, nothing is indexed
                for state in started:
                    state.abandoned = True
                    for it in state.batch:
                        if self.pending.get(it.key) is it.pending:
                            del self.pending[it.key]
                        it.pending.ok = False
            self.core.timed_out("write", deadline or 0.0)
            if writes is None:  # nothing under way: what ended in time is written, not indexed
                for state in started:
                    self._finish(state)
            else:  # unpinned once the writes under way have ended
                threading.Thread(
                    target=self._finish_late,
                    args=(writes, started),
                    name="hicache-ssd-late-writes",
                    daemon=True,
                ).start()
        finally:
            put_done.set()
            for state in started:
                state.buf.drop(wait_readers=True)

    def _borrow(self, batch: list[_New]) -> bool:
        """Write the caller's memory in place (zero copy) rather than staging it. O_DIRECT
        needs every view 4096-aligned in address and length; ``auto`` also needs it on huge
        pages. The views' addresses come from one native call (``view_spans``); a batch it
        cannot take (a read-only or empty view) is checked view by view."""
        c = self.core
        mode = c.options.stage_writes
        if mode == "always" or not c.options.zero_copy_writes:
            return False
        if not c.direct:
            return True
        views = [v for it in batch for v in it.views]
        spans = view_spans(views)
        if spans is None:
            if not all(is_aligned(v, BLOCK) for v in views):
                return False
            return mode == "never" or all(c.huge_memory.covers(v) for v in views)
        if ((spans[:, 0] | spans[:, 1]) % np.uint64(BLOCK)).any():
            return False
        return mode == "never" or c.huge_memory.covers_spans(spans)

    def _start_batch(
        self,
        di: int,
        batch: list[_New],
        results: list[bool],
        reinsert_rid: int | None,
        deadline: float | None,
        borrow: bool,
        open_regions: bool = False,
    ) -> _BatchWrite:
        """Lay out and reserve one sub-batch (written by :meth:`write_runs`)."""
        c = self.core
        buf = WriteBuffer(borrow)
        state = _BatchWrite(batch, results, reinsert_rid, buf)
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
        except BaseException:
            # reserve or layout raised: nothing is written
            with c.lock:
                for g in state.groups:
                    self.alloc.finish_write(g.res, failed=True)
                for it in batch:
                    if self.pending.get(it.key) is it.pending:
                        del self.pending[it.key]
            buf.drop()
            raise  # (the caller, ``_write_all``, sets the put's ``done``)
        return state

    def write_runs(
        self, states: list[_BatchWrite], deadline: float | None
    ) -> tuple[bool, WritesInFlight | None]:
        """One ``native.write_entries`` call for every reserved group of ``states``: sets each
        group's ``error``; returns whether every run ended by the deadline, and the writes still
        under way when it passed (None when none)."""
        c = self.core
        runs = _Runs()
        for state in states:
            for g in state.groups:
                if g.error is None:  # (a group refused before its write is not written)
                    state.runs += runs.add_group(g, c.options.write_chunk_bytes)
        if not runs.fds:
            return True, None
        srcs, part_srcs, src_offsets = locate_sources(runs.views)
        timeout = 1e9 if deadline is None else min(1e9, deadline - time.monotonic())
        out, writes = write_entries(
            fds=runs.fds,
            run_offsets=runs.offsets,
            run_items=runs.items,
            payload_lengths=runs.plens,
            gens=runs.gens,
            seqs=runs.seqs,
            keys=runs.keys,
            part_items=runs.parts,
            srcs=srcs,
            part_srcs=part_srcs,
            src_offsets=src_offsets,
            part_lengths=np.fromiter((v.nbytes for v in runs.views), np.uint64, len(runs.views)),
            borrow=states[0].buf.borrow,
            timeout_s=timeout,
        )
        done = True
        for g, r in zip(runs.groups, out.tolist(), strict=True):
            if r == -errno.ETIMEDOUT:
                done = False
            elif r < 0 and g.error is None:
                g.error = OSError(-r, f"ssd write: {errno.errorcode.get(-r, str(-r))}")
        return done, writes

    def _finish_late(self, writes: WritesInFlight, states: list[_BatchWrite]) -> None:
        """Waits for the writes a put left under way at its deadline, then unpins their regions."""
        try:
            writes.wait(None)
            for state in states:
                self._finish(state, late=True)
        except Exception:  # noqa: BLE001 - a thread of its own: logged, never raised into nothing
            log.exception("ssd write: finishing the writes of a put after its deadline failed")

    def _finish(self, state: _BatchWrite, cancelled: bool = False, late: bool = False) -> None:
        """The writes of a sub-batch have ended (or, ``cancelled``, never started): unpin the
        regions, index what was written, unless the put gave up (``abandoned``: its results are
        already False; entries written in time or ``late`` are never indexed)."""
        c = self.core
        dying: OSError | None = None
        with c.lock:
            placed: set[int] = set()
            for g in state.groups:
                if cancelled and g.error is None:
                    g.error = OSError(errno.ECANCELED, "put failed before its write")
                if g.error is not None:
                    full = g.error.errno in (errno.ENOSPC, errno.EDQUOT)
                    stale = g.error.errno == errno.ESTALE  # refused before its write (``_write_all``)
                    if not full and not stale and g.error.errno != errno.ECANCELED:
                        dying = g.error
                    if not state.abandoned:
                        why = "no_space" if full else "stale_epoch" if stale else "io_error"
                        c.counts[f"rejected_{why}"] += len(g.items)
                placed.update(it.idx for it in g.items)
                if not state.abandoned:
                    oks = self._commit_group(g, state.reinsert_rid) if g.error is None else None
                    pending, results = self.pending, state.results
                    for j, it in enumerate(g.items):
                        ok = oks is not None and oks[j]
                        results[it.idx] = ok
                        it.pending.ok = ok
                        if pending.get(it.key) is it.pending:
                            del pending[it.key]
                # unpin after indexing: a region sealed meanwhile is summarised with these entries
                self.alloc.finish_write(g.res, failed=g.error is not None)
            if late:
                c.counts["late_writes"] += len(placed)
            if not state.abandoned:
                for it in state.batch:
                    if it.idx not in placed:
                        c.counts[f"rejected_{state.failed_reason or 'no_space'}"] += 1
                        if self.pending.get(it.key) is it.pending:
                            del self.pending[it.key]
                        it.pending.ok = False
            c.counts["writes"] += state.runs
            c.counts["batches_zero_copy" if state.buf.borrow else "batches_staged"] += 1
        if dying is not None:
            c.io_failed("write", dying)

    def _commit_group(self, g: _Group, reinsert_rid: int | None) -> list[bool]:
        """Index the written group ``g`` (lock held); returns which of its entries are stored.
        Never raises: a bug in indexing must not leave the region pinned (``close`` waits for
        it). Should the one call for the group fail, each entry is indexed on its own, so only
        an entry that cannot be indexed is a failed put (a miss later)."""
        c = self.core
        try:
            self._commit(g, reinsert_rid)
        except Exception:  # noqa: BLE001 - indexed entry by entry below
            log.debug("ssd write: indexing a group of %d entries at once failed", len(g.items), exc_info=True)
        else:
            c.counts["bytes_written"] += sum(it.size for it in g.items)
            return [True] * len(g.items)
        oks = []
        for it, seq in zip(g.items, g.res.seqs, strict=True):
            try:
                self._commit_one(it, seq, g, reinsert_rid)
            except Exception:  # noqa: BLE001 - the entry is not indexed: a miss
                log.exception("ssd write: indexing %r failed", it.key)
                c.counts["index_failures"] += 1
                oks.append(False)
            else:
                c.counts["bytes_written"] += it.size
                oks.append(True)
        return oks

    def _commit_one(self, it: _New, seq: int, g: _Group, reinsert_rid: int | None) -> None:
        """:meth:`_commit` of one entry (the path of a group whose one call failed)."""
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

    def _commit(self, g: _Group, reinsert_rid: int | None) -> None:
        """Index the written entries of ``g`` (lock held) in one index call, except those a
        clear, remove or reclaim raced: a clear (epoch) or a reopen of the region (generation)
        since the reservation drops the whole group; a remove drops its key; a reinsertion
        indexes only the keys still indexed in ``reinsert_rid``."""
        c = self.core
        r, res = g.res.region, g.res
        if res.epoch != c.epoch or r.gen != res.gen:
            return
        items = [(it, seq) for it, seq in zip(g.items, res.seqs, strict=True) if not it.pending.removed]
        if not items:
            return
        fps = np.fromiter((it.fp for it, _ in items), np.uint64, len(items))
        if reinsert_rid is not None:
            still = c.index.in_region(fps, reinsert_rid)
            if not still.all():
                items = [x for x, keep in zip(items, still.tolist(), strict=True) if keep]
                fps = fps[still]
            c.counts["reinserted_entries"] += len(items)
            if not items:
                return
        base = res.file_off - g.start
        offsets = np.fromiter((base + it.slot.offset for it, _ in items), np.uint64, len(items))  # type: ignore[union-attr]
        lengths = np.fromiter((it.size for it, _ in items), np.uint64, len(items))
        seqs = np.fromiter((seq for _, seq in items), np.uint64, len(items))
        c.index.set_entries(fps, r.rid, res.gen, offsets, lengths, seqs)
        r.add_many(fps, [it.key for it, _ in items], int(lengths.sum()))

    # ------------------------------------------------------------------ pending entries (lock held)

    def pending_slot(self, key: str) -> tuple[WriteBuffer, Slot] | None:
        """Where ``key``'s bytes are while its write is in flight: the caller's memory, read under
        the buffer's reader gate (lock held)."""
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
