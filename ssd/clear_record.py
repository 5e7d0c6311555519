"""Failed-clear records: a clear whose new epoch could not be made durable is never undone by a
restart.

When ``clear`` cannot write its new epoch (a disk error, a filesystem gone read-only), the engine
refuses every call (``epoch.EpochKeeper``) and records the failure, durably (file and directory
fsynced), in the first place that takes it:

1. ``hicache-ssd.clear-failed`` in the SSD directory itself;
2. the records directory outside it (``HICACHE_MOONCAKE_CLEAR_RECORDS``; by default
   ``/var/lib/hicache-mooncake/clear-records`` for root, else
   ``~/.local/state/hicache-mooncake/clear-records`` or its ``$XDG_STATE_HOME`` equivalent), one
   file per SSD directory, named by a digest of its real path; this is what holds when the SSD
   filesystem itself went read-only (put it on another filesystem than the SSD directories).

An engine that opens a directory with a record refuses every call from the start and logs the
operator action. Nothing but that action lifts the refusal: ``python -m
hicache_mooncake.ssd.clear_record --repair DIR...`` (with the engine stopped) finishes the clear:
it writes an epoch above every epoch found into each directory (so no region written before the
clear is recovered), then removes the records. Deleting the SSD directory (and its record
outside, named in the log) starts an empty store instead.

If no place takes the record, the log says so: the cleared pages may then come back after a
restart, and the operator must not restart before the filesystem is writable again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

log = logging.getLogger("hicache_mooncake.ssd")

RECORD_NAME = "hicache-ssd.clear-failed"
RECORDS_ENV = "HICACHE_MOONCAKE_CLEAR_RECORDS"
REPAIR_COMMAND = "python -m hicache_mooncake.ssd.clear_record --repair"
_SYSTEM_DIR = "/var/lib/hicache-mooncake/clear-records"


def records_dir() -> str:
    """The records directory outside the SSD directories (see the module docstring); made only
    when a record is written."""
    given = os.environ.get(RECORDS_ENV)
    if given:
        return given
    if os.geteuid() == 0:
        return _SYSTEM_DIR
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "hicache-mooncake", "clear-records")


def outside_path(directory: str) -> str:
    """Where the record of ``directory`` lives outside it."""
    digest = hashlib.sha256(os.path.realpath(directory).encode()).hexdigest()[:24]
    return os.path.join(records_dir(), f"{digest}.clear-failed")


def _write_durably(path: str, body: bytes) -> None:
    """Write ``path`` (temp file, fsync, rename, fsync of the directory); raises OSError."""
    folder = os.path.dirname(path)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def record_failure(dirs: Sequence[str], epoch: int, reason: str) -> list[str]:
    """Record that a clear to ``epoch`` failed for ``dirs``; returns the paths written (one per
    directory at most; empty: recorded nowhere). Never raises."""
    written: list[str] = []
    for d in dirs:
        body = json.dumps(
            {"directory": os.path.realpath(d), "epoch": epoch, "reason": reason, "time": time.time()}
        ).encode()
        for path in (os.path.join(d, RECORD_NAME), outside_path(d)):
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                _write_durably(path, body)
            except OSError as e:
                log.warning("ssd %s: cannot record the failed clear at %s: %s", d, path, e)
                continue
            written.append(path)
            break
    return written


def find_failures(dirs: Sequence[str]) -> list[str]:
    """The records of failed clears of ``dirs`` (paths, inside and outside)."""
    found = []
    for d in dirs:
        for path in (os.path.join(d, RECORD_NAME), outside_path(d)):
            if os.path.exists(path):
                found.append(path)
    return found


def operator_action(dirs: Sequence[str], records: Sequence[str]) -> str:
    """The one action that lifts the refusal, as the log names it."""
    return (
        f"until an operator, with the engine stopped and the filesystem writable, runs "
        f"`{REPAIR_COMMAND} {' '.join(dirs)}` (finishes the clear) or deletes the SSD directory "
        f"and the records {', '.join(records)} (an empty store)"
    )


def refusal_message(dirs: Sequence[str], records: Sequence[str]) -> str:
    """The line an engine that opens with a record logs: what is refused, why, what lifts it."""
    return (
        f"ssd {','.join(dirs)}: an earlier clear could not write its new epoch (recorded in "
        f"{', '.join(records)}); the SSD tier refuses every call {operator_action(dirs, records)}"
    )


def repair(dirs: Sequence[str]) -> int:
    """Finish a failed clear of ``dirs`` (engine stopped): write an epoch above every epoch
    found into each directory, then remove the records. Returns the new epoch; raises OSError
    when a directory cannot be written (then the records stay)."""
    from .format import Superblock
    from .state import load_dir

    found = [load_dir(d) for d in dirs]
    epoch = max([f.epoch for f in found] + [0]) + 1
    for d, info in zip(dirs, found, strict=True):
        # the JSON superblock is read beside the state file and the highest epoch wins
        Superblock(epoch, info.boot, info.region_size).write(d)
    for path in find_failures(dirs):
        os.unlink(path)
        with contextlib.suppress(OSError):
            dfd = os.open(os.path.dirname(path), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    return epoch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hicache_mooncake.ssd.clear_record",
        description="Finish an SSD clear that could not write its new epoch (run with the engine stopped).",
    )
    parser.add_argument("--repair", nargs="+", metavar="DIR", required=True, help="the SSD directories")
    args = parser.parse_args(argv)
    dirs = list(args.repair)
    if not find_failures(dirs):
        print(f"no failed clear is recorded for {' '.join(dirs)}; nothing to do")
        return 0
    try:
        epoch = repair(dirs)
    except OSError as e:
        print(f"cannot finish the clear: {e}; the SSD tier stays refused", file=sys.stderr)
        return 1
    print(f"clear finished: epoch {epoch} written to {' '.join(dirs)}; the records are removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
