"""W-TinyLFU (Einziger et al., ToS'17): a small LRU window, an SLRU main cache, and a
frequency-sketch admission filter between them.

New keys enter the window (``window_ratio`` of resident keys). When the window overflows, its
LRU key moves to the main cache's probation segment as the *candidate*; when the cache must give
up a key, the candidate and probation's LRU key (the victim) are compared by their estimated
access frequency (a count-min sketch of 4 rows; every ``sample_factor`` x peak-resident
increments all counters are halved, so old popularity fades) and the less frequent one is
evicted (a tie evicts the candidate: admission must be earned). Main is an SLRU: a hit in
probation moves the key to the protected segment (``protected_ratio`` of main); protected
overflow falls back to probation. (Until issue 14 the window overflow only moved on eviction and
an empty main cache evicted the candidate, so main stayed empty and the policy was plain LRU.)

``should_admit`` is the same filter used as a tier gate (e.g. SSD admission of demoted pages):
a key is admitted when its estimated frequency is at least ``admit_min_freq`` (0: admit all).

Invariants:
- Each resident key is in exactly one of window, probation, protected.
- ``pop_victim`` returns a resident key; frequency counters never exceed 15.
- Deterministic (the sketch hashes with a fixed-seed blake2b, not Python's randomized ``hash``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy
from .registry import register_policy

_ROWS = 4
_MAX_COUNT = 15


class CountMinSketch:
    """4-row count-min sketch with 4-bit saturating counters and periodic halving (aging)."""

    def __init__(self, width: int = 1 << 12, sample: int = 10 * (1 << 12)) -> None:
        self.width = max(16, 1 << (max(1, width) - 1).bit_length())
        self.sample = max(1, sample)
        self._rows = [[0] * self.width for _ in range(_ROWS)]
        self._additions = 0

    def _indexes(self, key: str) -> list[int]:
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        mask = self.width - 1
        return [int.from_bytes(digest[4 * i : 4 * i + 4], "little") & mask for i in range(_ROWS)]

    def estimate(self, key: str) -> int:
        return min(row[i] for row, i in zip(self._rows, self._indexes(key), strict=True))

    def increment(self, key: str) -> None:
        idx = self._indexes(key)
        current = min(row[i] for row, i in zip(self._rows, idx, strict=True))
        if current < _MAX_COUNT:
            for row, i in zip(self._rows, idx, strict=True):
                if row[i] == current:  # conservative update
                    row[i] += 1
        self._additions += 1
        if self._additions >= self.sample:
            self.age()

    def age(self) -> None:
        """Halve every counter (popularity decays)."""
        self._additions //= 2
        for row in self._rows:
            for i, v in enumerate(row):
                row[i] = v >> 1

    def resize(self, width: int, sample: int) -> None:
        """Grow to ``width`` counters per row (counts restart); used as the cache grows."""
        self.__init__(width, sample)  # type: ignore[misc]


@register_policy
class TinyLfuPolicy(EvictionPolicy):
    name = "tinylfu"

    def __init__(
        self,
        window_ratio: float = 0.01,
        protected_ratio: float = 0.8,
        sample_factor: int = 10,
        admit_min_freq: int = 0,
    ) -> None:
        if not 0.0 < window_ratio < 1.0:
            raise ValueError(f"tinylfu window_ratio must be in (0, 1), got {window_ratio}")
        if not 0.0 < protected_ratio < 1.0:
            raise ValueError(f"tinylfu protected_ratio must be in (0, 1), got {protected_ratio}")
        if sample_factor < 1:
            raise ValueError(f"tinylfu sample_factor must be >= 1, got {sample_factor}")
        self.window_ratio = window_ratio
        self.protected_ratio = protected_ratio
        self.sample_factor = sample_factor
        self.admit_min_freq = admit_min_freq
        self.sketch = CountMinSketch(1 << 10, sample_factor << 10)
        self._window: OrderedDict[str, None] = OrderedDict()
        self._probation: OrderedDict[str, None] = OrderedDict()
        self._protected: OrderedDict[str, None] = OrderedDict()
        self._peak = 0
        self._cands: OrderedDict[str, None] = OrderedDict()  # window overflow not yet dueled

    def _grow(self) -> None:
        n = len(self)
        if n > self._peak:
            self._peak = n
            if n > self.sketch.width:
                self.sketch.resize(2 * n, self.sample_factor * 2 * n)

    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self:
            self.on_hit(key, ctx)
            return
        self.sketch.increment(key)
        self._window[key] = None
        self._grow()
        limit = max(1, int(self.window_ratio * self._peak))
        while len(self._window) > limit:
            cand, _ = self._window.popitem(last=False)
            self._probation[cand] = None
            self._cands[cand] = None

    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        if key in self._window:
            self.sketch.increment(key)
            self._window.move_to_end(key)
        elif key in self._probation:
            self.sketch.increment(key)
            del self._probation[key]
            self._cands.pop(key, None)
            self._protected[key] = None
            limit = max(1, int(self.protected_ratio * (len(self._probation) + len(self._protected))))
            while len(self._protected) > limit:
                old, _ = self._protected.popitem(last=False)
                self._probation[old] = None
        elif key in self._protected:
            self.sketch.increment(key)
            self._protected.move_to_end(key)

    def on_miss(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        self.sketch.increment(key)

    def on_remove(self, key: str) -> None:
        self._window.pop(key, None)
        self._probation.pop(key, None)
        self._protected.pop(key, None)
        self._cands.pop(key, None)

    def pop_victim(self) -> str | None:
        if not self._probation and self._protected:
            old, _ = self._protected.popitem(last=False)
            self._probation[old] = None
        while self._cands:
            # the oldest undecided candidate duels probation's LRU key
            cand = next(iter(self._cands))
            del self._cands[cand]
            victim = next(iter(self._probation))
            if victim == cand:
                continue  # it is probation's LRU key itself: evicted below like any other
            if self.sketch.estimate(cand) > self.sketch.estimate(victim):
                del self._probation[victim]
                self._cands.pop(victim, None)
                return victim
            del self._probation[cand]
            return cand
        if self._probation:
            key, _ = self._probation.popitem(last=False)
            return key
        if self._protected:
            return self._protected.popitem(last=False)[0]
        if self._window:
            return self._window.popitem(last=False)[0]
        return None

    def should_admit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        if self.admit_min_freq <= 0:
            return True
        return self.sketch.estimate(key) >= self.admit_min_freq

    def __len__(self) -> int:
        return len(self._window) + len(self._probation) + len(self._protected)

    def __contains__(self, key: object) -> bool:
        return key in self._window or key in self._probation or key in self._protected

    def clear(self) -> None:
        self._window.clear()
        self._probation.clear()
        self._protected.clear()
        self._cands.clear()
