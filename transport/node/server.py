"""The memory node: serves a store's DRAM arena over the wire protocol. The host cache is one too.

The store is any ``ServedStore`` (``served_store.py``), built by the ``store_factory`` once the
server knows its identity; transport/ knows no implementation (``tiers.arena_store`` is the one).
The server listens on TCP ``host:port``, or on a Unix domain socket (``unix_socket``: the host
cache; the file is created 0600 and every peer's kernel credentials are checked). One thread (the
``HandshakeGate``) accepts sockets and authenticates them all without blocking; each
authenticated connection then gets its own worker thread (socket I/O releases the GIL), at
most ``max_connections`` (when full, the longest-idle one makes room). PUT bodies are received
straight into arena slots and GET bodies sent straight from them; every request must complete
within ``request_timeout_s`` once its header arrived. An object larger than the store's largest
slot (``ServedStore.fits``) is refused before the store is asked, so nothing is evicted for it. A heartbeat thread keeps the node registered
in the metadata service. ``drain()`` (SIGTERM in the CLI) deregisters, stops accepting, lets
in-flight requests finish and closes.

A node bound beyond loopback refuses to start without a shared secret unless
``allow_unauthenticated`` is set. With ``shm`` the store's arena is an ``ArenaFile`` made from the
server's ``ArenaSpec`` (header with node id, epoch and a random token, locked while the node
lives); arenas of dead earlier processes with the same node id are removed at start.

Per-client accounting: requests, reservations, commits and lookups are counted per client (a Unix
socket peer's process, a TCP peer's address) while it is connected; a client whose last
connection closed leaves its reservations released and its counts in ``departed``.
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
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import auth, wire
from ..arena_files import ArenaSpec, collect_stale
from ..arena_header import ArenaHeader
from ..errors import ProtocolError, RdmaSetupError, TransportError
from ..metadata.base import MetadataService, NodeInfo
from ..rdma.handshake import QpInfo
from ..sockio import discarded, drain, recv_exact, recv_into_all, recv_into_exact, send_all, zeros
from ..throttle import worth_logging
from ..wire import FrameHeader, Op, Status
from .config import NodeConfig
from .handshake_gate import GateLimits, HandshakeGate
from .served_store import RESERVED_NEW, RESERVED_PRESENT, ServedStore

log = logging.getLogger(__name__)
_ABORT = 1 << 63  # COMMIT of (key, version | _ABORT) releases the reservation instead
StoreFactory = Callable[[ArenaSpec | None], ServedStore]


class _Conn:
    __slots__ = ("busy", "client", "last_active", "sock")

    def __init__(self, sock: socket.socket, client: str) -> None:
        self.sock = sock
        self.client = client
        self.busy = False
        self.last_active = time.monotonic()


def _unix_listener(path: str) -> tuple[socket.socket, str]:
    """A listening Unix socket bound to a temporary name beside ``path`` (mode 0600); ``start``
    renames it to ``path``, so clients never reach a server that is not serving yet."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(tmp)
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    return sock, tmp


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
    if secret or cfg.unix_socket or auth.is_loopback_host(cfg.host):
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
        store_factory: StoreFactory,
        metadata: MetadataService | None = None,
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
        self._unix_tmp = ""
        if cfg.unix_socket:
            self._listener, self._unix_tmp = _unix_listener(cfg.unix_socket)
            self.host, self.port = f"unix:{cfg.unix_socket}", 0
            self.node_id = cfg.node_id or self.host
        else:
            self._listener = socket.create_server((cfg.host, cfg.port), backlog=1024, reuse_port=False)
            self.host, self.port = self._listener.getsockname()[:2]
            self.node_id = cfg.node_id or f"{self.host}:{self.port}"
        self.epoch = int(time.time() * 1_000_000)
        self._arena_token = ArenaHeader.new_token()
        try:
            spec = None
            if cfg.shm:
                for stale in collect_stale(cfg.shm_dir, self.node_id):
                    log.info(
                        "removed stale arena %s (%d bytes) of dead process %d",
                        stale.path,
                        stale.size,
                        stale.pid,
                    )
                spec = ArenaSpec(cfg.shm_dir, self.node_id, self.epoch, self._arena_token)
            self.store: ServedStore = store_factory(spec)
        except BaseException:
            self._close_listener()
            raise
        self.arena_size = len(self.store.view)
        self.info = NodeInfo(
            self.node_id,
            self.host,
            self.port,
            self.arena_size,
            self.epoch,
            self.store.shm_path,
            max_object=cfg.max_object_bytes,
        )
        self._rdma: Any = None
        if cfg.rdma_device:
            self._rdma = self._open_rdma()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._conns: set[_Conn] = set()
        self._clients: dict[str, Counter[str]] = {}
        self._departed: Counter[str] = Counter()
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
        """The RDMA responder over the store's arena (its object area: the header page that proves
        the shm file to same-host clients is not registered); a device that cannot serve stops the
        node (with its listener and store released) naming the ``node.rdma_*`` keys."""
        from ..rdma.responder import RdmaResponder

        try:
            return RdmaResponder(self.store.view, self.cfg.rdma_options(), self.store.data_offset)
        except (TransportError, ValueError) as exc:
            self._close_listener()
            self.store.close()
            raise ValueError(f"node.rdma_device: {self.cfg.rdma_device!r} cannot serve RDMA: {exc}") from exc

    def _close_listener(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        if self._unix_tmp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._unix_tmp)

    @property
    def connections(self) -> int:
        """Authenticated connections open now (the host cache's idle clock counts from 0)."""
        with self._lock:
            return len(self._conns)

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._gate.start()
        if self._unix_tmp:
            os.replace(self._unix_tmp, self.cfg.unix_socket)  # the socket appears serving
        if self.metadata is not None:
            self._heartbeat_once()
            self._spawn(self._heartbeat_loop, "heartbeat")
        if self.cfg.ready_file:
            tmp = self.cfg.ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{self.host} {self.port}\n")
            os.replace(tmp, self.cfg.ready_file)
        log.info("node %s serving %d bytes on %s:%d", self.node_id, self.arena_size, self.host, self.port)

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
        if self.cfg.unix_socket:
            self._unlink_own_socket()
        self.store.close()
        self._stopped.set()
        log.info("node %s drained", self.node_id)

    def _unlink_own_socket(self) -> None:
        """Remove the socket file unless it was replaced since (a newer server's)."""
        with contextlib.suppress(OSError):
            mine = os.fstat(self._listener.fileno()) if self._listener.fileno() >= 0 else None
            now = os.stat(self.cfg.unix_socket)
            if mine is None or (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(self.cfg.unix_socket)

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
        conn = _Conn(sock, peer)
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
                self._clients.setdefault(peer, Counter())["connections"] += 1
        if victim is not None:
            self.errors["idle_connections_closed"] += 1
            self._shutdown(victim.sock)
        if refused:
            self.errors["refused_connections"] += 1
            with contextlib.suppress(OSError):
                sock.close()
            return
        self._spawn(self._serve, "conn", conn)

    def _count(self, conn: _Conn, **amounts: int) -> None:
        """Add to ``conn``'s client accounting."""
        with self._lock:
            counts = self._clients.get(conn.client)
            if counts is not None:
                counts.update(amounts)

    def _disconnected(self, conn: _Conn) -> None:
        released = self.store.release_owner(conn)
        with self._lock:
            self._conns.discard(conn)
            counts = self._clients.get(conn.client)
            if counts is None:
                return
            counts["released_on_disconnect"] += released
            counts["connections"] -= 1
            if counts["connections"] <= 0:
                del self._clients[conn.client]
                counts.pop("connections", None)
                self._departed.update(counts)
                self._departed["clients"] += 1

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
                self._count(conn, requests=1)
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
            if self._rdma is not None:
                self._rdma.release_owner(conn)
            self._disconnected(conn)
            with contextlib.suppress(OSError):
                sock.close()

    def _hello(self) -> bytes:
        """What an authenticated client learns: the segment (for one-sided engines) and limits."""
        return json.dumps(
            {
                "node_id": self.node_id,
                "epoch": self.epoch,
                "arena_size": self.arena_size,
                "shm_path": self.store.shm_path,
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
                return self._get(conn, h, meta, deadline)
            if op is Op.READ_AT:
                return self._read_at(sock, h, meta, deadline)
            if op is Op.EXISTS:
                flags = self.store.exists(wire.decode_keys(meta, self.limits))
                reply = wire.encode_flags(flags)
            elif op is Op.REMOVE:
                reply = wire.encode_flags(self.store.remove(wire.decode_keys(meta, self.limits)))
            elif op is Op.LOOKUP:
                refs = self.store.lookup(wire.decode_get(meta, self.limits), deadline)
                found = refs["found"] != 0
                self._count(
                    conn,
                    lookups=len(refs),
                    lookup_hits=int(np.count_nonzero(found)),
                    lookup_hit_bytes=int(refs["size"][found].sum()),
                )
                reply = wire.encode_lookup_records(refs)
            elif op is Op.ALLOC:
                reply = self._alloc(conn, meta, deadline)
            elif op is Op.COMMIT:
                reply = self._commit(conn, meta, deadline)
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
            # the stream is still in sync (meta fully read, no payload), but a client waits for
            # the whole reply its request announced (``Connection.request_into``): closing tells
            # it now, not at its deadline
            return False
        self._send(sock, op, Status.OK, h.req_id, reply, deadline=deadline)
        return True

    def _put(self, conn: _Conn, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        sock = conn.sock
        try:
            items, hint = wire.decode_put_request(meta, h.payload_len, self.limits)
        except ProtocolError:
            self.errors["protocol"] += 1
            self._reply_error(sock, h.req_id, Status.BAD_REQUEST, Op.PUT)
            return False  # we cannot trust payload_len to skip the body
        view = self.store.view
        oks: list[bool] = []
        if h.payload_len:
            _wait_readable(sock, deadline)  # reserve nothing for a body that never comes
        reserved = self._reserve(conn, items, hint, deadline)
        self._count(conn, **self._reserved_counts(reserved, items))
        statuses = reserved["status"].tolist()
        offsets, versions = reserved["offset"].tolist(), reserved["version"].tolist()
        fresh = [i for i, status in enumerate(statuses) if status == RESERVED_NEW]
        mine = [(items[i][0], versions[i]) for i in fresh]
        try:
            into: list[memoryview] = []  # the bodies in order: one scatter receive, not one per object
            for (_key, size, _otype), status, offset in zip(items, statuses, offsets, strict=True):
                if status == RESERVED_NEW:
                    into.append(view[offset : offset + size])
                else:
                    into.extend(discarded(size))
            recv_into_all(sock, into, deadline)
        except BaseException:
            self.store.abort(mine, conn)
            raise
        results = self.store.commit(mine, conn, deadline)
        done = [items[i][1] for i, ok in zip(fresh, results, strict=True) if ok]
        self._count(conn, committed=len(done), committed_bytes=sum(done))
        committed = iter(results)
        for status in statuses:
            oks.append(next(committed) if status == RESERVED_NEW else status == RESERVED_PRESENT)
        self._send(sock, Op.PUT, Status.OK, h.req_id, wire.encode_flags(oks), deadline=deadline)
        return True

    def _reserve(
        self, conn: _Conn, items: list[tuple[str, int, int]], hint: wire.SetHint, deadline: float
    ) -> np.ndarray:
        """``store.reserve`` of the objects the store ``fits``. One larger than its largest slot
        (an ALLOC of 2^64-1 bytes, a PUT over the slab) is "no space" at once, before the store is
        asked: a store makes room for what it reserves (it evicts), and no eviction could make
        room for that object. Each refusal is counted (``errors["too_large"]``); they are logged
        with bounded repetition. The rest of the batch is served as usual."""
        unfit = {size for size in {size for _key, size, _otype in items} if not self.store.fits(size)}
        if not unfit:
            return self.store.reserve(items, conn, hint, deadline)
        fit = [i for i, (_key, size, _otype) in enumerate(items) if size not in unfit]
        refused = len(items) - len(fit)
        with self._lock:
            self.errors["too_large"] += refused
            total = self.errors["too_large"]
        if worth_logging(total):
            log.warning(
                "refused %d object(s) of up to %d bytes from %s: larger than the largest slot of "
                "this node's arena, nothing evicted (%d refused so far)",
                refused, max(unfit), conn.client, total,
            )  # fmt: skip
        out = wire.alloc_records(len(items))  # RESERVED_NO_SPACE
        if fit:
            out[fit] = self.store.reserve([items[i] for i in fit], conn, hint, deadline)
        return out

    @staticmethod
    def _reserved_counts(reserved: np.ndarray, items: list[tuple[str, int, int]]) -> dict[str, int]:
        fresh = np.flatnonzero(reserved["status"] == RESERVED_NEW).tolist()
        return {"reserved": len(fresh), "reserved_bytes": sum(items[i][1] for i in fresh)}

    def _get(self, conn: _Conn, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        items = wire.decode_get(meta, self.limits)
        _, reply_bytes = wire.get_reply_sizes(items)
        if reply_bytes > self.limits.max_payload:  # the reply carries every requested size
            raise ProtocolError(f"GET of {reply_bytes} bytes exceeds limit {self.limits.max_payload}")
        pins = self.store.pin(items, deadline)
        try:
            entries = [(p is not None, p.size if p else 0, p.obj_type if p else 0) for p in pins]
            view = self.store.view
            bodies: list[memoryview] = []
            hits = hit_bytes = 0
            for (_key, want), p in zip(items, pins, strict=True):
                if p is not None:  # pinned at the requested size (the store checks)
                    bodies.append(view[p.offset : p.offset + p.size])
                    hits += 1
                    hit_bytes += p.size
                else:
                    bodies.extend(zeros(want))
            self._count(conn, lookups=len(items), lookup_hits=hits, lookup_hit_bytes=hit_bytes)
            self._send(
                conn.sock, Op.GET, Status.OK, h.req_id, wire.encode_get_reply(entries), bodies, deadline
            )
        finally:
            self.store.unpin([p for p in pins if p is not None])
        return True

    def _alloc(self, conn: _Conn, meta: bytearray, deadline: float) -> bytes:
        items, hint = wire.decode_put_request(meta, None, self.limits)
        reserved = self._reserve(conn, items, hint, deadline)
        self._count(conn, **self._reserved_counts(reserved, items))
        return wire.encode_alloc_records(reserved)

    def _commit(self, conn: _Conn, meta: bytearray, deadline: float) -> bytes:
        items = wire.decode_commit(meta, self.limits)
        aborts = [(key, version & ~_ABORT) for key, version in items if version & _ABORT]
        if aborts:
            self.store.abort(aborts, conn)
            self._count(conn, aborted=len(aborts))
        todo = [(i, item) for i, item in enumerate(items) if not item[1] & _ABORT]
        oks = [False] * len(items)
        for (i, _), ok in zip(todo, self.store.commit([it for _, it in todo], conn, deadline), strict=True):
            oks[i] = ok
        self._count(conn, committed=sum(oks))  # bytes: counted by the store (the sizes live there)
        return wire.encode_flags(oks)

    def _read_at(self, sock: socket.socket, h: FrameHeader, meta: bytearray, deadline: float) -> bool:
        extents = wire.decode_extents(meta, self.limits)
        if sum(n for _, n in extents) > self.limits.max_payload:  # the reply carries every extent
            raise ProtocolError(f"READ_AT over the payload limit {self.limits.max_payload}")
        view = self.store.view
        flags = []
        bodies: list[memoryview] = []
        for off, n in extents:
            ok = off + n <= self.arena_size and self.store.readable(off, n)
            flags.append(ok)
            bodies.extend([view[off : off + n]] if ok else zeros(n))  # zeros: as a GET's miss
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
        view = self.store.view
        flags = []
        for off, n in extents:
            # only into open reservations: nobody writes over committed data (checked right
            # before each extent is received)
            if self.store.writable(off, n):
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
            clients = {name: dict(counts) for name, counts in self._clients.items()}
            departed = dict(self._departed)
        return {
            "node_id": self.node_id,
            "pid": os.getpid(),
            "epoch": self.epoch,
            "store": self.store.stats(),
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "connections": nconn,
            "rdma_qps": self._rdma.connections() if self._rdma is not None else None,
            "clients": clients,
            "departed": departed,
            "handshakes": self._gate.pending,
            "draining": self._draining.is_set(),
        }
