"""Copying a batch of pages between their *parts* (views into SGLang's host pool) and the slots of
an arena: each page's parts lie back to back in its slot, and the whole batch is one native
``copy_pages`` call per pool buffer (``transport.batch_copy``: the GIL released once per call,
every offset bounds-checked before a byte moves, parts that cannot be located, e.g. read-only
``bytes``, copied by memoryview assignment).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from hicache_mooncake.transport.batch_copy import Located, copy_into, copy_out

from .parts import Parts

_NBYTES = attrgetter("nbytes")


def part_offsets(pages: Sequence[Parts], slot_offsets: Sequence[int]) -> tuple[list[memoryview], np.ndarray]:
    """Every part of ``pages`` in order, and the arena offset of each: page ``i``'s parts back to
    back from ``slot_offsets[i]`` on."""
    flat = list(chain.from_iterable(pages))
    slots = np.asarray(slot_offsets, dtype=np.int64)
    if len(flat) == len(pages):  # one part per page (page-first layouts)
        return flat, slots
    counts = np.fromiter(map(len, pages), dtype=np.int64, count=len(pages))
    lengths = np.fromiter(map(_NBYTES, flat), dtype=np.int64, count=len(flat))
    starts = np.cumsum(lengths) - lengths  # of each part in the batch's flat byte sequence
    first = np.cumsum(counts) - counts  # each page's first part
    page_start = starts[np.minimum(first, max(len(flat) - 1, 0))] if len(flat) else first
    return flat, np.repeat(slots - page_start, counts) + starts


def gather_pages(arena: np.ndarray, slot_offsets: Sequence[int], pages: Sequence[Parts]) -> Located:
    """Copy each page's parts back to back into ``arena`` from ``slot_offsets[i]`` on; returns
    where the parts lay (one group per pool buffer: one native call each). ValueError (nothing
    copied) for a range outside the arena."""
    flat, offsets = part_offsets(pages, slot_offsets)
    return copy_into(arena.data, offsets.tolist(), flat)


def scatter_pages(arena: np.ndarray, slot_offsets: Sequence[int], pages: Sequence[Parts]) -> Located:
    """Copy ``arena`` from ``slot_offsets[i]`` on into page ``i``'s parts, in order (as
    ``gather_pages``)."""
    flat, offsets = part_offsets(pages, slot_offsets)
    return copy_out(arena.data, offsets.tolist(), flat)
