"""One reliable-connected QP with its own completion queue, and its state machine.

The CQ holds ``depth + 1`` entries for a send queue of ``depth``: at most one completion per
outstanding work request exists, so it can never overflow, whatever the other QPs do. Set-up goes
RESET -> INIT (``create``) -> RTR -> RTS (``connect``, once the peer's ``QpInfo`` is known). Work
requests are posted as one chain per window (``post``), unsignaled except the last
(``sq_sig_all=0``). Completion bookkeeping (``waiting``, ``error_status``, ``retired``) belongs to
``CompletionPoller`` and is only touched under its lock. Every pyverbs error becomes
``RdmaSetupError``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RdmaSetupError
from .device import RdmaDevice, gid_text
from .handshake import QpInfo
from .mr import RemoteArena
from .wr import WorkRequest

if TYPE_CHECKING:
    from ..connection import Connection
    from .completions import Window


class RcQp:
    def __init__(self, dev: RdmaDevice, depth: int, max_sge: int, access: int) -> None:
        v = dev.v
        self.dev, self.v, self.depth = dev, v, depth
        self.cq: Any = None
        self.qp: Any = None
        self.anchor: Connection | None = None  # the node destroys its side when this closes
        self.arena = RemoteArena(0, 0, 0)
        self.rd_atomic = 1
        self.psn = random.randrange(1 << 24)
        self.waiting: dict[int, Window] = {}
        self.error_status: int | None = None
        self.retired = False
        try:
            self.cq = v.cq.CQ(dev.ctx, depth + 1)
            cap = v.qp.QPCap(max_send_wr=depth, max_recv_wr=1, max_send_sge=max_sge, max_recv_sge=1)
            init = v.qp.QPInitAttr(qp_type=v.e["IBV_QPT_RC"], scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0)
            self.qp = v.qp.QP(dev.pd, init)
            attr = v.qp.QPAttr(port_num=dev.port)
            attr.pkey_index = 0
            attr.qp_access_flags = access
            self.qp.to_init(attr)
        except v.error as exc:
            self.close()
            raise RdmaSetupError(
                f"cannot create an RC QP on {dev.name} (depth {depth}, {max_sge} SGEs): {exc}"
            ) from exc
        self.qp_num = int(self.qp.qp_num)

    def info(self, addr: int = 0, length: int = 0, rkey: int = 0, rd_atomic: int = 1) -> QpInfo:
        return QpInfo(
            self.qp_num, self.psn, self.dev.lid, self.dev.gid, self.dev.mtu, addr, length, rkey, rd_atomic
        )

    def connect(self, peer: QpInfo, serve_reads: int, issue_reads: int) -> None:
        """INIT -> RTR -> RTS against ``peer``. ``serve_reads``: RDMA READs we answer at once
        (max_dest_rd_atomic); ``issue_reads``: READs we keep outstanding (max_rd_atomic)."""
        v, dev, o = self.v, self.dev, self.dev.options
        try:
            attr = v.qp.QPAttr(port_num=dev.port)
            attr.path_mtu = min(dev.mtu, peer.mtu)
            attr.dest_qp_num = peer.qpn
            attr.rq_psn = peer.psn
            attr.max_dest_rd_atomic = serve_reads
            attr.min_rnr_timer = 12
            gr = v.addr.GlobalRoute(
                dgid=v.addr.GID(gid_text(peer.gid)),
                sgid_index=dev.gid_index,
                hop_limit=o.hop_limit,
                traffic_class=o.traffic_class,
            )
            attr.ah_attr = v.addr.AHAttr(
                dlid=peer.lid, sl=o.service_level, is_global=1, port_num=dev.port, gr=gr
            )
            self.qp.to_rtr(attr)
            attr.timeout = o.ack_timeout
            attr.retry_cnt = o.retry_cnt
            attr.rnr_retry = o.rnr_retry
            attr.sq_psn = self.psn
            attr.max_rd_atomic = issue_reads
            self.qp.to_rts(attr)
        except v.error as exc:
            raise RdmaSetupError(
                f"cannot connect QP {self.qp_num} on {dev.name} (GID index {dev.gid_index}) to QP "
                f"{peer.qpn} at {gid_text(peer.gid)}: {exc}"
            ) from exc
        self.rd_atomic = issue_reads
        self.arena = RemoteArena(peer.addr, peer.length, peer.rkey)

    def post(self, window: Sequence[WorkRequest], opcode: int) -> None:
        """Post ``window`` as one chain; the pyverbs objects live until ``post_send`` returns."""
        v = self.v
        signaled = v.e["IBV_SEND_SIGNALED"]
        nxt: Any = None
        chain = []
        for w in reversed(window):
            sges = [v.wr.SGE(s.addr, s.length, s.lkey) for s in w.sges]
            kwargs: dict[str, Any] = {"next_wr": nxt} if nxt is not None else {}
            req = v.wr.SendWR(
                wr_id=w.wr_id,
                opcode=opcode,
                num_sge=len(sges),
                sg=sges,
                send_flags=signaled if w.signaled else 0,
                **kwargs,
            )
            req.set_wr_rdma(w.rkey, w.remote_addr)
            chain.append(req)
            nxt = req
        try:
            self.qp.post_send(nxt)
        except v.error as exc:
            raise RdmaSetupError(f"post_send on QP {self.qp_num}: {exc}") from exc
        del chain

    def to_error(self) -> None:
        """Move to the error state: the device stops and flushes everything outstanding."""
        v = self.v
        with contextlib.suppress(v.error):
            attr = v.qp.QPAttr(qp_state=v.e["IBV_QPS_ERR"])
            self.qp.modify(attr, v.e["IBV_QP_STATE"])

    def close(self) -> None:
        """Destroy the QP (no DMA into our memory after this returns), its CQ, and the anchor."""
        for obj in (self.qp, self.cq):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self.qp = self.cq = None
        if self.anchor is not None:
            self.anchor.close()
            self.anchor = None
