"""What the disk benchmarks share: where they measure by default, and the page-cache drop that
only happens when asked for (it empties the page cache of the whole host, not just ours)."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile

from hicache_mooncake.commands import UsageError

_MEMORY_FS = ("tmpfs", "ramfs")
DROP_FLAG = "--drop-caches"
NOT_DROPPED = (
    f"page cache NOT dropped before reads (buffered reads may come from memory; {DROP_FLAG}, as root, "
    "drops the whole host's page cache)"
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
