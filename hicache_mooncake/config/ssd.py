"""``tiers.ssd``: the local NVMe tier and how pages move between it and DRAM."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hicache_mooncake.sizes import parse_size

ByteSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]


class SsdTierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Local SSD tier on/off."""
    path: str | list[str] = "/var/cache/hicache-mooncake"
    """Directory (or list, one per device). Each rank uses its own subdirectory ``rank<tp>_<pp>_<cp>_<dp>``."""
    capacity: ByteSize = parse_size("64GiB")
    """Bytes of region files per rank (preallocated as regions fill)."""
    region_size: ByteSize = parse_size("64MiB")
    """Unit of sequential writes and of eviction (whole regions, FIFO with reinsertion of hit entries)."""
    min_free: ByteSize = parse_size("1GiB")
    """Free-space floor of the whole filesystem: below it sets are refused and old regions released."""
    direct_io: Literal["auto", "on", "off"] = "auto"
    """O_DIRECT where the filesystem allows it (auto), required (on), or never (off). Reported in stats."""
    strict: bool = False
    """Refuse to attach when recovery finds a corrupt entry (default: skip and count it)."""
    io_threads: int = Field(default=4, ge=1)
    """Threads doing preadv/pwritev (they release the GIL); more threads = more I/O depth."""
    verify_on_recover: bool = True
    """Hash every payload at attach (finds corruption early); false: headers only, payloads on read."""
    reinsertion_hits: int = Field(default=1, ge=0)
    """On region reclaim, entries read at least this often are rewritten instead of dropped (0: never)."""
    mode: Literal["write_on_evict", "write_through"] = "write_on_evict"
    """write_on_evict: pages reach the SSD when DRAM demotes them; write_through: every new page is also
    copied to the SSD in the background (sets do not wait), so a crash loses none that was copied."""
    high_watermark: float = Field(default=0.9, gt=0, le=1)
    """Background demotion starts when the policy's pages fill DRAM this far..."""
    low_watermark: float = Field(default=0.75, gt=0, lt=1)
    """...and moves the least recently used ones to SSD until this fill level, so sets find free DRAM."""
    foreground_demotion: bool = True
    """When DRAM has no free slot (the background mover fell behind), a set runs the queued demotions
    itself, waiting for the disk up to ``io.timeout_s``; false: those pages are refused at once (the set
    returns False for them; they stay in SGLang's host pool)."""
    flush_on_detach_s: float = Field(default=10.0, ge=0)
    """On detach/close, copy DRAM pages the SSD lacks to the SSD for at most this long (0: drop
    them), so attaching again with the same YAML finds them."""
    write_budget_mbps: float | None = Field(default=None, gt=0)
    """SSD write budget in MB/s; demotions over budget are dropped (never blocked). None: unlimited."""
    admit_min_hits: int = Field(default=0, ge=0)
    """A demoted page is written only if it was read at least this often while in DRAM."""
    promote_min_hits: int = Field(default=1, ge=0)
    """An SSD hit is copied back into DRAM once the page has been read this often from SSD; 0: never."""

    @model_validator(mode="after")
    def _check(self) -> SsdTierConfig:
        if self.low_watermark >= self.high_watermark:
            raise ValueError(
                f"low_watermark ({self.low_watermark}) must be below high_watermark ({self.high_watermark})"
            )
        if self.enabled and self.capacity < 2 * self.region_size:
            raise ValueError(
                f"capacity ({self.capacity}) must hold at least 2 regions of region_size ({self.region_size})"
            )
        if self.region_size % 4096:
            raise ValueError(f"region_size must be a multiple of 4096, got {self.region_size}")
        return self

    @property
    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)
