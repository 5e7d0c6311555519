"""Metric updates of the data path, queued per call and applied to their series in batches.

A Prometheus update is a handful of Python calls (a child lookup, a lock, a bucket search). Warm
that is a few microseconds per store call; right after the call's copy has evicted the caches it
is 30-40 us, and a DRAM get made two such groups (the backend's figures and the tier's timing
layer): about a fifth of what a 16-page get cost its thread cold on the project's VM
(``tools/bench/_cold_path.py``). The data path now appends one tuple per group to a deque (one
C-level call, thread-safe) and the updates run later, in order per thread:

- when anything reads the registry (``collect``: this object is registered in it BEFORE the
  series it feeds, so a scrape, ``get_sample_value`` or ``generate_latest`` applies every queued
  update before it reads one);
- when the backend drains or counts its ``get_stats`` samples;
- on the data path itself once ``limit`` updates wait, so memory stays bounded while nobody
  scrapes (one thread applies them all: about 1 ms per 512 calls, amortised).

Invariants: every queued update is applied exactly once (``popleft`` hands each to one flusher);
a reader sees every update queued before it started reading, except one another thread has taken
off the queue and is applying at that instant (the next read sees it); an update that raises is
logged and dropped (a metric bug never reaches the data path, and the rest still apply).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

LIMIT = 512
"""Queued updates from which the data path applies them itself (nobody scraped meanwhile)."""


class DeferredUpdates:
    """A queue of ``(apply, args)`` metric updates; also a Prometheus collector (module doc)."""

    def __init__(self, limit: int = LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._limit = limit

    def add(self, apply: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Queue ``apply(*args)``; apply the queue here once ``limit`` updates wait."""
        queue = self._queue
        queue.append((apply, args))
        if len(queue) >= self._limit:
            self.flush()

    def flush(self) -> None:
        """Apply every update queued so far (those queued meanwhile by other threads may be
        applied too)."""
        queue = self._queue
        while True:
            try:
                apply, args = queue.popleft()
            except IndexError:
                return
            try:
                apply(*args)
            except Exception:
                log.exception("a metric update failed (dropped)")

    def __len__(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------------ the registry's collector
    def describe(self) -> Iterable[Any]:
        return ()  # no series of its own (and no collect() at registration)

    def collect(self) -> Iterable[Any]:
        self.flush()
        return ()
