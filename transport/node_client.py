"""``NodeClient``: batched object operations against one memory node, over any engine.

With the ``tcp`` engine every batch is one keyed request (GET/PUT frames carrying the bodies;
``sendmsg`` gathers from the caller's memoryviews, ``recv_into`` scatters into them; a GET's reply
has the length its request announces, zeros in place of a missed object, so header, meta and
every body arrive in one receive: one wait for the GIL next to a thread running Python). With a
one-sided engine (``local``, ``rdma``) a get is LOOKUP (one round trip) + a one-sided read of
header and body (the header sits where the LOOKUP said, after the page-aligned body), then --
once that read completed -- a second read of the header: both must match the key hash and the
version LOOKUP gave. The second read starts after the body landed, so the check holds however
the engine orders the bytes of one read (RDMA does not promise an order); a slot is invalidated
before it is reused and versions never repeat, so a body read while its slot was being reused
fails the second check. A put is ALLOC + one-sided write of the body + COMMIT. A node that serves
no RDMA (``RdmaNotServed``) is reached through the keyed TCP path instead, said once.
With ``tcp`` a large batch is *striped*: cut into up to ``max_stripes`` runs of whole objects (at
least ``stripe_min_bytes`` each) that travel on as many pooled connections at once, one request
per run (the node serves each connection on its own thread), so one batch is not limited to one
connection's throughput; a run that fails misses only its own objects. A pooled connection the
node closed meanwhile is retried once on a fresh one (every operation is idempotent).
Every call is bounded by ``ClientOptions.timeout_s``; any failure turns into misses / ``False``
and is counted, never raised. A client given an engine *name* owns that engine and closes it; an
engine *instance* (shared by ``ClusterClient``) is left to its owner.

A key that cannot go on the wire (not UTF-8 encodable, empty, or longer than the stricter of the
client's and the node's ``max_key_len``) fails only itself: it is a miss / ``False``, counted in
``bad_keys``, and the rest of its batch is served. A request the node refuses (error status) closes
that connection but never marks the node down: it answered.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from hicache_mooncake.native import check_page_keys, key_hashes, page_sizes

from . import wire
from .connection import Connection, ConnectionPool
from .engine import Extent, Segment, TransferEngine
from .errors import AuthError, PeerUnavailable, RdmaNotServed, RequestRefused, TransportError
from .object_header import HEADER_SIZE, headers_match
from .options import ClientOptions
from .registry import make_engine
from .sockio import as_bytes_view
from .throttle import worth_logging
from .wire import RESERVED_NEW, RESERVED_PRESENT, Limits, Op, SetHint, SlotRef

log = logging.getLogger(__name__)
Item = tuple[str, Sequence[memoryview]]
T = TypeVar("T")
R = TypeVar("R")
_ABORT = 1 << 63


def _sizes(items: Sequence[Item]) -> list[int]:
    """Bytes of each item's parts together (one native pass; any buffers)."""
    return page_sizes([parts for _, parts in items])


def _is_ascii_str(key: object) -> bool:
    return isinstance(key, str) and key.isascii()


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
        self._stripe_lock = threading.Lock()
        self._stripe_exec: ThreadPoolExecutor | None = None

    # ---- plumbing -------------------------------------------------------------------------

    @staticmethod
    def _chunks(idx: Sequence[int], sizes: Sequence[int], limits: Limits) -> list[list[int]]:
        """Split ``idx`` so no request exceeds the batch or payload limits."""
        out: list[list[int]] = []
        cur: list[int] = []
        nbytes = 0
        for i in idx:
            n = sizes[i]
            if cur and (len(cur) >= limits.max_batch or nbytes + n > limits.max_payload):
                out.append(cur)
                cur, nbytes = [], 0
            cur.append(i)
            nbytes += n
        if cur:
            out.append(cur)
        return out

    def _acquire(self, deadline: float) -> Connection | None:
        try:
            return self.pool.acquire(deadline)
        except AuthError as exc:
            self.counters["auth_errors"] += 1
            if worth_logging(self.counters["auth_errors"]):
                log.warning(
                    "node %s:%d: %s (%d so far)", self.host, self.port, exc, self.counters["auth_errors"]
                )
        except (TransportError, OSError) as exc:
            self.counters["unavailable"] += 1
            log.debug("node %s:%d unavailable: %s", self.host, self.port, exc)
        return None

    def _release(self, conn: Connection, exc: BaseException | None, what: str) -> None:
        if exc is None:
            self.pool.release(conn, True)
            return
        self.counters["errors"] += 1
        self.counters[f"errors_{what}"] += 1
        log.debug("node %s:%d %s failed: %s", self.host, self.port, what, exc)
        self.pool.release(conn, False, peer_alive=isinstance(exc, RequestRefused))

    def _with_conn(self, fn: Callable[[Connection, float], T], fail: T, what: str) -> T:
        deadline = time.monotonic() + self.opts.timeout_s
        conn = self._acquire(deadline)
        if conn is None:
            return fail
        try:
            result = fn(conn, deadline)
        except (TransportError, OSError, TimeoutError, ValueError) as exc:
            self._release(conn, exc, what)
            return fail
        except BaseException as exc:
            self._release(conn, exc, what)
            raise
        self._release(conn, None, what)
        return result

    def _valid(self, keys: Sequence[str], limits: Limits) -> list[int]:
        """Indexes of the keys that can go on the wire; the others are counted and logged. A batch
        of ASCII str keys of 1 to ``max_key_len`` characters (bytes, then) is checked in one pass."""
        if all(map(_is_ascii_str, keys)) and check_page_keys(keys, limits.max_key_len) < 0:
            return list(range(len(keys)))
        good = []
        for i, key in enumerate(keys):
            problem = wire.key_problem(key, limits)
            if problem is None:
                good.append(i)
                continue
            self.counters["bad_keys"] += 1
            if worth_logging(self.counters["bad_keys"]):
                log.warning(
                    "key %.80r %s: it is a miss, the rest of its batch is served (%d bad keys so far)",
                    key,
                    problem,
                    self.counters["bad_keys"],
                )
        return good

    def _batched(
        self,
        keys: Sequence[str],
        sizes: Sequence[int],
        fn: Callable[[Connection, float, list[int]], list[R]],
        miss: R,
        what: str,
        stripe: bool = False,
    ) -> list[R]:
        """Run ``fn`` over the valid keys, chunked to the connection's limits, within one deadline;
        every key that was not served is ``miss``. With ``stripe`` a large batch is split into
        stripes of whole objects (:meth:`_stripes`), each on its own connection in parallel (the
        first in this thread); a stripe that fails misses only its own keys."""
        out = [miss] * len(keys)
        if not keys:
            return out
        deadline = time.monotonic() + self.opts.timeout_s
        conn = self._acquire(deadline)
        if conn is None:
            return out
        valid = self._valid(keys, conn.limits)
        groups = self._stripes(valid, sizes) if stripe else [valid]
        futures = [
            self._stripe_pool(len(groups) - 1).submit(
                self._run_stripe, None, g, sizes, fn, out, deadline, what
            )
            for g in groups[1:]
        ]
        try:
            self._run_stripe(conn, groups[0], sizes, fn, out, deadline, what)
        finally:
            for f in futures:
                f.result()
        return out

    def _run_stripe(
        self,
        conn: Connection | None,
        idx: list[int],
        sizes: Sequence[int],
        fn: Callable[[Connection, float, list[int]], list[R]],
        out: list[R],
        deadline: float,
        what: str,
    ) -> None:
        """Serve ``idx`` on ``conn`` (None: one from the pool), writing results into ``out``."""
        for attempt in range(2):
            if conn is None:
                conn = self._acquire(deadline)
                if conn is None:
                    return
            try:
                for chunk in self._chunks(idx, sizes, conn.limits):
                    for i, r in zip(chunk, fn(conn, deadline, chunk), strict=True):
                        out[i] = r
            except (TransportError, OSError, TimeoutError, ValueError) as exc:
                if attempt == 0 and _closed_while_pooled(conn, exc):
                    # the node closed this pooled connection (idle, or to make room) as we sent: the
                    # node is fine and every operation is idempotent, so once more on a fresh one
                    self.counters["retried_closed_connection"] += 1
                    self.pool.release(conn, False, peer_alive=True)
                    conn = None
                    continue
                self._release(conn, exc, what)
                return
            except BaseException as exc:
                self._release(conn, exc, what)
                raise
            self._release(conn, None, what)
            return

    def _stripes(self, idx: list[int], sizes: Sequence[int]) -> list[list[int]]:
        """``idx`` cut into up to ``max_stripes`` (and ``connections_per_peer``) runs of about equal
        bytes, each at least ``stripe_min_bytes``; one run when the batch is smaller."""
        total = sum(sizes[i] for i in idx)
        k = min(self.opts.max_stripes, self.opts.connections_per_peer, len(idx))
        k = min(k, total // max(1, self.opts.stripe_min_bytes))
        if k <= 1:
            return [idx]
        out: list[list[int]] = [[]]
        target = total / k
        acc = 0
        for i in idx:
            if out[-1] and acc >= target * len(out) and len(out) < k:
                out.append([])
            out[-1].append(i)
            acc += sizes[i]
        return out

    def _stripe_pool(self, n: int) -> ThreadPoolExecutor:
        """Threads that run the stripes beyond the first (made at the first striped call)."""
        with self._stripe_lock:
            if self._stripe_exec is None:
                self._stripe_exec = ThreadPoolExecutor(
                    max_workers=max(1, self.opts.max_stripes - 1), thread_name_prefix="hicache-stripe"
                )
            return self._stripe_exec

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
            except TransportError as exc:
                self.counters["segment_refused"] += 1
                if worth_logging(self.counters["segment_refused"]):
                    log.warning("node %s:%d: %s", self.host, self.port, exc)
                raise
            self._segment = seg
        return seg

    # ---- queries --------------------------------------------------------------------------

    def _keyed(self, op: Op, keys: Sequence[str], what: str) -> list[bool]:
        def go(conn: Connection, deadline: float, idx: list[int]) -> list[bool]:
            meta = wire.encode_keys([keys[i] for i in idx], conn.limits)
            _, rmeta = conn.request_into(op, meta, wire.reply_meta_size(op, len(idx)), (), deadline)
            return [bool(f) for f in wire.decode_flags(rmeta, len(idx))]

        return self._batched(keys, [0] * len(keys), go, False, what)

    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        return self._keyed(Op.EXISTS, keys, "exists")

    def lookup_batch(self, keys: Sequence[str], sizes: Sequence[int] | None = None) -> list[SlotRef]:
        """Where each object lives and its object type (``found=False`` for a miss). ``sizes``:
        the expected body sizes (0: any); a store that holds the key elsewhere (its SSD) brings it
        into the arena first."""
        want = list(sizes) if sizes is not None else [0] * len(keys)

        def go(conn: Connection, deadline: float, idx: list[int]) -> list[SlotRef]:
            meta = wire.encode_get([(keys[i], want[i]) for i in idx], conn.limits)
            _, rmeta = conn.request_into(
                Op.LOOKUP, meta, wire.reply_meta_size(Op.LOOKUP, len(idx)), (), deadline
            )
            return wire.decode_lookup_reply(rmeta, len(idx))

        return self._batched(keys, [0] * len(keys), go, SlotRef(False), "lookup")

    def remove_batch(self, keys: Sequence[str]) -> list[bool]:
        return self._keyed(Op.REMOVE, keys, "remove")

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

    def put_batch(self, items: Sequence[Item], obj_type: int = 0, hint: SetHint | None = None) -> list[bool]:
        """Store each ``(key, parts)``; the object is the concatenation of its parts. True when
        stored or already present (values are immutable). ``hint`` goes to the store's policy."""
        put = self._put_tcp if self._two_sided else self._put_one_sided
        keys = [k for k, _ in items]
        sizes = _sizes(items)

        def go(conn: Connection, deadline: float, idx: list[int]) -> list[bool]:
            meta = wire.encode_put([(items[i][0], sizes[i], obj_type) for i in idx], conn.limits, hint)
            return put(conn, deadline, [items[i] for i in idx], meta)  # PUT and ALLOC: the same meta

        return self._batched(keys, sizes, go, False, "put", stripe=self._two_sided)

    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        """Fill each ``(key, parts)`` with the object's bytes; an object whose size differs from
        the parts' total is a miss (the parts are then left in an unspecified state)."""
        get = self._get_tcp if self._two_sided else self._get_one_sided
        keys = [k for k, _ in items]
        sizes = _sizes(items)

        def go(conn: Connection, deadline: float, idx: list[int]) -> list[bool]:
            return get(conn, deadline, [items[i] for i in idx], [sizes[i] for i in idx])

        out = self._batched(keys, sizes, go, False, "get", stripe=self._two_sided)
        self.counters["get_hits"] += sum(out)
        self.counters["get_misses"] += len(out) - sum(out)
        return out

    def _put_tcp(self, conn: Connection, deadline: float, items: list[Item], meta: bytes) -> list[bool]:
        """One PUT of ``items`` (``meta``: their ``wire.encode_put``), the bodies gathered from
        the callers' views."""
        views = [as_bytes_view(p) for _, parts in items for p in parts]
        _, rmeta = conn.request_into(
            Op.PUT, meta, wire.reply_meta_size(Op.PUT, len(items)), (), deadline, views
        )
        return [bool(f) for f in wire.decode_flags(rmeta, len(items))]

    def _get_tcp(self, conn: Connection, deadline: float, items: list[Item], sizes: list[int]) -> list[bool]:
        """One request, its whole reply in one scatter receive into the callers' views (a
        missed object's view gets the zeros sent in its place)."""
        views = [as_bytes_view(p) for _, parts in items for p in parts]
        wanted = [(k, n) for (k, _), n in zip(items, sizes, strict=True)]
        meta = wire.encode_get(wanted, conn.limits)
        reply_meta, _ = wire.get_reply_sizes(wanted)
        _, rmeta = conn.request_into(Op.GET, meta, reply_meta, views, deadline)
        entries = wire.decode_get_reply(rmeta, len(items))
        if any(found and size != want for (found, size, _), want in zip(entries, sizes, strict=True)):
            raise wire.ProtocolError("node sent an object of the wrong size")
        return [found for found, _, _ in entries]

    def _get_one_sided(
        self, conn: Connection, deadline: float, items: list[Item], sizes: list[int]
    ) -> list[bool]:
        """LOOKUP, then one read of every found object's header and body, then (after it
        completed) one read of their headers again; a key is a hit when both headers match its
        hash, LOOKUP's version and the size asked for (module docstring). Arrays throughout: no
        object per key."""
        seg = self._segment_for(conn)
        if seg is None:
            return self._get_tcp(conn, deadline, items, sizes)
        keys = [k for k, _ in items]
        meta = wire.encode_get(list(zip(keys, sizes, strict=True)), conn.limits)
        _, rmeta = conn.request_into(
            Op.LOOKUP, meta, wire.reply_meta_size(Op.LOOKUP, len(keys)), (), deadline
        )
        refs = wire.decode_lookup_records(rmeta, len(items))
        want = np.asarray(sizes, np.uint64)
        live_idx = np.flatnonzero((refs["found"] != 0) & (refs["size"] == want))
        out = [False] * len(items)
        if not live_idx.size:
            return out
        live = live_idx.tolist()
        n = len(live)
        headers = bytearray(HEADER_SIZE * n)
        view = memoryview(headers)
        hdr = [[view[j * HEADER_SIZE : (j + 1) * HEADER_SIZE]] for j in range(n)]
        at_header = refs["header"][live_idx].tolist()
        at_body = refs["offset"][live_idx].tolist()
        expect = (key_hashes([keys[i] for i in live]), refs["version"][live_idx], want[live_idx])
        # round 1: header + body; round 2, only after round 1 completed: the header again
        extents: list[Extent] = []
        for j, i in enumerate(live):
            extents += [(at_header[j], hdr[j]), (at_body[j], items[i][1])]
        read = np.array(self.engine.read(seg.node_id, extents, deadline), bool).reshape(n, 2).all(axis=1)
        first = read & headers_match(headers, *expect)
        self.counters["stale_reads"] += int(np.count_nonzero(read & ~first))
        again_idx = np.flatnonzero(first)
        if not again_idx.size:
            return out
        again = again_idx.tolist()
        read = np.array(
            self.engine.read(seg.node_id, [(at_header[j], hdr[j]) for j in again], deadline), bool
        )
        match = headers_match(headers, *expect)[again_idx]
        self.counters["stale_reads"] += int(np.count_nonzero(read & ~match))
        for j in again_idx[read & match].tolist():
            out[live[j]] = True
        return out

    def _put_one_sided(self, conn: Connection, deadline: float, items: list[Item], meta: bytes) -> list[bool]:
        """ALLOC (``meta``: the items' ``wire.encode_put``), a one-sided write of the bodies into
        the slots reserved, COMMIT (a write that failed aborts its slot)."""
        seg = self._segment_for(conn)
        if seg is None:
            return self._put_tcp(conn, deadline, items, meta)
        _, rmeta = conn.request_into(Op.ALLOC, meta, wire.reply_meta_size(Op.ALLOC, len(items)), (), deadline)
        slots = wire.decode_alloc_records(rmeta, len(items))
        out: list[bool] = (slots["status"] == RESERVED_PRESENT).tolist()
        fresh_idx = np.flatnonzero(slots["status"] == RESERVED_NEW)
        if not fresh_idx.size:
            return out
        fresh = fresh_idx.tolist()
        offsets, versions = slots["offset"][fresh_idx].tolist(), slots["version"][fresh_idx].tolist()
        flags = self.engine.write(
            seg.node_id, [(at, items[i][1]) for at, i in zip(offsets, fresh, strict=True)], deadline
        )
        commits = [
            (items[i][0], version if ok else version | _ABORT)
            for i, version, ok in zip(fresh, versions, flags, strict=True)
        ]
        _, cmeta = conn.request_into(
            Op.COMMIT,
            wire.encode_commit(commits, conn.limits),
            wire.reply_meta_size(Op.COMMIT, len(commits)),
            (),
            deadline,
        )
        for i, ok in zip(fresh, wire.decode_flags(cmeta, len(commits)), strict=True):
            out[i] = bool(ok)
        return out

    def register_memory(self, buf: memoryview) -> int:
        """Register ``buf`` with the engine (RDMA then moves it with no copy); see the engine."""
        return self.engine.register_memory(buf)

    def close(self) -> None:
        with self._stripe_lock:
            stripes, self._stripe_exec = self._stripe_exec, None
        if stripes is not None:
            stripes.shutdown(wait=True)
        self.pool.close()
        if self._segment is not None:
            self.engine.close_segment(self._segment.node_id)
            self._segment = None
        if self._owns_engine:
            self.engine.close()


def _closed_while_pooled(conn: Connection, exc: BaseException) -> bool:
    """A reused pooled connection that the node had closed: the request never reached it."""
    closed = isinstance(exc, ConnectionResetError | BrokenPipeError) or (
        isinstance(exc, PeerUnavailable) and "connection closed" in str(exc)
    )
    return conn.reused and closed
