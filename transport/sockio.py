"""Blocking socket helpers with a deadline: gather-send of memoryviews, scatter-receive into them.

No payload byte is copied in Python: ``sendmsg`` takes the caller's buffers as an iovec and
``recv_into`` writes into the caller's memoryview slices.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

from .errors import PeerUnavailable

IOV_MAX = 512
_DRAIN = memoryview(bytearray(1 << 20))


def _arm(sock: socket.socket, deadline: float | None) -> None:
    if deadline is None:
        sock.settimeout(None)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    sock.settimeout(left)


def as_bytes_view(buf: memoryview | bytes | bytearray) -> memoryview:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def send_all(sock: socket.socket, bufs: Sequence[memoryview | bytes], deadline: float | None) -> None:
    """Send every buffer, in order, with ``sendmsg`` (partial sends resumed, no copies)."""
    pending = [as_bytes_view(b) for b in bufs if len(b)]
    i = 0
    while i < len(pending):
        _arm(sock, deadline)
        sent = sock.sendmsg(pending[i : i + IOV_MAX])
        if sent == 0:
            raise PeerUnavailable("connection closed while sending")
        while sent:
            n = len(pending[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                pending[i] = pending[i][sent:]
                sent = 0


def recv_into_exact(sock: socket.socket, view: memoryview, deadline: float | None) -> None:
    """Fill ``view`` completely from the socket."""
    got = 0
    total = len(view)
    while got < total:
        _arm(sock, deadline)
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise PeerUnavailable("connection closed while receiving")
        got += n


def recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    buf = bytearray(n)
    if n:
        recv_into_exact(sock, memoryview(buf), deadline)
    return buf


def drain(sock: socket.socket, n: int, deadline: float | None) -> None:
    """Read and discard ``n`` bytes (a body the receiver does not want)."""
    while n > 0:
        chunk = min(n, len(_DRAIN))
        recv_into_exact(sock, _DRAIN[:chunk], deadline)
        n -= chunk
