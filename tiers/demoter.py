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
        self.counts: Counter[str] = Counter()
        self._queue: deque[str] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hicache-demoter", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """Cheap; called after sets. Wakes the thread only when there is work."""
        if self._queue or self.dram.used_fraction > self.high:
            self._wake.set()

    def copy_later(self, keys: Sequence[str]) -> None:
        """Write-through: copy these DRAM-resident keys to SSD in the background."""
        self._queue.extend(keys)
        self._wake.set()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until queued copies are written and DRAM is under the high watermark (tests, detach)."""
        self._idle.clear()
        self._wake.set()
        return self._idle.wait(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            try:
                busy = self._copy_queued() | self._demote()
            except Exception:
                self.counts["errors"] += 1
                log.exception("background demotion failed; retrying")
                busy = False
            if not busy and not self._queue:
                self._idle.set()
            elif busy:
                self._wake.set()

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

    def _demote(self) -> bool:
        if self.dram.used_fraction <= self.high:
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

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(self.join_timeout_s)
        if self._thread.is_alive():
            log.warning("demoter thread did not stop within %.1fs", self.join_timeout_s)

    def stats(self) -> dict[str, int]:
        return {**dict(self.counts), "queued": len(self._queue)}
