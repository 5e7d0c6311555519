"""What a YAML needs for the host cache service to run it (``launcher.start`` checks before it
spawns one; ``store_builder.build_service_store`` refuses the same), so a backend whose YAML cannot
start a service says why in its own log instead of waiting for one that exits at once."""

from __future__ import annotations

from hicache_mooncake.config import BackendConfig


def service_config_problem(config: BackendConfig) -> str | None:
    """Why the service cannot run ``config`` (the setting to change, named), or None."""
    if not config.tiers.dram.enabled:
        return "tiers.dram.enabled: the host cache needs its DRAM tier (the arena clients read)"
    return None
