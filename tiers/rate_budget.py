"""A token bucket in bytes per second that says no instead of waiting.

Used to keep SSD writes within a budget: a write over budget is dropped (the page stays a miss
on SSD), never delayed, so a burst can not stall SGLang's threads behind the disk.
"""

from __future__ import annotations

import threading
import time


class RateBudget:
    def __init__(self, bytes_per_s: float | None, burst_s: float = 1.0) -> None:
        self.rate = bytes_per_s
        self.capacity = (bytes_per_s or 0.0) * burst_s
        self._tokens = self.capacity
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def try_take(self, nbytes: int) -> bool:
        """Take ``nbytes`` if the bucket holds them (True), else take nothing (False)."""
        return self.take_each([nbytes])[0]

    def take_each(self, sizes: list[int]) -> list[bool]:
        """``try_take`` of each size in order, at one instant (one refill, one lock hold)."""
        if self.rate is None:
            return [True] * len(sizes)
        out = []
        with self._lock:
            now = time.monotonic()
            tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            for n in sizes:
                ok = n <= tokens
                if ok:
                    tokens -= n
                out.append(ok)
            self._tokens = tokens
        return out
