"""The disk benchmarks wait for an idle disk after deleting files (``wait_disk_idle``): a
filesystem mounted with ``-o discard`` trims deleted blocks in the background, and those trims
landed inside the next timed run. Runs on the real ``/proc/diskstats`` and the disk under the
test's directory."""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hicache_mooncake.tools.bench._disk import DiskActivity, block_device_of, disk_activity, wait_disk_idle

# /proc/diskstats rows: a kernel >= 5.5 (20 fields) and one before 4.18 (14 fields, no discards)
NEW_ROW = "253 0 vda 10 0 80 5 20 0 160 9 2 30 40 3 0 96 7 1 4\n"
OLD_ROW = "8 16 sdb 1 0 8 1 4 0 32 2 0 3 3\n"


def test_disk_activity_reads_written_in_flight_and_discarded_sectors(tmp_path: Path) -> None:
    stats = tmp_path / "diskstats"
    stats.write_text(NEW_ROW + OLD_ROW)
    assert disk_activity("vda", str(stats)) == DiskActivity(
        sectors_written=160, in_flight=2, sectors_discarded=96
    )
    assert disk_activity("sdb", str(stats)) == DiskActivity(
        sectors_written=32, in_flight=0, sectors_discarded=0
    )
    assert disk_activity("nvme0n1", str(stats)) is None
    assert disk_activity("vda", str(tmp_path / "missing")) is None


def _direct_writer(path: Path, until: Callable[[], bool]) -> None:
    """Keep the disk writing: 1 MiB O_DIRECT writes (each one device I/O, no page cache) over a
    16 MiB file until ``until()``."""
    buf = mmap.mmap(-1, 1 << 20)
    buf.write(os.urandom(1 << 20))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    try:
        i = 0
        while not until():
            os.pwritev(fd, [buf], (i % 16) << 20)
            i += 1
    finally:
        os.close(fd)


def test_waits_while_the_disk_writes_and_returns_once_it_is_quiet(tmp_path: Path) -> None:
    """While a thread keeps the disk under the directory writing, the wait does not end; it ends
    within a quiet window of the writer stopping."""
    device = block_device_of(str(tmp_path))
    assert device is not None, f"{tmp_path} is not on a block device listed in /proc/diskstats"
    before = disk_activity(device)
    assert before is not None
    stop_at = time.monotonic() + 1.5
    t = threading.Thread(
        target=_direct_writer, args=(tmp_path / "busy.dat", lambda: time.monotonic() >= stop_at)
    )
    t.start()
    try:
        out = wait_disk_idle(str(tmp_path), quiet_s=0.4, max_s=20.0)
    finally:
        t.join()
    done = time.monotonic()
    assert out["device"] == device and out["quiet"] is True
    assert done >= stop_at + 0.4  # not before the writer stopped and a quiet window passed
    after = disk_activity(device)
    assert after is not None and after.sectors_written >= before.sectors_written + (16 << 20) // 512


def test_gives_up_at_its_bound_on_a_disk_that_never_goes_quiet(tmp_path: Path) -> None:
    device = block_device_of(str(tmp_path))
    assert device is not None
    stop = threading.Event()
    t = threading.Thread(target=_direct_writer, args=(tmp_path / "busy.dat", stop.is_set))
    t.start()
    try:
        t0 = time.monotonic()
        out = wait_disk_idle(str(tmp_path), quiet_s=0.5, max_s=1.5)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    waited = out["waited_s"]
    assert isinstance(waited, float)
    assert out["quiet"] is False and 1.5 <= waited < 2.5 and took >= waited  # (took: + the sync)
