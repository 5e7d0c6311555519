"""``nodes``: our memory nodes (``hicache-mooncake node``) through ``transport.ClusterClient``.

Every key has a home node (rendezvous hashing over live members); one batched request per node
per call. The client bounds every socket operation by ``tiers.remote.timeout_s`` itself and turns
a dead node, a timeout or a detached metadata service (Redis down) into misses, so this provider
is not ``blocking``. Best for small clusters (one host's shared cache is the host cache); no
replication (a killed node's pages are gone).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hicache_mooncake.transport.cluster import ClusterClient
from hicache_mooncake.transport.engine import TransferEngine
from hicache_mooncake.transport.errors import TransportError
from hicache_mooncake.transport.metadata import MetadataConfig, make_metadata
from hicache_mooncake.transport.options import ClientOptions
from hicache_mooncake.transport.registry import make_engine

from .base import Item, PoolProvider, RemoteSettings
from .registry import register_provider

log = logging.getLogger(__name__)


class NodesProvider(PoolProvider):
    name = "nodes"

    def __init__(self, client: ClusterClient) -> None:
        self.client = client

    def register_memory(self, regions: Sequence[memoryview]) -> None:
        """To the transfer engine (RDMA registers them, so pages move NIC-to-pool with no copy;
        deregistered when the client closes)."""
        self.client.register_memory(regions)

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
def build_nodes(remote: RemoteSettings, metadata_config: MetadataConfig) -> NodesProvider:
    """The engine first (a refused engine leaves nothing open), then metadata, then the client."""
    options = ClientOptions(
        timeout_s=remote.timeout_s,
        connect_timeout_s=remote.connect_timeout_s,
        connections_per_peer=remote.connections_per_peer,
        secret=remote.secret(),
        allow_unauthenticated=remote.allow_unauthenticated,
        shm_dir=remote.shm_dir,
    )
    engine = open_engine(remote)
    try:
        metadata = make_metadata(metadata_config)
    except BaseException:
        engine.close()
        raise
    try:
        client = ClusterClient(
            metadata, options, engine, refresh_interval_s=metadata_config.refresh_interval_s
        )
    except BaseException:
        metadata.close()
        raise
    return NodesProvider(client)


def open_engine(remote: RemoteSettings) -> TransferEngine:
    """``tiers.remote.engine``, with its fallback: ``rdma`` on a host where RDMA cannot run (no
    device, no pyverbs, a port or GID that cannot be opened) uses TCP when
    ``tiers.remote.rdma.fallback`` is ``tcp`` (the default), saying so once in the log; with
    ``none`` the attach is refused with the reason and the key to change."""
    if remote.engine != "rdma":
        return make_engine(remote.engine)
    try:
        return make_engine("rdma", options=remote.rdma.options())
    except TransportError as exc:
        if remote.rdma.fallback == "tcp":
            log.warning(
                "tiers.remote.engine: rdma is unavailable on this host (%s); the remote tier uses TCP "
                "(tiers.remote.rdma.fallback: tcp)",
                exc,
            )
            return make_engine("tcp")
        raise ValueError(
            f"tiers.remote.engine: rdma is unavailable on this host: {exc} "
            "(tiers.remote.rdma.fallback is 'none'; set it to 'tcp' to use TCP instead)"
        ) from None
