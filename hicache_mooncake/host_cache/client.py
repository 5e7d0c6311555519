"""Open a backend's host cache tier: a ``NodeClient`` on the service's Unix socket with the
``local`` engine (bytes copied by this process between SGLang's host pool and the shared arena),
kept attached by a ``ServiceKeeper``; at attach each served key on which the running service
differs from this YAML is logged (``authority``)."""

from __future__ import annotations

import logging

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.tiers.host_cache_tier import HostCacheTier
from hicache_mooncake.transport.node_client import NodeClient
from hicache_mooncake.transport.options import ClientOptions

from .authority import log_differences, running_service, served_differences
from .hint_forward import ForwardingHints
from .keeper import ServiceKeeper
from .paths import HostCachePaths

log = logging.getLogger(__name__)


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
    report_differences(config, paths)
    if config.admin.port is None:  # the service serves no admin endpoint either: hints stay here
        return HostCacheTier(client, keeper.close)
    hints = ForwardingHints(config)

    def on_close() -> None:
        hints.close()
        keeper.close()

    return HostCacheTier(client, on_close, hints)


def report_differences(config: BackendConfig, paths: HostCachePaths) -> None:
    """At attach: one warning per served key where the running service differs from this YAML
    (``authority``: the service's configuration wins), or why it cannot be compared."""
    running = running_service(paths)
    if running is None:
        return
    if running.config is None:
        log.warning("host cache %s (pid %s): %s", paths.socket, running.pid, running.problem)
        return
    diffs = served_differences(config, running.config)
    log_differences(diffs, joined=True)
    if diffs:
        log.warning(
            "host cache %s (pid %s) runs %s, not this process's YAML, for the %d key(s) above "
            "(the service's configuration wins until it exits)",
            paths.socket, running.pid, paths.config, len(diffs),
        )  # fmt: skip
