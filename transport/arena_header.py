"""The header a node writes in the first page of its arena: proof that a file is a node arena.

A client of the ``local`` engine maps a file that a node names in its handshake. Before writing a
byte into it, the client checks this header against what the (authenticated) handshake said:
the magic, the node id, the epoch, the arena size and a random per-arena token that only the node,
its authenticated peers and the file's owner can know. A file that is not a node arena (or the
arena of another node, or of an earlier start of this one) fails the check.

The arena's first ``ARENA_HEADER_SIZE`` bytes hold the header; objects live after it, so the offsets
the node hands out never overlap it. Layout (little-endian)::

    magic 8s | format u32 | pid u32 | size u64 | epoch u64 | token 16s | node_id_len u16 | node_id
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

ARENA_HEADER_SIZE = 4096  # one page, reserved at the start of every arena
ARENA_MAGIC = b"HMARENA\x00"
ARENA_FORMAT = 1
TOKEN_LEN = 16
MAX_NODE_ID_BYTES = 1024
_FIXED = struct.Struct("<8sIIQQ16sH")


@dataclass(frozen=True, slots=True)
class ArenaHeader:
    node_id: str
    epoch: int
    size: int  # bytes of the whole mapping, header page included
    pid: int
    token: bytes

    def pack(self) -> bytes:
        raw_id = self.node_id.encode()
        if len(raw_id) > MAX_NODE_ID_BYTES:
            raise ValueError(f"node id of {len(raw_id)} bytes exceeds {MAX_NODE_ID_BYTES}")
        if len(self.token) != TOKEN_LEN:
            raise ValueError(f"arena token must be {TOKEN_LEN} bytes")
        fixed = _FIXED.pack(
            ARENA_MAGIC, ARENA_FORMAT, self.pid, self.size, self.epoch, self.token, len(raw_id)
        )
        return fixed + raw_id

    @classmethod
    def unpack(cls, buf: bytes | bytearray | memoryview) -> ArenaHeader | None:
        """The header in ``buf``, or ``None`` when ``buf`` does not start with a valid one."""
        if len(buf) < _FIXED.size:
            return None
        magic, fmt, pid, size, epoch, token, id_len = _FIXED.unpack_from(buf)
        if magic != ARENA_MAGIC or fmt != ARENA_FORMAT or id_len > MAX_NODE_ID_BYTES:
            return None
        end = _FIXED.size + id_len
        if len(buf) < end:
            return None
        try:
            node_id = bytes(buf[_FIXED.size : end]).decode()
        except UnicodeDecodeError:
            return None
        return cls(node_id, epoch, size, pid, bytes(token))

    @staticmethod
    def new_token() -> bytes:
        return os.urandom(TOKEN_LEN)
