"""Moving a page's *parts* (memoryviews into SGLang's host pool) to and from one contiguous slot.

Every part is copied by memoryview assignment: a memcpy that keeps the GIL. A copy that gives the
GIL up (numpy's) lets another thread run during the copy, but getting the GIL back costs up to a
switch interval (5 ms) while another thread runs Python, and SGLang's scheduler thread does most of
the time: one release per part took a DRAM get of 1 MiB pages from 6 GB/s to 0.25-0.3 GB/s next to
one busy Python thread, where keeping the GIL holds 4 GB/s (and copies as fast alone: both are
memcpy; without the wrapping of each part in an array, small parts copy 2x faster). The GIL is
still given up between copies, at the interpreter's switch interval, as by any Python thread. A part
may be any contiguous buffer; it is handled as raw bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import compress
from operator import attrgetter

import numpy as np

Parts = Sequence[memoryview]

_NBYTES = attrgetter("nbytes")
_PART_SIZES = partial(map, _NBYTES)


def parts_nbytes(parts: Parts) -> int:
    return sum(map(_NBYTES, parts))


def pages_sizes(pages: Iterable[Parts]) -> list[int]:
    """Bytes of each page, in one C-level pass (no Python call per page)."""
    return list(map(sum, map(_PART_SIZES, pages)))


def pages_nbytes(pages: Sequence[Parts], done: Sequence[bool] | None = None) -> int:
    """Bytes of all ``pages`` (of those whose ``done`` is true, when given)."""
    chosen = pages if done is None else compress(pages, done)
    return sum(map(sum, map(_PART_SIZES, chosen)))


def gather(dst: np.ndarray, parts: Parts) -> None:
    """Copy ``parts`` back to back into the uint8 array ``dst`` (``len(dst) == parts_nbytes``)."""
    gather_at(dst.data, 0, parts)


def gather_at(out: memoryview, pos: int, parts: Parts) -> None:
    """Copy ``parts`` back to back into the flat byte view ``out`` from ``pos`` on (a slot of an
    arena: no array or view is made for the slot)."""
    for part in parts:
        n = part.nbytes
        try:
            out[pos : pos + n] = part
        except (ValueError, NotImplementedError):  # not a flat byte view (TypeError if not contiguous)
            out[pos : pos + n] = part.cast("B")
        pos += n


def scatter(src: np.ndarray, parts: Parts) -> None:
    """Copy the uint8 array ``src`` into the writable ``parts``, in order."""
    scatter_from(src.data, 0, parts)


def scatter_from(view: memoryview, pos: int, parts: Parts) -> None:
    """Copy the flat byte view ``view`` from ``pos`` on into the writable ``parts``, in order."""
    for part in parts:
        n = part.nbytes
        try:
            part[:] = view[pos : pos + n]
        except (ValueError, NotImplementedError):  # not a flat byte view (TypeError if not contiguous)
            part.cast("B")[:] = view[pos : pos + n]
        pos += n
