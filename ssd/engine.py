"""The SSD engine: a log-structured object store over preallocated region files.

Write path (``put`` / ``put_batch``)
    1. under the lock: skip keys already stored (values are immutable) and register the new
       ones as *pending* (a concurrent put of the same key waits for this one's result);
    2. no lock: stage the batch in a :class:`WriteBuffer` (payload hashes computed): the caller's
       memoryviews are written in place when the I/O mode allows (buffered, or O_DIRECT with every
       part 4096-aligned), otherwise the batch is copied once into aligned memory;
    3. under the lock: reserve contiguous space in the directory's active region (opening a new
       region, or reclaiming the oldest, when it does not fit) and pin it (``writers``);
       from here a get of a pending key is served from the write buffer;
    4. no lock: fill in the headers, ``pwritev`` the buffer (split at entry boundaries into
       chunks that run in parallel on the I/O pool);
    5. under the lock: index the entries, unpin. Only now does ``put`` return True: the bytes
       are in the region file (page cache or device), so a SIGKILL after it loses nothing.

Read path (``get_into`` / ``get_batch_into``)
    look up and pin the regions under the lock; read without it, coalescing adjacent entries of
    a region into large ``preadv`` calls that fill the caller's memoryviews directly when
    alignment allows (a bounce buffer otherwise); verify key, generation, length and the xxh3
    checksum of every entry; unpin. A failed check is a miss (counted, entry dropped).

Failure semantics: data-path calls never raise for I/O or space problems; they return False
(or None) and count the reason in ``stats()``. Only ``__init__`` raises (bad options, directory
in use, ``direct_io="on"`` refused, ``strict`` recovery finding corruption).

Locking: one engine lock guards the index, regions' states and counters; it is never held
during file I/O, callbacks or hashing of payloads. ``on_evict`` is called without the lock.

Durability of ``remove``: it only drops the index entry; after a restart a removed key may come
back with its (correct, immutable) bytes. ``clear`` is durable (epoch bump in the superblocks).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import xxhash

from .buffer import BufferPool, Slot, WriteBuffer
from .errors import SsdDirectIoError, SsdInUseError
from .format import (
    BLOCK,
    FLAG_DEAD,
    LOCK_NAME,
    SEQ_BOOT_SHIFT,
    RegionHeader,
    Superblock,
    entry_size,
    parse_entry_header,
    parse_region_file_name,
)
from .index import Index, Location
from .io import IoPool, byte_view, is_aligned, preadv_full, probe_direct_io, pwritev_full, split_iov
from .options import SsdOptions
from .readplan import ReadItem, Run, plan_runs
from .reclaim import drop_all, pick_victim, split_for_reinsertion
from .recover import recover
from .region import (
    Region,
    RegionState,
    open_region_fd,
    preallocate,
    remove_region_file,
    write_region_header,
)
from .space import FloorGuard

log = logging.getLogger("hicache_mooncake.ssd")

Parts = Sequence[Any]  # memoryview-compatible buffers


class _Pending:
    """A key whose write is in flight. ``buf``/``slot`` are set once its bytes are staged."""

    __slots__ = ("buf", "slot", "done", "ok", "removed")

    def __init__(self) -> None:
        self.buf: WriteBuffer | None = None
        self.slot: Slot | None = None
        self.done = threading.Event()
        self.ok = False
        self.removed = False


class _New:
    __slots__ = ("idx", "key", "kb", "views", "size", "pending", "slot", "seq")

    def __init__(
        self, idx: int, key: str, kb: bytes, views: list[memoryview], size: int, p: _Pending
    ) -> None:
        self.idx = idx
        self.key = key
        self.kb = kb
        self.views = views
        self.size = size
        self.pending = p
        self.slot: Slot | None = None
        self.seq = 0


class _Group:
    """One contiguous write of part of a buffer into one region."""

    __slots__ = ("region", "file_off", "start", "end", "items", "gen", "epoch", "error")

    def __init__(self, region: Region, file_off: int, items: list[_New], epoch: int) -> None:
        self.region = region
        self.file_off = file_off
        self.items = items
        assert items[0].slot is not None and items[-1].slot is not None
        self.start = items[0].slot.offset
        self.end = items[-1].slot.offset + items[-1].slot.size
        self.gen = region.gen
        self.epoch = epoch
        self.error: OSError | None = None


def _copy_views(dst: Sequence[memoryview], src: Sequence[memoryview]) -> None:
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


def _raise_nofile(need: int) -> None:
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class SsdEngine:
    """See the module docstring. Thread safe; one instance per set of directories."""

    def __init__(self, options: SsdOptions, progress: bool = False) -> None:
        self.options = options
        self.on_evict: Callable[[str], None] | None = None
        # Optional: entries for which ``keep(key)`` is True are rewritten on region reclaim like
        # hit entries (a caller that decides residency itself, e.g. a placement policy). Called
        # with the engine lock held: it must not call back into the engine or block.
        self.keep: Callable[[str], bool] | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._clear_mutex = threading.Lock()
        self._closed = False
        self._ops = 0
        self._c: Counter[str] = Counter()
        self._lock_fds: list[int] = []
        self._regions: list[Region] = []
        self._pool: IoPool | None = None
        self._buffers = BufferPool()
        self._index = Index()
        self._pending: dict[str, _Pending] = {}
        self._fifo: list[int] = []
        self.io_mode = "buffered"
        self.io_mode_reason = ""
        try:
            self._open(progress)
        except BaseException:
            self._release_resources()
            raise

    # ------------------------------------------------------------------ open / close

    def _open(self, progress: bool) -> None:
        o = self.options
        nd = len(o.dirs)
        for d in o.dirs:
            os.makedirs(d, exist_ok=True)
            fd = os.open(os.path.join(d, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                raise SsdInUseError(f"{d}: in use by another SSD engine (lock file {LOCK_NAME})") from e
            self._lock_fds.append(fd)
        direct = False
        if o.direct_io == "off":
            self.io_mode_reason = "direct_io=off"
        else:
            probes = [(d, *probe_direct_io(d)) for d in o.dirs]
            direct = all(ok for _, ok, _ in probes)
            self.io_mode_reason = "; ".join(f"{d}: {why}" for d, _, why in probes)
            if o.direct_io == "on" and not direct:
                raise SsdDirectIoError(f"direct_io=on but O_DIRECT is refused: {self.io_mode_reason}")
        self._direct = direct
        self.io_mode = "direct" if direct else "buffered"
        log.info("ssd engine %s: io mode %s (%s)", ",".join(o.dirs), self.io_mode, self.io_mode_reason)

        sbs = [Superblock.read(d) for d in o.dirs]
        self._epoch = max((sb.epoch for sb in sbs if sb is not None), default=0)
        self._boot = max((sb.boot for sb in sbs if sb is not None), default=0) + 1
        for d in o.dirs:
            try:
                Superblock(self._epoch, self._boot, o.region_size).write(d)
            except OSError as e:
                # Disk full: open anyway (puts will fail until space returns). Sequence numbers
                # stay unique through the recovered maximum below.
                log.warning("ssd: cannot write superblock in %s: %s", d, e)
                self._c["superblock_write_errors"] += 1
        self._seq = self._boot << SEQ_BOOT_SHIFT

        n = o.num_regions
        _raise_nofile(n + 256)
        self._regions = [Region(r, r % nd, o.dirs[r % nd]) for r in range(n)]
        for di, d in enumerate(o.dirs):
            for name in os.listdir(d):
                rid = parse_region_file_name(name)
                if rid is not None and (rid >= n or rid % nd != di):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(d, name))
        existing = [(r.rid, r.path) for r in self._regions if os.path.exists(r.path)]
        bar: Any = None
        if progress and existing:
            with contextlib.suppress(ImportError):
                from tqdm import tqdm

                bar = tqdm(total=len(existing), desc="hicache-ssd recover", unit="region")
        t0 = time.monotonic()
        try:
            rec = recover(
                existing,
                o.region_size,
                self._epoch,
                o.verify_on_recover,
                direct,
                o.strict,
                o.max_key_bytes,
                bar,
            )
        finally:
            if bar is not None:
                bar.close()
        self._seq = max(self._seq, rec.max_seq + 1)
        sealed: list[Region] = []
        for scan in rec.scans:
            r = self._regions[scan.rid]
            try:
                r.fd = open_region_fd(r.path, direct, create=False)
            except OSError:
                continue
            r.allocated = scan.file_size >= o.region_size
            if scan.status == "live" and scan.header is not None:
                r.state = RegionState.SEALED
                r.gen = scan.header.gen
                r.epoch = self._epoch
                r.write_off = scan.end_offset
                sealed.append(r)
        for key, (rid, rec_entry) in rec.winners.items():
            r = self._regions[rid]
            self._index.set(key, Location(rid, r.gen, rec_entry.offset, rec_entry.payload_len, rec_entry.seq))
            r.keys.append(key)
            r.live_bytes += rec_entry.payload_len
        sealed.sort(key=lambda r: r.gen)
        self._fifo = [r.rid for r in sealed]
        self._c.update(rec.counts())
        self._recover_seconds = time.monotonic() - t0
        self._active: list[Region | None] = [None] * nd
        self._opening: list[threading.Event | None] = [None] * nd
        self._reclaiming = [False] * nd
        self._floors = [FloorGuard(d, o.min_free_bytes) for d in o.dirs]
        self._rr = 0
        self._pool = IoPool(o.io_threads)
        log.info(
            "ssd engine recovered %d entries from %d regions in %.2fs (corrupt %d, torn %d)",
            len(self._index), len(sealed), self._recover_seconds,
            self._c["recover_corrupt"], self._c["recover_torn"],
        )  # fmt: skip

    def close(self) -> None:
        """Wait (up to 30 s) for calls in flight, then release fds, threads and locks. Never raises."""
        try:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                deadline = time.monotonic() + 30.0
                while self._ops > 0 and time.monotonic() < deadline:
                    self._idle.wait(timeout=0.1)
            self._release_resources()
        except Exception:  # noqa: BLE001 - close never raises
            log.exception("ssd engine close")

    def _release_resources(self) -> None:
        self._closed = True
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown()
            self._pool = None
        for r in self._regions:
            if r.fd is not None:
                with contextlib.suppress(OSError):
                    if r.dirty:
                        os.fdatasync(r.fd)
                with contextlib.suppress(OSError):
                    os.close(r.fd)
                r.fd = None
        for fd in self._lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock_fds = []
        self._buffers.clear()

    def __enter__(self) -> SsdEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _enter(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._ops += 1
            return True

    def _exit(self) -> None:
        with self._lock:
            self._ops -= 1
            if self._ops == 0:
                self._idle.notify_all()

    # ------------------------------------------------------------------ helpers (lock held)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _free_count(self, di: int) -> int:
        """Regions of ``di`` ready to open: free allocated ones, else 1 if a new one fits on disk."""
        now = time.monotonic()
        n = 0
        unallocated = False
        for r in self._regions:
            if r.dir_index == di and r.state is RegionState.FREE and r.alloc_retry_at <= now:
                if r.allocated:
                    n += 1
                else:
                    unallocated = True
        if n == 0 and unallocated and self._floors[di].ok(extra=self.options.region_size):
            return 1
        return n

    def _take_free(self, di: int, allow_unallocated: bool) -> Region | None:
        now = time.monotonic()
        fallback = None
        for r in self._regions:
            if r.dir_index != di or r.state is not RegionState.FREE or r.alloc_retry_at > now:
                continue
            if r.allocated:
                return r
            if fallback is None and allow_unallocated:
                fallback = r
        return fallback

    def _seal(self, r: Region) -> None:
        if r.state is RegionState.ACTIVE:
            r.state = RegionState.SEALED
            self._fifo.append(r.rid)
        if self._active[r.dir_index] is r:
            self._active[r.dir_index] = None

    def _maybe_free(self, r: Region) -> None:
        if r.state is RegionState.DRAINING and not r.pinned:
            r.state = RegionState.FREE
            r.keys = []
            r.live_bytes = 0

    def _drop_oldest(self, di: int) -> tuple[Region | None, list[str]]:
        """Synchronously evict the oldest sealed unpinned region of ``di`` (no reinsertion)."""
        victim = pick_victim(self._fifo, self._regions, di)
        if victim is None:
            return None, []
        self._fifo.remove(victim.rid)
        evicted = drop_all(victim, self._index)
        victim.state = RegionState.FREE
        self._c["reclaimed_regions"] += 1
        self._c["evicted_entries"] += len(evicted)
        return victim, evicted

    def _notify_evicted(self, keys: Sequence[str]) -> None:
        cb = self.on_evict
        if cb is None:
            return
        for k in keys:
            try:
                cb(k)
            except Exception:  # noqa: BLE001 - a callback must not break the engine
                log.exception("on_evict callback failed for %r", k)

    # ------------------------------------------------------------------ put

    def put(self, key: str, parts: Parts) -> bool:
        """Store one object (gather-write of ``parts``); True once its bytes are in the region file."""
        return self.put_batch([(key, parts)])[0]

    def put_batch(self, items: Sequence[tuple[str, Parts]]) -> list[bool]:
        """Store objects; per-item True/False (see module docstring for the guarantees)."""
        results = [False] * len(items)
        if not self._enter():
            return results
        try:
            self._put_batch(items, results, reinsert_rid=None, reinsert_dir=0)
        except Exception:  # noqa: BLE001 - never raise from the data path
            log.exception("ssd put_batch failed")
            with self._lock:
                self._c["rejected_io_error"] += 1
        finally:
            self._exit()
        return results

    def _put_batch(
        self,
        items: Sequence[tuple[str, Parts]],
        results: list[bool],
        reinsert_rid: int | None,
        reinsert_dir: int,
    ) -> None:
        o = self.options
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
        di = self._pick_dir() if reinsert_rid is None else reinsert_dir
        floor_ok = reinsert_rid is not None or self._floors[di].ok()
        mine: list[_New] = []
        waits: list[tuple[int, _Pending]] = []
        with self._lock:
            self._c.update(rejects)
            if reinsert_rid is None:
                self._c["puts"] += len(items)
            if not floor_ok:
                self._c["rejected_floor"] += len(prepared)
                prepared = []
            for i, key, kb, views, size in prepared:
                loc = self._index.get(key)
                if loc is not None and loc.region != reinsert_rid:
                    results[i] = True
                    self._c["put_existing"] += 1
                    continue
                p = self._pending.get(key)
                if p is not None:
                    waits.append((i, p))
                    continue
                p = _Pending()
                self._pending[key] = p
                mine.append(_New(i, key, kb, views, size, p))
        if not floor_ok:
            self._release_for_floor(di)
        # Sub-batches of at most one region's worth of bytes each.
        batch: list[_New] = []
        nbytes = 0
        for it in mine:
            es = entry_size(it.size)
            if batch and nbytes + es > o.region_size:
                self._write_batch(di, batch, nbytes, results, reinsert_rid)
                batch, nbytes = [], 0
            batch.append(it)
            nbytes += es
        if batch:
            self._write_batch(di, batch, nbytes, results, reinsert_rid)
        for i, p in waits:
            p.done.wait()
            results[i] = p.ok
        if reinsert_rid is None and mine:
            self._maybe_reclaim(di)

    def _pick_dir(self) -> int:
        nd = len(self.options.dirs)
        if nd == 1:
            return 0
        with self._lock:
            self._rr = (self._rr + 1) % nd
            return self._rr

    def _write_batch(
        self, di: int, batch: list[_New], nbytes: int, results: list[bool], reinsert_rid: int | None
    ) -> None:
        borrow = self.options.zero_copy_writes and (
            not self._direct or all(is_aligned(v, BLOCK) for it in batch for v in it.views)
        )
        buf = WriteBuffer(self._buffers, nbytes, entries=len(batch), borrow=borrow)
        try:
            for it in batch:
                it.slot = buf.append(it.kb, it.views)
            groups, failed_reason = self._reserve(di, batch, buf, allow_open=reinsert_rid is None)
            for g in groups:
                for it in g.items:
                    assert it.slot is not None
                    buf.write_header(it.slot, it.seq, g.gen)
            jobs: list[Callable[[], None]] = []
            for g in groups:
                jobs.extend(self._write_jobs(g, buf))
            assert self._pool is not None
            self._pool.run_all(jobs)
            with self._lock:
                placed: set[int] = set()
                for g in groups:
                    r = g.region
                    r.writers -= 1
                    r.dirty = True
                    if g.error is not None:
                        reason = "no_space" if g.error.errno in (errno.ENOSPC, errno.EDQUOT) else "io_error"
                        self._c[f"rejected_{reason}"] += len(g.items)
                        if r.state is RegionState.ACTIVE:
                            self._seal(r)  # do not keep appending after a failed write
                    for it in g.items:
                        placed.add(it.idx)
                        ok = g.error is None
                        if ok:
                            self._commit(it, g, reinsert_rid)
                            self._c["bytes_written"] += it.size
                        results[it.idx] = ok
                        it.pending.ok = ok
                        if self._pending.get(it.key) is it.pending:
                            del self._pending[it.key]
                    self._maybe_free(r)
                for it in batch:
                    if it.idx not in placed:
                        self._c[f"rejected_{failed_reason or 'no_space'}"] += 1
                        if self._pending.get(it.key) is it.pending:
                            del self._pending[it.key]
                        it.pending.ok = False
                self._c["writes"] += len(jobs)
                self._c["batches_zero_copy" if buf.borrow else "batches_staged"] += 1
        finally:
            for it in batch:
                it.pending.done.set()
            buf.release(wait=buf.borrow)

    def _commit(self, it: _New, g: _Group, reinsert_rid: int | None) -> None:
        """Index one written entry (lock held) unless a clear/remove/reclaim raced it."""
        r = g.region
        if it.pending.removed or g.epoch != self._epoch or r.gen != g.gen:
            return
        if reinsert_rid is not None:
            cur = self._index.get(it.key)
            if cur is None or cur.region != reinsert_rid:
                return
            self._c["reinserted_entries"] += 1
        assert it.slot is not None
        loc = Location(r.rid, g.gen, g.file_off + (it.slot.offset - g.start), it.size, it.seq)
        self._index.set(it.key, loc)
        r.keys.append(it.key)
        r.live_bytes += it.size

    def _write_jobs(self, g: _Group, buf: WriteBuffer) -> list[Callable[[], None]]:
        """Cut a group's bytes into pieces of about ``write_chunk_bytes`` (at 4096 boundaries,
        within entries too) that the I/O pool writes in parallel."""
        fd = g.region.fd
        assert fd is not None
        iov: list[memoryview] = []
        for it in g.items:
            assert it.slot is not None
            iov.extend(buf.entry_iov(it.slot))

        def job(off: int, bufs: list[memoryview]) -> Callable[[], None]:
            def run() -> None:
                try:
                    pwritev_full(fd, bufs, g.file_off + off)
                except OSError as e:
                    g.error = e

            return run

        return [job(off, bufs) for off, bufs in split_iov(iov, self.options.write_chunk_bytes)]

    def _reserve(
        self, di: int, batch: list[_New], buf: WriteBuffer, allow_open: bool
    ) -> tuple[list[_Group], str]:
        """Reserve region space for ``batch`` in order; returns the groups placed and, if some
        entries could not be placed, the reason (``no_space`` / ``floor`` / ``io_error``)."""
        rs = self.options.region_size
        groups: list[_Group] = []
        k = 0
        reason = ""
        alloc_failed = False  # a new region file could not be allocated: reuse old ones instead
        for _attempt in range(4 * len(self._regions) + 8):
            if k >= len(batch):
                break
            to_open: Region | None = None
            wait_ev: threading.Event | None = None
            evicted: list[str] = []
            with self._lock:
                if self._closed:
                    reason = "io_error"
                    break
                r = self._active[di]
                if r is not None:
                    start, off = k, r.write_off
                    while k < len(batch) and off + entry_size(batch[k].size) <= rs:
                        off += entry_size(batch[k].size)
                        k += 1
                    if k > start:
                        items = batch[start:k]
                        for it in items:
                            it.seq = self._next_seq()
                            it.pending.buf, it.pending.slot = buf, it.slot
                        groups.append(_Group(r, r.write_off, items, self._epoch))
                        r.write_off = off
                        r.writers += 1
                        if k >= len(batch):
                            break
                    self._seal(r)
                if not allow_open:
                    reason = "no_space"
                    break
                if self._opening[di] is not None:
                    wait_ev = self._opening[di]
                else:
                    cand = self._take_free(di, allow_unallocated=not alloc_failed)
                    if cand is None:
                        cand, evicted = self._drop_oldest(di)
                    if cand is None:
                        reason = reason or "no_space"
                        break
                    cand.state = RegionState.OPENING
                    cand.gen = self._next_seq()
                    cand.epoch = self._epoch
                    wait_ev = threading.Event()
                    self._opening[di] = wait_ev
                    to_open = cand
            self._notify_evicted(evicted)
            if to_open is None:
                assert wait_ev is not None
                wait_ev.wait(timeout=1.0)
                continue
            ok, why = self._open_region(to_open)
            with self._lock:
                self._opening[di] = None
                if ok and to_open.epoch == self._epoch and not self._closed:
                    to_open.state = RegionState.ACTIVE
                    to_open.write_off = BLOCK
                    to_open.keys = []
                    to_open.live_bytes = 0
                    self._active[di] = to_open
                    self._c["opened_regions"] += 1
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
        return groups, reason

    def _open_region(self, r: Region) -> tuple[bool, str]:
        """Make ``r``'s file ready (state OPENING: this thread owns it): preallocate, write header."""
        o = self.options
        try:
            if not r.allocated and not self._floors[r.dir_index].ok(extra=o.region_size, fresh=True):
                return False, "floor" if o.min_free_bytes > 0 else "no_space"
            if r.fd is None:
                r.fd = open_region_fd(r.path, self._direct, create=True)
            if not r.allocated:
                preallocate(r.fd, o.region_size)
                r.allocated = True
                self._floors[r.dir_index].invalidate()
            write_region_header(r.fd, RegionHeader(r.rid, r.epoch, r.gen, o.region_size, time.time_ns()))
            return True, ""
        except OSError as e:
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            if not r.allocated:
                remove_region_file(r)
            log.log(logging.DEBUG if full else logging.WARNING, "ssd: cannot open region %s: %s", r.path, e)
            return False, "no_space" if full else "io_error"

    def _release_for_floor(self, di: int) -> None:
        """Below the free-space floor: give one region's disk space back (free ones first)."""
        evicted: list[str] = []
        with self._lock:
            victim = None
            for r in self._regions:
                if r.dir_index == di and r.state is RegionState.FREE and r.allocated:
                    victim = r
                    break
            if victim is None:
                victim, evicted = self._drop_oldest(di)
            if victim is None:
                return
            victim.state = RegionState.OPENING  # exclusive while its file is removed
        self._notify_evicted(evicted)
        remove_region_file(victim)
        with self._lock:
            victim.state = RegionState.FREE
            victim.alloc_retry_at = time.monotonic() + 1.0
            self._c["released_regions"] += 1
        self._floors[di].invalidate()

    # ------------------------------------------------------------------ reclaim

    def _maybe_reclaim(self, di: int) -> None:
        """Keep one clean region ready: when none is free, reclaim the oldest sealed region,
        rewriting its hot entries (hit-based reinsertion) into the active region."""
        o = self.options
        with self._lock:
            if self._closed or self._reclaiming[di] or self._free_count(di) > 0:
                return
            victim = pick_victim(self._fifo, self._regions, di)
            if victim is None:
                return
            self._reclaiming[di] = True
            self._fifo.remove(victim.rid)
            victim.state = RegionState.DRAINING
            budget = int(o.region_size * o.reinsertion_fraction)
            hot, evicted = split_for_reinsertion(victim, self._index, o.reinsertion_hits, budget, self.keep)
            victim.readers += 1
            self._c["reclaimed_regions"] += 1
            self._c["evicted_entries"] += len(evicted)
            gen = victim.gen
        self._notify_evicted(evicted)
        late: list[str] = []
        try:
            if hot:
                self._reinsert(victim, hot)
        except Exception:  # noqa: BLE001
            log.exception("ssd reinsertion failed")
        finally:
            with self._lock:
                victim.readers -= 1
                for key in victim.keys:
                    if self._index.pop_if(key, victim.rid, gen) is not None:
                        late.append(key)
                self._c["evicted_entries"] += len(late)
                victim.keys = []
                victim.live_bytes = 0
                self._maybe_free(victim)
                self._reclaiming[di] = False
        self._notify_evicted(late)

    def _reinsert(self, victim: Region, hot: list[tuple[str, Location]]) -> None:
        total = sum(entry_size(loc.length) for _, loc in hot)
        mem = self._buffers.take(total)
        try:
            view = memoryview(mem)
            items: list[tuple[str, list[memoryview]]] = []
            off = 0
            for key, loc in hot:
                items.append((key, [view[off : off + loc.length]]))
                off += loc.length
            got = [False] * len(items)
            self._get_batch(items, got, internal=True)
            to_put = [(k, v) for (k, v), ok in zip(items, got, strict=True) if ok]
            res = [False] * len(to_put)
            if to_put:
                self._put_batch(to_put, res, reinsert_rid=victim.rid, reinsert_dir=victim.dir_index)
        finally:
            self._buffers.give(mem)

    # ------------------------------------------------------------------ get

    def get_into(self, key: str, parts: Parts) -> bool:
        """Read one object into ``parts`` (their sizes must add up to the object's size)."""
        return self.get_batch_into([(key, parts)])[0]

    def get_batch_into(self, items: Sequence[tuple[str, Parts]]) -> list[bool]:
        """Scatter-read objects; False per item on miss, size mismatch or failed verification.

        On False the caller's memory for that item may have been overwritten with garbage.
        """
        results = [False] * len(items)
        if not self._enter():
            return results
        try:
            self._get_batch(items, results, internal=False)
        except Exception:  # noqa: BLE001
            log.exception("ssd get_batch_into failed")
        finally:
            self._exit()
        return results

    def _get_batch(self, items: Sequence[tuple[str, Parts]], results: list[bool], internal: bool) -> None:
        views_list = [[byte_view(p) for p in parts] for _, parts in items]
        plan: list[ReadItem] = []
        mem: list[tuple[int, WriteBuffer, Slot]] = []
        with self._lock:
            for i, (key, _) in enumerate(items):
                views = views_list[i]
                size = sum(v.nbytes for v in views)
                p = self._pending.get(key)
                if p is not None and p.buf is not None and p.slot is not None and not p.removed:
                    if p.slot.payload_len != size:
                        self._c["get_size_mismatch"] += 1
                        continue
                    p.buf.acquire()
                    mem.append((i, p.buf, p.slot))
                    continue
                loc = self._index.get(key)
                if loc is None:
                    continue
                if loc.length != size:
                    self._c["get_size_mismatch"] += 1
                    continue
                r = self._regions[loc.region]
                r.readers += 1
                if not internal:
                    loc.hits += 1
                plan.append(ReadItem(i, key, loc, r, views))
        for i, wb, slot in mem:
            try:
                _copy_views(views_list[i], wb.payload_views(slot))
                results[i] = True
            finally:
                wb.release()
        bad: list[ReadItem] = []
        read_bytes = 0
        try:
            if plan:
                runs = plan_runs(plan, self._direct, self.options.max_read_run_bytes)
                assert self._pool is not None
                outs = self._pool.run_all([self._run_job(run) for run in runs])
                for run, out in zip(runs, outs, strict=True):
                    for it, ok in zip(run.items, out, strict=True):
                        results[it.idx] = ok
                        if ok:
                            read_bytes += it.loc.length
                        else:
                            bad.append(it)
        finally:
            with self._lock:
                for it in plan:
                    it.region.readers -= 1
                    self._maybe_free(it.region)
                for it in bad:
                    if self._index.get(it.key) is it.loc:
                        self._index.pop(it.key)
                if not internal:
                    self._c["gets"] += len(items)
                    hits = sum(results)
                    self._c["hits"] += hits
                    self._c["misses"] += len(items) - hits
                    self._c["hits_from_write_buffer"] += len(mem)
                    self._c["bytes_read"] += read_bytes
                self._c["reads"] += len(plan)
                self._c["read_checksum_errors"] += len(bad)

    def _run_job(self, run: Run) -> Callable[[], list[bool]]:
        return lambda: self._read_run(run)

    def _read_run(self, run: Run) -> list[bool]:
        """One vectored read for a run of adjacent entries, then per-entry verification."""
        fd = run.region.fd
        n = len(run.items)
        if fd is None:
            return [False] * n
        scratch = self._buffers.take(BLOCK * (n + 1) + run.bounce_bytes)
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
                    src = payload[0]
                    p = 0
                    for v in it.views:
                        v[:] = src[p : p + v.nbytes]
                        p += v.nbytes
                out.append(ok)
            return out
        finally:
            self._buffers.give(scratch)

    def _verify(self, it: ReadItem, hdr: memoryview, payload: Sequence[memoryview]) -> bool:
        h, why = parse_entry_header(hdr, self.options.max_key_bytes)
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

    # ------------------------------------------------------------------ metadata ops

    def contains(self, key: str) -> bool:
        with self._lock:
            if key in self._index:
                return True
            p = self._pending.get(key)
            return p is not None and p.buf is not None and not p.removed

    def object_size(self, key: str) -> int | None:
        with self._lock:
            loc = self._index.get(key)
            if loc is not None:
                return loc.length
            p = self._pending.get(key)
            if p is not None and p.slot is not None and not p.removed:
                return p.slot.payload_len
            return None

    def remove(self, key: str) -> bool:
        """Drop ``key`` from the index (not durable: see module docstring)."""
        with self._lock:
            p = self._pending.get(key)
            if p is not None:
                p.removed = True
            found = self._index.pop(key) is not None or p is not None
            if found:
                self._c["removes"] += 1
            return found

    def keys(self) -> Iterator[str]:
        """A snapshot of the committed keys."""
        with self._lock:
            snap = self._index.keys_snapshot()
        return iter(snap)

    def clear(self) -> None:
        """Drop everything, durably: the epoch in every superblock is bumped first, so regions
        written before (their headers carry the old epoch) are ignored by any later recovery."""
        with self._clear_mutex:
            with self._lock:
                if self._closed:
                    return
                new_epoch = self._epoch + 1
            for d in self.options.dirs:
                try:
                    Superblock(new_epoch, self._boot, self.options.region_size).write(d)
                except OSError:
                    log.exception("ssd clear: cannot write superblock in %s", d)
                    with self._lock:
                        self._c["clear_errors"] += 1
            with self._lock:
                self._epoch = new_epoch
                self._index.clear()
                for p in self._pending.values():
                    p.removed = True
                for r in self._regions:
                    if r.state in (RegionState.ACTIVE, RegionState.SEALED, RegionState.DRAINING):
                        r.keys = []
                        r.live_bytes = 0
                        r.state = RegionState.DRAINING if r.pinned else RegionState.FREE
                self._active = [None] * len(self.options.dirs)
                self._fifo = []
                self._c["clears"] += 1

    def sync(self) -> None:
        """fdatasync every region written since open (power-loss durability; not needed for crashes)."""
        with self._lock:
            fds = [r.fd for r in self._regions if r.fd is not None and r.dirty]
        for fd in fds:
            with contextlib.suppress(OSError):
                os.fdatasync(fd)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            c = dict(self._c)
            states = Counter(r.state.value for r in self._regions)
            s: dict[str, Any] = {
                "entries": len(self._index),
                "bytes": self._index.bytes,
                "capacity": self.options.num_regions * self.options.region_size,
                "region_size": self.options.region_size,
                "regions": len(self._regions),
                "regions_by_state": dict(states),
                "regions_allocated": sum(1 for r in self._regions if r.allocated),
                "pending_writes": len(self._pending),
                "io_mode": self.io_mode,
                "io_mode_reason": self.io_mode_reason,
                "epoch": self._epoch,
                "recover_seconds": round(self._recover_seconds, 4),
            }
        for k in (
            "puts", "put_existing", "gets", "hits", "misses", "hits_from_write_buffer", "bytes_written",
            "bytes_read", "reclaimed_regions", "evicted_entries", "reinserted_entries", "released_regions",
            "read_checksum_errors", "get_size_mismatch", "batches_zero_copy", "batches_staged", "recovered_entries", "recover_corrupt",
            "recover_torn", "recover_stale_entries", "recover_stale_epoch_regions", "recover_bad_region_headers",
        ):  # fmt: skip
            s[k] = c.get(k, 0)
        s["rejected"] = {
            r: c.get(f"rejected_{r}", 0) for r in ("no_space", "floor", "too_large", "io_error", "bad_key")
        }
        s["corrupt"] = s["recover_corrupt"] + s["read_checksum_errors"]
        s["torn"] = s["recover_torn"]
        for k, v in c.items():
            s.setdefault(k, v)
        return s
