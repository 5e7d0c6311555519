"""The ``rdma`` engine: one-sided RDMA READ/WRITE through pyverbs (imported lazily).

Setup per node: the client opens the device, a PD and a CQ, registers its local regions as MRs,
creates an RC QP, and sends its ``QpInfo`` in an RDMA_CONNECT frame over the authenticated TCP
control connection; the node (``RdmaResponder``) creates its own QP, moves it to RTS against the
client's and answers with its ``QpInfo`` (QPN, GID, arena address and rkey). Data then moves with
batched work requests (``rdma_wr``) and CQ polling; completions are mapped by ``rdma_errors``.

Everything that needs no device lives in ``rdma_handshake``, ``rdma_mr``, ``rdma_wr`` and
``rdma_errors`` and is unit-tested everywhere. This module needs pyverbs built against the host's
rdma-core and an RDMA device (IB, RoCE, or soft-RoCE ``rxe``); where either is missing
``rdma_unavailable_reason()`` says why and the conformance suite skips the rdma runs.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from . import wire
from .connection import ConnectionPool
from .engine import Extent, Segment
from .errors import PeerUnavailable, TransportError
from .rdma_errors import Outcome, classify, describe
from .rdma_handshake import QpInfo
from .rdma_mr import RegionTable, RemoteArena, buffer_address
from .rdma_wr import WorkRequest, build_work_requests, post_batches
from .registry import register_engine
from .sockio import as_bytes_view


def _pyverbs() -> Any:
    import pyverbs.enums  # noqa: F401  (optional dependency)
    from pyverbs import addr, cq, device, mr, pd, qp, wr

    return {
        "addr": addr,
        "cq": cq,
        "device": device,
        "mr": mr,
        "pd": pd,
        "qp": qp,
        "wr": wr,
        "e": pyverbs.enums,
    }


def rdma_unavailable_reason(device_name: str = "") -> str | None:
    """``None`` when pyverbs imports and an RDMA device is present, else the reason."""
    if not os.path.isdir("/sys/class/infiniband"):
        return "the kernel exposes no RDMA devices (/sys/class/infiniband is missing)"
    try:
        v = _pyverbs()
    except ImportError as exc:
        return f"pyverbs is not importable ({exc}); install the python3-pyverbs matching rdma-core"
    try:
        devs = v["device"].get_device_list()
    except Exception as exc:  # pyverbs raises its own error types
        return f"cannot list RDMA devices: {exc}"
    names = [d.name.decode() for d in devs]
    if not names:
        return "pyverbs found no RDMA device"
    if device_name and device_name not in names:
        return f"RDMA device {device_name!r} not found (have {', '.join(names)})"
    return None


class _Verbs:
    """Device context, PD, CQ and one RC QP factory (shared by the engine and the responder)."""

    def __init__(self, device_name: str = "", port: int = 1, gid_index: int = 0, depth: int = 256) -> None:
        self.v = _pyverbs()
        devs = self.v["device"].get_device_list()
        if not devs:
            raise PeerUnavailable("no RDMA device")
        name = device_name or devs[0].name.decode()
        self.ctx = self.v["device"].Context(name=name)
        self.pd = self.v["pd"].PD(self.ctx)
        self.cq = self.v["cq"].CQ(self.ctx, depth * 2)
        self.port, self.gid_index, self.depth = port, gid_index, depth
        port_attr = self.ctx.query_port(port)
        self.lid = int(port_attr.lid)
        self.mtu = int(port_attr.active_mtu)
        self.gid = bytes.fromhex(str(self.ctx.query_gid(port, gid_index)).replace(":", ""))

    def register(self, view: memoryview, remote: bool) -> Any:
        e = self.v["e"]
        access = e.IBV_ACCESS_LOCAL_WRITE
        if remote:
            access |= e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
        return self.v["mr"].MR(self.pd, len(view), access, address=buffer_address(view))

    def make_qp(self) -> Any:
        qpm = self.v["qp"]
        cap = qpm.QPCap(max_send_wr=self.depth, max_recv_wr=1, max_send_sge=16, max_recv_sge=1)
        init = qpm.QPInitAttr(qp_type=self.v["e"].IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        return qpm.QP(self.pd, init)

    def connect_qp(self, qp: Any, psn: int, peer: QpInfo) -> None:
        e, qpm, addr = self.v["e"], self.v["qp"], self.v["addr"]
        attr = qpm.QPAttr(port_num=self.port)
        attr.path_mtu = min(self.mtu, peer.mtu)
        attr.dest_qp_num = peer.qpn
        attr.rq_psn = peer.psn
        attr.sq_psn = psn
        attr.max_dest_rd_atomic = 16
        attr.max_rd_atomic = 16
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        gr = addr.GlobalRoute(
            dgid=addr.GID(":".join(peer.gid.hex()[i : i + 4] for i in range(0, 32, 4))),
            sgid_index=self.gid_index,
        )
        attr.ah_attr = addr.AHAttr(port_num=self.port, is_global=1, gr=gr, dlid=peer.lid)
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE
        qp.to_rts(attr)

    def info(self, qp: Any, psn: int, addr: int, length: int, rkey: int) -> QpInfo:
        return QpInfo(int(qp.qp_num), psn, self.lid, self.gid, self.mtu, addr, length, rkey)

    def post_and_poll(
        self, qp: Any, batch: list[WorkRequest], read: bool, deadline: float
    ) -> list[tuple[int, int]]:
        """Post one batch (only the last WR signaled) and poll its completion(s)."""
        e, wrm = self.v["e"], self.v["wr"]
        opcode = e.IBV_WR_RDMA_READ if read else e.IBV_WR_RDMA_WRITE
        for w in batch:
            sges = [wrm.SGE(s.addr, s.length, s.lkey) for s in w.sges]
            req = wrm.SendWR(
                wr_id=w.wr_id,
                opcode=opcode,
                num_sge=len(sges),
                sg=sges,
                send_flags=e.IBV_SEND_SIGNALED if w.signaled else 0,
            )
            req.set_wr_rdma(w.rkey, w.remote_addr)
            qp.post_send(req)
        done: list[tuple[int, int]] = []
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll(16)
            for wc in wcs[:n]:
                done.append((int(wc.wr_id), int(wc.status)))
                if wc.status != 0 or int(wc.wr_id) == batch[-1].wr_id:
                    return done
        raise TimeoutError("RDMA completion not polled before the deadline")


@register_engine
class RdmaEngine:
    name: ClassVar[str] = "rdma"
    one_sided: ClassVar[bool] = True

    def __init__(self, device: str = "", port: int = 1, gid_index: int = 0, queue_depth: int = 256) -> None:
        reason = rdma_unavailable_reason(device)
        if reason:
            raise PeerUnavailable(reason)
        self.verbs = _Verbs(device, port, gid_index, queue_depth)
        self.regions = RegionTable()
        self._mrs: dict[int, Any] = {}
        self._peers: dict[str, tuple[Any, RemoteArena]] = {}
        self._scratch: dict[int, Any] = {}
        self.errors = 0

    def register_memory(self, buf: memoryview) -> int:
        view = as_bytes_view(buf)
        mr = self.verbs.register(view, remote=False)
        region = self.regions.add(buffer_address(view), len(view), int(mr.lkey), int(mr.rkey))
        self._mrs[region.handle] = mr
        return region.handle

    def unregister_memory(self, handle: int) -> None:
        self.regions.remove(handle)
        mr = self._mrs.pop(handle, None)
        if mr is not None:
            mr.close()

    def open_segment(self, segment: Segment, pool: ConnectionPool) -> None:
        if segment.node_id in self._peers:
            return
        qp = self.verbs.make_qp()
        psn = random.randrange(1 << 24)
        mine = self.verbs.info(qp, psn, 0, 0, 0)
        conn = pool.acquire(time.monotonic() + pool.opts.connect_timeout_s)
        ok = False
        try:
            _, meta = conn.request(wire.Op.RDMA_CONNECT, mine.encode())
            peer = QpInfo.decode(meta)
            ok = True
        except TransportError as exc:
            raise PeerUnavailable(f"node {segment.node_id} refused RDMA: {exc}") from exc
        finally:
            pool.release(conn, ok)
        self.verbs.connect_qp(qp, psn, peer)
        self._peers[segment.node_id] = (qp, RemoteArena(peer.addr, peer.length, peer.rkey))

    def close_segment(self, node_id: str) -> None:
        peer = self._peers.pop(node_id, None)
        if peer is not None:
            peer[0].close()

    def _run(self, node_id: str, items: Sequence[Extent], deadline: float, read: bool) -> list[bool]:
        peer = self._peers.get(node_id)
        if peer is None:
            return [False] * len(items)
        qp, arena = peer
        extents = [
            (off, [(buffer_address(as_bytes_view(p)), memoryview(p).nbytes) for p in parts])
            for off, parts in items
        ]
        wrs, bad = build_work_requests(extents, self.regions, arena)
        ok = [True] * len(items)
        for i in bad:
            ok[i] = False
        by_id = {w.wr_id: w.item for w in wrs}
        try:
            for batch in post_batches(wrs, self.verbs.depth):
                for wr_id, status in self.verbs.post_and_poll(qp, batch, read, deadline):
                    outcome = classify(status)
                    if outcome is Outcome.PEER_DOWN:
                        raise PeerUnavailable(f"RDMA completion {describe(status)}")
                    if outcome is Outcome.ITEM_FAILED:
                        ok[by_id[wr_id]] = False
        except (TransportError, TimeoutError):
            self.errors += 1
            self.close_segment(node_id)
            return [False] * len(items)
        return ok

    def read(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, read=True)

    def write(self, node_id: str, items: Sequence[Extent], deadline: float) -> list[bool]:
        return self._run(node_id, items, deadline, read=False)

    def close(self) -> None:
        for node_id in list(self._peers):
            self.close_segment(node_id)
        for handle in list(self._mrs):
            self.unregister_memory(handle)


class RdmaResponder:
    """The node's passive side: arena registered once, one RC QP per connecting client."""

    def __init__(self, arena_view: memoryview, device: str = "", port: int = 1, gid_index: int = 0) -> None:
        self.verbs = _Verbs(device, port, gid_index)
        self.view = arena_view
        self.mr = self.verbs.register(arena_view, remote=True)
        self.addr = buffer_address(arena_view)
        self._qps: list[Any] = []

    def accept(self, client: QpInfo) -> QpInfo:
        qp = self.verbs.make_qp()
        psn = random.randrange(1 << 24)
        self.verbs.connect_qp(qp, psn, client)
        self._qps.append(qp)
        return self.verbs.info(qp, psn, self.addr, len(self.view), int(self.mr.rkey))

    def close(self) -> None:
        for qp in self._qps:
            qp.close()
        self.mr.close()
