"""The SSD engine: a log-structured object store over preallocated region files.

:class:`SsdEngine` is a thin coordinator over parts with one job each (see ``README.md``)::

    SsdEngine --> attach (open/close: locks, I/O mode, recovery)
              --> EpochKeeper (epoch, durable clear)
              --> WritePath --> RegionAllocator (space) --> Region files
              --> ReadPath  --> WritePath (pending entries), Region files
              --> Reclaimer --> ReadPath + WritePath (reinsertion), RegionAllocator

all sharing one :class:`~.core.EngineCore` (index, regions, counters, one lock).

Failure semantics: data-path calls never raise for I/O or space problems; they return False
(or None) and count the reason in ``stats()``. Only ``__init__`` raises (bad options, directory
in use, ``direct_io="on"`` refused, ``strict`` recovery finding corruption).

Durability of ``remove``: it only drops the index entry; after a restart a removed key may come
back with its (correct, immutable) bytes. ``clear`` is durable (epoch bump in the superblocks)
and a barrier: a ``put_batch`` given the ``epoch`` its bytes were taken in is never indexed
after a clear; a clear whose epoch cannot be written stays refused across restarts until an
operator repairs it (``clear_record``).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from hicache_mooncake.native import io_threads, reserve_io_staging, set_io_threads

from .allocator import RegionAllocator
from .attach import attach, release
from .core import EngineCore
from .epoch import EpochKeeper
from .format import BLOCK
from .io import IoPool
from .names import region_names
from .options import SsdOptions
from .reader import ReadPath
from .reclaimer import Reclaimer
from .region import RegionState
from .rescan import BackgroundScan
from .resize import ResizeProgress, Resizer
from .writer import WritePath

log = logging.getLogger("hicache_mooncake.ssd")

Parts = Sequence[Any]  # memoryview-compatible buffers

_STAT_KEYS = (
    "puts", "put_existing", "gets", "hits", "misses", "hits_from_write_buffer", "bytes_written",
    "bytes_read", "reclaimed_regions", "evicted_entries", "reinserted_entries", "released_regions",
    "read_checksum_errors", "get_size_mismatch", "batches_zero_copy", "batches_staged",
    "recovered_entries", "recover_corrupt", "recover_torn", "recover_stale_entries",
    "recover_stale_epoch_regions", "recover_bad_region_headers", "recover_from_summaries",
    "recover_lost_regions", "recover_missing_regions", "late_writes", "skipped_puts", "skipped_gets",
    "fingerprint_collisions",
)  # fmt: skip
_REJECT_REASONS = ("no_space", "floor", "too_large", "io_error", "bad_key", "stale_epoch")


class SsdEngine:
    """See the module docstring. Thread safe; one instance per set of directories."""

    def __init__(self, options: SsdOptions, progress: bool = False) -> None:
        self.options = options
        self._core = core = EngineCore(options)
        self._lock_fds: list[int] = []
        self._rescan: BackgroundScan | None = None
        self._alloc = RegionAllocator(core)
        self._writer = WritePath(core, self._alloc)
        self._reader = ReadPath(core, self._alloc, self._writer)
        self._reclaimer = Reclaimer(core, self._alloc, self._writer, self._reader)
        self._epochs = EpochKeeper(core, self._alloc, self._writer)
        self._resizer = Resizer(core, self._alloc, self._reclaimer)
        self._alloc.on_region_file = self._epochs.region_made
        try:
            self._recover_seconds, to_scan = attach(core, self._epochs, self._lock_fds, progress)
            core.pool = IoPool(options.file_threads)
            set_io_threads(options.io_threads)  # the native pool has at least as many workers
            # staging for a read run or a write run per worker: the first calls fault nothing in
            reserve_io_staging(
                io_threads(), max(options.read_run_bytes, options.write_chunk_bytes + 2 * BLOCK)
            )
            with core.lock:  # regions scanned at open (strict): summarized now, their keys leave memory
                for r in core.regions:
                    if r.state is RegionState.SEALED and not r.summarized and r.rid in core.fifo:
                        self._alloc.summaries.maybe_summarize(r)
            self._rescan = BackgroundScan(
                core, to_scan, lambda rid: rid in self._epochs.maps[rid % len(options.dirs)],
                self._alloc.summaries.maybe_summarize,
            )  # fmt: skip
            self._rescan.start()
        except BaseException:
            release(core, self._lock_fds, on_released=self._epochs.close)
            raise

    # ------------------------------------------------------------------ hooks

    @property
    def on_evict(self) -> Callable[[str], None] | None:
        """Called (without the engine lock) with each key dropped by region reclaim."""
        return self._core.on_evict

    @on_evict.setter
    def on_evict(self, fn: Callable[[str], None] | None) -> None:
        self._core.on_evict = fn

    @property
    def keep(self) -> Callable[[str], bool] | None:
        """Optional: entries for which ``keep(key)`` is True are rewritten on region reclaim like
        hit entries (a caller that decides residency itself). Called with the engine lock held:
        it must not call back into the engine or block."""
        return self._core.keep

    @keep.setter
    def keep(self, fn: Callable[[str], bool] | None) -> None:
        self._core.keep = fn

    @property
    def io_mode(self) -> str:
        return self._core.io_mode

    @property
    def io_mode_reason(self) -> str:
        return self._core.io_mode_reason

    # ------------------------------------------------------------------ open / close

    def wait_recovered(self, timeout: float | None = None) -> bool:
        """Wait until the regions left to the background scan are indexed (True), or ``timeout``."""
        t = self._rescan.thread if self._rescan is not None else None
        if t is not None and t.is_alive():
            t.join(timeout)
            return not t.is_alive()
        return True

    def close(self, deadline: float | None = None) -> None:
        """Wait for calls in flight (until ``deadline``; without one at most 30 s), then release
        threads, fds and locks. Never raises. Region fds with I/O still in flight on a stalled
        disk (and the directory locks) are released by a daemon thread once that I/O is over, so
        close returns by its deadline whatever the disk does."""
        c = self._core
        try:
            with c.lock:
                if c.closed:
                    return
                c.closed = True
                end = deadline if deadline is not None else time.monotonic() + 30.0
                while c.ops > 0 and time.monotonic() < end:
                    c.idle.wait(timeout=min(0.1, max(0.0, end - time.monotonic())))
            c.health.stop()
            c.huge_memory.checked(max(0.0, end - time.monotonic()))  # reads /proc only: ends soon
            release(
                c, self._lock_fds, deadline, on_released=self._epochs.close,
                before_close=self._alloc.summaries.summarize_all_now,
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - close never raises
            log.exception("ssd engine close")

    def __enter__(self) -> SsdEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ data path

    def put(self, key: str, parts: Parts, deadline: float | None = None) -> bool:
        """Store one object (gather-write of ``parts``); True once its bytes are in the region file."""
        return self.put_batch([(key, parts)], deadline)[0]

    def put_batch(
        self, items: Sequence[tuple[str, Parts]], deadline: float | None = None, epoch: int | None = None
    ) -> list[bool]:
        """Store objects; per-item True/False (True: the bytes are in the region file; values are
        immutable, so a key already stored is True without a write). ``deadline``
        (``time.monotonic()``): what is not written by then is False, and the engine is degraded
        (see :mod:`.health`); while degraded, every item is False at once. ``epoch``: the
        :attr:`epoch` the caller read before it took the bytes (a demotion, a write-through copy);
        once a ``clear`` has bumped it, nothing of the call is ever indexed (counted
        ``rejected.stale_epoch``), so bytes from before a clear never land in the epoch after it."""
        c = self._core
        results = [False] * len(items)
        if not self._usable("put", len(items)) or not c.enter():
            return results
        try:
            di = self._alloc.pick_dir()
            if self._writer.put_batch(items, results, di, deadline=deadline, epoch=epoch) and c.usable():
                self._reclaimer.maybe_reclaim(di, deadline)
        except Exception:  # noqa: BLE001 - never raise from the data path
            log.exception("ssd put_batch failed")
            with c.lock:
                c.counts["rejected_io_error"] += 1
        finally:
            c.exit()
        return results

    def register_memory(self, view: Any) -> float:
        """Caller memory that puts will come from (a DRAM arena, a host pool). When at least 90 %
        of it is on huge pages, puts from it are written in place (no staging copy, see
        ``SsdOptions.stage_writes``). Returns the share found on huge pages."""
        from .io import byte_view

        return self._core.huge_memory.register(byte_view(view))

    def register_memory_later(self, views: Sequence[Any]) -> None:
        """``register_memory`` of ``views`` on a thread (``HugeRanges.register_later``): attach
        does not wait for the kernel's page-table walk; puts from that memory are staged until
        the check is done. ``memory_checked`` waits for it."""
        from .io import byte_view

        self._core.huge_memory.register_later([byte_view(v) for v in views])

    def memory_checked(self, timeout_s: float | None = None) -> bool:
        """Wait until the ``register_memory_later`` checks are done; False if one still runs."""
        return self._core.huge_memory.checked(timeout_s)

    def get_into(self, key: str, parts: Parts, deadline: float | None = None) -> bool:
        """Read one object into ``parts`` (their sizes must add up to the object's size)."""
        return self.get_batch_into([(key, parts)], deadline)[0]

    def get_batch_into(self, items: Sequence[tuple[str, Parts]], deadline: float | None = None) -> list[bool]:
        """Scatter-read objects; False per item on miss, size mismatch or failed verification,
        or when not read by ``deadline`` (see :meth:`.reader.ReadPath.get_batch`: reads that can
        outlive the call land in engine memory, so a late one never touches the caller's).

        On False the caller's memory for that item may have been overwritten with garbage.
        """
        c = self._core
        results = [False] * len(items)
        if not self._usable("get", len(items)) or not c.enter():
            return results
        try:
            self._reader.get_batch(items, results, internal=False, deadline=deadline)
        except Exception:  # noqa: BLE001
            log.exception("ssd get_batch_into failed")
        finally:
            c.exit()
        return results

    def _usable(self, op: str, n: int) -> bool:
        """Whether a data call may go to the disk; if not, its ``n`` items are counted as skipped,
        in total (``skipped_puts``) and by why (``skipped_puts_clearing``: a clear's new epoch is
        not on disk yet; ``skipped_puts_clear_failed``: a clear failed, refused until an operator
        acts; ``skipped_puts_degraded``: a deadline was missed, no health probe passed since)."""
        c = self._core
        if c.usable():
            return True
        with c.lock:
            c.counts[f"skipped_{op}s"] += n
            if c.health.degraded:
                why = "degraded"
            elif c.refusing.startswith("clear:"):
                why = "clearing"
            else:
                why = "clear_failed"
            c.counts[f"skipped_{op}s_{why}"] += n
        return False

    # ------------------------------------------------------------------ metadata ops

    def count_rejected(self, reason: str, n: int) -> None:
        """Count ``n`` puts refused for ``reason`` (one of the ``rejected`` causes of
        :meth:`stats`) by a caller that checked before calling (a store that knows an object is
        larger than ``max_object_bytes``)."""
        if reason not in _REJECT_REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; one of {_REJECT_REASONS}")
        with self._core.lock:
            self._core.counts[f"rejected_{reason}"] += n

    def contains(self, key: str) -> bool:
        """Whether ``key`` is stored (memory only, never waits for the disk); False while degraded."""
        c = self._core
        if not c.usable():
            return False
        with c.lock:
            return key in c.index or self._writer.pending_slot(key) is not None

    def entry_count(self) -> int:
        """Entries indexed (without the lock: an estimate; writes in flight not counted)."""
        return len(self._core.index)

    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        """``contains`` of each key under one lock: the keys are fingerprinted and looked up in
        two native calls (outside the lock, the fingerprints; ``fps``: the caller's, computed
        once at the store's entry, one per key), and only the keys they miss are looked for
        among the writes in flight, when there are any."""
        c = self._core
        if not c.usable():
            return [False] * len(keys)
        if not keys:
            fps = None
        elif fps is None:
            fps = c.index.fps(keys)
        with c.lock:
            found = c.index.contains_fps(fps) if fps is not None else []
            if self._writer.pending and not all(found):
                pending = self._writer.pending_slot
                found = [ok or pending(k) is not None for k, ok in zip(keys, found, strict=True)]
            return found

    def object_size(self, key: str) -> int | None:
        c = self._core
        with c.lock:
            loc = c.index.get(key)
            if loc is not None:
                return loc.length
            staged = self._writer.pending_slot(key)
            return staged[1].payload_len if staged is not None else None

    def remove(self, key: str) -> bool:
        """Drop ``key`` from the index (not durable: see module docstring)."""
        c = self._core
        with c.lock:
            pending = self._writer.forget(key)
            found = c.index.pop(key) is not None or pending
            if found:
                c.counts["removes"] += 1
            return found

    def keys(self) -> Iterator[str]:
        """A snapshot of the committed keys. The index holds fingerprints only: each live
        region's keys are read where they are kept (memory, else its summary or entry headers:
        file I/O, no lock held) and listed where the index still points into that region."""
        c = self._core
        with c.lock:
            live = [
                r for r in c.regions
                if r.state in (RegionState.ACTIVE, RegionState.SEALED) and len(r.fps)
            ]  # fmt: skip
            for r in live:
                r.readers += 1  # not reopened while its keys are read
        out: dict[str, None] = {}
        try:
            for r in live:
                named = region_names(c, r)
                if named is None:
                    continue
                names, fps = named
                with c.lock:
                    for key, loc in zip(names, c.index.lookup(fps), strict=True):
                        if loc is not None and loc.region == r.rid and loc.gen == r.gen:
                            out[key] = None
        finally:
            with c.lock:
                for r in live:
                    r.readers -= 1
                    self._alloc.maybe_free(r)
        return iter(list(out))

    def clear(self, deadline: float | None = None) -> bool:
        """Drop everything, durably; True once the new epoch is on disk by ``deadline`` (see
        :class:`~.epoch.EpochKeeper`: until then nothing is served or written)."""
        return self._epochs.clear(deadline)

    def sync(self, deadline: float | None = None) -> bool:
        """fdatasync every region written since open and the region map (power-loss durability;
        not needed for crashes); False if not done by ``deadline`` (it finishes in the
        background)."""
        c = self._core
        with c.lock:
            fds = [r.fd for r in c.regions if r.fd is not None and r.dirty]
        pool = c.pool
        if pool is None:
            return not fds

        def sync_one(fd: int) -> Callable[[], None]:
            return lambda: os.fdatasync(fd)

        batch = pool.submit([sync_one(fd) for fd in fds] + [self._epochs.sync])
        if not batch.wait(deadline):
            batch.abandon()
            c.timed_out("sync", deadline or 0.0)
            return False
        return True

    @property
    def epoch(self) -> int:
        """The current epoch (``clear`` bumps it): what a snapshot of this store's contents is valid for."""
        return self._core.epoch

    @property
    def capacity_bytes(self) -> int:
        """Bytes of regions in use now (``resize`` changes it; ``options.capacity_bytes`` at open)."""
        return self._core.region_limit * self.options.region_size

    def resize(self, capacity_bytes: int, deadline: float) -> ResizeProgress:
        """Use ``capacity_bytes`` (whole regions, at most ``options.max_capacity_bytes``) from now on
        (:mod:`.resize`): growing takes effect at once; shrinking empties the regions past the new
        size until ``deadline`` (``progress.left`` says what is still to do; call again to go on).
        Raises ``ValueError`` for a size out of range; calls keep running throughout."""
        self._resizer.set_limit(capacity_bytes)
        c = self._core
        if not c.enter():
            return ResizeProgress(self.capacity_bytes)
        try:
            return self._resizer.vacate(deadline)
        finally:
            c.exit()

    def usable(self) -> bool:
        """Whether calls go to the disk now: not degraded (a deadline was missed and no health
        probe has passed since) and no clear outstanding."""
        return self._core.usable()

    def degrade(self, reason: str) -> None:
        """Mark the disk degraded as a missed deadline does (a no-op while it is): data calls answer
        at once until a health probe passes. For an owner that found the disk unusable by other means
        (its directory removed)."""
        self._core.health.trip(reason)

    def stats(self) -> dict[str, Any]:
        c = self._core
        o = self.options
        with c.lock:
            counts = dict(c.counts)
            states = Counter(r.state.value for r in c.regions)
            s: dict[str, Any] = {
                "entries": len(c.index),
                "bytes": c.index.bytes,
                "index_bytes": c.index.nbytes,
                "capacity": c.region_limit * o.region_size,
                "max_capacity": o.num_regions * o.region_size,
                "region_size": o.region_size,
                "regions": len(c.regions),
                "regions_by_state": dict(states),
                "regions_allocated": sum(1 for r in c.regions if r.allocated),
                "pending_writes": len(self._writer.pending),
                "io_mode": c.io_mode,
                "io_mode_reason": c.io_mode_reason,
                "epoch": c.epoch,
                "recover_seconds": round(self._recover_seconds, 4),
                "recovering_regions": self._rescan.left if self._rescan is not None else 0,
                "recover_background_seconds": round(self._rescan.seconds, 4) if self._rescan else 0.0,
                "degraded": c.health.degraded,
                "degraded_reason": c.health.reason if c.health.degraded else "",
                "degraded_episodes": c.health.trips,
                "refusing": c.refusing,
            }
        for k in _STAT_KEYS:
            s[k] = counts.get(k, 0)
        s["rejected"] = {r: counts.get(f"rejected_{r}", 0) for r in _REJECT_REASONS}
        s["corrupt"] = s["recover_corrupt"] + s["read_checksum_errors"]
        s["torn"] = s["recover_torn"]
        for k, v in counts.items():
            s.setdefault(k, v)
        return s
