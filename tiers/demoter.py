"""Background mover from DRAM to SSD: watermark demotion and write-through copies.

One daemon thread. When DRAM use passes ``high_watermark`` it takes victims from the DRAM
policy (their slots stay pinned, so the bytes stay valid) until use is at ``low_watermark``,
writes the admitted ones to SSD in one batch, then releases the slots. Keys queued by
write-through are copied from DRAM the same way without evicting them. Foreground sets only
``notify()``; they never wait for the disk.

Failure semantics: an SSD write that fails loses only the SSD copy (the page is then simply not
on SSD); the thread logs, counts and keeps going. ``close()`` stops the thread within
``join_timeout_s`` and leaves no slot pinned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence

from .dram_tier import DramTier, Victim
from .policy import AccessContext
from .ssd_tier import SsdTier

log = logging.getLogger(__name__)
_CTX = AccessContext(demoted=True)


class Demoter:
    def __init__(
        self,
        dram: DramTier,
        ssd: SsdTier,
        high_watermark: float = 0.9,
        low_watermark: float = 0.75,
        batch_items: int = 64,
        interval_s: float = 0.05,
        join_timeout_s: float = 10.0,
    ) -> None:
        self.dram, self.ssd = dram, ssd
        self.high, self.low = high_watermark, low_watermark
        self.batch_items = batch_items
        self.interval_s = interval_s
        self.join_timeout_s = join_timeout_s
        self.watermarks = True
        """False when a placement decides demotions (``move_later``) instead of the watermarks."""
        self.counts: Counter[str] = Counter()
        self._queue: deque[str] = deque()
        self._moves: deque[str] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._working = False
        self._thread = threading.Thread(target=self._run, name="hicache-demoter", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """Cheap; called after sets. Wakes the thread only when there is work."""
        if self._queue or self._moves or (self.watermarks and self.dram.used_fraction > self.high):
            self._wake.set()

    def move_later(self, keys: Sequence[str]) -> None:
        """Placement-driven demotion: copy these keys to SSD (unless there), then drop them from DRAM."""
        if keys:
            self._moves.extend(keys)
            self._wake.set()

    def copy_later(self, keys: Sequence[str]) -> None:
        """Write-through: copy these DRAM-resident keys to SSD in the background."""
        self._queue.extend(keys)
        self._wake.set()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until queued copies and moves are written and DRAM is under the high watermark."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._idle.clear()
            self._wake.set()
            self._idle.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            if not self._working and not self._pending_work():
                return True
        return False

    def _pending_work(self) -> bool:
        return bool(self._queue or self._moves) or (self.watermarks and self.dram.used_fraction > self.high)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._working = True
            try:
                busy = self._copy_queued() | self._move_queued() | self._demote()
            except Exception:
                self.counts["errors"] += 1
                log.exception("background demotion failed; retrying")
                busy = False
            finally:
                self._working = False
            if busy:
                self._wake.set()
            elif not self._pending_work():
                self._idle.set()

    def _copy_queued(self) -> bool:
        keys: list[str] = []
        while self._queue and len(keys) < self.batch_items:
            keys.append(self._queue.popleft())
        if not keys:
            return False
        todo = [k for k in keys if not self.ssd.contains(k)]
        pinned = [v for v in self.dram.pin_entries(todo) if v is not None]
        try:
            self._write(pinned, "copied")
        finally:
            self.dram.release(pinned)
        return True

    def move_now(self) -> None:
        """Run queued moves in the caller's thread (back-pressure when DRAM is physically full:
        the set waits for the disk rather than dropping pages that exist nowhere else)."""
        while self._moves:
            self.counts["moves_in_foreground"] += 1
            self._move_queued()

    def _move_queued(self) -> bool:
        keys: list[str] = []
        while self._moves and len(keys) < self.batch_items:
            keys.append(self._moves.popleft())
        if not keys:
            return False
        pinned = [v for v in self.dram.pin_entries(keys) if v is not None]
        try:
            todo = [v for v in pinned if not self.ssd.contains(v.key)]
            self._write(todo, "demoted")
        finally:
            self.dram.release(pinned)
        for v in pinned:
            self.dram.remove(v.key)
        return True

    def _demote(self) -> bool:
        if not self.watermarks or self.dram.used_fraction <= self.high:
            return False
        target = int(self.low * self.dram.stats()["capacity_bytes"])
        victims = self.dram.take_victims(target, self.batch_items)
        try:
            todo = [v for v in victims if not self.ssd.contains(v.key)]
            self.counts["already_on_ssd"] += len(victims) - len(todo)
            self._write(todo, "demoted")
        finally:
            self.dram.release(victims)
        return bool(victims)

    def _write(self, entries: Sequence[Victim], label: str) -> None:
        admitted = [v for v in entries if self.ssd.admit(v.key, v.nbytes, v.hits)]
        if not admitted:
            return
        ok = self.ssd.put_batch([(v.key, [v.data.data], _CTX) for v in admitted])
        self.counts[label] += sum(ok)
        self.counts[f"{label}_failed"] += len(ok) - sum(ok)

    def drain_dram(self, timeout_s: float) -> int:
        """Copy every DRAM page that the SSD lacks to the SSD (detach: the next attach finds them).
        Runs in the caller's thread after ``close``; stops at the deadline. Returns pages written."""
        deadline = time.monotonic() + timeout_s
        keys = self.dram.keys()
        before = self.counts["flushed"]
        for start in range(0, len(keys), self.batch_items):
            if time.monotonic() > deadline:
                self.counts["flush_timed_out"] += 1
                break
            chunk = [k for k in keys[start : start + self.batch_items] if not self.ssd.contains(k)]
            pinned = [v for v in self.dram.pin_entries(chunk) if v is not None]
            try:
                self._write(pinned, "flushed")
            finally:
                self.dram.release(pinned)
        return self.counts["flushed"] - before

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(self.join_timeout_s)
        if self._thread.is_alive():
            log.warning("demoter thread did not stop within %.1fs", self.join_timeout_s)

    def stats(self) -> dict[str, int]:
        return {**dict(self.counts), "queued": len(self._queue) + len(self._moves)}
