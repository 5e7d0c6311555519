"""A client's view of the cluster: cached live members refreshed in the background.

When the metadata service cannot be reached the view is **detached** (``detached`` is True and
``nodes()`` is empty, so the remote tier answers misses at once); the refresh thread keeps
trying and the view re-attaches by itself when the service is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from ..errors import MetadataUnavailable
from .base import MetadataService, NodeInfo
from .rendezvous import route

log = logging.getLogger(__name__)


class Membership:
    def __init__(
        self,
        service: MetadataService,
        refresh_interval_s: float = 1.0,
        on_change: Callable[[list[NodeInfo]], None] | None = None,
    ) -> None:
        self.service = service
        self.refresh_interval_s = refresh_interval_s
        self._on_change = on_change
        self._nodes: list[NodeInfo] = []
        self._detached = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.last_error = ""
        if not self.refresh():
            log.warning(
                "metadata service unreachable at attach: %s; the remote tier answers misses until it "
                "is reachable, and attaches by itself then",
                self.last_error,
            )
        self._thread = threading.Thread(target=self._loop, name="hicache-membership", daemon=True)
        self._thread.start()

    @property
    def detached(self) -> bool:
        return self._detached

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return [] if self._detached else list(self._nodes)

    def route(self, keys: Sequence[str]) -> dict[str, list[int]]:
        return route(keys, self.nodes())

    def refresh(self) -> bool:
        try:
            nodes = self.service.live_nodes()
        except MetadataUnavailable as exc:
            self.last_error = str(exc)
            if not self._detached:
                log.warning("metadata service unavailable, remote tier detached: %s", exc)
            self._detached = True
            return False
        with self._lock:
            changed = nodes != self._nodes or self._detached
            if self._detached:
                log.info("metadata service reachable, remote tier attached (%d nodes)", len(nodes))
            self._nodes = nodes
            self._detached = False
        if changed and self._on_change is not None:
            self._on_change(nodes)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            try:
                self.refresh()
            except Exception:  # never let the refresher die
                log.exception("membership refresh failed")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
