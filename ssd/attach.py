"""Opening and closing an engine's directories (:func:`attach`, :func:`release`).

``attach``: take every directory's lock (``flock``, so a second engine on the same directory is
refused), choose the I/O mode (O_DIRECT probe), load the epoch, delete region files that do not
belong to this layout (wrong id for the directory or beyond the capacity), then rebuild the index
by scanning the region files (:func:`.recover.recover`): sealed regions join the FIFO oldest
generation first. Raises only here (bad directory, in use, ``direct_io="on"`` refused, ``strict``
recovery finding corruption).

``release``: fdatasync regions written since open, close every fd, drop the locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

from . import io as ssd_io
from .core import EngineCore
from .epoch import EpochKeeper
from .errors import SsdDirectIoError, SsdInUseError
from .format import LOCK_NAME, SEQ_BOOT_SHIFT, parse_region_file_name, region_files_in
from .health import prepare_probe
from .index import Location
from .io import run_with_deadline
from .recover import recover, region_loss
from .region import Region, RegionState, open_region_fd

log = logging.getLogger("hicache_mooncake.ssd")


def _raise_nofile(need: int) -> None:
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def lock_dirs(dirs: tuple[str, ...], lock_fds: list[int]) -> None:
    """Create and ``flock`` each directory's lock file, appending the fds to ``lock_fds``."""
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        fd = os.open(os.path.join(d, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise SsdInUseError(f"{d}: in use by another SSD engine (lock file {LOCK_NAME})") from e
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


def attach(core: EngineCore, epochs: EpochKeeper, lock_fds: list[int], progress: bool) -> float:
    """Open the directories into ``core`` (regions, FIFO, index); returns the recovery seconds."""
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
    bar: Any = None
    if progress and existing:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            bar = tqdm(total=len(existing), desc="hicache-ssd recover", unit="region")
    t0 = time.monotonic()
    try:
        rec = recover(
            existing, o.region_size, core.epoch, o.verify_on_recover, core.direct, o.strict,
            o.max_key_bytes, bar,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    core.seq = max(core.seq, rec.max_seq + 1)
    sealed: list[Region] = []
    for scan in rec.scans:
        r = core.regions[scan.rid]
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
    for key, (rid, rec_entry) in rec.winners.items():
        r = core.regions[rid]
        core.index.set(key, Location(rid, r.gen, rec_entry.offset, rec_entry.payload_len, rec_entry.seq))
        r.keys.append(key)
        r.live_bytes += rec_entry.payload_len
    for scan in rec.scans:
        why = region_loss(scan, o.region_size, scan.rid in epochs.maps[scan.rid % nd])
        if why:
            core.counts["recover_lost_regions"] += 1
            log.warning("ssd: region file %s: %s; its entries are lost", scan.path, why)
    sealed.sort(key=lambda r: r.gen)
    core.fifo = [r.rid for r in sealed]
    core.counts.update(rec.counts())
    seconds = time.monotonic() - t0
    log.info(
        "ssd engine recovered %d entries from %d regions in %.2fs (corrupt %d, torn %d)",
        len(core.index), len(sealed), seconds,
        core.counts["recover_corrupt"], core.counts["recover_torn"],
    )  # fmt: skip
    return seconds


def release(
    core: EngineCore,
    lock_fds: list[int],
    deadline: float | None = None,
    on_released: Callable[[], None] | None = None,
) -> None:
    """Close everything (never raises): wait for I/O in flight to end (regions unpinned), then
    fdatasync regions written since open, close their fds, drop the locks, stop the I/O pool.

    Runs on a daemon thread waited for until ``deadline``: on a stalled disk the caller returns
    in time and the thread finishes the job when the disk comes back (an fd is never closed
    while a read or write on it is in flight, so its number cannot be reused under that I/O)."""
    core.closed = True

    def finish() -> None:
        while True:
            with core.lock:
                busy = any(r.pinned for r in core.regions)
            if not busy:
                break
            time.sleep(0.02)
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
