"""The node's passive RDMA side: the arena registered once, one RC QP per client QP.

Only the arena's object area (from ``data_offset``) is registered: its header page (node id,
epoch, the token that proves the arena file to same-host clients) is out of RDMA's reach; offsets
stay absolute (``QpInfo.addr`` is the arena's start), so a request below ``data_offset`` is
refused by the NIC.

Each QP belongs to the control connection that asked for it (RDMA_CONNECT): when that connection
closes, ``release_owner`` destroys its QPs; ``close`` (at drain) destroys all of them, then the
arena's MR, so no client reaches the arena after the node let go of it. Remote reads and writes
make no completions on this side (each QP's CQ stays empty). Set-up errors reach the caller
as ``RdmaSetupError`` (the node answers the client with an error, it does not drop the
connection).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from ..errors import RdmaSetupError
from .device import RdmaDevice
from .handshake import QpInfo
from .mr import buffer_address
from .options import RdmaOptions
from .qp import RcQp
from .verbs import load, unavailable_reason

log = logging.getLogger(__name__)


class RdmaResponder:
    def __init__(self, arena_view: memoryview, options: RdmaOptions, data_offset: int = 0) -> None:
        reason = unavailable_reason(options.device)
        if reason:
            raise RdmaSetupError(reason)
        self.v = v = load()
        self.dev = RdmaDevice(v, options)
        e = v.e
        self.access = e["IBV_ACCESS_LOCAL_WRITE"] | e["IBV_ACCESS_REMOTE_READ"] | e["IBV_ACCESS_REMOTE_WRITE"]
        self.serve_reads = max(1, min(options.max_rd_atomic, self.dev.limits.max_qp_rd_atom))
        self.view = arena_view
        self.addr = buffer_address(arena_view)
        self.mr: Any = None
        try:
            self.mr = self.dev.register(self.addr + data_offset, len(arena_view) - data_offset, self.access)
        except BaseException:
            self.dev.close()
            raise
        self._lock = threading.Lock()
        self._qps: dict[object, list[RcQp]] = {}
        self._closed = False

    def accept(self, client: QpInfo, owner: object) -> QpInfo:
        """Create a QP connected to ``client``'s, owned by ``owner`` (the control connection)."""
        with self._lock:
            if self._closed:
                raise RdmaSetupError("the node is draining")
        qp = RcQp(self.dev, 1, 1, self.access)
        try:
            qp.connect(client, serve_reads=self.serve_reads, issue_reads=1)
        except BaseException:
            qp.close()
            raise
        with self._lock:
            if self._closed:
                qp.close()
                raise RdmaSetupError("the node is draining")
            self._qps.setdefault(owner, []).append(qp)
        return qp.info(self.addr, len(self.view), int(self.mr.rkey), self.serve_reads)

    def owns(self, owner: object) -> bool:
        with self._lock:
            return owner in self._qps

    def release_owner(self, owner: object) -> int:
        with self._lock:
            qps = self._qps.pop(owner, [])
        for qp in qps:
            qp.close()
        return len(qps)

    def connections(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._qps.values())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            owners = list(self._qps.values())
            self._qps.clear()
        for qps in owners:
            for qp in qps:
                qp.close()
        if self.mr is not None:
            with contextlib.suppress(Exception):
                self.mr.close()
            self.mr = None
        self.dev.close()
        log.info("RDMA responder on %s closed", self.dev.name)
