"""Tiers attached at runtime are built like the ones at start: the running configuration with the
operator's YAML section merged over it (``{"tiers": {"ssd": {"path": ..., "capacity": ...}}}``),
validated as a whole (errors name the YAML key), then built by the store builder's registry
(``store_builder.build_tier``). One path per tier kind, at start or at runtime."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.config.loader import deep_merge, validate_config
from hicache_mooncake.store_builder import build_tier, tier_names
from hicache_mooncake.tiers.tier import Tier


class TierFactory:
    def __init__(self, config: BackendConfig, rank_tag: str) -> None:
        self.config = config
        self.rank_tag = rank_tag

    def build(self, name: str, overrides: Mapping[str, Any]) -> Tier:
        """The tier ``name`` (``dram``, ``remote``, ``ssd``) as the running configuration plus
        ``overrides`` describe it. ConfigError / ValueError naming the key on bad input."""
        if name not in tier_names():
            raise ValueError(f"unknown tier {name!r}; known: {', '.join(tier_names())}")
        base = self.config.model_dump(mode="python", exclude_unset=False)
        enable = {"tiers": {name: {"enabled": True}}}
        merged = deep_merge(deep_merge(base, dict(overrides)), enable)
        config = validate_config(merged, source=f"admin attach {name}")
        return build_tier(config, name, self.rank_tag)
