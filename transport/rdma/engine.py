"""The ``rdma`` engine: one-sided RDMA READ/WRITE of a node's arena through pyverbs.

Set-up: the engine opens one device port (``RdmaDevice``: the configured device, port and GID,
limits from ``query_device``/``query_port``), a registered scratch pool, and one completion
poller thread. Per node it keeps up to ``qps_per_node`` RC QPs (``RdmaPeer``), each connected over
its own control connection (RDMA_CONNECT, ``handshake``) and with its own CQ.

A call (``read``/``write``) takes one QP for its whole duration, maps every local part to
registered memory (``register_memory``: SGLang's host pool, moved with no copy) or, failing that,
to the scratch pool (one bounce copy, one native ``copy_pages`` per local buffer for the whole
round: ``batch_copy``), builds chained work requests with selective signaling
(``wr``) and keeps at most two windows of them outstanding, each closed by one signaled
completion that the poller routes back by its unique ``wr_id``. Every wait is bounded by the
call's deadline; a deadline that passes moves the QP to the error state and destroys it, so the
device never writes into a buffer after its call returned.

Failure semantics: a failed item is ``False``, never an exception. Any error completion fails the
call's outstanding items and destroys its QP (an RC QP in error is useless); the next call connects
a new one, after a back-off when the node did not answer (``RETRY_EXC_ERR`` and kin). pyverbs'
exceptions never escape: set-up failures are ``RdmaSetupError`` / ``PeerUnavailable``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import wire
from ..batch_copy import Located, copy_into, copy_out
from ..connection import Connection, ConnectionPool
from ..engine import Extent, Segment
from ..errors import EngineUnavailable, PeerUnavailable, ProtocolError, RdmaNotServed, TransportError
from ..registry import register_engine
from ..sockio import as_bytes_view
from .completions import GENERAL_ERR, CompletionPoller, Window
from .device import RdmaDevice
from .handshake import QpInfo
from .mr import Region, RegionTable, buffer_address
from .options import RdmaOptions
from .peer import RdmaPeer
from .qp import RcQp
from .scratch import ScratchPool
from .verbs import load, unavailable_reason
from .wc_status import Outcome, classify, describe
from .wr import Sge, build_work_requests, windows

log = logging.getLogger(__name__)
TIMED_OUT = -1
FLUSH_GRACE_S = 1.0  # after a deadline: how long the flush of a QP moved to error may take
_NO_ROOM = object()


def rdma_unavailable_reason(device: str = "") -> str | None:
    """``None`` when pyverbs imports and an RDMA device exists, else the reason (kept for callers
    that only want to know, e.g. the tests and the benchmark)."""
    return unavailable_reason(device)


@dataclass
class _Round:
    """The items of one call that fit the scratch pool at once, mapped to local SGEs."""

    extents: list[tuple[int, int, list[Sge]]] = field(default_factory=list)
    # item, local view, scratch offset of its bounce: copied out after completion (reads; writes
    # copy them in at the end of the plan, in one native call per local buffer)
    copy_back: list[tuple[int, memoryview, int]] = field(default_factory=list)
    taken: list[tuple[int, int]] = field(default_factory=list)  # scratch (offset, n) to give back
    deferred: list[int] = field(default_factory=list)  # items for a later round (no scratch room now)


@register_engine
class RdmaEngine:
    name: ClassVar[str] = "rdma"
    one_sided: ClassVar[bool] = True

    def __init__(self, options: RdmaOptions | None = None, **overrides: Any) -> None:
        self.options = options if options is not None else RdmaOptions(**overrides)
        reason = unavailable_reason(self.options.device)
        if reason:
            raise EngineUnavailable(reason)
        self.v = load()
        self.dev = RdmaDevice(self.v, self.options)
        e, lim, o = self.v.e, self.dev.limits, self.options
        self.depth = max(2, min(o.queue_depth, lim.max_qp_wr, lim.max_cqe - 1))
        self.max_sge_write = max(1, min(o.max_sge, lim.max_sge))
        self.max_sge_read = max(1, min(o.max_sge, lim.max_sge_rd, lim.max_sge))
        self.max_msg = lim.max_msg_sz
        self.max_rd_atomic = max(1, min(o.max_rd_atomic, lim.max_qp_init_rd_atom))
        self._opcode = {True: e["IBV_WR_RDMA_READ"], False: e["IBV_WR_RDMA_WRITE"]}
        self._local_access = e["IBV_ACCESS_LOCAL_WRITE"]
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._calls = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False
        self.regions = RegionTable()
        self._mrs: dict[int, tuple[Any, memoryview]] = {}
        self._peers: dict[str, tuple[int, RdmaPeer]] = {}
        self.counters: Counter[str] = Counter()
        self._counters_lock = threading.Lock()
        self.scratch: ScratchPool | None = None
        self.poller: CompletionPoller | None = None
        try:
            self.scratch = ScratchPool(self.dev, o.scratch_bytes)
            self.poller = CompletionPoller(self.v, o.poll_max_sleep_s)
        except BaseException:
            self._release_device()
            raise

    def _count(self, key: str, n: int) -> int:
        """Add to a counter (calls run on several threads); returns the new value."""
        with self._counters_lock:
            self.counters[key] += n
            return self.counters[key]

    # ---- memory ---------------------------------------------------------------------------

    def register_memory(self, buf: memoryview) -> int:
        """Register a writable, contiguous buffer (kept alive until unregistered); registering the
        same range again returns its handle. ``RdmaSetupError``/``TransportError`` on refusal."""
        view = as_bytes_view(buf)
        addr, n = buffer_address(view), len(view)
        with self._lock:
            same = self.regions.find(addr, n)
            if same is not None and (same.addr, same.length) == (addr, n):
                return same.handle
        mr = self.dev.register(addr, n, self._local_access)
        with self._lock:
            try:
                region = self.regions.add(addr, n, int(mr.lkey), int(mr.rkey))
            except TransportError:
                mr.close()
                raise
            self._mrs[region.handle] = (mr, view)
        self._count("registered_bytes", n)
        return region.handle

    def unregister_memory(self, handle: int) -> None:
        with self._lock:
            region = self.regions.remove(handle)
            entry = self._mrs.pop(handle, None)
        if entry is not None:
            entry[0].close()
            entry[1].release()
        if region is not None:
            self._count("registered_bytes", -region.length)

    def _region(self, addr: int, n: int) -> Region | None:
        with self._lock:
            return self.regions.find(addr, n)

    # ---- peers ----------------------------------------------------------------------------

    def open_segment(self, segment: Segment, pool: ConnectionPool) -> None:
        """Connect the first QP to ``segment``'s node now, so a node that cannot be reached (or
        serves no RDMA: ``RdmaNotServed``) is reported here, as ``PeerUnavailable``."""
        with self._lock:
            if self._closed:
                raise PeerUnavailable("RDMA engine closed")
            cur = self._peers.get(segment.node_id)
            if cur is not None and cur[0] == segment.epoch:
                return
            peer = RdmaPeer(
                segment.node_id,
                lambda deadline: self._connect(pool, deadline),
                self.options.qps_per_node,
                pool.opts.retry_interval_s,
            )
            self._peers[segment.node_id] = (segment.epoch, peer)
        if cur is not None:
            self._close_peer(cur[1])
        qp = peer.acquire(time.monotonic() + pool.opts.timeout_s)
        peer.release(qp)

    def _connect(self, pool: ConnectionPool, deadline: float) -> RcQp:
        qp = RcQp(self.dev, self.depth, self.max_sge_write, self._local_access)
        try:
            qp.anchor = Connection(pool.host, pool.port, pool.opts)
            try:
                _, meta = qp.anchor.request(wire.Op.RDMA_CONNECT, qp.info().encode(), (), deadline)
            except ProtocolError as exc:
                if "UNKNOWN_OP" in str(exc):
                    raise RdmaNotServed(
                        f"{pool.host}:{pool.port} serves no RDMA (node.rdma_device unset)"
                    ) from exc
                raise
            peer = QpInfo.decode(meta)
            qp.connect(peer, serve_reads=1, issue_reads=max(1, min(self.max_rd_atomic, peer.rd_atomic)))
        except BaseException:
            qp.close()
            raise
        self._count("qp_connects", 1)
        return qp

    def close_segment(self, node_id: str) -> None:
        with self._lock:
            cur = self._peers.pop(node_id, None)
        if cur is not None:
            self._close_peer(cur[1])

    def _close_peer(self, peer: RdmaPeer) -> None:
        for qp in peer.close():
            self._destroy(qp)

    def _destroy(self, qp: RcQp) -> None:
        if self.poller is not None:
            self.poller.retire(qp)
        qp.close()

    # ---- data -----------------------------------------------------------------------------

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, read=True)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, read=False)

    def _run(self, node_id: str, items: Sequence[Extent], deadline: float, read: bool) -> list[bool]:
        out = [False] * len(items)
        with self._lock:
            entry = self._peers.get(node_id)
            if entry is None or self._closed or not items:
                return out
            self._in_flight += 1
        try:
            pending = list(range(len(items)))
            while pending and time.monotonic() < deadline:
                rnd = self._plan(items, pending, read, deadline)
                try:
                    for _attempt in range(2):  # a QP lost to an error is retried once on a new one
                        done = self._transfer(entry[1], rnd, read, deadline) if rnd.extents else []
                        if done is not None:
                            break
                    for i in done or []:
                        out[i] = True
                finally:
                    self._give_back(rnd)
                if len(rnd.deferred) == len(pending):
                    break  # not even one item found scratch room before the deadline
                pending = rnd.deferred
        finally:
            with self._calls:
                self._in_flight -= 1
                self._calls.notify_all()
        return out

    def _plan(self, items: Sequence[Extent], pending: list[int], read: bool, deadline: float) -> _Round:
        """Map the parts of ``pending`` items to registered memory, bouncing the others through
        scratch (copied in now for writes, out after completion for reads). Items that do not fit
        the scratch room left go to a later round; the first item of a round waits for room."""
        rnd = _Round()
        for i in pending:
            if rnd.deferred:
                rnd.deferred.append(i)
                continue
            mapped = self._map_item(i, items[i][1], read, deadline if not rnd.extents else None)
            if mapped is None:
                self._count("unmappable_items", 1)  # fails: read into read-only memory, too big
            elif mapped is _NO_ROOM:
                rnd.deferred.append(i)
            else:
                sges, taken, backs = mapped
                rnd.taken += taken
                rnd.copy_back += backs
                rnd.extents.append((i, items[i][0], sges))
        if not read and rnd.copy_back:
            assert self.scratch is not None
            bounced, rnd.copy_back = rnd.copy_back, []
            try:
                self._count_copies(
                    copy_into(self.scratch.view, [o for _, _, o in bounced], [v for _, v, _ in bounced])
                )
            except ValueError:  # refused before a byte moved: the round's items fail (a miss)
                self._count("copy_errors", 1)
                rnd.extents = []
        return rnd

    def _map_item(self, i: int, parts: Sequence[memoryview], read: bool, wait_until: float | None) -> Any:
        """(sges, scratch taken, copy-backs), ``_NO_ROOM``, or None when it can never map."""
        assert self.scratch is not None
        scratch = self.scratch
        sges: list[Sge] = []
        taken: list[tuple[int, int]] = []
        backs: list[tuple[int, memoryview, int]] = []
        result: Any = (sges, taken, backs)
        for part in parts:
            view = as_bytes_view(part)
            n = len(view)
            if n == 0:
                continue
            try:
                addr = buffer_address(view)
            except TransportError:
                addr = 0  # read-only or not contiguous: a write can still bounce it
            region = self._region(addr, n) if addr else None
            if region is not None:
                sges.append(Sge(addr, n, region.lkey))
                self._count("zero_copy_bytes", n)
                continue
            if (read and not addr) or n > scratch.size:
                result = None
                break
            off = scratch.take(n, wait_until) if wait_until is not None else scratch.try_take(n)
            if off is None:
                result = _NO_ROOM
                break
            taken.append((off, n))
            backs.append((i, view, off))  # reads: copied out after completion; writes: in at the plan's end
            sges.append(Sge(scratch.addr + off, n, scratch.lkey))
            self._count("bounce_bytes", n)
        if result is not None and result is not _NO_ROOM and sges:
            return result
        for off, n in taken:
            scratch.give(off, n)
        return result if result is _NO_ROOM else None

    def _count_copies(self, where: Located) -> None:
        """native_copies: copy_pages calls of bounces (one per local buffer per round);
        python_copied_parts: bounced parts not located in a writable buffer (copied in Python)."""
        self._count("native_copies", len(where.groups))
        if where.loose:
            self._count("python_copied_parts", len(where.loose))

    def _give_back(self, rnd: _Round) -> None:
        assert self.scratch is not None
        for off, n in rnd.taken:
            self.scratch.give(off, n)

    def _transfer(self, peer: RdmaPeer, rnd: _Round, read: bool, deadline: float) -> list[int] | None:
        """Run one round on one QP; the items that completed, or None when the QP failed with an
        error completion (worth one retry on a new QP while the deadline allows)."""
        try:
            qp = peer.acquire(deadline)
        except PeerUnavailable as exc:
            self._count("peer_unavailable", 1)
            log.debug("%s", exc)
            return []
        wrs, bad = build_work_requests(
            rnd.extents,
            qp.arena,
            self.max_sge_read if read else self.max_sge_write,
            self.max_msg,
            lambda: next(self._ids),
        )
        if bad:
            self._count("outside_arena", len(bad))
        status = self._post_and_wait(qp, windows(wrs, max(1, self.depth // 2)), read, deadline) if wrs else 0
        if status:
            self._fail(peer, qp, status)
            return None if status != TIMED_OUT and time.monotonic() < deadline else []
        peer.release(qp)
        ok = {i for i, _, _ in rnd.extents} - set(bad)
        backs = [(dst, off) for i, dst, off in rnd.copy_back if i in ok]
        if read and backs:
            assert self.scratch is not None
            try:
                self._count_copies(copy_out(self.scratch.view, [o for _, o in backs], [d for d, _ in backs]))
            except ValueError:  # refused before a byte moved: the round's items fail (a miss)
                self._count("copy_errors", 1)
                return []
        return sorted(ok)

    def _post_and_wait(self, qp: RcQp, wins: list[list[Any]], read: bool, deadline: float) -> int:
        """0 when every window completed; else the first error status, or TIMED_OUT."""
        assert self.poller is not None
        poller, opcode = self.poller, self._opcode[read]
        inflight: list[Window] = []
        status = 0
        for win in wins:
            if len(inflight) == 2:
                status = self._wait(inflight.pop(0), deadline)
                if status:
                    break
            w = poller.expect(qp, win[-1].wr_id)
            try:
                qp.post(win, opcode)
            except TransportError as exc:
                log.debug("%s", exc)
                poller.fail(qp, GENERAL_ERR)
                status = GENERAL_ERR
                break
            inflight.append(w)
            self._count("work_requests", len(win))
            self._count("windows", 1)
        while inflight and not status:
            status = self._wait(inflight.pop(0), deadline)
        if status == TIMED_OUT:
            # stop the device and let it flush what is outstanding before the buffers go back
            qp.to_error()
            grace = time.monotonic() + FLUSH_GRACE_S
            for w in inflight:
                w.done.wait(max(0.0, grace - time.monotonic()))
        return status

    @staticmethod
    def _wait(w: Window, deadline: float) -> int:
        if not w.done.wait(min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX)):
            return TIMED_OUT
        return w.status

    def _fail(self, peer: RdmaPeer, qp: RcQp, status: int) -> None:
        what = "deadline passed" if status == TIMED_OUT else describe(status)
        self._count(f"qp_errors_{what}", 1)
        unreachable = status == TIMED_OUT or classify(status) is Outcome.UNREACHABLE
        if self._count("qp_errors", 1) <= 10:  # the first ten are logged, all are counted
            log.warning("RDMA to node %s failed (%s); its QP is replaced", peer.node_id, what)
        self._destroy(qp)
        peer.discard(qp, unreachable, what)

    # ---- lifecycle ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "device": self.dev.name,
            "port": self.dev.port,
            "gid_index": self.dev.gid_index,
            "depth": self.depth,
            "max_sge": self.max_sge_write,
            **dict(self.counters),
        }

    def close(self, timeout: float = 5.0) -> None:
        """Fail new calls, let in-flight ones return (bounded), then destroy everything."""
        with self._calls:
            if self._closed:
                return
            self._closed = True
            peers = [p for _, p in self._peers.values()]
            self._peers.clear()
            end = time.monotonic() + timeout
            while self._in_flight and time.monotonic() < end:
                self._calls.wait(end - time.monotonic())
        for peer in peers:
            self._close_peer(peer)
        for handle in list(self._mrs):
            self.unregister_memory(handle)
        self._release_device()

    def _release_device(self) -> None:
        if self.poller is not None:
            self.poller.close()
        if self.scratch is not None:
            self.scratch.close()
        self.dev.close()
