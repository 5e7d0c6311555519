"""A running get/set load on a real ``TieredStore``, as SGLang's threads put it: ``threads`` threads
each ask ``exists_prefix`` for a request's pages, read the hit run (every byte checked against the
page's known content), and store the rest with the hit run as prefix. Used by the tests of runtime
operations: the operation runs while the load runs, and the load must see no wrong byte and no
exception, whatever the operation does.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hicache_mooncake.tiers.tiered_store import TieredStore

PAGE = 16 << 10


def page_bytes(key: str, size: int = PAGE) -> np.ndarray:
    """The content of ``key``'s page: a pattern no other key has, on every byte."""
    block = np.frombuffer(hashlib.blake2b(key.encode()).digest(), dtype=np.uint8)
    return np.resize(block, size) ^ np.uint8(len(key) & 0xFF)


def parts(arr: np.ndarray) -> list[memoryview]:
    half = len(arr) // 2
    return [memoryview(arr[:half]), memoryview(arr[half:])]


@dataclass
class LoadStats:
    counts: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)


class StoreLoad:
    """``threads`` threads of requests over ``requests`` chains of ``pages`` pages each (module doc).

    ``key_of(request, page)`` names the keys (default ``m/base/r{request}p{page}``: the default
    tenant). Use as a context manager; ``stats`` holds the counts, wrong keys and exceptions."""

    def __init__(
        self,
        store: TieredStore,
        threads: int = 4,
        requests: int = 200,
        pages: int = 8,
        key_of: Callable[[int, int], str] | None = None,
        seed: int = 0,
        size: int = PAGE,
    ) -> None:
        self.store = store
        self.threads = threads
        self.requests = requests
        self.pages = pages
        self.key_of = key_of or (lambda r, p: f"m/base/r{r}p{p}")
        self.size = size
        self.stats = LoadStats()
        self._stop = threading.Event()
        self._seed = seed
        self._workers: list[threading.Thread] = []
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def content(self, key: str) -> np.ndarray:
        arr = self._cache.get(key)
        if arr is None:
            arr = page_bytes(key, self.size)
            self._cache[key] = arr
        return arr

    def __enter__(self) -> StoreLoad:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(self._seed + i,), name=f"load-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadStats:
        self._stop.set()
        for t in self._workers:
            t.join(30)
        self._workers = []
        return self.stats

    def wait_ops(self, calls: int, timeout_s: float = 60.0) -> None:
        """Wait until the threads made ``calls`` more calls (the load is really running)."""
        start = self.stats.counts["calls"]
        end = time.monotonic() + timeout_s
        while self.stats.counts["calls"] - start < calls and time.monotonic() < end:
            time.sleep(0.01)

    def _count(self, **values: int) -> None:
        with self._lock:
            self.stats.counts.update(values)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self._stop.is_set():
            # skewed popularity: a few requests are hot, most are lukewarm
            r = min(int(rng.expovariate(1.0 / (self.requests / 4))), self.requests - 1)
            keys = [self.key_of(r, p) for p in range(self.pages)]
            try:
                self._request(keys)
            except BaseException as exc:  # noqa: BLE001 - the test asserts there is none
                with self._lock:
                    self.stats.errors.append(exc)
                    self.stats.tracebacks.append(traceback.format_exc())
                return

    def _request(self, keys: Sequence[str]) -> None:
        store = self.store
        hit = store.exists_prefix(keys)
        read = 0
        if hit:
            bufs = [np.zeros(self.size, np.uint8) for _ in range(hit)]
            ok = store.get_batch_into(keys[:hit], [parts(b) for b in bufs])
            for key, buf, good in zip(keys[:hit], bufs, ok, strict=True):
                if not good:
                    break
                read += 1
                if not np.array_equal(buf, self.content(key)):
                    with self._lock:
                        self.stats.wrong.append(key)
        rest = keys[read:]
        stored = store.put_batch(
            rest, [parts(self.content(k)) for k in rest], keys[read - 1] if read else None, read
        )
        self._count(
            calls=3,
            pages=len(keys),
            read=read,
            asked=hit,
            stored=sum(stored),
            refused=len(rest) - sum(stored),
        )

    def assert_clean(self) -> None:
        assert not self.stats.errors, f"the load raised: {self.stats.tracebacks[0]}"
        assert not self.stats.wrong, (
            f"wrong bytes read for {len(self.stats.wrong)} pages: {self.stats.wrong[:5]}"
        )
        assert self.stats.counts["read"] > 0, f"the load read nothing: {dict(self.stats.counts)}"
