"""State shared by the engine's parts (:class:`EngineCore`), guarded by one lock.

Every part of the engine (allocator, write path, read path, reclaimer, epoch keeper) holds the
same core. Invariants:

* ``lock`` guards the index, the regions' states and pins, ``fifo``, ``pending``, ``counts``,
  ``epoch`` and ``seq``; it is never held during file I/O, payload hashing or callbacks;
* ``ops`` counts public data calls in flight; ``close`` waits (bounded) for it to reach zero;
* ``on_evict`` is called without the lock; ``keep`` is called with it (it must not block or call
  back into the engine);
* regions ``[0, region_limit)`` may be opened for writing; the others are *retired* (``resize``):
  their entries stay readable until reclaimed, and no new bytes go there;
* ``refusing`` (a reason) is set while no data call may touch the disk: an epoch bump that
  missed its deadline and has not reached the disk yet, or one that failed, in this life or a
  recorded earlier one (fail closed: cleared pages are never served; ``epoch``, ``clear_record``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from .buffer import BufferPool
from .health import Health
from .hugemem import HugeRanges
from .index import Index
from .io import IoPool
from .options import SsdOptions
from .region import Region

log = logging.getLogger("hicache_mooncake.ssd")


class EngineCore:
    def __init__(self, options: SsdOptions) -> None:
        self.options = options
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.closed = False
        self.ops = 0
        self.counts: Counter[str] = Counter()
        self.index = Index()
        self.regions: list[Region] = []
        self.region_limit = options.used_regions
        self.fifo: list[int] = []  # sealed region ids, oldest first
        self.epoch = 0
        self.boot = 0
        self.seq = 0
        self.direct = False
        self.io_mode = "buffered"
        self.io_mode_reason = ""
        self.pool: IoPool | None = None
        self.buffers = BufferPool()
        self.huge_memory = HugeRanges()  # caller memory written in place (stage_writes: auto)
        self.on_evict: Callable[[str], None] | None = None
        self.keep: Callable[[str], bool] | None = None
        self.health = Health(options.dirs, options.probe_timeout_s, options.probe_interval_s)
        self.refusing = ""

    def usable(self) -> bool:
        """Whether data calls may go to the disk now (not degraded, no clear outstanding)."""
        return not self.health.degraded and not self.refusing

    def timed_out(self, what: str, deadline: float) -> None:
        """``what`` did not finish by its deadline: count it and mark the disk degraded."""
        with self.lock:
            self.counts[f"timeouts_{what}"] += 1
        self.health.trip(f"{what} did not finish by its deadline")

    def io_failed(self, what: str, err: OSError) -> None:
        """An I/O error that is not a full disk (EIO...): the disk may be dying."""
        self.health.trip(f"{what} failed: {err}")

    def next_seq(self) -> int:
        """A new sequence number (lock held)."""
        self.seq += 1
        return self.seq

    def next_seqs(self, n: int) -> list[int]:
        """``n`` new sequence numbers, in order (lock held): ``next_seq`` ``n`` times."""
        first = self.seq + 1
        self.seq += n
        return list(range(first, self.seq + 1))

    def enter(self) -> bool:
        """Start a public data call; False when the engine is closed."""
        with self.lock:
            if self.closed:
                return False
            self.ops += 1
            return True

    def exit(self) -> None:
        with self.lock:
            self.ops -= 1
            if self.ops == 0:
                self.idle.notify_all()

    def notify_evicted(self, keys: Sequence[str]) -> None:
        """Report keys dropped by reclaim to ``on_evict`` (lock not held)."""
        cb = self.on_evict
        if cb is None:
            return
        for k in keys:
            try:
                cb(k)
            except Exception:  # noqa: BLE001 - a callback must not break the engine
                log.exception("on_evict callback failed for %r", k)
