"""Checks of a YAML's ``sglang:`` section together with our tiers, before SGLang starts.

``check(config, ranks_per_host)`` returns findings, each naming the key to change and to what:

- ``error`` (``launch`` refuses to start SGLang): a host-pool layout our zero-copy path does not
  carry, a host pool no larger than SGLang's GPU pool, a fixed host pool SGLang itself would refuse
  (more than (available RAM - its 10 GiB reserve) / ranks), DRAM tiers of all ranks larger than the
  host's memory, or DRAM tiers plus SGLang's host pools larger than it;
- ``warning``: combinations SGLang rewrites at start (so the YAML would not say what runs), slow
  layouts, tiny pages, DRAM tiers that may not fit beside host pools SGLang sizes itself;
- ``note``: what could not be checked (a host pool sized by ratio depends on the GPU pool).

Memory figures come from ``host_ram`` (RAM or the cgroup limit; ``MemAvailable``), as the DRAM
tier's own attach check does; SGLang's rules are those of its 0.5.23 host pool
(``mem_cache/pool_host/base.py``: a 10 GiB reserve, the budget split evenly over the ranks of a host).
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_mooncake.checks.findings import Finding, Level
from hicache_mooncake.config import BackendConfig
from hicache_mooncake.config.sglang_section import SglangSection
from hicache_mooncake.host_ram import memory_available, memory_limit
from hicache_mooncake.sizes import format_size

SGLANG_RESERVE = 10 << 30
"""Host memory SGLang keeps out of its host-pool budget (``HICACHE_HOST_MEMORY_RESERVE_BYTES``)."""
SGLANG_HOST_MEMORY_FRACTION = 0.8
"""``--hicache-host-memory-fraction``'s default: share of (available - reserve) all host pools of a
host may take when neither ratio nor size is given."""
ZERO_COPY_LAYOUTS = ("page_first", "page_first_direct", "page_head", "layer_first")
"""Host-pool layouts whose pages our ``interface_v1`` path is tested with (tests/sglang)."""
SMALL_PAGE = 16

__all__ = ["Finding", "HostMemory", "Level", "check"]


@dataclass(frozen=True)
class HostMemory:
    limit: int
    """RAM, or the container's limit when lower."""
    available: int | None
    """``MemAvailable`` now (None where the kernel does not say)."""

    @classmethod
    def of_this_host(cls) -> HostMemory:
        return cls(memory_limit(), memory_available())


def check(config: BackendConfig, ranks: int, memory: HostMemory | None = None) -> list[Finding]:
    """Findings for ``config`` served by ``ranks`` scheduler processes on this host."""
    sglang = config.sglang or SglangSection()
    memory = memory or HostMemory.of_this_host()
    return [
        *_layout(config, sglang),
        *_host_pool(sglang),
        *_page(sglang),
        *_memory(config, sglang, ranks, memory),
    ]


def _layout(config: BackendConfig, s: SglangSection) -> list[Finding]:
    out: list[Finding] = []
    layout = s.hicache_mem_layout or "page_first"
    io = s.hicache_io_backend or "kernel"
    if config.interface_v1 and layout not in ZERO_COPY_LAYOUTS:
        out.append(
            Finding(
                "error",
                f"sglang.hicache_mem_layout: {layout} is not a layout our zero-copy path (interface_v1: 1) is "
                f"tested with; use page_first or page_first_direct (or {', '.join(ZERO_COPY_LAYOUTS[2:])}), "
                "or interface_v1: 0 (SGLang copies flat pages)",
            )
        )
    if config.interface_v1 and layout == "layer_first":
        out.append(
            Finding(
                "warning",
                "sglang.hicache_mem_layout: layer_first splits every page into 2 runs per layer (one copy "
                "each); page_first / page_first_direct move a page as one run per K and V",
            )
        )
    if layout == "page_first_direct" and io == "kernel":
        out.append(
            Finding(
                "warning",
                "sglang: SGLang switches hicache_io_backend to direct for page_first_direct; write "
                "hicache_io_backend: direct so the YAML says what runs",
            )
        )
    if layout == "page_first" and io == "direct":
        out.append(
            Finding(
                "warning",
                "sglang: SGLang switches hicache_mem_layout to page_first_direct for the direct I/O backend; "
                "write hicache_mem_layout: page_first_direct so the YAML says what runs",
            )
        )
    return out


def _host_pool(s: SglangSection) -> list[Finding]:
    cache_mode = (s.hicache_host_memory_mode or "cache") == "cache"
    if s.hicache_ratio is not None and cache_mode and s.hicache_ratio <= 1.0:
        return [
            Finding(
                "error",
                f"sglang.hicache_ratio: {s.hicache_ratio} makes SGLang's host pool no larger than its GPU pool "
                "(SGLang then warns that its host cache is less effective, and pages prefetched from this "
                "backend land in that pool); use more than 1 (SGLang's default: 2.0), or hicache_size",
            )
        ]
    return []


def _page(s: SglangSection) -> list[Finding]:
    if s.page_size is None:
        return [
            Finding(
                "note",
                "sglang.page_size is not set: SGLang picks one for its attention backend (often 1); every page "
                "is one object here, so set 32-128 for a storage tier",
            )
        ]
    if s.page_size < SMALL_PAGE:
        return [
            Finding(
                "warning",
                f"sglang.page_size: {s.page_size} tokens per page makes many tiny objects (every page is one "
                "object, and per-object costs then dominate); 32-128 suits a storage tier",
            )
        ]
    return []


def _memory(config: BackendConfig, s: SglangSection, ranks: int, mem: HostMemory) -> list[Finding]:
    out: list[Finding] = []
    dram = config.tiers.dram.capacity if config.tiers.dram.enabled else 0
    # the host cache is one arena for the whole host; otherwise every rank allocates its own
    # (with ``auto`` an MLA model at TP > 1 also shares one: the check stays on the safe side)
    shared = config.tiers.host_cache == "on"
    dram_total = dram if shared else dram * ranks
    per = f" x {ranks} ranks" if ranks > 1 and not shared else ""
    if dram_total > mem.limit:
        out.append(
            Finding(
                "error",
                f"tiers.dram.capacity: {format_size(dram)}{per} = {format_size(dram_total)} is more than this "
                f"host's memory ({format_size(mem.limit)}); "
                + (
                    "the host cache holds one arena for the host: at most "
                    f"{format_size(mem.limit)}, less what SGLang's host pools need"
                    if shared
                    else f"every rank allocates its own: at most {format_size(mem.limit // ranks)} per rank, "
                    "less what SGLang's host pool needs"
                ),
            )
        )
        return out
    if s.hicache_size is not None:
        pool_total = s.hicache_size * ranks
        if mem.available is not None:
            budget = max(mem.available - SGLANG_RESERVE, 0) // ranks
            if s.hicache_size > budget:
                out.append(
                    Finding(
                        "error",
                        f"sglang.hicache_size: {s.hicache_size // 10**9}GB per rank is more than SGLang allows "
                        f"a rank here ((available {format_size(mem.available)} - 10GiB reserve) / {ranks} = "
                        f"{format_size(budget)}): SGLang would refuse to start; lower it",
                    )
                )
        room = mem.limit - SGLANG_RESERVE - pool_total
        if dram_total > room:
            fit = max(room // ranks, 0)
            out.append(
                Finding(
                    "error",
                    f"tiers.dram.capacity: {format_size(dram)}{per} beside SGLang's host pools "
                    f"(sglang.hicache_size {s.hicache_size // 10**9}GB{per}) and SGLang's 10GiB reserve is more "
                    f"than this host's {format_size(mem.limit)}; lower tiers.dram.capacity to at most "
                    f"{format_size(fit)} per rank, or sglang.hicache_size",
                )
            )
        return out
    if s.hicache_ratio is None:
        # SGLang sizes its pools itself: up to a fraction of (available - reserve) for all ranks
        base = mem.available if mem.available is not None else mem.limit
        pools = int(SGLANG_HOST_MEMORY_FRACTION * max(base - SGLANG_RESERVE, 0))
        if dram_total > mem.limit - pools:
            out.append(
                Finding(
                    "warning",
                    f"tiers.dram.capacity: {format_size(dram)}{per} may not fit beside SGLang's host pools, which "
                    f"may take up to {format_size(pools)} here (--hicache-host-memory-fraction 0.8); set "
                    "sglang.hicache_size to split host RAM exactly (README: Sizing)",
                )
            )
        return out
    out.append(
        Finding(
            "note",
            f"sglang.hicache_ratio: SGLang's host pool is {s.hicache_ratio} x its GPU KV pool, unknown before it "
            "starts, so only the DRAM tier was checked against host RAM; set sglang.hicache_size for a checked "
            "split (README: Sizing)",
        )
    )
    return out
