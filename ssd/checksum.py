"""Payload checksums (xxh3_64, seed 0: the values on disk since the first format).

The data path hashes in the native I/O workers (``native.write_entries`` / ``read_entries``,
the GIL released once per put or get). This module serves recovery and fsck: one native call for
a payload in one part, the streaming hasher below for a payload in several parts (hashed as
their concatenation) and for scans of payloads larger than one read chunk. Its notes:

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

from collections.abc import Iterable

import xxhash

from hicache_mooncake.native import xxh3_64

from .io import byte_view

HASH_SLICE = 32 << 10


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
