"""A client connection to a node (handshake, framed request/reply) and a pool of them per peer.

A peer is ``host:port`` over TCP, or a Unix domain socket written ``unix:/path`` as the host (the
host cache: same host, file permissions and the server's peer-credential check instead of a
secret). Without a shared secret a connection to a node beyond loopback is refused (``AuthError``)
unless ``ClientOptions.allow_unauthenticated``; then it is warned once per node. A connection's
``limits`` are the stricter of the client's and the node's (learned in the handshake)."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import auth, wire
from .errors import AuthError, PeerUnavailable, ProtocolError, RequestRefused
from .options import ClientOptions
from .sockio import recv_exact, recv_into_all, send_all
from .wire import FrameHeader, Limits, Op, Status

log = logging.getLogger(__name__)
_req_ids = itertools.count(1)
_warned_open: set[tuple[str, int]] = set()
UNIX_PREFIX = "unix:"


def unix_socket_path(host: str) -> str | None:
    """The socket path of a ``unix:/path`` peer, else None."""
    return host[len(UNIX_PREFIX) :] if host.startswith(UNIX_PREFIX) else None


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    path = unix_socket_path(host)
    if path is None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _stricter(mine: Limits, node: Any) -> Limits:
    """The tighter of our limits and the ones a node announced (ignored when malformed)."""
    if not isinstance(node, dict):
        return mine
    try:
        return Limits(
            min(mine.max_key_len, int(node["max_key_len"])),
            min(mine.max_batch, int(node["max_batch"])),
            min(mine.max_meta, int(node["max_meta"])),
            min(mine.max_payload, int(node["max_payload"])),
        )
    except (KeyError, TypeError, ValueError):
        return mine


def check_authentication(host: str, port: int, opts: ClientOptions) -> None:
    """Refuse (``AuthError``) to reach a node beyond loopback without a secret, unless allowed."""
    if opts.secret or unix_socket_path(host) is not None or auth.is_loopback_host(host):
        return
    if not opts.allow_unauthenticated:
        raise AuthError(
            f"refusing to reach {host}:{port} (beyond loopback) without a shared secret: set one "
            "(tiers.remote.secret_env / secret_file), or tiers.remote.allow_unauthenticated: true"
        )
    if (host, port) not in _warned_open:
        _warned_open.add((host, port))
        log.warning("reaching node %s:%d WITHOUT a shared secret (allow_unauthenticated)", host, port)


class Connection:
    def __init__(self, host: str, port: int, opts: ClientOptions) -> None:
        self.reused = False
        """Handed out again from the pool (the node may have closed it since it went idle)."""
        self.opts = opts
        self.limits = opts.limits
        check_authentication(host, port, opts)
        deadline = time.monotonic() + opts.connect_timeout_s
        try:
            self.sock = _connect(host, port, opts.connect_timeout_s)
        except OSError as exc:
            raise PeerUnavailable(f"connect {host}:{port}: {exc}") from exc
        try:
            self.segment = self._handshake(deadline)
        except BaseException:
            self.close()
            raise

    def _handshake(self, deadline: float) -> dict[str, Any]:
        h, meta = self._read_reply(deadline)
        if h.op != Op.CHALLENGE or len(meta) != auth.NONCE_LEN:
            raise ProtocolError("peer did not send a challenge")
        cnonce = auth.new_nonce()
        proof = auth.client_proof(self.opts.secret, bytes(meta))
        rid = next(_req_ids)
        head = wire.pack_header(FrameHeader(Op.AUTH, 0, rid, len(proof) + len(cnonce), 0))
        send_all(self.sock, [memoryview(head), memoryview(proof + cnonce)], deadline)
        h, meta = self._read_reply(deadline)
        if h.status == Status.AUTH_FAILED:
            raise AuthError("node refused our shared secret")
        if h.op != Op.AUTH or h.status != Status.OK or len(meta) < auth.PROOF_LEN:
            raise ProtocolError("bad AUTH reply")
        if not auth.verify(auth.server_proof(self.opts.secret, cnonce), meta[: auth.PROOF_LEN]):
            raise AuthError("node failed to prove the shared secret")
        try:
            info = json.loads(bytes(meta[auth.PROOF_LEN :]))
        except ValueError as exc:
            raise ProtocolError(f"bad segment description in the AUTH reply: {exc}") from None
        if not isinstance(info, dict):
            raise ProtocolError("bad segment description in the AUTH reply")
        self.limits = _stricter(self.opts.limits, info.get("limits"))
        return info

    def _read_reply(self, deadline: float) -> tuple[FrameHeader, bytearray]:
        """A reply's header, then its meta; a reply with a payload is a ``ProtocolError`` (those
        are received by :meth:`request_into`)."""
        h = wire.unpack_header(recv_exact(self.sock, wire.HEADER_SIZE, deadline), self.limits)
        if h.payload_len:
            raise ProtocolError("unexpected payload")
        return h, recv_exact(self.sock, h.meta_len, deadline)

    def request(
        self, op: Op, meta: bytes, payload: Sequence[memoryview] = (), deadline: float | None = None
    ) -> tuple[FrameHeader, bytearray]:
        """Send one request and read its reply, header then meta (a reply with a payload is a
        ``ProtocolError``: those are received by :meth:`request_into`). For the requests whose
        reply's length is not known before it arrives (CLEAR, STATS, PING, RDMA_CONNECT)."""
        deadline = deadline if deadline is not None else time.monotonic() + self.opts.timeout_s
        rid = self._send_request(op, meta, payload, deadline)
        h, rmeta = self._read_reply(deadline)
        return self._checked(h, rid), rmeta

    def request_into(
        self,
        op: Op,
        meta: bytes,
        reply_meta: int,
        into: Sequence[memoryview],
        deadline: float,
        payload: Sequence[memoryview] = (),
    ) -> tuple[FrameHeader, bytearray]:
        """Send one request whose reply's length is known (``reply_meta`` bytes of meta,
        :func:`~.wire.reply_meta_size`, then a payload that fills ``into`` exactly: a GET's; none
        for the others) and receive all of the reply in one scatter call. A call that blocks
        gives the GIL up, and next to a thread running Python (SGLang's scheduler) getting it
        back takes up to a switch interval: a get pays one such wait for its reply, not one for
        the header, one for the meta and one for the payload. A node that refuses a request
        closes the connection after its answer, so this never waits for bytes that do not come.
        ``into`` holds whatever arrived even when the reply is then refused (the caller's miss)."""
        rid = self._send_request(op, meta, payload, deadline)
        head = bytearray(wire.HEADER_SIZE)
        rmeta = bytearray(reply_meta)
        try:
            recv_into_all(self.sock, [memoryview(head), memoryview(rmeta), *into], deadline)
        except PeerUnavailable:  # closed after its answer: a refusal, not a dead node
            refusal = self._refusal(head, rid)
            if refusal is not None:
                raise refusal from None
            raise
        h = self._checked(wire.unpack_header(head, self.limits), rid)
        payload_len = sum(len(v) for v in into)
        if h.meta_len != reply_meta or h.payload_len != payload_len:
            raise ProtocolError(
                f"reply of {h.meta_len} + {h.payload_len} bytes where its request announced "
                f"{reply_meta} + {payload_len}"
            )
        return h, rmeta

    def _refusal(self, head: bytearray, rid: int) -> RequestRefused | None:
        """The refusal in a reply header that arrived before its connection closed (None: no
        whole header of this request's reply came, or it was no refusal)."""
        try:
            h = wire.unpack_header(head, self.limits)
        except ProtocolError:
            return None
        return _refused(h) if h.req_id == rid and h.status != Status.OK else None

    def _send_request(self, op: Op, meta: bytes, payload: Sequence[memoryview], deadline: float) -> int:
        rid = next(_req_ids)
        plen = sum(len(p) for p in payload)
        head = wire.pack_header(FrameHeader(op, 0, rid, len(meta), plen))
        send_all(self.sock, [memoryview(head), memoryview(meta), *payload], deadline)
        return rid

    @staticmethod
    def _checked(h: FrameHeader, rid: int) -> FrameHeader:
        if h.req_id != rid:
            raise ProtocolError(f"reply id {h.req_id} does not match request {rid}")
        if h.status != Status.OK:
            raise _refused(h)
        return h

    def idle_usable(self) -> bool:
        """For a pooled idle connection: nothing may be readable (readable means the node closed
        it, e.g. as idle, or the stream holds bytes nobody asked for)."""
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _refused(h: FrameHeader) -> RequestRefused:
    try:
        name: str | int = Status(h.status).name
    except ValueError:  # a status this client does not know (a newer node)
        name = h.status
    return RequestRefused(f"node answered {name}")


class ConnectionPool:
    """Up to ``opts.connections_per_peer`` connections to one node. A failed connect marks the
    peer down for ``retry_interval_s``: meanwhile ``acquire`` fails at once (callers miss fast)."""

    def __init__(self, host: str, port: int, opts: ClientOptions) -> None:
        self.host, self.port, self.opts = host, port, opts
        self._idle: list[Connection] = []
        self._total = 0
        self._cond = threading.Condition()
        self._down_until = 0.0
        self._closed = False
        self.segment: dict[str, Any] = {}

    def acquire(self, deadline: float) -> Connection:
        with self._cond:
            while True:
                if self._closed:
                    raise PeerUnavailable("pool closed")
                while self._idle:
                    idle = self._idle.pop()
                    if idle.idle_usable():
                        idle.reused = True
                        return idle
                    idle.close()  # closed by the node while idle: not a sign of a dead node
                    self._total -= 1
                if time.monotonic() < self._down_until:
                    raise PeerUnavailable(f"{self.host}:{self.port} is marked down")
                if self._total < self.opts.connections_per_peer:
                    self._total += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    raise PeerUnavailable("no free connection before the deadline")
        try:
            conn = Connection(self.host, self.port, self.opts)
        except AuthError:
            with self._cond:
                self._total -= 1
                self._cond.notify()
            raise
        except BaseException:
            with self._cond:
                self._total -= 1
                self._down_until = time.monotonic() + self.opts.retry_interval_s
                self._cond.notify()
            raise
        self.segment = conn.segment
        return conn

    def release(self, conn: Connection, ok: bool, peer_alive: bool = False) -> None:
        """Return ``conn``; ``ok=False`` (any error mid-request) closes it: the stream is lost.
        Unless ``peer_alive`` (the node answered, it refused the request), the peer is then also
        marked down for a moment."""
        with self._cond:
            if ok and not self._closed:
                self._idle.append(conn)
            else:
                conn.close()
                self._total -= 1
                if not ok and not peer_alive:
                    # the node may be dying: new calls should not queue behind connect timeouts
                    self._down_until = time.monotonic() + min(self.opts.retry_interval_s, 0.2)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for c in self._idle:
                c.close()
            self._total -= len(self._idle)
            self._idle.clear()
            self._cond.notify_all()
