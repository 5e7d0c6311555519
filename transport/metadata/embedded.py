"""In-process metadata (one host, no services): a dict with TTLs, thread-safe."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from .base import NodeInfo


class EmbeddedMetadata:
    def __init__(self, static_nodes: Iterable[NodeInfo] = ()) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[NodeInfo, float]] = {}
        self._static = {n.node_id: n for n in static_nodes}

    def register_node(self, info: NodeInfo, ttl_s: float) -> None:
        with self._lock:
            self._nodes[info.node_id] = (info, time.monotonic() + ttl_s)

    def deregister_node(self, node_id: str) -> None:
        with self._lock:
            self._nodes.pop(node_id, None)
            self._static.pop(node_id, None)

    def live_nodes(self) -> list[NodeInfo]:
        now = time.monotonic()
        with self._lock:
            for node_id in [k for k, (_, exp) in self._nodes.items() if exp <= now]:
                del self._nodes[node_id]
            merged = dict(self._static)
            merged.update({k: v for k, (v, _) in self._nodes.items()})
        return [merged[k] for k in sorted(merged)]

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass
