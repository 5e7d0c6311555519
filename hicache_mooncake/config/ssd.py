"""``tiers.ssd``: the local NVMe tier and how pages move between it and DRAM."""

from __future__ import annotations

import logging
import os
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hicache_mooncake.sizes import format_size, parse_size

log = logging.getLogger("hicache_mooncake.config")
_MIN_REGION = 64 << 10

ByteSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]


class SsdTierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Local SSD tier on/off."""
    path: str | list[str] = "/var/cache/hicache-mooncake"
    """Directory (or list, one per device). Each rank uses its own subdirectory ``rank<tp>_<pp>_<cp>_<dp>``."""
    capacity: ByteSize = parse_size("64GiB")
    """Bytes of region files per rank (preallocated as regions fill)."""
    max_capacity: ByteSize | None = None
    """The most ``hicache-mooncake admin resize ssd`` may grow the tier to; None: ``capacity``."""
    region_size: ByteSize = parse_size("64MiB")
    """Unit of sequential writes and of eviction (whole regions, FIFO with reinsertion of hit entries)."""
    min_free: ByteSize = parse_size("1GiB")
    """Free-space floor of the whole filesystem: below it sets are refused and old regions released."""
    direct_io: Literal["auto", "on", "off"] = "auto"
    """O_DIRECT where the filesystem allows it (auto), required (on), or never (off). Reported in stats."""
    strict: bool = False
    """Scan and verify every region at attach (no summaries, nothing in the background) and refuse
    to attach when a corrupt entry is found (default: skip and count it)."""
    io_threads: int = Field(default=8, ge=1)
    """Native I/O workers that write puts and read gets (the process's pool grows to at least this
    many; each has one request in flight, so this is the I/O depth, and a staging buffer of the
    larger of a read run and a write chunk). The engine's own file work (region opens, summaries,
    fsyncs) runs on at most 4 Python threads whatever this is."""
    verify_on_recover: bool = True
    """Hash every payload of the regions recovered by a scan (those without a summary, e.g. open at a
    crash; scanned in the background while the tier serves); false: headers only. Regions reopened
    from their summary, and every read, verify payloads on read."""
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

    @field_validator("region_size")
    @classmethod
    def _region_size(cls, v: int) -> int:
        if v < _MIN_REGION or v % 4096:
            raise ValueError(
                f"{format_size(v)} ({v} bytes): a region must be a multiple of 4096 bytes and at least "
                f"{format_size(_MIN_REGION)}"
            )
        return v

    @field_validator("path")
    @classmethod
    def _distinct_paths(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not v:
                raise ValueError("the path list is empty")
            seen: set[str] = set()
            for p in v:
                norm = os.path.normpath(os.path.expanduser(p))
                if norm in seen:
                    raise ValueError(f"{p!r} is listed twice (one directory per device)")
                seen.add(norm)
        return v

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
        if self.max_capacity is not None and self.max_capacity < self.capacity:
            raise ValueError(
                f"max_capacity ({self.max_capacity}) must be at least capacity ({self.capacity})"
            )
        return self

    @property
    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)


def _existing_ancestor(path: str) -> str:
    p = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p


def fit_to_disk(cfg: SsdTierConfig) -> int:
    """Check ``capacity`` and ``min_free`` against the filesystems of ``path`` (before anything is
    allocated). Returns the capacity to use: ``capacity``, or, when it is larger than the disks
    can hold, what they can (one warning line says so). Raises ``ValueError`` naming the key when
    ``min_free`` is not smaller than a filesystem (every set would be refused) or when the disks
    cannot hold two regions above ``min_free``."""
    rooms: list[int] = []
    for base in cfg.paths:
        where = _existing_ancestor(base)
        try:
            st = os.statvfs(where)
        except OSError as exc:
            raise ValueError(f"tiers.ssd.path: cannot inspect {base}: {exc.strerror or exc}") from None
        total = st.f_blocks * st.f_frsize
        if cfg.min_free >= total:
            raise ValueError(
                f"tiers.ssd.min_free: {format_size(cfg.min_free)} is not smaller than the filesystem of "
                f"{base} ({format_size(total)}): every SSD set would be refused"
            )
        rooms.append((total - cfg.min_free) // cfg.region_size * cfg.region_size)
    room = min(rooms) * len(rooms)  # regions go round robin over the paths
    if room < 2 * cfg.region_size:
        raise ValueError(
            f"tiers.ssd.capacity: the filesystem(s) of {', '.join(cfg.paths)} hold "
            f"{format_size(room)} above min_free ({format_size(cfg.min_free)}), less than 2 regions of "
            f"{format_size(cfg.region_size)}"
        )
    if cfg.capacity > room:
        log.warning(
            "tiers.ssd.capacity: %s is more than the filesystem(s) of %s can hold above min_free; "
            "using %s (the SSD tier never holds more than the disk)",
            format_size(cfg.capacity), ", ".join(cfg.paths), format_size(room),
        )  # fmt: skip
        return room
    return cfg.capacity
