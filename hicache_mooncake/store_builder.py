"""Build the ``TieredStore`` a configuration describes: one builder per tier kind, in tier order.

A new tier is a new builder registered here with its place in the order (fastest first); the
backend never changes.
"""

from __future__ import annotations

from collections.abc import Callable

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import TieredStore

TierBuilder = Callable[[BackendConfig], Tier | None]
_BUILDERS: list[tuple[int, str, TierBuilder]] = []


def register_tier_builder(order: int, name: str) -> Callable[[TierBuilder], TierBuilder]:
    def wrap(fn: TierBuilder) -> TierBuilder:
        _BUILDERS.append((order, name, fn))
        _BUILDERS.sort(key=lambda item: item[0])
        return fn

    return wrap


@register_tier_builder(0, "dram")
def build_dram(config: BackendConfig) -> Tier | None:
    dram = config.tiers.dram
    if not dram.enabled:
        return None
    return DramTier(
        capacity=dram.capacity,
        slab_size=dram.slab_size,
        policy=dram.policy,
        policy_options=dict(dram.policy_options),
        prefault=dram.prefault,
    )


@register_tier_builder(1, "remote")
def build_remote(config: BackendConfig) -> Tier | None:
    remote = config.tiers.remote
    if not remote.enabled:
        return None
    from hicache_mooncake.tiers.remote_dram_tier import RemoteDramTier
    from hicache_mooncake.transport.cluster import ClusterClient
    from hicache_mooncake.transport.metadata import make_metadata
    from hicache_mooncake.transport.options import ClientOptions

    options = ClientOptions(
        timeout_s=remote.timeout_s,
        connect_timeout_s=remote.connect_timeout_s,
        connections_per_peer=remote.connections_per_peer,
        secret=remote.secret(),
    )
    client = ClusterClient(
        make_metadata(config.metadata),
        options,
        remote.engine,
        refresh_interval_s=config.metadata.refresh_interval_s,
    )
    return RemoteDramTier(client, write_through=remote.write_through, promote_on_hit=remote.promote_on_hit)


def build_store(config: BackendConfig) -> TieredStore:
    """All enabled tiers; a tier that fails to build closes the ones already built, then raises."""
    tiers: list[Tier] = []
    try:
        for _order, _name, builder in _BUILDERS:
            tier = builder(config)
            if tier is not None:
                tiers.append(tier)
    except BaseException:
        for tier in tiers:
            tier.close()
        raise
    if not tiers:
        raise ValueError("the configuration enables no tier (tiers.*.enabled are all false)")
    return TieredStore(tiers)
