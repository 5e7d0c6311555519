"""Whether a backend keeps its tiers in the host cache (``tiers.host_cache``)."""

from __future__ import annotations

from hicache_mooncake.config import BackendConfig

from .launcher import reachable
from .paths import HostCachePaths


def use_host_cache(config: BackendConfig, replicated_kv: bool, tp_size: int) -> tuple[bool, str]:
    """(on, why). ``auto``: on for a rank-replicated KV (MLA) at TP > 1, where only rank 0 stores
    and every rank must find its pages, and whenever the named host cache already runs."""
    mode = config.tiers.host_cache
    if mode != "auto":
        return mode == "on", f"tiers.host_cache: {mode}"
    if replicated_kv and tp_size > 1:
        return True, f"tiers.host_cache: auto (MLA at tp_size={tp_size}: ranks share one copy)"
    if reachable(HostCachePaths.of(config.host_cache)):
        return True, "tiers.host_cache: auto (the host cache runs)"
    return False, "tiers.host_cache: auto (in-process tiers: no host cache runs, not MLA at TP > 1)"
