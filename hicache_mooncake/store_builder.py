"""Build the ``TieredStore`` a configuration describes: one builder per tier kind, in tier order.

A new tier is a new builder registered here with its place in the order (fastest first); the
backend never changes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.tiers.demoter import Demoter
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import AccessContext, policy_factory
from hicache_mooncake.tiers.ssd_tier import SsdTier
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import TieredStore

TierBuilder = Callable[[BackendConfig, str], Tier | None]
_BUILDERS: list[tuple[int, str, TierBuilder]] = []


def register_tier_builder(order: int, name: str) -> Callable[[TierBuilder], TierBuilder]:
    def wrap(fn: TierBuilder) -> TierBuilder:
        _BUILDERS.append((order, name, fn))
        _BUILDERS.sort(key=lambda item: item[0])
        return fn

    return wrap


@register_tier_builder(0, "dram")
def build_dram(config: BackendConfig, rank_tag: str) -> Tier | None:
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
def build_remote(config: BackendConfig, rank_tag: str) -> Tier | None:
    remote = config.tiers.remote
    if not remote.enabled:
        return None
    from hicache_mooncake.tiers.pool_providers import make_provider
    from hicache_mooncake.tiers.remote_dram_tier import RemoteDramTier

    provider = make_provider(remote.provider, remote, config.metadata)
    return RemoteDramTier(
        provider,
        write_through=remote.write_through,
        promote_on_hit=remote.promote_on_hit,
        timeout_s=remote.timeout_s,
    )


@register_tier_builder(2, "ssd")
def build_ssd(config: BackendConfig, rank_tag: str) -> Tier | None:
    ssd = config.tiers.ssd
    if not ssd.enabled:
        return None
    from hicache_mooncake.ssd import SsdEngine, SsdOptions
    from hicache_mooncake.tiers.rate_budget import RateBudget

    dirs = []
    for base in ssd.paths:
        path = os.path.join(os.path.expanduser(base), rank_tag)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"tiers.ssd.path: cannot create {path}: {exc.strerror or exc}") from None
        dirs.append(path)
    engine = SsdEngine(
        SsdOptions(
            dirs=tuple(dirs),
            capacity_bytes=ssd.capacity,
            region_size=ssd.region_size,
            min_free_bytes=ssd.min_free,
            direct_io=ssd.direct_io,
            strict=ssd.strict,
            io_threads=ssd.io_threads,
            reinsertion_hits=ssd.reinsertion_hits,
            verify_on_recover=ssd.verify_on_recover,
        )
    )
    budget = RateBudget(ssd.write_budget_mbps * 1e6 if ssd.write_budget_mbps else None)
    return SsdTier(
        engine, admit_min_hits=ssd.admit_min_hits, promote_min_hits=ssd.promote_min_hits, write_budget=budget
    )


def build_store(config: BackendConfig, rank_tag: str = "rank0") -> TieredStore:
    """All enabled tiers (and the DRAM->SSD mover when both exist). A tier that fails to build
    closes the ones already built, then raises."""
    tiers: list[Tier] = []
    try:
        for _order, _name, builder in _BUILDERS:
            tier = builder(config, rank_tag)
            if tier is not None:
                tiers.append(tier)
        if not tiers:
            raise ValueError("the configuration enables no tier (tiers.*.enabled are all false)")
        demoter, background_copy = _mover(config, tiers)
        if config.tiers.placement == "unified" and any(isinstance(t, DramTier | SsdTier) for t in tiers):
            from hicache_mooncake.tiers.placed_store import PlacedTieredStore

            factory = policy_factory(config.tiers.policy, **dict(config.tiers.policy_options))
            return PlacedTieredStore(tiers, factory, demoter)
        return TieredStore(tiers, demoter, background_copy)
    except BaseException:
        for tier in tiers:
            tier.close()
        raise


def _mover(config: BackendConfig, tiers: list[Tier]) -> tuple[Demoter | None, bool]:
    dram = next((t for t in tiers if isinstance(t, DramTier)), None)
    ssd_tier = next((t for t in tiers if isinstance(t, SsdTier)), None)
    if dram is None or ssd_tier is None:
        return None, False
    ssd = config.tiers.ssd
    if ssd.foreground_demotion:
        dram.on_evict = lambda key, data: _demote_now(ssd_tier, key, data)
    demoter = Demoter(dram, ssd_tier, ssd.high_watermark, ssd.low_watermark)
    return demoter, ssd.mode == "write_through"


def _demote_now(ssd_tier: Any, key: str, data: Any) -> None:
    if not ssd_tier.contains(key) and ssd_tier.admit(key, data.nbytes, 0):
        ssd_tier.put_batch([(key, [data.data], AccessContext(demoted=True))])
