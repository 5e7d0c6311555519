"""Byte views of pages whose runs lie at affine addresses, made in one native call.

Page ``p`` is addressed by its first index ``f = indices[p * page_size]``; its run ``j`` is the
``sizes[j]`` bytes at address ``bases[j] + f * strides[j]``. ``AffinePages.views`` (one call of
``_core.page_views``) checks every page's indices ``[f, f + page_size)`` against ``index_limit``
(IndexError naming the page) and every run against the registered regions (ValueError naming
page and run), overflow-safe, and returns one list of writable memoryviews per page; all or
nothing.
It runs with the GIL held (microseconds) and reads no byte of the memory it points at.

Each view is a slice of its region's memoryview (so ``memoryview.obj`` names the region's
exporter, which the SSD engine groups a batch's views by, and the view keeps it alive); every
region must still be the writable bytes registered at its start (ValueError otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _core
from ._arrays import U64

I64 = np.dtype(np.int64)


class AffinePages:
    """The run form of one pool (``bases``, ``strides``, ``sizes`` per run of a page) and the
    regions its runs must lie in; ``views`` makes a batch's page views."""

    __slots__ = ("_bases", "_ends", "_regions", "_sizes", "_starts", "_strides", "page_size")

    def __init__(
        self,
        page_size: int,
        bases: list[int],
        strides: list[int],
        sizes: list[int],
        regions: Sequence[memoryview],
    ) -> None:
        """``regions``: a writable byte memoryview of each registered buffer."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        if not len(bases) == len(strides) == len(sizes):
            raise ValueError(
                f"bases, strides and sizes differ in length: {len(bases)}, {len(strides)}, {len(sizes)}"
            )
        ordered = sorted(regions, key=address_of)
        self.page_size = page_size
        self._bases = np.asarray(bases, dtype=I64)
        self._strides = np.asarray(strides, dtype=I64)
        self._sizes = np.asarray(sizes, dtype=I64)
        self._regions = ordered
        self._starts = np.asarray([address_of(v) for v in ordered], dtype=U64)
        self._ends = np.asarray([address_of(v) + v.nbytes for v in ordered], dtype=U64)

    def views(self, indices: np.ndarray, pages: int, index_limit: int) -> list[list[memoryview]]:
        """Each page's run views (``indices``: int64, ``pages * page_size`` of them)."""
        return _core.page_views(
            indices, self.page_size, pages, index_limit, self._bases, self._strides, self._sizes,
            self._starts, self._ends, self._regions,
        )  # fmt: skip


def address_of(view: memoryview) -> int:
    """The address of a byte view's first byte."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)
