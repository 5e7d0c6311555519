"""``NodeClient``: batched object operations against one memory node, over any engine.

With the ``tcp`` engine every batch is one keyed request (GET/PUT frames carrying the bodies;
``sendmsg`` gathers from the caller's memoryviews, ``recv_into`` scatters into them). With a
one-sided engine (``local``, ``rdma``) a get is LOOKUP (one round trip) + a one-sided read of
header and body, then -- once that read completed -- a second read of the header: both must
match the key hash and the version LOOKUP gave. The second read starts after the body landed, so
the check holds however the engine orders the bytes of one read (RDMA does not promise an order);
a slot is invalidated before it is reused and versions never repeat, so a body read while its
slot was being reused fails the second check. A put is ALLOC + one-sided write + COMMIT. A node
that serves no RDMA (``RdmaNotServed``) is reached through the keyed TCP path instead, said once.
Every call is bounded by ``ClientOptions.timeout_s``; any failure turns into misses / ``False``
and is counted, never raised. A client given an engine *name* owns that engine and closes it; an
engine *instance* (shared by ``ClusterClient``) is left to its owner.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import wire
from .connection import Connection, ConnectionPool
from .engine import Segment, TransferEngine
from .errors import AuthError, RdmaNotServed, TransportError
from .object_header import HEADER_SIZE, ObjectHeader
from .options import ClientOptions
from .registry import make_engine
from .sockio import as_bytes_view
from .store import RESERVED_NEW, RESERVED_PRESENT
from .wire import Op, SlotRef

log = logging.getLogger(__name__)
Item = tuple[str, Sequence[memoryview]]
T = TypeVar("T")
_ABORT = 1 << 63


def _nbytes(parts: Sequence[memoryview]) -> int:
    return sum(memoryview(p).nbytes for p in parts)


class NodeClient:
    def __init__(
        self,
        host: str,
        port: int,
        options: ClientOptions | None = None,
        engine: str | TransferEngine = "tcp",
    ) -> None:
        self.host, self.port = host, port
        self.opts = options or ClientOptions()
        self.limits = self.opts.limits
        self._owns_engine = isinstance(engine, str)
        self.engine: TransferEngine = make_engine(engine) if isinstance(engine, str) else engine
        self.pool = ConnectionPool(host, port, self.opts)
        self.counters: Counter[str] = Counter()
        self._segment: Segment | None = None
        self._two_sided = not self.engine.one_sided  # also when the node does not serve the engine

    # ---- plumbing -------------------------------------------------------------------------

    def _chunks(self, items: Sequence[T], size_of: Callable[[T], int]) -> list[list[int]]:
        """Split a batch so no request exceeds the batch or payload limits."""
        out: list[list[int]] = []
        cur: list[int] = []
        nbytes = 0
        budget = self.limits.max_payload
        for i, it in enumerate(items):
            n = size_of(it)
            if cur and (len(cur) >= self.limits.max_batch or nbytes + n > budget):
                out.append(cur)
                cur, nbytes = [], 0
            cur.append(i)
            nbytes += n
        if cur:
            out.append(cur)
        return out

    def _with_conn(self, fn: Callable[[Connection, float], T], fail: T, what: str) -> T:
        deadline = time.monotonic() + self.opts.timeout_s
        try:
            conn = self.pool.acquire(deadline)
        except AuthError as exc:
            self.counters["auth_errors"] += 1
            log.warning("node %s:%d: %s", self.host, self.port, exc)
            return fail
        except (TransportError, OSError) as exc:
            self.counters["unavailable"] += 1
            log.debug("node %s:%d unavailable: %s", self.host, self.port, exc)
            return fail
        ok = False
        try:
            result = fn(conn, deadline)
            ok = True
            return result
        except (TransportError, OSError, TimeoutError, ValueError) as exc:
            self.counters["errors"] += 1
            self.counters[f"errors_{what}"] += 1
            log.debug("node %s:%d %s failed: %s", self.host, self.port, what, exc)
            return fail
        finally:
            self.pool.release(conn, ok)

    def _segment_for(self, conn: Connection) -> Segment | None:
        """The node's segment opened on the engine; None when the node does not serve it."""
        if self._two_sided:
            return None
        seg = Segment.from_handshake(self.host, self.port, conn.segment)
        if self._segment is None or self._segment.epoch != seg.epoch:
            try:
                self.engine.open_segment(seg, self.pool)
            except RdmaNotServed as exc:
                log.warning("node %s:%d: %s; using TCP for it", self.host, self.port, exc)
                self._two_sided = True
                return None
            self._segment = seg
        return seg

    def register_memory(self, buf: memoryview) -> int:
        """Register ``buf`` with the engine (RDMA then moves it with no copy); see the engine."""
        return self.engine.register_memory(buf)

    # ---- queries --------------------------------------------------------------------------

    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        out = [False] * len(keys)
        for idx in self._chunks(keys, lambda k: 0):

            def go(conn: Connection, deadline: float, idx: list[int] = idx) -> list[bool]:
                _, meta = conn.request(
                    Op.EXISTS, wire.encode_keys([keys[i] for i in idx], self.limits), (), deadline
                )
                return [bool(f) for f in wire.decode_flags(meta, len(idx))]

            for i, f in zip(idx, self._with_conn(go, [False] * len(idx), "exists"), strict=True):
                out[i] = f
        return out

    def lookup_batch(self, keys: Sequence[str]) -> list[SlotRef]:
        """Where each object lives and its object type (``found=False`` for a miss)."""
        out = [SlotRef(False)] * len(keys)
        for idx in self._chunks(keys, lambda k: 0):

            def go(conn: Connection, deadline: float, idx: list[int] = idx) -> list[SlotRef]:
                _, meta = conn.request(
                    Op.LOOKUP, wire.encode_keys([keys[i] for i in idx], self.limits), (), deadline
                )
                return wire.decode_lookup_reply(meta, len(idx))

            for i, ref in zip(idx, self._with_conn(go, [SlotRef(False)] * len(idx), "lookup"), strict=True):
                out[i] = ref
        return out

    def remove_batch(self, keys: Sequence[str]) -> list[bool]:
        out = [False] * len(keys)
        for idx in self._chunks(keys, lambda k: 0):

            def go(conn: Connection, deadline: float, idx: list[int] = idx) -> list[bool]:
                _, meta = conn.request(
                    Op.REMOVE, wire.encode_keys([keys[i] for i in idx], self.limits), (), deadline
                )
                return [bool(f) for f in wire.decode_flags(meta, len(idx))]

            for i, f in zip(idx, self._with_conn(go, [False] * len(idx), "remove"), strict=True):
                out[i] = f
        return out

    def clear(self) -> int:
        """Remove every object on the node; returns how many, or -1 on failure."""

        def go(conn: Connection, deadline: float) -> int:
            _, meta = conn.request(Op.CLEAR, b"", (), deadline)
            return int(json.loads(bytes(meta))["removed"])

        return self._with_conn(go, -1, "clear")

    def stats(self) -> dict[str, Any]:
        """The node's stats (store, per-op request counts, errors) plus this client's counters."""

        def go(conn: Connection, deadline: float) -> dict[str, Any]:
            _, meta = conn.request(Op.STATS, b"", (), deadline)
            node: dict[str, Any] = json.loads(bytes(meta))
            return node

        empty: dict[str, Any] = {}
        node = self._with_conn(go, empty, "stats")
        return {"node": node, "client": dict(self.counters), "reachable": bool(node)}

    def ping(self) -> bool:
        def go(conn: Connection, deadline: float) -> bool:
            conn.request(Op.PING, b"", (), deadline)
            return True

        return self._with_conn(go, False, "ping")

    # ---- data -----------------------------------------------------------------------------

    def put_batch(self, items: Sequence[Item], obj_type: int = 0) -> list[bool]:
        """Store each ``(key, parts)``; the object is the concatenation of its parts. True when
        stored or already present (values are immutable)."""
        out = [False] * len(items)
        put = self._put_tcp if self._two_sided else self._put_one_sided
        for idx in self._chunks(items, lambda it: _nbytes(it[1])):
            sub = [items[i] for i in idx]

            def go(conn: Connection, deadline: float, sub: list[Item] = sub) -> list[bool]:
                return put(conn, deadline, sub, obj_type)

            for i, f in zip(idx, self._with_conn(go, [False] * len(sub), "put"), strict=True):
                out[i] = f
        return out

    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        """Fill each ``(key, parts)`` with the object's bytes; an object whose size differs from
        the parts' total is a miss (the parts are then left in an unspecified state)."""
        out = [False] * len(items)
        get = self._get_tcp if self._two_sided else self._get_one_sided
        for idx in self._chunks(items, lambda it: _nbytes(it[1])):
            sub = [items[i] for i in idx]

            def go(conn: Connection, deadline: float, sub: list[Item] = sub) -> list[bool]:
                return get(conn, deadline, sub)

            for i, f in zip(idx, self._with_conn(go, [False] * len(sub), "get"), strict=True):
                out[i] = f
        self.counters["get_hits"] += sum(out)
        self.counters["get_misses"] += len(out) - sum(out)
        return out

    def _put_tcp(self, conn: Connection, deadline: float, items: list[Item], obj_type: int) -> list[bool]:
        views = [[as_bytes_view(p) for p in parts] for _, parts in items]
        meta = wire.encode_put(
            [(k, sum(len(v) for v in vs), obj_type) for (k, _), vs in zip(items, views, strict=True)],
            self.limits,
        )
        _, rmeta = conn.request(Op.PUT, meta, [v for vs in views for v in vs], deadline)
        return [bool(f) for f in wire.decode_flags(rmeta, len(items))]

    def _get_tcp(self, conn: Connection, deadline: float, items: list[Item]) -> list[bool]:
        views = [[as_bytes_view(p) for p in parts] for _, parts in items]
        sizes = [sum(len(v) for v in vs) for vs in views]
        meta = wire.encode_get([(k, n) for (k, _), n in zip(items, sizes, strict=True)], self.limits)
        h, rmeta = conn.request(Op.GET, meta, (), deadline)
        entries = wire.decode_get_reply(rmeta, len(items))
        if sum(s for f, s, _ in entries if f) != h.payload_len:
            raise wire.ProtocolError("GET reply payload does not match its entries")
        out = []
        for (found, size, _), vs, want in zip(entries, views, sizes, strict=True):
            if found:
                if size != want:
                    raise wire.ProtocolError("node sent an object of the wrong size")
                for v in vs:
                    conn.recv_into(v, deadline)
            out.append(found)
        return out

    def _get_one_sided(self, conn: Connection, deadline: float, items: list[Item]) -> list[bool]:
        seg = self._segment_for(conn)
        if seg is None:
            return self._get_tcp(conn, deadline, items)
        keys = [k for k, _ in items]
        _, meta = conn.request(Op.LOOKUP, wire.encode_keys(keys, self.limits), (), deadline)
        refs = wire.decode_lookup_reply(meta, len(items))
        sizes = [_nbytes(parts) for _, parts in items]
        live = [i for i, r in enumerate(refs) if r.found and r.size == sizes[i]]
        if not live:
            return [False] * len(items)
        headers = memoryview(bytearray(HEADER_SIZE * len(live)))
        hdr = [headers[j * HEADER_SIZE : (j + 1) * HEADER_SIZE] for j in range(len(live))]
        # round 1: header + body (one extent per object); round 2, after it completed: header
        flags = self.engine.read(
            seg.node_id, [(refs[i].offset, [hdr[j], *items[i][1]]) for j, i in enumerate(live)], deadline
        )
        first = []
        for j, i in enumerate(live):
            if flags[j] and ObjectHeader.unpack(hdr[j]).matches(keys[i], refs[i].version, refs[i].size):
                first.append(j)
            elif flags[j]:
                self.counters["stale_reads"] += 1
        out = [False] * len(items)
        if not first:
            return out
        again = self.engine.read(seg.node_id, [(refs[live[j]].offset, [hdr[j]]) for j in first], deadline)
        for j, ok in zip(first, again, strict=True):
            i = live[j]
            if ok and ObjectHeader.unpack(hdr[j]).matches(keys[i], refs[i].version, refs[i].size):
                out[i] = True
            elif ok:
                self.counters["stale_reads"] += 1
        return out

    def _put_one_sided(
        self, conn: Connection, deadline: float, items: list[Item], obj_type: int
    ) -> list[bool]:
        seg = self._segment_for(conn)
        if seg is None:
            return self._put_tcp(conn, deadline, items, obj_type)
        sizes = [_nbytes(parts) for _, parts in items]
        meta = wire.encode_put(
            [(k, n, obj_type) for (k, _), n in zip(items, sizes, strict=True)], self.limits
        )
        _, rmeta = conn.request(Op.ALLOC, meta, (), deadline)
        slots = wire.decode_alloc_reply(rmeta, len(items))
        out = [status == RESERVED_PRESENT for status, _, _ in slots]
        fresh = [i for i, (status, _, _) in enumerate(slots) if status == RESERVED_NEW]
        if not fresh:
            return out
        flags = self.engine.write(
            seg.node_id, [(slots[i][1] + HEADER_SIZE, items[i][1]) for i in fresh], deadline
        )
        commits = [
            (items[i][0], slots[i][2] if ok else slots[i][2] | _ABORT)
            for i, ok in zip(fresh, flags, strict=True)
        ]
        _, cmeta = conn.request(Op.COMMIT, wire.encode_commit(commits, self.limits), (), deadline)
        for i, ok in zip(fresh, wire.decode_flags(cmeta, len(commits)), strict=True):
            out[i] = bool(ok)
        return out

    def close(self) -> None:
        self.pool.close()
        if self._segment is not None:
            self.engine.close_segment(self._segment.node_id)
            self._segment = None
        if self._owns_engine:
            self.engine.close()
