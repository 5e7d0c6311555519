"""The simulated network behind the fake pyverbs: one NIC per process and device, Unix sockets
between NICs, memory moved with ``ctypes.memmove`` between registered process memory.

Only this module knows how the simulation works; the API modules (device, pd, mr, cq, qp, wr,
addr) keep pyverbs' shapes and call into it. See ../README.md for what is modelled.
"""

import collections
import contextlib
import ctypes
import errno
import hashlib
import itertools
import json
import os
import random
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ._enums_def import (
    ibv_access_flags as A,
)
from ._enums_def import (
    ibv_gid_type_sysfs as G,
)
from ._enums_def import (
    ibv_qp_state as S,
)
from ._enums_def import (
    ibv_send_flags as F,
)
from ._enums_def import (
    ibv_wc_opcode,
)
from ._enums_def import (
    ibv_wc_status as W,
)
from ._enums_def import (
    ibv_wr_opcode as O,
)
from .pyverbs_error import PyverbsRDMAError
from .utils import gid_bytes

FABRIC_ENV = "HICACHE_FAKE_RDMA"
MAX_NICS = 4095

# A RoCE port's usual GID table: link-local v1/v2, then the IPv4 address as v1/v2.
DEFAULT_GIDS = [
    ["fe80:0000:0000:0000:0200:5eff:fe00:0001", 0],
    ["fe80:0000:0000:0000:0200:5eff:fe00:0001", 1],
    ["0000:0000:0000:0000:0000:ffff:0a00:0001", 0],
    ["0000:0000:0000:0000:0000:ffff:0a00:0001", 1],
]
DEFAULT_LIMITS = {
    "max_qp": 4096,
    "max_qp_wr": 16384,
    "max_sge": 30,
    "max_sge_rd": 30,
    "max_cq": 4096,
    "max_cqe": 65535,
    "max_mr": 65536,
    "max_pd": 1024,
    "max_qp_rd_atom": 16,
    "max_qp_init_rd_atom": 16,
    "max_mr_size": (1 << 64) - 1,
}
DEFAULT_PORT = {
    "state": 4,
    "active_mtu": 5,
    "max_mtu": 5,
    "link_layer": 2,
    "lid": 0,
    "max_msg_sz": 1 << 31,
    "gids": DEFAULT_GIDS,
}


def fabric_dir():
    return os.environ.get(FABRIC_ENV) or None


def load_config():
    """The fabric's devices (``fabric.json`` in the fabric directory), with defaults filled in."""
    d = fabric_dir()
    if d is None:
        return None
    path = os.path.join(d, "fabric.json")
    raw = {}
    if os.path.exists(path):
        with open(path) as f:
            raw = json.load(f)
    devices = []
    for i, dev in enumerate(raw.get("devices", [{"name": "sim0"}])):
        port = dict(DEFAULT_PORT, **dev.get("port", {}))
        devices.append(
            {
                "name": dev["name"],
                "index": i,
                "guid": 0x0200_5EFF_FE00_0000 + i,
                "limits": dict(DEFAULT_LIMITS, **dev.get("limits", {})),
                "port": port,
            }
        )
    return {
        "devices": devices,
        "routed": bool(raw.get("routed", False)),
        "time_scale": float(raw.get("time_scale", 1.0)),
    }


class Faults:
    """Requester-side fault injection for this process (tests set it; ``reset()`` between)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self, seed=1234):
        with self.lock if hasattr(self, "injected") else contextlib.nullcontext():
            self.error_status = int(W.IBV_WC_RETRY_EXC_ERR)
            self.error_rate = 0.0  # per work request
            self.errors_left = 0  # the next N work requests fail (takes precedence over the rate)
            self.qp_error_rate = 0.0  # per work request: its QP goes to the error state
            self.max_delay_s = 0.0003  # random delay before each work request executes ...
            self.fixed_delay_s = 0.0  # ... on top of this one
            self.rng = random.Random(seed)
            self.injected = collections.Counter()

    def completion_errors(self, status=W.IBV_WC_RETRY_EXC_ERR, rate=0.0, count=0):
        with self.lock:
            self.error_status, self.error_rate, self.errors_left = int(status), rate, count

    def draw_error(self):
        with self.lock:
            if self.errors_left > 0:
                self.errors_left -= 1
                self.injected["completion_error"] += 1
                return self.error_status
            if self.error_rate and self.rng.random() < self.error_rate:
                self.injected["completion_error"] += 1
                return self.error_status
            if self.qp_error_rate and self.rng.random() < self.qp_error_rate:
                self.injected["qp_error"] += 1
                return -1
            return 0

    def delay(self):
        with self.lock:
            return self.fixed_delay_s + self.rng.random() * self.max_delay_s


FAULTS = Faults()


class RWLock:
    """Many memory accesses at once, or one (de)registration."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def rdma_error(msg, err=errno.EINVAL):
    return PyverbsRDMAError(msg, err)


def is_link_local(raw):
    return raw[:2] == b"\xfe\x80"


# ---- wire between NICs ------------------------------------------------------------------------

_REQ = struct.Struct("<BII16s16sBBQIQ")  # op, src_qpn, dst_qpn, sgid, dgid, sgid_type, hop, addr, rkey, len
_REP = struct.Struct("<BQ")  # status, payload length
OP_READ, OP_WRITE = 1, 2
DROPPED = 255


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer NIC closed")
        got += k
    return buf


class _Link:
    """Connections to one other NIC (one request in flight per connection)."""

    def __init__(self, address):
        self.address = address
        self.idle = []
        self.lock = threading.Lock()

    def request(self, header, payload):
        with self.lock:
            sock = self.idle.pop() if self.idle else None
        if sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.address)
            except OSError:
                sock.close()
                return DROPPED, None
        try:
            sock.sendall(header)
            if payload:
                sock.sendall(payload)
            status, n = _REP.unpack(_recv_exact(sock, _REP.size))
            data = _recv_exact(sock, n) if n else None
        except OSError:
            sock.close()
            return DROPPED, None
        with self.lock:
            self.idle.append(sock)
        return status, data


# ---- the NIC ----------------------------------------------------------------------------------


class Nic:
    """This process's simulated device ``dev`` on the fabric: QPs, MRs, a responder socket and
    a pool of threads that execute posted work requests."""

    def __init__(self, fabric, dev):
        self.fabric = fabric
        self.dev = dev
        self.dir = fabric_dir()
        self.tag = hashlib.sha1(os.path.realpath(self.dir).encode()).hexdigest()[:12]
        self.id = self._claim_id()
        self.mem = RWLock()
        self.lock = threading.Lock()
        self.qps = {}
        self.mrs_by_lkey = {}
        self.mrs_by_rkey = {}
        self._qpn_seq = itertools.count(1)
        self._key_seq = itertools.count(0x100)
        self.links = {}
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fake-nic")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.address(self.id))
        self.server.listen(64)
        threading.Thread(target=self._accept_loop, name="fake-nic-accept", daemon=True).start()

    # identities
    def _claim_id(self):
        d = os.path.join(self.dir, "nics")
        os.makedirs(d, exist_ok=True)
        for k in range(1, MAX_NICS + 1):
            path = os.path.join(d, f"{k}.pid")
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                try:
                    with open(path) as f:
                        pid = int(f.read() or 0)
                    os.kill(pid, 0)
                    continue
                except (ProcessLookupError, ValueError):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    try:
                        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                    except FileExistsError:
                        continue
                except PermissionError:
                    continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return k
        raise rdma_error("fabric full", errno.ENOSPC)

    def address(self, nic_id):
        return f"\0hicache-fake-rdma-{self.tag}-{nic_id}"

    def new_qpn(self):
        n = next(self._qpn_seq)
        if n >= 1 << 12:
            raise rdma_error("Failed to create QP", errno.ENOMEM)
        return (self.id << 12) | n

    def new_key(self):
        return (next(self._key_seq) << 8) | random.randrange(256)

    def time_scale(self):
        return self.fabric["time_scale"]

    # responder side ------------------------------------------------------------------------

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="fake-nic-serve", daemon=True).start()

    def _serve(self, conn):
        with conn:
            while True:
                try:
                    head = _REQ.unpack(_recv_exact(conn, _REQ.size))
                    op, length = head[0], head[9]
                    payload = _recv_exact(conn, length) if op == OP_WRITE and length else b""
                except (OSError, ConnectionError):
                    return
                status, data = self._respond(head, payload)
                try:
                    conn.sendall(_REP.pack(status, len(data) if data else 0))
                    if data:
                        conn.sendall(data)
                except OSError:
                    return

    def _respond(self, head, payload):
        op, src_qpn, dst_qpn, sgid, dgid, sgid_type, hop, addr, rkey, length = head
        with self.lock:
            qp = self.qps.get(dst_qpn)
        if qp is None or qp.hw_state not in (S.IBV_QPS_RTR, S.IBV_QPS_RTS):
            return DROPPED, None
        port = self.dev["port"]
        if bytes(dgid) not in [gid_bytes(g) for g, _ in port["gids"]] or bytes(dgid) != qp.sgid:
            return DROPPED, None
        if qp.attr_dest_qpn != src_qpn or qp.av_dgid != bytes(sgid) or qp.sgid_type != sgid_type:
            return DROPPED, None  # not the QP this one is connected to, or another RoCE version
        if self.fabric["routed"] and not routable(sgid, dgid, sgid_type, hop):
            return DROPPED, None
        need = A.IBV_ACCESS_REMOTE_READ if op == OP_READ else A.IBV_ACCESS_REMOTE_WRITE
        if not qp.access & need:
            qp.set_error()
            return int(W.IBV_WC_REM_ACCESS_ERR), None
        if op == OP_READ and not qp.enter_read():
            qp.set_error()
            return int(W.IBV_WC_REM_INV_REQ_ERR), None
        try:
            with self.mem.shared():
                mr = self.mrs_by_rkey.get(rkey)
                if mr is None or mr.pd is not qp.pd or not mr.access & need or not mr.covers(addr, length):
                    qp.set_error()
                    return int(W.IBV_WC_REM_ACCESS_ERR), None
                if op == OP_READ:
                    return 0, ctypes.string_at(addr, length) if length else b""
                if length:
                    ctypes.memmove(addr, bytes(payload), length)
                return 0, None
        finally:
            if op == OP_READ:
                qp.leave_read()

    # requester side ------------------------------------------------------------------------

    def send(self, qp, op, remote_addr, rkey, length, payload):
        nic_id = qp.attr_dest_qpn >> 12
        with self.lock:
            link = self.links.get(nic_id)
            if link is None:
                link = self.links[nic_id] = _Link(self.address(nic_id))
        header = _REQ.pack(
            op,
            qp.qp_num,
            qp.attr_dest_qpn,
            qp.sgid,
            qp.av_dgid,
            qp.sgid_type,
            qp.hop_limit,
            remote_addr,
            rkey,
            length,
        )
        return link.request(header, payload)


def routable(sgid, dgid, sgid_type, hop_limit):
    """Whether a packet crosses the fabric's router: RoCE v2 (IP), not link-local, hops left."""
    return sgid_type == G.IBV_GID_TYPE_SYSFS_ROCE_V2 and not (
        is_link_local(bytes(sgid)) or is_link_local(bytes(dgid)) or hop_limit < 2
    )


_NICS = {}
_NICS_LOCK = threading.Lock()


def nic_for(name):
    """This process's NIC for device ``name`` (started on first use)."""
    cfg = load_config()
    if cfg is None:
        raise rdma_error("Failed to get devices list", errno.ENOSYS)
    dev = next((d for d in cfg["devices"] if d["name"] == name), None)
    if dev is None:
        raise rdma_error(f"Failed to find device {name}")
    key = (fabric_dir(), name)
    with _NICS_LOCK:
        nic = _NICS.get(key)
        if nic is None:
            nic = _NICS[key] = Nic(cfg, dev)
        return nic


# ---- work request execution -------------------------------------------------------------------


class SendEntry:
    __slots__ = ("opcode", "remote_addr", "rkey", "sges", "signaled", "status", "wr_id", "length")

    def __init__(self, wr):
        self.wr_id = wr._wr_id
        self.opcode = wr._opcode
        self.remote_addr = wr._remote_addr
        self.rkey = wr._rkey
        self.sges = list(wr._sges)
        self.signaled = bool(wr._send_flags & F.IBV_SEND_SIGNALED)
        self.length = sum(s[1] for s in self.sges)
        self.status = None


def retry_timeout_s(qp):
    per_try = 4.096e-6 * (1 << qp.attr_timeout) if qp.attr_timeout else 0.5
    return per_try * (qp.attr_retry_cnt + 1) * qp.nic.time_scale()


def execute(qp, entry):
    """Run one work request on a NIC thread; records its status (completions follow post order)."""
    nic = qp.nic
    time.sleep(FAULTS.delay())
    if qp.destroyed:
        return
    if qp.hw_state == S.IBV_QPS_ERR:
        qp.finish(entry, int(W.IBV_WC_WR_FLUSH_ERR))
        return
    fault = FAULTS.draw_error()
    if fault == -1:  # asynchronous QP error (as after a local catastrophic event)
        qp.set_error()
        qp.finish(entry, int(W.IBV_WC_WR_FLUSH_ERR))
        return
    read = entry.opcode == O.IBV_WR_RDMA_READ
    if entry.length > nic.dev["port"]["max_msg_sz"]:
        qp.finish(entry, int(W.IBV_WC_LOC_LEN_ERR))
        return
    status = 0
    payload = b""
    with qp.placing() as alive, nic.mem.shared():
        if not alive:
            return
        if not local_sges_ok(qp, entry.sges, read):
            qp.finish(entry, int(W.IBV_WC_LOC_PROT_ERR))
            return
        if not read:
            payload = b"".join(ctypes.string_at(a, n) for a, n, _ in entry.sges if n)
    if read and qp.read_slots is not None:
        qp.read_slots.acquire()
    try:
        status, data = nic.send(
            qp, OP_READ if read else OP_WRITE, entry.remote_addr, entry.rkey, entry.length, payload
        )
    finally:
        if read and qp.read_slots is not None:
            qp.read_slots.release()
    if status == DROPPED:
        time.sleep(retry_timeout_s(qp))
        status = int(W.IBV_WC_RETRY_EXC_ERR)
    if status == 0 and fault:
        status = fault
        if read:  # a failed read may have placed some bytes: scribble them
            data = bytes(random.getrandbits(8) for _ in range(min(entry.length, 64))) + bytes(
                max(0, entry.length - 64)
            )
    if read and data is not None:
        with qp.placing() as alive, nic.mem.shared():
            if not alive:
                return
            if not local_sges_ok(qp, entry.sges, read):
                status = status or int(W.IBV_WC_LOC_PROT_ERR)
            else:
                pos = 0
                for a, n, _ in entry.sges:
                    if n:
                        ctypes.memmove(a, bytes(data[pos : pos + n]), n)
                    pos += n
    qp.finish(entry, status)


def local_sges_ok(qp, sges, read):
    for addr, n, lkey in sges:
        mr = qp.nic.mrs_by_lkey.get(lkey)
        if mr is None or mr.pd is not qp.pd or not mr.covers(addr, n):
            return False
        if read and not mr.access & A.IBV_ACCESS_LOCAL_WRITE:
            return False
    return True


def wc_opcode(opcode):
    return int(
        ibv_wc_opcode.IBV_WC_RDMA_READ if opcode == O.IBV_WR_RDMA_READ else ibv_wc_opcode.IBV_WC_RDMA_WRITE
    )
