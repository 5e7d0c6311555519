"""Offline verification (and repair) of SSD engine directories.

``fsck(paths)`` scans every region file of every directory (all payloads hashed) and returns an
:class:`FsckReport`: live entries and bytes, corrupt and torn entries, stale entries (left by an
earlier life of a region, harmless) and repaired ones, in total and by region.

``repair=True`` makes bad entries unreachable without moving anything: an entry whose header is
intact is re-marked ``DEAD`` (its header is rewritten with the dead flag and a fresh header hash,
so scans still step over its payload); a header block that cannot be parsed is zeroed; a region
whose header is corrupt has its header zeroed (the region becomes empty). Repair takes the
directory lock, so it refuses to run while an engine has the directory open; a read-only check
of a directory in use is allowed and flagged (``in_use``) because it may see writes in flight.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import SsdInUseError
from .format import (
    BLOCK,
    FLAG_DEAD,
    LOCK_NAME,
    EntryHeader,
    Superblock,
    parse_entry_header,
    parse_region_file_name,
)
from .io import aligned_buffer, preadv_full, pwritev_full
from .recover import RegionScan, scan_region


@dataclass
class RegionReport:
    region: int
    path: str
    status: str
    entries: int
    bytes: int
    corrupt: int
    torn: int
    stale: int
    dead: int
    problems: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FsckReport:
    paths: list[str]
    entries: int = 0
    bytes: int = 0
    corrupt: int = 0
    torn: int = 0
    stale: int = 0
    dead: int = 0
    repaired: int = 0
    regions: list[RegionReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.corrupt == 0 and self.torn == 0 and not self.errors

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clean"] = self.clean
        return d

    def summary(self) -> str:
        lines = [
            f"fsck {' '.join(self.paths)}: {len(self.regions)} region files, {self.entries} entries, "
            f"{self.bytes} bytes, corrupt {self.corrupt}, torn {self.torn}, stale {self.stale}, "
            f"dead {self.dead}, repaired {self.repaired}"
        ]
        for r in self.regions:
            if r.corrupt or r.torn or r.status not in ("live", "empty", "stale_epoch"):
                lines.append(
                    f"  region {r.region} ({r.status}): entries {r.entries}, bytes {r.bytes}, "
                    f"corrupt {r.corrupt}, torn {r.torn}"
                )
                for p in r.problems[:10]:
                    lines.append(f"    {r.path} offset {p['offset']}: {p['kind']}: {p['reason']}")
        for d in self.in_use:
            lines.append(f"  warning: {d} is in use by a running engine (writes in flight may look torn)")
        for e in self.errors:
            lines.append(f"  error: {e}")
        lines.append("clean" if self.clean else ("repaired" if self.repaired else "NOT CLEAN"))
        return "\n".join(lines)


def _region_files(directory: str) -> list[tuple[int, str]]:
    out = []
    for name in os.listdir(directory):
        rid = parse_region_file_name(name)
        if rid is not None:
            out.append((rid, os.path.join(directory, name)))
    return sorted(out)


def _repair(scan: RegionScan) -> int:
    fixed = 0
    fd = os.open(scan.path, os.O_RDWR)
    try:
        blk = memoryview(aligned_buffer(BLOCK))
        if scan.status == "bad_header":
            blk[:] = bytes(BLOCK)
            pwritev_full(fd, [blk], 0)
            return 1
        for p in scan.problems:
            n = preadv_full(fd, [blk], p.offset)
            hdr, _ = parse_entry_header(blk) if n == BLOCK else (None, "")
            if hdr is not None:
                EntryHeader(
                    hdr.key, hdr.payload_len, hdr.seq, hdr.gen, hdr.payload_hash, hdr.flags | FLAG_DEAD
                ).pack_into(blk)
            else:
                blk[:] = bytes(BLOCK)
            pwritev_full(fd, [blk], p.offset)
            fixed += 1
        os.fsync(fd)
    finally:
        os.close(fd)
    return fixed


def fsck(paths: list[str] | tuple[str, ...], repair: bool = False, progress: bool = False) -> FsckReport:
    """Verify (and with ``repair`` fix) the engine directories ``paths``. Never raises for data
    problems; unreadable directories are listed in ``errors``; repair of a directory in use raises
    :class:`SsdInUseError`."""
    report = FsckReport(paths=list(paths))
    plan: list[tuple[str, int, int, int, str]] = []  # (dir, epoch, region_size, rid, path)
    lock_fds: list[int] = []
    try:
        for d in paths:
            sb = Superblock.read(d)
            if sb is None:
                report.errors.append(f"{d}: no superblock (not an SSD engine directory)")
                continue
            fd = os.open(os.path.join(d, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                lock_fds.append(fd)
            except OSError:
                os.close(fd)
                if repair:
                    raise SsdInUseError(
                        f"{d}: in use by a running engine; stop it before fsck --repair"
                    ) from None
                report.in_use.append(d)
            for rid, path in _region_files(d):
                plan.append((d, sb.epoch, sb.region_size, rid, path))
        bar: Any = None
        if progress and plan:
            with contextlib.suppress(ImportError):
                from tqdm import tqdm

                bar = tqdm(total=len(plan), desc="fsck", unit="region")
        try:
            for _d, epoch, rsize, rid, path in plan:
                scan = scan_region(path, rid, rsize, epoch, verify_payload=True)
                if bar is not None:
                    bar.update(1)
                if repair and (scan.problems or scan.status == "bad_header"):
                    report.repaired += _repair(scan)
                rr = RegionReport(
                    rid, path, scan.status, len(scan.entries), scan.live_bytes, scan.corrupt, scan.torn,
                    scan.stale, scan.dead,
                    [{"offset": p.offset, "kind": p.kind, "reason": p.reason} for p in scan.problems],
                )  # fmt: skip
                if scan.status == "bad_header":
                    rr.problems.insert(0, {"offset": 0, "kind": "corrupt", "reason": scan.header_reason})
                report.regions.append(rr)
                report.entries += rr.entries
                report.bytes += rr.bytes
                report.corrupt += rr.corrupt
                report.torn += rr.torn
                report.stale += rr.stale
                report.dead += rr.dead
        finally:
            if bar is not None:
                bar.close()
    finally:
        for fd in lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    return report
