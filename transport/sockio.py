"""Blocking socket helpers with a deadline: gather-send of memoryviews, scatter-receive into them.

No payload byte is copied in Python: ``sendmsg`` takes the caller's buffers as an iovec and
``recv_into`` writes into the caller's memoryview slices.

The deadline is the kernel's: the socket stays in blocking mode and each call first sets
``SO_RCVTIMEO`` / ``SO_SNDTIMEO`` to the time left (0: none), and a receive asks for all the bytes
it wants at once (``MSG_WAITALL``). A call returns early with what it has when the time is up (the
loop then raises ``TimeoutError``), when the peer closes (``PeerUnavailable``) or on a signal (the
loop goes on). With Python's own socket timeout every receive was an ``ioctl``, a ``poll`` and a
``recv`` of whatever had arrived, the last two each giving the GIL up: a loopback transfer made
3.3x the system calls it makes now, and next to a thread running Python (SGLang's scheduler) each
call that blocks waits up to a switch interval (5 ms) to get the GIL back.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence

from .errors import PeerUnavailable

IOV_MAX = 512
_DRAIN = memoryview(bytearray(1 << 20))
_ZEROS = memoryview(bytes(1 << 20))


_TIMEVAL = struct.Struct("@ll")  # struct timeval: seconds, microseconds
_NO_TIMEOUT = _TIMEVAL.pack(0, 0)


def _arm(sock: socket.socket, deadline: float | None, option: int) -> None:
    """Blocking mode, and the kernel's timeout ``option`` (``SO_RCVTIMEO`` / ``SO_SNDTIMEO``) set
    to the time left until ``deadline`` (None: no timeout); ``TimeoutError`` when none is left."""
    if sock.gettimeout() is not None:  # a socket connected with a timeout: blocking from now on
        sock.settimeout(None)
    if deadline is None:
        sock.setsockopt(socket.SOL_SOCKET, option, _NO_TIMEOUT)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    micros = max(1, int(left * 1e6))  # never 0: that would be no timeout at all
    sock.setsockopt(socket.SOL_SOCKET, option, _TIMEVAL.pack(micros // 1_000_000, micros % 1_000_000))


def as_bytes_view(buf: memoryview | bytes | bytearray) -> memoryview:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _consume(pending: list[memoryview], i: int, n: int) -> int:
    """Account ``n`` bytes moved from ``pending[i:]``: the index of the first buffer not done
    (a buffer done in part is cut to its rest)."""
    while n:
        size = len(pending[i])
        if n < size:
            pending[i] = pending[i][n:]
            break
        n -= size
        i += 1
    return i


def send_all(sock: socket.socket, bufs: Sequence[memoryview | bytes], deadline: float | None) -> None:
    """Send every buffer, in order, with ``sendmsg`` (partial sends resumed, no copies)."""
    pending = [as_bytes_view(b) for b in bufs if len(b)]
    i = 0
    while i < len(pending):
        _arm(sock, deadline, socket.SO_SNDTIMEO)
        try:
            sent = sock.sendmsg(pending[i : i + IOV_MAX])
        except BlockingIOError:  # SO_SNDTIMEO passed with nothing sent
            raise TimeoutError("deadline passed while sending") from None
        if sent == 0:
            raise PeerUnavailable("connection closed while sending")
        i = _consume(pending, i, sent)


def recv_into_exact(sock: socket.socket, view: memoryview, deadline: float | None) -> None:
    """Fill ``view`` completely from the socket."""
    recv_into_all(sock, [view], deadline)


def recv_into_all(sock: socket.socket, views: Sequence[memoryview], deadline: float | None) -> None:
    """Fill every view completely, in order, with ``recvmsg_into`` (one call scatters into up to
    ``IOV_MAX`` buffers): a reply of many objects costs one wait for the GIL, not one per object,
    which next to a thread running Python (SGLang's scheduler) is up to a switch interval each."""
    pending = [as_bytes_view(v) for v in views if len(v)]
    i = 0
    while i < len(pending):
        _arm(sock, deadline, socket.SO_RCVTIMEO)
        try:
            got = sock.recvmsg_into(pending[i : i + IOV_MAX], 0, socket.MSG_WAITALL)[0]
        except BlockingIOError:  # SO_RCVTIMEO passed with nothing received
            raise TimeoutError("deadline passed while receiving") from None
        if got == 0:
            raise PeerUnavailable("connection closed while receiving")
        i = _consume(pending, i, got)


def recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    buf = bytearray(n)
    if n:
        recv_into_exact(sock, memoryview(buf), deadline)
    return buf


def discarded(n: int) -> list[memoryview]:
    """Views that take ``n`` bytes a receiver does not want (a body of an object it refused), to
    receive among the wanted ones: one shared scratch buffer, as often as needed (what lands in
    it is never read)."""
    return _covering(_DRAIN, n)


def zeros(n: int) -> list[memoryview]:
    """Views of ``n`` zero bytes to send (in place of an object a GET does not serve): one shared
    read-only buffer, as often as needed."""
    return _covering(_ZEROS, n)


def _covering(buf: memoryview, n: int) -> list[memoryview]:
    """Slices of ``buf`` (from its start, reused) adding up to ``n`` bytes."""
    return [buf[: min(len(buf), n - off)] for off in range(0, n, len(buf))]


def drain(sock: socket.socket, n: int, deadline: float | None) -> None:
    """Read and discard ``n`` bytes (a body the receiver does not want)."""
    recv_into_all(sock, discarded(n), deadline)
