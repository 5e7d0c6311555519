"""Zero-copy byte views of SGLang's host pools, addressed by the raw pointers they hand out.

``get_page_buffer_meta`` gives (pointer, size) runs. Making a ctypes object per run costs microseconds,
so at registration the pool's buffers are wrapped once as uint8 arrays and a run becomes a slice
of one of them (found by bisecting the sorted base addresses).

Invariants:
- a view is only ever made INSIDE a buffer registered here: a run that is not wholly inside one
  of them (out-of-range host indices, a pool class whose buffers we do not know) raises
  ``HostRangeError`` and nothing is read or written: never a raw pointer into unknown memory;
- views are only valid while the host pool is alive; the backend drops this map on ``close``.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class HostRangeError(ValueError):
    """Host indices or a (pointer, size) run that do not address the registered host pool.

    ``reason`` is one of a few fixed phrases (what a log line is deduplicated on); the message
    adds the numbers."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class HostPoolViews:
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
        self._views = [a.data for a in self._arrays]  # slicing a memoryview is the cheapest view

    def regions(self) -> list[memoryview]:
        """One writable byte view per distinct buffer of the pool (for memory registration)."""
        return [a.data for a in self._arrays]

    @property
    def bases(self) -> list[int]:
        """The start address of each region, in ``regions()`` order."""
        return list(self._bases)

    def view(self, ptr: int, nbytes: int) -> memoryview:
        i = 0 if len(self._bases) == 1 else bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0 and nbytes >= 0 and self._bases[i] <= ptr and ptr + nbytes <= self._ends[i]:
            off = ptr - self._bases[i]
            return self._views[i][off : off + nbytes]
        raise HostRangeError("a page run outside the pool's buffers", f"{nbytes} bytes at {ptr:#x}")

    def page_parts(self, ptrs: Sequence[int], sizes: Sequence[int], pages: int) -> list[list[memoryview]]:
        """Split the flat (ptr, size) list of ``pages`` pages into one list of parts per page."""
        if pages == 0:
            return []
        if len(ptrs) != len(sizes) or len(ptrs) % pages:
            raise HostRangeError("runs do not split into pages", f"{len(ptrs)} runs for {pages} pages")
        per = len(ptrs) // pages
        if len(self._bases) == 1 and ptrs:
            views = self._views_in_one_region(ptrs, sizes)
        else:
            view = self.view
            views = [view(p, s) for p, s in zip(ptrs, sizes, strict=True)]
        if per == 1:
            return [[v] for v in views]
        return [views[i : i + per] for i in range(0, len(views), per)]

    def _views_in_one_region(self, ptrs: Sequence[int], sizes: Sequence[int]) -> list[memoryview]:
        """``view`` for every run of a pool with one buffer: the bounds are checked once for the
        whole batch (lowest start, highest end, no negative size), then each run is a slice."""
        base, end, whole = self._bases[0], self._ends[0], self._views[0]
        if min(ptrs) < base or min(sizes) < 0 or max(map(operator.add, ptrs, sizes)) > end:
            for p, s in zip(ptrs, sizes, strict=True):
                self.view(p, s)  # raises for the first run outside the buffer
        return [whole[p - base : p - base + s] for p, s in zip(ptrs, sizes, strict=True)]

    def close(self) -> None:
        self._views.clear()
        self._arrays.clear()
        self._bases.clear()
        self._ends.clear()


def _array_at(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(ptr))


# Host-side buffers of SGLang's pool classes, by attribute name (tensors or lists of tensors). Device
# tensors are never included: their pointers are not host memory.
_BUFFER_ATTRS = (
    "kv_buffer",
    "k_buffer",
    "v_buffer",
    "temporal_buffer",  # MambaPoolHost
    "conv_buffer",
    "slot_state_buffers",
    "index_k_with_scale_buffer",  # DSAIndexerPoolHost
    "index_k_buffer",
    "index_k_scale_buffer",
)


def pool_tensors(pool: Any) -> list[Any]:
    """The host tensors that back a host pool, whatever its class (MHA, MLA, split layouts,
    Mamba state, indexer, DeepSeek V4 paged pools). Empty for a logical pool (no bytes)."""
    found: list[Any] = []
    getter = getattr(pool, "get_hybrid_pool_buffer", None)
    if callable(getter):
        with contextlib.suppress(Exception):  # some pool classes do not implement it
            found.extend(getter() or [])
    for name in _BUFFER_ATTRS:
        value = getattr(pool, name, None)
        found.extend(value if isinstance(value, list | tuple) else [value])
    return [t for t in found if _is_host_tensor(t)]


def _is_host_tensor(value: Any) -> bool:
    if not hasattr(value, "untyped_storage"):
        return False
    device = getattr(value, "device", None)
    return getattr(device, "type", "cpu") == "cpu"
