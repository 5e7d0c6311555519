"""What the disk benchmarks share: where they measure by default, the page-cache drop that only
happens when asked for (it empties the page cache of the whole host, not just ours), and the wait
until the disk is idle after a benchmark deleted files."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from dataclasses import dataclass

from hicache_mooncake.commands import UsageError

_MEMORY_FS = ("tmpfs", "ramfs")
DROP_FLAG = "--drop-caches"
NOT_DROPPED = (
    f"page cache NOT dropped before reads (buffered reads may come from memory; {DROP_FLAG}, as root, "
    "drops the whole host's page cache)"
)


def add_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--dir``: where a disk benchmark measures (see :func:`default_work_dir`)."""
    parser.add_argument(
        "--dir",
        default=None,
        help="directory on the filesystem to measure (a temp dir is made in it and removed; default: "
        "the system temp dir, or /var/tmp when that is tmpfs)",
    )


def add_drop_caches_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        DROP_FLAG,
        dest="drop_caches",
        action="store_true",
        help="drop the WHOLE HOST's page cache before every read (root; default: not dropped, "
        "so buffered reads may be served from memory)",
    )


def fs_type(path: str) -> str:
    """Filesystem type of ``path`` (longest mount point prefix in /proc/mounts)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3:
                continue
            mnt = fields[1].replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fields[2]
    return kind


def default_work_dir() -> str:
    """The system temp directory, or ``/var/tmp`` when that one is in memory (tmpfs): a disk
    benchmark must measure a disk. UsageError when neither is a writable disk."""
    for cand in (tempfile.gettempdir(), "/var/tmp"):
        if os.path.isdir(cand) and os.access(cand, os.W_OK) and fs_type(cand) not in _MEMORY_FS:
            return cand
    raise UsageError("no disk-backed temporary directory (the temp dir is tmpfs): pass --dir DIR")


def drop_caches(enabled: bool) -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches`` when ``enabled``; False when not enabled or not
    permitted."""
    if not enabled:
        return False
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


DISKSTATS = "/proc/diskstats"


@dataclass(frozen=True)
class DiskActivity:
    """One block device's cumulative counters from ``/proc/diskstats`` (sectors of 512 bytes)."""

    sectors_written: int
    in_flight: int
    sectors_discarded: int


def block_device_of(path: str) -> str | None:
    """The ``/proc/diskstats`` name of the block device holding ``path`` (``vda``, ``nvme0n1p2``);
    None where it has none (tmpfs, overlay, network filesystems)."""
    try:
        dev = os.stat(path).st_dev
        name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"))
    except OSError:
        return None
    return name if name and disk_activity(name) is not None else None


def disk_activity(device: str, diskstats: str = DISKSTATS) -> DiskActivity | None:
    """``device``'s counters now; None if it is not listed. Kernels before 4.18 have no discard
    fields: they read as 0."""
    with contextlib.suppress(OSError), open(diskstats, encoding="ascii") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 14 and fields[2] == device:
                discarded = int(fields[16]) if len(fields) >= 17 else 0
                return DiskActivity(int(fields[9]), int(fields[11]), discarded)
    return None


QUIET_S = 1.0  # the benchmark's ``--disk-quiet-s``: set once, before any step is timed


def wait_disk_idle(path: str, quiet_s: float | None = None, max_s: float = 30.0) -> dict[str, object]:
    """``sync``, then wait until the disk holding ``path`` has written and discarded nothing and
    has no I/O in flight for ``quiet_s`` (default :data:`QUIET_S`; at most ``max_s``).

    A filesystem mounted with ``-o discard`` trims a deleted file's blocks at its next journal
    commit, in the background: deleting the previous run's 1 GiB and measuring at once put those
    trims (seconds of them, on a virtual disk) inside the next measurement, and halved its write
    speed, ours or fio's alike. Returns the device (None: not found, then only the sync and a
    ``quiet_s`` sleep), the seconds waited and whether it went quiet."""
    quiet_s = QUIET_S if quiet_s is None else quiet_s
    os.sync()
    device = block_device_of(path)
    start = time.monotonic()
    if device is None:
        time.sleep(quiet_s)
        return {"device": None, "waited_s": time.monotonic() - start, "quiet": False}
    step = min(0.1, quiet_s)
    last = disk_activity(device)
    quiet_since = start
    while time.monotonic() - start < max_s:
        time.sleep(step)
        now = disk_activity(device)
        if now is None:
            break
        busy = (
            last is None
            or now.in_flight
            or now.sectors_written != last.sectors_written
            or now.sectors_discarded != last.sectors_discarded
        )
        last = now
        if busy:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return {"device": device, "waited_s": time.monotonic() - start, "quiet": True}
    return {"device": device, "waited_s": time.monotonic() - start, "quiet": False}
