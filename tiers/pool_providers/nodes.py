"""``nodes``: our memory nodes (``hicache-mooncake node``) through ``transport.ClusterClient``.

Every key has a home node (rendezvous hashing over live members); one batched request per node
per call. The client bounds every socket operation by ``tiers.remote.timeout_s`` itself and turns
a dead node, a timeout or a detached metadata service (Redis down) into misses, so this provider
is not ``blocking``. Best for one host's shared tier (``mla-shared``) and small clusters; no
replication (a killed node's pages are gone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_mooncake.transport.cluster import ClusterClient
from hicache_mooncake.transport.metadata import MetadataConfig, make_metadata
from hicache_mooncake.transport.options import ClientOptions

from .base import Item, PoolProvider, RemoteSettings
from .registry import register_provider


class NodesProvider(PoolProvider):
    name = "nodes"

    def __init__(self, client: ClusterClient) -> None:
        self.client = client

    def exists_batch(self, keys: Sequence[str]) -> list[bool]:
        return self.client.exists_batch(keys)

    def put_batch(self, items: Sequence[Item], obj_type: int) -> list[bool]:
        return self.client.put_batch(items, obj_type)

    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        return self.client.get_batch_into(items)

    def remove_batch(self, keys: Sequence[str]) -> list[bool]:
        return self.client.remove_batch(keys)

    def clear(self) -> None:
        self.client.clear()

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
            "detached": raw.get("detached", False),
            "nodes": len(raw.get("nodes", {})),
            **totals,
            "client": raw.get("client", {}),
        }

    def close(self) -> None:
        self.client.close()


@register_provider("nodes")
def build_nodes(remote: RemoteSettings, metadata: MetadataConfig) -> NodesProvider:
    options = ClientOptions(
        timeout_s=remote.timeout_s,
        connect_timeout_s=remote.connect_timeout_s,
        connections_per_peer=remote.connections_per_peer,
        secret=remote.secret(),
    )
    client = ClusterClient(
        make_metadata(metadata), options, remote.engine, refresh_interval_s=metadata.refresh_interval_s
    )
    return NodesProvider(client)
