"""How a ``TieredStore`` uses its tiers (``StoreOptions``) and warm restart (``WarmOptions``): the
options ``store_builder`` maps from the YAML. Plain frozen dataclasses; nothing here imports a tier.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WarmOptions:
    """``tiers.warm`` in the YAML (``store_builder`` maps it)."""

    enabled: bool = True
    interval_s: float = 60.0
    """Seconds between snapshots while the store runs (0: only at close and detach)."""
    max_entries: int = 1 << 18
    """Pages per snapshot (the hottest); about 75 bytes each on disk (70-character keys)."""
    rate_mbps: float = 1000.0
    """Re-warm read budget (MB/s) from SSD into DRAM."""
    budget_s: float = 600.0
    """The re-warmer stops after this many seconds."""
    batch_pages: int = 16
    """Pages per re-warm batch."""
    yield_s: float = 0.05
    """Longest wait for a moment with no store call in flight before each batch."""


@dataclass(frozen=True)
class StoreOptions:
    """How the store uses its tiers; each field is one YAML key (``store_builder`` maps them)."""

    timeout_s: float = 5.0
    """``io.timeout_s``: the deadline of a call that is given none."""
    dram_high: float = 0.9
    """``tiers.ssd.high_watermark``: share of DRAM the placement fills before demoting."""
    dram_low: float = 0.75
    """``tiers.ssd.low_watermark``: demotions bring DRAM back to this share."""
    ssd_fill: float = 0.85
    """Share of the SSD entries the placement uses (headroom for whole-region reclaim)."""
    ssd_write_through: bool = False
    """``tiers.ssd.mode: write_through``: every new page also gets an SSD copy (background)."""
    wait_for_room: bool = True
    """``tiers.ssd.foreground_demotion``: a set that finds no free DRAM runs queued demotions
    itself (up to its deadline) instead of refusing the pages at once."""
    type_aware_eviction: bool = True
    """``tiers.type_aware_eviction``: superseded trailing sidecar objects (Mamba states, SWA windows)
    are evicted and demoted first (``policy.superseded``)."""
    warm: WarmOptions | None = None
    """``tiers.warm``: snapshot what is hot, start warm after a restart (``rewarm.py``); None: off."""
