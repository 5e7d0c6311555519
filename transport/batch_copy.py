"""Copying a batch of local views to or from one large buffer (a node's shared arena mapped by the
``local`` engine, the RDMA scratch pool) in one native ``copy_pages`` call per distinct local
buffer, the GIL released once per call: SGLang's host pool views are slices of one array per
pool buffer, so a batch of pages is one call (two for split K/V buffers), whatever its length.

Each view is located as (the object exporting its memory, ``memoryview.obj``; its offset in that
object's buffer) from the two addresses. Every range in the large buffer is checked for the whole
batch before a byte moves (a ``ValueError`` naming the first bad item, nothing copied), and the
native side checks every offset and length against the sizes of both buffers it borrows (all or
nothing per call), so a wrong location can only fail the call, never touch other memory. Views
that cannot be located (read-only, or whose exporter is not one writable contiguous buffer, e.g.
``bytes``) are copied by memoryview assignment, keeping the GIL: small internal buffers and
tests; SGLang's pool always locates. Zero-length views copy nothing.

This module imports nothing of SGLang (``transport`` is below ``tiers``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from hicache_mooncake.native import copy_pages, view_spans

_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof
_LOCATE_ERRORS = (TypeError, ValueError, BufferError)
_OBJ = attrgetter("obj")
_NBYTES = attrgetter("nbytes")


@dataclass
class Located:
    """Where the views of a batch lie: per distinct exporting object, the positions of its views
    in the batch and their byte offsets in its buffer (int64 arrays); ``loose``: positions of
    views that could not be located (copied in Python)."""

    groups: list[tuple[object, np.ndarray, np.ndarray]] = field(default_factory=list)
    loose: list[int] = field(default_factory=list)


def locate(views: Sequence[memoryview], spans: np.ndarray | None = None) -> Located:
    """Locate each view of ``views`` (1-D byte views) in the buffer of the object exporting it.
    Zero-length views are left out (nothing to copy). The usual batch (every view writable and
    non-empty, a few exporters) is located with no per-view Python step: the views' addresses
    come from one native call (``spans``: ``view_spans(views)`` when the caller has it)."""
    if not views:
        return Located()
    if spans is None:
        spans = view_spans(views)
    owners = list(map(_OBJ, views))
    try:
        if spans is None:
            raise ValueError("a view the native call does not locate")
        addrs = spans[:, 0].astype(np.int64)
        distinct = {id(o): o for o in owners}
        bases = {key: _addressof(_from_buffer(o)) for key, o in distinct.items()}
    except _LOCATE_ERRORS:  # a read-only, empty or odd view: sort them one by one
        return _locate_each(views)
    out = Located()
    if len(distinct) == 1:
        ((key, owner),) = distinct.items()
        offsets = addrs - bases[key]
        if offsets.min() < 0:
            return _locate_each(views)
        out.groups.append((owner, np.arange(len(views)), offsets))
        return out
    ids = np.fromiter(map(id, owners), dtype=np.uint64, count=len(owners))
    for key, owner in distinct.items():
        idx = np.flatnonzero(ids == np.uint64(key))
        offsets = addrs[idx] - bases[key]
        if offsets.min() < 0:
            return _locate_each(views)
        out.groups.append((owner, idx, offsets))
    return out


def _locate_each(views: Sequence[memoryview]) -> Located:
    """``locate`` one view at a time: the views that cannot be located are ``loose``."""
    by_owner: dict[int, tuple[object, list[int], list[int]]] = {}
    bases: dict[int, int] = {}
    loose: list[int] = []
    for i, view in enumerate(views):
        if not view.nbytes:
            continue
        owner = view.obj
        key = id(owner)
        try:
            addr = _addressof(_from_buffer(view))
            base = bases.get(key)
            if base is None:
                base = bases[key] = _addressof(_from_buffer(owner))
        except _LOCATE_ERRORS:
            loose.append(i)
            continue
        if addr < base:
            loose.append(i)
            continue
        group = by_owner.get(key)
        if group is None:
            group = by_owner[key] = (owner, [], [])
        group[1].append(i)
        group[2].append(addr - base)
    groups = [(o, _i64(idx), _i64(offs)) for o, idx, offs in by_owner.values()]
    return Located(groups, loose)


def copy_into(big: memoryview, big_offsets: Sequence[int], views: Sequence[memoryview]) -> Located:
    """Copy each ``views[i]`` into ``big`` at ``big_offsets[i]``; returns where the views lay (one
    native call per group, the loose ones copied in Python).
    A range outside ``big`` is a ``ValueError`` naming the first such item, and nothing is
    copied."""
    where, offsets, lengths = _prepare(big, big_offsets, views)
    for owner, idx, src in where.groups:
        copy_pages(big, offsets[idx], owner, src, lengths[idx])
    for i in where.loose:
        off = big_offsets[i]
        big[off : off + views[i].nbytes] = views[i]
    return where


def copy_out(big: memoryview, big_offsets: Sequence[int], views: Sequence[memoryview]) -> Located:
    """Copy ``big`` from ``big_offsets[i]`` on into each ``views[i]``; returns where the views lay
    (as ``copy_into``). A range outside ``big`` is a ``ValueError`` naming the first such item, and nothing is
    copied."""
    where, offsets, lengths = _prepare(big, big_offsets, views)
    for owner, idx, dst in where.groups:
        copy_pages(owner, dst, big, offsets[idx], lengths[idx])
    for i in where.loose:
        off = big_offsets[i]
        views[i][:] = big[off : off + views[i].nbytes]
    return where


def _prepare(
    big: memoryview, big_offsets: Sequence[int], views: Sequence[memoryview]
) -> tuple[Located, np.ndarray, np.ndarray]:
    """The views located, and the batch's offsets and lengths in ``big``, every range checked
    against ``big`` first (so a bad item fails the whole batch before any byte moves; the
    native calls check both sides again)."""
    if len(big_offsets) != len(views):
        raise ValueError(f"{len(big_offsets)} offsets for {len(views)} views")
    offsets = _i64(big_offsets)
    spans = view_spans(views) if views else None
    if spans is not None:
        lengths = spans[:, 1].astype(np.int64)
    else:
        lengths = np.fromiter(map(_NBYTES, views), dtype=np.int64, count=len(views))
    size = big.nbytes
    bad = np.flatnonzero((offsets < 0) | (offsets > size - lengths))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"copy {i}: offset {int(offsets[i])} + length {int(lengths[i])} outside a buffer of {size} bytes"
        )
    return locate(views, spans), offsets, lengths


def _i64(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)
