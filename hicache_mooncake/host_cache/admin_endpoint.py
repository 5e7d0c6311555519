"""The host cache service's own admin endpoint: the same ``AdminServer`` and routes a rank serves,
over the service's ``TieredStore`` (its DRAM arena, SSD and policy), so every per-tier operation
(resize, detach, attach, freeze, tenant clear) acts on the tiers that exist, once for the host.

It runs when ``admin.port`` is set (not null; the presets set 0), always on a free port of
``admin.host`` (loopback by default) with the same token rule as a rank (``admin/auth.py``: the
operator's token, else the generated one in the discovery directory), and registers in
``admin.discovery_dir`` as an ``admin`` endpoint labelled ``role: host-cache`` and ``host_cache:
<name>`` (and its ``socket``, which tells caches of one name in two directories apart).
``hicache-mooncake admin`` sends tier and tenant operations there instead of to the ranks
that are its clients (those label themselves ``host_cache: <name>``: ``client_labels``).

Hints (pins, sessions, shared marks) name SGLang page hashes, which only a rank can map to store
keys: a rank's hint routes and SGLang's own session ids reach its ``ForwardingHints``
(``hint_forward``), which posts the mapped keys here (``hint_keys_routes``), to the one policy that
places the pages. A failure to start is logged and the service serves on without the endpoint.
"""

from __future__ import annotations

import logging

from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.admin.tier_factory import TierFactory
from hicache_mooncake.config import BackendConfig
from hicache_mooncake.tiers.arena_store import ArenaStore
from hicache_mooncake.tiers.tiered_store import TieredStore

from .hint_keys_routes import ROLE  # registers the keyed hint route too
from .paths import HostCachePaths

log = logging.getLogger(__name__)

SERVICE_RANK_TAG = "host-cache"
"""The rank tag tiers attached at runtime are built with (``store_builder.SERVICE_DIR``: the SSD
directory ``<path>/host-cache`` every rank shares)."""


def service_labels(paths: HostCachePaths) -> dict[str, str]:
    return {"role": ROLE, "host_cache": paths.name, "socket": str(paths.socket)}


def client_labels(config: BackendConfig, host_cache: bool) -> dict[str, str]:
    """The labels a rank adds to its endpoint's: ``host_cache: <name>`` when its tiers are the
    host cache (``hicache-mooncake admin`` sends tier operations to the service instead)."""
    if not host_cache:
        return {}
    paths = HostCachePaths.of(config.host_cache)
    return {"host_cache": paths.name, "host_cache_socket": str(paths.socket)}


def start_service_admin(config: BackendConfig, served: object) -> AdminServer | None:
    """The endpoint over ``served`` (the service's ``ArenaStore``: its ``TieredStore``), started;
    None when ``admin.port`` is null or it cannot start (the reason logged as an ERROR: the cache
    serves on, operators' commands cannot reach it)."""
    if config.admin.port is None:
        return None
    store = served.store if isinstance(served, ArenaStore) else served
    if not isinstance(store, TieredStore):
        raise TypeError(f"the host cache serves a {type(served).__name__}, not a TieredStore")
    paths = HostCachePaths.of(config.host_cache)
    context = AdminContext(
        store=store,
        factory=TierFactory(config, SERVICE_RANK_TAG),
        labels=service_labels(paths),
        timeout_s=config.admin.operation_timeout_s,
    )
    server = AdminServer(config.admin.model_copy(update={"port": 0}), context)
    try:
        server.start()
    except Exception as exc:
        server.close()
        log.error(
            "host cache %s: admin endpoint NOT started (%s); 'hicache-mooncake admin' and hints "
            "cannot reach this cache",
            paths.name, exc,
        )  # fmt: skip
        return None
    return server
