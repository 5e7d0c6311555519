"""Moving a page's *parts* (memoryviews into SGLang's host pool) to and from one contiguous slot.

Large parts go through numpy, which releases the GIL while it copies, so SGLang's controller
threads copy in parallel. Parts below ``SMALL_PART`` are copied by memoryview assignment: a
memcpy too, holding the GIL for the few microseconds it takes, and without the per-part cost of
wrapping the part in an array (which dominates small pages). A part may be any contiguous buffer;
it is handled as raw bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import attrgetter

import numpy as np

Parts = Sequence[memoryview]

SMALL_PART = 128 << 10
"""Parts up to this many bytes are copied with the GIL held (a few microseconds at memory speed)."""


_NBYTES = attrgetter("nbytes")


def parts_nbytes(parts: Parts) -> int:
    return sum(map(_NBYTES, parts))


def pages_nbytes(pages: Sequence[Parts], done: Sequence[bool] | None = None) -> int:
    """Bytes of all ``pages`` (of those whose ``done`` is true, when given)."""
    chosen = pages if done is None else compress(pages, done)
    return sum(sum(map(_NBYTES, parts)) for parts in chosen)


def _bytes(part: memoryview) -> memoryview:
    return part if part.format == "B" and part.ndim == 1 else part.cast("B")


def gather(dst: np.ndarray, parts: Parts) -> None:
    """Copy ``parts`` back to back into the uint8 array ``dst`` (``len(dst) == parts_nbytes``)."""
    pos = 0
    out: memoryview | None = None
    for part in parts:
        n = part.nbytes
        if n <= SMALL_PART:
            if out is None:
                out = dst.data
            out[pos : pos + n] = _bytes(part)
        else:
            np.copyto(dst[pos : pos + n], np.frombuffer(part, dtype=np.uint8))
        pos += n


def scatter(src: np.ndarray, parts: Parts) -> None:
    """Copy the uint8 array ``src`` into the writable ``parts``, in order."""
    pos = 0
    view: memoryview | None = None
    for part in parts:
        n = part.nbytes
        if n <= SMALL_PART:
            if view is None:
                view = src.data
            _bytes(part)[:] = view[pos : pos + n]
        else:
            np.copyto(np.frombuffer(part, dtype=np.uint8), src[pos : pos + n])
        pos += n
