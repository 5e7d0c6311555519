"""The QPs to one memory node, handed out one per call (like ``ConnectionPool`` for sockets).

A call owns its QP while it runs, so an error on one QP fails only that call; the QP is then
destroyed (``discard``) and the next call connects a new one. A QP is connected over its own
control connection to the node (RDMA_CONNECT), kept open as the QP's *anchor*: the node destroys
its side when the anchor closes. A failed connect, or a second QP in a row whose completions say
the node did not answer (one lost QP is replaced at once), marks the node down for a back-off that
doubles from ``MIN_BACKOFF_S`` up to the client's ``retry_interval_s``; meanwhile calls fail at
once (misses). A call that completes resets it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import PeerUnavailable, RdmaNotServed, TransportError
from .qp import RcQp

MIN_BACKOFF_S = 0.05


class RdmaPeer:
    def __init__(
        self, node_id: str, connect: Callable[[float], RcQp], max_qps: int, max_backoff_s: float
    ) -> None:
        self.node_id = node_id
        self._connect = connect
        self.max_qps = max_qps
        self.max_backoff_s = max(max_backoff_s, MIN_BACKOFF_S)
        self._idle: list[RcQp] = []
        self._total = 0
        self._cond = threading.Condition()
        self._down_until = 0.0
        self._backoff = MIN_BACKOFF_S
        self._unanswered = 0  # QPs lost in a row because the node did not answer
        self._closed = False
        self.connects = 0
        self.connect_failures = 0
        self.last_error = ""

    def acquire(self, deadline: float) -> RcQp:
        with self._cond:
            while True:
                if self._closed:
                    raise PeerUnavailable(f"node {self.node_id}: RDMA peer closed")
                if self._idle:
                    return self._idle.pop()
                if time.monotonic() < self._down_until:
                    raise PeerUnavailable(f"node {self.node_id} is backing off after: {self.last_error}")
                if self._total < self.max_qps:
                    self._total += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    raise PeerUnavailable(f"node {self.node_id}: no free QP before the deadline")
        try:
            qp = self._connect(deadline)
        except TransportError as exc:
            with self._cond:
                self._total -= 1
                self.connect_failures += 1
                self._back_off_locked(str(exc))
                self._cond.notify()
            if isinstance(exc, RdmaNotServed):
                raise  # the caller switches this node to TCP
            raise PeerUnavailable(f"node {self.node_id}: RDMA connect failed: {exc}") from exc
        except BaseException:
            with self._cond:
                self._total -= 1
                self._cond.notify()
            raise
        with self._cond:
            self.connects += 1
            if self._closed:
                self._total -= 1
                closed = True
            else:
                closed = False
        if closed:
            qp.close()
            raise PeerUnavailable(f"node {self.node_id}: RDMA peer closed")
        return qp

    def release(self, qp: RcQp) -> None:
        """Give back a healthy QP (its call completed: the node answers)."""
        with self._cond:
            self._unanswered = 0
            self._backoff = MIN_BACKOFF_S
            if not self._closed:
                self._idle.append(qp)
                self._cond.notify()
                return
            self._total -= 1
        qp.close()

    def discard(self, qp: RcQp, unreachable: bool, reason: str) -> None:
        """Forget a QP that failed (the caller retired and destroys it); ``unreachable``: the node
        did not answer, so back off before connecting again."""
        with self._cond:
            self._total -= 1
            self._unanswered = self._unanswered + 1 if unreachable else 0
            if self._unanswered >= 2:
                self._back_off_locked(reason)
            self._cond.notify()

    def _back_off_locked(self, reason: str) -> None:
        self.last_error = reason
        self._down_until = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.max_backoff_s)

    def close(self) -> list[RcQp]:
        """Stop handing out QPs; returns the idle ones for the caller to retire and destroy (QPs in
        use are destroyed by their call when it returns them)."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._total -= len(idle)
            self._cond.notify_all()
        return idle
