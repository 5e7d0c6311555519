"""Who is at the other end of a Unix domain socket (``SO_PEERCRED``: the kernel's word, not the
peer's), and whether the host cache serves them: the same user as the server, or root."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")


@dataclass(frozen=True, slots=True)
class PeerCred:
    pid: int
    uid: int
    gid: int

    @property
    def label(self) -> str:
        return f"pid:{self.pid}"


def peer_cred(sock: socket.socket) -> PeerCred | None:
    """The credentials of ``sock``'s peer (None when the socket is not a connected Unix socket)."""
    if sock.family != socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except OSError:
        return None
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCred(pid, uid, gid)


def allowed(cred: PeerCred | None, server_uid: int | None = None) -> bool:
    """Serve this peer? Only the server's own user and root."""
    if cred is None:
        return False
    uid = os.geteuid() if server_uid is None else server_uid
    return cred.uid in (uid, 0)
