"""Moving a page's *parts* (memoryviews into SGLang's host pool) to and from one contiguous slot.

All copies go through numpy, which releases the GIL for large copies, so SGLang's four controller
threads copy in parallel. A part may be any contiguous buffer; it is handled as raw bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Parts = Sequence[memoryview]


def parts_nbytes(parts: Parts) -> int:
    return sum(p.nbytes for p in parts)


def gather(dst: np.ndarray, parts: Parts) -> None:
    """Copy ``parts`` back to back into the uint8 array ``dst`` (``len(dst) == parts_nbytes``)."""
    pos = 0
    for part in parts:
        n = part.nbytes
        np.copyto(dst[pos : pos + n], np.frombuffer(part, dtype=np.uint8))
        pos += n


def scatter(src: np.ndarray, parts: Parts) -> None:
    """Copy the uint8 array ``src`` into the writable ``parts``, in order."""
    pos = 0
    for part in parts:
        n = part.nbytes
        np.copyto(np.frombuffer(part, dtype=np.uint8), src[pos : pos + n])
        pos += n
