"""In-process metadata (one host, no services): a dict with TTLs and leases, thread-safe."""

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
        self._leases: dict[str, tuple[str, int, float]] = {}
        self._fence: dict[str, int] = {}

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

    def acquire_leadership(self, role: str, owner: str, lease_ms: int) -> int | None:
        now = time.monotonic()
        with self._lock:
            cur = self._leases.get(role)
            if cur is not None and cur[2] > now:
                return None
            token = self._fence.get(role, 0) + 1
            self._fence[role] = token
            self._leases[role] = (owner, token, now + lease_ms / 1000)
            return token

    def renew_leadership(self, role: str, owner: str, lease_ms: int) -> bool:
        now = time.monotonic()
        with self._lock:
            cur = self._leases.get(role)
            if cur is None or cur[0] != owner or cur[2] <= now:
                return False
            self._leases[role] = (owner, cur[1], now + lease_ms / 1000)
            return True

    def release_leadership(self, role: str, owner: str) -> None:
        with self._lock:
            cur = self._leases.get(role)
            if cur is not None and cur[0] == owner:
                del self._leases[role]

    def leader(self, role: str) -> tuple[str, int] | None:
        with self._lock:
            cur = self._leases.get(role)
            if cur is None or cur[2] <= time.monotonic():
                return None
            return cur[0], cur[1]

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass
