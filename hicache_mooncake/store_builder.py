"""Build the ``TieredStore`` a configuration describes: one builder per tier kind, in tier order.

A new tier is a new builder registered here with its place in the order (fastest first); the
backend never changes. ``build_tier`` builds one tier by name: the admin endpoint's runtime attach
uses it with the running configuration plus the section the operator sends (one path for a tier,
at start or at runtime).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from hicache_mooncake.config import BackendConfig
from hicache_mooncake.host_ram import memory_available, memory_limit
from hicache_mooncake.keys import tenant_of_key
from hicache_mooncake.sizes import format_size
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import policy_factory
from hicache_mooncake.tiers.policy.quotas import TenantShare
from hicache_mooncake.tiers.rewarm import WarmOptions
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore

log = logging.getLogger(__name__)
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
    limit, available = memory_limit(), memory_available()
    if dram.capacity > limit:
        raise ValueError(
            f"tiers.dram.capacity: {format_size(dram.capacity)} is more than this host lets the process use "
            f"({format_size(limit)}, the RAM or the container's memory limit); every rank allocates it"
        )
    if available is not None and dram.capacity > available:
        log.warning(
            "tiers.dram.capacity: %s is more than the memory available now (%s)%s",
            format_size(dram.capacity),
            format_size(available),
            "; prefault touches all of it at attach, so the kernel may kill the process"
            if dram.prefault
            else "; the arena is touched as it fills",
        )
    try:
        return DramTier(
            capacity=dram.capacity,
            slab_size=dram.slab_size,
            prefault=dram.prefault,
            max_capacity=dram.max_capacity,
        )
    except OSError as exc:
        raise ValueError(
            f"tiers.dram.capacity: cannot allocate {format_size(dram.capacity)}: {exc.strerror or exc}"
        ) from None


@register_tier_builder(1, "remote")
def build_remote(config: BackendConfig, rank_tag: str) -> Tier | None:
    remote = config.tiers.remote
    if not remote.enabled:
        return None
    from hicache_mooncake.remote_engine import open_remote_engine
    from hicache_mooncake.tiers.remote_dram_tier import RemoteDramTier
    from hicache_mooncake.transport.cluster import ClusterClient
    from hicache_mooncake.transport.metadata import make_metadata
    from hicache_mooncake.transport.options import ClientOptions

    options = ClientOptions(
        timeout_s=remote.timeout_s,
        connect_timeout_s=remote.connect_timeout_s,
        connections_per_peer=remote.connections_per_peer,
        secret=remote.secret(),
        allow_unauthenticated=remote.allow_unauthenticated,
        shm_dir=remote.shm_dir,
    )
    engine = open_remote_engine(remote)  # first: a refused engine leaves nothing open
    try:
        metadata = make_metadata(config.metadata)
    except BaseException:
        engine.close()
        raise
    try:
        client = ClusterClient(
            metadata, options, engine, refresh_interval_s=config.metadata.refresh_interval_s
        )
    except BaseException:
        metadata.close()
        raise
    return RemoteDramTier(client, write_through=remote.write_through, promote_on_hit=remote.promote_on_hit)


@register_tier_builder(2, "ssd")
def build_ssd(config: BackendConfig, rank_tag: str) -> Tier | None:
    ssd = config.tiers.ssd
    if not ssd.enabled:
        return None
    from hicache_mooncake.ssd import SsdEngine, SsdOptions
    from hicache_mooncake.tiers.rate_budget import RateBudget
    from hicache_mooncake.tiers.ssd_tier import SsdTier

    dirs = []
    for base in ssd.paths:
        path = os.path.join(os.path.expanduser(base), rank_tag)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"tiers.ssd.path: cannot create {path}: {exc.strerror or exc}") from None
        dirs.append(path)
    if len({os.path.realpath(d) for d in dirs}) != len(dirs):
        raise ValueError(f"tiers.ssd.path: two entries name the same directory ({', '.join(ssd.paths)})")
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
            probe_timeout_s=config.io.timeout_s,
            max_capacity_bytes=ssd.max_capacity or 0,
        )
    )
    budget = RateBudget(ssd.write_budget_mbps * 1e6 if ssd.write_budget_mbps else None)
    return SsdTier(
        engine,
        admit_min_hits=ssd.admit_min_hits,
        promote_min_hits=ssd.promote_min_hits,
        write_budget=budget,
        timeout_s=config.io.timeout_s,
    )


def build_store(config: BackendConfig, rank_tag: str = "rank0") -> TieredStore:
    """The one store over all enabled tiers. The policy is validated before anything is
    allocated; a tier that fails to build closes the ones already built, then raises."""
    tiers_cfg = config.tiers
    try:
        factory = policy_factory(tiers_cfg.policy, **dict(tiers_cfg.policy_options))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"tiers.policy_options: {exc}") from None
    ssd = tiers_cfg.ssd
    warm = tiers_cfg.warm
    options = StoreOptions(
        timeout_s=config.io.timeout_s,
        dram_high=ssd.high_watermark,
        dram_low=ssd.low_watermark,
        ssd_write_through=ssd.mode == "write_through",
        wait_for_room=ssd.foreground_demotion,
        warm=WarmOptions(
            enabled=warm.enabled,
            interval_s=warm.interval_s,
            max_entries=warm.max_entries,
            rate_mbps=warm.rewarm_mbps,
            budget_s=warm.rewarm_budget_s,
        ),
    )
    shares = {name: TenantShare(dram=s.dram, ssd=s.ssd) for name, s in config.tenants.shares.items()}
    config = _fitted(config)
    tiers: list[Tier] = []
    try:
        for _order, _name, builder in _BUILDERS:
            tier = builder(config, rank_tag)
            if tier is not None:
                tiers.append(tier)
        if not tiers:
            raise ValueError("the configuration enables no tier (tiers.*.enabled are all false)")
        return TieredStore(tiers, factory, options, tenant_of=tenant_of_key, tenant_shares=shares)
    except BaseException:
        for tier in tiers:
            tier.close()
        raise


def tier_names() -> list[str]:
    return [name for _order, name, _builder in _BUILDERS]


def build_tier(config: BackendConfig, name: str, rank_tag: str = "rank0") -> Tier:
    """The tier ``name`` (``tier_names()``) as ``config`` describes it, with its section enabled
    (a runtime attach). ValueError naming the key when the configuration does not allow it."""
    builder = next((b for _order, n, b in _BUILDERS if n == name), None)
    if builder is None:
        raise ValueError(f"unknown tier {name!r}; known: {', '.join(tier_names())}")
    section = getattr(config.tiers, name)
    tiers = config.tiers.model_copy(update={name: section.model_copy(update={"enabled": True})})
    tier = builder(_fitted(config.model_copy(update={"tiers": tiers})), rank_tag)
    if tier is None:  # pragma: no cover - every builder builds its enabled section
        raise ValueError(f"tiers.{name}: the builder built nothing")
    return tier


def _fitted(config: BackendConfig) -> BackendConfig:
    """The configuration with what the host imposes applied before any tier is built: SSD keys
    checked against the disks (refused with the key, or the capacity reduced with one warning)."""
    ssd = config.tiers.ssd
    if not ssd.enabled:
        return config
    from hicache_mooncake.config.ssd import fit_to_disk

    capacity = fit_to_disk(ssd)
    if capacity == ssd.capacity:
        return config
    tiers = config.tiers.model_copy(update={"ssd": ssd.model_copy(update={"capacity": capacity})})
    return config.model_copy(update={"tiers": tiers})
