"""Admin operations that take time (resize, detach, attach, clear): each runs on its own thread,
one at a time, and is visible while it runs (``Operations.get``: state and ``Progress``).

States: ``running``, then ``done`` (the store method returned; ``complete`` says whether it
finished everything, or stopped at its deadline with work left: the progress names what is left),
or ``failed`` (it could not run: the message says why; nothing was half-applied beyond what the
progress reports). The last ``keep`` operations are kept for ``GET /v1/operations``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hicache_mooncake.tiers.progress import Progress
from hicache_mooncake.tiers.runtime_ops import OperationError

log = logging.getLogger(__name__)


class Busy(Exception):
    """Another operation is running (the endpoint answers 409)."""


@dataclass
class Operation:
    id: str
    kind: str
    args: dict[str, Any]
    progress: Progress = field(default_factory=Progress)
    state: str = "running"
    error: str = ""
    started: float = field(default_factory=time.time)
    finished: float | None = None

    def view(self) -> dict[str, Any]:
        progress = self.progress.snapshot()
        left = {k: v for k, v in progress.items() if k.endswith("_left") and v}
        return {
            "id": self.id,
            "kind": self.kind,
            "args": self.args,
            "state": self.state,
            "complete": self.state == "done" and not left,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
            "progress": progress,
        }


class Operations:
    def __init__(self, keep: int = 32) -> None:
        self._lock = threading.Lock()
        self._ops: OrderedDict[str, Operation] = OrderedDict()
        self._ids = itertools.count(1)
        self._keep = keep

    def start(self, kind: str, args: dict[str, Any], work: Callable[[Progress], None]) -> Operation:
        """Run ``work(progress)`` on a new thread; ``Busy`` while another operation runs."""
        with self._lock:
            running = next((op for op in self._ops.values() if op.state == "running"), None)
            if running is not None:
                raise Busy(f"operation {running.id} ({running.kind}) is running")
            op = Operation(f"op-{next(self._ids)}", kind, args)
            self._ops[op.id] = op
            while len(self._ops) > self._keep:
                self._ops.popitem(last=False)
        thread = threading.Thread(
            target=self._run, args=(op, work), name=f"hicache-admin-{op.id}", daemon=True
        )
        thread.start()
        return op

    def _run(self, op: Operation, work: Callable[[Progress], None]) -> None:
        try:
            work(op.progress)
            op.state = "done"
        except (OperationError, ValueError) as exc:
            op.state, op.error = "failed", str(exc)
        except Exception as exc:
            op.state, op.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
            log.exception("admin operation %s (%s) failed", op.id, op.kind)
        finally:
            op.finished = time.time()
            log.info("admin operation %s (%s %s): %s %s", op.id, op.kind, op.args, op.state, op.error)

    def get(self, op_id: str) -> Operation | None:
        with self._lock:
            return self._ops.get(op_id)

    def all(self) -> list[Operation]:
        with self._lock:
            return list(self._ops.values())

    def wait(self, op: Operation, timeout_s: float) -> bool:
        """Wait until ``op`` is no longer running (tests); True if it ended."""
        end = time.monotonic() + timeout_s
        while op.state == "running" and time.monotonic() < end:
            time.sleep(0.01)
        return op.state != "running"
