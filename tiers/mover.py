"""Moves pages DRAM -> SSD for the store: demotions the placement decided, write-through copies,
and the bounded flush at detach.

One daemon thread works the queues in batches; foreground sets never wait for it, except
``make_room`` (the store's back-pressure when DRAM has no free slot), which runs queued demotions
in the caller's thread and stops at the caller's deadline.

A demotion pins the DRAM entry (its bytes stay valid), writes it to SSD unless already there and
admitted (``SsdTier.admit``: hit gate and write budget), then reports back through
``MoveListener``: ``moved`` keys now have an SSD copy (the store frees their DRAM slot unless the
placement wants them in DRAM again), ``lost`` keys could not be written (refused by admission,
I/O error, deadline) and have no other local copy (the store forgets them). Nothing is dropped
without the store being told, so the placement never believes in a page no tier holds.

``pause`` holds the queues (the store is frozen: nothing is written) until ``resume``.

Clear: every move reads the SSD epoch before it pins DRAM entries and writes for that epoch
only, so a page pinned before a ``clear`` is never written into the epoch after it.

Failure semantics: a failed SSD write loses only that page's local copy (counted); the thread
logs and keeps going. Every SSD call carries a deadline (``timeout_s``). ``close`` stops the
thread within ``join_timeout_s``; a thread stuck in a stalled disk call is a daemon and never
blocks the caller or interpreter exit.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import Protocol

from .dram_tier import DramTier, Pinned
from .policy import AccessContext
from .ssd_tier import SsdTier

log = logging.getLogger(__name__)
_CTX = AccessContext(demoted=True)


class MoveListener(Protocol):
    def moved(self, keys: Sequence[str]) -> None:
        """``keys`` have an SSD copy now: their DRAM copies may go."""

    def lost(self, keys: Sequence[str]) -> None:
        """``keys`` could not be written to SSD and are to leave DRAM: no local copy remains."""


class Mover:
    def __init__(
        self,
        dram: DramTier,
        ssd: SsdTier,
        listener: MoveListener,
        timeout_s: float = 5.0,
        batch_items: int = 64,
        interval_s: float = 0.05,
        join_timeout_s: float = 2.0,
    ) -> None:
        self.dram, self.ssd = dram, ssd
        ssd.register_memory(dram.memory_regions())  # demotions are written from the arena
        self.listener = listener
        self.timeout_s = timeout_s
        self.batch_items = batch_items
        self.interval_s = interval_s
        self.join_timeout_s = join_timeout_s
        self.counts: Counter[str] = Counter()
        self._demotions: deque[str] = deque()
        self._copies: deque[str] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._idle = threading.Event()
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="hicache-mover", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ queueing (cheap)
    def demote_later(self, keys: Sequence[str]) -> None:
        if keys:
            self._demotions.extend(keys)
            self._wake.set()

    def copy_later(self, keys: Sequence[str]) -> None:
        """Write-through: copy these DRAM pages to SSD (they stay in DRAM)."""
        if keys:
            self._copies.extend(keys)
            self._wake.set()

    def pause(self) -> None:
        """Hold the queues (the batch in flight finishes); ``resume`` goes on."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()
        self._wake.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def queued(self) -> int:
        return len(self._demotions) + len(self._copies)

    # ------------------------------------------------------------------ foreground
    def make_room(self, nbytes: int, count: int, deadline: float) -> bool:
        """Run queued demotions in the caller's thread until DRAM has ``count`` free slots for
        objects of ``nbytes`` or the deadline passes. True when the room is there."""
        while self.dram.free_objects(nbytes) < count:
            if not self._demotions or time.monotonic() >= deadline:
                return False
            self.counts["demotions_in_foreground"] += 1
            self._demote(self._take(self._demotions), deadline)
        return True

    @property
    def busy(self) -> bool:
        """A batch is in flight (taken from a queue, not yet reported to the listener)."""
        return self._busy > 0

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until both queues are worked off (tests, replay, detach)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._idle.clear()
            self._wake.set()
            if not self.queued and not self._busy:
                return True
            self._idle.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        return not self.queued and not self._busy

    def drain_dram(self, timeout_s: float) -> int:
        """Copy every DRAM page the SSD lacks to the SSD (detach: the next attach finds them);
        stops at the deadline. Run after ``close``. Returns the pages written."""
        deadline = time.monotonic() + timeout_s
        keys = self.dram.keys()
        before = self.counts["flushed"]
        for start in range(0, len(keys), self.batch_items):
            if time.monotonic() >= deadline:
                self.counts["flush_timed_out"] += 1
                break
            batch = keys[start : start + self.batch_items]
            chunk = [k for k, on_ssd in zip(batch, self.ssd.contains_batch(batch), strict=True) if not on_ssd]
            epoch = self.ssd.epoch  # before the pin: bytes pinned before a clear are not written after it
            pinned = [p for p in self.dram.pin_entries(chunk) if p is not None]
            try:
                self._write(pinned, "flushed", deadline, epoch)
            finally:
                self.dram.release(pinned)
        return self.counts["flushed"] - before

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if not self._running.is_set():
                self._idle.set()
                continue
            with self._busy_lock:
                self._busy += 1
            try:
                worked = False
                if self._copies:
                    self._copy(self._take(self._copies), time.monotonic() + self.timeout_s)
                    worked = True
                if self._demotions and not self._stop.is_set():
                    self._demote(self._take(self._demotions), time.monotonic() + self.timeout_s)
                    worked = True
            except Exception:
                self.counts["errors"] += 1
                log.exception("background DRAM -> SSD move failed; retrying")
                worked = False
            finally:
                with self._busy_lock:
                    self._busy -= 1
            if worked:
                self._wake.set()
            elif not self.queued:
                self._idle.set()

    def _take(self, queue: deque[str]) -> list[str]:
        keys: list[str] = []
        while len(keys) < self.batch_items:
            try:
                keys.append(queue.popleft())
            except IndexError:
                break
        return keys

    def _copy(self, keys: list[str], deadline: float) -> None:
        todo = [k for k, on_ssd in zip(keys, self.ssd.contains_batch(keys), strict=True) if not on_ssd]
        epoch = self.ssd.epoch
        pinned = [p for p in self.dram.pin_entries(todo) if p is not None]
        try:
            self._write(pinned, "copied", deadline, epoch)
        finally:
            self.dram.release(pinned)

    def _demote(self, keys: list[str], deadline: float) -> None:
        if not keys:
            return
        epoch = self.ssd.epoch
        pinned_or_none = self.dram.pin_entries(keys)
        pinned = [p for p in pinned_or_none if p is not None]
        moved: list[str] = []
        lost: list[str] = []
        try:
            todo: list[Pinned] = []
            on_ssd = self.ssd.contains_batch(keys)  # one index lookup for the batch
            for key, p, there in zip(keys, pinned_or_none, on_ssd, strict=True):
                if there:
                    moved.append(key)
                elif p is None:
                    lost.append(key)  # neither in DRAM nor on SSD any more
                else:
                    todo.append(p)
            written = self._write(todo, "demoted", deadline, epoch)
            moved.extend(written)
            done = set(written)
            lost.extend(p.key for p in todo if p.key not in done)
        finally:
            self.dram.release(pinned)
        if moved:
            self.listener.moved(moved)
        if lost:
            self.counts["lost"] += len(lost)
            self.listener.lost(lost)

    def _write(self, entries: Sequence[Pinned], label: str, deadline: float, epoch: int) -> list[str]:
        """Write admitted entries to SSD; returns the keys written. ``epoch``: the SSD epoch read
        before the entries were pinned (a clear since: nothing is written, ``SsdEngine.put_batch``)."""
        flags = self.ssd.admit_batch([p.nbytes for p in entries], [p.hits for p in entries])
        admitted = list(itertools.compress(entries, flags))
        self.counts[f"{label}_refused"] += len(entries) - len(admitted)
        if not admitted:
            return []
        ok = self.ssd.put_batch([(p.key, [p.data.data], _CTX) for p in admitted], deadline, epoch)
        self.counts[label] += sum(ok)
        self.counts[f"{label}_failed"] += len(ok) - sum(ok)
        return [p.key for p, good in zip(admitted, ok, strict=True) if good]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._stop.set()
        self._running.set()
        self._wake.set()
        self._thread.join(self.join_timeout_s)
        if self._thread.is_alive():
            log.warning(
                "the DRAM -> SSD mover did not stop within %.1fs (disk stalled?)", self.join_timeout_s
            )

    def stats(self) -> dict[str, int]:
        return {**dict(self.counts), "queued": self.queued}
