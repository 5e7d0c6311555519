"""Which tiers a ``TieredStore`` has right now (``TierLayout``), and the gate that lets the store
change them while SGLang's threads keep calling (``CallGate``).

A layout is immutable: a runtime change (attach, detach) builds a new one and publishes it with
one attribute store, so a call reads each tier attribute atomically. A call that started before
the change may still hold a tier the new layout no longer has; the gate says when every such call
is over (``CallGate.quiesce``): only then is a removed tier closed. Tier methods are thread-safe
and a closed tier answers miss / False (``tier.py``), so even a call that outlives a bounded
quiesce never reads wrong bytes: it misses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .dram_tier import DramTier
from .mover import Mover
from .ssd_tier import SsdTier
from .tier import Tier


@dataclass(frozen=True)
class TierLayout:
    """The tiers in read order (fastest first) and the roles the store gives them."""

    tiers: tuple[Tier, ...]
    dram: DramTier | None
    ssd: SsdTier | None
    pools: tuple[Tier, ...]
    mover: Mover | None

    @staticmethod
    def of(tiers: Sequence[Tier], mover: Mover | None = None) -> TierLayout:
        dram = next((t for t in tiers if isinstance(t, DramTier)), None)
        ssd = next((t for t in tiers if isinstance(t, SsdTier)), None)
        pools = tuple(t for t in tiers if t is not dram and t is not ssd)
        return TierLayout(tuple(tiers), dram, ssd, pools, mover)

    def names(self) -> list[str]:
        return [t.name for t in self.tiers]


class CallGate:
    """Counts the store calls in flight per generation. ``advance`` starts a new generation (after
    a new layout is published); ``quiesce`` waits until the calls of older generations are over.

    Two small lock holds per call (a plain lock: ``with`` on a ``Condition`` runs Python-level
    methods, and a call's end notifies only while a ``quiesce`` waits); no call ever waits here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._generation = 0
        self._active: dict[int, int] = {}
        self._waiting = 0  # quiesce calls waiting on _cond

    def enter(self) -> int:
        with self._lock:
            gen = self._generation
            self._active[gen] = self._active.get(gen, 0) + 1
            return gen

    def exit(self, gen: int) -> None:
        with self._lock:
            left = self._active[gen] - 1
            if left:
                self._active[gen] = left
            else:
                del self._active[gen]
                if self._waiting:
                    self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        """Calls running now (all generations)."""
        with self._cond:
            return sum(self._active.values())

    def advance(self) -> int:
        """Start a new generation; returns it."""
        with self._cond:
            self._generation += 1
            return self._generation

    def quiesce(self, generation: int, deadline: float) -> bool:
        """Wait until no call older than ``generation`` runs (True) or the deadline passes."""
        with self._cond:
            while any(gen < generation for gen in self._active):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._waiting += 1
                try:
                    self._cond.wait(min(left, 0.1))
                finally:
                    self._waiting -= 1
            return True
