"""Zero-copy byte views of SGLang's host KV pool, addressed by the raw pointers it hands out.

``get_page_buffer_meta`` gives (pointer, size) runs. Making a ctypes object per run costs microseconds,
so at registration the pool's buffers are wrapped once as uint8 arrays and a run becomes a slice
of one of them (found by bisecting the sorted base addresses). A pointer outside every known
buffer (a pool class we do not know) falls back to a ctypes view, correct but slower.

Invariant: views are only valid while the host pool is alive; the backend drops this map on
``close``.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class HostMemoryMap:
    def __init__(self, tensors: Iterable[Any]) -> None:
        regions: dict[int, int] = {}
        for tensor in tensors:
            storage = tensor.untyped_storage()
            base, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes:
                regions[base] = max(nbytes, regions.get(base, 0))
        self._bases = sorted(regions)
        self._ends = [b + regions[b] for b in self._bases]
        self._arrays = [_array_at(b, regions[b]) for b in self._bases]
        self.fallback_views = 0

    def regions(self) -> list[memoryview]:
        """One writable byte view per distinct buffer of the pool (for memory registration)."""
        return [a.data for a in self._arrays]

    def view(self, ptr: int, nbytes: int) -> memoryview:
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0 and ptr + nbytes <= self._ends[i]:
            off = ptr - self._bases[i]
            return self._arrays[i][off : off + nbytes].data
        self.fallback_views += 1
        return _array_at(ptr, nbytes).data

    def page_parts(self, ptrs: Sequence[int], sizes: Sequence[int], pages: int) -> list[list[memoryview]]:
        """Split the flat (ptr, size) list of ``pages`` pages into one list of parts per page."""
        if pages == 0:
            return []
        if len(ptrs) != len(sizes) or len(ptrs) % pages:
            raise ValueError(f"host pool returned {len(ptrs)} runs for {pages} pages")
        per = len(ptrs) // pages
        views = [self.view(int(p), int(s)) for p, s in zip(ptrs, sizes, strict=True)]
        return [views[i * per : (i + 1) * per] for i in range(pages)]

    def close(self) -> None:
        self._arrays.clear()
        self._bases.clear()
        self._ends.clear()


def _array_at(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(ptr))


def pool_tensors(pool: Any) -> list[Any]:
    """The tensors that back a host pool, whatever its class (MHA, MLA, split layouts)."""
    found: list[Any] = []
    getter = getattr(pool, "get_hybrid_pool_buffer", None)
    if callable(getter):
        with contextlib.suppress(Exception):  # some pool classes do not implement it
            found.extend(t for t in getter() if t is not None and hasattr(t, "untyped_storage"))
    for name in ("kv_buffer", "k_buffer", "v_buffer"):
        value = getattr(pool, name, None)
        if hasattr(value, "untyped_storage"):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if hasattr(v, "untyped_storage"))
    return found
