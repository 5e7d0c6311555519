"""Open a backend's host cache tier: a ``NodeClient`` on the service's Unix socket with the
``local`` engine (bytes copied by this process between SGLang's host pool and the shared arena),
kept attached by a ``ServiceKeeper``."""

from __future__ import annotations

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.tiers.host_cache_tier import HostCacheTier
from hicache_mooncake.transport.node_client import NodeClient
from hicache_mooncake.transport.options import ClientOptions

from .keeper import ServiceKeeper
from .paths import HostCachePaths


def client_options(config: BackendConfig) -> ClientOptions:
    hc = config.host_cache
    timeout = config.io.timeout_s
    return ClientOptions(
        timeout_s=timeout,
        connect_timeout_s=min(1.0, timeout),
        connections_per_peer=hc.connections,
        retry_interval_s=min(0.2, hc.retry_interval_s),  # a local connect that fails costs nothing
        shm_dir=hc.shm_dir,
    )


def open_host_cache_tier(config: BackendConfig) -> HostCacheTier:
    paths = HostCachePaths.of(config.host_cache)
    paths.ensure_dir()
    client = NodeClient(f"unix:{paths.socket}", 0, client_options(config), "local")
    keeper = ServiceKeeper(config, client.ping)
    try:
        keeper.attach()
    except BaseException:
        keeper.close()
        client.close()
        raise
    return HostCacheTier(client, keeper.close)
