"""``tiers.warm``: warm restart (snapshot of what is hot, re-warm of DRAM from SSD after attach)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WarmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = True
    """With an SSD tier: snapshot what the policy knows is hot (in the SSD directory, at detach and every
    ``interval_s``) and start from it after attach: the policy knows those pages again and a background
    re-warm copies the DRAM ones back from SSD, hottest first."""
    interval_s: float = Field(default=60.0, ge=0)
    """Seconds between snapshots while attached (0: only at detach)."""
    max_entries: int = Field(default=262144, ge=1)
    """Pages per snapshot (the hottest); about 75 bytes each on disk (70-character keys)."""
    rewarm_mbps: float = Field(default=1000.0, gt=0)
    """Re-warm read budget from SSD into DRAM (MB/s); it also waits for moments with no call in flight."""
    rewarm_budget_s: float = Field(default=600.0, gt=0)
    """The re-warm stops after this many seconds (it also stops when DRAM reaches its high watermark:
    it never causes a demotion)."""
