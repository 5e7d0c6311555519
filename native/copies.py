"""Batch copies between buffers Python owns, bounds-checked before any byte moves.

``dst`` and ``src`` are any C-contiguous objects exporting the buffer protocol (numpy arrays,
bytearray, mmap, memoryview; a torch CPU tensor via ``t.view(torch.uint8).numpy()``); offsets and
lengths are in bytes. Every ``offset + length`` is checked against its buffer's size first:
ValueError ("copy 3: src offset 4096 + length 8192 > buffer size 8192") and nothing copied. A
read-only ``dst`` is a TypeError. The GIL is released once for the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _core
from ._arrays import U64, U64Array, as_u64


def copy_pages(dst: Any, dst_offsets: Any, src: Any, src_offsets: Any, lengths: Any) -> None:
    """``dst[dst_offsets[i]:+lengths[i]] = src[src_offsets[i]:+lengths[i]]`` for every i."""
    _core.copy_pages(
        dst,
        as_u64("dst_offsets", dst_offsets),
        src,
        as_u64("src_offsets", src_offsets),
        as_u64("lengths", lengths),
    )


def view_spans(views: Sequence[Any]) -> U64Array | None:
    """Where each of ``views`` lies: an ``(n, 2)`` array of (address of its first byte, length),
    in one call for the batch; None when one of them is not a single writable, C-contiguous,
    non-empty buffer (read-only, empty, strided, released; the caller then sorts them one by
    one). An address is valid only while the caller keeps its view alive."""
    out = np.empty((len(views), 2), dtype=U64)
    return out if _core.view_spans(views, out) else None
