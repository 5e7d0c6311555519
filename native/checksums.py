"""xxh3_64 checksums (seed 0): the values of ``xxhash.xxh3_64_intdigest``, as stored on disk."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._arrays import U64, U64Array, as_u64


def xxh3_64(buf: Any) -> int:
    """The checksum of one buffer (bytes, bytearray, memoryview, numpy array, mmap)."""
    return _core.xxh3_64(buf)


def xxh3_batch(buf: Any, offsets: Any, lengths: Any) -> U64Array:
    """The checksums of ``buf[offsets[i] : offsets[i] + lengths[i]]`` (byte offsets) in one call.

    Every range is checked against ``len(buf)`` before any hashing: ValueError naming the range.
    """
    off = as_u64("offsets", offsets)
    ln = as_u64("lengths", lengths)
    out = np.empty(off.size, dtype=U64)
    _core.xxh3_batch(buf, off, ln, out)
    return out
