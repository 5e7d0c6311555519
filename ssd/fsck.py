"""Offline verification (and repair) of SSD engine directories.

``fsck(paths)`` reads every directory the way the engine's recovery does (the same code: state
file / superblock for the epoch, :func:`.recover.recover` over the region files with every
payload hashed, :func:`.recover.region_loss` for whole region files) and returns an
:class:`FsckReport`: live entries and bytes (what the engine would serve), corrupt, torn and
misdirected entries, region files lost (missing though the region map says the engine made them,
truncated, holding another region), stale entries (left by an earlier life of a region,
harmless) and repaired ones. A path that is a ``tiers.ssd.path`` (rank directories below it) is
expanded to those directories. A missing or unreadable superblock is a warning, not an error,
when the engine opens the directory anyway.

A failed clear (``clear_record``: a clear whose new epoch could not be written, after which the
engine refuses every call) is reported as not clean, naming the repair; ``repair=True`` finishes
it first (``clear_record.repair``). ``repair=True`` also makes bad entries unreachable without moving anything: an entry whose header is
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

from .clear_record import REPAIR_COMMAND, find_failures
from .clear_record import repair as finish_clear
from .errors import SsdInUseError
from .format import (
    BLOCK,
    ENTRY_FIXED_SIZE,
    FLAG_DEAD,
    LOCK_NAME,
    SUPERBLOCK_NAME,
    EntryHeader,
    Superblock,
    parse_entry_header,
    parse_region_file_name,
    parse_region_header,
    region_file_name,
)
from .io import aligned_buffer, preadv_full, pwritev_full
from .private_dir import FILE_MODE, O_NOFOLLOW, inspect_entries
from .recover import RegionScan, recover, region_loss
from .state import STATE_NAME, load_dir


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
    dirs: list[str] = field(default_factory=list)  # engine directories checked (rank dirs expanded)
    entries: int = 0
    bytes: int = 0
    corrupt: int = 0
    torn: int = 0
    stale: int = 0
    dead: int = 0
    repaired: int = 0
    regions: list[RegionReport] = field(default_factory=list)
    lost_regions: list[dict[str, Any]] = field(default_factory=list)  # whole region files lost
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    failed_clears: list[str] = field(default_factory=list)  # records (``clear_record``) left standing
    clears_finished: list[str] = field(default_factory=list)  # directories whose clear --repair finished

    @property
    def clean(self) -> bool:
        return (
            self.corrupt == 0
            and self.torn == 0
            and not self.lost_regions
            and not self.errors
            and not self.failed_clears
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clean"] = self.clean
        return d

    def summary(self) -> str:
        lines = [
            f"fsck {' '.join(self.dirs or self.paths)}: {len(self.regions)} region files, {self.entries} entries, "
            f"{self.bytes} bytes, corrupt {self.corrupt}, torn {self.torn}, lost regions "
            f"{len(self.lost_regions)}, stale {self.stale}, dead {self.dead}, repaired {self.repaired}"
        ]
        for r in self.regions:
            if r.corrupt or r.torn or r.status not in ("live", "empty", "stale_epoch"):
                lines.append(
                    f"  region {r.region} ({r.status}): entries {r.entries}, bytes {r.bytes}, "
                    f"corrupt {r.corrupt}, torn {r.torn}"
                )
                for p in r.problems[:10]:
                    lines.append(f"    {r.path} offset {p['offset']}: {p['kind']}: {p['reason']}")
        for lost in self.lost_regions:
            lines.append(f"  LOST region {lost['region']} ({lost['path']}): {lost['reason']}")
        if self.failed_clears:
            lines.append(
                f"  FAILED CLEAR: an earlier clear could not write its new epoch (recorded in "
                f"{', '.join(self.failed_clears)}); the engine refuses every call until "
                f"`hicache-mooncake fsck --repair {' '.join(self.paths)}` (or `{REPAIR_COMMAND} DIR...`) "
                f"finishes the clear, with the engine stopped"
            )
        for d in self.clears_finished:
            lines.append(f"  clear finished: {d} (a new epoch written; the failed-clear record removed)")
        for d in self.in_use:
            lines.append(f"  warning: {d} is in use by a running engine (writes in flight may look torn)")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
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


def _is_engine_dir(d: str) -> bool:
    try:
        names = os.listdir(d)
    except OSError:
        return False
    return any(
        n in (SUPERBLOCK_NAME, STATE_NAME, LOCK_NAME) or parse_region_file_name(n) is not None for n in names
    )


def expand_paths(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Engine directories to check: each path itself, or, when it is the parent ``tiers.ssd.path``
    (rank subdirectories ``rank*`` inside), every engine directory directly under it."""
    out: list[str] = []
    for p in paths:
        if _is_engine_dir(p) or not os.path.isdir(p):
            out.append(p)
            continue
        subs = sorted(os.path.join(p, n) for n in os.listdir(p) if _is_engine_dir(os.path.join(p, n)))
        out.extend(subs or [p])
    return out


def _guess_region_size(files: list[tuple[int, str]]) -> int:
    for _rid, path in files:
        with contextlib.suppress(OSError):
            with open(path, "rb") as f:
                h, _ = parse_region_header(f.read(BLOCK))
            if h is not None:
                return h.region_size
    return 0


def _repair(scan: RegionScan) -> int:
    fixed = 0
    fd = os.open(scan.path, os.O_RDWR | O_NOFOLLOW)
    try:
        blk = memoryview(aligned_buffer(BLOCK))
        if scan.status == "bad_header":
            blk[:] = bytes(BLOCK)
            pwritev_full(fd, [blk], 0)
            return 1
        for p in scan.problems:
            n = preadv_full(fd, [blk], p.offset)
            hdr, _ = parse_entry_header(blk) if n == BLOCK else (None, "")
            if hdr is not None and not p.misdirected:
                EntryHeader(
                    hdr.key, hdr.payload_len, hdr.seq, hdr.gen, hdr.payload_hash, hdr.flags | FLAG_DEAD
                ).pack_into(blk)
            else:  # unparsable, or a misdirected header whose length means nothing here
                blk[:] = bytes(BLOCK)
            pwritev_full(fd, [blk], p.offset)
            fixed += 1
        os.fsync(fd)
    finally:
        os.close(fd)
    return fixed


def _check_dir(d: str, report: FsckReport, repair: bool, bar: Any) -> None:
    """Read ``d`` exactly as the engine's recovery does (same epoch, same scan, same verdicts)."""
    info = load_dir(d)
    files = _region_files(d)
    links: dict[str, int] = {}  # region files that are symbolic links: path -> region id
    for path, kind, reason in inspect_entries(d):  # what the engine refuses or tightens at attach
        rid = parse_region_file_name(os.path.basename(path))
        if kind == "link" and rid is not None:
            links[path] = rid  # never followed: the engine refuses the directory
            report.lost_regions.append(
                {"region": rid, "path": path, "reason": f"{reason}: the engine refuses to attach; remove it"}
            )
        elif kind == "loose":
            report.warnings.append(f"{reason}: the engine makes it private (0600/0700) at attach")
        else:
            report.warnings.append(f"{reason}: the engine refuses to attach until it is removed")
    files = [(rid, path) for rid, path in files if path not in links]
    rsize = info.region_size or _guess_region_size(files)
    if info.source == "none":
        if not files:
            report.errors.append(
                f"{d}: not an SSD engine directory (no state file, superblock or region files)"
            )
            return
        report.warnings.append(
            f"{d}: no readable state file or superblock: the engine opens it at epoch 0 "
            "(regions of a later epoch are ignored)"
        )
    if Superblock.read(d) is None and info.state is not None:
        report.warnings.append(
            f"{d}: the JSON superblock is missing or unreadable (the state file is intact)"
        )
    if info.mapped is not None and info.state is not None and info.state.epoch == info.epoch:
        # (a region map of an epoch a clear ended since, e.g. one a repair finished, lists files
        # of that epoch: the clear removed them, nothing is lost)
        present = {rid for rid, _ in files} | set(links.values())
        for rid in sorted(info.mapped - present):
            report.lost_regions.append(
                {
                    "region": rid,
                    "path": os.path.join(d, region_file_name(rid)),
                    "reason": "region file missing (deleted?)",
                }
            )
    rec = recover(files, rsize, info.epoch, True, False, False, BLOCK - ENTRY_FIXED_SIZE, bar)
    mapped = info.mapped if info.mapped is not None else {rid for rid, _ in files}
    for scan in rec.scans:
        if repair and (scan.problems or scan.status == "bad_header"):
            report.repaired += _repair(scan)
        rr = RegionReport(
            scan.rid, scan.path, scan.status, len(scan.entries), scan.live_bytes, scan.corrupt, scan.torn,
            scan.stale, scan.dead,
            [{"offset": p.offset, "kind": p.kind, "reason": p.reason} for p in scan.problems],
        )  # fmt: skip
        if scan.status == "bad_header":
            rr.problems.insert(0, {"offset": 0, "kind": "corrupt", "reason": scan.header_reason})
        why = region_loss(scan, rsize, scan.rid in mapped)
        if why:
            report.lost_regions.append({"region": scan.rid, "path": scan.path, "reason": why})
        report.regions.append(rr)
        report.corrupt += rr.corrupt
        report.torn += rr.torn
        report.stale += rr.stale
        report.dead += rr.dead
    report.entries += len(rec.winners)
    report.bytes += sum(e.payload_len for _rid, e in rec.winners.values())


def _failed_clears(dirs: list[str], report: FsckReport, repair: bool) -> None:
    """Records of clears that could not write their new epoch (``clear_record``): the engine
    refuses every call while one stands. Reported (not clean); with ``repair`` the clear is
    finished first (``clear_record.repair``: a new epoch above every epoch found, in every
    directory with a record, then the records removed), so the scan that follows sees what a
    restarted engine will serve (nothing written before the clear)."""
    records = find_failures(dirs)
    if not records:
        return
    if not repair:
        report.failed_clears.extend(records)
        return
    recorded = [d for d in dirs if find_failures([d])]
    try:
        epoch = finish_clear(recorded)
    except OSError as e:
        report.failed_clears.extend(find_failures(dirs))
        report.errors.append(f"{', '.join(recorded)}: cannot finish the failed clear: {e}")
        return
    report.clears_finished.extend(f"{d} (epoch {epoch})" for d in recorded)


def fsck(paths: list[str] | tuple[str, ...], repair: bool = False, progress: bool = False) -> FsckReport:
    """Verify (and with ``repair`` fix) SSD engine directories: each of ``paths``, or the rank
    directories under a ``tiers.ssd.path``. Reads each directory the way recovery does (shared
    code: epoch, scan, region verdicts) and reports every loss it can see. Never raises for data
    problems; unreadable directories are listed in ``errors``; repair of a directory in use raises
    :class:`SsdInUseError`."""
    dirs = expand_paths(paths)
    report = FsckReport(paths=list(paths), dirs=dirs)
    lock_fds: list[int] = []
    bar: Any = None
    try:
        for d in dirs:
            if not os.path.isdir(d):
                report.errors.append(f"{d}: not a directory")
                continue
            fd = (
                os.open(os.path.join(d, LOCK_NAME), os.O_RDWR | os.O_CREAT | O_NOFOLLOW, FILE_MODE)
                if _is_engine_dir(d)
                else -1
            )
            if fd >= 0:
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
        if progress:
            with contextlib.suppress(ImportError):
                from tqdm import tqdm

                bar = tqdm(
                    total=sum(len(_region_files(d)) for d in dirs if os.path.isdir(d)),
                    desc="fsck",
                    unit="region",
                )
        _failed_clears([d for d in dirs if os.path.isdir(d)], report, repair)
        for d in dirs:
            if os.path.isdir(d):
                _check_dir(d, report, repair, bar)
    finally:
        if bar is not None:
            bar.close()
        for fd in lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    return report
