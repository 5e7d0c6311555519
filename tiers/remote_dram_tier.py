"""Remote DRAM tier: the pool of memory nodes, reached through ``transport.ClusterClient``.

Every key has a home node (rendezvous hashing over live members); one batched request per node
per call. Failure semantics come from the client: a dead node, a timeout or a detached metadata
service (Redis down) are misses / refused writes within ``timeout_s``, never exceptions or hangs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_mooncake.transport.cluster import ClusterClient

from .parts import Parts
from .policy import DEFAULT_CONTEXT, AccessContext
from .tier import Tier


class RemoteDramTier(Tier):
    name = "remote"

    def __init__(
        self, client: ClusterClient, write_through: bool = True, promote_on_hit: bool = True
    ) -> None:
        self.client = client
        self.write_through = write_through
        self.promote_on_hit = promote_on_hit

    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """Hand SGLang's host pool buffers to the transfer engine (RDMA registers them, so pages
        move NIC-to-pool with no copy; deregistered when the client closes)."""
        self.client.register_memory(regions)

    def should_promote(self, key: str, ctx: AccessContext) -> bool:
        return self.promote_on_hit

    def contains(self, key: str) -> bool:
        return self.client.exists_batch([key])[0]

    def contains_batch(self, keys: Sequence[str]) -> list[bool]:
        return self.client.exists_batch(keys) if keys else []

    def put(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.put_batch([(key, parts, ctx)])[0]

    def put_batch(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        if not items:
            return []
        obj_type = int(items[0][2].obj_type)
        return self.client.put_batch([(key, parts) for key, parts, _ in items], obj_type)

    def get_into(self, key: str, parts: Parts, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        return self.get_batch_into([(key, parts, ctx)])[0]

    def get_batch_into(
        self, items: Sequence[tuple[str, Parts, AccessContext]], deadline: float | None = None
    ) -> list[bool]:
        if not items:
            return []
        return self.client.get_batch_into([(key, parts) for key, parts, _ in items])

    def remove(self, key: str) -> bool:
        return self.client.remove_batch([key])[0]

    def clear(self) -> None:
        self.client.clear()

    def close(self) -> None:
        self.client.close()

    def stats(self) -> dict[str, Any]:
        """Pool totals over reachable nodes (one STATS request per node, within the timeout)."""
        raw = self.client.stats()
        totals = {"entries": 0, "used_bytes": 0, "capacity_bytes": 0}
        for node in raw.get("nodes", {}).values():
            store = (node.get("node") or {}).get("store") or {}
            totals["entries"] += int(store.get("objects", 0))
            totals["used_bytes"] += int(store.get("used", 0))
            totals["capacity_bytes"] += int(store.get("capacity", 0))
        return {
            "tier": self.name,
            "detached": raw.get("detached", False),
            "nodes": len(raw.get("nodes", {})),
            **totals,
            "client": raw.get("client", {}),
        }
