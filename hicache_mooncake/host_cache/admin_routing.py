"""Which registered admin endpoints an ``hicache-mooncake admin`` action goes to, when the host runs
host caches (``admin_endpoint``).

A rank whose tiers are a host cache (labelled ``host_cache: <name>``) has no DRAM or SSD tier of its
own: tier and tenant operations (``TIER_ACTIONS``) go to the service of that name instead, once for
the host, not to each of its client ranks. Hints name SGLang page hashes, which only a rank can map
to store keys: they go to the ranks (a host-cache rank forwards them to the service's policy), never
to a service. ``show`` and ``ops`` go everywhere. Ranks with their own tiers are always included.
"""

from __future__ import annotations

from collections.abc import Sequence

from hicache_mooncake.admin.client import RankEndpoint

from .hint_keys_routes import ROLE

TIER_ACTIONS = ("resize", "detach", "attach", "freeze", "unfreeze", "clear")


def is_service(endpoint: RankEndpoint) -> bool:
    return endpoint.labels.get("role") == ROLE


def is_client(endpoint: RankEndpoint) -> bool:
    """A rank whose tiers are a host cache."""
    return not is_service(endpoint) and bool(endpoint.labels.get("host_cache"))


def endpoints_for(action: str, found: Sequence[RankEndpoint]) -> list[RankEndpoint]:
    """The endpoints of ``found`` that run ``action`` (module docstring). ValueError naming the
    cache when a tier action would reach no endpoint for a host cache whose ranks are registered
    (its service registered none: the action would otherwise skip those tiers silently)."""
    if action == "hint":
        return [e for e in found if not is_service(e)]
    if action not in TIER_ACTIONS:
        return list(found)
    served = {e.labels.get("socket") for e in found if is_service(e)}
    orphans = sorted({e.labels.get("host_cache_socket", "") for e in found if is_client(e)} - served)
    if orphans:
        raise ValueError(
            f"the ranks of host cache {', '.join(orphans)} keep their tiers there, and its service "
            "registered no admin endpoint (is it running, with admin.port set?)"
        )
    return [e for e in found if not is_client(e)]
