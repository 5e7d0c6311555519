"""``BoundedHTTPServer``: a small HTTP/1.1 server whose cost a client cannot grow at will.

One selector thread accepts connections and reads every request's head and body without blocking;
only a complete, authorised request reaches one of a fixed number of worker threads, which runs
the handler and writes the reply. So the threads the server holds are ``1 + limits.workers``
whatever the clients do, and its buffers are bounded by ``max_connections`` times the header and
body limits.

Invariants and failure semantics:

- At most ``max_connections`` connections are open, at most ``max_per_peer`` from one address.
  A new connection over either limit evicts the oldest connection of that peer (or of anyone, for
  the global limit) that has not finished sending its head (or was already refused); when none
  can be evicted it is answered 503 and closed. A client that sends its head promptly is never evicted.
- The head must arrive within ``header_timeout_s`` of the accept (else 408) and fit in
  ``max_header_bytes`` (else 431).
- ``authorize`` sees the head before any byte of the body is read; a refusal is 401 and the body
  is never read (the connection lingers a moment so the client reads the reply, then closes).
- The body is announced by ``Content-Length``: missing on POST, or chunked, 411; not a
  non-negative integer (or two different values), 400; over ``max_body_bytes``, 413. A body
  shorter than announced is 400 once ``body_timeout_s`` passed since the head.
- A request line that is not ``METHOD PATH HTTP/1.x``, or a header line without a colon, is 400;
  a method other than GET and POST is 405.
- Every connection carries one request; the reply says ``Connection: close``.
- A request ``inline`` accepts (a bounded, I/O-free handler such as a local lookup) is handled on
  the selector thread itself, saving the hand-off to a worker (under a busy GIL, each hand-off
  waits up to a switch interval); its reply is sent without blocking, the rest (if the socket
  takes less) by a worker.
- ``close`` stops accepting, closes every connection and returns within about a second; a
  handler still running finishes on its worker thread and its reply is dropped.
"""

from __future__ import annotations

import contextlib
import http
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one client, or all of them together, may hold of the server."""

    max_connections: int = 128
    max_per_peer: int = 32
    header_timeout_s: float = 5.0
    body_timeout_s: float = 10.0
    max_header_bytes: int = 16 << 10
    max_body_bytes: int = 8 << 20  # a hint request of 65536 SGLang page hashes is 4.3 MiB
    workers: int = 4
    send_timeout_s: float = 10.0
    linger_s: float = 1.0
    """How long a refused connection is read (and the bytes dropped) before it is closed, so the
    client reads the reply instead of a reset."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased; a repeated header keeps its last value."""
    peer: str
    body: bytes = b""


Reply = tuple[int, dict[str, Any]]
_EVICTABLE = ("head", "linger")  # a connection still sending its head, or already refused
Authorize = Callable[[Request], bool]
Handle = Callable[[Request], Reply]
Inline = Callable[[Request], bool]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    accepted: float
    deadline: float
    state: str = "head"  # head -> body -> work (a worker has it) | linger (refused, being closed)
    buf: bytearray = field(default_factory=bytearray)
    request: Request | None = None
    length: int = 0


def encode_reply(status: int, body: dict[str, Any]) -> bytes:
    raw = json.dumps(body, default=str).encode()
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Status"
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + raw


class BoundedHTTPServer:
    """The server (module docstring). ``OSError`` from the constructor when the address is taken."""

    def __init__(
        self,
        address: tuple[str, int],
        authorize: Authorize,
        handle: Handle,
        limits: Limits | None = None,
        name: str = "hicache-http",
        inline: Inline | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self._authorize = authorize
        self._handle = handle
        self._inline = inline
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(64)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._lock = threading.Lock()
        self._conns: list[_Conn] = []  # every open connection, oldest first (guarded by _lock)
        self._done: list[_Conn] = []  # closed by workers, to forget (guarded by _lock)
        self._stopped = threading.Event()
        self._workers = ThreadPoolExecutor(
            max_workers=self.limits.workers, thread_name_prefix=f"{name}-worker"
        )
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def close(self) -> None:
        self._stopped.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._workers.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the selector thread
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _loop(self) -> None:
        try:
            while not self._stopped.is_set():
                for key, _mask in self._sel.select(timeout=0.2):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._readable(key.data)
                self._expire(time.monotonic())
        except Exception:  # a bug: log it, and close rather than leave clients hanging
            log.exception("admin endpoint: the server loop failed")
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            if conn.state != "work":
                self._forget(conn)
        self._sel.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the connection stays queued; try later
                log.warning("admin endpoint: accept failed: %s", exc)
                time.sleep(0.05)  # the listener stays readable: do not spin
                return
            sock.setblocking(False)
            now = time.monotonic()
            conn = _Conn(sock, str(addr[0]), now, now + self.limits.header_timeout_s)
            if not self._make_room(conn.peer):
                self._refuse(conn, 503, "the admin endpoint has too many connections open; retry")
                continue
            with self._lock:
                self._conns.append(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _make_room(self, peer: str) -> bool:
        """Room for one more connection of ``peer``: evicts the oldest unfinished head of that peer
        (or, at the global limit, of anyone). False when there is no room."""
        with self._lock:
            self._reap()
            mine = [c for c in self._conns if c.peer == peer]
            victim: _Conn | None = None
            if len(mine) >= self.limits.max_per_peer:
                victim = next((c for c in mine if c.state in _EVICTABLE), None)
                if victim is None:
                    return False
            elif len(self._conns) >= self.limits.max_connections:
                victim = next((c for c in self._conns if c.state in _EVICTABLE), None)
                if victim is None:
                    return False
            if victim is not None:
                self._conns.remove(victim)
        if victim is not None:
            self._forget(victim)
        return True

    def _reap(self) -> None:
        """Forget the connections workers closed (under ``_lock``)."""
        if self._done:
            done = set(map(id, self._done))
            self._conns = [c for c in self._conns if id(c) not in done]
            self._done.clear()

    def _forget(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _drop(self, conn: _Conn) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._conns.remove(conn)
        self._forget(conn)

    def _refuse(self, conn: _Conn, status: int, message: str) -> None:
        """Answer ``status`` (best effort, without blocking), then linger: read and drop what the
        client still sends for ``linger_s``, and close."""
        with contextlib.suppress(OSError):
            conn.sock.send(encode_reply(status, {"error": message}))
            conn.sock.shutdown(socket.SHUT_WR)
        if conn.state == "head" and conn not in self._conns_snapshot():
            conn.sock.close()  # never registered (refused at accept)
            return
        conn.state = "linger"
        conn.deadline = time.monotonic() + self.limits.linger_s
        conn.buf = bytearray()

    def _conns_snapshot(self) -> list[_Conn]:
        with self._lock:
            return list(self._conns)

    def _expire(self, now: float) -> None:
        with self._lock:
            self._reap()
            late = [c for c in self._conns if c.state != "work" and c.deadline <= now]
        for conn in late:
            if conn.state == "head":
                self._refuse(
                    conn, 408, f"the request head did not arrive within {self.limits.header_timeout_s:g} s"
                )
            elif conn.state == "body":
                got = len(conn.buf)
                self._refuse(
                    conn, 400,
                    f"the body is shorter than its Content-Length ({got} of {conn.length} bytes "
                    f"within {self.limits.body_timeout_s:g} s)",
                )  # fmt: skip
            else:
                self._drop(conn)

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.state == "linger":
            return  # dropped
        conn.buf += data
        try:
            if conn.state == "head":
                self._read_head(conn)
            if conn.state == "body" and len(conn.buf) >= conn.length:
                self._dispatch(conn)
        except _Refused as refused:
            self._refuse(conn, refused.status, str(refused))

    def _read_head(self, conn: _Conn) -> None:
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.buf) > self.limits.max_header_bytes:
                raise _Refused(431, f"the request head is over {self.limits.max_header_bytes} bytes")
            return
        if end > self.limits.max_header_bytes:
            raise _Refused(431, f"the request head is over {self.limits.max_header_bytes} bytes")
        request = parse_head(bytes(conn.buf[:end]), conn.peer)
        if not self._authorize(request):
            raise _Refused(401, "missing or wrong bearer token")
        conn.length = body_length(request, self.limits.max_body_bytes)
        conn.request = request
        conn.buf = conn.buf[end + 4 :]
        conn.state = "body"
        conn.deadline = time.monotonic() + self.limits.body_timeout_s

    def _dispatch(self, conn: _Conn) -> None:
        assert conn.request is not None
        conn.request.body = bytes(conn.buf[: conn.length])
        conn.buf = bytearray()
        conn.state = "work"
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        if self._inline is not None and self._inline(conn.request):
            self._answer_inline(conn)
            return
        try:
            self._workers.submit(self._work, conn)
        except RuntimeError:  # shut down
            self._drop(conn)

    def _answer_inline(self, conn: _Conn) -> None:
        """Handle ``conn`` here and send what the socket takes now; a worker sends the rest."""
        reply = self._reply(conn)
        try:
            sent = conn.sock.send(reply)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = len(reply)  # the client went away
        if sent >= len(reply):
            self._finish(conn)
            return
        try:
            self._workers.submit(self._send, conn, reply[sent:])
        except RuntimeError:  # shut down
            self._finish(conn)

    # ------------------------------------------------------------------ a worker thread
    def _work(self, conn: _Conn) -> None:
        self._send(conn, self._reply(conn))

    def _reply(self, conn: _Conn) -> bytes:
        assert conn.request is not None
        try:
            status, body = self._handle(conn.request)
        except Exception as exc:  # a bug: answer, log, keep serving
            log.exception("admin %s %s failed", conn.request.method, conn.request.path)
            status, body = 500, {"error": f"internal error: {type(exc).__name__}"}
        return encode_reply(status, body)

    def _send(self, conn: _Conn, reply: bytes) -> None:
        try:
            if not self._stopped.is_set():
                conn.sock.setblocking(True)
                conn.sock.settimeout(self.limits.send_timeout_s)
                conn.sock.sendall(reply)
        except OSError:
            pass  # the client went away
        finally:
            self._finish(conn)

    def _finish(self, conn: _Conn) -> None:
        conn.sock.close()
        with self._lock:
            self._done.append(conn)


def parse_head(head: bytes, peer: str) -> Request:
    """The request line and headers; ``_Refused`` (400, 405) when they are malformed."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise _Refused(400, "malformed request line (expected 'METHOD /path HTTP/1.1')")
    method, path, _version = parts
    headers: dict[str, str] = {}
    lengths: set[str] = set()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Refused(400, "malformed header line (expected 'Name: value')")
        key = name.lower()
        headers[key] = value.strip()
        if key == "content-length":
            lengths.add(value.strip())
    if len(lengths) > 1:
        raise _Refused(400, "conflicting Content-Length headers")
    if method not in ("GET", "POST"):
        raise _Refused(405, f"method {method!r} is not served (GET, POST)")
    return Request(method, path, headers, peer)


def body_length(request: Request, max_body_bytes: int) -> int:
    """The body's announced length; ``_Refused`` (400, 411, 413) when it is absent, malformed or
    too large."""
    if "transfer-encoding" in request.headers:
        raise _Refused(411, "chunked bodies are not accepted: send Content-Length")
    raw = request.headers.get("content-length")
    if raw is None:
        if request.method == "POST":
            raise _Refused(411, "a POST needs a Content-Length header")
        return 0
    if not raw.isascii() or not raw.isdigit():
        raise _Refused(400, f"Content-Length must be a non-negative integer, got {raw[:32]!r}")
    length = int(raw)
    if length > max_body_bytes:
        raise _Refused(413, f"request body over {max_body_bytes} bytes")
    return length
