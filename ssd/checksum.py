"""Payload checksums (xxh3_64, seed 0: the values on disk since the first format).

The data path hashes in batches with the native extension (:func:`payload_hashes`: one
``xxh3_batch`` call per batch of entries whose payloads lie in one buffer, the GIL released once
for it). A payload in several parts (MHA's K and V) is hashed as their concatenation: natively
when the parts lie back to back in one buffer, else with the streaming hasher below (the native
API hashes one range per item). The streaming hasher also serves recovery's scans of payloads
larger than one read chunk. Its notes:

Streaming xxh3 is computed in slices short enough to keep the GIL.

python-xxhash gives the GIL up around every ``update``, whatever its length. While another
thread runs Python (SGLang's scheduler thread does, next to the cache controller's threads that
call us), that thread takes the GIL at once, and the hashing thread waits up to a switch interval
(5 ms by default) to get it back: one such wait per page hashed, on every put and every verified
read. A slice of :data:`HASH_SLICE` bytes hashes in well under a microsecond, less than the
other thread takes to wake up, so the hashing thread almost always takes the GIL back first (a
race, not a guarantee: 100 pages of 1 MiB next to a busy thread gave it up 0 times in slices of
2-64 KiB, 51-73 times hashed whole, 36-190 times in slices of 96-256 KiB). The digest is the same
whatever the slicing (xxh3 streaming), so entries written before this module are verified alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import xxhash

from hicache_mooncake.native import xxh3_64, xxh3_batch

from .io import byte_view
from .spans import common_base

HASH_SLICE = 32 << 10
_EMPTY_DIGEST = xxhash.xxh3_64_intdigest(b"")


def new_hasher() -> xxhash.xxh3_64:
    """A streaming xxh3_64 state for :func:`update`."""
    return xxhash.xxh3_64()


def update(hasher: xxhash.xxh3_64, data: memoryview) -> None:
    """``hasher.update(data)`` in slices of at most :data:`HASH_SLICE` bytes."""
    mv = byte_view(data)
    n = mv.nbytes
    if n <= HASH_SLICE:
        hasher.update(mv)
        return
    for off in range(0, n, HASH_SLICE):
        hasher.update(mv[off : off + HASH_SLICE])


def payload_hash(parts: Iterable[memoryview]) -> int:
    """xxh3_64 of ``parts`` back to back (one native call for a single part)."""
    views = [byte_view(p) for p in parts]
    if len(views) == 1:
        return xxh3_64(views[0])
    hasher = new_hasher()
    for p in views:
        update(hasher, p)
    return hasher.intdigest()


def _joined(parts: Sequence[memoryview]) -> memoryview | None:
    """The single view ``parts`` make when they lie back to back in one buffer (else None)."""
    if len(parts) == 1:
        return parts[0]
    found = common_base(parts)
    if found is None:
        return None
    base, offsets = found
    pos = int(offsets[0])
    for v, off in zip(parts, offsets.tolist(), strict=True):
        if off != pos:
            return None
        pos += v.nbytes
    return base[int(offsets[0]) : pos]


def payload_hashes(payloads: Sequence[Sequence[memoryview]]) -> list[int]:
    """:func:`payload_hash` of each entry's parts, in as few native calls as the memory allows:
    one ``xxh3_batch`` per buffer that payloads lie in as one span each (an engine staging
    buffer, SGLang's host pool: usually one for the whole batch, so the GIL is given up once),
    one call per other single-span payload, the streaming hasher for parts that are not
    contiguous; an empty payload's digest is a constant (no call)."""
    out = [0] * len(payloads)
    by_buffer: dict[int, tuple[list[memoryview], list[int]]] = {}
    for i, parts in enumerate(payloads):
        views = [byte_view(p) for p in parts if p.nbytes]
        if not views:
            out[i] = _EMPTY_DIGEST
            continue
        one = _joined(views)
        if one is None:
            out[i] = payload_hash(views)
            continue
        spans, where = by_buffer.setdefault(id(one.obj), ([], []))
        spans.append(one)
        where.append(i)
    for spans, where in by_buffer.values():
        found = common_base(spans)
        if found is not None:
            base, offsets = found
            lengths = np.fromiter((v.nbytes for v in spans), np.uint64, len(spans))
            hashes = xxh3_batch(base, offsets, lengths).tolist()
        else:
            hashes = [xxh3_64(v) for v in spans]
        for i, h in zip(where, hashes, strict=True):
            out[i] = h
    return out
