"""Where a batch of memoryviews lies (:func:`common_base`: in one exporting buffer;
:func:`locate_sources`: in the few buffers it spans), so that a native call that takes buffers
and byte offsets into them (``read_entries``, ``write_entries``, ``copy_pages``) serves a whole
batch in one crossing.

The views a batch hands the engine are slices of one buffer in the common case (SGLang's host
pool, the DRAM tier's arena, an engine staging buffer); when they are not, a get reads into a
scratch buffer of the engine and a put names each buffer as a source of its own (still native,
never a Python copy or hash loop over the bytes).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from hicache_mooncake.native import view_spans

from .io import byte_view


def _address(mv: memoryview) -> int:
    """Address of ``mv``'s first byte (a writable view through ctypes, the cheaper way)."""
    if not mv.nbytes:
        return 0
    if not mv.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    return int(np.frombuffer(mv, dtype=np.uint8).__array_interface__["data"][0])


def common_base(views: Sequence[memoryview], writable: bool = False) -> tuple[memoryview, np.ndarray] | None:
    """``(base, offsets)`` with ``views[i] == base[offsets[i] : offsets[i] + views[i].nbytes]``
    when every view is a slice of the same exporting object (``memoryview.obj``), C-contiguous as
    a whole (and writable with ``writable``); None otherwise (or for no views)."""
    if not views:
        return None
    obj = views[0].obj
    if obj is None or any(v.obj is not obj for v in views):
        return None
    try:
        base = byte_view(obj)
    except (TypeError, ValueError):
        return None  # not C-contiguous as a whole
    if writable and base.readonly:
        return None
    start = _address(base)
    spans = view_spans(views)  # one native call where every view is a writable, non-empty buffer
    if spans is not None:
        offsets = spans[:, 0].astype(np.int64) - start
        ends = offsets + spans[:, 1].astype(np.int64)
    else:
        offsets = np.fromiter((_address(v) - start if v.nbytes else 0 for v in views), np.int64, len(views))
        ends = offsets + np.fromiter((v.nbytes for v in views), np.int64, len(views))
    if len(offsets) and (int(offsets.min()) < 0 or int(ends.max()) > base.nbytes):
        return None  # (a view of a copy the exporter made: not inside it)
    return base, offsets.astype(np.uint64)


def locate_sources(views: Sequence[memoryview]) -> tuple[list[memoryview], np.ndarray, np.ndarray]:
    """Where the views of a batch lie, for ``native.write_entries``: the distinct buffers they
    are slices of (each exporting object as a whole where it is one contiguous buffer holding
    its views, else the view on its own), and each view's source index and byte offset in it.
    The usual batch (slices of SGLang's host pool) is one source."""
    n = len(views)
    part_srcs = np.zeros(n, np.uint64)
    offsets = np.zeros(n, np.uint64)
    found = common_base(views)
    if found is not None:
        base, offsets = found
        return [base], part_srcs, offsets
    srcs: list[memoryview] = []
    where: dict[int, tuple[int, int, int]] = {}  # id(obj) -> (source index, base address, size)
    for q, v in enumerate(views):
        obj = v.obj
        at = where.get(id(obj)) if obj is not None else None
        if at is None and obj is not None:
            whole: memoryview | None
            try:
                whole = byte_view(obj)
            except (TypeError, ValueError, BufferError):
                whole = None
            if whole is not None:
                at = where[id(obj)] = (len(srcs), _address(whole), whole.nbytes)
                srcs.append(whole)
        if at is not None:
            i, start, size = at
            off = _address(v) - start
            if off >= 0 and off + v.nbytes <= size:
                part_srcs[q], offsets[q] = i, off
                continue
        part_srcs[q] = len(srcs)  # not inside its exporter's buffer as a whole: its own source
        srcs.append(v)
    return srcs, part_srcs, offsets
