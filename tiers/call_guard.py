"""``CallGuard``: a deadline on calls into native code that cannot be interrupted, plus a breaker.

A guarded call runs on one of ``workers`` threads; the caller waits at most its deadline, then
gets ``None`` (the tier answers misses / refused writes) while the call finishes on its own.
After a timeout or ``PoolUnavailable`` the guard *opens*: every call is answered ``None`` at once
(no thread, no wait) and one background thread calls ``probe()`` every ``retry_interval_s``
until it returns True, then the guard closes again. So a dead pool costs SGLang one deadline,
not one per call, and the tier rejoins by itself when the pool is back.

Invariants: at most ``workers`` calls are in flight (calls past their deadline included); when
all are busy a new call is answered ``None`` at once rather than queued. A call that outlives its
deadline keeps the buffers it was given until it returns (the guard cannot cancel native code):
callers bound that window by configuring the native client's own timeouts below the deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from .pool_providers.base import PoolUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class CallGuard:
    def __init__(
        self,
        probe: Callable[[], bool],
        workers: int = 8,
        retry_interval_s: float = 1.0,
        name: str = "hicache-pool",
    ) -> None:
        self._probe = probe
        self.workers = workers
        self.retry_interval_s = retry_interval_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._open = False
        self._closed = False
        self._wake = threading.Event()
        self._prober: threading.Thread | None = None
        self._name = name
        self.counters: Counter[str] = Counter()

    @property
    def is_open(self) -> bool:
        return self._open

    def call(self, fn: Callable[[], T], deadline_s: float) -> T | None:
        """``fn()`` within ``deadline_s``; ``None`` on timeout, while open, when saturated, or
        when ``fn`` raised ``PoolUnavailable`` (which opens the guard)."""
        with self._lock:
            if self._closed or self._open:
                self.counters["short_circuited"] += 1
                return None
            if self._in_flight >= self.workers:
                self.counters["saturated"] += 1
                return None
            self._in_flight += 1
        try:
            future = self._pool.submit(self._run, fn)
        except RuntimeError:  # shut down meanwhile
            self._done()
            return None
        try:
            return future.result(timeout=deadline_s)
        except FutureTimeout:
            self.counters["timeouts"] += 1
            self.trip(f"a call exceeded its {deadline_s:g} s deadline")
        except PoolUnavailable as exc:
            self.counters["unavailable"] += 1
            self.trip(str(exc) or "pool unavailable")
        return None

    def _run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        finally:
            self._done()

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def trip(self, why: str) -> None:
        """Open the guard (idempotent) and start probing in the background."""
        with self._lock:
            if self._open or self._closed:
                return
            self._open = True
            self.counters["trips"] += 1
            self._wake.clear()
            self._prober = threading.Thread(target=self._probe_loop, name=f"{self._name}-probe", daemon=True)
            self._prober.start()
        log.warning("hicache-mooncake: remote pool unreachable (%s); answering misses until it is back", why)

    def _probe_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.retry_interval_s)
            if self._closed:
                return
            start = time.monotonic()
            try:
                ok = self._probe()
            except Exception:  # a probe failure is just "not yet"
                ok = False
            self.counters["probes"] += 1
            if ok:
                with self._lock:
                    self._open = False
                log.warning(
                    "hicache-mooncake: remote pool reachable again (probe took %.2f s)",
                    time.monotonic() - start,
                )
                return

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"open": self._open, "in_flight": self._in_flight, **dict(self.counters)}

    def close(self) -> None:
        """Answer every later call ``None``; stop probing; never waits for calls in flight."""
        with self._lock:
            self._closed = True
        self._wake.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
