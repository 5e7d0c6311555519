"""Local SSD tier: ``ssd.SsdEngine`` behind the ``Tier`` contract, plus the admission and
promotion rules of hot/cold movement.

- Admission (demotions and write-through copies): a page is written only if it was read at least
  ``admit_min_hits`` times in DRAM and the write fits the MB/s budget; otherwise it is dropped
  and counted (never blocked).
- Promotion: a page read from SSD ``promote_min_hits`` times is reported hot, and ``TieredStore``
  copies it into the tiers above (DRAM, and the pool when one is configured). Reads are counted
  per key fingerprint in a native table (no key string kept): two keys sharing a fingerprint
  share a count, which can only move a promotion earlier, never serve other bytes.
- Deadlines: ``put_batch`` / ``get_batch_into`` take an optional absolute ``deadline``
  (``time.monotonic()``; None: now + ``timeout_s``, the YAML's ``io.timeout_s``, as the ``Tier``
  contract says); ``clear`` and ``close`` are bounded by ``timeout_s``; ``contains`` and
  ``remove`` never wait for the disk. Work not done in time is a miss / False, and the tier is
  then *degraded*: every call answers at once (miss, False, not contained) until the engine's
  health probe passes again (``stats()["degraded"]``).
  Reads with a deadline land in engine memory first, so a read that completes late never writes
  into the caller's (reused) buffers.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

import numpy as np

from hicache_mooncake.native import FpTable, fingerprint, fingerprints
from hicache_mooncake.ssd import SsdEngine
from hicache_mooncake.ssd.format import BLOCK, entry_size

from .policy import AccessContext
from .rate_budget import RateBudget
from .tier import PutItem, Tier

_ITEM_KEY = operator.itemgetter(0)


class SsdTier(Tier):
    name = "ssd"

    def __init__(
        self,
        engine: SsdEngine,
        admit_min_hits: int = 0,
        promote_min_hits: int = 1,
        write_budget: RateBudget | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.timeout_s = timeout_s
        self.admit_min_hits = admit_min_hits
        self.promote_min_hits = promote_min_hits
        self.budget = write_budget or RateBudget(None)
        self._reads = FpTable(1, 1024)  # key fingerprint -> reads from SSD since it was stored
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.evict_listeners: list[Callable[[str], None]] = []
        engine.on_evict = self._forget

    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Memory pages will be written from (SGLang's host pool, the DRAM tier's arena): what is
        on huge pages is then written in place, the rest staged (``SsdEngine.register_memory``).
        The check runs on a thread (``SsdEngine.register_memory_later``): attach does not wait."""
        self.engine.register_memory_later(regions)

    def memory_checked(self, timeout_s: float | None = None) -> bool:
        """Wait until the memory given to ``register_memory`` is checked (benchmarks, tests)."""
        return self.engine.memory_checked(timeout_s)

    def _forget(self, key: str) -> None:
        """The engine dropped ``key`` (region reclaim): forget it here and tell listeners."""
        with self._lock:
            self._reads.remove(np.array([fingerprint(key)], np.uint64))
        self.events.removed(self.name, (key,))
        for listener in self.evict_listeners:
            listener(key)

    def fits(self, nbytes: int) -> bool:
        """Whether an object of ``nbytes`` can be stored at all (one entry within a region, the
        engine's own limit); room is another matter."""
        return nbytes <= self.engine.options.max_object_bytes

    def count_too_large(self, n: int) -> None:
        """``n`` pages larger than an entry can be were refused before reaching this tier (by the
        store): counted by the engine as if refused here."""
        self.engine.count_rejected("too_large", n)

    def capacity_objects(self, nbytes: int) -> int:
        """How many objects of ``nbytes`` the region files hold (entry = 4 KiB header + payload)."""
        opts = self.engine.options
        per_region = (opts.region_size - BLOCK) // entry_size(nbytes)
        return per_region * (self.engine.capacity_bytes // opts.region_size)

    # ------------------------------------------------------------------ admission
    def admit_batch(self, nbytes: Sequence[int], hits: Sequence[int]) -> list[bool]:
        """Whether each page leaving DRAM (or copied by write-through) is written here, in
        order: one read at least ``admit_min_hits`` times (else ``dropped_cold``) while the write
        budget has its bytes (else ``dropped_budget``; the budget taken in one step)."""
        warm = [h >= self.admit_min_hits for h in hits]
        cold = len(warm) - sum(warm)
        if cold:
            self.counts["dropped_cold"] += cold
        taken = iter(self.budget.take_each([n for n, w in zip(nbytes, warm, strict=True) if w]))
        out = [w and next(taken) for w in warm]
        dropped = sum(warm) - sum(out)
        if dropped:
            self.counts["dropped_budget"] += dropped
        return out

    def should_promote(self, key: str, ctx: AccessContext) -> bool:
        if self.promote_min_hits <= 0:
            return False
        fp = np.array([fingerprint(key)], np.uint64)
        with self._lock:
            hot = int(self._reads.get(fp)[1][0, 0]) >= self.promote_min_hits
        if hot:
            self.counts["promotions"] += 1
        return hot

    # ------------------------------------------------------------------ Tier
    def _deadline(self, given: float | None = None) -> float | None:
        """``given``, or (None) now + ``timeout_s`` (no deadline when the tier has no timeout)."""
        if given is not None:
            return given
        return None if self.timeout_s is None else time.monotonic() + self.timeout_s

    def contains_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> list[bool]:
        return self.engine.contains_batch(keys, fps)

    def entry_count(self) -> int:
        return self.engine.entry_count()

    @property
    def epoch(self) -> int:
        """The engine's clear epoch: read it before taking bytes that are to be written later
        (``put_batch``'s ``epoch``)."""
        return self.engine.epoch

    def put_batch(
        self,
        items: Sequence[PutItem],
        deadline: float | None = None,
        epoch: int | None = None,
    ) -> list[bool]:
        """``epoch``: as ``SsdEngine.put_batch`` (bytes taken before a clear are never indexed after it)."""
        if not items:
            return []
        done = self.engine.put_batch(
            [(key, parts) for key, parts, _ in items], self._deadline(deadline), epoch=epoch
        )
        self.events.stored(self.name, list(compress(map(_ITEM_KEY, items), done)))
        return done

    def get_batch_into(
        self, items: Sequence[PutItem], deadline: float | None = None, *, fps: np.ndarray | None = None
    ) -> list[bool]:
        """``fps``: the items' keys' fingerprints, for the read counts (the engine keeps its own)."""
        if not items:
            return []
        result = self.engine.get_batch_into(
            [(key, parts) for key, parts, _ in items], self._deadline(deadline)
        )
        if any(result):
            if fps is None:
                fps = fingerprints([key for key, _, _ in items])
            # one row per distinct fingerprint: a key read twice in one call counts twice
            fps, times = np.unique(fps[np.asarray(result, dtype=bool)], return_counts=True)
            with self._lock:
                counts = self._reads.get(fps)[1][:, 0]
                self._reads.put(fps, counts + times.astype(np.uint64))
        return result

    def remove_batch(self, keys: Sequence[str], fps: np.ndarray | None = None) -> int:
        """Index removals only (never waits for the disk); ``fps`` (the keys' fingerprints)
        forget their read counts in one native call (the engine still removes key by key)."""
        if not keys:
            return 0
        if fps is None:
            fps = fingerprints(keys)
        with self._lock:
            self._reads.remove(fps)
        gone = [key for key in keys if self.engine.remove(key)]
        if gone:
            self.events.removed(self.name, gone)
        return len(gone)

    def clear(self) -> None:
        """Durable clear within ``timeout_s``; if the new epoch is not on disk by then the tier
        serves nothing until it is (see ``SsdEngine.clear``)."""
        with self._lock:
            self._reads.clear()
        try:
            self.engine.clear(self._deadline())
        finally:  # a failed clear serves nothing until it is durable (``SsdEngine.clear``)
            self.events.cleared(self.name)

    def close(self) -> None:
        self.engine.close(self._deadline())

    def stats(self) -> dict[str, Any]:
        raw = self.engine.stats()
        return {
            "tier": self.name,
            "entries": raw.get("entries", 0),
            "used_bytes": raw.get("bytes", 0),
            "capacity_bytes": raw.get("capacity", 0),
            "io_mode": raw.get("io_mode"),
            **{k: v for k, v in raw.items() if k not in ("entries", "bytes", "capacity", "io_mode")},
            **dict(self.counts),
        }
