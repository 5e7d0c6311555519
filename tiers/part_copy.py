"""Copying a batch of pages between their *parts* (views into SGLang's host pool) and the slots of
an arena in one native ``copy_pages`` call per buffer (the GIL released once for the batch).

A part is a ``memoryview``; the native copy takes a buffer and offsets into it. Each part is
resolved to (the object that exports its memory, offset in that object's buffer) from its
address and that object's address (``memoryview.obj``): SGLang's pool views are slices of one
array per pool buffer, so a batch usually has one source (or destination) object. The native side
checks every offset and length against the sizes of the buffers it borrows before copying a byte
(all or nothing), so a wrong resolution could only fail the call, never touch other memory.

Parts that cannot be resolved (read-only, non-contiguous, or not backed by an exporting object,
e.g. ``bytes``) are copied by memoryview assignment instead (``parts.gather_at``), keeping the
GIL, as before: tests and small internal callers; SGLang's pools always resolve.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter, is_

import numpy as np

from hicache_mooncake.native import copy_pages

from .parts import Parts, gather_at, scatter_from

_NBYTES = attrgetter("nbytes")
_OBJ = attrgetter("obj")
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


class PartRuns:
    """Where the parts of a batch of pages lie: per distinct exporting object, the parts' offsets
    in its buffer, their lengths, and each part's position within the batch's slots."""

    __slots__ = ("groups",)

    def __init__(self, groups: list[tuple[object, np.ndarray, np.ndarray, np.ndarray]]) -> None:
        self.groups = groups
        """(buffer object, offsets in it, lengths, slot-relative offsets) per object."""


def resolve(pages: Sequence[Parts], slot_offsets: Sequence[int]) -> PartRuns | None:
    """The runs of ``pages`` (page ``i`` goes to/from ``slot_offsets[i]``, parts back to back), or
    None when a part cannot be resolved (the caller copies the batch by ``gather_at``)."""
    flat = list(chain.from_iterable(pages))
    if not flat:
        return PartRuns([])
    sizes = list(map(_NBYTES, flat))
    if 0 in sizes:  # a zero-length part exports nothing to take an address of
        return None
    owners = list(map(_OBJ, flat))
    first = owners[0]
    try:
        addresses = np.array(list(map(_addressof, map(_from_buffer, flat))), dtype=np.uint64)
        if all(map(is_, owners, repeat(first))):  # identity: numpy's == compares elements
            bases = {id(first): (first, _addressof(_from_buffer(first)))}
        else:
            distinct = {id(o): o for o in owners}
            bases = {key: (o, _addressof(_from_buffer(o))) for key, o in distinct.items()}
    except (TypeError, ValueError, BufferError):
        return None
    lengths = np.array(sizes, dtype=np.uint64)
    if len(flat) == len(pages):  # one part per page (page-first layouts)
        dest = np.asarray(slot_offsets, dtype=np.uint64)
    else:
        counts = np.fromiter(map(len, pages), dtype=np.int64, count=len(pages))
        ends = np.cumsum(lengths)
        starts = ends - lengths  # of each part in the batch's flat byte sequence
        first_part = np.cumsum(counts) - counts  # each page's first part
        page_start = starts[np.minimum(first_part, len(flat) - 1)]
        dest = np.repeat(np.asarray(slot_offsets, dtype=np.uint64) - page_start, counts) + starts
    if len(bases) == 1:
        ((owner, base),) = bases.values()
        if int(addresses.min()) < base:
            return None
        return PartRuns([(owner, addresses - np.uint64(base), lengths, dest)])
    ids = np.array(list(map(id, owners)), dtype=np.uint64)
    groups = []
    for key, (owner, base) in bases.items():
        mine = ids == np.uint64(key)
        at = addresses[mine]
        if int(at.min()) < base:
            return None
        groups.append((owner, at - np.uint64(base), lengths[mine], dest[mine]))
    return PartRuns(groups)


def gather_pages(arena: np.ndarray, slot_offsets: Sequence[int], pages: Sequence[Parts]) -> None:
    """Copy each page's parts back to back into ``arena`` from ``slot_offsets[i]`` on."""
    runs = resolve(pages, slot_offsets)
    if runs is None:
        view = arena.data
        for offset, parts in zip(slot_offsets, pages, strict=True):
            gather_at(view, offset, parts)
        return
    for owner, offsets, lengths, dest in runs.groups:
        copy_pages(arena, dest, owner, offsets, lengths)


def scatter_pages(arena: np.ndarray, slot_offsets: Sequence[int], pages: Sequence[Parts]) -> None:
    """Copy ``arena`` from ``slot_offsets[i]`` on into page ``i``'s parts, in order."""
    runs = resolve(pages, slot_offsets)
    if runs is None:
        view = arena.data
        for offset, parts in zip(slot_offsets, pages, strict=True):
            scatter_from(view, offset, parts)
        return
    for owner, offsets, lengths, dest in runs.groups:
        copy_pages(owner, offsets, arena, dest, lengths)
