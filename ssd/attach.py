"""Opening and closing an engine's directories (:func:`attach`, :func:`release`).

``attach``: take every directory's lock (``flock``, so a second engine on the same directory is
refused), choose the I/O mode (O_DIRECT probe), load the epoch, delete region files that do not
belong to this layout (wrong id for the directory or beyond the capacity), then rebuild the index
by scanning the region files (:func:`.recover.recover`): sealed regions join the FIFO oldest
generation first. Raises only here (bad directory, in use, ``direct_io="on"`` refused, ``strict``
recovery finding corruption, a directory or file another user owns or may write:
:mod:`.private_dir`).

``release``: fdatasync regions written since open, close every fd, drop the locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import resource
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from . import io as ssd_io
from .core import EngineCore
from .epoch import EpochKeeper
from .errors import SsdDirectIoError, SsdInUseError
from .format import (
    BLOCK,
    LOCK_NAME,
    SEQ_BOOT_SHIFT,
    parse_region_file_name,
    parse_region_header,
    region_files_in,
)
from .health import prepare_probe
from .io import run_with_deadline
from .private_dir import FILE_MODE, O_NOFOLLOW, make_private_dir, secure_entries
from .recover import EntryRecord, recover, region_loss
from .region import Region, RegionState, open_region_fd
from .rescan import index_entries
from .summary import RegionSummary, read_summary

log = logging.getLogger("hicache_mooncake.ssd")


def _raise_nofile(need: int) -> None:
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


_HELD_HERE: dict[int, str] = {}
"""Lock fd -> real path of each directory an engine of this process holds (until ``release``)."""
_HELD_HERE_LOCK = threading.Lock()


def lock_dirs(dirs: tuple[str, ...], lock_fds: list[int]) -> None:
    """Create (0700) each directory, check that only we can touch it and its entries
    (:mod:`.private_dir`: :class:`SsdUnsafePathError` otherwise), and ``flock`` its lock file,
    appending the fds to ``lock_fds``."""
    for d in dirs:
        make_private_dir(d, "SSD directory")
        secure_entries(d, "SSD directory")
        fd = os.open(
            os.path.join(d, LOCK_NAME), os.O_RDWR | os.O_CREAT | O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            with _HELD_HERE_LOCK:
                here = os.path.realpath(d) in _HELD_HERE.values()
            holder = "an engine of this process that is still closing" if here else "another SSD engine"
            raise SsdInUseError(f"{d}: in use by {holder} (lock file {LOCK_NAME})", here) from e
        with _HELD_HERE_LOCK:
            _HELD_HERE[fd] = os.path.realpath(d)
        lock_fds.append(fd)


def choose_io_mode(core: EngineCore) -> None:
    o = core.options
    direct = False
    if o.direct_io == "off":
        core.io_mode_reason = "direct_io=off"
    else:
        probes = [(d, *ssd_io.probe_direct_io(d)) for d in o.dirs]
        direct = all(ok for _, ok, _ in probes)
        core.io_mode_reason = "; ".join(f"{d}: {why}" for d, _, why in probes)
        if o.direct_io == "on" and not direct:
            raise SsdDirectIoError(f"direct_io=on but O_DIRECT is refused: {core.io_mode_reason}")
    core.direct = direct
    core.io_mode = "direct" if direct else "buffered"
    log.info("ssd engine %s: io mode %s (%s)", ",".join(o.dirs), core.io_mode, core.io_mode_reason)


def attach(
    core: EngineCore, epochs: EpochKeeper, lock_fds: list[int], progress: bool
) -> tuple[float, list[tuple[int, str]]]:
    """Open the directories into ``core`` (regions, FIFO, index) from the region summaries;
    returns the seconds it took and the regions left to scan in the background (no usable
    summary), which the caller hands to :class:`~.rescan.BackgroundScan`."""
    o = core.options
    nd = len(o.dirs)
    lock_dirs(o.dirs, lock_fds)
    for d in o.dirs:
        prepare_probe(d)
    choose_io_mode(core)
    epochs.load()
    core.seq = core.boot << SEQ_BOOT_SHIFT
    n = o.num_regions
    _raise_nofile(n + 256)
    core.regions = [Region(r, r % nd, o.dirs[r % nd]) for r in range(n)]
    for di, d in enumerate(o.dirs):
        for name in os.listdir(d):
            rid = parse_region_file_name(name)
            if rid is not None and (rid >= n or rid % nd != di):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(d, name))
    present = set().union(*(region_files_in(d) for d in o.dirs))
    existing = [(rid, core.regions[rid].path) for rid in sorted(present) if rid < n]
    t0 = time.monotonic()
    summaries: list[tuple[Region, RegionSummary]] = []
    to_scan: list[tuple[int, str]] = []
    for rid, path in existing:
        summ = None if o.strict else read_summary(path, rid, o.region_size, core.epoch)
        if summ is not None:
            summaries.append((core.regions[rid], summ))
        else:
            to_scan.append((rid, path))
    # strict: every problem must be found before serving (no summaries, every payload); a boot
    # counter that could not be persisted: sequence numbers must start above every recovered one.
    # Both scan up front.
    sync_scan = o.strict or core.counts["superblock_write_errors"] > 0
    summaries.sort(key=lambda x: x[1].header.gen)  # a key in several regions: the newest wins
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of new objects, none garbage: collection passes would double the time
    try:
        _load_summaries(core, summaries)
    finally:
        if gc_was_on:
            gc.enable()
    listed = sum(len(summ.keys) for r, summ in summaries if r.state is RegionState.SEALED)
    if len(core.index) == listed:  # no key in two regions: the regions' sums are the total
        core.index.bytes = sum(r.live_bytes for r, _ in summaries if r.state is RegionState.SEALED)
    else:
        core.index.recount()
    core.counts["recovered_entries"] += len(core.index)
    # A boot counter that an earlier open could not persist would repeat sequence numbers: any
    # region generation at or above this boot's base means so; start a whole boot above it.
    gens = [s.header.gen for _, s in summaries] + [
        g for g in (peek_gen(p) for _, p in to_scan) if g is not None
    ]
    if gens and max(gens) >= core.seq:
        core.seq = max(gens) + (1 << SEQ_BOOT_SHIFT)
    sealed = [r for r, _ in summaries if r.state is RegionState.SEALED]
    if sync_scan:
        sealed += _scan_now(core, epochs, to_scan, progress)
        to_scan = []
    sealed.sort(key=lambda r: r.gen)
    core.fifo = [r.rid for r in sealed]
    for rid, path in to_scan:
        r = core.regions[rid]
        with contextlib.suppress(OSError):
            r.fd = open_region_fd(path, core.direct, create=False)
    seconds = time.monotonic() - t0
    log.info(
        "ssd engine: %d entries from %d region summaries in %.2fs; %d regions to scan in the background",
        len(core.index), len(summaries), seconds, len(to_scan),
    )  # fmt: skip
    return seconds, to_scan


def _load_summaries(core: EngineCore, summaries: list[tuple[Region, RegionSummary]]) -> None:
    """Index the entries of regions that have a summary, oldest generation first (lock not
    needed: nothing else runs yet)."""
    o = core.options
    for r, summ in summaries:
        try:
            r.fd = open_region_fd(r.path, core.direct, create=False)
        except OSError:
            continue
        r.allocated = summ.file_size >= o.region_size
        r.gen = summ.header.gen
        if not summ.keys:  # an empty region (the standby region at a clean close): free to reuse
            r.state = RegionState.FREE
            core.counts["recover_from_summaries"] += 1
            continue
        r.state = RegionState.SEALED
        r.epoch = core.epoch
        r.write_off = summ.end_offset
        r.summarized = True
        fps = core.index.fps(summ.keys)  # one native call per summary, and one to index them
        core.index.load_region_fps(fps, r.rid, r.gen, summ.offsets, summ.lengths, summ.seqs)
        r.fps = array("Q", fps.tobytes())
        r.names = None  # the keys stay in the summary (names.py)
        r.live_bytes = int(summ.lengths.sum())
        core.counts["recover_from_summaries"] += 1


def peek_gen(path: str) -> int | None:
    """The generation in a region file's header (None if unreadable)."""
    try:
        with open(path, "rb") as f:
            h, _ = parse_region_header(f.read(BLOCK))
    except OSError:
        return None
    return h.gen if h is not None else None


def _scan_now(
    core: EngineCore, epochs: EpochKeeper, todo: list[tuple[int, str]], progress: bool
) -> list[Region]:
    """Scan ``todo`` before serving (strict mode, or no persisted boot counter); returns the live
    regions (sealed, indexed)."""
    o = core.options
    nd = len(o.dirs)
    bar: Any = None
    if progress and todo:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="hicache-ssd recover", unit="region")
    try:
        rec = recover(
            todo, o.region_size, core.epoch, o.verify_on_recover, core.direct, o.strict, o.max_key_bytes, bar
        )
    finally:
        if bar is not None:
            bar.close()
    core.seq = max(core.seq, rec.max_seq + 1)
    sealed: list[Region] = []
    for scan in rec.scans:
        r = core.regions[scan.rid]
        why = region_loss(scan, o.region_size, scan.rid in epochs.maps[scan.rid % nd])
        if why:
            core.counts["recover_lost_regions"] += 1
            log.warning("ssd: region file %s: %s; its entries are lost", scan.path, why)
        try:
            r.fd = open_region_fd(r.path, core.direct, create=False)
        except OSError:
            continue
        r.allocated = scan.file_size >= o.region_size
        if scan.status == "live" and scan.header is not None:
            r.state = RegionState.SEALED
            r.gen = scan.header.gen
            r.epoch = core.epoch
            r.write_off = scan.end_offset
            sealed.append(r)
    by_region: dict[int, list[EntryRecord]] = {}
    for _key, (rid, e) in rec.winners.items():
        by_region.setdefault(rid, []).append(e)
    for rid, es in by_region.items():
        r = core.regions[rid]
        if r.state is RegionState.SEALED:
            index_entries(core, r, [e.key for e in es], [e.offset for e in es], [e.payload_len for e in es],
                          [e.seq for e in es])  # fmt: skip
    counts = rec.counts()
    counts["recovered_entries"] = len(rec.winners)
    core.counts.update(counts)
    return sealed


def release(
    core: EngineCore,
    lock_fds: list[int],
    deadline: float | None = None,
    on_released: Callable[[], None] | None = None,
    before_close: Callable[[], None] | None = None,
) -> None:
    """Close everything (never raises): wait for I/O in flight to end (regions unpinned) and for
    region opens under way (so ``before_close`` sees every region whose header is written), then
    fdatasync regions written since open, close their fds, drop the locks, stop the I/O pool.

    Runs on a daemon thread waited for until ``deadline``: on a stalled disk the caller returns
    in time and the thread finishes the job when the disk comes back (an fd is never closed
    while a read or write on it is in flight, so its number cannot be reused under that I/O)."""
    core.closed = True

    def finish() -> None:
        while True:
            with core.lock:
                busy = any(r.pinned or r.state is RegionState.OPENING for r in core.regions)
            if not busy:
                break
            time.sleep(0.02)
        if before_close is not None:
            try:
                before_close()
            except Exception:  # noqa: BLE001 - closing goes on
                log.exception("ssd close: writing summaries")
        for r in core.regions:
            if r.fd is not None:
                with contextlib.suppress(OSError):
                    if r.dirty:
                        os.fdatasync(r.fd)
                with contextlib.suppress(OSError):
                    os.close(r.fd)
                r.fd = None
        if on_released is not None:
            on_released()
        for fd in lock_fds:
            with _HELD_HERE_LOCK:
                _HELD_HERE.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)
        lock_fds.clear()
        if core.pool is not None:
            with contextlib.suppress(Exception):
                core.pool.shutdown(timeout_s=1.0)
            core.pool = None
        core.buffers.clear()

    done, _ = run_with_deadline(finish, deadline, "hicache-ssd-close")
    if not done:
        log.warning(
            "ssd engine %s: closed with I/O still in flight (stalled disk?); its files and locks "
            "are released when that I/O ends",
            ",".join(core.options.dirs),
        )
