"""RDMA connection setup data exchanged over the TCP control channel (pure; no device needed).

Each side sends one ``QpInfo``: its RC QP number, packet sequence number, port LID, GID (16 bytes,
RoCE/IB), MTU enum, how many RDMA READs it serves at once on this QP (``rd_atomic``: the peer
issues no more, so a device with fewer responder resources is never overrun), and the (address,
length, rkey) of the memory region the peer may access (the node's arena; the client sends zeros:
the node stays passive). Encoded as a fixed big-endian record with a version byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import ProtocolError

QPINFO_VERSION = 2
# version, rd_atomic, lid, qpn, psn, mtu, gid, addr, length, rkey
_QPINFO = struct.Struct("!BBHIIB3x16sQQI")
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
    rd_atomic: int = 1

    def encode(self) -> bytes:
        if len(self.gid) != 16:
            raise ProtocolError("a GID is 16 bytes")
        if not (0 <= self.qpn < 1 << 24 and 0 <= self.psn < 1 << 24):
            raise ProtocolError("QPN and PSN are 24-bit")
        if not 1 <= self.rd_atomic <= 255:
            raise ProtocolError("rd_atomic is 1..255")
        return _QPINFO.pack(
            QPINFO_VERSION,
            self.rd_atomic,
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
        version, rd_atomic, lid, qpn, psn, mtu, gid, addr, length, rkey = _QPINFO.unpack(raw)
        if version != QPINFO_VERSION:
            raise ProtocolError(f"unsupported QP info version {version}")
        if qpn >= 1 << 24 or psn >= 1 << 24 or rd_atomic < 1:
            raise ProtocolError("QPN and PSN are 24-bit, rd_atomic >= 1")
        return cls(qpn, psn, lid, bytes(gid), mtu, addr, length, rkey, rd_atomic)
