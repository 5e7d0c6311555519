"""The memory node: contributes a DRAM arena and serves it over the wire protocol.

One thread (the ``HandshakeGate``) accepts sockets and authenticates them all without blocking;
each authenticated connection then gets its own worker thread (socket I/O releases the GIL), at
most ``max_connections`` (when full, the longest-idle one makes room). PUT bodies are received
straight into arena slots and GET bodies sent straight from them; every request must complete
within ``request_timeout_s`` once its header arrived. A heartbeat thread keeps the node registered
in the metadata service. ``drain()`` (SIGTERM in the CLI) deregisters, stops accepting, lets
in-flight requests finish and closes.

A node bound beyond loopback refuses to start without a shared secret unless
``allow_unauthenticated`` is set. With ``shm`` the arena is an ``ArenaFile`` (header with node id,
epoch and a random token, locked while the node lives); arenas of dead earlier processes with the
same node id are removed at start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import threading
import time
from collections import Counter
from typing import Any

from . import auth, wire
from .arena import Arena, arena_size
from .arena_files import ArenaFile, collect_stale
from .arena_header import ArenaHeader
from .errors import ProtocolError, RdmaSetupError, TransportError
from .eviction import Evictor
from .handshake_gate import GateLimits, HandshakeGate
from .metadata.base import MetadataService, NodeInfo
from .node_config import NodeConfig
from .rdma_handshake import QpInfo
from .sockio import drain, recv_exact, recv_into_exact, send_all
from .store import RESERVED_NEW, RESERVED_PRESENT, NodeStore
from .wire import FrameHeader, Op, Status

log = logging.getLogger(__name__)
_ABORT = 1 << 63  # COMMIT of (key, version | _ABORT) releases the reservation instead


class _Conn:
    __slots__ = ("busy", "last_active", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.busy = False
        self.last_active = time.monotonic()


def _wait_readable(sock: socket.socket, deadline: float) -> None:
    """Block until ``sock`` has bytes to read (or EOF), or raise ``TimeoutError`` at ``deadline``."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no body before the request deadline")
        if poller.poll(left * 1000):
            return


def check_authentication(cfg: NodeConfig, secret: bytes) -> None:
    """Refuse (``ValueError`` naming the keys) to serve beyond loopback without a shared secret,
    unless ``allow_unauthenticated``; then warn, at every start."""
    if secret or auth.is_loopback_host(cfg.host):
        return
    where = f"node.host {cfg.host!r} is reachable beyond loopback"
    if not cfg.allow_unauthenticated:
        if cfg.secret_file:
            source = f"node.secret_file {cfg.secret_file!r} is empty"
        else:
            source = f"${cfg.secret_env} (node.secret_env) is empty or unset"
        raise ValueError(
            f"{where} and no shared secret is set ({source}): anyone who can reach the port could "
            "read and write the pool. Set a secret, or node.allow_unauthenticated: true to run open."
        )
    log.warning(
        "%s and runs WITHOUT a shared secret (node.allow_unauthenticated: true): "
        "anyone who can reach it can read and write the pool",
        where,
    )


class NodeServer:
    def __init__(
        self,
        cfg: NodeConfig,
        metadata: MetadataService | None = None,
        evictor: Evictor | None = None,
        heartbeat_interval_s: float = 1.0,
        heartbeat_ttl_s: float = 5.0,
    ) -> None:
        self.cfg = cfg
        self.limits = cfg.limits()
        self._secret = cfg.secret()
        check_authentication(cfg, self._secret)
        self.metadata = metadata
        self.hb_interval = heartbeat_interval_s
        self.hb_ttl = heartbeat_ttl_s
        self._listener = socket.create_server((cfg.host, cfg.port), backlog=1024, reuse_port=False)
        self.host, self.port = self._listener.getsockname()[:2]
        self.node_id = cfg.node_id or f"{self.host}:{self.port}"
        self.epoch = int(time.time() * 1_000_000)
        self._arena_token = ArenaHeader.new_token()
        shm = None
        try:
            if cfg.shm:
                for stale in collect_stale(cfg.shm_dir, self.node_id):
                    log.info(
                        "removed stale arena %s (%d bytes) of dead process %d",
                        stale.path,
                        stale.size,
                        stale.pid,
                    )
                header = ArenaHeader(
                    self.node_id, self.epoch, arena_size(cfg.capacity), os.getpid(), self._arena_token
                )
                shm = ArenaFile(cfg.shm_dir, header)
            self.arena = Arena(cfg.capacity, shm)
        except BaseException:
            if shm is not None:
                shm.close()
            self._listener.close()
            raise
        shm_path = self.arena.shm_path or ""
        self.store = NodeStore(self.arena, evictor)
        self.info = NodeInfo(self.node_id, self.host, self.port, self.arena.size, self.epoch, shm_path)
        self._rdma: Any = None
        if cfg.rdma_device:
            self._rdma = self._open_rdma()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._draining = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gate = HandshakeGate(
            self._listener,
            self._secret,
            self._hello(),
            GateLimits(cfg.handshake_timeout_s, cfg.max_handshakes, cfg.max_handshakes_per_peer),
            self._admit,
            self.errors,
        )

    def _open_rdma(self) -> Any:
        """The RDMA responder over the arena; a device that cannot serve stops the node (with
        its listener and arena released) naming the ``node.rdma_*`` keys."""
        from .rdma_responder import RdmaResponder

        try:
            return RdmaResponder(self.arena.view, self.cfg.rdma_options(), self.arena.data_offset)
        except (TransportError, ValueError) as exc:
            with contextlib.suppress(OSError):
                self._listener.close()
            self.arena.close()
            raise ValueError(f"node.rdma_device: {self.cfg.rdma_device!r} cannot serve RDMA: {exc}") from exc

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._gate.start()
        if self.metadata is not None:
            self._heartbeat_once()
            self._spawn(self._heartbeat_loop, "heartbeat")
        if self.cfg.ready_file:
            tmp = self.cfg.ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{self.host} {self.port}\n")
            os.replace(tmp, self.cfg.ready_file)
        log.info("node %s serving %d bytes on %s:%d", self.node_id, self.arena.size, self.host, self.port)

    def _spawn(self, fn: Any, name: str, *args: Any) -> threading.Thread:
        t = threading.Thread(target=fn, args=args, name=f"node-{name}", daemon=True)
        t.start()
        return t

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def drain(self, timeout: float | None = None) -> None:
        """Leave the cluster, stop accepting, let in-flight requests finish, release everything."""
        if self._draining.is_set():
            return
        self._draining.set()
        timeout = self.cfg.drain_timeout_s if timeout is None else timeout
        if self.metadata is not None:
            try:
                self.metadata.deregister_node(self.node_id)
            except TransportError as exc:
                log.warning("could not deregister from metadata: %s", exc)
        self._gate.close()
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                conns = list(self._conns)
            for c in conns:
                if not c.busy:
                    self._shutdown(c.sock)
            if not conns or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        for c in conns:
            self._shutdown(c.sock)
        if self._rdma is not None:
            self._rdma.close()  # no client QP reaches the arena from here on
        self.arena.close()
        self._stopped.set()
        log.info("node %s drained", self.node_id)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _heartbeat_once(self) -> None:
        assert self.metadata is not None
        try:
            self.metadata.register_node(self.info, self.hb_ttl)
        except TransportError as exc:
            self.errors["heartbeat"] += 1
            if self.errors["heartbeat"] in (1, 10) or self.errors["heartbeat"] % 100 == 0:
                log.warning("heartbeat failed (%d so far): %s", self.errors["heartbeat"], exc)

    def _heartbeat_loop(self) -> None:
        while not self._draining.wait(self.hb_interval):
            self._heartbeat_once()

    def _admit(self, sock: socket.socket, peer: str) -> None:
        """An authenticated socket from the gate: give it a worker, making room when full by
        closing the longest-idle connection (never one in a request or holding reservations)."""
        conn = _Conn(sock)
        with self._lock:
            if self._draining.is_set():
                victim, refused = None, True
            elif len(self._conns) < self.cfg.max_connections:
                victim, refused = None, False
            else:
                idle = [
                    c
                    for c in self._conns
                    if not c.busy
                    and not self.store.owns_pending(c)
                    and not (self._rdma is not None and self._rdma.owns(c))  # it anchors live QPs
                ]
                victim = min(idle, key=lambda c: c.last_active, default=None)
                refused = victim is None
                if victim is not None:
                    self._conns.discard(victim)
            if not refused:
                self._conns.add(conn)
        if victim is not None:
            self.errors["idle_connections_closed"] += 1
            self._shutdown(victim.sock)
        if refused:
            self.errors["refused_connections"] += 1
            with contextlib.suppress(OSError):
                sock.close()
            return
        self._spawn(self._serve, "conn", conn)

    # ---- one connection -------------------------------------------------------------------

    def _serve(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            hdr_buf = bytearray(wire.HEADER_SIZE)
            hdr_view = memoryview(hdr_buf)
            while not self._draining.is_set():
                # a connection anchoring RDMA QPs idles as long as its client keeps them
                idle = self._rdma is not None and self._rdma.owns(conn)
                recv_into_exact(sock, hdr_view, None if idle else time.monotonic() + self.cfg.idle_timeout_s)
                conn.busy = True
                deadline = time.monotonic() + self.cfg.request_timeout_s
                try:
                    h = wire.unpack_header(hdr_buf, self.limits)
                except ProtocolError as exc:
                    self.errors["protocol"] += 1
                    self._reply_error(
                        sock, 0, Status.TOO_LARGE if "exceeds" in str(exc) else Status.BAD_REQUEST
                    )
                    return
                meta = recv_exact(sock, h.meta_len, deadline)
                if not self._dispatch(conn, h, meta, deadline):
                    return
                conn.last_active = time.monotonic()
                conn.busy = False
        except (OSError, TimeoutError, TransportError) as exc:
            log.debug("connection closed: %s", exc)
        except Exception:
            self.errors["internal"] += 1
            log.exception("connection handler failed")
        finally:
            conn.busy = False
            self.store.release_owner(conn)
            if self._rdma is not None:
                self._rdma.release_owner(conn)
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                sock.close()

    def _hello(self) -> bytes:
        """What an authenticated client learns: the segment (for one-sided engines) and limits."""
        return json.dumps(
            {
                "node_id": self.node_id,
                "epoch": self.epoch,
                "arena_size": self.arena.size,
                "shm_path": self.arena.shm_path or "",
                "arena_token": self._arena_token.hex(),
                "limits": {
                    "max_key_len": self.limits.max_key_len,
                    "max_batch": self.limits.max_batch,
                    "max_meta": self.limits.max_meta,
                    "max_payload": self.limits.max_payload,
                },
            }
        ).encode()

    def _send(
        self,
        sock: socket.socket,
        op: int,
        status: int,
        req_id: int,
        meta: bytes,
        payload: list[memoryview] | None = None,
        deadline: float | None = None,
    ) -> None:
        plen = sum(len(p) for p in payload) if payload else 0
        head = wire.pack_header(FrameHeader(op, status, req_id, len(meta), plen))
        send_all(sock, [memoryview(head), memoryview(meta), *(payload or [])], deadline)

    def _reply_error(self, sock: socket.socket, req_id: int, status: int, op: int = 0) -> None:
        with contextlib.suppress(OSError, TimeoutError, TransportError):
            self._send(sock, op, status, req_id, b"", deadline=time.monotonic() + 1.0)

    def _dispatch(self, conn: _Conn, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        """Serve one request; False closes the connection (the stream cannot be trusted)."""
        sock = conn.sock
        try:
            op = Op(h.op)
        except ValueError:
            self.errors["unknown_op"] += 1
            self._reply_error(sock, h.req_id, Status.UNKNOWN_OP, h.op)
            return False
        self.requests[op.name] += 1
        if op not in (Op.PUT, Op.WRITE_AT) and h.payload_len:
            self.errors["protocol"] += 1
            self._reply_error(sock, h.req_id, Status.BAD_REQUEST, op)
            return False
        try:
            if op is Op.PUT:
                return self._put(conn, h, meta, deadline)
            if op is Op.WRITE_AT:
                return self._write_at(conn, h, meta, deadline)
            if op is Op.GET:
                return self._get(sock, h, meta, deadline)
            if op is Op.READ_AT:
                return self._read_at(sock, h, meta, deadline)
            if op is Op.EXISTS:
                flags = self.store.exists(wire.decode_keys(meta, self.limits))
                reply = wire.encode_flags(flags)
            elif op is Op.REMOVE:
                reply = wire.encode_flags(self.store.remove(wire.decode_keys(meta, self.limits)))
            elif op is Op.LOOKUP:
                reply = wire.encode_lookup_reply(self.store.lookup(wire.decode_keys(meta, self.limits)))
            elif op is Op.ALLOC:
                reply = self._alloc(conn, meta)
            elif op is Op.COMMIT:
                items = wire.decode_commit(meta, self.limits)
                oks = []
                for key, version in items:
                    if version & _ABORT:
                        self.store.abort_key(key, version & ~_ABORT, conn)
                        oks.append(False)
                    else:
                        oks.append(self.store.commit_key(key, version, conn))
                reply = wire.encode_flags(oks)
            elif op is Op.CLEAR:
                reply = json.dumps({"removed": self.store.clear()}).encode()
            elif op is Op.STATS:
                reply = json.dumps(self.stats()).encode()
            elif op is Op.RDMA_CONNECT:
                if self._rdma is None:  # "unknown op": this node serves no RDMA
                    self._reply_error(sock, h.req_id, Status.UNKNOWN_OP, op)
                    return True
                try:
                    reply = self._rdma.accept(QpInfo.decode(meta), owner=conn).encode()
                except RdmaSetupError as exc:
                    self.errors["rdma_setup"] += 1
                    log.warning("RDMA connect refused: %s", exc)
                    self._reply_error(sock, h.req_id, Status.INTERNAL, op)
                    return True
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # it anchors the QP
            elif op is Op.PING:
                reply = b""
            else:
                self._reply_error(sock, h.req_id, Status.UNKNOWN_OP, op)
                return False
        except ProtocolError:
            self.errors["protocol"] += 1
            self._reply_error(sock, h.req_id, Status.BAD_REQUEST, op)
            return True  # meta fully read and no payload: the stream is still in sync
        self._send(sock, op, Status.OK, h.req_id, reply, deadline=deadline)
        return True

    def _put(self, conn: _Conn, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        sock = conn.sock
        try:
            items = wire.decode_put(meta, h.payload_len, self.limits)
        except ProtocolError:
            self.errors["protocol"] += 1
            self._reply_error(sock, h.req_id, Status.BAD_REQUEST, Op.PUT)
            return False  # we cannot trust payload_len to skip the body
        view = self.arena.view
        oks: list[bool] = []
        if h.payload_len:
            _wait_readable(sock, deadline)  # reserve nothing for a body that never comes
        for key, size, otype in items:
            status, slot = self.store.reserve(key, size, otype, conn)
            if status == RESERVED_NEW and slot is not None:
                try:
                    recv_into_exact(sock, view[slot.body : slot.body + size], deadline)
                except BaseException:
                    self.store.abort(slot)
                    raise
                oks.append(self.store.commit(slot))
            else:
                drain(sock, size, deadline)
                oks.append(status == RESERVED_PRESENT)
        self._send(sock, Op.PUT, Status.OK, h.req_id, wire.encode_flags(oks), deadline=deadline)
        return True

    def _get(self, sock: socket.socket, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        items = wire.decode_get(meta, self.limits)
        slots = [self.store.pin(key, size) for key, size in items]
        try:
            entries = [(s is not None, s.size if s else 0, s.obj_type if s else 0) for s in slots]
            view = self.arena.view
            bodies = [view[s.body : s.body + s.size] for s in slots if s is not None]
            self._send(sock, Op.GET, Status.OK, h.req_id, wire.encode_get_reply(entries), bodies, deadline)
        finally:
            for s in slots:
                if s is not None:
                    self.store.unpin(s)
        return True

    def _alloc(self, conn: _Conn, meta: bytearray) -> bytes:
        out = []
        for key, size, otype in wire.decode_put(meta, None, self.limits):
            status, slot = self.store.reserve(key, size, otype, conn)
            out.append((status, slot.offset if slot else 0, slot.version if slot else 0))
        return wire.encode_alloc_reply(out)

    def _read_at(self, sock: socket.socket, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        extents = wire.decode_extents(meta, self.limits)
        view = self.arena.view
        flags = []
        bodies = []
        for off, n in extents:
            ok = off + n <= self.arena.size and self.store.live_extent(off, n)
            flags.append(ok)
            if ok:
                bodies.append(view[off : off + n])
        self._send(sock, Op.READ_AT, Status.OK, h.req_id, wire.encode_flags(flags), bodies, deadline)
        return True

    def _write_at(self, conn: _Conn, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        sock = conn.sock
        try:
            extents = wire.decode_extents(meta, self.limits)
            if sum(n for _, n in extents) != h.payload_len:
                raise ProtocolError("payload length does not match the extents")
        except ProtocolError:
            self.errors["protocol"] += 1
            self._reply_error(sock, h.req_id, Status.BAD_REQUEST, Op.WRITE_AT)
            return False
        view = self.arena.view
        flags = []
        for off, n in extents:
            # only into open reservations: nobody writes over committed data
            if self.store.pending_slot(off, n) is not None:
                recv_into_exact(sock, view[off : off + n], deadline)
                flags.append(True)
            else:
                drain(sock, n, deadline)
                flags.append(False)
        self._send(sock, Op.WRITE_AT, Status.OK, h.req_id, wire.encode_flags(flags), deadline=deadline)
        return True

    def stats(self) -> dict[str, Any]:
        with self._lock:
            nconn = len(self._conns)
        return {
            "node_id": self.node_id,
            "store": self.store.stats(),
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "connections": nconn,
            "rdma_qps": self._rdma.connections() if self._rdma is not None else None,
            "handshakes": self._gate.pending,
            "draining": self._draining.is_set(),
        }
