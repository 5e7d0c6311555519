"""The completion poller: one thread per engine hands each work completion to the call waiting
for it.

A call registers a ``Window`` under the ``wr_id`` of the one signaled work request that closes it
(``expect``), posts, and waits on the window's event with its own deadline. The poller polls the
CQs of the QPs that have windows outstanding -- and only those, so it sleeps on a condition when
nothing is in flight -- and backs off from a yield to ``max_sleep_s`` while polling finds nothing
(``time.sleep`` releases the GIL). A success completes the window of its ``wr_id``; an error
completion (signaled or not) records the QP's error and fails every window of that QP at once:
the QP is in the error state and nothing more will succeed on it. ``retire`` takes a QP out of
polling before it is destroyed; the poller never touches a retired QP's CQ.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .qp import RcQp
from .verbs import Verbs

log = logging.getLogger(__name__)
GENERAL_ERR = 21  # IBV_WC_GENERAL_ERR: what a failing poll is reported as


class Window:
    __slots__ = ("done", "status")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.status = -1  # the work completion status once done

    def finish(self, status: int) -> None:
        self.status = status
        self.done.set()


class CompletionPoller:
    def __init__(self, v: Verbs, max_sleep_s: float = 0.0002, batch: int = 32) -> None:
        self.v = v
        self.max_sleep_s = max_sleep_s
        self.batch = batch
        self._cond = threading.Condition()
        self._active: dict[int, RcQp] = {}
        self._drain_lock = threading.Lock()
        self._stop = False
        self.polls = 0
        self.completions = 0
        self._thread = threading.Thread(target=self._loop, name="hicache-rdma-poller", daemon=True)
        self._thread.start()

    def expect(self, qp: RcQp, wr_id: int) -> Window:
        """A window completed by ``wr_id`` on ``qp`` (already failed if the QP is in error)."""
        w = Window()
        with self._cond:
            if qp.error_status is not None or qp.retired:
                w.finish(qp.error_status if qp.error_status is not None else GENERAL_ERR)
                return w
            qp.waiting[wr_id] = w
            self._active[qp.qp_num] = qp
            self._cond.notify()
        return w

    def fail(self, qp: RcQp, status: int) -> None:
        """Record an error on ``qp`` from outside (post failed, deadline passed)."""
        with self._cond:
            self._fail_locked(qp, status)

    def retire(self, qp: RcQp) -> None:
        """Stop polling ``qp`` (fails what still waits); returns once no poll of it is running."""
        with self._cond:
            qp.retired = True
            self._fail_locked(qp, GENERAL_ERR)
            self._active.pop(qp.qp_num, None)
        with self._drain_lock:
            pass

    def close(self) -> None:
        with self._cond:
            self._stop = True
            for qp in list(self._active.values()):
                self._fail_locked(qp, GENERAL_ERR)
            self._active.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # ---- poller thread --------------------------------------------------------------------

    def _fail_locked(self, qp: RcQp, status: int) -> None:
        if qp.error_status is None:
            qp.error_status = status
        for w in qp.waiting.values():
            w.finish(qp.error_status)
        qp.waiting.clear()

    def _loop(self) -> None:
        sleep = 0.0
        while True:
            with self._cond:
                while not self._stop and not self._active:
                    self._cond.wait()
                    sleep = 0.0
                if self._stop:
                    return
                qps = list(self._active.values())
            got = 0
            with self._drain_lock:
                for qp in qps:
                    got += self._drain(qp)
            if got:
                sleep = 0.0
                continue
            time.sleep(sleep)
            sleep = min(max(sleep * 2, 1e-5), self.max_sleep_s)

    def _drain(self, qp: RcQp) -> int:
        if qp.retired:  # set under the condition before retire() waits for _drain_lock
            return 0
        self.polls += 1
        try:
            n, wcs = qp.cq.poll(self.batch)
        except self.v.error as exc:
            log.warning("polling the CQ of QP %d failed: %s", qp.qp_num, exc)
            self.fail(qp, GENERAL_ERR)
            return 1
        if not n:
            return 0
        self.completions += n
        with self._cond:
            for wc in wcs[:n]:
                self._deliver(qp, wc)
            if not qp.waiting:
                self._active.pop(qp.qp_num, None)
        return n

    def _deliver(self, qp: RcQp, wc: Any) -> None:
        status = int(wc.status)
        if status != 0:
            self._fail_locked(qp, status)
            return
        w = qp.waiting.pop(int(wc.wr_id), None)
        if w is not None:
            w.finish(0)
