"""QPCap, QPInitAttr, QPAttr, QP -- pyverbs.qp's shapes, with the checks ibv_create_qp /
ibv_modify_qp / ibv_post_send make (limits, state transitions, required attributes, GID index).

Like libibverbs, ``QP.qp_state`` is the state this process last set; the device's own state (an
RC QP goes to ERR on any error completion) shows in ``QP.query(IBV_QP_STATE)``. Only RC QPs are
simulated.
"""

import collections
import contextlib
import errno
import threading

from . import _fabric
from ._enums_def import ibv_mtu
from ._enums_def import ibv_qp_attr_mask as M
from ._enums_def import ibv_qp_state as S
from ._enums_def import ibv_qp_type as T
from ._enums_def import ibv_wc_status as W
from ._enums_def import ibv_wr_opcode as O
from .addr import AHAttr
from .base import PyverbsCM, PyverbsObject
from .cq import CQ, WC
from .pd import PD
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .utils import gid_bytes

_RC_MASKS = {
    "INIT": M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS,
    "RTR": M.IBV_QP_AV
    | M.IBV_QP_PATH_MTU
    | M.IBV_QP_DEST_QPN
    | M.IBV_QP_RQ_PSN
    | M.IBV_QP_MAX_DEST_RD_ATOMIC
    | M.IBV_QP_MIN_RNR_TIMER,
    "RTS": M.IBV_QP_TIMEOUT
    | M.IBV_QP_RETRY_CNT
    | M.IBV_QP_RNR_RETRY
    | M.IBV_QP_SQ_PSN
    | M.IBV_QP_MAX_QP_RD_ATOMIC,
}
_REQUIRED = {
    (S.IBV_QPS_RESET, S.IBV_QPS_INIT): _RC_MASKS["INIT"],
    (S.IBV_QPS_INIT, S.IBV_QPS_INIT): 0,
    (S.IBV_QPS_INIT, S.IBV_QPS_RTR): _RC_MASKS["RTR"],
    (S.IBV_QPS_RTR, S.IBV_QPS_RTS): _RC_MASKS["RTS"],
    (S.IBV_QPS_RTS, S.IBV_QPS_RTS): 0,
}


class QPCap(PyverbsObject):
    def __init__(self, max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1, max_inline_data=0):
        self.max_send_wr, self.max_recv_wr = max_send_wr, max_recv_wr
        self.max_send_sge, self.max_recv_sge = max_send_sge, max_recv_sge
        self.max_inline_data = max_inline_data


class QPInitAttr(PyverbsObject):
    def __init__(
        self, qp_type=T.IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None, sq_sig_all=1
    ):
        for cq in (scq, rcq):
            if cq is not None and type(cq) is not CQ:
                raise PyverbsUserError(f"Expected CQ/CQEX, got {type(cq)}")
        self.scq, self.rcq, self.srq = scq, rcq, srq
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.sq_sig_all = sq_sig_all
        self._cap = (
            QPCap()
            if cap is None
            else QPCap(
                cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data
            )
        )

    @property
    def send_cq(self):
        return self.scq

    @property
    def recv_cq(self):
        return self.rcq

    @property
    def cap(self):
        return self._cap

    @cap.setter
    def cap(self, val):
        self._cap = val

    def __getattr__(self, name):
        if name in ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"):
            return getattr(self._cap, name)
        raise AttributeError(name)


class QPAttr(PyverbsObject):
    def __init__(
        self, qp_state=S.IBV_QPS_INIT, cur_qp_state=S.IBV_QPS_RESET, port_num=1, path_mtu=ibv_mtu.IBV_MTU_1024
    ):
        self.qp_state, self.cur_qp_state = qp_state, cur_qp_state
        self.port_num, self.path_mtu = port_num, path_mtu
        self.path_mig_state = self.qkey = self.rq_psn = self.sq_psn = self.dest_qp_num = 0
        self.qp_access_flags = self.pkey_index = self.alt_pkey_index = 0
        self.en_sqd_async_notify = self.sq_draining = 0
        self.max_rd_atomic = self.max_dest_rd_atomic = self.min_rnr_timer = 0
        self.timeout = self.retry_cnt = self.rnr_retry = 0
        self.alt_port_num = self.alt_timeout = self.rate_limit = 0
        self.cap = QPCap(0, 0, 0, 0, 0)
        self._ah = AHAttr()
        self._alt_ah = AHAttr()

    @staticmethod
    def _copy(ah):
        out = AHAttr(ah.dlid, ah.sl, ah.src_path_bits, ah.static_rate, 0, ah.port_num)
        out.is_global = ah.is_global
        out._dgid = ah._dgid
        out.flow_label, out.sgid_index = ah.flow_label, ah.sgid_index
        out.hop_limit, out.traffic_class = ah.hop_limit, ah.traffic_class
        return out

    @property
    def ah_attr(self):
        return self._copy(self._ah)

    @ah_attr.setter
    def ah_attr(self, val):
        if val is not None:
            self._ah = self._copy(val)

    @property
    def alt_ah_attr(self):
        return self._copy(self._alt_ah)

    @alt_ah_attr.setter
    def alt_ah_attr(self, val):
        if val is not None:
            self._alt_ah = self._copy(val)


class _State:
    """The device's side of one QP (what the NIC threads and the responder look at)."""

    def __init__(self, qp, pd, init_attr):
        self.qp = qp
        self.pd = pd
        self.nic = pd.nic
        self.qp_num = 0
        self.hw_state = S.IBV_QPS_RESET
        self.access = 0
        self.sgid = bytes(16)
        self.sgid_type = 0
        self.av_dgid = bytes(16)
        self.hop_limit = 0
        self.traffic_class = 0
        self.service_level = 0
        self.attr_dest_qpn = 0
        self.attr_timeout = 0
        self.attr_retry_cnt = 0
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.read_slots = None
        self.reads_served = 0
        self.cap = init_attr.cap
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        self.send_cq = init_attr.send_cq
        self.sq = collections.deque()
        self.error_seen = False
        self.destroyed = False
        self.lock = threading.Lock()
        self.guard = threading.Condition()
        self.placements = 0

    # responder resources
    def enter_read(self):
        with self.lock:
            self.reads_served += 1
            return self.reads_served <= self.max_dest_rd_atomic

    def leave_read(self):
        with self.lock:
            self.reads_served -= 1

    def set_error(self):
        with self.lock:
            self.hw_state = S.IBV_QPS_ERR
            self.error_seen = True
        self._drain()

    @contextlib.contextmanager
    def placing(self):
        """Hold off ``destroy`` while bytes move into or out of this process's memory."""
        with self.guard:
            if self.destroyed:
                alive = False
            else:
                alive = True
                self.placements += 1
        try:
            yield alive
        finally:
            if alive:
                with self.guard:
                    self.placements -= 1
                    self.guard.notify_all()

    def destroy(self):
        with self.guard:
            self.destroyed = True
            while self.placements:
                self.guard.wait()

    def finish(self, entry, status):
        with self.lock:
            entry.status = status
        self._drain()

    def _drain(self):
        """Completions in post order: a finished entry waits for every earlier one."""
        out = []
        with self.lock:
            while self.sq and self.sq[0].status is not None:
                e = self.sq.popleft()
                st = e.status
                if self.error_seen:  # everything after the first error is flushed
                    st = int(W.IBV_WC_WR_FLUSH_ERR)
                elif st:
                    self.error_seen = True
                    self.hw_state = S.IBV_QPS_ERR
                if e.signaled or self.sq_sig_all or st != 0:
                    out.append(
                        WC(
                            wr_id=e.wr_id,
                            status=st,
                            opcode=_fabric.wc_opcode(e.opcode),
                            byte_len=e.length if st == 0 else 0,
                            qp_num=self.qp_num,
                        )
                    )
        if self.destroyed:
            return
        for wc in out:
            self.send_cq._push(wc)


class QP(PyverbsCM):
    def __init__(self, creator, init_attr, qp_attr=None):
        if not isinstance(creator, PD):
            raise PyverbsUserError("the simulator creates QPs from a PD (ibv_create_qp)")
        if init_attr.qp_type != T.IBV_QPT_RC:
            raise PyverbsRDMAError("Failed to create QP (the simulator models RC QPs only)", errno.EOPNOTSUPP)
        lim = creator.ctx.dev["limits"]
        cap = init_attr.cap
        if (
            init_attr.send_cq is None
            or init_attr.recv_cq is None
            or not 1 <= cap.max_send_wr <= lim["max_qp_wr"]
            or cap.max_recv_wr > lim["max_qp_wr"]
            or not 1 <= cap.max_send_sge <= lim["max_sge"]
            or cap.max_recv_sge > lim["max_sge"]
        ):
            raise PyverbsRDMAError("Failed to create QP", errno.EINVAL)
        self._state = st = _State(self, creator, init_attr)
        nic = creator.nic
        with nic.lock:
            if len(nic.qps) >= lim["max_qp"]:
                raise PyverbsRDMAError("Failed to create QP", errno.ENOMEM)
            st.qp_num = nic.new_qpn()
            nic.qps[st.qp_num] = st
        init_attr.send_cq._qps.append(self)
        self.pd = creator
        self._qp_type = init_attr.qp_type
        self._cached_state = S.IBV_QPS_RESET
        if qp_attr is not None:
            self.to_init(qp_attr)

    @property
    def qp_num(self):
        return self._state.qp_num

    @property
    def qp_state(self):
        return self._cached_state

    @property
    def qp_type(self):
        return self._qp_type

    # ---- state machine --------------------------------------------------------------------

    def to_init(self, qp_attr):
        qp_attr.qp_state = S.IBV_QPS_INIT
        self._modify(qp_attr, _RC_MASKS["INIT"] | M.IBV_QP_STATE, "Failed to modify QP state to init")

    def to_rtr(self, qp_attr):
        if self.qp_state != S.IBV_QPS_INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = S.IBV_QPS_RTR
        self._modify(qp_attr, _RC_MASKS["RTR"] | M.IBV_QP_STATE, "Failed to modify QP state to RTR")

    def to_rts(self, qp_attr):
        if self.qp_state != S.IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = S.IBV_QPS_RTS
        self._modify(qp_attr, _RC_MASKS["RTS"] | M.IBV_QP_STATE, "Failed to modify QP state to RTS")

    def modify(self, qp_attr, comp_mask):
        self._modify(qp_attr, comp_mask, "Failed to modify QP")

    def _modify(self, a, mask, what):
        st = self._state
        dev = self.pd.ctx.dev
        port, lim = dev["port"], dev["limits"]

        def bad(reason):
            return PyverbsRDMAError(f"{what} ({reason})", errno.EINVAL)

        if st.destroyed:
            raise bad("QP destroyed")
        cur = st.hw_state
        new = a.qp_state if mask & M.IBV_QP_STATE else cur
        if new not in (S.IBV_QPS_RESET, S.IBV_QPS_ERR):
            need = _REQUIRED.get((cur, new))
            if need is None:
                raise bad(f"no transition {S(cur).name} -> {S(new).name}")
            if mask & need != need:
                raise bad("missing required attributes")
        if mask & M.IBV_QP_PORT and a.port_num != 1:
            raise bad("no such port")
        if mask & M.IBV_QP_PKEY_INDEX and a.pkey_index != 0:
            raise bad("pkey index")
        if mask & M.IBV_QP_PATH_MTU and not 1 <= a.path_mtu <= port["max_mtu"]:
            raise bad("path MTU")
        if mask & M.IBV_QP_MAX_DEST_RD_ATOMIC and a.max_dest_rd_atomic > lim["max_qp_rd_atom"]:
            raise bad(f"max_dest_rd_atomic {a.max_dest_rd_atomic} > device {lim['max_qp_rd_atom']}")
        if mask & M.IBV_QP_MAX_QP_RD_ATOMIC and a.max_rd_atomic > lim["max_qp_init_rd_atom"]:
            raise bad(f"max_rd_atomic {a.max_rd_atomic} > device {lim['max_qp_init_rd_atom']}")
        if mask & M.IBV_QP_TIMEOUT and not 0 <= a.timeout <= 31:
            raise bad("timeout")
        if mask & (M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY) and not (
            0 <= a.retry_cnt <= 7 and 0 <= a.rnr_retry <= 7
        ):
            raise bad("retry count")
        if mask & M.IBV_QP_DEST_QPN and not 0 < a.dest_qp_num < 1 << 24:
            raise bad("destination QPN")
        sgid = sgid_type = None
        if mask & M.IBV_QP_AV:
            ah = a._ah
            if port["link_layer"] == 2 and not ah.is_global:
                raise bad("RoCE needs a global route (is_global=1)")
            if ah.port_num != 1:
                raise bad("AV port")
            if ah.is_global:
                gids = port["gids"]
                if not 0 <= ah.sgid_index < len(gids) or gid_bytes(gids[ah.sgid_index][0]) == bytes(16):
                    raise bad(f"GID index {ah.sgid_index}")
                sgid, sgid_type = gid_bytes(gids[ah.sgid_index][0]), gids[ah.sgid_index][1]
        with st.lock:
            if mask & M.IBV_QP_ACCESS_FLAGS:
                st.access = int(a.qp_access_flags)
            if sgid is not None:
                st.sgid, st.sgid_type = sgid, sgid_type
                st.av_dgid = gid_bytes(a._ah._dgid)
                st.hop_limit = a._ah.hop_limit
                st.traffic_class, st.service_level = a._ah.traffic_class, a._ah.sl
            if mask & M.IBV_QP_DEST_QPN:
                st.attr_dest_qpn = a.dest_qp_num
            if mask & M.IBV_QP_TIMEOUT:
                st.attr_timeout = a.timeout
            if mask & M.IBV_QP_RETRY_CNT:
                st.attr_retry_cnt = a.retry_cnt
            if mask & M.IBV_QP_MAX_DEST_RD_ATOMIC:
                st.max_dest_rd_atomic = a.max_dest_rd_atomic
            if mask & M.IBV_QP_MAX_QP_RD_ATOMIC:
                st.max_rd_atomic = a.max_rd_atomic
                st.read_slots = threading.BoundedSemaphore(max(1, a.max_rd_atomic))
            if new == S.IBV_QPS_RESET:
                st.error_seen = False
                st.sq.clear()
            st.hw_state = new
        if new == S.IBV_QPS_ERR:
            st.set_error()
        if mask & M.IBV_QP_STATE:
            self._cached_state = new

    def query(self, attr_mask):
        st = self._state
        attr = QPAttr(qp_state=st.hw_state, cur_qp_state=st.hw_state)
        attr.qp_access_flags = st.access
        attr.dest_qp_num = st.attr_dest_qpn
        attr.max_rd_atomic, attr.max_dest_rd_atomic = st.max_rd_atomic, st.max_dest_rd_atomic
        attr.timeout, attr.retry_cnt = st.attr_timeout, st.attr_retry_cnt
        init = QPInitAttr(
            qp_type=self._qp_type, scq=st.send_cq, rcq=st.send_cq, cap=st.cap, sq_sig_all=st.sq_sig_all
        )
        return attr, init

    # ---- work requests --------------------------------------------------------------------

    def post_send(self, wr, bad_wr=None):
        st = self._state
        if st.destroyed:
            raise PyverbsRDMAError("Failed to post send", errno.EINVAL)
        for req in wr.chain():
            with st.lock:
                state = st.hw_state
                if state not in (S.IBV_QPS_RTS, S.IBV_QPS_ERR):
                    raise PyverbsRDMAError("Failed to post send", errno.EINVAL)
                if req._opcode not in (O.IBV_WR_RDMA_READ, O.IBV_WR_RDMA_WRITE):
                    raise PyverbsRDMAError(
                        "Failed to post send (the simulator moves RDMA READ/WRITE only)", errno.EINVAL
                    )
                if len(req._sges) > st.cap.max_send_sge:
                    raise PyverbsRDMAError("Failed to post send", errno.EINVAL)
                if len(st.sq) >= st.cap.max_send_wr:
                    raise PyverbsRDMAError("Failed to post send", errno.ENOMEM)
                entry = _fabric.SendEntry(req)
                st.sq.append(entry)
            if state == S.IBV_QPS_ERR:
                st.finish(entry, int(W.IBV_WC_WR_FLUSH_ERR))
            else:
                st.nic.pool.submit(_fabric.execute, st, entry)

    def post_recv(self, wr, bad_wr=None):
        raise PyverbsRDMAError("Failed to post receive (not simulated)", errno.EOPNOTSUPP)

    def close(self):
        """Destroy: once this returns the device touches none of this process's memory for it."""
        st = getattr(self, "_state", None)
        if st is None or st.destroyed:
            return
        st.destroy()
        with st.nic.lock:
            st.nic.qps.pop(st.qp_num, None)
        with contextlib.suppress(ValueError):
            st.send_cq._qps.remove(self)
