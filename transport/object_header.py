"""The header a node writes at the start of every arena slot.

One-sided readers (shared memory, RDMA READ) copy a slot without asking the node; they learned
``(offset, size, version)`` from a LOOKUP that may be stale by the time they read. They check the
header read with the body and again in a read issued after the body's read completed (one read's
bytes may land in any order): the magic, ``STATE_VALID``, the expected version, the hash of the key
and the size. A slot that was evicted (state cleared, version bumped) or reused
for another key fails the check, so a stale read is a miss, never wrong data.

Layout (64 bytes, little-endian): magic u32 | state u32 | version u64 | key_hash u64 | size u64 |
obj_type u8 | 31 bytes reserved.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

HEADER_MAGIC = 0x424F4D48  # "HMOB"
HEADER_SIZE = 64
STATE_FREE = 0
STATE_WRITING = 1
STATE_VALID = 2
_HDR = struct.Struct("<IIQQQB31x")
assert _HDR.size == HEADER_SIZE
HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("state", "<u4"),
        ("version", "<u8"),
        ("key_hash", "<u8"),
        ("size", "<u8"),
        ("obj_type", "u1"),
        ("reserved", "V31"),
    ]
)
"""The header as a numpy record: a batch of headers back to back is one array of these."""
assert HEADER_DTYPE.itemsize == HEADER_SIZE


def key_hash(key: str) -> int:
    return xxhash.xxh3_64_intdigest(key.encode())


@dataclass(frozen=True, slots=True)
class ObjectHeader:
    state: int
    version: int
    key_hash: int
    size: int
    obj_type: int = 0
    magic: int = HEADER_MAGIC

    def pack(self) -> bytes:
        return _HDR.pack(self.magic, self.state, self.version, self.key_hash, self.size, self.obj_type)

    @staticmethod
    def pack_into(
        buf: Any, offset: int, state: int, version: int, khash: int, size: int, obj_type: int
    ) -> None:
        """Write a header with these fields at ``buf[offset:]`` (any writable buffer), with no
        object in between: the node writes two per stored object, under its tier's lock."""
        _HDR.pack_into(buf, offset, HEADER_MAGIC, state, version, khash, size, obj_type)

    @classmethod
    def unpack(cls, buf: bytes | bytearray | memoryview) -> ObjectHeader:
        magic, state, version, khash, size, otype = _HDR.unpack(buf[:HEADER_SIZE])
        return cls(state, version, khash, size, otype, magic)

    def matches(self, key: str, version: int, size: int) -> bool:
        """True when this header describes the committed object ``key`` at ``version``/``size``."""
        return self.matches_hash(key_hash(key), version, size)

    def matches_hash(self, khash: int, version: int, size: int) -> bool:
        """``matches`` with the key's hash already computed (``key_hash``)."""
        return (
            self.magic == HEADER_MAGIC
            and self.state == STATE_VALID
            and self.version == version
            and self.size == size
            and self.key_hash == khash
        )


def headers_match(headers: Any, key_hashes: Any, versions: Any, sizes: Any) -> np.ndarray:
    """Per header of ``headers`` (n headers back to back), ``ObjectHeader.matches_hash`` of the
    i-th expected key hash, version and size: one vectorised pass, no object per header."""
    h = np.frombuffer(headers, HEADER_DTYPE)
    return (
        (h["magic"] == HEADER_MAGIC)
        & (h["state"] == STATE_VALID)
        & (h["version"] == np.asarray(versions, np.uint64))
        & (h["size"] == np.asarray(sizes, np.uint64))
        & (h["key_hash"] == np.asarray(key_hashes, np.uint64))
    )


def write_header(view: memoryview, offset: int, header: ObjectHeader) -> None:
    view[offset : offset + HEADER_SIZE] = header.pack()


def mark_free(view: memoryview, offset: int) -> None:
    """Invalidate a slot's header (state FREE, version 0) before the slot can be reused."""
    view[offset : offset + HEADER_SIZE] = ObjectHeader(STATE_FREE, 0, 0, 0).pack()
