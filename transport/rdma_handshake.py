"""RDMA connection setup data exchanged over the TCP control channel (pure; no device needed).

Each side sends one ``QpInfo``: its RC QP number, packet sequence number, port LID, GID (16 bytes,
RoCE/IB), MTU enum, and the (address, length, rkey) of the memory region the peer may access (the
node's arena; for the client, its registered local region -- unused by the node, which stays
passive). Encoded as a fixed 64-byte big-endian record with a version byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ProtocolError

QPINFO_VERSION = 1
_QPINFO = struct.Struct("!BxHIIB3x16sQQI")  # version, lid, qpn, psn, mtu, gid, addr, length, rkey
QPINFO_SIZE = _QPINFO.size


@dataclass(frozen=True, slots=True)
class QpInfo:
    qpn: int
    psn: int
    lid: int
    gid: bytes
    mtu: int
    addr: int
    length: int
    rkey: int

    def encode(self) -> bytes:
        if len(self.gid) != 16:
            raise ProtocolError("a GID is 16 bytes")
        if not (0 <= self.qpn < 1 << 24 and 0 <= self.psn < 1 << 24):
            raise ProtocolError("QPN and PSN are 24-bit")
        return _QPINFO.pack(
            QPINFO_VERSION,
            self.lid,
            self.qpn,
            self.psn,
            self.mtu,
            self.gid,
            self.addr,
            self.length,
            self.rkey,
        )

    @classmethod
    def decode(cls, raw: bytes | bytearray | memoryview) -> QpInfo:
        if len(raw) != QPINFO_SIZE:
            raise ProtocolError(f"QP info is {QPINFO_SIZE} bytes, got {len(raw)}")
        version, lid, qpn, psn, mtu, gid, addr, length, rkey = _QPINFO.unpack(raw)
        if version != QPINFO_VERSION:
            raise ProtocolError(f"unsupported QP info version {version}")
        if qpn >= 1 << 24 or psn >= 1 << 24:
            raise ProtocolError("QPN and PSN are 24-bit")
        return cls(qpn, psn, lid, bytes(gid), mtu, addr, length, rkey)
