"""The node's front door: ONE thread and one selector accept every socket and run the
authentication handshake for all of them without blocking; only a socket that completed it is
handed on (the server then gives it a worker).

A Unix domain socket (the host cache) is admitted only when the kernel's peer credentials name
the server's user or root (``peer_cred``); its peer is counted per process (``pid:N``).

An unauthenticated socket costs a file descriptor and a few hundred bytes, never a thread. It is
dropped when its handshake is not done within ``handshake_timeout_s``, and such sockets are bounded
twice: at most ``max_per_peer`` per peer address (IPv6: per /64) and ``max_pending`` in all. When a
bound is hit the OLDEST handshake of that peer (for the global bound: of the peer holding the most)
is dropped, never the newcomer: a peer that keeps opening sockets only displaces its own (or the
biggest holder's), and a client that answers its challenge promptly gets in. Out of file
descriptors, the gate sheds the oldest handshake instead of spinning on ``accept``.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import selectors
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .. import auth, wire
from ..errors import ProtocolError
from ..throttle import worth_logging
from ..wire import FrameHeader, Op, Status
from .peer_cred import allowed, peer_cred

log = logging.getLogger(__name__)
AUTH_FRAME = wire.HEADER_SIZE + auth.PROOF_LEN + auth.NONCE_LEN
_ACCEPTS_PER_WAKEUP = 256
_FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_LISTENER = object()
_WAKE = object()


@dataclass(frozen=True)
class GateLimits:
    handshake_timeout_s: float = 2.0
    max_pending: int = 256
    max_per_peer: int = 32


def peer_key(addr: str) -> str:
    """The unit the per-peer bound counts: the IPv4 address, or the IPv6 /64."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class _Pending:
    __slots__ = ("authed", "buf", "deadline", "events", "got", "nonce", "out", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: str, deadline: float, challenge: bytes) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = deadline
        self.nonce = challenge[wire.HEADER_SIZE :]
        self.out = memoryview(challenge)
        self.buf = bytearray(AUTH_FRAME)
        self.got = 0
        self.authed = False
        self.events = 0


class HandshakeGate:
    """Owns ``listener`` (made non-blocking) once started; ``on_authenticated(sock, peer)`` gets
    each authenticated socket (blocking again) in the gate's thread and must return quickly."""

    def __init__(
        self,
        listener: socket.socket,
        secret: bytes,
        hello: bytes,
        limits: GateLimits,
        on_authenticated: Callable[[socket.socket, str], None],
        counters: Counter[str],
    ) -> None:
        self._listener = listener
        self._secret = secret
        self._hello = hello
        self.limits = limits
        self._on_authenticated = on_authenticated
        self.counters = counters
        self._sel = selectors.DefaultSelector()
        self._pending: OrderedDict[int, _Pending] = OrderedDict()  # accept order == deadline order
        self._by_peer: dict[str, OrderedDict[int, _Pending]] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = False
        self._accept_paused_until = 0.0
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        self._listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._thread = threading.Thread(target=self._run, name="node-gate", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, drop every pending handshake, close the listener."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is None:
            self._shutdown()
        elif self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # ---- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closed:
                for key, _ in self._sel.select(self._next_timeout()):
                    if self._closed:
                        break
                    try:
                        self._on_event(key.data)
                    except Exception:
                        self.counters["internal"] += 1
                        log.exception("handshake gate event failed")
                        if isinstance(key.data, _Pending):
                            self._drop(key.data, "handshake_internal")
                self._expire()
                self._resume_accept()
        finally:
            self._shutdown()

    def _on_event(self, tag: object) -> None:
        if tag is _LISTENER:
            self._accept_some()
        elif tag is _WAKE:
            with contextlib.suppress(OSError):
                self._wake_r.recv(64)
        elif isinstance(tag, _Pending) and tag.events:  # events == 0: dropped earlier in this batch
            if tag.out:
                self._flush(tag)
            else:
                self._read(tag)

    def _next_timeout(self) -> float:
        now = time.monotonic()
        timeout = 0.5
        if self._pending:
            oldest = next(iter(self._pending.values()))
            timeout = min(timeout, oldest.deadline - now)
        if self._accept_paused_until:
            timeout = min(timeout, self._accept_paused_until - now)
        return max(timeout, 0.0)

    def _shutdown(self) -> None:
        for p in list(self._pending.values()):
            self._drop(p, None)
        with contextlib.suppress(Exception):
            self._sel.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    # ---- accepting ------------------------------------------------------------------------

    def _accept_some(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in _FD_EXHAUSTED:
                    self.counters["accept_no_fds"] += 1
                    victim = self._oldest_of_biggest_peer()
                    if victim is not None:
                        self._drop(victim, "handshake_shed")
                    else:
                        self._pause_accept(0.05)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                log.debug("accept failed: %s", exc)
                return
            try:
                self._admit(sock, str(addr[0]) if isinstance(addr, tuple) else "")
            except OSError:
                with contextlib.suppress(OSError):
                    sock.close()

    def _pause_accept(self, seconds: float) -> None:
        if not self._accept_paused_until:
            self._sel.unregister(self._listener)
        self._accept_paused_until = time.monotonic() + seconds

    def _resume_accept(self) -> None:
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)

    def _admit(self, sock: socket.socket, addr: str) -> None:
        if sock.family == socket.AF_UNIX:
            cred = peer_cred(sock)
            if not allowed(cred):
                self.counters["refused_peer_uid"] += 1
                if worth_logging(self.counters["refused_peer_uid"]):
                    log.warning("refused a local client of another user (%s)", cred)
                sock.close()
                return
            assert cred is not None
            peer = cred.label
        else:
            peer = peer_key(addr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine = self._by_peer.get(peer)
        if mine is not None and len(mine) >= self.limits.max_per_peer:
            self._drop(next(iter(mine.values())), "handshake_peer_limit")
        if len(self._pending) >= self.limits.max_pending:
            victim = self._oldest_of_biggest_peer()
            if victim is not None:
                self._drop(victim, "handshake_limit")
        sock.setblocking(False)
        nonce = auth.new_nonce()
        challenge = wire.pack_header(FrameHeader(Op.CHALLENGE, Status.OK, 0, len(nonce), 0)) + nonce
        p = _Pending(sock, peer, time.monotonic() + self.limits.handshake_timeout_s, challenge)
        fd = sock.fileno()
        self._pending[fd] = p
        self._by_peer.setdefault(peer, OrderedDict())[fd] = p
        self._watch(p, selectors.EVENT_WRITE)
        self._flush(p)

    def _oldest_of_biggest_peer(self) -> _Pending | None:
        if not self._by_peer:
            return None
        biggest = max(self._by_peer.values(), key=len)
        return next(iter(biggest.values()))

    # ---- one handshake --------------------------------------------------------------------

    def _watch(self, p: _Pending, events: int) -> None:
        if p.events == events:
            return
        if p.events:
            self._sel.modify(p.sock, events, p)
        else:
            self._sel.register(p.sock, events, p)
        p.events = events

    def _flush(self, p: _Pending) -> None:
        try:
            n = p.sock.send(p.out)
        except BlockingIOError:
            return
        except OSError:
            self._drop(p, "handshake_closed")
            return
        p.out = p.out[n:]
        if p.out:
            self._watch(p, selectors.EVENT_WRITE)
        elif p.authed:
            self._hand_off(p)
        else:
            self._watch(p, selectors.EVENT_READ)

    def _read(self, p: _Pending) -> None:
        try:
            n = p.sock.recv_into(memoryview(p.buf)[p.got :], AUTH_FRAME - p.got)
        except BlockingIOError:
            return
        except OSError:
            self._drop(p, "handshake_closed")
            return
        if n == 0:
            self._drop(p, "handshake_closed")
            return
        before = p.got
        p.got += n
        if before < wire.HEADER_SIZE <= p.got and not self._header_ok(p):
            self._drop(p, "handshake_bad")
            return
        if p.got == AUTH_FRAME:
            self._verify(p)

    def _header_ok(self, p: _Pending) -> bool:
        try:
            h = wire.unpack_header(p.buf[: wire.HEADER_SIZE], wire.Limits())
        except ProtocolError:
            return False
        return h.op == Op.AUTH and h.meta_len == auth.PROOF_LEN + auth.NONCE_LEN and not h.payload_len

    def _verify(self, p: _Pending) -> None:
        h = wire.unpack_header(p.buf[: wire.HEADER_SIZE], wire.Limits())
        proof = bytes(p.buf[wire.HEADER_SIZE : wire.HEADER_SIZE + auth.PROOF_LEN])
        client_nonce = bytes(p.buf[wire.HEADER_SIZE + auth.PROOF_LEN :])
        if not auth.verify(auth.client_proof(self._secret, p.nonce), proof):
            self.counters["auth"] += 1
            if worth_logging(self.counters["auth"]):
                log.info(
                    "refused %s: bad client proof (wrong shared secret?); %d so far",
                    p.peer,
                    self.counters["auth"],
                )
            with contextlib.suppress(OSError):
                p.sock.send(wire.pack_header(FrameHeader(Op.AUTH, Status.AUTH_FAILED, h.req_id, 0, 0)))
            self._drop(p, None)
            return
        reply = auth.server_proof(self._secret, client_nonce) + self._hello
        p.out = memoryview(wire.pack_header(FrameHeader(Op.AUTH, Status.OK, h.req_id, len(reply), 0)) + reply)
        p.authed = True
        self._flush(p)

    def _forget(self, p: _Pending) -> None:
        fd = p.sock.fileno()
        self._pending.pop(fd, None)
        mine = self._by_peer.get(p.peer)
        if mine is not None:
            mine.pop(fd, None)
            if not mine:
                del self._by_peer[p.peer]
        if p.events:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(p.sock)
            p.events = 0

    def _drop(self, p: _Pending, reason: str | None) -> None:
        self._forget(p)
        if reason:
            self.counters[reason] += 1
        with contextlib.suppress(OSError):
            p.sock.close()

    def _hand_off(self, p: _Pending) -> None:
        self._forget(p)
        try:
            p.sock.setblocking(True)
            self._on_authenticated(p.sock, p.peer)
        except Exception:
            self.counters["internal"] += 1
            log.exception("handing an authenticated connection over failed")
            with contextlib.suppress(OSError):
                p.sock.close()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            self._drop(oldest, "handshake_timeout")
