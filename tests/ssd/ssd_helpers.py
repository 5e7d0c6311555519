"""Shared helpers for SSD engine tests: values derived from keys, so any wrong byte is detected."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import xxhash

from hicache_mooncake.ssd import SsdEngine, SsdOptions


def value_for(key: str, size: int) -> np.ndarray:
    """Deterministic bytes for ``key`` (fast: a keyed random generator)."""
    rng = np.random.default_rng(xxhash.xxh64_intdigest(key.encode()))
    return rng.integers(0, 256, size=size, dtype=np.uint8)


def size_for(key: str, lo: int, hi: int) -> int:
    return lo + xxhash.xxh32_intdigest(key.encode()) % (hi - lo + 1)


def split_parts(arr: np.ndarray, nparts: int) -> list[memoryview]:
    if nparts <= 1 or arr.size < nparts:
        return [memoryview(arr)]
    cuts = np.linspace(0, arr.size, nparts + 1).astype(int)
    return [memoryview(arr[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def aligned_array(size: int, align: int = 4096) -> np.ndarray:
    raw = np.empty(size + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + size]


def open_engine(directory: str | os.PathLike[str], **kw: Any) -> SsdEngine:
    opts: dict[str, Any] = {"dirs": (str(directory),), "capacity_bytes": 16 << 20, "region_size": 1 << 20}
    opts.update(kw)
    engine = SsdEngine(SsdOptions(**opts))
    assert engine.wait_recovered(120), "background recovery did not finish"
    return engine


def check_get(engine: SsdEngine, key: str, size: int, nparts: int = 1) -> bool:
    """get ``key``; asserts the bytes are right when the engine says hit. Returns hit/miss."""
    out = np.zeros(size, dtype=np.uint8)
    ok = engine.get_into(key, split_parts(out, nparts))
    if ok:
        assert np.array_equal(out, value_for(key, size)), f"wrong bytes served for {key}"
    return ok


def stall_writes(monkeypatch: Any) -> tuple[Any, Any]:
    """Make the engine's writes wait: returns ``(gate, entered)``; a put's write (its space
    reserved, its keys pending) sets ``entered`` when it starts and proceeds once ``gate`` is set
    (at most 10 s)."""
    import threading

    gate, entered = threading.Event(), threading.Event()
    from hicache_mooncake.ssd.writer import WritePath

    orig = WritePath.write_runs

    def slow_runs(self, *args):  # type: ignore[no-untyped-def]
        entered.set()
        gate.wait(10)
        return orig(self, *args)

    monkeypatch.setattr(WritePath, "write_runs", slow_runs)
    return gate, entered
