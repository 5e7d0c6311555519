"""Warm restart of a ``TieredStore`` (``WarmKeeper``): snapshot what the placement knows is hot, and
after an attach start from it.

- ``save``: the placement's hottest pages (``TierPlacement.hottest``: DRAM most recent first, then
  SSD) go to the SSD directory (``warm_snapshot``); at ``close``, at an SSD detach in ``drain``
  mode, and every ``interval_s`` (a daemon thread). The store lock is held only to copy at most
  ``max_entries`` keys.
- ``restore`` (when an SSD tier opens, at start or at a runtime attach): the pages of a matching
  snapshot that the SSD holds are given to the placement coldest first (``adopt``, one policy
  call per page, in chunks of the store lock), so every policy starts from the same recency order
  it had; then a background thread copies the pages that were in DRAM from SSD back into DRAM,
  hottest first (``Rewarmer``).
- The re-warmer never competes with SGLang's calls: before each batch it waits (up to
  ``yield_s``) for a moment with no store call in flight, reads at most ``rate_mbps`` MB/s, places
  the pages as the least recent of DRAM (``TierPlacement.warm``), and stops at the budget: DRAM at
  its high watermark (a re-warm never demotes), ``budget_s`` seconds, or the snapshot's DRAM pages
  done. A page the placement
  no longer wants on SSD, or that SGLang's calls already brought up, is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from itertools import compress
from typing import Any

import numpy as np

from .policy import AccessContext
from .policy.placement import DRAM, SSD
from .rate_budget import RateBudget
from .ssd_tier import SsdTier
from .store_options import WarmOptions
from .store_state import StoreState
from .warm_snapshot import Page, read_snapshot, write_snapshot

__all__ = ["WarmKeeper", "WarmOptions"]

log = logging.getLogger(__name__)
_CHUNK = 256  # pages adopted per hold of the store lock (~1 ms: SGLang's calls wait that long)


class WarmKeeper:
    def __init__(self, state: StoreState, options: WarmOptions) -> None:
        self.state = state
        self.options = options
        self.counts: Counter[str] = Counter()
        self.last_restore: dict[str, Any] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one save at a time
        self._rewarmer: threading.Thread | None = None
        self._rewarm_stop = threading.Event()
        self._adopted = threading.Event()  # set when no snapshot adoption is running
        self._adopted.set()
        self._ticker: threading.Thread | None = None
        self._writing: threading.Thread | None = None  # the last snapshot write (bounded wait)
        if options.interval_s > 0:
            self._ticker = threading.Thread(target=self._tick, name="hicache-warm-snapshot", daemon=True)
            self._ticker.start()

    # ------------------------------------------------------------------ snapshot
    @staticmethod
    def _identity(ssd: SsdTier) -> dict[str, Any]:
        return {"epoch": ssd.engine.epoch, "region_size": ssd.engine.options.region_size}

    def save(self, ssd: SsdTier | None = None) -> int:
        """Write the snapshot of the placement's hottest pages into ``ssd``'s directory (default:
        the store's SSD tier); returns the entries written. 0 when there is nothing to write, the
        write failed or did not finish within ``io.timeout_s``, or it was skipped: the tier is
        degraded, an earlier write is still stuck, or the snapshot on disk is being adopted."""
        store = self.state
        ssd = ssd if ssd is not None else store.ssd
        if ssd is None:
            return 0
        if not self._adopted.is_set():  # the placement knows part of the snapshot on disk: keep it
            self.counts["snapshots_skipped_restoring"] += 1
            return 0
        if not ssd.engine.usable():  # degraded: the disk missed a deadline, the write would too
            self.counts["snapshots_skipped_degraded"] += 1
            return 0
        with self._lock:
            if self._writing is not None and self._writing.is_alive():  # an earlier write is stuck
                self.counts["snapshots_skipped_busy"] += 1
                return 0
            with store.lock:
                placement = store.placement
                if placement is None or not len(placement):
                    return 0
                cut = placement.hottest_cut(self.options.max_entries)  # C-level copies only
                policy = type(placement.policy).__name__
            header = {**self._identity(ssd), "policy": policy, "created": time.time()}
            return self._write(ssd.engine.options.dirs[0], header, cut.pages())

    def _write(self, directory: str, header: dict[str, Any], pages: list[Page]) -> int:
        """Write the snapshot on its own thread and wait for it at most ``io.timeout_s``: a disk
        that stalls costs this snapshot (the previous one stays, the write replaces it atomically
        if it ever finishes), never the caller's deadline (``close`` and detach included)."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def write() -> None:
            try:
                outcome["bytes"] = write_snapshot(directory, header, pages)
            except OSError as exc:
                outcome["error"] = exc
            finally:
                done.set()

        self._writing = threading.Thread(target=write, name="hicache-warm-write", daemon=True)
        self._writing.start()
        timeout_s = self.state.options.timeout_s
        if not done.wait(timeout_s):
            self.counts["snapshot_timeouts"] += 1
            log.warning(
                "warm restart: the snapshot in %s was not written within io.timeout_s (%.1f s); "
                "the previous one stays",
                directory,
                timeout_s,
            )
            return 0
        if "error" in outcome:
            self.counts["snapshot_errors"] += 1
            log.warning("warm restart: cannot write the snapshot in %s: %s", directory, outcome["error"])
            return 0
        self.counts["snapshots"] += 1
        self.counts["snapshot_bytes"] = outcome["bytes"]
        self.counts["snapshot_entries"] = len(pages)
        return len(pages)

    def _tick(self) -> None:
        while not self._stop.wait(self.options.interval_s):
            try:
                self.save()
            except Exception:
                self.counts["snapshot_errors"] += 1
                log.exception("warm restart: periodic snapshot failed")

    # ------------------------------------------------------------------ restore
    def restore(self, ssd: SsdTier, background: bool = False) -> dict[str, Any]:
        """Start from ``ssd``'s snapshot (module docstring); returns what happened so far. With
        ``background`` (at start) the snapshot is read and its pages adopted on the re-warm
        thread, so attach waits neither for reading it nor for a million policy calls: meanwhile
        the store serves, a page SGLang touches first is placed by that call (and skipped by the
        adoption), and no snapshot is written (the one on disk is still the better one).
        ``restore_done`` waits for it."""
        if not background:
            hot = self._read_and_adopt(ssd, threading.Event())
            if hot:
                self._start_rewarm(hot)
            return self.last_restore
        self.stop_rewarm()
        self._adopted.clear()
        self.last_restore = {"snapshot": "reading", "adopting": True}
        self._rewarm_stop = stop = threading.Event()
        self._rewarmer = threading.Thread(
            target=self._restore_then_rewarm, args=(ssd, stop), name="hicache-rewarm", daemon=True
        )
        self._rewarmer.start()
        return self.last_restore

    def restore_done(self, timeout_s: float | None = None) -> bool:
        """Wait until the snapshot is read and its pages adopted (tests, benchmarks, operators)."""
        return self._adopted.wait(timeout_s)

    def _restore_then_rewarm(self, ssd: SsdTier, stop: threading.Event) -> None:
        hot: list[tuple[str, int]] = []
        try:
            hot = self._read_and_adopt(ssd, stop)
        except Exception:
            self.counts["restore_errors"] += 1
            log.exception("warm restart: restoring the snapshot failed")
        finally:
            self.last_restore["adopting"] = False
            self._adopted.set()
        if hot and not stop.is_set():
            self._rewarm(hot, stop)

    def _read_and_adopt(self, ssd: SsdTier, stop: threading.Event) -> list[tuple[str, int]]:
        """Read ``ssd``'s snapshot and adopt the pages the SSD holds; returns those to re-warm,
        ``(key, size)`` hottest first (C-level passes over the snapshot's columns)."""
        snap, why = read_snapshot(ssd.engine.options.dirs[0], self._identity(ssd))
        adopting = not self._adopted.is_set()
        if snap is None:
            if why != "no snapshot":
                log.warning(
                    "warm restart: snapshot in %s not used (%s): starting cold",
                    ssd.engine.options.dirs[0],
                    why,
                )
            self.last_restore = {"snapshot": why, "adopting": adopting}
            return []
        held = ssd.contains_batch(snap.keys)
        keys, sizes = list(compress(snap.keys, held)), list(compress(snap.sizes, held))
        entries = list(zip(keys, sizes, strict=True))
        hot = list(compress(entries, compress(snap.in_dram, held)))
        self.last_restore = {
            "snapshot": "used",
            "snapshot_entries": len(snap),
            "on_ssd": len(entries),
            "adopted": 0,
            "rewarm_pages": len(hot),
            "adopting": adopting,
        }
        if entries:
            self._adopt(entries, stop)
        return hot

    def _adopt(self, entries: list[tuple[str, int]], stop: threading.Event) -> None:
        """Give the placement the snapshot's pages, coldest first, in chunks of the store lock;
        a page already placed (SGLang used it meanwhile) is left as it is."""
        store = self.state
        with store.lock:
            store.placement_for(entries[0][1])
        coldest_first = entries[::-1]
        adopted = 0
        for start in range(0, len(coldest_first), _CHUNK):
            if stop.is_set() or self._stop.is_set():
                break
            with store.lock:
                placement = store.placement
                if placement is None:
                    break
                for key, size in coldest_first[start : start + _CHUNK]:
                    if placement.tier_of(key) is None:
                        adopted += placement.adopt(key, AccessContext(size=size), SSD)
                drops, demote = placement.settle()
            store.apply(drops, demote)
            time.sleep(0)  # hand the GIL over: a call waiting for the store lock gets it first
        self.last_restore["adopted"] = adopted
        self.counts["restored_pages"] += adopted
        log.info(
            "warm restart: %d pages of the snapshot adopted, %d to re-warm into DRAM",
            adopted,
            self.last_restore["rewarm_pages"],
        )

    def _start_rewarm(self, hot: list[tuple[str, int]]) -> None:
        self.stop_rewarm()
        self._rewarm_stop = threading.Event()
        self._rewarmer = threading.Thread(
            target=self._rewarm, args=(hot, self._rewarm_stop), name="hicache-rewarm", daemon=True
        )
        self._rewarmer.start()

    def stop_rewarm(self, timeout_s: float = 2.0) -> None:
        self._rewarm_stop.set()
        if self._rewarmer is not None:
            self._rewarmer.join(timeout_s)
            self._rewarmer = None

    def rewarm_done(self, timeout_s: float | None = None) -> bool:
        """Wait for the re-warmer (tests, benchmarks); True when it is not running."""
        t = self._rewarmer
        if t is not None:
            t.join(timeout_s)
            return not t.is_alive()
        return True

    def _rewarm(self, hot: list[tuple[str, int]], stop: threading.Event) -> None:
        opts = self.options
        started = time.monotonic()
        budget = RateBudget(opts.rate_mbps * 1e6 if opts.rate_mbps else None)
        reason = "done"
        try:
            for start in range(0, len(hot), opts.batch_pages):
                if stop.is_set() or self._stop.is_set():
                    reason = "stopped"
                    break
                if time.monotonic() - started > opts.budget_s:
                    reason = "time budget"
                    break
                self._wait_idle(stop)
                full = self._rewarm_batch(hot[start : start + opts.batch_pages], budget, stop)
                if full is None:
                    reason = "no dram or ssd tier"
                    break
                if full:
                    reason = "dram full (high watermark)"
                    break
        except Exception:
            reason = "error"
            self.counts["rewarm_errors"] += 1
            log.exception("warm restart: re-warm failed")
        self.counts["rewarm_seconds"] = int(time.monotonic() - started)
        self.last_restore["rewarm_stopped"] = reason
        log.info("warm restart: re-warm finished (%s): %d pages", reason, self.counts["rewarmed_pages"])

    def _wait_idle(self, stop: threading.Event) -> None:
        """Yield to SGLang: wait (bounded) for a moment with no store call in flight."""
        end = time.monotonic() + self.options.yield_s
        gate = self.state.gate
        while gate.in_flight and time.monotonic() < end and not stop.is_set():
            time.sleep(0.001)

    def _rewarm_batch(
        self, batch: list[tuple[str, int]], budget: RateBudget, stop: threading.Event
    ) -> bool | None:
        """Copy ``batch`` SSD -> DRAM; True when DRAM is at its low watermark (stop), None when the
        store has no DRAM or no SSD tier any more."""
        store = self.state
        lay = store.layout
        dram, ssd = lay.dram, lay.ssd
        if dram is None or ssd is None:
            return None
        with store.lock:
            placement = store.placement
            if placement is None:
                return None
            todo = [(key, size) for key, size in batch if placement.tier_of(key) == SSD]
            if todo and placement.dram_used + sum(size for _, size in todo) > placement.dram_capacity:
                return True
        if not todo:
            return False
        left = sum(size for _, size in todo)
        while left > 0:  # in pieces no larger than the bucket, so a large batch still passes
            piece = min(left, int(budget.capacity)) if budget.rate is not None else left
            while not budget.try_take(piece):
                if stop.wait(0.01):
                    return False
            left -= piece
        bufs = [np.empty(size, dtype=np.uint8) for _, size in todo]
        generation = dram.generation  # before the read: pages read before a clear never land after it
        deadline = time.monotonic() + store.options.timeout_s
        got = ssd.engine.get_batch_into(
            [(key, [b.data]) for (key, _), b in zip(todo, bufs, strict=True)], deadline
        )
        ctx = AccessContext(promoted=True)
        items = [
            (key, [b.data], ctx._replace(size=size))
            for (key, size), b, ok in zip(todo, bufs, got, strict=True)
            if ok
        ]
        landed = dram.put_batch(items, deadline, generation) if items else []
        full = False
        with store.lock:
            placement = store.placement
            unwanted = []
            for (key, _parts, _ctx), ok in zip(items, landed, strict=True):
                if not ok or placement is None:
                    continue
                if placement.tier_of(key) == DRAM:
                    continue  # SGLang's calls brought it up meanwhile
                if placement.warm(key):
                    self.counts["rewarmed_pages"] += 1
                    self.counts["rewarmed_bytes"] += _ctx.size
                else:
                    unwanted.append(key)
                    full = full or placement.tier_of(key) == SSD
            dram.remove_batch(unwanted)
        return full

    def close(self) -> None:
        self._stop.set()
        self.stop_rewarm()
        if self._ticker is not None:
            self._ticker.join(2.0)
            self._ticker = None

    def stats(self) -> dict[str, Any]:
        return {
            **dict(self.counts),
            **self.last_restore,
            "rewarming": self._rewarmer is not None and self._rewarmer.is_alive(),
        }
