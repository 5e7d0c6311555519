"""Whether a backend keeps its tiers in the host cache (``tiers.host_cache``); the rule for joining
a service another process configured is ``authority``'s."""

from __future__ import annotations

from hicache_mooncake.config import BackendConfig

from .authority import decide_auto, log_differences, running_service
from .paths import HostCachePaths


def use_host_cache(config: BackendConfig, replicated_kv: bool, tp_size: int) -> tuple[bool, str]:
    """(on, why). ``auto``: on whenever the named host cache runs and agrees on the remote provider
    and the SSD path (``authority.decide_auto``: it logs each key that differs), and for a
    rank-replicated KV (MLA) at TP > 1, where only rank 0 stores and every rank must find its pages."""
    mode = config.tiers.host_cache
    if mode != "auto":
        return mode == "on", f"tiers.host_cache: {mode}"
    needs_shared = replicated_kv and tp_size > 1
    running = running_service(HostCachePaths.of(config.host_cache))
    if running is not None:
        decision = decide_auto(config, running, needs_shared)
        if not decision.join:  # joined: open_host_cache_tier logs them at attach
            log_differences(decision.differences, joined=False)
        return decision.join, decision.why
    if needs_shared:
        return True, f"tiers.host_cache: auto (MLA at tp_size={tp_size}: ranks share one copy)"
    return False, "tiers.host_cache: auto (in-process tiers: no host cache runs, not MLA at TP > 1)"
