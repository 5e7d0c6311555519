"""Build the ``TieredStore`` a configuration describes: one builder per tier kind, in tier order.

A new tier is a new builder registered here with its place in the order (fastest first); the
backend never changes. The same store is served by memory nodes (``build_node_store``) and by the
host cache (``hicache_mooncake.host_cache.service``), wrapped in ``tiers.arena_store.ArenaStore``.
``build_tier`` builds one tier by name: the admin endpoint's runtime attach uses it with the running
configuration plus the section the operator sends (one path for a tier, at start or at runtime).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from hicache_mooncake.config import BackendConfig, ConfigError
from hicache_mooncake.host_cache.service_config import service_config_problem
from hicache_mooncake.host_ram import memory_available, memory_limit
from hicache_mooncake.keys import tenant_reader
from hicache_mooncake.sizes import format_size
from hicache_mooncake.tiers.arena_store import ArenaStore
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.policy import policy_factory
from hicache_mooncake.tiers.policy.quotas import TenantShare
from hicache_mooncake.tiers.rewarm import WarmOptions
from hicache_mooncake.tiers.tier import Tier
from hicache_mooncake.tiers.tiered_store import StoreOptions, TieredStore
from hicache_mooncake.transport.arena_files import ArenaSpec
from hicache_mooncake.transport.node.config import NodeConfig

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
    return dram_tier(config) if config.tiers.dram.enabled else None


def dram_tier(
    config: BackendConfig, shared: ArenaSpec | None = None, object_headers: bool = False
) -> DramTier:
    """``tiers.dram`` as a tier, checked against the host's memory before anything is allocated.
    ``shared``/``object_headers``: the arena in shared memory with headers (the host cache's)."""
    dram = config.tiers.dram
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
            shared=shared,
            object_headers=object_headers,
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
    from hicache_mooncake.ssd import SsdInUseError
    from hicache_mooncake.ssd.private_dir import SsdUnsafePathError, make_private_dir, secure_entries
    from hicache_mooncake.tiers.rate_budget import RateBudget
    from hicache_mooncake.tiers.ssd_tier import SsdTier

    def rank_dirs(tag: str) -> list[str]:
        dirs = []
        for base in ssd.paths:
            path = os.path.join(os.path.expanduser(base), tag)
            try:  # ours alone (another local user must neither read it nor plant a store there)
                make_private_dir(os.path.expanduser(base), "tiers.ssd.path")
                make_private_dir(path, "tiers.ssd.path")
                secure_entries(path, "tiers.ssd.path")
            except SsdUnsafePathError as exc:
                raise ConfigError(str(exc)) from None
            dirs.append(path)
        if len({os.path.realpath(d) for d in dirs}) != len(dirs):
            raise ValueError(f"tiers.ssd.path: two entries name the same directory ({', '.join(ssd.paths)})")
        return dirs

    # Several SGLang servers of one host with the same YAML ask for the same rank directory: the
    # directory is one engine's (its lock), so a later one takes ``<tag>-1``, ``-2``... and says so.
    # Each directory holds up to tiers.ssd.capacity: the host's SSD use is capacity x directories.
    first = rank_dirs(rank_tag)
    for attempt in range(_INSTANCE_DIRS):
        dirs = first if attempt == 0 else rank_dirs(f"{rank_tag}-{attempt}")
        try:
            engine = _ssd_engine(config, dirs)
        except SsdInUseError as exc:
            if exc.held_by_this_process:
                raise  # an engine of ours still closing: its data comes back once it has (retry later)
            if attempt + 1 < _INSTANCE_DIRS:
                continue
            raise ValueError(
                f"tiers.ssd.path: {', '.join(first)} and {_INSTANCE_DIRS - 1} alternatives are all in use by "
                "other processes of this host; give this server its own tiers.ssd.path"
            ) from None
        if attempt:
            log.warning(
                "tiers.ssd.path: %s is in use by another process of this host (another server with the same "
                "tiers.ssd.path): this process keeps its SSD cache in %s (up to tiers.ssd.capacity more on disk)",
                ", ".join(first), ", ".join(dirs),
            )  # fmt: skip
        break
    budget = RateBudget(ssd.write_budget_mbps * 1e6 if ssd.write_budget_mbps else None)
    return SsdTier(
        engine,
        admit_min_hits=ssd.admit_min_hits,
        promote_min_hits=ssd.promote_min_hits,
        write_budget=budget,
        timeout_s=config.io.timeout_s,
    )


_INSTANCE_DIRS = 64
"""Rank directories tried per ``tiers.ssd.path`` when the first ones are other processes' (``build_ssd``)."""


def _ssd_engine(config: BackendConfig, dirs: list[str]) -> Any:
    """The SSD engine over ``dirs`` (``SsdInUseError`` when another engine holds one)."""
    from hicache_mooncake.ssd import SsdEngine, SsdOptions

    ssd = config.tiers.ssd
    return SsdEngine(
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


def build_store(
    config: BackendConfig, rank_tag: str = "rank0", dram: Callable[[], Tier] | None = None
) -> TieredStore:
    """The one store over all enabled tiers. The policy is validated before anything is
    allocated; a tier that fails to build closes the ones already built, then raises.
    ``dram``: builds the DRAM tier instead of ``tiers.dram``'s defaults (the host cache's)."""
    tiers_cfg = config.tiers
    factory = _policy(config)
    ssd = tiers_cfg.ssd
    warm = tiers_cfg.warm
    options = StoreOptions(
        timeout_s=config.io.timeout_s,
        dram_high=ssd.high_watermark,
        dram_low=ssd.low_watermark,
        ssd_write_through=ssd.mode == "write_through",
        wait_for_room=ssd.foreground_demotion,
        type_aware_eviction=tiers_cfg.type_aware_eviction,
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
        order: dict[int, int] = {}  # id(tier) -> its place among the tiers
        # DRAM is built last: its arena's background prefault then does not compete with the
        # other tiers' attach (the SSD index load) for the CPU and the memory bus
        for place, name, builder in sorted(_BUILDERS, key=lambda item: item[1] == "dram"):
            tier = dram() if name == "dram" and dram is not None else builder(config, rank_tag)
            if tier is not None:
                tiers.append(tier)
                order[id(tier)] = place
        tiers.sort(key=lambda tier: order[id(tier)])
        if not tiers:
            raise ValueError("the configuration enables no tier (tiers.*.enabled are all false)")
        return TieredStore(tiers, factory, options, tenant_of=tenant_reader(), tenant_shares=shares)
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


def _policy(config: BackendConfig) -> Callable[[], Any]:
    try:
        return policy_factory(config.tiers.policy, **dict(config.tiers.policy_options))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"tiers.policy_options: {exc}") from None


SERVICE_DIR = "host-cache"
"""The host cache's SSD directory under each ``tiers.ssd.path`` (one for the host, not per rank)."""


def build_service_store(config: BackendConfig, spec: ArenaSpec | None) -> ArenaStore:
    """The host cache's store: the YAML's tiers, the DRAM arena shared (from ``spec``) and with
    object headers, the SSD in ``<path>/host-cache``."""
    problem = service_config_problem(config)
    if problem is not None:
        raise ValueError(problem)

    store = build_store(config, SERVICE_DIR, lambda: dram_tier(config, shared=spec, object_headers=True))
    ssd = config.tiers.ssd
    return ArenaStore(store, flush_on_close_s=ssd.flush_on_detach_s if ssd.enabled else 0.0)


def build_client_store(config: BackendConfig, rank_tag: str, host_cache: bool) -> TieredStore:
    """A backend's store: its own tiers, or (``host_cache``) the host cache as its one tier."""
    if not host_cache:
        return build_store(config, rank_tag)
    from hicache_mooncake.host_cache.client import open_host_cache_tier

    factory = _policy(config)
    tier = open_host_cache_tier(config)
    try:
        return TieredStore([tier], factory, StoreOptions(timeout_s=config.io.timeout_s), hints=tier.hints)
    except BaseException:
        tier.close()
        raise


def build_node_store(cfg: NodeConfig, spec: ArenaSpec | None) -> ArenaStore:
    """A memory node's store: the DRAM tier alone (object headers for one-sided readers, the arena
    in shared memory when ``spec`` says so), placed by the ``node.eviction`` policy."""
    try:
        factory = policy_factory(cfg.eviction)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"node.eviction: {exc}") from None
    dram = DramTier(cfg.capacity, cfg.arena_slab_bytes, prefault=False, shared=spec, object_headers=True)
    try:
        return ArenaStore(TieredStore([dram], factory, StoreOptions(timeout_s=cfg.request_timeout_s)))
    except BaseException:
        dram.close()
        raise
