"""The verbs simulator rejects what a NIC rejects, and completes the way the verbs spec says.

Driven through the stand-in pyverbs API only (two RC QPs of this process connected to each other;
the bytes still travel through the simulated NIC's socket). If these pass on a simulator that
accepted anything, the transport tests that rely on it would prove nothing.
"""

from __future__ import annotations

import ctypes
import errno
import select
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rdma_sim import Fabric, no_fabric

LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ = 1, 2, 4
SIGNALED = 2
WR_WRITE, WR_READ = 0, 4
SUCCESS, LOC_PROT, FLUSH, REM_ACCESS, RETRY_EXC = 0, 4, 5, 10, 12


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[Fabric]:
    limits = {"max_qp_wr": 64, "max_sge": 4, "max_qp_rd_atom": 4, "max_qp_init_rd_atom": 4}
    cfg = {"devices": [{"name": "sim0", "limits": limits}]}
    with Fabric(tmp_path / "fabric", cfg) as fab:
        fab.faults.max_delay_s = 0.001
        yield fab


class Pair:
    """Two connected RC QPs (a requester and a responder) plus registered buffers."""

    def __init__(self, qp_access: int = REMOTE_READ | REMOTE_WRITE | LOCAL_WRITE, depth: int = 16) -> None:
        import pyverbs.addr as addr  # type: ignore[import-not-found]
        import pyverbs.cq as cq  # type: ignore[import-not-found]
        import pyverbs.device as device  # type: ignore[import-not-found]
        import pyverbs.mr as mr  # type: ignore[import-not-found]
        import pyverbs.pd as pd  # type: ignore[import-not-found]
        import pyverbs.qp as qp  # type: ignore[import-not-found]

        self.addr, self.qpm, self.mrm = addr, qp, mr
        self.ctx = device.Context(name="sim0")
        self.pd = pd.PD(self.ctx)
        self.cq = cq.CQ(self.ctx, 64)
        self.local = ctypes.create_string_buffer(1 << 16)
        self.remote = ctypes.create_string_buffer(1 << 16)
        self.lmr = mr.MR(self.pd, len(self.local), LOCAL_WRITE, address=ctypes.addressof(self.local))
        self.rmr = mr.MR(
            self.pd,
            len(self.remote),
            LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE,
            address=ctypes.addressof(self.remote),
        )
        self.a = self.make_qp(LOCAL_WRITE, depth)
        self.b = self.make_qp(qp_access, depth)
        self.connect(self.a, self.b)
        self.connect(self.b, self.a)

    def make_qp(self, access: int, depth: int) -> Any:
        cap = self.qpm.QPCap(max_send_wr=depth, max_recv_wr=1, max_send_sge=2, max_recv_sge=1)
        init = self.qpm.QPInitAttr(qp_type=2, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0)
        q = self.qpm.QP(self.pd, init)
        attr = self.qpm.QPAttr(port_num=1)
        attr.qp_access_flags = access
        q.to_init(attr)
        return q

    def connect(self, q: Any, peer: Any, gid_index: int = 3, rd_atomic: int = 4, hop_limit: int = 64) -> None:
        attr = self.qpm.QPAttr(port_num=1)
        attr.path_mtu = 5
        attr.dest_qp_num = peer.qp_num
        attr.rq_psn = 0
        attr.max_dest_rd_atomic = 4
        attr.min_rnr_timer = 12
        gid = self.ctx.query_gid(1, 3)
        gr = self.addr.GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=hop_limit, traffic_class=0)
        attr.ah_attr = self.addr.AHAttr(port_num=1, is_global=1, gr=gr, dlid=0, sl=0)
        attr.timeout = 10  # 4 ms per try: a dropped packet fails in ~32 ms
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.sq_psn = 0
        attr.max_rd_atomic = rd_atomic
        q.to_rts(attr)

    def attach(self, q: Any) -> None:
        """Connect ``q`` to a fresh responder QP (an RTS QP cannot be connected again)."""
        r = self.make_qp(REMOTE_READ | REMOTE_WRITE | LOCAL_WRITE, 8)
        self.connect(q, r)
        self.connect(r, q)

    def wr(self, wr_id: int, opcode: int, off: int, n: int, roff: int, *, lkey: int = -1, rkey: int = -1,
           flags: int = SIGNALED, nxt: Any = None) -> Any:  # fmt: skip
        import pyverbs.wr as wr  # type: ignore[import-not-found]

        sge = wr.SGE(ctypes.addressof(self.local) + off, n, self.lmr.lkey if lkey < 0 else lkey)
        kw = {"next_wr": nxt} if nxt is not None else {}
        req = wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=flags, **kw)
        req.set_wr_rdma(self.rmr.rkey if rkey < 0 else rkey, ctypes.addressof(self.remote) + roff)
        return req

    def completions(self, want: int, timeout: float = 5.0) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        end = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < end:
            n, wcs = self.cq.poll(16)
            out += [(int(w.wr_id), int(w.status)) for w in wcs[:n]]
            if not n:
                time.sleep(0.001)
        return out


def test_read_and_write_move_bytes_between_registered_buffers(fabric: Fabric) -> None:
    p = Pair()
    p.remote[100:200] = bytes(range(100))
    p.a.post_send(p.wr(1, WR_READ, 0, 100, 100))
    assert p.completions(1) == [(1, SUCCESS)]
    assert p.local[0:100] == bytes(range(100))
    p.local[500:600] = b"x" * 100
    p.a.post_send(p.wr(2, WR_WRITE, 500, 100, 1000))
    assert p.completions(1) == [(2, SUCCESS)]
    assert p.remote[1000:1100] == b"x" * 100


def test_unregistered_memory_and_local_bounds_are_local_protection_errors(fabric: Fabric) -> None:
    p = Pair()
    p.a.post_send(p.wr(1, WR_READ, 0, 100, 0, lkey=0xDEAD))  # no such MR
    p.a.post_send(p.wr(2, WR_READ, 0, 100, 0))  # after an error: flushed
    assert p.completions(2) == [(1, LOC_PROT), (2, FLUSH)]
    attr, _ = p.a.query(1)
    assert attr.qp_state == 6 and p.a.qp_state == 3  # the device's ERR vs the cached RTS
    q = Pair()
    q.a.post_send(q.wr(1, WR_READ, (1 << 16) - 10, 100, 0))  # runs past the end of the local MR
    assert q.completions(1) == [(1, LOC_PROT)]


def test_remote_key_bounds_and_access_are_remote_access_errors(fabric: Fabric) -> None:
    cases = [
        {"rkey": 0xBEEF},  # wrong rkey
        {"roff": (1 << 16) - 10},  # out of the remote MR
    ]
    for case in cases:
        p = Pair()
        p.a.post_send(p.wr(1, WR_READ, 0, 100, int(case.get("roff", 0)), rkey=int(case.get("rkey", -1))))
        assert p.completions(1) == [(1, REM_ACCESS)], case
    p = Pair(qp_access=LOCAL_WRITE | REMOTE_WRITE)  # responder QP not opened for remote reads
    p.a.post_send(p.wr(1, WR_READ, 0, 100, 0))
    assert p.completions(1) == [(1, REM_ACCESS)]
    p = Pair()
    ro = p.mrm.MR(p.pd, 4096, LOCAL_WRITE | REMOTE_READ, address=ctypes.addressof(p.remote) + 8192)
    p.a.post_send(p.wr(1, WR_WRITE, 0, 100, 8192, rkey=ro.rkey))  # MR has no REMOTE_WRITE
    assert p.completions(1) == [(1, REM_ACCESS)]
    p = Pair()
    p.lmr.close()  # deregistered: its lkey is refused
    p.a.post_send(p.wr(1, WR_WRITE, 0, 100, 0))
    assert p.completions(1) == [(1, LOC_PROT)]


def test_registration_and_qp_limits_are_refused_like_a_device(fabric: Fabric) -> None:
    import pyverbs.pyverbs_error as pe  # type: ignore[import-not-found]

    p = Pair()
    with pytest.raises(pe.PyverbsRDMAError):  # remote write needs local write
        p.mrm.MR(p.pd, 4096, REMOTE_WRITE, address=ctypes.addressof(p.remote))
    with pytest.raises(pe.PyverbsRDMAError):  # above the device's max_qp_wr (64)
        p.make_qp(LOCAL_WRITE, depth=128)
    cap = p.qpm.QPCap(max_send_wr=8, max_recv_wr=1, max_send_sge=8, max_recv_sge=1)
    with pytest.raises(pe.PyverbsRDMAError):  # above max_sge (4)
        p.qpm.QP(p.pd, p.qpm.QPInitAttr(qp_type=2, scq=p.cq, rcq=p.cq, cap=cap, sq_sig_all=0))
    q = p.make_qp(LOCAL_WRITE, 8)
    with pytest.raises(pe.PyverbsRDMAError, match="max_rd_atomic"):
        p.connect(q, p.b, rd_atomic=16)  # above max_qp_init_rd_atom (4)
    q = p.make_qp(LOCAL_WRITE, 8)
    with pytest.raises(pe.PyverbsRDMAError, match="GID index"):
        p.connect(q, p.b, gid_index=9)
    q = p.make_qp(LOCAL_WRITE, 8)
    with pytest.raises(pe.PyverbsRDMAError) as exc:  # posting before RTS
        q.post_send(p.wr(1, WR_READ, 0, 10, 0))
    assert exc.value.error_code == errno.EINVAL


def test_completions_are_in_order_per_queue_and_selective_signaling_holds(fabric: Fabric) -> None:
    fabric.faults.max_delay_s = 0.01  # work requests run in random order
    p = Pair()
    for k in range(8):
        p.remote[k * 100 : k * 100 + 100] = bytes([k]) * 100
    head = None
    for k in reversed(range(8)):
        head = p.wr(10 + k, WR_READ, k * 100, 100, k * 100, flags=SIGNALED if k == 7 else 0, nxt=head)
    p.a.post_send(head)
    assert p.completions(1) == [(17, SUCCESS)]  # one completion vouches for the chain
    assert all(p.local[k * 100 : k * 100 + 100] == bytes([k]) * 100 for k in range(8))
    with pytest.raises(Exception, match="SGE"):  # like pyverbs: reading next_wr back fails
        _ = head.next_wr


def test_send_queue_overflow_and_cq_overrun(fabric: Fabric) -> None:
    import pyverbs.pyverbs_error as pe  # type: ignore[import-not-found]

    p = Pair(depth=4)
    fabric.faults.max_delay_s = 0.2
    for k in range(4):
        p.a.post_send(p.wr(k, WR_READ, 0, 10, 0, flags=0))
    with pytest.raises(pe.PyverbsRDMAError) as exc:
        p.a.post_send(p.wr(9, WR_READ, 0, 10, 0))
    assert exc.value.error_code == errno.ENOMEM
    fabric.faults.max_delay_s = 0.0
    import pyverbs.cq as cq  # type: ignore[import-not-found]

    small = cq.CQ(p.ctx, 2)
    cap = p.qpm.QPCap(max_send_wr=8, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    q = p.qpm.QP(p.pd, p.qpm.QPInitAttr(qp_type=2, scq=small, rcq=small, cap=cap, sq_sig_all=1))
    attr = p.qpm.QPAttr(port_num=1)
    attr.qp_access_flags = LOCAL_WRITE
    q.to_init(attr)
    p.attach(q)
    for k in range(4):  # every WR signaled: 4 completions into a CQ of 2
        q.post_send(p.wr(k, WR_READ, 0, 10, 0))
    time.sleep(0.3)
    with pytest.raises(pe.PyverbsRDMAError, match="poll"):
        small.poll(8)
    assert q.query(1)[0].qp_state == 6


def test_dropped_packets_complete_with_retry_exceeded(fabric: Fabric) -> None:
    p = Pair()
    q = p.make_qp(LOCAL_WRITE, 8)
    p.connect(q, p.b)  # b is connected to a, not to q: the responder drops q's packets
    q.post_send(p.wr(1, WR_READ, 0, 10, 0))
    assert p.completions(1) == [(1, RETRY_EXC)]


def test_injected_errors_scribble_and_fail(fabric: Fabric) -> None:
    p = Pair()
    p.remote[0:100] = b"r" * 100
    fabric.faults.completion_errors(RETRY_EXC, count=1)
    p.a.post_send(p.wr(1, WR_READ, 0, 100, 0))
    assert p.completions(1) == [(1, RETRY_EXC)]
    assert p.local[0:100] != b"r" * 100  # a failed read's bytes are garbage, not the data


def test_completion_channel_wakes_on_the_next_completion(fabric: Fabric) -> None:
    import pyverbs.cq as cq  # type: ignore[import-not-found]

    p = Pair()
    ch = cq.CompChannel(p.ctx)
    ccq = cq.CQ(p.ctx, 8, None, ch, 0)
    cap = p.qpm.QPCap(max_send_wr=8, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    q = p.qpm.QP(p.pd, p.qpm.QPInitAttr(qp_type=2, scq=ccq, rcq=ccq, cap=cap, sq_sig_all=0))
    attr = p.qpm.QPAttr(port_num=1)
    attr.qp_access_flags = LOCAL_WRITE
    q.to_init(attr)
    p.attach(q)
    ccq.req_notify()
    q.post_send(p.wr(1, WR_READ, 0, 10, 0))
    ready, _, _ = select.select([ch.fd], [], [], 5)
    assert ready
    ch.get_cq_event(ccq)
    ccq.ack_events(1)
    n, wcs = ccq.poll(4)
    assert n == 1 and wcs[0].wr_id == 1 and wcs[0].status == SUCCESS


def test_no_fabric_looks_like_a_host_without_rdma() -> None:
    with no_fabric():
        import pyverbs.device as device  # type: ignore[import-not-found]
        import pyverbs.pyverbs_error as pe  # type: ignore[import-not-found]

        with pytest.raises(pe.PyverbsRDMAError, match="devices list"):
            device.get_device_list()
